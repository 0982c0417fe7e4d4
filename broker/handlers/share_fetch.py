"""ShareFetch (key 78), v1-2: records of a share group's partitions, each acquired by the
asking member under a lock (KIP-932, broker.share.partitions), with acknowledgements of
earlier deliveries piggy-backed per partition.

Order of work, as Kafka's KafkaApis.handleShareFetchRequest: READ on the group
(GROUP_AUTHORIZATION_FAILED for the whole request) and on each topic
(TOPIC_AUTHORIZATION_FAILED for its partitions); topic ids no topic has are
UNKNOWN_TOPIC_ID; then the share session step (SHARE_SESSION_NOT_FOUND,
INVALID_SHARE_SESSION_EPOCH, INVALID_REQUEST for acknowledgements in an opening request:
top-level errors); then the acknowledgements (their outcome in each partition's
AcknowledgeErrorCode: INVALID_RECORD_STATE for records not acquired by this member,
INVALID_REQUEST for overlapping or malformed batches); a final epoch (-1) closes the
session and fetches nothing; then acquisition from every partition of the session, at
most MaxRecords records (whole batches) and MaxBytes bytes. With nothing acquired the
request is parked until data arrives or a lock expires, up to MaxWaitMs.

An opening request (epoch 0) is answered for every partition it names; later ones only
for partitions with records, errors or acknowledgement outcomes.

v2 (KIP-1206, KIP-1222): ShareAcquireMode 0 (batch-optimized, whole batches as v1), 1
(record-limit: never more than MaxRecords, a batch is cut) or 255 (renew: the request
only acknowledges, RENEW (4) extending the locks of held records, and acquires nothing);
other modes are INVALID_REQUEST.
"""

from __future__ import annotations

import asyncio

from protocol.errors import ErrorCode
from protocol.messages import ShareFetchResponse as R

from broker.security import authorizer as A
from broker.share.partitions import FINAL_EPOCH, INITIAL_EPOCH, PartitionResult, ShareError


def resolve_partitions(ctx, session, topics, api: str):
    """The partitions of a ShareFetch or ShareAcknowledge: ({topic id: name},
    {(tid, p): (error, message)} for unknown ids (UNKNOWN_TOPIC_ID) and topics without
    READ (TOPIC_AUTHORIZATION_FAILED), [(tid, partition struct)] for the rest)."""
    names = ctx.log_manager.topic_names_view()
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, [names[t.topic_id] for t in topics if t.topic_id in names],
                              api)
    refused, ok = {}, []
    for t in topics:
        name = names.get(t.topic_id)
        for p in t.partitions:
            tp = (t.topic_id, p.partition_index)
            if name is None:
                refused[tp] = (int(ErrorCode.UNKNOWN_TOPIC_ID), "This server does not host this topic ID.")
            elif name in denied:
                refused[tp] = (int(ErrorCode.TOPIC_AUTHORIZATION_FAILED), None)
            else:
                ok.append((t.topic_id, p))
    return names, refused, ok


def _top_error(code, message=None):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, acquisition_lock_timeout_ms=0,
             responses=[], node_endpoints=[])


BATCH_OPTIMIZED, RECORD_LIMIT, RENEW_ONLY = 0, 1, 255


def handle(ctx, header, request, session=None):
    mgr = getattr(ctx, "share_partitions", None)
    group, member, epoch = request.group_id, request.member_id, request.share_session_epoch
    if not group or not member:
        return _top_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId are required in ShareFetch.")
    mode = (request.share_acquire_mode & 0xFF) if header.api_version >= 2 else BATCH_OPTIMIZED
    if mode not in (BATCH_OPTIMIZED, RECORD_LIMIT, RENEW_ONLY):
        return _top_error(ErrorCode.INVALID_REQUEST, f"Unknown ShareAcquireMode {request.share_acquire_mode}.")
    if not ctx.authorize(session, A.READ, A.GROUP, group, "ShareFetch"):
        return _top_error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if mgr is None:
        return _top_error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    names, refused, wanted = resolve_partitions(ctx, session, request.topics, "ShareFetch")
    failed = {tp: PartitionResult(*tp, error=code, message=message) for tp, (code, message) in refused.items()}
    acks = [(tid, p.partition_index, p.acknowledgement_batches) for tid, p in wanted if p.acknowledgement_batches]
    wanted = [(tid, p.partition_index) for tid, p in wanted]
    forgotten = [(f.topic_id, p) for f in request.forgotten_topics_data for p in f.partitions]
    try:
        _session, tps = mgr.open_fetch(group, member, epoch, wanted, forgotten, bool(acks), owner=session)
    except ShareError as exc:
        return _top_error(exc.code, str(exc) or None)
    # written with the acquisition below: one snapshot per partition per request
    ack_results = mgr.acknowledge_all(group, member, acks, renew_ok=header.api_version >= 2, persist=False)
    lock_ms = int(mgr.group_config(group)["share.record.lock.duration.ms"])
    if epoch == FINAL_EPOCH or mode == RENEW_ONLY:
        mgr.flush()
        if epoch == FINAL_EPOCH:
            mgr.close_session(group, member)
        return _response(ctx, names, [], failed, ack_results, lock_ms, full=False, wanted=wanted)
    tps = [tp for tp in tps if tp not in failed and names.get(tp[0]) is not None]
    max_records = request.max_records if request.max_records > 0 else 500
    max_bytes = max(0, request.max_bytes)  # 0: nothing fits, nothing is acquired (as Kafka)
    strict = mode == RECORD_LIMIT
    results = mgr.acquire(group, member, tps, max_records, max_bytes, strict)
    full = epoch == INITIAL_EPOCH
    if any(r.acquired or r.error for r in results) or request.max_wait_ms <= 0 or not tps:
        return _response(ctx, names, results, failed, ack_results, lock_ms, full, wanted)
    keys = [(names[tid], p) for tid, p in tps]
    return _long_poll(ctx, names, mgr, request, group, member, tps, keys, failed, ack_results, lock_ms, full,
                      wanted, max_records, max_bytes, strict)


async def _long_poll(ctx, names, mgr, request, group, member, tps, keys, failed, ack_results, lock_ms, full,
                     wanted, max_records, max_bytes, strict):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + request.max_wait_ms / 1000.0
    results = []
    while True:
        remaining = deadline - loop.time()
        if remaining <= 0 or getattr(ctx, "shutting_down", False):
            break
        await ctx.appended(keys, remaining)
        if (group, member) not in mgr.sessions:  # closed meanwhile (the member left)
            break
        results = mgr.acquire(group, member, tps, max_records, max_bytes, strict)
        if any(r.acquired or r.error for r in results):
            break
    return _response(ctx, names, results, failed, ack_results, lock_ms, full, wanted)


def _response(ctx, names, results, failed, ack_results, lock_ms, full, wanted):
    by_tp = {(r.topic_id, r.partition): r for r in results}
    by_tp.update(failed)
    order = list(dict.fromkeys(list(wanted) + list(by_tp) + list(ack_results)))
    topics: dict = {}
    for tp in order:
        r = by_tp.get(tp) or PartitionResult(*tp)
        ack = ack_results.get(tp)
        if not (full and tp in wanted) and not (r.acquired or r.error or ack is not None):
            continue
        topics.setdefault(tp[0], []).append(_partition(ctx, names, r, ack))
    return R(throttle_time_ms=0, error_code=0, error_message=None, acquisition_lock_timeout_ms=lock_ms,
             responses=[R.ShareFetchableTopicResponse(topic_id=tid, partitions=parts) for tid, parts in topics.items()],
             node_endpoints=[])


def _leader_epoch(ctx, name, partition) -> int:
    if name is None:
        return -1
    try:
        epoch = ctx.log_manager.get_log(name, partition).leader_epoch
    except Exception:
        return -1
    return -1 if epoch is None else epoch


def _partition(ctx, names, r, ack):
    leader = ctx.node_id if r.error != ErrorCode.UNKNOWN_TOPIC_ID else -1
    return R.PartitionData(
        partition_index=r.partition, error_code=r.error, error_message=r.message,
        acknowledge_error_code=ack[0] if ack else 0, acknowledge_error_message=ack[1] if ack else None,
        current_leader=R.LeaderIdAndEpoch(leader_id=leader,
                                          leader_epoch=_leader_epoch(ctx, names.get(r.topic_id), r.partition)),
        records=r.records,
        acquired_records=[R.AcquiredRecords(first_offset=a, last_offset=b, delivery_count=c) for a, b, c in r.acquired])
