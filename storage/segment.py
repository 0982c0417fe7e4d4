"""One log segment: ``<base>.log`` plus its ``<base>.index``, ``<base>.timeindex`` and,
once a transaction is aborted in it, ``<base>.txnindex`` (:mod:`storage.transaction_index`).

Files are named by the segment's base offset zero-padded to 20 digits.  The ``.log``
holds v2 record batches exactly as Kafka writes them (61-byte header: baseOffset i64,
batchLength i32, partitionLeaderEpoch i32, magic i8 = 2, crc u32, attributes i16,
lastOffsetDelta i32, baseTimestamp i64, maxTimestamp i64, producerId i64,
producerEpoch i16, baseSequence i32, recordsCount i32, then the records).  It is
written with ``os.pwrite`` on a raw fd (no Python-level buffering: the bytes are in
the page cache when ``append`` returns and survive a process kill) and read with
``os.pread`` / handed out as :class:`storage.file_slice.FileSlice` for ``sendfile``.

Index entries are added per batch under the ``index.interval.bytes`` rule (SPEC 1);
the running max timestamp and the last offset of the (first) batch carrying it are kept
in memory and reloaded from the last time-index entry when an existing segment opens.
"""

from __future__ import annotations

import functools
import os
import random
from typing import Iterator, NamedTuple

from storage.errors import CorruptRecordError
from storage.file_slice import FileSlice
from storage.index import IndexOffsetOverflowError
from storage.offset_index import OffsetIndex
from storage.open_files import OPEN_FILES
from storage.time_index import NO_TIMESTAMP, TimeIndex, TimestampOffset
from storage.transaction_index import TransactionIndex

from protocol import record_walk as _record_walk
from protocol import records as _records

__all__ = [
    "LogSegment",
    "OffsetAndTimestamp",
    "LogOffsetPosition",
    "log_file_name",
    "offset_index_file_name",
    "time_index_file_name",
    "txn_index_file_name",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "DELETED_SUFFIX",
]

HEADER_SIZE = 61  # v2 record batch header
LOG_OVERHEAD = 12  # baseOffset + batchLength
DELETED_SUFFIX = ".deleted"
_MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
_SCAN_CHUNK = 64 * 1024
_RECOVERY_CHUNK = 4 * 1024 * 1024
_INT32_MAX = (1 << 31) - 1
_UNKNOWN = object()
#: a search by time decompresses a stored batch at most this far (streamed; the produce
#: path refuses larger ones, so only a batch stored before it walked every record can hit it)
READ_MAX_DECOMPRESSED = 104857600


def _name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


def log_file_name(base_offset: int) -> str:
    return _name(base_offset, ".log")


def offset_index_file_name(base_offset: int) -> str:
    return _name(base_offset, ".index")


def time_index_file_name(base_offset: int) -> str:
    return _name(base_offset, ".timeindex")


def txn_index_file_name(base_offset: int) -> str:
    return _name(base_offset, ".txnindex")


class OffsetAndTimestamp(NamedTuple):
    offset: int
    timestamp: int


class LogOffsetPosition(NamedTuple):
    offset: int  # last offset of the batch found
    position: int
    size: int


#: ``LogOffsetPosition._make`` without its Python-level ``__new__`` (one per fetch)
_new_log_offset_position = functools.partial(tuple.__new__, LogOffsetPosition)


# --------------------------------------------------------------------------- headers
def _parse_header(buf, pos: int):
    """The v2 header at ``pos`` (``pos + 61 <= len(buf)``), or None if not a valid v2 header."""
    if buf[pos + 16] != 2:
        return None
    try:
        return _records.parse_batch_header(buf, pos)
    except _records.RecordFormatError:
        return None


_verify_crc = _records.verify_crc
_find_batch = _record_walk.find_batch
_first_at_or_after = _records.first_record_at_or_after


class _LogFile:
    """Holder of the segment's raw fd; FileSlices keep a reference to it.

    The descriptor is one of the handles bounded by :data:`storage.open_files.OPEN_FILES`:
    when released by OPEN_FILES it is reopened by path on the next ``fileno()`` (the path
    follows renames). ``close()`` ends it for good."""

    __slots__ = ("path", "fd", "_closed", "_recent")

    def __init__(self, path: str):
        self.path = path
        self._closed = False
        self._recent = False  # used since the OPEN_FILES' last pass
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        OPEN_FILES.opened(self)

    def fileno(self) -> int:
        fd = self.fd
        if fd >= 0:
            OPEN_FILES.touch(self)
            return fd
        if self._closed:
            raise ValueError(f"segment file {self.path} is closed")
        self.fd = fd = os.open(self.path, os.O_RDWR)
        OPEN_FILES.opened(self, reopen=True)
        return fd

    def _release(self) -> None:
        """Close the descriptor, keep the file usable (an OPEN_FILES eviction)."""
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def close(self) -> None:
        self._closed = True
        if self.fd >= 0:
            OPEN_FILES.closed(self)
            self._release()

    @property
    def closed(self) -> bool:
        return self._closed


def random_segment_jitter(segment_jitter_ms: int, segment_ms: int, rng=None) -> int:
    """Kafka's LogConfig.randomSegmentJitter: uniform in [0, min(jitter, segment.ms))."""
    if not segment_jitter_ms or segment_jitter_ms <= 0:
        return 0
    bound = min(segment_jitter_ms, segment_ms)
    if bound <= 0:
        return 0
    return (rng or random).randrange(bound)


class LogSegment:
    """A segment of a partition log.  Not thread-safe (single asyncio thread)."""

    # every field a slot: storage/_append.c reads and writes the common append's where they
    # sit in the object (the first two lines; storage.log's common append), and CPython
    # 3.11 specializes attribute reads of a class with slots and no __dict__ only
    __slots__ = ("_size", "_bytes_since_last_index_entry", "index_interval_bytes", "base_offset", "_rolling_ts",
                 "roll_jitter_ms", "created_ms", "offset_index", "time_index", "_file", "_max_ts", "_max_ts_offset",
                 "clock", "dir", "log_path", "max_index_size", "offset_index_existed", "offset_index_path",
                 "time_index_existed", "time_index_path", "txn_index", "txn_index_path", "__weakref__")

    def __init__(self, dir_path: str, base_offset: int, *, index_interval_bytes: int = 4096,
                 max_index_size: int = 10 * 1024 * 1024, roll_jitter_ms: int = 0, clock=None,
                 suffix: str = "", existing=None):
        if clock is None:
            from storage.clock import SystemClock

            clock = SystemClock()
        self.dir = os.fspath(dir_path)
        self.base_offset = int(base_offset)
        self.index_interval_bytes = int(index_interval_bytes)
        self.max_index_size = int(max_index_size)
        self.roll_jitter_ms = int(roll_jitter_ms)
        self.clock = clock
        # suffix: "" for a live segment; the log cleaner writes ".cleaned" files and swaps
        # them in through ".swap" (storage.log.Log.replace_segments)
        self.log_path = os.path.join(self.dir, log_file_name(self.base_offset) + suffix)
        self.offset_index_path = os.path.join(self.dir, offset_index_file_name(self.base_offset) + suffix)
        self.time_index_path = os.path.join(self.dir, time_index_file_name(self.base_offset) + suffix)
        self.txn_index_path = os.path.join(self.dir, txn_index_file_name(self.base_offset) + suffix)
        def exists(path: str) -> bool:
            return os.path.exists(path) if existing is None else os.path.basename(path) in existing

        log_existed = exists(self.log_path)
        # a .log found on disk without its indexes must be re-indexed (Log does it)
        self.offset_index_existed = exists(self.offset_index_path) or not log_existed
        self.time_index_existed = exists(self.time_index_path) or not log_existed
        self._file = _LogFile(self.log_path)
        try:
            self._size = os.fstat(self._file.fileno()).st_size
            self.offset_index = OffsetIndex(self.offset_index_path, self.base_offset, self.max_index_size,
                                            exists=exists(self.offset_index_path))
            self.time_index = TimeIndex(self.time_index_path, self.base_offset, self.max_index_size,
                                        exists=exists(self.time_index_path))
            # the aborted transactions whose ABORT marker is in this segment (file made on first use)
            self.txn_index = TransactionIndex(self.txn_index_path, self.base_offset,
                                              exists=exists(self.txn_index_path))
        except BaseException:
            self._file.close()
            raise
        self.created_ms = clock.time_ms()
        self._bytes_since_last_index_entry = 0
        self._rolling_ts = _UNKNOWN  # max timestamp of the first append / batch
        last = self.time_index.last_entry()
        self._max_ts = last.timestamp
        self._max_ts_offset = last.offset

    @classmethod
    def open(cls, dir_path: str, base_offset: int, config, clock, rng=None, suffix: str = "",
             existing=None) -> "LogSegment":
        """Open (or create) a segment with the values of a TopicConfig-like ``config``.
        ``existing``: the names of the directory's files, when the caller has listed it."""
        return cls(dir_path, base_offset,
                   index_interval_bytes=config.index_interval_bytes,
                   max_index_size=config.segment_index_bytes,
                   roll_jitter_ms=random_segment_jitter(config.segment_jitter_ms, config.segment_ms, rng),
                   clock=clock, suffix=suffix, existing=existing)

    # ------------------------------------------------------------------ properties
    @property
    def size(self) -> int:
        return self._size

    def __len__(self) -> int:
        return self._size

    @property
    def file(self) -> _LogFile:
        return self._file

    @property
    def max_timestamp_so_far(self) -> int:
        return self._max_ts

    @property
    def offset_of_max_timestamp_so_far(self) -> int:
        """Last offset of the first batch carrying the max timestamp (Kafka's shallow offset)."""
        return self._max_ts_offset

    def max_timestamp_and_offset(self) -> TimestampOffset:
        return TimestampOffset(self._max_ts, self._max_ts_offset)

    @property
    def largest_timestamp(self) -> int:
        """The max timestamp, or the .log file's mtime (ms) when there is none."""
        if self._max_ts >= 0:
            return self._max_ts
        return self.last_modified_ms()

    def last_modified_ms(self) -> int:
        return os.stat(self.log_path).st_mtime_ns // 1_000_000

    def can_convert_to_relative_offset(self, offset: int) -> bool:
        return self.offset_index.can_append_offset(offset)

    # ------------------------------------------------------------------ append
    def append(self, validated) -> None:
        """Append a ValidatedAppend (offsets already assigned) and index it per batch."""
        buf = validated.buffer
        n = len(buf)
        if n == 0:
            return
        if not 0 <= validated.last_offset - self.base_offset <= _INT32_MAX:  # can_convert_to_relative_offset
            raise IndexOffsetOverflowError(
                f"offset {validated.last_offset} overflows segment {self.base_offset} of {self.dir}")
        start = self._size
        if start == 0:
            self._rolling_ts = validated.max_timestamp
        self._write_at(buf, start)
        self._size = start + n
        batches = validated.batches
        if not batches:  # pragma: no cover - the validator always lists them
            batches = [_SingleBatch(validated)]
        interval = self.index_interval_bytes
        for b in batches:
            if b.max_timestamp > self._max_ts:
                self._max_ts = b.max_timestamp
                self._max_ts_offset = b.last_offset
            if self._bytes_since_last_index_entry > interval:
                self._index_entry(b.last_offset, start + b.position)
                self._bytes_since_last_index_entry = 0
            self._bytes_since_last_index_entry += b.size

    def _index_entry(self, last_offset: int, position: int) -> None:
        """The index entries of a batch past ``index.interval.bytes`` (its last offset
        ``last_offset``, at ``position`` in the file; the segment's max timestamp already
        moved for it): :meth:`append`'s, and storage/_append.c's append_one's, each of
        which then counts the batch's bytes from zero."""
        if not self.offset_index.is_full():
            self.offset_index.append(last_offset, position)
        if not self.time_index.is_full():
            self.time_index.maybe_append(self._max_ts, self._max_ts_offset)

    def append_unindexed(self, buf, last_offset: int, max_timestamp: int, now_ms: int,
                         segment_bytes: int, segment_ms: int) -> bool:
        """The common append in one call: ``buf`` holds one batch (offsets assigned, the
        last ``last_offset``, its max timestamp ``max_timestamp``) for a segment that is
        empty or needs no roll for it (:meth:`should_roll` is false) and that gets no
        index entry for it (``index.interval.bytes`` not yet passed): what
        ``should_roll`` and :meth:`append` would do for it, without their calls. Returns
        False when any of that does not hold, having done nothing: the caller then takes
        the general path (``should_roll``, a roll, ``append``)."""
        current = self._size
        n = len(buf)
        if (current > segment_bytes - n
                or self._bytes_since_last_index_entry > self.index_interval_bytes
                or not 0 <= last_offset - self.base_offset <= _INT32_MAX):
            return False
        if current:
            ts = self._rolling_ts  # time_waited_for_roll, when the first batch's timestamp is known
            if ts is _UNKNOWN or ts is None:
                return False
            waited = max_timestamp - ts if ts >= 0 else now_ms - self.created_ms
            if (waited > segment_ms - self.roll_jitter_ms or self.offset_index.is_full()
                    or self.time_index.is_full()):
                return False
        else:  # the first batch: nothing to roll (the log rolls only a segment with data)
            self._rolling_ts = max_timestamp
        f = self._file
        fd = f.fd
        # the descriptor open (as _LogFile.fileno finds it) and the whole batch taken by one
        # pwrite, as a regular file takes it; else _write_at reopens or writes the rest
        if fd >= 0 and os.pwrite(fd, buf, current) == n:
            OPEN_FILES.touch(f)
        else:
            self._write_at(buf, current)
        self._size = current + n
        if max_timestamp > self._max_ts:
            self._max_ts = max_timestamp
            self._max_ts_offset = last_offset
        self._bytes_since_last_index_entry += n
        return True

    def _write_at(self, buf, position: int) -> None:
        fd = self._file.fileno()
        written = os.pwrite(fd, buf, position)
        if written == len(buf):  # the whole of it, as a regular file takes it
            return
        if written <= 0:  # pragma: no cover
            raise OSError(f"pwrite to {self.log_path} wrote {written} bytes")
        view = memoryview(buf)[written:]
        position += written
        try:
            while len(view):
                written = os.pwrite(fd, view, position)
                if written <= 0:  # pragma: no cover
                    raise OSError(f"pwrite to {self.log_path} wrote {written} bytes")
                view = view[written:]
                position += written
        finally:
            view.release()

    # ------------------------------------------------------------------ scanning
    def iter_batch_headers(self, start_position: int = 0, end_position: int | None = None) -> Iterator[tuple]:
        """Yield ``(position, header)`` for the whole v2 batches in [start, end).

        Stops quietly at a partial batch, a non-v2 magic or an impossible length.
        """
        end = self._size if end_position is None else min(end_position, self._size)
        for pos, hdr, _buf, _rel in self._walk_batches(start_position, end, _SCAN_CHUNK):
            yield pos, hdr

    def _walk_batches(self, start: int, end: int, chunk: int) -> Iterator[tuple]:
        """``(position, header, buf, rel)`` of each whole v2 batch in [start, end), reading
        the file ``chunk`` bytes at a time; the header is at ``buf[rel:]`` (the batch body
        is in ``buf`` too when ``rel + size <= len(buf)``).  Stops quietly at a partial
        batch, a non-v2 magic or an impossible length."""
        file = self._file  # its fd is asked for at each read: the caller runs between yields
        pos = start
        buf = b""
        buf_start = pos
        while pos + HEADER_SIZE <= end:
            rel = pos - buf_start
            if rel < 0 or rel + HEADER_SIZE > len(buf):
                buf = os.pread(file.fileno(), min(chunk, end - pos), pos)
                buf_start, rel = pos, 0
                if len(buf) < HEADER_SIZE:
                    return
            hdr = _parse_header(buf, rel)
            if hdr is None or hdr.batch_length < _MIN_BATCH_LENGTH:
                return
            size = hdr.batch_length + LOG_OVERHEAD
            if pos + size > end:
                return
            yield pos, hdr, buf, rel
            pos += size

    def read_bytes(self, position: int, length: int) -> bytes:
        return FileSlice(self._file, position, length).read()

    def translate_offset(self, offset: int, starting_position: int = 0) -> LogOffsetPosition | None:
        """Position and size of the first batch whose last offset >= ``offset``: from the
        index entry at or below it, the batch headers are walked a chunk at a time by
        ``record_walk.find_batch`` (compiled; a fetch at the log's tail walks up to
        ``index.interval.bytes`` of small batches). Stops quietly where iter_batch_headers
        stops (a partial batch, a non-v2 magic or an impossible length)."""
        pos = self.offset_index.lookup(offset).position
        if pos < starting_position:
            pos = starting_position
        end = self._size
        file = self._file
        while pos + HEADER_SIZE <= end:
            size = end - pos if end - pos < _SCAN_CHUNK else _SCAN_CHUNK
            found = _find_batch(os.pread(file.fileno(), size, pos), pos, end, offset)
            if type(found) is tuple and len(found) == 3:
                return _new_log_offset_position(found)
            if found is None or found <= pos:  # (a file shorter than its size: nothing more to read)
                return None
            pos = found
        return None

    # ------------------------------------------------------------------ read
    def read(self, start_offset: int, max_size: int, max_position: int | None = None,
             min_one_message: bool = False) -> FileSlice | None:
        """Bytes from the first batch whose last offset >= start_offset.

        None when no such batch exists in this segment.  At most ``max_size`` bytes and
        nothing at or past ``max_position`` (default: the segment size); with
        ``min_one_message`` the whole first batch even if larger than ``max_size``.
        """
        if max_size < 0:
            raise ValueError(f"invalid max_size {max_size} for a read of segment {self.log_path}")
        found = self.translate_offset(start_offset)
        if found is None:
            return None
        if max_position is None:
            max_position = self._size
        # (conditional expressions, not min and max: those builtins cost about 700 instructions a call)
        length = found.size if min_one_message and found.size > max_size else max_size
        room = max_position - found.position
        if room < length:
            length = room if room > 0 else 0
        return FileSlice(self._file, found.position, length)

    # ------------------------------------------------------------------ search by time
    def find_offset_by_timestamp(self, timestamp: int, starting_offset: int | None = None) -> OffsetAndTimestamp | None:
        """First record with ts >= timestamp and offset >= starting_offset (SPEC 5).
        A malformed batch raises CorruptRecordError naming the segment and offset."""
        if starting_offset is None:
            starting_offset = self.base_offset
        entry = self.time_index.lookup(timestamp)
        position = self.offset_index.lookup(max(entry.offset, starting_offset)).position
        for pos, hdr in self.iter_batch_headers(position):
            if hdr.max_timestamp >= timestamp and hdr.base_offset + hdr.last_offset_delta >= starting_offset:
                found = self._search_batch(pos, hdr, timestamp, starting_offset)
                if found is not None:
                    return OffsetAndTimestamp(*found)
        return None

    def find_max_timestamp_record(self) -> OffsetAndTimestamp | None:
        """The first record carrying this segment's max timestamp (ListOffsets -3)."""
        target = self._max_ts
        position = self.offset_index.lookup(self._max_ts_offset).position
        for pos, hdr in self.iter_batch_headers(position):
            if hdr.max_timestamp == target and hdr.records_count != 0:  # not a batch emptied by compaction
                found = self._search_batch(pos, hdr, target, -(1 << 63))
                return None if found is None else OffsetAndTimestamp(*found)
        return None

    def _search_batch(self, pos: int, hdr, timestamp: int, starting_offset: int):
        data = self.read_bytes(pos, hdr.batch_length + LOG_OVERHEAD)
        try:
            return _first_at_or_after(data, 0, hdr, timestamp, starting_offset,
                                      max_decompressed=READ_MAX_DECOMPRESSED)
        except _records.RecordFormatError as e:
            raise CorruptRecordError(
                f"segment {self.log_path}: the batch at offset {hdr.base_offset} (position {pos}) "
                f"cannot be read: {e}") from None

    # ------------------------------------------------------------------ rolling
    def first_batch_timestamp(self) -> int:
        """The max timestamp of the segment's first batch (-1: none), as Kafka's
        getFirstBatchTimestamp: what max.compaction.lag.ms counts from."""
        return self._first_batch_timestamp()

    def _first_batch_timestamp(self) -> int:
        if self._rolling_ts is _UNKNOWN:
            for _pos, hdr in self.iter_batch_headers(0):
                self._rolling_ts = hdr.max_timestamp
                break
            else:
                return NO_TIMESTAMP
        return self._rolling_ts

    def time_waited_for_roll(self, now_ms: int, message_timestamp: int) -> int:
        ts = self._rolling_ts
        if ts is _UNKNOWN:
            ts = self._first_batch_timestamp()
        if ts is not None and ts >= 0:
            return message_timestamp - ts
        return now_ms - self.created_ms

    def should_roll(self, *, max_timestamp: int, size: int, max_offset: int, now_ms: int,
                    segment_bytes: int, segment_ms: int) -> bool:
        """SPEC 3: checked before appending ``size`` bytes ending at ``max_offset``."""
        current = self._size
        if current > segment_bytes - size:
            return True
        if current > 0 and self.time_waited_for_roll(now_ms, max_timestamp) > segment_ms - self.roll_jitter_ms:
            return True
        return (self.offset_index.is_full() or self.time_index.is_full()
                or not 0 <= max_offset - self.base_offset <= _INT32_MAX)  # can_convert_to_relative_offset

    def on_become_inactive(self) -> None:
        """On roll: final time-index entry with the max timestamp, then trim the indexes."""
        self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        self.offset_index.trim_to_valid_size()
        self.time_index.trim_to_valid_size()

    def resize_indexes(self, size: int) -> None:
        self.offset_index.resize(size)
        self.time_index.resize(size)

    # ------------------------------------------------------------------ checks & recovery
    def sanity_check(self, full: bool = False) -> None:
        """Raise CorruptIndexError if either index cannot be trusted against the log."""
        self.offset_index.sanity_check(log_size=self._size, full=full)
        self.time_index.sanity_check(full=full)

    def recover(self, verify_crc: bool = True) -> int:
        """Rebuild both indexes from the .log; cut a torn/invalid tail.  Returns bytes cut."""
        self.offset_index.reset()
        self.time_index.reset()
        self._max_ts = NO_TIMESTAMP
        self._max_ts_offset = self.base_offset
        self._bytes_since_last_index_entry = 0
        valid = self._scan_and_index(0, verify_crc)
        cut = self._size - valid
        if cut > 0:
            self._truncate_file(valid)
            self.txn_index.truncate_to(self.read_next_offset())
        self.offset_index.trim_to_valid_size()
        self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._rolling_ts = _UNKNOWN
        return cut

    def recover_tail(self, verify_crc: bool = True) -> int:
        """Validate and index the batches after the last offset-index entry; cut a torn tail.

        For the active segment of a log whose indexes passed the sanity check: cheap
        (scans at most the bytes after the last index entry).  Returns bytes cut.
        """
        last = self.offset_index.last_entry()
        start = last.position if self.offset_index.entries else 0
        # entries at/after the last index entry are re-derived from the scan
        self._bytes_since_last_index_entry = 0
        valid = self._scan_and_index(start, verify_crc, reindex_from=last.offset if self.offset_index.entries else None)
        cut = self._size - valid
        if cut > 0:
            self._truncate_file(valid)
            next_offset = self.read_next_offset()
            self.offset_index.truncate_to(next_offset)
            self.time_index.truncate_to(next_offset)
            self.txn_index.truncate_to(next_offset)
            self._recompute_max_timestamp()
        return cut

    def _scan_and_index(self, start: int, verify_crc: bool, reindex_from: int | None = None) -> int:
        """Walk batches from ``start``; add index entries; return the end of the valid bytes.

        Stops at a partial batch, a non-v2 magic, an impossible length, a base offset
        below the segment's or not after the previous batch, an offset that does not
        fit the index, or (``verify_crc``) a CRC mismatch.  Reads the file in chunks of
        ``_RECOVERY_CHUNK`` bytes and checks CRCs on slices of them (no copy per batch).
        """
        valid = start
        interval = self.index_interval_bytes
        oi, ti = self.offset_index, self.time_index
        file = self._file
        base = self.base_offset
        max_offset = base + _INT32_MAX
        max_ts, max_ts_offset = self._max_ts, self._max_ts_offset
        since = self._bytes_since_last_index_entry
        prev_last = base - 1
        for pos, hdr, buf, rel in self._walk_batches(start, self._size, _RECOVERY_CHUNK):
            size = hdr.batch_length + LOG_OVERHEAD
            last_offset = hdr.base_offset + hdr.last_offset_delta
            if hdr.base_offset <= prev_last or hdr.last_offset_delta < 0 or last_offset > max_offset:
                break
            if verify_crc:
                if rel + size > len(buf):  # a batch larger than what the chunk holds
                    buf, rel = os.pread(file.fileno(), size, pos), 0
                if not _verify_crc(buf, rel, hdr):
                    break
            prev_last = last_offset
            if hdr.max_timestamp > max_ts:
                max_ts = hdr.max_timestamp
                max_ts_offset = last_offset
            already = reindex_from is not None and last_offset <= reindex_from
            if not already and since > interval:
                if not oi.is_full() and (oi.entries == 0 or last_offset > oi.last_offset):
                    oi.append(last_offset, pos)
                if not ti.is_full() and (ti.entries == 0 or max_ts_offset >= ti.last_entry().offset):
                    ti.maybe_append(max_ts, max_ts_offset)
                since = 0
            since += size
            valid = pos + size
        self._max_ts, self._max_ts_offset = max_ts, max_ts_offset
        self._bytes_since_last_index_entry = since
        return valid

    def read_next_offset(self) -> int:
        """The offset after the last batch (scans from the last offset-index entry)."""
        nxt = self.base_offset
        for _pos, hdr in self.iter_batch_headers(self.offset_index.lookup(self.offset_index.last_offset).position):
            nxt = hdr.base_offset + hdr.last_offset_delta + 1
        if nxt == self.base_offset and self.offset_index.entries:
            # the last entry points past the data: fall back to a full scan
            for _pos, hdr in self.iter_batch_headers(0):
                nxt = hdr.base_offset + hdr.last_offset_delta + 1
        return nxt

    def _recompute_max_timestamp(self) -> None:
        last = self.time_index.last_entry()
        self._max_ts, self._max_ts_offset = last.timestamp, last.offset
        start = self.offset_index.lookup(last.offset).position
        for _pos, hdr in self.iter_batch_headers(start):
            if hdr.max_timestamp > self._max_ts:
                self._max_ts = hdr.max_timestamp
                self._max_ts_offset = hdr.base_offset + hdr.last_offset_delta

    def _truncate_file(self, size: int) -> None:
        os.ftruncate(self._file.fileno(), size)
        self._size = size

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int) -> int:
        """Remove everything at or after ``offset`` (SPEC 7).  Returns bytes removed."""
        mapping = self.translate_offset(offset)
        self.offset_index.truncate_to(offset)
        self.time_index.truncate_to(offset)
        self.txn_index.truncate_to(offset)
        self.offset_index.resize(self.offset_index.max_index_size)
        self.time_index.resize(self.time_index.max_index_size)
        cut = 0
        if mapping is not None:
            cut = self._size - mapping.position
            self._truncate_file(mapping.position)
        if self._size == 0:
            self.created_ms = self.clock.time_ms()
            self._rolling_ts = _UNKNOWN
        self._bytes_since_last_index_entry = 0
        self._recompute_max_timestamp()
        return cut

    # ------------------------------------------------------------------ durability / life cycle
    def durable_files(self) -> list[tuple[int, str]]:
        """(descriptor, path) of each of the segment's files, new descriptors of their own
        (the .log's duplicated, the indexes opened by path; a missing .txnindex skipped),
        for a caller that fsyncs them on another thread and closes them: what ``flush``
        makes durable, without the event loop waiting for it, and unaffected by the
        segment being closed or deleted meanwhile (an fsync of the same inodes)."""
        files = [(os.dup(self._file.fileno()), self.log_path)]
        try:
            for path in (self.offset_index_path, self.time_index_path, self.txn_index_path):
                try:
                    files.append((os.open(path, os.O_RDONLY), path))
                except FileNotFoundError:
                    pass  # no .txnindex (no aborted transaction), or an index trimmed to nothing
        except BaseException:
            for fd, _path in files:
                os.close(fd)
            raise
        return files

    def flush(self) -> None:
        """fsync the .log and msync both indexes."""
        os.fsync(self._file.fileno())
        self.offset_index.flush()
        self.time_index.flush()
        self.txn_index.flush()

    def close(self) -> None:
        """Final time-index entry, trim both indexes, close the file (clean close)."""
        if self._file.closed:
            return
        try:
            if self._max_ts >= 0:
                self.time_index.maybe_append(self._max_ts, self._max_ts_offset, skip_full_check=True)
        finally:
            self.offset_index.close()
            self.time_index.close()
            self._file.close()

    def close_handlers(self) -> None:
        """Close without writing anything (simulated crash, failed disk)."""
        self.offset_index.close_handler()
        self.time_index.close_handler()
        self._file.close()

    def delete(self) -> None:
        self.close_handlers()
        for path in (self.log_path, self.offset_index_path, self.time_index_path, self.txn_index_path):
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass

    _FILE_ATTRS = ("log_path", "offset_index_path", "time_index_path", "txn_index_path")

    def change_file_suffixes(self, old: str, new: str, hook=None) -> None:
        """Rename the segment's files from ``<name><old>`` to ``<name><new>`` (log first,
        then the indexes, as Kafka's LogSegment.changeFileSuffixes); open descriptors
        and maps stay valid. A missing file (a segment without a .txnindex) is skipped.
        ``hook(name)`` is called after each rename (tests: a kill between renames)."""
        for attr in self._FILE_ATTRS:
            cur = getattr(self, attr)
            if old:
                if not cur.endswith(old):
                    raise ValueError(f"{cur} does not end with {old!r}")
                cur_base = cur[: -len(old)]
            else:
                cur_base = cur
            target = cur_base + new
            try:
                os.replace(cur, target)
            except FileNotFoundError:
                pass
            setattr(self, attr, target)
            if hook is not None:
                hook(os.path.basename(target))
        self._file.path = self.log_path
        self.offset_index.path = self.offset_index_path
        self.time_index.path = self.time_index_path
        self.txn_index.path = self.txn_index_path

    def rename_to_deleted(self) -> None:
        """Retention: rename the three files to ``<name>.deleted`` (removed later with
        ``delete``).  Open descriptors and maps stay valid, so a Fetch already holding a
        FileSlice of this segment still sends its bytes."""
        self.change_file_suffixes("", DELETED_SUFFIX)

    def migrate_time_index(self, timestamp: int) -> None:
        """KIP-33 migration of a segment written before timestamps existed (its batches
        carry none): a time index of one entry, (``timestamp`` (the .log mtime), the
        segment's last offset), so retention and search by time keep working."""
        last = self.read_next_offset() - 1
        if last < self.base_offset or self._max_ts >= 0:
            return
        self.time_index.reset()
        self.time_index.maybe_append(timestamp, last, skip_full_check=True)
        self.time_index.trim_to_valid_size()
        self._max_ts, self._max_ts_offset = timestamp, last

    def __repr__(self) -> str:
        return (f"LogSegment(base_offset={self.base_offset}, size={self._size}, "
                f"max_timestamp={self._max_ts})")


class _SingleBatch:  # pragma: no cover - fallback for a ValidatedAppend without batches
    __slots__ = ("position", "size", "base_offset", "last_offset", "max_timestamp", "offset_of_max_timestamp")

    def __init__(self, v):
        self.position = 0
        self.size = len(v.buffer)
        self.base_offset = v.base_offset
        self.last_offset = v.last_offset
        self.max_timestamp = v.max_timestamp
        self.offset_of_max_timestamp = v.offset_of_max_timestamp
