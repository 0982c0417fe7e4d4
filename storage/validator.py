"""Produce-side validation, offset assignment and timestamp stamping (pure; no I/O).

Mirrors Kafka's ``UnifiedLog.analyzeAndValidateRecords`` + ``LogValidator`` for a
leader append from a client (see SPEC section 2):

1. shallow checks of every batch, in Kafka's order: same magic as the first batch,
   v2 ``baseOffset == 0``, ``size <= max.message.bytes``, CRC;
2. per-batch checks: ``lastOffsetDelta >= 0``, ``recordsCount > 0`` and
   ``recordsCount == lastOffsetDelta + 1``; no control batches from clients; a batch
   with a producer id must have a base sequence;
3. timestamps: LogAppendTime topics reject client batches that already carry the
   LogAppendTime bit; CreateTime topics check every record against the
   ``[now - before_max, now + after_max]`` window (boundary accepted, -1 unchecked) and
   correct ``maxTimestamp`` to the true maximum.
4. offsets are assigned from ``next_offset``; LogAppendTime batches get the type bit and
   ``maxTimestamp = max(now, last_append_time)``; CRCs are recomputed where the header
   changed.  Batches are never recompressed.

Deliberate difference from Kafka (the "cost rule"): on a CreateTime topic whose window
is unbounded on both sides (``2**63 - 1``), and on LogAppendTime topics, the records
are *not* decoded: the header's ``maxTimestamp`` is trusted.  Kafka decompresses and
reads every record of every batch.

Legacy magic 0/1 message sets are up-converted to one v2 batch (keeping the codec).
"""

from __future__ import annotations

from typing import NamedTuple

from protocol import records as R
from storage import errors as E

__all__ = ["BatchInfo", "ValidatedAppend", "validate_records"]

INT64_MAX = (1 << 63) - 1
_MASK64 = (1 << 64) - 1


class BatchInfo(NamedTuple):
    position: int
    size: int
    base_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int


class ValidatedAppend(NamedTuple):
    buffer: bytes | bytearray
    base_offset: int
    last_offset: int
    max_timestamp: int
    offset_of_max_timestamp: int
    log_append_time: int
    record_count: int
    batches: list


def _wrap64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


_SAFE_LO = -(1 << 62)
_SAFE_HI = 1 << 62


def _ts_out_of_range(ts: int, now: int, before: int, after: int) -> bool:
    # Kafka computes this with Java longs; reproduce the wrap-around exactly.
    diff = _wrap64(now - ts)
    return diff > before or _wrap64(-diff) > after


def _translate(e: R.RecordFormatError) -> E.StorageError:
    if isinstance(e, R.CorruptRecordError):
        return E.CorruptRecordError(str(e))
    if isinstance(e, R.UnsupportedCompressionTypeError):
        return E.UnsupportedCompressionTypeError(str(e))
    return E.InvalidRecordError(str(e))


def validate_records(records, *, config, next_offset: int, now_ms: int,
                     last_append_time_ms: int = -1, magic_hint: int | None = None,
                     partition_leader_epoch: int | None = None,
                     in_place: bool = False) -> ValidatedAppend:
    """Validate one partition's produce data and return it ready to append.

    ``records``: bytes-like (bytes, bytearray, memoryview) holding v2 batches or a
    legacy magic 0/1 message set.  It is not modified: the result ``buffer`` is a new
    bytearray, unless ``in_place`` is true and ``records`` is writable, in which case
    v2 batches are patched where they are (no copy: the broker's receive buffer) and
    ``buffer`` is a memoryview of them.  ``config`` needs ``message_timestamp_type``,
    ``message_timestamp_before_max_ms``, ``message_timestamp_after_max_ms`` and
    ``max_message_bytes`` (``segment_bytes`` is used when present).
    ``magic_hint`` is accepted for the broker's convenience; the magic is read from the
    bytes.  ``partition_leader_epoch``, when given, is stamped into v2 batches.

    Raises the ``storage.errors`` exceptions listed in SPEC section 2.
    """
    if records is None:
        raise E.InvalidRecordError("records is null: a produce request must carry a record batch")
    n = len(records)
    if n < R.LOG_OVERHEAD + 5:
        raise E.InvalidRecordError(f"record set of {n} bytes holds no batches at all")
    mv = memoryview(records)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    magic = R.magic_of(mv, 0)
    try:
        if magic == 2:
            return _validate_v2(mv, config, next_offset, now_ms, last_append_time_ms,
                                partition_leader_epoch, in_place and not mv.readonly)
        if magic in (0, 1):
            return _validate_legacy(mv, config, next_offset, now_ms, last_append_time_ms)
    except R.RecordFormatError as e:
        raise _translate(e) from None
    raise E.CorruptRecordError(f"invalid magic {magic} in the first batch")


# ----------------------------------------------------------------------------- v2


def _shallow_v2(mv, max_message_bytes: int) -> list[tuple[int, R.BatchHeader]]:
    out = []
    pos = 0
    end = len(mv)
    while end - pos >= R.LOG_OVERHEAD:
        (length,) = R._I.unpack_from(mv, pos + 8)
        if length < 14:  # Kafka: smaller than the minimum (v0) record overhead
            raise E.CorruptRecordError(
                f"batch size {length} at position {pos} is less than the minimum record overhead 14")
        size = length + R.LOG_OVERHEAD
        if end - pos < R.LOG_OVERHEAD + 5:
            break
        m = R.magic_of(mv, pos)
        if m < 0 or m > 2:
            raise E.CorruptRecordError(f"invalid magic {m} in batch at position {pos}")
        if end - pos < size:
            break  # partial trailing batch: trimmed, as Kafka does
        if m != 2:
            raise E.InvalidRecordError(
                f"batch magic {m} at position {pos} is not the same as the first batch's magic 2")
        if size < R.HEADER_SIZE:
            raise E.CorruptRecordError(
                f"batchLength {length} at position {pos} is less than the v2 minimum {R.MIN_BATCH_LENGTH}")
        h = R.BatchHeader._make(R._HEADER.unpack_from(mv, pos))
        if h.base_offset != 0:
            raise E.InvalidRecordError(
                f"baseOffset of the record batch should be 0, but it is {h.base_offset}")
        if size > max_message_bytes:
            raise E.MessageTooLargeError(
                f"record batch size {size} bytes exceeds max.message.bytes {max_message_bytes}")
        if not R.verify_crc(mv, pos, h):
            raise E.CorruptRecordError(
                f"record batch at position {pos} is corrupt (stored crc = {h.crc})")
        out.append((pos, h))
        pos += size
    if not out:
        raise E.InvalidRecordError("record set holds no complete record batch")
    return out


def _check_batch(h: R.BatchHeader) -> None:
    if h.last_offset_delta < 0:
        raise E.InvalidRecordError(
            f"batch has an invalid offset range: lastOffsetDelta {h.last_offset_delta}")
    if h.records_count <= 0:
        raise E.InvalidRecordError(f"invalid reported recordsCount {h.records_count} for record batch")
    if h.records_count != h.last_offset_delta + 1:
        raise E.InvalidRecordError(
            f"inconsistent batch: lastOffsetDelta {h.last_offset_delta} + 1 != recordsCount {h.records_count}")
    if h.is_control:
        raise E.InvalidRecordError("clients are not allowed to write control records (control attribute set)")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise E.InvalidRecordError(
            f"invalid baseSequence {h.base_sequence} in record batch with producerId {h.producer_id}")
    if h.compression > 4:
        raise E.CorruptRecordError(f"unknown compression codec id {h.compression} in batch attributes")


_LAT_MSG = "invalid timestamp type LogAppendTime: producer should not set timestamp type to LogAppendTime"


def _lat_bit_errors(count: int) -> list[tuple[int, str]]:
    return [(i, _LAT_MSG) for i in range(count)]


def _range_msg(ts: int, offset_delta: int, now: int, before: int, after: int) -> str:
    lo = now - before if now - before >= _LONG_MIN else "-inf"
    hi = now + after if now + after <= _LONG_MAX else "+inf"
    return (f"timestamp {ts} of record with offset delta {offset_delta} is out of range; "
            f"it should be within [{lo}, {hi}] (broker time {now}, "
            f"message.timestamp.before.max.ms={before}, message.timestamp.after.max.ms={after})")


_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def _validate_v2(mv, config, next_offset, now, last_append_time, leader_epoch,
                 in_place=False) -> ValidatedAppend:
    batches = _shallow_v2(mv, config.max_message_bytes)
    lat_topic = config.message_timestamp_type == "LogAppendTime"
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    unbounded = before >= INT64_MAX and after >= INT64_MAX

    # per-batch validation and timestamp computation (nothing patched yet)
    fixes: list[int | None] = []   # corrected CreateTime maxTimestamp, None = unchanged
    maxes: list[int] = []
    for pos, h in batches:
        _check_batch(h)
        lat_bit = bool(h.attributes & R.TIMESTAMP_TYPE_MASK)
        if lat_topic:
            if lat_bit:
                raise E.InvalidTimestampError(
                    "one or more records have been rejected due to invalid timestamp",
                    _lat_bit_errors(h.records_count))
            fixes.append(None)
            maxes.append(-1)
            continue
        if unbounded:
            true_max = h.max_timestamp
            if lat_bit and true_max == R.NO_TIMESTAMP:
                raise E.InvalidTimestampError(
                    "one or more records have been rejected due to invalid timestamp",
                    _lat_bit_errors(h.records_count))
            if lat_bit and _ts_out_of_range(true_max, now, before, after):
                raise E.InvalidTimestampError(
                    "one or more records have been rejected due to invalid timestamp",
                    [(i, _range_msg(true_max, i, now, before, after)) for i in range(h.records_count)])
        else:
            try:
                stamps = R.record_timestamps(mv, pos, h)
            except R.RecordFormatError as e:
                raise _translate(e) from None
            errs = []
            true_max = max(stamps) if stamps else R.NO_TIMESTAMP
            lo = min(stamps) if stamps else R.NO_TIMESTAMP
            if (lo == R.NO_TIMESTAMP and lat_bit) or (
                    true_max != R.NO_TIMESTAMP and (
                        _ts_out_of_range(true_max, now, before, after)
                        or (lo != R.NO_TIMESTAMP and _ts_out_of_range(lo, now, before, after))
                        or lo < R.NO_TIMESTAMP or not _SAFE_LO < lo <= true_max < _SAFE_HI)):
                # slow path only when something may be wrong: check record by record
                true_max = R.NO_TIMESTAMP
                for i, ts in enumerate(stamps):
                    if ts != R.NO_TIMESTAMP:
                        if _ts_out_of_range(ts, now, before, after):
                            errs.append((i, _range_msg(ts, i, now, before, after)))
                        elif ts > true_max:
                            true_max = ts
                    elif lat_bit:
                        errs.append((i, _LAT_MSG))
            if errs:
                raise E.InvalidTimestampError(
                    "one or more records have been rejected due to invalid timestamp", errs)
        maxes.append(true_max)
        fixes.append(true_max if (true_max != h.max_timestamp or lat_bit) else None)

    # everything is valid: one copy (none when in_place), then patch
    total = batches[-1][0] + batches[-1][1].size
    seg = getattr(config, "segment_bytes", None)
    if isinstance(seg, int) and total > seg:
        raise E.RecordListTooLargeError(
            f"append of {total} bytes exceeds the segment size segment.bytes {seg}")
    buf = mv[:total] if in_place else bytearray(mv[:total])
    append_time = max(now, last_append_time) if lat_topic else -1
    offset = next_offset
    infos = []
    max_ts = R.NO_TIMESTAMP
    off_of_max = -1
    count = 0
    for (pos, h), fix, bmax in zip(batches, fixes, maxes):
        R.set_base_offset(buf, pos, offset)
        if leader_epoch is not None:
            R.set_partition_leader_epoch(buf, pos, leader_epoch)
        last = offset + h.last_offset_delta
        if lat_topic:
            R.set_log_append_time(buf, pos, append_time)
            bmax = append_time
        elif fix is not None:
            R.set_max_timestamp(buf, pos, fix, 0)
        if bmax > max_ts:
            max_ts = bmax
            off_of_max = last
        infos.append(BatchInfo(pos, h.size, offset, last, bmax, last))
        count += h.records_count
        offset = last + 1
    return ValidatedAppend(buf, next_offset, offset - 1, max_ts, off_of_max, append_time, count, infos)


# ----------------------------------------------------------------------------- legacy


def _validate_legacy(mv, config, next_offset, now, last_append_time) -> ValidatedAppend:
    max_bytes = config.max_message_bytes
    lat_topic = config.message_timestamp_type == "LogAppendTime"
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms

    # mixed magic (a v2 batch after legacy messages) is INVALID_RECORD, as in Kafka
    first = R.magic_of(mv, 0)
    pos = 0
    end = len(mv)
    while end - pos >= R.LOG_OVERHEAD + 5:
        (length,) = R._I.unpack_from(mv, pos + 8)
        if length < R.LEGACY_RECORD_OVERHEAD_V0 or end - pos < length + R.LOG_OVERHEAD:
            break
        m = R.magic_of(mv, pos)
        if m != first and 0 <= m <= 2:
            raise E.InvalidRecordError(
                f"batch magic {m} is not the same as the first batch's magic {first}")
        pos += length + R.LOG_OVERHEAD

    entries = []
    first_magic = None
    codec = 0
    try:
        for e in R.iter_legacy_entries(mv):
            if first_magic is None:
                first_magic = e.magic
            elif e.magic != first_magic:
                raise E.InvalidRecordError(
                    f"batch magic {e.magic} is not the same as the first batch's magic {first_magic}")
            if e.total_size > max_bytes:
                raise E.MessageTooLargeError(
                    f"message size {e.total_size} bytes exceeds max.message.bytes {max_bytes}")
            if not R._legacy_crc_ok(mv, e.position, e.size, e.crc):
                raise E.CorruptRecordError(f"message at position {e.position} is corrupt (stored crc = {e.crc})")
            if e.compression:
                codec = e.compression
            entries.append(e)
    except R.RecordFormatError as err:
        raise _translate(err) from None
    if not entries:
        raise E.InvalidRecordError("message set holds no complete message")
    if codec and len(entries) > 1:
        raise E.InvalidRecordError("compressed outer record has more than one batch")

    recs = []
    for e in entries:
        deep = R._deep_entries(e)
        errs = []
        for i, r in enumerate(deep):
            if not r.crc_ok:
                raise E.CorruptRecordError(f"inner message {i} of the wrapper is corrupt (stored crc = {r.crc})")
            if lat_topic:
                if r.timestamp_type == 1:
                    errs.append((i, _LAT_MSG))
            elif r.timestamp != R.NO_TIMESTAMP:
                if _ts_out_of_range(r.timestamp, now, before, after):
                    errs.append((i, _range_msg(r.timestamp, i, now, before, after)))
            elif r.timestamp_type == 1:
                errs.append((i, _LAT_MSG))
        if errs:
            raise E.InvalidTimestampError(
                "one or more records have been rejected due to invalid timestamp", errs)
        recs.extend(deep)

    items = [R.Record(next_offset + i, r.timestamp, r.key, r.value, []) for i, r in enumerate(recs)]
    if lat_topic:
        append_time = max(now, last_append_time)
        out = R.build_batch(items, base_offset=next_offset, compression=codec, timestamp_type=1,
                            log_append_time=append_time)
    else:
        append_time = -1
        out = R.build_batch(items, base_offset=next_offset, compression=codec)
    if len(out) > max_bytes:
        raise E.MessageTooLargeError(
            f"message batch size {len(out)} bytes after conversion exceeds max.message.bytes {max_bytes}")
    seg = getattr(config, "segment_bytes", None)
    if isinstance(seg, int) and len(out) > seg:
        raise E.RecordListTooLargeError(
            f"append of {len(out)} bytes exceeds the segment size segment.bytes {seg}")
    h = R.parse_batch_header(out, 0)
    last = next_offset + len(recs) - 1
    off_of_max = last if h.max_timestamp != R.NO_TIMESTAMP else -1
    info = BatchInfo(0, len(out), next_offset, last, h.max_timestamp, last)
    return ValidatedAppend(bytearray(out), next_offset, last, h.max_timestamp, off_of_max,
                           append_time, len(recs), [info])
