"""ShareAcknowledge (key 79), v1-2: acknowledgements of records a member of a share group
acquired (KIP-932): 0 GAP, 1 ACCEPT, 2 RELEASE, 3 REJECT, per range of offsets, without
fetching. READ on the group and on each topic; the share session must exist and the epoch
be its next (SHARE_SESSION_NOT_FOUND, INVALID_SHARE_SESSION_EPOCH; epoch 0 is refused);
epoch -1 closes the session after the acknowledgements, releasing what the member still
holds. Each partition answers its outcome: INVALID_RECORD_STATE for records not
acquired by this member (nothing of that partition's acknowledgement is applied),
INVALID_REQUEST for overlapping or malformed batches, UNKNOWN_TOPIC_ID for an unknown
topic. v2 (KIP-1222) adds RENEW (4), which extends the lock of held records; the request
must then say so (IsRenewAck), else INVALID_REQUEST; its answer carries the lock duration.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ShareAcknowledgeResponse as R

from broker.security import authorizer as A
from broker.handlers.share_fetch import resolve_partitions
from broker.share.partitions import ShareError


def _top_error(code, message=None):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[], node_endpoints=[])


def handle(ctx, header, request, session=None):
    mgr = getattr(ctx, "share_partitions", None)
    group, member = request.group_id, request.member_id
    if not group or not member:
        return _top_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required in ShareAcknowledge.")
    renew = header.api_version >= 2 and bool(request.is_renew_ack)
    if header.api_version >= 2 and not renew and any(
            4 in b.acknowledge_types for t in request.topics for p in t.partitions for b in p.acknowledgement_batches):
        return _top_error(ErrorCode.INVALID_REQUEST, "Renew acknowledgements need IsRenewAck.")
    if not ctx.authorize(session, A.READ, A.GROUP, group, "ShareAcknowledge"):
        return _top_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if mgr is None:
        return _top_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    names, outcome, ok = resolve_partitions(ctx, session, request.topics, "ShareAcknowledge")
    items = [(tid, p.partition_index, p.acknowledgement_batches) for tid, p in ok]
    outcome.update({(tid, p.partition_index): (0, None) for tid, p in ok})
    try:
        outcome.update(mgr.share_acknowledge(group, member, request.share_session_epoch, items, renew_ok=renew))
    except ShareError as exc:
        return _top_error(exc.code, str(exc) or None)
    topics: dict = {}
    for (tid, p), (code, message) in outcome.items():
        topics.setdefault(tid, []).append(R.PartitionData(
            partition_index=p, error_code=code, error_message=message,
            current_leader=R.LeaderIdAndEpoch(leader_id=ctx.node_id if tid in names else -1, leader_epoch=0)))
    return R(throttle_time_ms=0, error_code=0, error_message=None,
             acquisition_lock_timeout_ms=int(mgr.group_config(group)["share.record.lock.duration.ms"]),
             responses=[R.ShareAcknowledgeTopicResponse(topic_id=tid, partitions=parts) for tid, parts in topics.items()],
             node_endpoints=[])
