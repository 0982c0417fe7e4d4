"""AlterShareGroupOffsets (key 91), v0: new share-partition start offsets for an empty
share group (Admin.alterShareGroupOffsets, ``chronolog share-groups --reset-offsets``):
the records in flight are forgotten and delivery starts again at the new offset. The
group is made if it does not exist yet (its partitions then start where told). READ on
the group and on each topic; a group with members is NON_EMPTY_GROUP and a group of
another kind GROUP_ID_NOT_FOUND, for every partition; an offset outside the partition's
log (below its start or past its end) is INVALID_REQUEST naming the range.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import AlterShareGroupOffsetsResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    groups = getattr(ctx, "share_groups", None)
    mgr = getattr(ctx, "share_partitions", None)
    lm = ctx.log_manager
    infos = lm.topics()
    gid = request.group_id
    group_error = None
    if not ctx.authorize(session, A.READ, A.GROUP, gid, "AlterShareGroupOffsets"):
        group_error = (ErrorCode.GROUP_AUTHORIZATION_FAILED, None)
    elif groups is None or mgr is None:
        group_error = (ErrorCode.COORDINATOR_NOT_AVAILABLE, None)
    elif ctx.group_coordinator is not None and ctx.group_coordinator.group(gid) is not None:
        group_error = (ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    elif groups.group(gid) is not None and groups.group(gid).members:
        group_error = (ErrorCode.NON_EMPTY_GROUP, "The group is not empty: stop its consumers first.")
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, [t.topic_name for t in request.topics],
                              "AlterShareGroupOffsets")
    changes: dict = {}
    topics = []
    for t in request.topics:
        info = infos.get(t.topic_name)
        rows = []
        for p in t.partitions:
            code, message = group_error if group_error else (0, None)
            if not code:
                if t.topic_name in denied:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif info is None or not 0 <= p.partition_index < info.num_partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    plog = lm.get_log(t.topic_name, p.partition_index)
                    lo, hi = plog.log_start_offset, plog.high_watermark
                    if not lo <= p.start_offset <= hi:
                        code, message = ErrorCode.INVALID_REQUEST, (
                            f"Start offset {p.start_offset} of {t.topic_name}-{p.partition_index} is outside its "
                            f"log ({lo} to {hi}).")
                    else:
                        changes[(info.topic_id, p.partition_index)] = p.start_offset
            rows.append(R.AlterShareGroupOffsetsResponsePartition(partition_index=p.partition_index,
                                                                  error_code=int(code), error_message=message))
        topics.append(R.AlterShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name, topic_id=info.topic_id if info is not None else uuid.UUID(int=0),
            partitions=rows))
    if changes:
        groups.ensure_group(gid)
        mgr.reset(gid, changes)
    return R(throttle_time_ms=0, responses=topics)
