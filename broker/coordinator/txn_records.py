"""Key/value bytes of the records in ``__transaction_state``.

The formats are Kafka's (transaction-coordinator/src/main/resources/common/message/):

* TransactionLogKey v0: ``int16 version=0, string transactionalId``;
* TransactionLogValue v0: ``int16 version=0, int64 producerId, int16 producerEpoch,
  int32 transactionTimeoutMs, int8 transactionStatus, [string topic, [int32 partition]]
  transactionPartitions (nullable; int32 counts), int64 lastUpdateTimestampMs,
  int64 startTimestampMs``.
* TransactionLogValue v1 (flexible, written by Kafka for transactions V2 clients) is
  read as well: compact strings and arrays (unsigned varint length + 1), and tagged
  fields 0 PreviousProducerId, 1 NextProducerId, 2 ClientTransactionVersion.

Chronolog writes v0, which every Kafka version reads. A record with a null value is a
tombstone: the transactional id expired (``transactional.id.expiration.ms``).

``transactionStatus`` is TransactionState.id: 0 Empty, 1 Ongoing, 2 PrepareCommit,
3 PrepareAbort, 4 CompleteCommit, 5 CompleteAbort, 6 Dead, 7 PrepareEpochFence (never
written: a fence is written as PrepareAbort).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from broker.coordinator.records import RecordFormatError, _Reader, _str

KEY_VERSION = 0
VALUE_VERSION = 0

EMPTY, ONGOING, PREPARE_COMMIT, PREPARE_ABORT, COMPLETE_COMMIT, COMPLETE_ABORT, DEAD, PREPARE_EPOCH_FENCE = range(8)
STATE_NAMES = ("Empty", "Ongoing", "PrepareCommit", "PrepareAbort", "CompleteCommit", "CompleteAbort", "Dead",
               "PrepareEpochFence")


@dataclass
class TxnLogValue:
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: int
    partitions: dict[str, list[int]] = field(default_factory=dict)
    last_update_ms: int = -1
    start_ms: int = -1
    # v1 tagged fields (defaults when read from v0)
    previous_producer_id: int = -1
    next_producer_id: int = -1
    client_transaction_version: int = 0


def key(transactional_id: str) -> bytes:
    return struct.pack(">h", KEY_VERSION) + _str(transactional_id)


def value(v: TxnLogValue) -> bytes:
    out = [struct.pack(">hqhib", VALUE_VERSION, v.producer_id, v.producer_epoch, v.timeout_ms, v.state)]
    if v.partitions is None:
        out.append(struct.pack(">i", -1))
    else:
        out.append(struct.pack(">i", len(v.partitions)))
        for topic in sorted(v.partitions):
            parts = sorted(v.partitions[topic])
            out.append(_str(topic) + struct.pack(f">i{len(parts)}i", len(parts), *parts))
    out.append(struct.pack(">qq", v.last_update_ms, v.start_ms))
    return b"".join(out)


def decode_key(buf) -> str:
    r = _Reader(buf)
    version = r.i16()
    if version != KEY_VERSION:
        raise RecordFormatError(f"unknown TransactionLogKey version {version}")
    tid = r.string()
    if tid is None:
        raise RecordFormatError("TransactionLogKey has a null transactional id")
    return tid


class _Flex(_Reader):
    def uvarint(self) -> int:
        shift = value = 0
        while True:
            b = self._take(1)[0]
            value |= (b & 0x7F) << shift
            if not b & 0x80:
                return value
            shift += 7
            if shift > 28:
                raise RecordFormatError(f"varint too long at byte {self.pos}")

    def compact_string(self):
        n = self.uvarint() - 1
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string at byte {self.pos - n} is not UTF-8: {exc}") from None

    def tags(self) -> dict[int, bytes]:
        out = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            out[tag] = self._take(self.uvarint())
        return out


def decode_value(buf) -> TxnLogValue:
    r = _Flex(buf)
    version = r.i16()
    if version not in (0, 1):
        raise RecordFormatError(f"unknown TransactionLogValue version {version}")
    pid = r.i64()
    if version == 0:
        epoch, timeout, state = r.i16(), r.i32(), struct.unpack(">b", r._take(1))[0]
        n = r.i32()
        parts = None if n < 0 else {}
        for _ in range(max(n, 0)):
            topic = r.string()
            m = r.i32()
            parts[topic] = [r.i32() for _ in range(max(m, 0))]
        last, start = r.i64(), r.i64()
        return TxnLogValue(pid, epoch, timeout, state, parts or {}, last, start)
    epoch, timeout, state = r.i16(), r.i32(), struct.unpack(">b", r._take(1))[0]
    n = r.uvarint() - 1
    parts = {}
    for _ in range(max(n, 0)):
        topic = r.compact_string()
        m = r.uvarint() - 1
        parts[topic] = [r.i32() for _ in range(max(m, 0))]
        r.tags()
    last, start = r.i64(), r.i64()
    v = TxnLogValue(pid, epoch, timeout, state, parts, last, start)
    tags = r.tags()
    if 0 in tags:
        v.previous_producer_id = struct.unpack(">q", tags[0])[0]
    if 1 in tags:
        v.next_producer_id = struct.unpack(">q", tags[1])[0]
    if 2 in tags:
        v.client_transaction_version = struct.unpack(">h", tags[2])[0]
    return v
