"""The log cleaner's work on one partition (Kafka's ``Cleaner``): compact the segments
below the first uncleanable offset into ``.cleaned`` segments, keeping for each key only
the record the compaction strategy picks.

It runs in a cleaner worker process (:mod:`storage.log_cleaner` starts them) and knows the
log only through a :class:`CleanTask` built on the broker's event loop: segment files to
read (inactive, so immutable while the task runs), the dirty range, the aborted
transactions and the producers' last batches. It writes new files and nothing else; the
broker swaps them in (:meth:`storage.log.Log.replace_segments`), so a crash at any point
leaves either the old segments or the new ones (recovery in ``storage.log``).

One clean (``Cleaner.clean``), as Kafka's ``doClean``:

1. **Offset map** (``build_offset_map``): every keyed record of the dirty range
   ``[first_dirty, first_uncleanable)`` is put in a bounded key-hash map
   (:class:`OffsetMap`, ``log.cleaner.dedupe.buffer.size``): key hash -> the winning
   record's offset (and version). Records of aborted transactions are not mapped. When the
   map reaches ``load factor x slots`` keys the mapping stops there; the clean then covers
   only up to that offset (``end_offset``) and the next clean continues from it: a
   partition with more distinct keys than the map holds is cleaned in passes.
2. **Groups** (``group_segments_by_size``): the segments below ``end_offset`` are grouped
   so each group's log and indexes fit ``segment.bytes`` / ``segment.index.bytes`` and its
   offsets fit one segment's int32 relative offsets.
3. **Filter** (``clean_segments``): each group is copied into one ``<first base>.*.cleaned``
   segment (``.log``, ``.index``, ``.timeindex``, ``.txnindex``), batch by batch:

   * a record is kept when it is past the map's latest offset, or it is its key's winner
     and not a tombstone whose batch's delete horizon has passed; keyless records go;
   * strategies (KIP-280, ``compaction.strategy``): ``offset`` (Kafka: the highest
     offset wins), ``timestamp`` (the highest record timestamp, ties by offset),
     ``header`` (the highest 8-byte big-endian value of the ``compaction.strategy.header``
     header, its last occurrence; a record without it, or with another length, loses to
     one with it; ties by offset). A record of the already clean part that beats the
     map's entry takes it over, so an older-version write arriving later never wins;
   * a batch that keeps a tombstone and has no delete horizon gets one (KIP-534:
     ``now + delete.retention.ms`` in baseTimestamp, attribute bit 6); the tombstone is
     dropped by the first clean after it;
   * transactions (Kafka's ``CleanedTransactionMetadata``): batches of aborted
     transactions go; an ABORT marker stays (and keeps its ``.txnindex`` entry) while
     batches of its transaction remain, a COMMIT marker while this clean saw batches of
     its transaction; a marker with nothing left gets a delete horizon and goes after it;
   * a batch emptied of records is dropped, except a producer's last batch (so its epoch
     and sequence survive) and the batch ending just below the first uncleanable offset:
     those stay as empty batches (header only);
   * offsets never change; a rebuilt batch keeps its last offset delta, producer fields
     and codec; record bytes (key, value, headers) are copied as stored.

   Every cleaned segment gets its ``.index`` and ``.timeindex`` built as appends build
   them, from the kept batches' max timestamps (never file times), and is fsync'd.

Hot loops run in :mod:`storage._cleaner` (C) on plain batches (no codec, neither control
nor transactional) straight from the read buffer; other batches come back to Python one
at a time. The ``_py_*`` functions below are the reference for the C loops (same
arguments, same answers; the tests cross-check them) and the fallback when the extension
is not built. They differ only in the key hash (blake2b-128 here, MurmurHash3-128 in C).
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Callable

from protocol import compression as _compression
from protocol import records as R
from storage.offset_index import OffsetIndex
from storage.segment import LOG_OVERHEAD, HEADER_SIZE, LogSegment
from storage.transaction_index import AbortedTxn

try:
    from storage import _cleaner as _C
except ImportError:  # pragma: no cover - exercised when the extension is not built
    _C = None

__all__ = ["CleanTask", "SegmentInfo", "CleanResult", "CleanedGroup", "CleanerStats", "Cleaner", "CleanError",
           "CleaningAborted", "OffsetMap", "PyOffsetMap", "new_offset_map", "group_segments_by_size",
           "STRATEGIES", "COMPILED", "map_slots", "CLEANED_SUFFIX", "SWAP_SUFFIX"]

logger = logging.getLogger(__name__)

COMPILED = _C is not None
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
STRATEGIES = {"offset": 0, "timestamp": 1, "header": 2}
ST_END, ST_PYTHON, ST_FULL = 0, 1, 2
ABSENT = -(1 << 63)  # a header version when the header is missing (it loses to any value)
_INT64_MAX = (1 << 63) - 1
_HEADER_FIELDS = R.COMPRESSION_MASK | R.TIMESTAMP_TYPE_MASK | R.TRANSACTIONAL_MASK | R.CONTROL_MASK


class CleanError(ValueError):
    """A segment the cleaner cannot read (malformed batch or record)."""


class CleaningAborted(Exception):
    """The broker asked this clean to stop (topic deleted, shutdown)."""


# --------------------------------------------------------------------------- the task


@dataclass
class SegmentInfo:
    """What the worker knows of one segment (an inactive one: its files do not change
    while the task runs)."""

    base_offset: int
    size: int  # bytes of its .log
    next_offset: int  # the next segment's base offset
    offset_index_size: int  # bytes of its .index (grouping)
    time_index_size: int  # bytes of its .timeindex
    largest_timestamp: int = -1  # its records' largest timestamp (-1: none)


@dataclass
class CleanTask:
    topic: str
    partition: int
    dir: str
    segments: list  # [SegmentInfo] every segment below first_uncleanable_offset, in order
    first_dirty_offset: int
    first_uncleanable_offset: int
    now_ms: int
    delete_retention_ms: int
    segment_bytes: int
    segment_index_bytes: int
    index_interval_bytes: int
    max_message_bytes: int
    strategy: str = "offset"
    strategy_header: str = ""
    aborted: list = field(default_factory=list)  # [AbortedTxn] overlapping the segments
    # Kafka's lastRecordsOfActiveProducers: producer id -> (last data offset or None, epoch)
    producers: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass
class CleanedGroup:
    old_bases: list  # base offsets of the segments the cleaned one replaces
    new_base: int
    size: int


@dataclass
class CleanerStats:
    start_s: float = field(default_factory=time.monotonic)
    map_done_s: float = -1.0
    end_s: float = -1.0
    bytes_read: int = 0
    bytes_written: int = 0
    map_bytes_read: int = 0
    map_messages_read: int = 0
    messages_read: int = 0
    invalid_messages: int = 0
    messages_written: int = 0
    buffer_utilization: float = 0.0
    peak_rss_bytes: int = 0  # the worker process's peak resident memory (set by the worker)

    @property
    def elapsed_s(self) -> float:
        return max(self.end_s - self.start_s, 1e-9)

    @property
    def elapsed_map_s(self) -> float:
        return max(self.map_done_s - self.start_s, 0.0)


@dataclass
class CleanResult:
    end_offset: int  # the first offset not cleaned: the partition's new cleaner checkpoint
    groups: list  # [CleanedGroup], in offset order
    stats: CleanerStats


# --------------------------------------------------------------------------- offset map


def _hash(key) -> bytes:
    return hashlib.blake2b(key, digest_size=16).digest()


class PyOffsetMap:
    """The reference of ``storage._cleaner.OffsetMap``: same interface and bounds (a
    dict stands for the slots; the key is a 128-bit hash, never the key itself)."""

    def __init__(self, slots: int, versioned: bool = False):
        if slots < 1:
            raise ValueError("an offset map needs at least one slot")
        self.slots = slots
        self.versioned = bool(versioned)
        self._d: dict[bytes, list] = {}
        self.latest_offset = -1

    @property
    def size(self) -> int:
        return len(self._d)

    def clear(self) -> None:
        self._d.clear()
        self.latest_offset = -1

    def _put(self, h: bytes, offset: int, version: int) -> None:
        e = self._d.get(h)
        if e is None:
            if len(self._d) >= self.slots:
                return
            self._d[h] = [offset, version if self.versioned else 0]
        elif not self.versioned or version >= e[1]:
            e[0], e[1] = offset, version if self.versioned else 0
        self.latest_offset = offset

    def put(self, key, offset: int, version: int = 0) -> None:
        if offset < 0:
            raise ValueError("offsets are >= 0")
        h = _hash(key)
        if h not in self._d and len(self._d) >= self.slots:
            raise OverflowError("the offset map is full")
        self._put(h, offset, version)

    def get(self, key):
        e = self._d.get(_hash(key))
        return None if e is None else (e[0], e[1])


OffsetMap = _C.OffsetMap if _C is not None else PyOffsetMap


def map_slots(memory_bytes: int, versioned: bool) -> int:
    """Slots a map of ``memory_bytes`` holds (Kafka's SkimpyOffsetMap: hash + offset per
    slot, 24 bytes; 32 with the KIP-280 version)."""
    return max(1, int(memory_bytes) // (32 if versioned else 24))


def new_offset_map(slots: int, versioned: bool, compiled: bool = True):
    return (_C.OffsetMap if compiled and _C is not None else PyOffsetMap)(slots, versioned)


# --------------------------------------------------------------------------- reference loops


def _version(strategy: int, header: bytes, r: R.RawRecord) -> int:
    if strategy == 1:
        return r.timestamp
    if strategy == 2:
        v = ABSENT
        for hk, hv in r.headers:
            if hk == header:
                v = int.from_bytes(hv, "big", signed=True) if hv is not None and len(hv) == 8 else ABSENT
        return v
    return 0


def _raw_records(data, count, base_offset, base_ts, lat, max_ts):
    try:
        return list(R.iter_raw_records(data, count, base_offset, base_ts, max_ts if lat else None))
    except R.RecordFormatError as e:
        raise CleanError(str(e)) from None


def _py_map_records(m, data, count, base_offset, base_ts, lat, max_ts, start_offset, strategy, header,
                    max_entries):
    read = 0
    for r in _raw_records(data, count, base_offset, base_ts, lat, max_ts):
        if r.key is not None and r.offset >= start_offset:
            if m.size >= max_entries:
                return True, read
            m._put(_hash(r.key), r.offset, _version(strategy, header, r))
        read += 1
    return False, read


def _py_retain(m, strategy, header, r, latest, horizon, now):
    """(retain?, invalid?) of one record; a versioned winner of the clean part takes the
    map's entry over (see the module docstring)."""
    if r.offset > latest:
        return True, False
    if r.key is None:
        return False, True
    e = m._d.get(_hash(r.key))
    if e is None:
        latest_for_key = True
    elif not m.versioned:
        latest_for_key = r.offset >= e[0]
    else:
        v = _version(strategy, header, r)
        latest_for_key = v > e[1] or (v == e[1] and r.offset >= e[0])
        if v > e[1] or (v == e[1] and r.offset > e[0]):
            e[0], e[1] = r.offset, v
    if not latest_for_key:
        return False, False
    return r.has_value or horizon is None or now < horizon, False


def _py_filter_records(m, data, count, base_offset, base_ts, lat, max_ts, latest, horizon, now, set_horizon,
                       strategy, header):
    """-> (retained, tombstones, all_retained, records bytes or None, base_ts, max_ts,
    horizon_flag, invalid): as ``storage._cleaner.filter_records``."""
    recs = _raw_records(data, count, base_offset, base_ts, lat, max_ts)
    kept, invalid = [], 0
    for r in recs:
        keep, bad = _py_retain(m, strategy, header, r, latest, horizon, now)
        invalid += bad
        if keep:
            kept.append(r)
    tombstones = sum(1 for r in kept if not r.has_value)
    all_retained = len(kept) == len(recs)
    set_new = set_horizon is not None and tombstones > 0 and horizon is None
    new_max = max_ts if lat else max((r.timestamp for r in kept), default=-1)
    if kept and (not all_retained or set_new):
        new_base = set_horizon if set_new else (horizon if horizon is not None else kept[0].timestamp)
        payload = R.encode_raw_records(kept, base_offset, new_base)
        return (len(kept), tombstones, all_retained, payload, new_base, new_max, set_new or horizon is not None,
                invalid)
    return len(kept), tombstones, all_retained, None, base_ts, new_max, False, invalid


def _is_plain(h) -> bool:
    return not h.attributes & (R.COMPRESSION_MASK | R.TRANSACTIONAL_MASK | R.CONTROL_MASK)


def _batch_at(buf, pos):
    """The header of the whole batch at ``pos``, or None when the buffer ends first."""
    if len(buf) - pos < HEADER_SIZE:
        return None
    try:
        h = R.parse_batch_header(buf, pos)
    except R.CorruptRecordError as e:
        raise CleanError(str(e)) from None
    if h.batch_length + LOG_OVERHEAD > len(buf) - pos:
        return None
    return h


def _payload(buf, pos, h):
    return memoryview(buf)[pos + HEADER_SIZE:pos + h.batch_length + LOG_OVERHEAD]


def _py_map_batches(m, buf, pos, start_offset, strategy, header, max_entries):
    read = nbytes = 0
    while True:
        h = _batch_at(buf, pos)
        if h is None:
            return pos, ST_END, read, nbytes
        if not _is_plain(h):
            return pos, ST_PYTHON, read, nbytes
        try:
            full, n = _py_map_records(m, _payload(buf, pos, h), h.records_count, h.base_offset, h.base_timestamp,
                                      bool(h.attributes & R.TIMESTAMP_TYPE_MASK), h.max_timestamp, start_offset,
                                      strategy, header, max_entries)
        except CleanError as e:
            raise CleanError(f"batch at offset {h.base_offset}: {e}") from None
        read += n
        if full:
            return pos, ST_FULL, read, nbytes
        if h.last_offset >= start_offset:
            m.latest_offset = h.last_offset
        pos += h.size
        nbytes += h.size


def _rebuild(h, records: bytes, count: int, base_ts: int, max_ts: int, horizon_flag: bool) -> bytes:
    attrs = (h.attributes & ~R.DELETE_HORIZON_MASK) | (R.DELETE_HORIZON_MASK if horizon_flag else 0)
    return R.assemble_batch(base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
                            partition_leader_epoch=h.partition_leader_epoch, attributes=attrs, base_timestamp=base_ts,
                            max_timestamp=max_ts, producer_id=h.producer_id, producer_epoch=h.producer_epoch,
                            base_sequence=h.base_sequence, records_count=count, records=records)


def _py_filter_batches(m, buf, pos, now, retention, protected, upper, strategy, header):
    out = bytearray()
    infos = []
    read = bytes_read = kept = bytes_kept = invalid = 0
    set_horizon = min(now + retention, _INT64_MAX)
    last_pos = -1
    while True:
        h = _batch_at(buf, pos)
        if h is None:
            status = ST_END
            break
        if not _is_plain(h):
            status = ST_PYTHON
            break
        last_pos = pos
        lat = bool(h.attributes & R.TIMESTAMP_TYPE_MASK)
        try:
            res = _py_filter_records(m, _payload(buf, pos, h), h.records_count, h.base_offset, h.base_timestamp, lat,
                                     h.max_timestamp, m.latest_offset, h.delete_horizon_ms, now, set_horizon,
                                     strategy, header)
        except CleanError as e:
            raise CleanError(f"batch at offset {h.base_offset}: {e}") from None
        retained, _tomb, _all, payload, base_ts, max_ts, flag, bad = res
        invalid += bad
        read += h.records_count
        bytes_read += h.size
        at = len(out)
        if retained == 0:
            keep_empty = h.last_offset + 1 == upper or (
                h.producer_id >= 0 and protected is not None and h.last_offset in protected)
            if not keep_empty:
                pos += h.size
                continue
            out += R.build_empty_batch(h)
            out_max = h.max_timestamp
        elif payload is None:
            out += bytes(buf[pos:pos + h.size])
            out_max = h.max_timestamp
        else:
            out += _rebuild(h, payload, retained, base_ts, max_ts, flag)
            out_max = max_ts
        kept += retained
        bytes_kept += len(out) - at
        infos.append((at, len(out) - at, h.last_offset, out_max))
        pos += h.size
    return pos, status, bytes(out), infos, (read, bytes_read, kept, bytes_kept, invalid), last_pos


class _PyImpl:
    map_batches = staticmethod(_py_map_batches)
    map_records = staticmethod(_py_map_records)
    filter_batches = staticmethod(_py_filter_batches)
    filter_records = staticmethod(_py_filter_records)
    CleanError = CleanError


# --------------------------------------------------------------------------- transactions


class _AbortedMeta:
    __slots__ = ("txn", "last_observed")

    def __init__(self, txn: AbortedTxn):
        self.txn = txn
        self.last_observed: int | None = None


class CleanedTransactionMetadata:
    """Kafka's CleanedTransactionMetadata: which transaction batches and markers a clean
    may drop, walking the log in offset order; retained ABORT markers are re-indexed in
    the cleaned segment's ``.txnindex``."""

    def __init__(self):
        self.ongoing_committed: set[int] = set()
        self.ongoing_aborted: dict[int, _AbortedMeta] = {}
        self._heap: list = []
        self._seen: set = set()
        self.cleaned_index = None  # the .txnindex of the segment being written

    def add_aborted(self, txns) -> None:
        for t in txns:
            k = (t.producer_id, t.first_offset)
            if k not in self._seen:
                self._seen.add(k)
                heapq.heappush(self._heap, (t.first_offset, t.last_offset, t.producer_id, t))

    def _consume_up_to(self, offset: int) -> None:
        heap = self._heap
        while heap and heap[0][0] <= offset:
            t = heapq.heappop(heap)[3]
            self.ongoing_aborted.setdefault(t.producer_id, _AbortedMeta(t))

    def on_control_batch(self, h, records) -> bool:
        """True when the marker may be discarded."""
        self._consume_up_to(h.last_offset)
        if not records:
            return True  # an empty control batch was already cleaned
        try:
            ctype, _epoch = R.parse_control_record(records[0].key, None)
        except R.CorruptRecordError:
            return False
        pid = h.producer_id
        if ctype == R.CONTROL_ABORT:
            meta = self.ongoing_aborted.pop(pid, None)
            if meta is not None and meta.last_observed is not None:
                if self.cleaned_index is not None:
                    self.cleaned_index.append(meta.txn)
                return False
            return True
        if ctype == R.CONTROL_COMMIT:
            if pid in self.ongoing_committed:
                self.ongoing_committed.discard(pid)
                return False
            return True
        return False

    def on_batch(self, h) -> bool:
        """True when the batch belongs to an aborted transaction (drop it)."""
        self._consume_up_to(h.last_offset)
        if not h.is_transactional:
            return False
        meta = self.ongoing_aborted.get(h.producer_id)
        if meta is not None:
            meta.last_observed = h.last_offset
            return True
        self.ongoing_committed.add(h.producer_id)
        return False


# --------------------------------------------------------------------------- grouping


def group_segments_by_size(segments, max_size: int, max_index_size: int, first_uncleanable: int) -> list:
    """Kafka's groupSegmentsBySize: consecutive segments whose total log, offset index and
    time index sizes stay within ``segment.bytes`` / ``segment.index.bytes`` and whose
    offsets fit one segment's relative offsets."""
    groups = []
    segs = list(segments)
    i = 0
    while i < len(segs):
        group = [segs[i]]
        log_size, idx_size, tidx_size = segs[i].size, segs[i].offset_index_size, segs[i].time_index_size
        i += 1
        while i < len(segs):
            s = segs[i]
            last = segs[i + 1].base_offset - 1 if i + 1 < len(segs) else first_uncleanable - 1
            if (log_size + s.size <= max_size and idx_size + s.offset_index_size <= max_index_size
                    and tidx_size + s.time_index_size <= max_index_size
                    and (s.size == 0 or last - group[0].base_offset <= 0x7FFFFFFF)):
                group.append(s)
                log_size += s.size
                idx_size += s.offset_index_size
                tidx_size += s.time_index_size
                i += 1
            else:
                break
        groups.append(group)
    return groups


# --------------------------------------------------------------------------- I/O


class Throttler:
    """log.cleaner.io.max.bytes.per.second: after each read or write the cleaner sleeps
    long enough to keep its average rate at or under the limit (checked per 300 ms
    window, as Kafka's Throttler). Clock and sleep are injected (tests)."""

    def __init__(self, rate: float, clock=time.monotonic, sleep=time.sleep, window_s: float = 0.3):
        self.rate = float(rate)
        self.clock = clock
        self.sleep = sleep
        self.window_s = window_s
        self._start = clock()
        self._bytes = 0
        self.slept_s = 0.0

    def maybe_throttle(self, n: int) -> None:
        if self.rate >= 1e300 or self.rate <= 0:
            return
        self._bytes += n
        now = self.clock()
        elapsed = now - self._start
        if elapsed >= self.window_s or self._bytes > self.rate * self.window_s:
            needed = self._bytes / self.rate
            if needed > elapsed:
                self.sleep(needed - elapsed)
                self.slept_s += needed - elapsed
            self._start = self.clock()
            self._bytes = 0


class _SegmentReader:
    """Reads one segment's .log by path, in buffers of whole batches."""

    def __init__(self, path: str, size: int):
        self.path = path
        self.size = size
        self.fd = os.open(path, os.O_RDONLY)

    def read(self, pos: int, n: int) -> bytes:
        return os.pread(self.fd, min(n, self.size - pos), pos)

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Appended:
    """What LogSegment.append needs of a ValidatedAppend (as Kafka, a batch kept empty
    counts with its maxTimestamp in the cleaned segment's largest timestamp and time
    index)."""

    __slots__ = ("buffer", "batches", "last_offset", "max_timestamp")

    class B:
        __slots__ = ("position", "size", "last_offset", "max_timestamp")

        def __init__(self, position, size, last_offset, max_timestamp):
            self.position, self.size, self.last_offset, self.max_timestamp = position, size, last_offset, max_timestamp

    def __init__(self, buffer, infos):
        self.buffer = buffer
        self.batches = [self.B(*i) for i in infos]
        self.last_offset = infos[-1][2]
        self.max_timestamp = max(b.max_timestamp for b in self.batches)


# --------------------------------------------------------------------------- the cleaner


class Cleaner:
    """Cleans one log at a time with its offset map (see the module docstring).

    ``check_done()`` is called between buffers and raises CleaningAborted to stop;
    ``hook(step, **info)`` (tests) is called after each durable step: ``"cleaned"`` once a
    group's ``.cleaned`` files are written and fsync'd."""

    def __init__(self, offset_map, *, load_factor: float = 0.9, io_buffer_size: int = 512 * 1024,
                 throttler: Throttler | None = None, check_done: Callable[[], None] | None = None,
                 hook: Callable | None = None, compiled: bool = True):
        self.map = offset_map
        self.load_factor = load_factor
        self.io_buffer_size = max(int(io_buffer_size), HEADER_SIZE)
        self.throttler = throttler or Throttler(float("inf"))
        self.check_done = check_done or (lambda: None)
        self.hook = hook or (lambda step, **info: None)
        self.impl = _C if (compiled and _C is not None and isinstance(offset_map, _C.OffsetMap)) else _PyImpl

    # ------------------------------------------------------------------ entry point
    def clean(self, task: CleanTask) -> CleanResult:
        stats = CleanerStats()
        strategy = STRATEGIES.get(task.strategy, 0)
        header = task.strategy_header.encode("utf-8")
        if strategy == 2 and not header:
            strategy = 0  # KIP-280: the header strategy without a header is offset order
        if strategy and not self.map.versioned:
            raise ValueError(f"compaction.strategy={task.strategy} needs a versioned offset map")
        self._strategy, self._header = strategy, header
        logger.info("%s: building the offset map for [%d, %d)", task.name, task.first_dirty_offset,
                    task.first_uncleanable_offset)
        self.build_offset_map(task, stats)
        end_offset = self.map.latest_offset + 1
        stats.map_done_s = time.monotonic()
        segments = [s for s in task.segments if s.base_offset < end_offset]
        groups = group_segments_by_size(segments, task.segment_bytes, task.segment_index_bytes,
                                        task.first_uncleanable_offset)
        txn = CleanedTransactionMetadata()
        protected = {off for off, _epoch in task.producers.values() if off is not None}
        cleaned = []
        for g in groups:
            cleaned.append(self.clean_segments(task, g, txn, stats, protected))
        stats.buffer_utilization = self.map.size / max(1, self.map.slots)
        stats.end_s = time.monotonic()
        return CleanResult(end_offset, cleaned, stats)

    # ------------------------------------------------------------------ phase 1: the map
    def build_offset_map(self, task: CleanTask, stats: CleanerStats) -> None:
        m = self.map
        m.clear()
        start, end = task.first_dirty_offset, task.first_uncleanable_offset
        dirty = [s for s in task.segments if s.base_offset < end and s.next_offset > start]
        txn = CleanedTransactionMetadata()
        txn.add_aborted(t for t in task.aborted if t.last_offset >= start and t.first_offset < end)
        max_entries = int(m.slots * self.load_factor)
        for i, seg in enumerate(dirty):
            next_start = dirty[i + 1].base_offset if i + 1 < len(dirty) else end
            self.check_done()
            if self._map_segment(task, seg, start, txn, stats, max_entries):
                logger.debug("%s: offset map full after %d key(s); segment %d partially mapped", task.name,
                             m.size, seg.base_offset)
                return
            m.latest_offset = next_start - 1  # Kafka: fast forward over an offset gap

    def _start_position(self, task: CleanTask, seg: SegmentInfo, start_offset: int) -> int:
        if start_offset <= seg.base_offset:
            return 0
        path = os.path.join(task.dir, f"{seg.base_offset:020d}.index")
        try:
            idx = OffsetIndex(path, seg.base_offset, writable=False)
        except (OSError, ValueError):
            return 0
        try:
            return idx.lookup(start_offset).position
        except Exception:
            return 0
        finally:
            idx.close()

    def _walk_segment(self, task, seg, start_pos: int, process) -> bool:
        """Read a segment's .log from ``start_pos`` in buffers of whole batches (one larger
        batch read whole, as Kafka's growBuffersOrFail); ``process(path, buf)`` returns
        (bytes of whole batches it used, whether to stop). True when it stopped the walk."""
        reader = _SegmentReader(os.path.join(task.dir, f"{seg.base_offset:020d}.log"), seg.size)
        try:
            file_pos = start_pos
            bufsize = self.io_buffer_size
            while file_pos < seg.size:
                self.check_done()
                buf = reader.read(file_pos, bufsize)
                self.throttler.maybe_throttle(len(buf))
                used, stop = process(reader.path, buf)
                if stop:
                    return True
                if used == 0:
                    bufsize = self._grow(reader, buf, file_pos, bufsize, task)
                    continue
                file_pos += used
                bufsize = self.io_buffer_size
            return False
        finally:
            reader.close()

    def _map_segment(self, task, seg, start_offset, txn, stats, max_entries) -> bool:
        impl, m = self.impl, self.map

        def process(path, buf):
            pos = 0
            while True:
                try:
                    pos, status, read, nbytes = impl.map_batches(m, buf, pos, start_offset, self._strategy,
                                                                 self._header, max_entries)
                except impl.CleanError as e:
                    raise CleanError(f"{path}: {e}") from None
                stats.map_messages_read += read
                stats.map_bytes_read += nbytes
                if status == ST_FULL:
                    return pos, True
                if status == ST_END:
                    return pos, False
                h = R.parse_batch_header(buf, pos)
                if self._map_python_batch(task, path, buf, pos, h, start_offset, txn, stats, max_entries):
                    return pos, True
                pos += h.size
                stats.map_bytes_read += h.size

        return self._walk_segment(task, seg, self._start_position(task, seg, start_offset), process)

    def _map_python_batch(self, task, path, buf, pos, h, start_offset, txn, stats, max_entries) -> bool:
        m = self.map
        if h.is_control:
            txn.on_control_batch(h, self._records(path, buf, pos, h))
            stats.map_messages_read += 1
        elif txn.on_batch(h):
            stats.map_messages_read += max(h.records_count, 0)
        else:
            data = self._decompressed(path, buf, pos, h)
            try:
                full, read = self.impl.map_records(m, data, h.records_count, h.base_offset, h.base_timestamp,
                                                   bool(h.attributes & R.TIMESTAMP_TYPE_MASK), h.max_timestamp,
                                                   start_offset, self._strategy, self._header, max_entries)
            except self.impl.CleanError as e:
                raise CleanError(f"{path}: batch at offset {h.base_offset}: {e}") from None
            stats.map_messages_read += read
            if full:
                return True
        if h.last_offset >= start_offset:
            m.latest_offset = h.last_offset
        return False

    def _grow(self, reader, buf, file_pos, bufsize, task) -> int:
        """A batch larger than the buffer: read it whole (Kafka's growBuffersOrFail)."""
        if len(buf) < LOG_OVERHEAD:
            raise CleanError(f"{reader.path}: {len(buf)} byte(s) left at position {file_pos}: a torn batch")
        need = int.from_bytes(buf[8:12], "big", signed=True) + LOG_OVERHEAD
        if need <= bufsize or need > reader.size - file_pos:
            raise CleanError(f"{reader.path}: the batch at position {file_pos} declares {need} bytes, "
                             f"{reader.size - file_pos} left in the segment: it may be corrupt")
        return need

    def _decompressed(self, path, buf, pos, h):
        payload = _payload(buf, pos, h)
        if h.compression == 0:
            return payload
        try:
            return _compression.decompress_stored(h.compression, payload)
        except _compression.CompressionError as e:
            raise CleanError(f"{path}: cannot decompress the batch at offset {h.base_offset}: {e}") from None

    def _records(self, path, buf, pos, h) -> list:
        lat = h.max_timestamp if h.attributes & R.TIMESTAMP_TYPE_MASK else None
        try:
            return list(R.iter_raw_records(self._decompressed(path, buf, pos, h), h.records_count, h.base_offset,
                                           h.base_timestamp, lat))
        except R.RecordFormatError as e:
            raise CleanError(f"{path}: batch at offset {h.base_offset}: {e}") from None

    # ------------------------------------------------------------------ phase 2: filter
    def clean_segments(self, task: CleanTask, group: list, txn: CleanedTransactionMetadata, stats: CleanerStats,
                       protected: set) -> CleanedGroup:
        base = group[0].base_offset
        for ext in (".log", ".index", ".timeindex", ".txnindex"):
            stale = os.path.join(task.dir, f"{base:020d}{ext}{CLEANED_SUFFIX}")
            if os.path.exists(stale):
                os.unlink(stale)
        cleaned = LogSegment(task.dir, base, index_interval_bytes=task.index_interval_bytes,
                             max_index_size=task.segment_index_bytes, suffix=CLEANED_SUFFIX)
        ok = False
        try:
            txn.cleaned_index = cleaned.txn_index
            self._last_header = None
            for i, seg in enumerate(group):
                upper = group[i + 1].base_offset if i + 1 < len(group) else seg.next_offset
                txn.add_aborted(t for t in task.aborted if t.last_offset >= seg.base_offset and t.first_offset < upper)
                logger.debug("%s: cleaning segment %d into %d", task.name, seg.base_offset, base)
                self._clean_into(task, seg, cleaned, txn, stats, protected)
            if cleaned.size == 0 and self._last_header is not None:
                # nothing of the group survived: its last batch stays, emptied, so the
                # segment keeps its last offset and a record time (never a file time)
                h = self._last_header
                out = R.build_empty_batch(h)
                self._write(cleaned, out, [(0, len(out), h.last_offset, h.max_timestamp)], stats)
            cleaned.on_become_inactive()
            cleaned.flush()
            size = cleaned.size
            ok = True
        finally:
            txn.cleaned_index = None
            cleaned.close_handlers() if not ok else cleaned.close()
            if not ok:
                cleaned.delete()
        self.hook("cleaned", base=base)
        return CleanedGroup([s.base_offset for s in group], base, size)

    def _clean_into(self, task, seg, dest: LogSegment, txn, stats, protected) -> None:
        impl, m = self.impl, self.map
        upper = task.first_uncleanable_offset

        def process(path, buf):
            pos = 0
            while True:
                try:
                    pos, status, out, infos, counts, last_pos = impl.filter_batches(
                        m, buf, pos, task.now_ms, task.delete_retention_ms, protected, upper, self._strategy,
                        self._header)
                except impl.CleanError as e:
                    raise CleanError(f"{path}: {e}") from None
                if last_pos >= 0:
                    self._last_header = R.parse_batch_header(buf, last_pos)
                read, bytes_read, kept, _bytes_kept, invalid = counts
                stats.messages_read += read
                stats.bytes_read += bytes_read
                stats.messages_written += kept
                stats.invalid_messages += invalid
                self._write(dest, out, infos, stats)
                if status == ST_END:
                    return pos, False
                h = self._last_header = R.parse_batch_header(buf, pos)
                out, info, kept = self._filter_python_batch(task, path, buf, pos, h, txn, stats, protected)
                stats.messages_read += max(h.records_count, 0)
                stats.bytes_read += h.size
                stats.messages_written += kept
                if out is not None:
                    self._write(dest, out, [info], stats)
                pos += h.size

        self._walk_segment(task, seg, 0, process)

    def _write(self, dest: LogSegment, out, infos, stats) -> None:
        if not infos:
            return
        dest.append(_Appended(out, infos))
        stats.bytes_written += len(out)
        self.throttler.maybe_throttle(len(out))

    def _filter_python_batch(self, task, path, buf, pos, h, txn, stats, protected):
        """Kafka's checkBatchRetention + filterTo for one control, transactional or
        compressed batch. Returns (bytes or None, (0, size, last offset, max ts), kept)."""
        now = task.now_ms
        if h.is_control:
            records = self._records(path, buf, pos, h)
            can_discard = txn.on_control_batch(h, records)
            horizon = h.delete_horizon_ms
            discard_records = can_discard and horizon is not None and horizon <= now
        else:
            records = None
            can_discard = txn.on_batch(h)
            discard_records = can_discard
        last_of_producer = False
        if h.producer_id >= 0:
            entry = task.producers.get(h.producer_id)
            if entry is not None:
                last_data, epoch = entry
                last_of_producer = (h.last_offset == last_data) if last_data is not None else (
                    h.is_control and h.producer_epoch == epoch)
        if last_of_producer or h.last_offset + 1 == task.first_uncleanable_offset:
            retention = "retain_empty"
        elif discard_records:
            return None, None, 0
        else:
            retention = "delete_empty"
        marker_for_empty_txn = can_discard and h.is_control
        set_horizon = min(now + task.delete_retention_ms, _INT64_MAX)
        if discard_records:
            kept = 0
        elif h.is_control:
            kept = len(records)
            need = marker_for_empty_txn and h.delete_horizon_ms is None and kept > 0
            if need:
                payload = R.encode_raw_records(records, h.base_offset, set_horizon)
                max_ts = (h.max_timestamp if h.attributes & R.TIMESTAMP_TYPE_MASK
                          else max(r.timestamp for r in records))
                out = _rebuild(h, payload, kept, set_horizon, max_ts, True)
                return out, (0, len(out), h.last_offset, max_ts), kept
            if kept:
                return bytes(buf[pos:pos + h.size]), (0, h.size, h.last_offset, h.max_timestamp), kept
        else:
            data = self._decompressed(path, buf, pos, h)
            lat = bool(h.attributes & R.TIMESTAMP_TYPE_MASK)
            try:
                res = self.impl.filter_records(self.map, data, h.records_count, h.base_offset, h.base_timestamp, lat,
                                               h.max_timestamp, self.map.latest_offset, h.delete_horizon_ms, now,
                                               set_horizon, self._strategy, self._header)
            except self.impl.CleanError as e:
                raise CleanError(f"{path}: batch at offset {h.base_offset}: {e}") from None
            kept, _tombstones, _all, payload, base_ts, max_ts, flag, invalid = res
            stats.invalid_messages += invalid
            if kept and payload is None:
                return bytes(buf[pos:pos + h.size]), (0, h.size, h.last_offset, h.max_timestamp), kept
            if kept:
                if h.compression:
                    payload = _compression.compress(h.compression, payload)
                out = _rebuild(h, payload, kept, base_ts, max_ts, flag)
                return out, (0, len(out), h.last_offset, max_ts), kept
        if retention == "retain_empty":
            out = R.build_empty_batch(h)
            return out, (0, len(out), h.last_offset, h.max_timestamp), 0
        return None, None, 0
