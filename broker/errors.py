"""The one place that maps storage and protocol exceptions to Kafka error codes."""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from storage import errors as se

log = logging.getLogger("chronolog.errors")

_CODES: list[tuple[type, ErrorCode]] = [
    (se.UnknownTopicOrPartitionError, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    (se.TopicExistsError, ErrorCode.TOPIC_ALREADY_EXISTS),
    (se.InvalidPartitionsError, ErrorCode.INVALID_PARTITIONS),
    (se.InvalidTopicError, ErrorCode.INVALID_TOPIC_EXCEPTION),
    (se.InvalidRecordError, ErrorCode.INVALID_RECORD),
    (se.CorruptRecordError, ErrorCode.CORRUPT_MESSAGE),
    (se.MessageTooLargeError, ErrorCode.MESSAGE_TOO_LARGE),
    (se.RecordListTooLargeError, ErrorCode.RECORD_LIST_TOO_LARGE),
    (se.InvalidTimestampError, ErrorCode.INVALID_TIMESTAMP),
    (se.OffsetOutOfRangeError, ErrorCode.OFFSET_OUT_OF_RANGE),
    (se.UnsupportedCompressionTypeError, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE),
    (se.InvalidRequestError, ErrorCode.INVALID_REQUEST),
    (se.KafkaStorageError, ErrorCode.KAFKA_STORAGE_ERROR),
    (se.LogDirNotFoundError, ErrorCode.LOG_DIR_NOT_FOUND),
    (se.OutOfOrderSequenceError, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER),
    (se.InvalidProducerEpochError, ErrorCode.INVALID_PRODUCER_EPOCH),
    (se.InvalidTxnStateError, ErrorCode.INVALID_TXN_STATE),
    (se.TransactionCoordinatorFencedError, ErrorCode.TRANSACTION_COORDINATOR_FENCED),
]


def error_code_for(exc: BaseException) -> int:
    """Kafka error code for an exception raised by storage (or config) code.
    Anything unexpected is UNKNOWN_SERVER_ERROR and is logged with its traceback."""
    for cls, code in _CODES:
        if isinstance(exc, cls):
            return int(code)
    try:
        from config import ConfigError

        if isinstance(exc, ConfigError):
            return int(ErrorCode.INVALID_CONFIG)
    except ImportError:  # pragma: no cover
        pass
    log.error("unexpected error", exc_info=exc)
    return int(ErrorCode.UNKNOWN_SERVER_ERROR)


class StartupError(Exception):
    """The broker cannot start: the message is the one line the operator gets (a port
    in use, a log dir that cannot be used or is another broker's, node ids that differ)."""


class ShutdownError(Exception):
    """The broker stopped, but not cleanly: closing the logs failed (each failure is logged
    on its own line). The message is the one line the operator gets; the log dirs
    concerned have no clean-shutdown marker and are recovered at the next start."""


NO_LEADER_EPOCH = -1


def leader_epoch_error(current_leader_epoch: int, leader_epoch: int | None) -> int:
    """Kafka's Partition.checkCurrentLeaderEpoch for the current leader epoch a client
    sends (Fetch v9+, ListOffsets v4+, OffsetForLeaderEpoch v2+): -1 is "not given";
    older than the partition's FENCED_LEADER_EPOCH, newer UNKNOWN_LEADER_EPOCH, else 0."""
    if current_leader_epoch == NO_LEADER_EPOCH or leader_epoch is None:
        return 0
    if leader_epoch > current_leader_epoch:
        return int(ErrorCode.FENCED_LEADER_EPOCH)
    if leader_epoch < current_leader_epoch:
        return int(ErrorCode.UNKNOWN_LEADER_EPOCH)
    return 0
