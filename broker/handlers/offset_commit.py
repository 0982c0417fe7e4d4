"""OffsetCommit (key 8), v0-8: committed offsets of a group, kept in memory and written
to ``__consumer_offsets`` (broker/coordinator/store.py) before the answer.

Commits from group members are checked against the member id, group.instance.id and
generation (UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, ILLEGAL_GENERATION,
REBALANCE_IN_PROGRESS while the group completes a rebalance); "simple" commits
(generation -1, no member id) are accepted while the group has no members, as Kafka's
ClassicGroup.validateOffsetCommit does. A partition of a topic that does not exist
answers UNKNOWN_TOPIC_OR_PARTITION; metadata over 4096 bytes OFFSET_METADATA_TOO_LARGE.
"""

from protocol.errors import ErrorCode
from protocol.messages import OffsetCommitResponse

from broker.security import authorizer as A

Topic = OffsetCommitResponse.OffsetCommitResponseTopic
Partition = OffsetCommitResponse.OffsetCommitResponsePartition


def handle(ctx, header, request, session=None):
    version = header.api_version
    coord = getattr(ctx, "group_coordinator", None)
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "OffsetCommit"):
        return OffsetCommitResponse(throttle_time_ms=0, topics=[
            Topic(name=t.name, partitions=[Partition(partition_index=p.partition_index,
                                                     error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED)) for p in t.partitions])
            for t in request.topics])
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, (t.name for t in request.topics), "OffsetCommit")
    offsets = []
    for t in request.topics:
        if t.name in denied:
            continue
        for p in t.partitions:
            offsets.append((t.name, p.partition_index, p.committed_offset,
                            p.committed_leader_epoch if version >= 6 else -1,
                            p.committed_metadata,
                            p.commit_timestamp if version == 1 else -1))
    if coord is None:
        results = {(t, p): int(ErrorCode.COORDINATOR_NOT_AVAILABLE) for t, p, *_ in offsets}
    else:
        results = coord.commit_offsets(
            group_id=request.group_id,
            generation_id=request.generation_id_or_member_epoch if version >= 1 else -1,
            member_id=(request.member_id or "") if version >= 1 else "",
            group_instance_id=request.group_instance_id if version >= 7 else None,
            version=version,
            offsets=offsets,
        )
    return OffsetCommitResponse(
        throttle_time_ms=0,
        topics=[Topic(name=t.name, partitions=[Partition(partition_index=p.partition_index,
                                                         error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                                                         if t.name in denied else
                                                         results.get((t.name, p.partition_index), 0))
                                               for p in t.partitions])
                for t in request.topics],
    )
