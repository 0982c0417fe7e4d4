"""Shared helpers for the storage tests (no tests here).

Builds v2 batches with kafka-python's DefaultRecordBatchBuilder and wraps them into
storage.validator's ``ValidatedAppend`` (offsets assigned) the way the validator does, so
the segment/log tests do not depend on the validator's logic.
"""

from __future__ import annotations

import os
import struct
from contextlib import contextmanager
from types import SimpleNamespace

from kafka.record.default_records import DefaultRecordBatchBuilder

from storage.validator import BatchInfo, ValidatedAppend  # noqa: F401 - re-exported for the tests

LONG_MAX = 2**63 - 1

GZIP = 1


def topic_config(**kw):
    """Stand-in with TopicConfig's attribute names (Kafka defaults)."""
    base = dict(
        segment_bytes=1024 * 1024 * 1024,
        segment_ms=7 * 24 * 3600 * 1000,
        segment_jitter_ms=0,
        segment_index_bytes=10 * 1024 * 1024,
        index_interval_bytes=4096,
        message_timestamp_type="CreateTime",
        message_timestamp_before_max_ms=LONG_MAX,
        message_timestamp_after_max_ms=LONG_MAX,
        max_message_bytes=1024 * 1024 + 12,
        retention_ms=7 * 24 * 3600 * 1000,
        retention_bytes=-1,
        file_delete_delay_ms=60000,
        flush_messages=LONG_MAX,
        flush_ms=LONG_MAX,
        cleanup_policy=["delete"],
        compression_type="producer",
        min_insync_replicas=1,
    )
    base.update(kw)
    return SimpleNamespace(**base)


def build_batch(records, compression=0, value_size=None) -> bytes:
    """records: list of (timestamp, value) -> one v2 batch at base offset 0."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i, (ts, value) in enumerate(records):
        if value_size is not None:
            value = (value or b"")[:value_size].ljust(value_size, b"x")
        b.append(i, timestamp=ts, key=None, value=value, headers=[])
    return bytes(b.build())


def batch_records(batch: bytes):
    """[(offset, timestamp)] of a batch as stored (decoded by protocol.records)."""
    from protocol import records as R

    return [(r.offset, r.timestamp) for r in R.iter_records(bytes(batch), 0)]


def make_append(batches: list[bytes], next_offset: int) -> ValidatedAppend:
    """Assign offsets from next_offset to the batches; returns a ValidatedAppend."""
    buf = bytearray()
    infos = []
    off = next_offset
    max_ts, off_max = -1, -1
    count = 0
    for raw in batches:
        raw = bytearray(raw)
        struct.pack_into(">q", raw, 0, off)
        last_delta = struct.unpack_from(">i", raw, 23)[0]
        bmax = struct.unpack_from(">q", raw, 35)[0]
        n = struct.unpack_from(">i", raw, 57)[0]
        recs = batch_records(raw)
        boff_max = next((o for o, t in recs if t == bmax), off)
        infos.append(BatchInfo(len(buf), len(raw), off, off + last_delta, bmax, boff_max))
        if bmax > max_ts:
            max_ts, off_max = bmax, boff_max
        buf += raw
        off += last_delta + 1
        count += n
    return ValidatedAppend(bytes(buf), next_offset, off - 1, max_ts, off_max, -1, count, infos)


def append(target, batches, next_offset=None):
    """Append batches to a LogSegment or Log; returns the ValidatedAppend."""
    if next_offset is None:
        next_offset = target.log_end_offset
    va = make_append(batches, next_offset)
    if hasattr(target, "append_validated"):
        target.append_validated(va)
    else:
        target.append(va)
    return va


def parse_batches(data: bytes):
    """[(base_offset, last_offset, max_ts, bytes)] of a buffer of whole v2 batches."""
    out = []
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        size = length + 12
        if pos + size > len(data):
            break
        last = base + struct.unpack_from(">i", data, pos + 23)[0]
        mts = struct.unpack_from(">q", data, pos + 35)[0]
        out.append((base, last, mts, data[pos:pos + size]))
        pos += size
    return out


class Oracle:
    """Naive model of a log: every record's (offset, timestamp) and every batch."""

    def __init__(self):
        self.records: list[tuple[int, int]] = []
        self.batches: list[tuple[int, int, bytes]] = []  # base, last, bytes

    def add(self, va: ValidatedAppend):
        for b in va.batches:
            raw = va.buffer[b.position:b.position + b.size]
            self.batches.append((b.base_offset, b.last_offset, raw))
            self.records.extend(batch_records(raw))

    def offset_for_timestamp(self, ts, start=0):
        """Kafka's guarantee: the first batch (in order) whose max ts >= ts, first record in it."""
        for base, last, raw in self.batches:
            recs = batch_records(raw)
            if last < start or max(t for _, t in recs) < ts:
                continue
            for o, t in recs:
                if t >= ts and o >= start:
                    return (o, t)
        return None

    def max_timestamp(self):
        if not self.records:
            return None
        mx = max(t for _, t in self.records)
        return next((o, t) for o, t in self.records if t == mx)

    def batch_for(self, offset):
        for base, last, raw in self.batches:
            if last >= offset:
                return base, last, raw
        return None


@contextmanager
def unopened_descriptor(segment, tmp_path):
    """For the block, ``segment``'s .log descriptor is a number nothing has open, so any
    write to it fails (EBADF), storage/_append.c's own pwrite included; restored after."""
    spare = os.open(os.path.join(str(tmp_path), "spare"), os.O_RDWR | os.O_CREAT)
    os.close(spare)
    real_fd, segment.file.fd = segment.file.fd, spare
    try:
        yield
    finally:
        segment.file.fd = real_fd
