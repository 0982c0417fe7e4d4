"""DescribeTopicPartitions (key 75), v0, as Kafka's DescribeTopicPartitionsRequestHandler
and KRaftMetadataCache answer it: the admin client's describeTopics path on Kafka 3.8+.

* No topics named: every topic the principal may DESCRIBE, by name, from the cursor on;
  named topics: those (sorted), an unknown one UNKNOWN_TOPIC_OR_PARTITION, an illegal name
  INVALID_TOPIC_EXCEPTION, one not authorized TOPIC_AUTHORIZATION_FAILED (its id zero).
* Paging: at most ``min(response_partition_limit, max.request.partition.size.limit)``
  partitions (at least 1); when the limit cuts a topic, ``next_cursor`` names the topic
  and partition to continue from; when it falls between topics, the next topic and 0.
* The cursor's topic must be among named topics and its partition not negative, else the
  whole request is INVALID_REQUEST (every named topic answered so, as Kafka's
  getErrorResponse).
* Each partition: this broker leads it (leader epoch 0), is its one replica and in its
  ISR; eligible leader replicas and last known ELR empty; topic authorized operations.
"""

from __future__ import annotations


from protocol.errors import ErrorCode
from protocol.messages import DescribeTopicPartitionsResponse as R
from protocol.schema import ZERO_UUID

from broker.security import authorizer as A
from storage.log_manager import INTERNAL_TOPICS, LEADER_EPOCH



class _InvalidRequest(Exception):
    pass


def _topic(code, name, topic_id=ZERO_UUID, internal=False, partitions=()):
    return R.DescribeTopicPartitionsResponseTopic(error_code=int(code), name=name, topic_id=topic_id,
                                                  is_internal=internal, partitions=list(partitions),
                                                  topic_authorized_operations=-(2**31))


def _describe(ctx, request, session):
    from storage.errors import InvalidTopicError
    from storage.log_manager import validate_topic_name

    lm = ctx.log_manager
    fetch_all = not request.topics
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    if fetch_all:
        names = {n for n in lm.topics() if n >= cursor_topic}
    else:
        names = {t.name for t in request.topics if t.name >= cursor_topic}
        if cursor is not None and cursor.topic_name not in names:
            raise _InvalidRequest("DescribeTopicPartitionsRequest topic list should contain the cursor topic: "
                                  + cursor.topic_name)
    if cursor is not None and cursor.partition_index < 0:
        raise _InvalidRequest(f"DescribeTopicPartitionsRequest cursor partition must be valid: {cursor}")
    unauthorized = []
    authorized = []
    for name in sorted(names):
        if ctx.authorize(session, A.DESCRIBE, A.TOPIC, name, "DescribeTopicPartitions"):
            authorized.append(name)
        elif not fetch_all:
            unauthorized.append(_topic(ErrorCode.TOPIC_AUTHORIZATION_FAILED, name))
    limit = max(min(ctx.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    remaining = limit
    node = ctx.node_id
    topics, next_cursor = [], None
    for name in authorized:
        if remaining <= 0:
            next_cursor = R.Cursor(topic_name=name, partition_index=0)
            break
        info = lm.get_topic(name)
        if info is None:
            if not fetch_all:
                try:
                    validate_topic_name(name)
                    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                except InvalidTopicError:
                    code = ErrorCode.INVALID_TOPIC_EXCEPTION
                topics.append(_topic(code, name, internal=name in INTERNAL_TOPICS))
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        upper = min(info.num_partitions, start + remaining)
        parts = [R.DescribeTopicPartitionsResponsePartition(
            error_code=0, partition_index=p, leader_id=node, leader_epoch=LEADER_EPOCH, replica_nodes=[node],
            isr_nodes=[node], eligible_leader_replicas=[], last_known_elr=[], offline_replicas=[])
            for p in range(start, upper)]
        entry = _topic(0, name, info.topic_id, name in INTERNAL_TOPICS, parts)
        entry.topic_authorized_operations = ctx.authorized_ops(session, A.TOPIC, name)
        topics.append(entry)
        if upper < info.num_partitions:
            next_cursor = R.Cursor(topic_name=name, partition_index=upper)
            break
        remaining -= len(parts)
    return R(throttle_time_ms=0, topics=topics + unauthorized, next_cursor=next_cursor)


def handle(ctx, header, request, session=None):
    try:
        return _describe(ctx, request, session)
    except _InvalidRequest:
        return R(throttle_time_ms=0, next_cursor=None, topics=[
            _topic(ErrorCode.INVALID_REQUEST, t.name) for t in request.topics])
