"""OffsetForLeaderEpoch (key 23), v0-4, as Kafka's KafkaApis / Partition answer it: for
each partition the end offset of the asked leader epoch (KIP-101; consumers use it to
detect truncation after a leader change, KIP-320), from the partition's
leader-epoch-checkpoint (storage.leader_epoch_cache).

* The current epoch (0 here: this broker always leads) ends at the log end offset; an
  epoch before the first known one ends where the first known begins; an unknown epoch
  (-1) answers leader epoch -1 and end offset -1 with no error.
* v2+ current leader epoch checked: older FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH.
* CLUSTER_ACTION on the cluster (brokers) or DESCRIBE on the topic (consumers), else
  TOPIC_AUTHORIZATION_FAILED; an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import OffsetForLeaderEpochResponse as R

from broker.errors import leader_epoch_error
from broker.security import authorizer as A


def _partition(lm, topic, p):
    try:
        log = lm.get_log(topic, p.partition)
    except Exception:
        return R.EpochEndOffset(partition=p.partition, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                leader_epoch=-1, end_offset=-1)
    code = leader_epoch_error(getattr(p, "current_leader_epoch", -1), log.leader_epoch)
    if code:
        return R.EpochEndOffset(partition=p.partition, error_code=code, leader_epoch=-1, end_offset=-1)
    found = log.end_offset_for_epoch(p.leader_epoch)
    epoch, end = found if found is not None else (-1, -1)
    return R.EpochEndOffset(partition=p.partition, error_code=0, leader_epoch=epoch, end_offset=end)


def handle(ctx, header, request, session=None):
    lm = ctx.log_manager
    # brokers hold CLUSTER_ACTION; consumers are checked per topic (a missing
    # CLUSTER_ACTION is not a denial worth counting, as Kafka's logIfDenied=false)
    cluster = ctx.authorizer is None or session is None or ctx.authorizer.allowed(
        session.principal, session.client_ip, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME)
    topics = []
    for t in request.topics:
        if not cluster and not ctx.authorize(session, A.DESCRIBE, A.TOPIC, t.topic, "OffsetForLeaderEpoch"):
            parts = [R.EpochEndOffset(partition=p.partition, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                      leader_epoch=-1, end_offset=-1) for p in t.partitions]
        else:
            parts = [_partition(lm, t.topic, p) for p in t.partitions]
        topics.append(R.OffsetForLeaderTopicResult(topic=t.topic, partitions=parts))
    return R(throttle_time_ms=0, topics=topics)
