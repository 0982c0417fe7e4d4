"""DescribeShareGroupOffsets (key 90), v0: each share-partition's start offset (SPSO) of
the share groups named (Admin.listShareGroupOffsets, ``chronolog share-groups
--describe``): every partition with share state, or the topics named (a partition
without state answers start offset -1). DESCRIBE on the group (else
GROUP_AUTHORIZATION_FAILED for it) and on each topic (TOPIC_AUTHORIZATION_FAILED for its
partitions); a group that is not a share group is GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import DescribeShareGroupOffsetsResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    groups = getattr(ctx, "share_groups", None)
    mgr = getattr(ctx, "share_partitions", None)
    lm = ctx.log_manager
    infos = lm.topics()
    ids = lm.topic_names_view()
    out = []
    for g in request.groups:
        def group_error(code, message=None):
            return R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=[], error_code=int(code),
                                                            error_message=message)

        if not ctx.authorize(session, A.DESCRIBE, A.GROUP, g.group_id, "DescribeShareGroupOffsets"):
            out.append(group_error(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if groups is None or mgr is None:
            out.append(group_error(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        if groups.group(g.group_id) is None:
            out.append(group_error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {g.group_id} is not a share group."))
            continue
        state = mgr.group_partitions(g.group_id)
        if g.topics is None:
            wanted: dict = {}
            for (tid, p) in sorted(state, key=lambda e: (ids.get(e[0], ""), e[1])):
                if tid in ids:
                    wanted.setdefault(ids[tid], []).append(p)
        else:
            wanted = {t.topic_name: list(t.partitions) for t in g.topics}
        denied = ctx.unauthorized(session, A.DESCRIBE, A.TOPIC, list(wanted), "DescribeShareGroupOffsets")
        topics = []
        for name, parts in wanted.items():
            info = infos.get(name)
            tid = info.topic_id if info is not None else None
            rows = []
            for p in parts:
                code, start, epoch = 0, -1, -1
                if name in denied:
                    code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
                elif info is None or not 0 <= p < info.num_partitions:
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    sp = state.get((tid, p))
                    if sp is not None:
                        start = sp.start
                        try:
                            epoch = lm.get_log(name, p).leader_epoch or 0
                        except Exception:
                            epoch = 0
                rows.append(R.DescribeShareGroupOffsetsResponsePartition(
                    partition_index=p, start_offset=start, leader_epoch=epoch, error_code=int(code),
                    error_message=None))
            topics.append(R.DescribeShareGroupOffsetsResponseTopic(topic_name=name, topic_id=tid or uuid.UUID(int=0),
                                                                   partitions=rows))
        out.append(R.DescribeShareGroupOffsetsResponseGroup(group_id=g.group_id, topics=topics, error_code=0,
                                                            error_message=None))
    return R(throttle_time_ms=0, groups=out)
