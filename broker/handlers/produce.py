"""Produce (key 0), v0-9.

Each partition is validated and appended on its own: a failing partition does not
affect the others in the request. acks=0 gets no response; acks=1 and acks=-1 are the
same on a single node (the append is in the page cache before the answer, fsync by the
flush policy, as Kafka does).

Idempotent producers: a retried batch (a duplicate of one of the producer's last 5
batches in the partition) is not appended again and is answered with error NONE and the
offsets it got the first time (Kafka's UnifiedLog.append / ReplicaManager: the
DUPLICATE_SEQUENCE_NUMBER case never reaches the client).  Sequence gaps answer
OUT_OF_ORDER_SEQUENCE_NUMBER, old epochs INVALID_PRODUCER_EPOCH (storage exceptions
mapped by broker.errors).  Transactional batches: without a transactional id the whole
request answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED (KafkaApis.handleProduceRequest);
with one, each partition answers INVALID_TXN_STATE (no transaction coordinator here, so
no transaction can be ongoing).
"""

from __future__ import annotations

import logging

from protocol import records as rec
from protocol.errors import ErrorCode
from protocol.messages import ProduceResponse

from broker.errors import error_code_for
from storage import errors as se

log = logging.getLogger("chronolog.produce")

PartitionResponse = ProduceResponse.PartitionProduceResponse
TopicResponse = ProduceResponse.TopicProduceResponse


def _error(index, code, message=None, record_errors=()):
    return PartitionResponse(
        index=index,
        error_code=int(code),
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[
            PartitionResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
            for i, m in record_errors
        ],
        error_message=message,
    )


def handle(ctx, header, request):
    version = header.api_version
    acks = request.acks
    lm = ctx.log_manager
    responses = []
    if acks not in (-1, 0, 1):
        for t in request.topic_data:
            responses.append(
                TopicResponse(
                    name=t.name,
                    partition_responses=[
                        _error(p.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
                        for p in t.partition_data
                    ],
                )
            )
        return ProduceResponse(responses=responses, throttle_time_ms=0)

    if getattr(request, "transactional_id", None) is None and _has_transactional_records(request):
        # KafkaApis.handleProduceRequest: every partition gets the error
        for t in request.topic_data:
            responses.append(
                TopicResponse(
                    name=t.name,
                    partition_responses=[
                        _error(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                               "transactional records need a transactional id")
                        for p in t.partition_data
                    ],
                )
            )
        return None if acks == 0 else ProduceResponse(responses=responses, throttle_time_ms=0)

    metrics = ctx.metrics
    for t in request.topic_data:
        name = t.name
        parts = []
        for p in t.partition_data:
            parts.append(_append_one(ctx, lm, version, name, p.index, p.records))
        responses.append(TopicResponse(name=name, partition_responses=parts))
        if metrics is not None:
            metrics.produce_topic(name, any(r.error_code for r in parts))
    if acks == 0:
        return None
    return ProduceResponse(responses=responses, throttle_time_ms=0)


def _append_one(ctx, lm, version, topic, partition, records):
    if records is None or len(records) == 0:
        return _error(partition, ErrorCode.INVALID_RECORD, "the partition's record set is empty")
    try:
        rec.check_produce_records(version, records)
    except rec.RecordFormatError as exc:
        code = ErrorCode.UNSUPPORTED_COMPRESSION_TYPE if isinstance(exc, rec.UnsupportedCompressionTypeError) else ErrorCode.INVALID_RECORD
        log.info("rejected produce v%d to %s-%d: %s", version, topic, partition, exc)
        return _error(partition, code, str(exc))
    try:
        plog = lm.get_log(topic, partition)
        info = plog.append(records, in_place=True)
    except se.InvalidTimestampError as exc:
        log.info("rejected produce to %s-%d: %s", topic, partition, exc)
        return _error(partition, ErrorCode.INVALID_TIMESTAMP, str(exc), getattr(exc, "record_errors", ()) or ())
    except se.StorageError as exc:
        code = error_code_for(exc)
        log.info("rejected produce to %s-%d: %s (%s)", topic, partition, exc, ErrorCode(code).name)
        return _error(partition, code, str(exc))
    except Exception as exc:  # never crash the connection on one partition's failure
        code = error_code_for(exc)
        return _error(partition, code, f"{type(exc).__name__}: {exc}")
    if info.duplicate:
        log.debug("duplicate produce to %s-%d answered with the original base offset %d",
                  topic, partition, info.base_offset)
    else:
        if ctx.metrics is not None:  # bytes/messages in, append delay per batch (broker.metrics)
            ctx.metrics.appended(topic, records, info, not plog.config.is_log_append_time, ctx.clock.time_ms())
        ctx.notify_append(topic, partition)
    return PartitionResponse(
        index=partition,
        error_code=0,
        base_offset=info.base_offset,
        log_append_time_ms=info.log_append_time,
        log_start_offset=info.log_start_offset,
        record_errors=[],
        error_message=None,
    )


def _has_transactional_records(request) -> bool:
    """Kafka's RequestUtils.hasTransactionalRecords: the first batch of any partition is
    a v2 batch with the transactional attribute."""
    for t in request.topic_data:
        for p in t.partition_data:
            r = p.records
            if r is not None and len(r) >= rec.HEADER_SIZE and rec.magic_of(r, 0) == 2:
                (attrs,) = rec._H.unpack_from(r, rec.ATTRIBUTES_OFFSET)
                if attrs & rec.TRANSACTIONAL_MASK:
                    return True
    return False
