"""DeleteShareGroupOffsets (key 92), v0: forget an empty share group's state for the
topics named (Admin.deleteShareGroupOffsets, ``chronolog share-groups --delete-offsets``):
tombstones in ``__share_group_state``; the next assignment starts those partitions again
at ``share.auto.offset.reset``. DELETE on the group and READ on each topic; a group with
members is NON_EMPTY_GROUP, an unknown one GROUP_ID_NOT_FOUND.
"""

from __future__ import annotations

import uuid

from protocol.errors import ErrorCode
from protocol.messages import DeleteShareGroupOffsetsResponse as R

from broker.security import authorizer as A


def _error(code, message=None):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, responses=[])


def handle(ctx, header, request, session=None):
    groups = getattr(ctx, "share_groups", None)
    mgr = getattr(ctx, "share_partitions", None)
    gid = request.group_id
    if not ctx.authorize(session, A.DELETE, A.GROUP, gid, "DeleteShareGroupOffsets"):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if groups is None or mgr is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    g = groups.group(gid)
    if g is None:
        return _error(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a share group.")
    if g.members:
        return _error(ErrorCode.NON_EMPTY_GROUP, "The group is not empty: stop its consumers first.")
    infos = ctx.log_manager.topics()
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, [t.topic_name for t in request.topics],
                              "DeleteShareGroupOffsets")
    out = []
    for t in request.topics:
        info = infos.get(t.topic_name)
        tid = info.topic_id if info is not None else uuid.UUID(int=0)
        if t.topic_name in denied or info is None:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED if t.topic_name in denied else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            rows = [R.DeleteShareGroupOffsetsResponsePartition(partition_index=-1, error_code=int(code),
                                                               error_message=None)]
        else:
            rows = [R.DeleteShareGroupOffsetsResponsePartition(partition_index=p, error_code=0, error_message=None)
                    for _tid, p in sorted(mgr.delete(gid, {tid}), key=lambda e: e[1])] or [
                R.DeleteShareGroupOffsetsResponsePartition(
                    partition_index=-1, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                    error_message=f"The group has no share state for topic {t.topic_name}.")]
        out.append(R.DeleteShareGroupOffsetsResponseTopic(topic_name=t.topic_name, topic_id=tid, partitions=rows))
    return R(throttle_time_ms=0, error_code=0, error_message=None, responses=out)
