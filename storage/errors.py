"""Storage-layer exceptions.

These carry no Kafka error codes; ``broker.errors`` is the single place that maps
them to codes.  Messages name the offending field and value.
"""

from __future__ import annotations

__all__ = [
    "StorageError",
    "UnknownTopicOrPartitionError",
    "TopicExistsError",
    "InvalidTopicError",
    "InvalidRecordError",
    "CorruptRecordError",
    "MessageTooLargeError",
    "RecordListTooLargeError",
    "InvalidTimestampError",
    "OffsetOutOfRangeError",
    "UnsupportedCompressionTypeError",
    "InvalidRequestError",
    "KafkaStorageError",
    "OutOfOrderSequenceError",
    "InvalidProducerEpochError",
    "InvalidTxnStateError",
    "LogDirError",
]


class StorageError(Exception):
    """Base class of every storage exception."""


class UnknownTopicOrPartitionError(StorageError):
    pass


class TopicExistsError(StorageError):
    pass


class InvalidTopicError(StorageError):
    pass


class InvalidRecordError(StorageError):
    """A record or batch violates the produce validation rules (INVALID_RECORD).

    ``record_errors``, when the rule is per record (a compacted topic's record without a
    key), lists ``(batch_index, message)`` pairs as InvalidTimestampError does.
    """

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.message = message
        self.record_errors: list[tuple[int, str]] = list(record_errors or [])


class CorruptRecordError(StorageError):
    """CRC mismatch or bytes that cannot be parsed (CORRUPT_MESSAGE)."""


class MessageTooLargeError(StorageError):
    """A batch is larger than the topic's max.message.bytes (MESSAGE_TOO_LARGE)."""


class RecordListTooLargeError(StorageError):
    """The append is larger than a segment can hold (RECORD_LIST_TOO_LARGE)."""


class InvalidTimestampError(StorageError):
    """A record timestamp is outside the topic's allowed window (INVALID_TIMESTAMP).

    ``record_errors`` is a list of ``(batch_index, message)`` pairs, where
    ``batch_index`` is the index of the record within its batch, as used by the
    ProduceResponse v8+ ``RecordErrors`` field.
    """

    def __init__(self, message: str, record_errors: list[tuple[int, str]] | None = None):
        super().__init__(message)
        self.message = message
        self.record_errors: list[tuple[int, str]] = list(record_errors or [])


class OffsetOutOfRangeError(StorageError):
    pass


class UnsupportedCompressionTypeError(StorageError):
    pass


class InvalidRequestError(StorageError):
    pass


class KafkaStorageError(StorageError):
    """An I/O failure of the log directory (KAFKA_STORAGE_ERROR)."""


class InvalidPartitionsError(StorageError):
    """A partition count that is not allowed (zero, negative)."""


class OutOfOrderSequenceError(StorageError):
    """An idempotent producer's batch does not continue its sequence numbers
    (OUT_OF_ORDER_SEQUENCE_NUMBER)."""


class InvalidProducerEpochError(StorageError):
    """A batch carries an epoch older than the producer's current one (INVALID_PRODUCER_EPOCH)."""


class InvalidTxnStateError(StorageError):
    """A transactional batch that is not part of an ongoing transaction (INVALID_TXN_STATE)."""


class TransactionCoordinatorFencedError(StorageError):
    """A transaction marker from a coordinator epoch older than the producer's last one
    (TRANSACTION_COORDINATOR_FENCED)."""


class LogDirNotFoundError(StorageError):
    """A path that is not one of the broker's log dirs (LOG_DIR_NOT_FOUND)."""


class LogDirError(StorageError):
    """A log dir that cannot be used at start-up: not creatable, not writable, or locked
    by another broker. The message is the one line the operator gets."""
