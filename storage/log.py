"""One partition's log: a directory ``<topic>-<partition>`` of segments.

Files: ``<base offset, 20 digits>.log`` / ``.index`` / ``.timeindex`` per segment (byte
formats in :mod:`storage.segment`, :mod:`storage.offset_index`,
:mod:`storage.time_index`).  The last segment is the active one; its indexes are kept
at their preallocated size (``segment.index.bytes``) while active and trimmed when it is
rolled or the log is closed.

Loading (this milestone; full recovery with a clean-shutdown marker comes next):

* an interrupted clean is rolled back or completed, as Kafka's LogLoader does:
  ``.deleted`` and ``.cleaned`` files are removed, and so are ``.swap`` files at or
  above the lowest ``.cleaned`` offset (their rename from ``.cleaned`` did not finish);
  the remaining ``.swap`` segment replaces every segment whose base offset lies in its
  offset range and is renamed into place; index files without a ``.log`` are removed;
* a segment whose index is missing or fails its sanity check (size not a multiple of
  the entry size, zero-filled preallocated tail, entries going backwards or beyond the
  log) is rebuilt by scanning its batches; if that cuts bytes off a segment that is not
  the last, the later segments are deleted;
* the last segment's batches after its last offset-index entry are validated (length,
  magic, CRC) and indexed, a torn trailing batch is cut off, and the log end offset is
  recomputed from the last whole batch.  After a process kill the active segment's
  index still has its zero-filled preallocated tail, so the whole active segment is
  rebuilt (as Kafka recovers everything after the recovery point).

Idempotent producers (:mod:`storage.producer_state`): every append of batches with a
producer id is checked against the partition's producer state before anything is written
(a duplicate of one of a producer's last 5 batches is not written again and the append
answers with the original offsets, ``AppendInfo.duplicate``); the state is updated after
the write.  ``<offset>.snapshot`` files: one at each rolled segment's base offset, one at
the log end on clean close; loading reads the latest snapshot at or below the log end
and replays the batches after it (nothing when the clean-close snapshot is at the end).
A log of one segment with no snapshot and no producer state has none written at all
(``Log._snapshot_needless``): its clean start has nothing to read either.

Transactions (:meth:`Log.append_end_txn_marker`, the coordinator's path): a COMMIT or
ABORT marker ends a producer's transaction; an abort is indexed in the marker segment's
``.txnindex`` (:mod:`storage.transaction_index`); :attr:`Log.last_stable_offset` is the
first offset of the oldest ongoing transaction, else the high watermark;
:meth:`Log.collect_aborted_txns` serves read_committed fetches. After a crash the
recovered segments are replayed whole from a snapshot at or before the first of them
(later snapshots are dropped), so ongoing transactions and ``.txnindex`` entries lost
with the process come back from the markers in the log.

Compaction (:meth:`Log.replace_segments`): the log cleaner writes a group of segments
into ``<base>.*.cleaned`` files; the swap renames them ``.swap`` (log first, then the
indexes) and fsyncs the directory (the commit point), renames the old segments
``.deleted`` (removed ``file.delete.delay.ms`` later; reads already holding them finish),
then renames the ``.swap`` files to their final names.

Writes reach the page cache before ``append`` returns (``os.pwrite``), so acknowledged
data survives a process kill without fsync; fsync happens per ``flush.messages`` (in
``append``), and in the periodic flush (LogManager.start_flushes) for ``flush.ms`` and
for rolled segments, as Kafka's log flusher and its flush on roll run in the background:
``start_flush`` / ``start_rolled_flush`` open descriptors of the files,
``fsync_flushes`` fsyncs them on the broker's worker thread, ``finish_flush`` moves the
recovery point.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import re
import shutil
import struct
import time
from typing import NamedTuple

from protocol.records import ATTRIBUTES_OFFSET, TRANSACTIONAL_MASK
from storage.checkpoint import fsync_dir
from storage.errors import KafkaStorageError, OffsetOutOfRangeError, RecordListTooLargeError
from storage.file_slice import FileSlice
from storage.index import AbstractIndex, CorruptIndexError
from storage import partition_metadata
from storage.leader_epoch_cache import UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.producer_state import (DEFAULT_PRODUCER_ID_EXPIRATION_MS, ProducerBatch, ProducerStateEntry,
                                    ProducerStateManager, _new_batch_metadata)
from storage.transaction_index import AbortedTxn
from storage.validator import rules_of, validate_common
from storage.segment import (
    _UNKNOWN,
    LogSegment,
    _LogFile,
    OffsetAndTimestamp,
    log_file_name,
    offset_index_file_name,
    time_index_file_name,
)

__all__ = ["Log", "AppendInfo", "FetchDataInfo", "parse_topic_partition_dir"]

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
_TEMP_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)\.(deleted|cleaned|swap)$")
_TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
CLEANED_SUFFIX = ".cleaned"
SWAP_SUFFIX = ".swap"
_TIMESTAMP_TYPE_BIT = 0x08
_PRODUCER_ID_OFFSET = 43  # of the int64 producerId in a v2 batch header
_LONG_MAX = (1 << 63) - 1
_PRODUCER_FIELDS = struct.Struct(">qhi")  # producerId, producerEpoch, baseSequence (at 43)
_ATTRIBUTES_LOW_BYTE = ATTRIBUTES_OFFSET + 1  # of the big-endian int16 attributes


def _tell_nobody(log: "Log") -> None:
    """Log.on_background of a log no log manager adopted."""


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int
    max_timestamp: int
    # True when the append was a retry of batches already in the log: nothing was
    # written and the offsets/timestamp are those of the original batch (Kafka's
    # duplicate answer: log_append_time is that batch's max timestamp)
    duplicate: bool = False


#: ``AppendInfo._make`` without its Python-level frame (one per append)
_new_append_info = functools.partial(tuple.__new__, AppendInfo)


def _append_one_not_compiled(log, va, now_ms, producer_checked=False):
    """``storage._append.append_one`` when the extension is not built: never the
    case it takes, so :meth:`Log.append_produced` always goes through ``Log._append``."""
    return None


try:  # storage/_append.c: Log._append's common one-batch case in one call (set up below Log)
    from storage import _append as _compiled_append
except ImportError:  # pragma: no cover - the normal install builds it
    _compiled_append = None
_append_one = _append_one_not_compiled if _compiled_append is None else _compiled_append.append_one


def _append_produced_not_compiled(log, records, now_ms: int, max_batches: int):
    """:meth:`Log.append_produced` in Python: the reference of storage/_append.c's
    ``append_produced``, and the way when it is not built."""
    if log._closed:
        return None
    va = validate_common(records, log._validation_rules, now_ms, log._leo, log._last_append_time_ms,
                         log._epochs.latest_epoch, max_batches)
    if va is None:
        return None
    # one batch without a producer id into a segment needing no roll and no index
    # entry: storage/_append.c does what _append does for it (None: not that case)
    return _append_one(log, va, now_ms) or log._append(va, now_ms, False)


#: Log.append_produced's body: storage/_append.c's, else the Python one above (set below Log)
_append_produced = _append_produced_not_compiled
#: whether storage/_append.c is built (the broker warns at start when it is not)
APPEND_COMPILED = _compiled_append is not None


class FetchDataInfo(NamedTuple):
    records: FileSlice | None
    high_watermark: int
    log_start_offset: int


#: ``FetchDataInfo._make`` without its Python-level ``__new__`` (one per fetched partition)
_new_fetch_data_info = functools.partial(tuple.__new__, FetchDataInfo)


def parse_topic_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; None if the name is not of that form."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    return topic, int(part)


class LogFlush:
    """A log's flush taken apart so that its fsyncs run off the event loop
    (Log.start_rolled_flush, Log.start_flush): the offset the recovery point moves to,
    descriptors of the files to fsync (closed by fsync_flushes), the producer-state
    snapshots among them, the log's truncation count when it began, and the OSError of a
    failed fsync."""

    __slots__ = ("log", "offset", "files", "snapshots", "truncations", "error")

    def __init__(self, log, offset: int, files: list, snapshots: list, truncations: int) -> None:
        self.log, self.offset, self.files, self.snapshots = log, offset, files, snapshots
        self.truncations = truncations
        self.error: OSError | None = None


def fsync_flushes(flushes: list[LogFlush]) -> None:
    """fsync, then close, every descriptor of each flush; thread-safe (it touches only the
    descriptors, which are the flushes' own). A failed fsync is kept in the flush's
    ``error``, naming the file, and its other files are closed without one."""
    for flush in flushes:
        files, flush.files = flush.files, []
        for fd, path in files:
            try:
                if flush.error is None:
                    os.fsync(fd)
            except OSError as exc:
                flush.error = OSError(exc.errno, f"fsync of {path} failed: {exc.strerror}")
            finally:
                os.close(fd)


def _recorded_topic_id(directory: str):
    """The topic id partition.metadata records, None without the file or when it is not
    Kafka's format (torn by a crash: the log manager has said so in a warning, and the
    file is written again)."""
    try:
        return partition_metadata.read(directory)
    except partition_metadata.PartitionMetadataError:
        return None


class Log:
    """A partition log.  Synchronous; meant for the broker's single asyncio thread."""

    # every field a slot: storage/_append.c reads and writes the common append's where they
    # sit in the object (the first line), and CPython 3.11 specializes attribute reads of
    # a class with slots and no __dict__ only
    __slots__ = ("_leo", "_hw", "_last_append_time_ms", "recovery_point", "_append_limits", "_segments",
                 "_producer_state", "_log_start_offset",
                 "_bases", "_closed", "_epochs", "_first_recovered_base", "_pending_deletes", "_rng",
                 "_validation_rules", "clock", "config", "dir", "flush_interval_ms", "last_flush_ms", "on_background",
                 "partition", "producer_id_expiration_ms", "topic", "topic_id", "_truncations", "__weakref__")

    def __init__(self, dir_path: str, config, clock, *, topic: str | None = None,
                 partition: int | None = None, rng=None, recovery_point: int | None = None,
                 log_start_offset: int | None = None, had_clean_shutdown: bool = False,
                 producer_id_expiration_ms: int | None = None, leader_epoch: int | None = None,
                 topic_id=None, topic_id_recorded: bool = False, sync_new_files: bool = True):
        self.dir = os.fspath(dir_path)
        # the broker's producer.id.expiration.ms (a dynamic broker config; LogManager sets it)
        self.producer_id_expiration_ms = producer_id_expiration_ms
        if topic is None or partition is None:
            parsed = parse_topic_partition_dir(os.path.basename(os.path.normpath(self.dir)))
            if parsed is None and (topic is None or partition is None):
                raise ValueError(f"{self.dir} is not a <topic>-<partition> directory")
            topic = topic if topic is not None else parsed[0]
            partition = partition if partition is not None else parsed[1]
        self.topic = topic
        self.partition = partition
        #: called with this log when it may have background work: a segment rolled (to
        #: fsync), a segment set aside for deletion, a config with a flush.ms. The log
        #: manager's periodic passes visit such logs (has_background_work) instead of all;
        #: a log of no manager (tools, tests) tells nobody
        self.on_background = _tell_nobody
        self._set_config(config)
        self.clock = clock
        self._rng = rng
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        self._pending_deletes: list[tuple[int, LogSegment]] = []
        # the topic id this directory belongs to (partition.metadata, KIP-516); the log
        # manager has already set aside a directory recorded with another id, and says
        # (topic_id_recorded) when it read this one's file and found the id there
        self.topic_id = topic_id
        if not topic_id_recorded:
            os.makedirs(self.dir, exist_ok=True)
        if topic_id is not None and not topic_id_recorded and _recorded_topic_id(self.dir) != topic_id:
            # sync_new_files=False: a new partition, which loses nothing in a crash (the
            # next start makes it again, LogManager.create_topic)
            partition_metadata.write(self.dir, topic_id, sync=sync_new_files)
        self._truncations = 0  # truncate_to calls (a rolled flush begun before one is void)
        rp = 0 if recovery_point is None else max(0, int(recovery_point))
        self._first_recovered_base: int | None = None  # set by _check_segments
        names = self._load(rp, had_clean_shutdown)
        self._hw = self._leo
        if log_start_offset is not None and log_start_offset > self._log_start_offset:
            self._log_start_offset = min(int(log_start_offset), self._leo)
        # leader epochs (storage.leader_epoch_cache): those past the recovered end go, the
        # current one begins at the log end if it is new (Kafka's makeLeader)
        self._epochs = LeaderEpochCache(self.dir)
        self._epochs.load(self._leo, self._log_start_offset, leader_epoch, sync=sync_new_files)
        try:
            self._producer_state = ProducerStateManager(
                self.dir, topic_partition=f"{self.topic}-{self.partition}",
                # the snapshot files are those _load listed, unless a recovery changed them
                expiration_ms=self._producer_id_expiration_ms(), listing=names if had_clean_shutdown else None)
            self._producer_state.remove_stray_snapshots(self._bases)
            if self._first_recovered_base is not None:
                # recovered segments are replayed whole, so that their ongoing transactions
                # and .txnindex entries (written after the marker, maybe lost) come back
                self._producer_state.delete_snapshots_for(
                    [o for o in self._producer_state.snapshot_offsets if o > self._first_recovered_base])
            self._rebuild_producer_state(self._leo, reload_from_clean_shutdown=had_clean_shutdown)
        except BaseException:
            for seg in self._segments:
                seg.close_handlers()
            raise
        # after a clean shutdown everything up to the end was fsync'd; after a crash only
        # what the checkpoint says (the recovered tail is in the page cache, not on disk)
        self.recovery_point = self._leo if had_clean_shutdown else min(rp, self._leo)
        self.last_flush_ms = clock.monotonic_ms()

    # ------------------------------------------------------------------ loading
    def _open_segment(self, base_offset: int, existing: set[str] | None = None) -> LogSegment:
        return LogSegment.open(self.dir, base_offset, self.config, self.clock, self._rng, existing=existing)

    def _complete_swaps(self) -> list[str] | None:
        """Kafka's LogLoader passes over a crash in the middle of a clean (see the module
        docstring): roll back what had not reached ``.swap``, complete what had. Returns
        the directory's listing when nothing was there to do (None after a change)."""
        names = os.listdir(self.dir)
        if not any(_TEMP_FILE.match(name) or name.endswith(_TEMP_SUFFIXES) for name in names):
            return names
        cleaned_min = None
        swaps: dict[int, list[str]] = {}
        for name in names:
            m = _TEMP_FILE.match(name)
            if m is None:
                if name.endswith(_TEMP_SUFFIXES):
                    logger.info("removing leftover file %s", os.path.join(self.dir, name))
                    _unlink(os.path.join(self.dir, name))
                continue
            base, kind = int(m.group(1)), m.group(3)
            if kind == "cleaned":
                cleaned_min = base if cleaned_min is None else min(cleaned_min, base)
            elif kind == "swap":
                swaps.setdefault(base, []).append(name)
        for name in names:
            m = _TEMP_FILE.match(name)
            if m is None:
                continue
            base, kind = int(m.group(1)), m.group(3)
            if kind == "deleted" or kind == "cleaned" or (kind == "swap" and cleaned_min is not None
                                                          and base >= cleaned_min):
                logger.info("removing leftover file %s", os.path.join(self.dir, name))
                _unlink(os.path.join(self.dir, name))
                swaps.pop(base, None) if kind == "swap" else None
        ranges = []
        for base, files in sorted(swaps.items()):
            if log_file_name(base) + SWAP_SUFFIX not in files:
                continue  # its .log was renamed into place already: only its indexes are left to rename
            seg = LogSegment(self.dir, base, suffix=SWAP_SUFFIX, max_index_size=self.config.segment_index_bytes)
            try:
                nxt = seg.read_next_offset()
            finally:
                seg.close_handlers()
            logger.info("%s-%d: found cleaned segment %d (offsets %d-%d) of an interrupted swap; completing it",
                        self.topic, self.partition, base, base, nxt - 1)
            ranges.append((base, nxt))
        if not swaps:
            return
        if ranges:
            lo, hi = min(r[0] for r in ranges), max(r[1] for r in ranges)
            for name in os.listdir(self.dir):
                m = _SEGMENT_FILE.match(name)
                if m is not None and lo <= int(m.group(1)) < hi:
                    logger.info("%s-%d: removing %s, replaced by the cleaned segment", self.topic, self.partition,
                                name)
                    _unlink(os.path.join(self.dir, name))
        for name in os.listdir(self.dir):
            if name.endswith(SWAP_SUFFIX):
                os.replace(os.path.join(self.dir, name), os.path.join(self.dir, name[: -len(SWAP_SUFFIX)]))
        fsync_dir(self.dir)

    def _load(self, recovery_point: int, clean: bool) -> list[str]:
        """Open and check the segments; returns the directory's listing."""
        names = self._complete_swaps()
        if names is None:
            names = os.listdir(self.dir)
        listing = set(names)  # which files exist, without a stat each
        logs: list[int] = []
        others: list[tuple[int, str]] = []
        for name in names:
            path = os.path.join(self.dir, name)
            if name.endswith(_TEMP_SUFFIXES):
                logger.info("removing leftover file %s", path)
                _unlink(path)
                continue
            m = _SEGMENT_FILE.match(name)
            if not m:
                continue
            if m.group(2) == "log":
                logs.append(int(m.group(1)))
            else:
                others.append((int(m.group(1)), path))
        log_set = set(logs)
        for base, path in others:
            if base not in log_set:
                logger.warning("removing index file without a .log: %s", path)
                _unlink(path)
        logs.sort()
        try:
            for base in logs:
                self._segments.append(self._open_segment(base, listing))
            if not self._segments:
                self._segments.append(self._open_segment(0, listing))
            self._bases = [s.base_offset for s in self._segments]
            self._check_segments(recovery_point, clean)
        except BaseException:
            for seg in self._segments:
                seg.close_handlers()
            raise
        self._log_start_offset = self._segments[0].base_offset
        self._leo, last_hdr = self._scan_end()
        self._last_append_time_ms = -1
        if last_hdr is not None and last_hdr.attributes & _TIMESTAMP_TYPE_BIT:
            self._last_append_time_ms = last_hdr.max_timestamp
        return names

    def _index_problem(self, seg: LogSegment, next_base: int | None) -> str | None:
        """Why the segment's indexes cannot be trusted, or None (SPEC 6 sanity check)."""
        if not seg.offset_index_existed:
            return "missing offset index"
        if not seg.time_index_existed:
            return "missing time index"
        try:
            seg.sanity_check(full=True)
            max_offset = (next_base if next_base is not None else seg.read_next_offset()) - 1
            seg.time_index.sanity_check(max_offset=max(max_offset, seg.base_offset))
        except CorruptIndexError as e:
            return str(e)
        return None

    def _check_segments(self, recovery_point: int, clean: bool) -> None:
        """Trust or recover each segment (SPEC 6).

        After a clean shutdown every segment whose indexes pass the sanity check is
        trusted as is (nothing is scanned; the max timestamp comes from the last
        time-index entry).  After a crash the segments from the one holding the
        recovery point on are recovered: batches walked and CRC-checked, both indexes
        rebuilt, a torn or corrupt tail cut, and the later segments deleted if bytes
        were cut.  Earlier segments are trusted when their indexes are sane."""
        segs = self._segments
        tp = f"{self.topic}-{self.partition}"
        first_unflushed = len(segs) - 1
        if not clean:
            for i in range(len(segs) - 1):
                if segs[i + 1].base_offset > recovery_point:
                    first_unflushed = i
                    break
        to_recover = len(segs) - first_unflushed if not clean else 0
        if to_recover and not any(s.size for s in segs[first_unflushed:]):
            to_recover = 0  # nothing to walk (a new log): recover quietly
        recovered = recovered_bytes = 0
        started = time.perf_counter()
        if to_recover:
            logger.info("%s: recovering %d unflushed segment(s) from recovery point %d (%d bytes)",
                        tp, to_recover, recovery_point, sum(s.size for s in segs[first_unflushed:]))
        i = 0
        while i < len(segs):
            seg = segs[i]
            is_last = i == len(segs) - 1
            next_base = None if is_last else segs[i + 1].base_offset
            if clean or i < first_unflushed:
                problem = self._index_problem(seg, next_base)
                if problem is None:
                    if is_last:
                        seg.resize_indexes(seg.max_index_size)
                    i += 1
                    continue
                logger.warning("%s: rebuilding the indexes of segment %s: %s", tp, seg.log_path, problem)
            else:
                problem = None
                if to_recover:
                    logger.info("%s: recovering unflushed segment %d (%d/%d, %d bytes)", tp, seg.base_offset,
                                recovered + 1, to_recover, seg.size)
            missing_time_index = not seg.time_index_existed
            mtime = seg.last_modified_ms() if seg.size else -1
            size_before = seg.size
            if self._first_recovered_base is None or seg.base_offset < self._first_recovered_base:
                self._first_recovered_base = seg.base_offset
            cut = seg.recover()
            recovered += 1
            recovered_bytes += size_before
            if cut:
                logger.warning("%s: cut %d invalid byte(s) off the end of segment %s", tp, cut, seg.log_path)
            if cut and not is_last:
                logger.warning("%s: segment %s lost bytes; deleting the %d later segment(s)",
                               tp, seg.log_path, len(segs) - i - 1)
                for later in segs[i + 1:]:
                    later.delete()
                del segs[i + 1:]
                is_last = True
            if missing_time_index and not is_last and mtime >= 0:
                # KIP-33: a segment from before timestamps (its batches carry none) gets
                # one entry (file mtime, last offset); one with timestamps was rebuilt
                seg.migrate_time_index(mtime)
            if is_last:
                seg.resize_indexes(seg.max_index_size)
            i += 1
        self._bases = [s.base_offset for s in segs]
        if recovered and recovered_bytes:
            secs = max(time.perf_counter() - started, 1e-6)
            logger.info("%s: recovered %d segment(s), %d bytes in %.2f s (%.1f MB/s)", tp, recovered,
                        recovered_bytes, secs, recovered_bytes / secs / 1e6)

    def _scan_end(self):
        """(log end offset, header of the last batch in the log or None).

        An empty active segment's base offset is the end, but the last batch (whose
        LogAppendTime the next append must not go below) is in an earlier segment."""
        end = None
        for seg in reversed(self._segments):
            last = None
            start = seg.offset_index.lookup(seg.offset_index.last_offset).position
            for _pos, hdr in seg.iter_batch_headers(start):
                last = hdr
            if last is None and seg.size:
                for _pos, hdr in seg.iter_batch_headers(0):
                    last = hdr
            if last is not None:
                return (end if end is not None else last.base_offset + last.last_offset_delta + 1), last
            if end is None:
                end = seg.base_offset  # an empty active segment
        return (end if end is not None else self._segments[-1].base_offset), None

    # ------------------------------------------------------------------ producer state
    def _producer_id_expiration_ms(self) -> int:
        v = self.producer_id_expiration_ms
        if v is None:
            v = getattr(self.config, "producer_id_expiration_ms", None)
        return DEFAULT_PRODUCER_ID_EXPIRATION_MS if v is None else int(v)

    def _rebuild_producer_state(self, last_offset: int, reload_from_clean_shutdown: bool = False) -> None:
        """Kafka's UnifiedLog.rebuildProducerState: the state up to ``last_offset`` from
        the latest snapshot at or below it plus the batches after it.  After a clean
        shutdown of a log that has no snapshot at all (data from before snapshots were
        written) nothing is scanned: empty snapshots are taken instead, as Kafka does."""
        psm = self._producer_state
        if reload_from_clean_shutdown and self._snapshot_needless():
            psm.map_end_offset = last_offset  # empty, and no file: see _snapshot_needless
            return
        segs = self._segments
        to_snapshot = {segs[-1].base_offset, last_offset}
        if len(segs) > 1:
            to_snapshot.add(segs[-2].base_offset)
        if psm.latest_snapshot_offset() is None and reload_from_clean_shutdown:
            for off in sorted(to_snapshot):
                psm.map_end_offset = off
                psm.take_snapshot()
            return
        now = self.clock.time_ms()
        lso = self._log_start_offset
        was_empty = psm.is_empty() and psm.map_end_offset >= last_offset
        psm.truncate_and_reload(lso, last_offset, now)
        if last_offset > psm.map_end_offset and not was_empty:
            first = max(0, bisect.bisect_right(self._bases, psm.map_end_offset) - 1)
            for seg in segs[first:]:
                if seg.base_offset >= last_offset:
                    break
                start = max(seg.base_offset, psm.map_end_offset, lso)
                psm.map_end_offset = start
                if seg.base_offset in to_snapshot:
                    psm.take_snapshot()
                pos = seg.offset_index.lookup(start).position
                for _pos, hdr in seg.iter_batch_headers(pos):
                    if hdr.base_offset >= last_offset:
                        break
                    if hdr.base_offset + hdr.last_offset_delta < start:
                        continue
                    if hdr.is_control:
                        self._replay_marker(seg, _pos, hdr)
                    elif hdr.producer_id >= 0:
                        psm.load_batch(ProducerBatch.from_header(hdr))
        psm.map_end_offset = last_offset
        psm.take_snapshot()

    def _snapshot_needless(self) -> bool:
        """Whether this log can go without a producer-state snapshot at its end: it has
        one segment, no snapshot file and no producer state. A clean start then reads no
        file and scans nothing (Kafka's rule for a cleanly stopped log without snapshots,
        above), and a recovery would scan that one segment from its start anyway. Neither
        the clean stop nor the start after it then creates a file for such a log: on a
        busy disk, creating 10,000 snapshot files (one per partition of a broker written
        to without idempotence) took most of the stop. A roll takes a snapshot, so a log
        of more than one segment keeps Kafka's snapshots."""
        psm = self._producer_state
        return (len(self._segments) == 1 and psm.latest_snapshot_offset() is None and psm.is_empty()
                and not psm.ongoing)

    def _replay_marker(self, seg, pos: int, hdr) -> None:
        """A COMMIT/ABORT marker read back from the log: the producer's transaction ends;
        an abort's ``.txnindex`` entry is written if the index lacks it (a crash between
        the marker and its index entry)."""
        from protocol import records as R

        data = seg.read_bytes(pos, hdr.batch_length + R.LOG_OVERHEAD)
        recs = list(R.iter_records(data, 0, hdr))
        if not recs:
            return  # an empty control batch: its transaction was cleaned away
        try:
            ctype, coordinator_epoch = R.parse_control_record(recs[0].key, recs[0].value)
        except R.CorruptRecordError as exc:
            logger.warning("%s-%d: control batch at offset %d: %s", self.topic, self.partition, hdr.base_offset, exc)
            return
        if ctype not in (R.CONTROL_ABORT, R.CONTROL_COMMIT):
            return
        completed, lso = self._producer_state.load_marker(
            hdr.producer_id, hdr.producer_epoch, hdr.base_offset, ctype == R.CONTROL_ABORT,
            -1 if coordinator_epoch is None else coordinator_epoch, hdr.max_timestamp)
        if completed is not None and completed.is_aborted:
            idx = seg.txn_index
            entries = idx.entries
            if not entries or entries[-1].last_offset < completed.last_offset:
                idx.append(AbortedTxn(completed.producer_id, completed.first_offset, completed.last_offset, lso))

    # ------------------------------------------------------------------ transactions
    def append_end_txn_marker(self, producer_id: int, producer_epoch: int, commit: bool,
                              coordinator_epoch: int, *, now_ms: int | None = None) -> AppendInfo:
        """The transaction coordinator's COMMIT/ABORT marker for one producer (Kafka's
        AppendOrigin.COORDINATOR): checked against the producer state first (an older
        producer epoch: InvalidProducerEpochError, an older coordinator epoch:
        TransactionCoordinatorFencedError; nothing is written), then written at the log
        end; an aborted transaction gets its ``.txnindex`` entry in the marker's segment
        and the last stable offset moves on."""
        from protocol import records as R
        from storage.validator import BatchInfo, ValidatedAppend

        self._ensure_open()
        now = self.clock.time_ms() if now_ms is None else now_ms
        offset = self._leo
        psm = self._producer_state
        entry, completed = psm.prepare_marker(producer_id, producer_epoch, offset, not commit, coordinator_epoch, now)
        append_time = getattr(self.config, "message_timestamp_type", "CreateTime") == "LogAppendTime"
        epoch = self._epochs.latest_epoch
        data = R.build_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch, now, base_offset=offset,
                                      partition_leader_epoch=-1 if epoch is None else epoch,
                                      log_append_time=append_time)
        va = ValidatedAppend(data, offset, offset, now, offset, now if append_time else -1, 1,
                             [BatchInfo(0, len(data), offset, offset, now, offset)])
        seg = self._write(va, now)
        if completed is not None and completed.is_aborted:
            seg.txn_index.append(AbortedTxn(producer_id, completed.first_offset, completed.last_offset,
                                            psm.last_stable_offset_after(completed)))
        psm.apply_marker(entry, end_offset=self._leo)
        return AppendInfo(offset, offset, va.log_append_time, self._log_start_offset, 1, now)

    @property
    def last_stable_offset(self) -> int:
        """The first offset of the oldest ongoing transaction, else the high watermark:
        what read_committed consumers may read up to. Retention or DeleteRecords may move
        the log start past an open transaction's first offset: then the log start
        (UnifiedLog.maybeIncrementFirstUnstableOffset)."""
        first = self._producer_state.first_unstable_offset()
        return self._hw if first is None else min(max(first, self._log_start_offset), self._hw)

    def collect_aborted_txns(self, fetch_offset: int, upper_bound: int) -> list[AbortedTxn]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``, from the
        ``.txnindex`` of the segment holding ``fetch_offset`` onwards (a read_committed
        fetch returns them so the consumer drops their records)."""
        out: list[AbortedTxn] = []
        i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        for seg in self._segments[i:]:
            found, complete = seg.txn_index.collect(fetch_offset, upper_bound)
            out.extend(found)
            if complete:
                break
        return out

    def _producer_batches(self, va) -> list[ProducerBatch]:
        """The batches of a validated append that carry a producer id."""
        buf = va.buffer
        out = []
        for b in va.batches:
            pos = b.position
            pid, epoch, base_seq = _PRODUCER_FIELDS.unpack_from(buf, pos + _PRODUCER_ID_OFFSET)
            if pid >= 0:
                out.append(ProducerBatch(pid, epoch, base_seq, b.base_offset, b.last_offset, b.max_timestamp,
                                         bool(buf[pos + _ATTRIBUTES_LOW_BYTE] & TRANSACTIONAL_MASK)))
        return out

    @property
    def producer_state(self) -> ProducerStateManager:
        return self._producer_state

    def remove_expired_producers(self, now_ms: int | None = None) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (also done at the
        start of every retention pass)."""
        self._producer_state.expiration_ms = self._producer_id_expiration_ms()
        return self._producer_state.remove_expired(self.clock.time_ms() if now_ms is None else now_ms)

    def take_producer_snapshot(self) -> bool:
        """Write a snapshot of the producer state at the log end (fsync'd)."""
        self._ensure_open()
        self._producer_state.map_end_offset = self._leo
        return self._producer_state.take_snapshot()

    # ------------------------------------------------------------------ properties
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

    @property
    def first_base_offset(self) -> int:
        """Base offset of the oldest segment (the log start offset is at or above it)."""
        return self._segments[0].base_offset

    @property
    def log_end_offset(self) -> int:
        return self._leo

    @property
    def high_watermark(self) -> int:
        return self._hw

    @property
    def last_append_time_ms(self) -> int:
        return self._last_append_time_ms

    @property
    def segments(self) -> list[LogSegment]:
        return list(self._segments)

    @property
    def active_segment(self) -> LogSegment:
        return self._segments[-1]

    @property
    def leader_epoch(self) -> int | None:
        """The partition's current leader epoch (stamped into every appended batch), None
        when the log was opened without one."""
        return self._epochs.latest_epoch

    def end_offset_for_epoch(self, epoch: int) -> tuple[int, int] | None:
        """Kafka's UnifiedLog.endOffsetForEpoch: (epoch, end offset of that epoch) for
        OffsetForLeaderEpoch, None when the epoch is unknown."""
        found_epoch, offset = self._epochs.end_offset_for(epoch, self._leo)
        return None if offset == UNDEFINED_EPOCH_OFFSET else (found_epoch, offset)

    def epoch_for_offset(self, offset: int) -> int | None:
        """The leader epoch that wrote ``offset``, None before the first known epoch."""
        return self._epochs.epoch_for_offset(offset)

    @property
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    def update_config(self, config) -> None:
        """New topic config; new segments use its index settings."""
        self._set_config(config)
        self._producer_state.expiration_ms = self._producer_id_expiration_ms()

    def _set_config(self, config) -> None:
        self.config = config
        # what every append reads, read once (a config's attributes are not plain reads:
        # a pydantic model goes through its __getattr__ hook on each)
        flush_messages = getattr(config, "flush_messages", None)
        self._append_limits = (config.segment_bytes, _max_segment_ms(config),
                               flush_messages if flush_messages is not None else _NO_FLUSH)
        self._validation_rules = rules_of(config)
        flush_ms = getattr(config, "flush_ms", None)
        #: flush.ms, None for never (Kafka's default, Long.MAX_VALUE)
        self.flush_interval_ms = flush_ms if flush_ms is not None and flush_ms < _LONG_MAX else None
        if self.flush_interval_ms is not None:
            self.on_background(self)

    # ------------------------------------------------------------------ append
    def append(self, records, *, magic_hint: int | None = None, in_place: bool = False,
               max_records_bytes: int | None = None, coordinator: bool = False) -> AppendInfo:
        """Validate, assign offsets, roll if needed, write.  Raises storage errors.
        ``in_place``: ``records`` is a writable buffer the caller gives up, so offsets
        and timestamps are patched in it instead of in a copy. ``coordinator``: written
        by a coordinator (no sequence checks, see ProducerStateManager.prepare)."""
        from storage.validator import DEFAULT_MAX_RECORDS_BYTES, analyze_records

        self._ensure_open()
        analysis = analyze_records(records, config=self.config, now_ms=self.clock.time_ms(),
                                   in_place=in_place,
                                   max_records_bytes=max_records_bytes or DEFAULT_MAX_RECORDS_BYTES)
        return self.append_analysis(analysis, coordinator=coordinator)

    def append_produced(self, records, now_ms: int, max_batches: int = 16) -> AppendInfo | None:
        """The produce path's common case: ``records``, a writable buffer the caller gives
        up (as :meth:`append` with ``in_place``), at most ``max_batches`` batches (1 to 16),
        validated and given their offsets in one compiled call
        (``storage.validator.validate_common``), then appended as
        :meth:`append_validated` appends (one batch without a producer id, into a segment
        needing no roll and no index entry, by one more compiled call:
        ``storage/_append.c``). None when they are not that case, with nothing
        done: the caller then takes ``analyze_records`` and :meth:`append_analysis`, which
        name any problem. Raises what append_validated raises. All of it is one compiled
        call when storage/_append.c is built (``append_produced``, which the produce
        handler's compiled loop calls too); ``_append_produced_not_compiled`` is its
        reference."""
        return _append_produced(self, records, now_ms, max_batches)

    def append_analysis(self, analysis, *, coordinator: bool = False) -> AppendInfo:
        """Append a completed ``storage.validator.Analysis``: offsets from the log end,
        the append time never below the last one, then :meth:`append_validated`."""
        self._ensure_open()
        va = analysis.assign(self._leo, self._last_append_time_ms, self._epochs.latest_epoch)
        return self._append(va, self.clock.time_ms(), coordinator)

    def append_validated(self, va, *, now_ms: int | None = None, coordinator: bool = False) -> AppendInfo:
        """Append an already validated ``ValidatedAppend`` whose base offset is the LEO.

        Batches with a producer id are checked against the producer state first
        (raises OutOfOrderSequenceError, InvalidProducerEpochError,
        InvalidTxnStateError; nothing is written then).  A retried batch is not
        written again: the result has ``duplicate=True`` and the original offsets."""
        self._ensure_open()
        return self._append(va, self.clock.time_ms() if now_ms is None else now_ms, coordinator)

    def _append(self, va, now_ms: int, coordinator: bool) -> AppendInfo:
        """append_validated, the log open: the producer state's checks, then
        :meth:`_write`."""
        # the fields read once (a NamedTuple's attribute is a descriptor call each time)
        buf, base_offset, last_offset, max_timestamp, _of_max, log_append_time, record_count, batches = va
        size = len(buf)
        if size == 0 or record_count == 0:
            return AppendInfo(-1, -1, log_append_time, self._log_start_offset, 0, max_timestamp)
        if base_offset != self._leo:
            raise ValueError(f"append at base offset {base_offset} to {self.topic}-{self.partition} "
                             f"whose log end offset is {self._leo}")
        segment_bytes = self._append_limits[0]
        if size > segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes to {self.topic}-{self.partition} is larger than "
                f"segment.bytes={segment_bytes}")
        psm = self._producer_state
        updates = apply = None
        # one batch without a producer id (the common produce) needs no producer state
        single = len(batches) == 1
        # (a producer id >= 0: the big-endian int64's first byte has no sign bit)
        if not single or buf[batches[0].position + _PRODUCER_ID_OFFSET] < 0x80:
            pbatches = self._producer_batches(va)
            dup = None
            if len(pbatches) == 1 and not coordinator:  # an idempotent producer's one batch
                updates, dup = psm.prepare_one(pbatches[0])
                if dup is None and single:  # checked: storage/_append.c may write it, as any one batch
                    info = _append_one(self, va, now_ms, True)
                    if info is not None:
                        psm.apply_one(updates)
                        return info
                apply = psm.apply_one
            elif pbatches:
                updates, dup = psm.prepare(pbatches, coordinator=coordinator)
                apply = psm.apply
            if dup is not None:
                return AppendInfo(dup.first_offset, dup.last_offset, dup.timestamp, self._log_start_offset,
                                  dup.offset_delta + 1, dup.timestamp, True)
        self._write(va, now_ms)
        if updates:
            apply(updates)
        psm.map_end_offset = self._leo
        return _new_append_info((base_offset, last_offset, log_append_time,
                                 self._log_start_offset, record_count, max_timestamp, False))

    def _write(self, va, now_ms: int) -> LogSegment:
        """Roll if needed, write ``va`` at the log end, move the LEO and high watermark,
        flush per ``flush.messages``. Returns the segment written to."""
        seg = self._segments[-1]
        segment_bytes, segment_ms, flush_messages = self._append_limits
        buf, base_offset, last_offset, max_timestamp, _of_max, log_append_time, _count, batches = va
        try:
            # one batch into a segment needing no roll and no index entry: one call
            if not (len(batches) == 1 and seg.append_unindexed(buf, last_offset, max_timestamp, now_ms,
                                                               segment_bytes, segment_ms)):
                if seg.size > 0 and seg.should_roll(max_timestamp=max_timestamp, size=len(buf),
                                                    max_offset=last_offset, now_ms=now_ms,
                                                    segment_bytes=segment_bytes, segment_ms=segment_ms):
                    seg = self.roll(base_offset)
                seg.append(va)
        except OSError as e:
            raise KafkaStorageError(
                f"I/O error appending to {self.topic}-{self.partition} in {self.dir}: {e}") from e
        self._leo = leo = last_offset + 1
        self._hw = leo
        if log_append_time is not None and log_append_time >= 0:
            self._last_append_time_ms = max(self._last_append_time_ms, log_append_time)
        if leo - self.recovery_point >= flush_messages:
            self.flush()
        return seg

    def roll(self, new_base_offset: int | None = None) -> LogSegment:
        """Make a new active segment at ``new_base_offset`` (default: the LEO)."""
        self._ensure_open()
        if new_base_offset is None:
            new_base_offset = self._leo
        old = self._segments[-1]
        if old.base_offset == new_base_offset and old.size == 0:
            return old
        if new_base_offset <= old.base_offset:
            raise ValueError(f"cannot roll {self.topic}-{self.partition} to base offset "
                             f"{new_base_offset}: the active segment starts at {old.base_offset}")
        for name in (log_file_name(new_base_offset), offset_index_file_name(new_base_offset),
                     time_index_file_name(new_base_offset)):
            path = os.path.join(self.dir, name)
            if os.path.exists(path):
                logger.warning("deleting stale file %s before rolling", path)
                _unlink(path)
        old.on_become_inactive()
        new = self._open_segment(new_base_offset)
        self._segments.append(new)
        self._bases.append(new_base_offset)
        # a snapshot at the new base offset, so recovery can start from this segment
        # (fsync'd with the next flush, as Kafka defers it to its flush of the old segment)
        self._producer_state.map_end_offset = new_base_offset
        self._producer_state.take_snapshot(sync=False)
        self.on_background(self)  # the rolled segment is to be fsync'd
        return new

    # ------------------------------------------------------------------ compaction
    def replace_segments(self, new_base: int, old_bases: list[int], *, hook=None) -> LogSegment:
        """Swap the cleaned segment ``<new_base>.*.cleaned`` in for the consecutive
        segments at ``old_bases`` (Kafka's replaceSegments; the steps and what a crash
        leaves are in the module docstring). ``hook(step)`` is called after each step and
        each rename (tests). Raises ValueError, with nothing changed, when those segments
        are no longer consecutive inactive segments of this log."""
        self._ensure_open()
        hook = hook or (lambda step: None)
        i = bisect.bisect_left(self._bases, old_bases[0]) if old_bases else len(self._bases)
        k = len(old_bases)
        if not old_bases or self._bases[i:i + k] != list(old_bases) or i + k >= len(self._segments):
            raise ValueError(f"{self.topic}-{self.partition}: segments {old_bases} are not consecutive inactive "
                             f"segments of the log (now {self._bases})")
        if new_base != old_bases[0]:
            raise ValueError(f"a cleaned segment starts at its group's first base offset {old_bases[0]}, "
                             f"not {new_base}")
        old = self._segments[i:i + k]
        new = LogSegment.open(self.dir, new_base, self.config, self.clock, self._rng, suffix=CLEANED_SUFFIX)
        try:
            new.change_file_suffixes(CLEANED_SUFFIX, SWAP_SUFFIX, hook=hook)
            fsync_dir(self.dir)
        except BaseException:
            new.close_handlers()
            raise
        hook("swap")
        now = self.clock.time_ms()
        delay = getattr(self.config, "file_delete_delay_ms", 60000) or 0
        for seg in old:
            seg.rename_to_deleted()
            self._pending_deletes.append((now + delay, seg))
        self.on_background(self)
        hook("deleted")
        new.change_file_suffixes(SWAP_SUFFIX, "", hook=hook)
        self._segments[i:i + k] = [new]
        self._bases[i:i + k] = [new_base]
        hook("done")
        return new

    def non_active_segments_from(self, offset: int) -> list[LogSegment]:
        """Kafka's nonActiveLogSegmentsFrom: the segments from the one holding ``offset``
        up to (not including) the active one."""
        active = self._segments[-1]
        if offset > active.base_offset:
            return []
        i = max(0, bisect.bisect_right(self._bases, offset) - 1)
        return self._segments[i:-1]

    # ------------------------------------------------------------------ log start offset
    def maybe_increment_log_start_offset(self, new_offset: int) -> bool:
        """Move the log start offset up to ``new_offset`` (DeleteRecords, retention).

        Raises OffsetOutOfRangeError if ``new_offset`` is negative or beyond the high
        watermark.  Returns whether it moved.  Segments entirely below the new start are
        deleted by the next retention pass (``delete_old_segments``)."""
        self._ensure_open()
        if new_offset < 0 or new_offset > self._hw:
            raise OffsetOutOfRangeError(
                f"cannot move the log start offset of {self.topic}-{self.partition} to {new_offset}: "
                f"it must be between 0 and the high watermark {self._hw}")
        if new_offset <= self._log_start_offset:
            return False
        logger.info("incrementing the log start offset of %s-%d to %d", self.topic, self.partition, new_offset)
        self._log_start_offset = new_offset
        self._producer_state.on_log_start_offset_incremented(new_offset)
        self._epochs.truncate_from_start(new_offset)
        return True

    # ------------------------------------------------------------------ retention
    def delete_old_segments(self, now_ms: int | None = None) -> int:
        """One retention pass (SPEC 4); returns the number of segments removed.

        Segments entirely below the log start offset always go; with ``delete`` in
        ``cleanup.policy`` also the oldest segments while the log stays at or above
        ``retention.bytes``, and those whose largest timestamp is more than
        ``retention.ms`` old.  Each rule walks oldest first and stops at the first
        segment it keeps; segments reaching past the high watermark are kept.  Removed
        segments are renamed ``*.deleted`` at once and their files deleted
        ``file.delete.delay.ms`` later (``delete_due_files``)."""
        self._ensure_open()
        if now_ms is None:
            now_ms = self.clock.time_ms()
        self.remove_expired_producers(now_ms)
        lso = self._log_start_offset
        n = self._delete_segments(self._deletable(lambda seg, nxt: nxt is not None and nxt.base_offset <= lso),
                                  "log start offset breach", now_ms)
        if "delete" not in (getattr(self.config, "cleanup_policy", None) or ["delete"]):
            return n
        retention_bytes = getattr(self.config, "retention_bytes", -1)
        if retention_bytes is not None and retention_bytes >= 0:
            diff = self.size_in_bytes - retention_bytes
            if diff >= 0:
                def over_size(seg, nxt):
                    nonlocal diff
                    if diff - seg.size >= 0:
                        diff -= seg.size
                        return True
                    return False
                n += self._delete_segments(self._deletable(over_size),
                                           f"retention.bytes={retention_bytes} breach", now_ms)
        retention_ms = getattr(self.config, "retention_ms", -1)
        if retention_ms is not None and retention_ms >= 0:
            def expired(seg, nxt):
                largest = seg.largest_timestamp
                if now_ms - largest > retention_ms:
                    return True
                if largest > now_ms:
                    logger.warning(
                        "%s-%d: segment %s has timestamp %d, %d ms in the future; it and every later "
                        "segment are kept past retention.ms=%d until then", self.topic, self.partition,
                        seg.log_path, largest, largest - now_ms, retention_ms)
                return False
            n += self._delete_segments(self._deletable(expired), f"retention.ms={retention_ms} breach", now_ms)
        return n

    def _deletable(self, predicate) -> list[LogSegment]:
        out = []
        segs = self._segments
        for i, seg in enumerate(segs):
            nxt = segs[i + 1] if i + 1 < len(segs) else None
            upper = nxt.base_offset if nxt is not None else self._leo
            if nxt is None and seg.size == 0:
                break
            if self._hw >= upper and predicate(seg, nxt):
                out.append(seg)
            else:
                break
        return out

    def _delete_segments(self, deletable: list[LogSegment], reason: str, now_ms: int) -> int:
        if not deletable:
            return 0
        if len(deletable) == len(self._segments):
            self.roll()  # there is always an active segment: an empty one at the log end
        k = len(deletable)
        assert self._segments[:k] == deletable
        new_start = self._segments[k].base_offset
        if new_start > self._log_start_offset:
            self._log_start_offset = new_start
            self._epochs.truncate_from_start(new_start)
        del self._segments[:k]
        del self._bases[:k]
        delay = getattr(self.config, "file_delete_delay_ms", 60000) or 0
        for j, seg in enumerate(deletable):
            end = (deletable[j + 1].base_offset if j + 1 < k else new_start) - 1
            logger.info("%s-%d: deleting segment %s (offsets %d-%d, largest timestamp %d): %s",
                        self.topic, self.partition, seg.log_path, seg.base_offset, end,
                        seg.largest_timestamp, reason)
            seg.rename_to_deleted()
            self._pending_deletes.append((now_ms + delay, seg))
        self.on_background(self)
        self._producer_state.delete_snapshots_for(seg.base_offset for seg in deletable)
        self._producer_state.on_log_start_offset_incremented(self._log_start_offset)
        return k

    def delete_due_files(self, now_ms: int | None = None) -> int:
        """Remove the files of segments deleted at least ``file.delete.delay.ms`` ago."""
        if not self._pending_deletes:
            return 0
        if now_ms is None:
            now_ms = self.clock.time_ms()
        due = [seg for t, seg in self._pending_deletes if t <= now_ms]
        if due:
            self._pending_deletes = [(t, seg) for t, seg in self._pending_deletes if t > now_ms]
            for seg in due:
                seg.delete()
        return len(due)

    @property
    def pending_deletes(self) -> int:
        return len(self._pending_deletes)

    # ------------------------------------------------------------------ read
    def read(self, fetch_offset: int, max_bytes: int, min_one_message: bool = True,
             max_offset: int | None = None) -> FetchDataInfo:
        """Bytes from the batch holding ``fetch_offset`` (one segment at most), and
        none at or past ``max_offset`` (read_committed reads stop at the last stable
        offset, which is always a batch boundary)."""
        self._ensure_open()
        leo, lso, hw = self._leo, self._log_start_offset, self._hw
        if fetch_offset > leo or fetch_offset < lso:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} of {self.topic}-{self.partition} is out of range: "
                f"log start offset {lso}, log end offset {leo}")
        if fetch_offset == leo or (max_offset is not None and fetch_offset >= max_offset):
            return _new_fetch_data_info((None, hw, lso))
        i = bisect.bisect_right(self._bases, fetch_offset) - 1
        if i < 0:
            i = 0
        segs = self._segments
        while i < len(segs):
            seg = segs[i]
            limit = seg.size
            if max_offset is not None and i + 1 < len(segs) and segs[i + 1].base_offset <= max_offset:
                pass  # the whole segment is below the limit
            elif max_offset is not None and max_offset < leo:
                found = seg.translate_offset(max_offset)
                if found is not None:
                    limit = found.position
            records = seg.read(fetch_offset, max_bytes, max_position=limit, min_one_message=min_one_message)
            if records is not None:
                return _new_fetch_data_info((records if records.length else None, hw, lso))
            i += 1
        return _new_fetch_data_info((None, hw, lso))

    def segment_for(self, offset: int) -> LogSegment | None:
        """The segment holding ``offset`` (the last one whose base offset is <= it)."""
        i = bisect.bisect_right(self._bases, offset) - 1
        return self._segments[i] if i >= 0 else None

    # ------------------------------------------------------------------ search by time
    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with ts >= ``timestamp`` (SPEC 5)."""
        self._ensure_open()
        if timestamp < 0:
            raise ValueError(f"offset_for_timestamp needs a timestamp >= 0, got {timestamp}")
        lso = self._log_start_offset
        for seg in self._segments:
            if seg.largest_timestamp >= timestamp:
                found = seg.find_offset_by_timestamp(timestamp, lso)
                if found is None and seg.size and seg.find_offset_by_timestamp(timestamp, -1) is None:
                    # no record of the segment reaches the largest timestamp: it belongs to a
                    # batch compaction emptied (kept for its producer, as Kafka keeps it), so
                    # the record is further on
                    continue
                if found is None or found.offset >= self._hw:
                    return None
                return OffsetAndTimestamp(found.offset, found.timestamp)
        return None

    def offset_of_max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record with the largest timestamp (ListOffsets -3)."""
        self._ensure_open()
        if self._leo == self._log_start_offset:
            return None
        best = None
        for seg in self._segments:
            if seg.size and (best is None or seg.max_timestamp_so_far > best.max_timestamp_so_far):
                best = seg
        if best is None:
            return None
        found = best.find_max_timestamp_record()
        if found is None and best.size:
            found = self._scan_max_timestamp_record()
        if found is None or found.offset >= self._hw or found.offset < self._log_start_offset:
            return None
        return found

    def _scan_max_timestamp_record(self):
        """The first record with the largest timestamp, read batch by batch: a cleaned
        segment's max timestamp can belong to a batch compaction emptied (no record
        carries it any more)."""
        best_ts, best_off = -1, None
        lso = self._log_start_offset
        for seg in self._segments:
            for _pos, hdr in seg.iter_batch_headers(0):
                if hdr.records_count <= 0 or hdr.max_timestamp <= best_ts or hdr.last_offset < lso:
                    continue
                found = seg.find_offset_by_timestamp(hdr.max_timestamp, max(lso, hdr.base_offset))
                if found is not None and found.timestamp > best_ts:
                    best_ts, best_off = found.timestamp, found.offset
        return None if best_off is None else OffsetAndTimestamp(best_off, best_ts)

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (SPEC 7)."""
        self._ensure_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to {offset}")
        if offset >= self._leo:
            return
        bases_before = list(self._bases)
        while len(self._segments) > 1 and self._segments[-1].base_offset > offset:
            self._segments.pop().delete()
            self._bases.pop()
        if self._segments[-1].base_offset > offset:
            # everything goes: keep an empty segment at the requested offset
            self._segments.pop().delete()
            self._bases.pop()
            self._segments.append(self._open_segment(offset))
            self._bases.append(offset)
            self._log_start_offset = offset
            self._producer_state.truncate_fully_and_start_at(offset)
        else:
            self._segments[-1].truncate_to(offset)
            self._producer_state.delete_snapshots_for(b for b in bases_before if b > offset)
        self._leo = offset
        self._hw = min(self._hw, offset)
        self.recovery_point = min(self.recovery_point, offset)
        self._truncations += 1  # a rolled flush begun before this moves no recovery point
        self.on_background(self)  # segments before the recovery point may be unsynced
        current = self._epochs.latest_epoch
        self._epochs.truncate_from_end(offset)
        if current is not None and self._epochs.latest_epoch != current:
            self._epochs.assign(current, offset)  # still this partition's leader epoch
        self._rebuild_producer_state(offset)

    # ------------------------------------------------------------------ durability
    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding [recovery point, offset) (default: up to the LEO) and
        the producer-state snapshots written without an fsync at or below ``offset``, here
        and now: the three steps of :meth:`start_flush` on this thread (``flush.messages``,
        a shutdown, a partition's move). Raises the OSError of a failed fsync, naming the
        file; the recovery point then stays where it was."""
        self._ensure_open()
        flush = self.start_flush(self._leo if offset is None else offset)
        if flush is None:  # nothing unsynced: the flush interval starts again all the same
            self.last_flush_ms = self.clock.monotonic_ms()
            return
        fsync_flushes([flush])
        if flush.error is not None:
            raise flush.error
        self.finish_flush(flush)  # (sets last_flush_ms)

    def has_background_work(self) -> bool:
        """Whether the log manager's periodic passes have anything to do here: segment
        files to delete later, rolled segments or a roll's snapshot not yet fsync'd, a
        flush.ms to keep."""
        return (bool(self._pending_deletes) or self.flush_interval_ms is not None
                or self.recovery_point < self._segments[-1].base_offset
                or self._producer_state.has_unsynced_snapshots())

    def start_rolled_flush(self) -> LogFlush | None:
        """Kafka's flush on roll, begun: the segments rolled since the last flush and the
        producer-state snapshots written at their rolls, as descriptors of their files
        for :func:`fsync_flushes` to fsync on another thread (a rolled segment the page
        cache still holds dirty takes hundreds of milliseconds), then
        :meth:`finish_flush` here. None when there is nothing to flush."""
        return self.start_flush(self._segments[-1].base_offset)

    def start_flush(self, target: int) -> LogFlush | None:
        """``flush(target)`` begun, as :meth:`start_rolled_flush` (Kafka's log flusher
        thread, for ``flush.ms``, takes the log's end): the segments holding offsets
        from the recovery point up to ``target``, and the producer-state snapshots written
        without an fsync at or below it, whether or not the recovery point is there already
        (a roll at the recovery point writes one; Kafka's roll fsyncs its snapshot apart
        from the segments). None when there is nothing to flush."""
        if self._closed:
            return None
        segs = self._segments
        rp = self.recovery_point
        files: list[tuple[int, str]] = []
        try:
            if rp < target:
                for i, seg in enumerate(segs):
                    if seg.base_offset >= target:
                        break
                    if i + 1 == len(segs) or segs[i + 1].base_offset > rp:  # holds offsets at or past it
                        files += seg.durable_files()
            snapshots, snapshot_files = self._producer_state.unsynced_snapshot_files(target)
            files += snapshot_files
        except BaseException:
            for fd, _path in files:
                os.close(fd)
            raise
        if rp >= target and not snapshots:
            return None
        return LogFlush(self, target, files, snapshots, self._truncations)

    def finish_flush(self, flush: LogFlush) -> bool:
        """After :func:`fsync_flushes`: the recovery point moves to the flushed segments'
        end, unless the fsync failed or the log was closed or truncated meanwhile (the
        next pass begins again). Whether it moved."""
        if flush.error is not None or self._closed or flush.truncations != self._truncations:
            return False
        self._producer_state.snapshots_synced(flush.snapshots)
        if flush.offset > self.recovery_point:
            self.recovery_point = flush.offset
        self.last_flush_ms = self.clock.monotonic_ms()
        return True

    def close(self, sync: bool = True) -> None:
        """Clean close: final time-index entries, indexes trimmed, files closed.
        ``sync=False``: the snapshot is not fsynced; the caller syncs the filesystem and
        then calls :meth:`closed_durably` (LogManager.shutdown)."""
        if self._closed:
            return
        try:
            # a snapshot at the log end: the next start reads it and scans nothing
            self._producer_state.map_end_offset = self._leo
            if not self._snapshot_needless():
                self._producer_state.take_snapshot(sync=sync)
        except OSError as e:
            logger.error("%s-%d: could not write the producer state snapshot at close: %s",
                         self.topic, self.partition, e)
        self._closed = True
        for seg in self._segments:
            seg.close()
        self._delete_pending_now()

    def closed_durably(self) -> None:
        """After close(sync=False), the caller has synced the filesystem: everything up to
        the log end is on disk (what flush() then close() would have recorded)."""
        self._producer_state.mark_synced()
        self.recovery_point = max(self.recovery_point, self._leo)

    def _delete_pending_now(self) -> None:
        pending, self._pending_deletes = self._pending_deletes, []
        for _t, seg in pending:
            seg.delete()

    def close_handlers(self) -> None:
        """Close files without writing (tests: simulated crash)."""
        self._closed = True
        for seg in self._segments:
            seg.close_handlers()
        for _t, seg in self._pending_deletes:
            seg.close_handlers()

    def delete(self) -> None:
        """Close and remove the partition directory."""
        self.close_handlers()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed

    def _ensure_open(self) -> None:
        if self._closed:
            raise ValueError(f"log {self.dir} is closed")

    def __repr__(self) -> str:
        return (f"Log({self.topic}-{self.partition}, start={self._log_start_offset}, "
                f"end={self._leo}, segments={len(self._segments)})")


#: flush.messages when the config has none: never by message count (Kafka's default,
#: Long.MAX_VALUE; an int, as storage/_append.c reads it)
_NO_FLUSH = _LONG_MAX


def _max_segment_ms(config) -> int:
    """segment.ms, or max.compaction.lag.ms when smaller on a compacted topic (KIP-354)."""
    ms = getattr(config, "max_segment_ms", None)
    return config.segment_ms if ms is None else ms


def _unlink(path: str) -> None:
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass


if _compiled_append is not None:
    _compiled_append.setup(AppendInfo, Log, LogSegment, AbstractIndex, _LogFile, _UNKNOWN, validate_common)
    _compiled_append.setup_producers(ProducerStateEntry, _new_batch_metadata)
    _append_produced = _compiled_append.append_produced
#: Log.append_produced's compiled body, ``fn(log, records, now_ms, max_batches)`` (None
#: when storage/_append.c is not built): the produce handler's compiled loop calls it
compiled_append_produced = _compiled_append.append_produced if _compiled_append is not None else None
