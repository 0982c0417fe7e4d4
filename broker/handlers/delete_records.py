"""DeleteRecords (key 21), v0-2: move partitions' log start offsets up (KIP-107).

Follows Kafka's KafkaApis.handleDeleteRecordsRequest, ReplicaManager.deleteRecordsOnLocalLog
and Partition.deleteRecordsOnLeader, per partition:

* a topic or partition this broker does not have: UNKNOWN_TOPIC_OR_PARTITION;
* an internal topic (``__consumer_offsets``, ``__transaction_state``,
  ``__share_group_state``): INVALID_TOPIC_EXCEPTION;
* a topic whose ``cleanup.policy`` lacks ``delete`` (compact only): POLICY_VIOLATION;
* offset -1 means the high watermark; any other negative offset, or one beyond the high
  watermark: OFFSET_OUT_OF_RANGE (nothing changes);
* otherwise the log start offset becomes max(current, offset), and ``low_watermark`` is
  the log start offset after the call (an offset below it is a no-op answering it).

Errors carry low_watermark -1. Kafka collects the partitions into a map keyed by
topic-partition, so the same partition named twice is acted on once, with the offset of
its last occurrence, and answered once; a topic named twice gets one topic entry.
``timeout_ms`` is accepted and ignored: with one replica the low watermark is reached
at once, so the answer is immediate. Segments wholly below the new start are removed by
the retention pass; reads below it already answer OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import DeleteRecordsResponse

from broker.errors import error_code_for
from broker.security import authorizer as A
from storage.log_manager import INTERNAL_TOPICS

log = logging.getLogger("chronolog.delete_records")

HIGH_WATERMARK = -1
INVALID_LOW_WATERMARK = -1

PartitionResult = DeleteRecordsResponse.DeleteRecordsPartitionResult
TopicResult = DeleteRecordsResponse.DeleteRecordsTopicResult


def handle(ctx, header, request, session=None):
    # topic -> {partition: offset}; dicts keep first-seen order, a repeat overwrites
    wanted: dict[str, dict[int, int]] = {}
    for t in request.topics:
        parts = wanted.setdefault(t.name, {})
        for p in t.partitions:
            parts[p.partition_index] = p.offset
    topics_out = []
    for name, parts in wanted.items():
        results = []
        allowed = ctx.authorize(session, A.DELETE, A.TOPIC, name, "DeleteRecords")
        for index, offset in parts.items():
            if not allowed:
                results.append(PartitionResult(partition_index=index, low_watermark=-1,
                                               error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)))
                continue
            code, low = _delete(ctx, name, index, offset)
            if code:
                log.debug("DeleteRecords %s-%d to %d (correlation id %d, client %s): error %d",
                          name, index, offset, header.correlation_id, header.client_id, code)
            results.append(PartitionResult(partition_index=index, low_watermark=low, error_code=int(code)))
        topics_out.append(TopicResult(name=name, partitions=results))
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics_out)


def _delete(ctx, topic: str, partition: int, offset: int) -> tuple[int, int]:
    """(error code, low watermark) for one partition."""
    try:
        plog = ctx.log_manager.get_log(topic, partition)
    except Exception as exc:
        return error_code_for(exc), INVALID_LOW_WATERMARK
    if topic in INTERNAL_TOPICS:
        return ErrorCode.INVALID_TOPIC_EXCEPTION, INVALID_LOW_WATERMARK
    policy = [p.lower() for p in (getattr(plog.config, "cleanup_policy", None) or ["delete"])]
    if "delete" not in policy:
        return ErrorCode.POLICY_VIOLATION, INVALID_LOW_WATERMARK
    target = plog.high_watermark if offset == HIGH_WATERMARK else offset
    if target < 0:
        return ErrorCode.OFFSET_OUT_OF_RANGE, INVALID_LOW_WATERMARK
    try:
        plog.maybe_increment_log_start_offset(target)  # logs when it moves
    except Exception as exc:
        return error_code_for(exc), INVALID_LOW_WATERMARK
    return 0, plog.log_start_offset
