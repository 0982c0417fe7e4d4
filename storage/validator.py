"""Produce-side validation, offset assignment and timestamp stamping (pure; no I/O).

Mirrors Kafka's ``UnifiedLog.analyzeAndValidateRecords`` + ``LogValidator`` for a
leader append from a client (see SPEC section 2):

1. shallow checks of every batch, in Kafka's order: same magic as the first batch,
   v2 ``baseOffset == 0``, ``size <= max.message.bytes``, CRC;
2. per-batch checks: ``lastOffsetDelta >= 0``, ``recordsCount > 0`` and
   ``recordsCount == lastOffsetDelta + 1``; no control batches from clients; a batch
   with a producer id must have a base sequence; a known codec;
3. the record walk, on every batch of every topic (``protocol.record_walk``): the
   records fill the batch exactly and their count is the header's; lengths, varints,
   keys, values and headers stay inside their record.  Compressed batches are walked on
   their decompressed records, streamed in pieces (``compression.iter_decompress``), so
   a batch is never held decompressed; its decompressed records may not exceed
   ``max_records_bytes`` (MESSAGE_TOO_LARGE);
4. what the walk reports: on CreateTime topics every record's timestamp against the
   ``[now - before_max, now + after_max]`` window (boundary accepted, -1 unchecked) and
   the header's ``maxTimestamp`` corrected to the records' true maximum; on compacted
   topics a record without a key is refused (INVALID_RECORD with per-record errors, as
   Kafka's ``validateKey``); offset deltas that do not run 0..count-1 make the batch be
   rebuilt with consecutive offsets (Kafka's not-in-place path), or refused when its
   records are too large to rebuild in memory (more than ``max.message.bytes``);
5. offsets are assigned from ``next_offset``; LogAppendTime batches get the type bit and
   ``maxTimestamp = max(now, last_append_time)``; CRCs are recomputed where the header
   changed.  Batches are never recompressed (only a rebuilt one is).

Steps 1-4 depend only on the bytes and the clock: :func:`analyze_records` does them and
returns an :class:`Analysis`.  With a ``budget`` (decompressed bytes) it stops walking
compressed batches after that much output and reports ``pending``; the caller finishes
with :meth:`Analysis.complete` off the event loop (the broker runs it in a worker
thread, so a compression bomb never stalls other connections).  Step 5,
:meth:`Analysis.assign`, is cheap and runs where the log is appended.
:func:`validate_records` does both at once.

The common case (every batch v2 and uncompressed, none with the LogAppendTime attribute,
every check passing) takes one compiled call for steps 1-4 and one for step 5
(``protocol.record_walk.scan_v2`` / ``assign_v2``, from ``protocol/_recwalk.c``); the
scan answers None for anything else, and the Python steps below then run and name the
problem. Where the caller has the log end at hand and gives up a writable buffer (the
produce path, :func:`validate_common`), steps 1-5 are one call (``validate_v2``). The
Python steps are the reference: the tests check all give the same result.

Legacy magic 0/1 message sets are up-converted to one v2 batch (keeping the codec);
their wrappers are decompressed whole, at most ``LEGACY_MAX_FACTOR`` x
``max.message.bytes`` (their messages are materialised for the conversion).
"""

from __future__ import annotations

from typing import NamedTuple

from config.topic_config import validation_rules_of
from protocol import compression as C
from protocol import records as R
from protocol.record_walk import WALK_ERRORS, RecordWalker, assign_v2, scan_v2, validate_v2, validate_v2_setup
from storage import errors as E

__all__ = ["Analysis", "BatchInfo", "ValidatedAppend", "analyze_records", "validate_records",
           "validate_common", "rules_of", "DEFAULT_MAX_RECORDS_BYTES"]

_MASK64 = (1 << 64) - 1

#: default bound on one batch's decompressed records: Kafka's socket.request.max.bytes
#: default (the broker passes its own value), the most a client could send uncompressed.
DEFAULT_MAX_RECORDS_BYTES = 104857600
#: a legacy (magic 0/1) wrapper may decompress to at most this many times max.message.bytes
LEGACY_MAX_FACTOR = 16


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


if validate_v2_setup is not None:  # what the compiled validate_v2 (validate_common) uses and returns
    validate_v2_setup(R.crc32c, BatchInfo, ValidatedAppend)


#: Kafka's LogValidator.validateKey message (the broker adds " in topic partition <tp>.")
NO_KEY_MESSAGE = "Compacted topic cannot accept message without key"

def _wrap64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


def _ts_out_of_range(ts: int, now: int, before: int, after: int) -> bool:
    # Kafka computes this with Java longs; reproduce the wrap-around exactly.
    diff = _wrap64(now - ts)
    return diff > before or _wrap64(-diff) > after


def _translate(e: R.RecordFormatError) -> E.StorageError:
    if isinstance(e, R.DecompressedTooLargeError):
        return E.MessageTooLargeError(str(e))
    if isinstance(e, R.CorruptRecordError):
        return E.CorruptRecordError(str(e))
    if isinstance(e, R.UnsupportedCompressionTypeError):
        return E.UnsupportedCompressionTypeError(str(e))
    return E.InvalidRecordError(str(e))


def validate_records(records, *, config, next_offset: int, now_ms: int,
                     last_append_time_ms: int = -1, magic_hint: int | None = None,
                     partition_leader_epoch: int | None = None,
                     in_place: bool = False,
                     max_records_bytes: int = DEFAULT_MAX_RECORDS_BYTES) -> ValidatedAppend:
    """Validate one partition's produce data and return it ready to append.

    ``records``: bytes-like (bytes, bytearray, memoryview) holding v2 batches or a
    legacy magic 0/1 message set.  It is not modified: the result ``buffer`` is a new
    bytearray, unless ``in_place`` is true and ``records`` is writable, in which case
    v2 batches are patched where they are (no copy: the broker's receive buffer) and
    ``buffer`` is a memoryview of them.  ``config`` needs ``message_timestamp_type``,
    ``message_timestamp_before_max_ms``, ``message_timestamp_after_max_ms`` and
    ``max_message_bytes`` (``segment_bytes`` and ``compact`` are used when present).
    ``magic_hint`` is accepted for the broker's convenience; the magic is read from the
    bytes.  ``partition_leader_epoch``, when given, is stamped into v2 batches.

    Raises the ``storage.errors`` exceptions listed in SPEC section 2.
    """
    if in_place:
        va = validate_common(records, rules_of(config), now_ms, next_offset, last_append_time_ms,
                             partition_leader_epoch)
        if va is not None:
            return va
    analysis = analyze_records(records, config=config, now_ms=now_ms, in_place=in_place,
                               max_records_bytes=max_records_bytes)
    return analysis.assign(next_offset, last_append_time_ms, partition_leader_epoch)


def _not_compiled(records, rules, now_ms: int, next_offset: int, last_append_time_ms: int = -1,
                  partition_leader_epoch: int | None = None, max_batches: int = 16) -> None:
    return None


#: validate_common(records, rules, now_ms, next_offset, last_append_time_ms=-1,
#: partition_leader_epoch=None, max_batches=16), arguments by position:
#: ``validate_records(records, in_place=True, ...)`` for the common case in one compiled
#: call (``validate_v2`` itself, no Python frame around it): ``records`` writable and made
#: only of v2 batches, uncompressed, none with the LogAppendTime attribute, every check
#: passing (at most ``max_batches`` of them, 1 to 16, no partial batch after them).
#: ``rules``: :func:`rules_of` the topic's config. None for anything else, ``records``
#: untouched: :func:`validate_records` / :func:`analyze_records` then take them and name
#: any problem. Without the compiled module, always None.
validate_common = _not_compiled if validate_v2 is None else validate_v2


def analyze_records(records, *, config, now_ms: int, in_place: bool = False,
                    max_records_bytes: int = DEFAULT_MAX_RECORDS_BYTES,
                    budget: int | None = None) -> "Analysis":
    """Steps 1-4 of the module docstring.  With ``budget`` (bytes of decompressed
    output), walks of compressed batches stop after that much and the result is
    ``pending``: call :meth:`Analysis.complete` (in a worker thread) before
    :meth:`Analysis.assign`.  Raises the ``storage.errors`` exceptions."""
    if records is None:
        raise E.InvalidRecordError("records is null: a produce request must carry a record batch")
    n = len(records)
    if n < R.LOG_OVERHEAD + 5:
        raise E.InvalidRecordError(f"record set of {n} bytes holds no batches at all")
    mv = memoryview(records)
    if mv.ndim != 1 or mv.itemsize != 1:
        mv = mv.cast("B")
    magic = mv[R.MAGIC_OFFSET]  # n >= 17: there is one
    try:
        if magic == 2:
            if scan_v2 is not None:  # the common case in one compiled call (record_walk)
                analysis = _V2Analysis.scanned(mv, config, now_ms, in_place and not mv.readonly)
                if analysis is not None:
                    return analysis
            analysis = _V2Analysis(mv, config, now_ms, in_place and not mv.readonly, max_records_bytes)
            analysis.run(budget)
            return analysis
        if magic in (0, 1):
            return _LegacyAnalysis(mv, config, now_ms, max_records_bytes)
    except R.RecordFormatError as e:
        raise _translate(e) from None
    raise E.CorruptRecordError(f"invalid magic {magic - 256 if magic > 127 else magic} in the first batch")


class Analysis:
    """The outcome of :func:`analyze_records` (see the module docstring)."""

    __slots__ = ()  # the v2 analysis, made for every produced partition, has slots only
    pending = False
    #: decompressed bytes walked so far (compressed batches)
    decompressed_bytes = 0

    def complete(self) -> None:
        """Finish what a budget left pending.  Raises the storage errors."""

    def assign(self, next_offset: int, last_append_time_ms: int = -1,
               partition_leader_epoch: int | None = None) -> ValidatedAppend:
        raise NotImplementedError


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
    attrs = h.attributes
    if attrs & R.CONTROL_MASK:
        raise E.InvalidRecordError("clients are not allowed to write control records (control attribute set)")
    if h.producer_id >= 0 and h.base_sequence < 0:
        raise E.InvalidRecordError(
            f"invalid baseSequence {h.base_sequence} in record batch with producerId {h.producer_id}")
    if attrs & R.COMPRESSION_MASK > 4:
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


def _walk_error(pos: int, e: Exception) -> E.StorageError:
    return E.InvalidRecordError(f"batch at position {pos}: {e}")


def _decompress_error(pos: int, codec: int, e: C.CompressionError) -> E.StorageError:
    if isinstance(e, C.DecompressedSizeError):
        return E.MessageTooLargeError(
            f"the {C.CODEC_NAMES[codec]} batch at position {pos} decompresses to more than "
            f"{e.limit} bytes of records")
    return E.CorruptRecordError(f"cannot decompress the {C.CODEC_NAMES[codec]} batch at position {pos}: {e}")


class _BatchWalk:
    """One batch's record walk; for a compressed batch, resumable between pieces."""

    __slots__ = ("pos", "h", "walker", "pieces", "result")

    def __init__(self, mv, pos: int, h: R.BatchHeader, walker, max_records_bytes: int) -> None:
        self.pos = pos
        self.h = h
        self.walker = walker
        self.result = None
        payload = mv[pos + R.HEADER_SIZE:pos + h.size]
        codec = h.compression
        if codec == 0:
            self.pieces = None
            try:
                walker.feed(payload)
                self.result = walker.finish()
            except WALK_ERRORS as e:
                raise _walk_error(pos, e) from None
        else:
            self.pieces = C.iter_decompress(codec, payload, max_size=max_records_bytes)

    def advance(self, budget: int | None) -> int:
        """Walk decompressed pieces until done or ``budget`` bytes; returns the bytes walked."""
        walked = 0
        walker = self.walker
        try:
            for piece in self.pieces:
                walker.feed(piece)
                walked += len(piece)
                if budget is not None and walked >= budget:
                    return walked
            self.result = walker.finish()
        except WALK_ERRORS as e:
            raise _walk_error(self.pos, e) from None
        except C.CompressionError as e:
            raise _decompress_error(self.pos, self.h.compression, e) from None
        self.pieces = None
        return walked


def rules_of(config) -> tuple[bool, int, int, bool, bool, int, int | None]:
    """The topic's validation rules (config.topic_config.validation_rules_of): cached on
    a TopicConfig, computed here for other configs (the tests' plain ones)."""
    rules = getattr(config, "validation_rules", None)
    return rules if rules is not None else validation_rules_of(config)


#: an analysis's rebuilt batches before _conclude finds any (never written to)
_NO_REBUILDS: dict = {}


class _V2Analysis(Analysis):
    __slots__ = ("mv", "config", "segment_bytes", "now", "in_place", "lat_topic", "decompressed_bytes",
                 "pending", "spans", "walks", "fixes", "maxes",
                 "rebuilt")  # batch index -> rebuilt bytes (offset deltas 0..n-1); set by _conclude

    def _start(self, mv, config, now: int, in_place: bool, lat_topic: bool, concluded: bool,
               segment_bytes: int | None) -> None:
        self.mv = mv
        self.config = config
        self.segment_bytes = segment_bytes
        self.now = now
        self.in_place = in_place
        self.lat_topic = lat_topic
        self.decompressed_bytes = 0
        self.pending = not concluded  # an attribute, not a property: read on every append
        self.rebuilt = _NO_REBUILDS

    def __init__(self, mv, config, now: int, in_place: bool, max_records_bytes: int) -> None:
        lat_topic, before, after, check_window, compact, max_message_bytes, segment_bytes = rules_of(config)
        batches = _shallow_v2(mv, max_message_bytes)
        self._start(mv, config, now, in_place, lat_topic, False, segment_bytes)
        self.spans = batches  # (position, header) of each batch, as they are
        self.walks = walks = []
        for pos, h in batches:
            _check_batch(h)
            lat_bit = h.attributes & R.TIMESTAMP_TYPE_MASK
            if lat_topic and lat_bit:
                raise E.InvalidTimestampError(
                    "one or more records have been rejected due to invalid timestamp",
                    _lat_bit_errors(h.records_count))
            walker = RecordWalker(h.records_count, h.base_timestamp, lat_topic or bool(lat_bit), now,
                                  before, after, check_window and not lat_bit, compact)
            walks.append(_BatchWalk(mv, pos, h, walker, max_records_bytes))

    @classmethod
    def scanned(cls, mv, config, now: int, in_place: bool) -> "_V2Analysis | None":
        """The analysis of batches ``scan_v2`` takes in one call (all uncompressed, none
        with the LogAppendTime attribute, nothing to report or rebuild): the spans, fixes
        and maxes ``__init__`` and ``_conclude`` would compute. None for anything else."""
        rules = rules_of(config)
        out = scan_v2(mv, rules, now, R.BatchHeader, R.crc32c)
        if out is None:
            return None
        self = cls.__new__(cls)
        self._start(mv, config, now, in_place, rules[0], True, rules[6])  # lat_topic, segment_bytes
        self.spans, self.fixes, self.maxes = out
        self.walks = None
        return self

    def run(self, budget: int | None) -> None:
        for walk in self.walks:
            if walk.pieces is not None:
                walked = walk.advance(budget)
                self.decompressed_bytes += walked
                if walk.pieces is not None:  # stopped by the budget
                    return
                if budget is not None:
                    budget = max(0, budget - walked)
        self._conclude()

    def complete(self) -> None:
        if self.pending:
            self.run(None)

    def _conclude(self) -> None:
        """Per-batch outcome of the walks: errors, corrected max timestamps, rebuilds."""
        config = self.config
        now = self.now
        before = config.message_timestamp_before_max_ms
        after = config.message_timestamp_after_max_ms
        lat_topic = self.lat_topic
        self.fixes = fixes = []   # corrected CreateTime maxTimestamp, None = unchanged
        self.maxes = maxes = []
        self.rebuilt = {}
        for i, walk in enumerate(self.walks):
            h = walk.h
            max_ts, _index_of_max, deltas_ok, bad, nulls = walk.result
            errs = []
            if nulls:
                errs = [(j, NO_KEY_MESSAGE) for j in nulls]
            lat_bit = bool(h.attributes & R.TIMESTAMP_TYPE_MASK)
            if lat_topic:
                true_max = -1
            elif lat_bit:
                # every record reads the header's maxTimestamp (Kafka's record.timestamp())
                true_max = h.max_timestamp
                if true_max == R.NO_TIMESTAMP:
                    errs += _lat_bit_errors(h.records_count)
                elif _ts_out_of_range(true_max, now, before, after):
                    errs += [(j, _range_msg(true_max, j, now, before, after)) for j in range(h.records_count)]
            else:
                true_max = max_ts
                if bad:
                    errs += [(j, _range_msg(ts, j, now, before, after)) for j, ts in bad]
            if errs:
                errs.sort()
                if len(errs) > len(nulls or ()):
                    raise E.InvalidTimestampError(
                        "one or more records have been rejected due to invalid timestamp", errs)
                raise E.InvalidRecordError(
                    f"one or more records have been rejected due to {len(errs)} record errors: "
                    "a compacted topic cannot accept records without a key", errs)
            if not deltas_ok:
                self.rebuilt[i] = self._rebuild(walk)
            maxes.append(true_max)
            fixes.append(None if lat_topic or (true_max == h.max_timestamp and not lat_bit) else true_max)
        self.pending = False

    def _rebuild(self, walk: _BatchWalk) -> bytes:
        """A batch whose offset deltas are not 0..count-1, rebuilt with consecutive ones
        (Kafka's validateMessagesAndAssignOffsetsCompressed does the same when inner
        offsets are off), keeping codec, timestamps, keys, values, headers and the
        producer fields."""
        h = walk.h
        limit = self.config.max_message_bytes
        try:
            recs = list(R.iter_records(self.mv, walk.pos, h, max_decompressed=limit))
        except R.RecordFormatError:
            raise E.InvalidRecordError(
                f"batch at position {walk.pos}: its records' offset deltas do not run 0..{h.records_count - 1}, "
                f"and its records are larger than max.message.bytes {limit} to rebuild") from None
        lat = h.timestamp_type == 1
        out = R.build_batch([R.Record(i, r.timestamp, r.key, r.value, r.headers) for i, r in enumerate(recs)],
                            compression=h.compression, timestamp_type=h.timestamp_type,
                            log_append_time=h.max_timestamp if lat else None,
                            producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                            base_sequence=h.base_sequence, is_transactional=h.is_transactional)
        if len(out) > limit:
            raise E.MessageTooLargeError(
                f"record batch size {len(out)} bytes after rebuilding exceeds max.message.bytes {limit}")
        return out

    def assign(self, next_offset: int, last_append_time_ms: int = -1,
               partition_leader_epoch: int | None = None) -> ValidatedAppend:
        if self.pending:
            raise RuntimeError("assign() before the analysis completed")
        mv = self.mv
        if self.rebuilt:
            parts = []
            spans = []
            at = 0
            for i, w in enumerate(self.walks):
                chunk = self.rebuilt.get(i)
                if chunk is None:
                    chunk = mv[w.pos:w.pos + w.h.size]
                parts.append(chunk)
                spans.append((at, R.parse_batch_header(chunk, 0) if i in self.rebuilt else w.h))
                at += len(chunk)
            buf = bytearray(b"".join(parts))
        else:
            spans = self.spans
            buf = None
        last_pos, last_h = spans[-1]
        total = last_pos + last_h.batch_length + R.LOG_OVERHEAD
        seg = self.segment_bytes
        if seg is not None and total > seg:
            raise E.RecordListTooLargeError(
                f"append of {total} bytes exceeds the segment size segment.bytes {seg}")
        if buf is None:
            buf = mv[:total] if self.in_place else bytearray(mv[:total])
        lat_topic = self.lat_topic
        append_time = max(self.now, last_append_time_ms) if lat_topic else -1
        if assign_v2 is not None:  # the loop below, compiled (record_walk)
            return assign_v2(buf, spans, self.fixes, self.maxes, next_offset, partition_leader_epoch, lat_topic,
                             append_time, BatchInfo, R.crc32c, ValidatedAppend)
        offset = next_offset
        infos = []
        max_ts = R.NO_TIMESTAMP
        off_of_max = -1
        count = 0
        for (pos, h), fix, bmax in zip(spans, self.fixes, self.maxes):
            R.set_base_offset(buf, pos, offset)
            if partition_leader_epoch is not None:
                R.set_partition_leader_epoch(buf, pos, partition_leader_epoch)
            last = offset + h.last_offset_delta
            if lat_topic:
                R.set_log_append_time(buf, pos, append_time)
                bmax = append_time
            elif fix is not None:
                R.set_max_timestamp(buf, pos, fix, 0)
            if bmax > max_ts:
                max_ts = bmax
                off_of_max = last
            infos.append(BatchInfo(pos, h.batch_length + R.LOG_OVERHEAD, offset, last, bmax, last))
            count += h.records_count
            offset = last + 1
        return ValidatedAppend(buf, next_offset, offset - 1, max_ts, off_of_max, append_time, count, infos)


# ----------------------------------------------------------------------------- legacy


class _LegacyAnalysis(Analysis):
    """A magic 0/1 message set, checked and up-converted to one v2 batch at base offset 0
    (``assign`` patches the offsets and, on LogAppendTime topics, the append time)."""

    def __init__(self, mv, config, now: int, max_records_bytes: int) -> None:
        self.config = config
        self.now = now
        self.lat_topic = config.message_timestamp_type == "LogAppendTime"
        self.out, self.count = _analyze_legacy(mv, config, now, max_records_bytes)

    def assign(self, next_offset: int, last_append_time_ms: int = -1,
               partition_leader_epoch: int | None = None) -> ValidatedAppend:
        buf = bytearray(self.out)
        R.set_base_offset(buf, 0, next_offset)
        if partition_leader_epoch is not None:
            R.set_partition_leader_epoch(buf, 0, partition_leader_epoch)
        if self.lat_topic:
            append_time = max(self.now, last_append_time_ms)
            R.set_log_append_time(buf, 0, append_time)
        else:
            append_time = -1
        h = R.parse_batch_header(buf, 0)
        last = next_offset + self.count - 1
        off_of_max = last if h.max_timestamp != R.NO_TIMESTAMP else -1
        info = BatchInfo(0, len(buf), next_offset, last, h.max_timestamp, last)
        return ValidatedAppend(buf, next_offset, last, h.max_timestamp, off_of_max,
                               append_time, self.count, [info])


def _analyze_legacy(mv, config, now, max_records_bytes) -> tuple[bytes, int]:
    max_bytes = config.max_message_bytes
    lat_topic = config.message_timestamp_type == "LogAppendTime"
    before = config.message_timestamp_before_max_ms
    after = config.message_timestamp_after_max_ms
    compact = bool(getattr(config, "compact", False))

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

    cap = min(max_records_bytes, LEGACY_MAX_FACTOR * max_bytes)
    recs = []
    for e in entries:
        try:
            deep = R._deep_entries(e, max_decompressed=cap)
        except R.DecompressedTooLargeError:
            raise E.MessageTooLargeError(
                f"the compressed message at position {e.position} decompresses to more than {cap} bytes "
                f"({LEGACY_MAX_FACTOR} x max.message.bytes)") from None
        except R.RecordFormatError as err:
            raise _translate(err) from None
        errs = []
        for i, r in enumerate(deep):
            if not r.crc_ok:
                raise E.CorruptRecordError(f"inner message {i} of the wrapper is corrupt (stored crc = {r.crc})")
            if compact and r.key is None:
                errs.append((i, NO_KEY_MESSAGE))
            elif lat_topic:
                if r.timestamp_type == 1:
                    errs.append((i, _LAT_MSG))
            elif r.timestamp != R.NO_TIMESTAMP:
                if _ts_out_of_range(r.timestamp, now, before, after):
                    errs.append((i, _range_msg(r.timestamp, i, now, before, after)))
            elif r.timestamp_type == 1:
                errs.append((i, _LAT_MSG))
        if errs:
            if all(m == NO_KEY_MESSAGE for _, m in errs):
                raise E.InvalidRecordError(
                    f"one or more records have been rejected due to {len(errs)} record errors: "
                    "a compacted topic cannot accept records without a key", errs)
            raise E.InvalidTimestampError(
                "one or more records have been rejected due to invalid timestamp", errs)
        recs.extend(deep)

    items = [R.Record(i, r.timestamp, r.key, r.value, []) for i, r in enumerate(recs)]
    if lat_topic:
        out = R.build_batch(items, compression=codec, timestamp_type=1, log_append_time=now)
    else:
        out = R.build_batch(items, compression=codec)
    if len(out) > max_bytes:
        raise E.MessageTooLargeError(
            f"message batch size {len(out)} bytes after conversion exceeds max.message.bytes {max_bytes}")
    seg = getattr(config, "segment_bytes", None)
    if isinstance(seg, int) and len(out) > seg:
        raise E.RecordListTooLargeError(
            f"append of {len(out)} bytes exceeds the segment size segment.bytes {seg}")
    return out, len(recs)
