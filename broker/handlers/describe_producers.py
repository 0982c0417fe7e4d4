"""DescribeProducers (key 61), v0: the active producers of partitions, from their
producer state (KafkaApis.handleDescribeProducersRequest, UnifiedLog.activeProducers):
id, epoch, last sequence, last timestamp, coordinator epoch and the first offset of the
ongoing transaction (-1: none). READ on the topic (else TOPIC_AUTHORIZATION_FAILED);
an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION."""

from protocol.errors import ErrorCode as E
from protocol.messages import DescribeProducersResponse as R

from broker.security import authorizer as A


def _partition(lm, topic, p, topic_error):
    if topic_error:
        return R.PartitionResponse(partition_index=p, error_code=int(topic_error), error_message=None,
                                   active_producers=[])
    info = lm.get_topic(topic)
    if not 0 <= p < info.num_partitions:
        return R.PartitionResponse(partition_index=p, error_code=int(E.UNKNOWN_TOPIC_OR_PARTITION),
                                   error_message=None, active_producers=[])
    psm = lm.get_log(topic, p).producer_state
    producers = [R.ProducerState(producer_id=e.producer_id, producer_epoch=e.producer_epoch,
                                 last_sequence=e.last_seq, last_timestamp=e.last_timestamp,
                                 coordinator_epoch=e.coordinator_epoch,
                                 current_txn_start_offset=e.current_txn_first_offset)
                 for _pid, e in sorted(psm.producers.items())]
    return R.PartitionResponse(partition_index=p, error_code=0, error_message=None, active_producers=producers)


def handle(ctx, header, request, session=None):
    lm = ctx.log_manager
    topics = []
    for t in request.topics:
        if not ctx.authorize(session, A.READ, A.TOPIC, t.name, "DescribeProducers"):
            err = E.TOPIC_AUTHORIZATION_FAILED
        elif lm.get_topic(t.name) is None:
            err = E.UNKNOWN_TOPIC_OR_PARTITION
        else:
            err = 0
        topics.append(R.TopicResponse(name=t.name, partitions=[_partition(lm, t.name, p, err)
                                                                for p in t.partition_indexes]))
    return R(throttle_time_ms=0, topics=topics)
