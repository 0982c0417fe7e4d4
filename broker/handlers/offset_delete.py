"""OffsetDelete (key 47), v0: remove committed offsets of a group (KIP-496).

GROUP_ID_NOT_FOUND for an unknown group; a partition of a topic the group's members
still subscribe to answers GROUP_SUBSCRIBED_TO_TOPIC; a group with members that does not
use the consumer protocol answers NON_EMPTY_GROUP.
"""

from protocol.errors import ErrorCode
from protocol.messages import OffsetDeleteResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    if not ctx.authorize(session, A.DELETE, A.GROUP, request.group_id, "OffsetDelete"):
        return R(error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), throttle_time_ms=0, topics=[])
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, (t.name for t in request.topics), "OffsetDelete")
    wanted = [(t.name, p.partition_index) for t in request.topics for p in t.partitions if t.name not in denied]
    if coord is None:
        return R(error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), throttle_time_ms=0, topics=[])
    err, results = coord.delete_offsets(request.group_id, wanted)
    if err:
        return R(error_code=err, throttle_time_ms=0, topics=[])
    return R(error_code=0, throttle_time_ms=0, topics=[
        R.OffsetDeleteResponseTopic(name=t.name, partitions=[
            R.OffsetDeleteResponsePartition(partition_index=p.partition_index,
                                            error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                            if t.name in denied else results.get((t.name, p.partition_index), 0))
            for p in t.partitions]) for t in request.topics])
