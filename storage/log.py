"""One partition's log: a directory ``<topic>-<partition>`` of segments.

Files: ``<base offset, 20 digits>.log`` / ``.index`` / ``.timeindex`` per segment (byte
formats in :mod:`storage.segment`, :mod:`storage.offset_index`,
:mod:`storage.time_index`).  The last segment is the active one; its indexes are kept
at their preallocated size (``segment.index.bytes``) while active and trimmed when it is
rolled or the log is closed.

Loading (this milestone; full recovery with a clean-shutdown marker comes next):

* leftover ``.deleted`` / ``.cleaned`` / ``.swap`` files and index files without a
  ``.log`` are removed;
* a segment whose index is missing or fails its sanity check (size not a multiple of
  the entry size, zero-filled preallocated tail, entries going backwards or beyond the
  log) is rebuilt by scanning its batches; if that cuts bytes off a segment that is not
  the last, the later segments are deleted;
* the last segment's batches after its last offset-index entry are validated (length,
  magic, CRC) and indexed, a torn trailing batch is cut off, and the log end offset is
  recomputed from the last whole batch.  After a process kill the active segment's
  index still has its zero-filled preallocated tail, so the whole active segment is
  rebuilt (as Kafka recovers everything after the recovery point).

Writes reach the page cache before ``append`` returns (``os.pwrite``), so acknowledged
data survives a process kill without fsync; fsync happens per ``flush.messages`` /
``flush.ms`` (LogManager.flush_due) and for rolled segments (deferred to flush_due, as
Kafka schedules it in the background).
"""

from __future__ import annotations

import bisect
import logging
import os
import re
import shutil
from typing import NamedTuple

from storage.errors import KafkaStorageError, OffsetOutOfRangeError, RecordListTooLargeError
from storage.file_slice import FileSlice
from storage.index import CorruptIndexError
from storage.segment import (
    LogSegment,
    OffsetAndTimestamp,
    log_file_name,
    offset_index_file_name,
    time_index_file_name,
)

__all__ = ["Log", "AppendInfo", "FetchDataInfo", "parse_topic_partition_dir"]

logger = logging.getLogger(__name__)

_SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex|txnindex)$")
_TEMP_SUFFIXES = (".deleted", ".cleaned", ".swap")
_TIMESTAMP_TYPE_BIT = 0x08


class AppendInfo(NamedTuple):
    base_offset: int
    last_offset: int
    log_append_time: int  # -1 for CreateTime topics
    log_start_offset: int
    record_count: int
    max_timestamp: int


class FetchDataInfo(NamedTuple):
    records: FileSlice | None
    high_watermark: int
    log_start_offset: int


def parse_topic_partition_dir(name: str) -> tuple[str, int] | None:
    """``"my-topic-3"`` -> ``("my-topic", 3)``; None if the name is not of that form."""
    topic, sep, part = name.rpartition("-")
    if not sep or not topic or not part.isdigit() or (len(part) > 1 and part[0] == "0"):
        return None
    return topic, int(part)


class Log:
    """A partition log.  Synchronous; meant for the broker's single asyncio thread."""

    def __init__(self, dir_path: str, config, clock, *, topic: str | None = None,
                 partition: int | None = None, rng=None):
        self.dir = os.fspath(dir_path)
        if topic is None or partition is None:
            parsed = parse_topic_partition_dir(os.path.basename(os.path.normpath(self.dir)))
            if parsed is None and (topic is None or partition is None):
                raise ValueError(f"{self.dir} is not a <topic>-<partition> directory")
            topic = topic if topic is not None else parsed[0]
            partition = partition if partition is not None else parsed[1]
        self.topic = topic
        self.partition = partition
        self.config = config
        self.clock = clock
        self._rng = rng
        self._segments: list[LogSegment] = []
        self._bases: list[int] = []
        self._closed = False
        os.makedirs(self.dir, exist_ok=True)
        self._load()
        self._hw = self._leo
        self.recovery_point = self._leo
        self.last_flush_ms = clock.monotonic_ms()

    # ------------------------------------------------------------------ loading
    def _open_segment(self, base_offset: int) -> LogSegment:
        return LogSegment.open(self.dir, base_offset, self.config, self.clock, self._rng)

    def _load(self) -> None:
        names = os.listdir(self.dir)
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
                self._segments.append(self._open_segment(base))
            if not self._segments:
                self._segments.append(self._open_segment(0))
            self._bases = [s.base_offset for s in self._segments]
            self._check_segments()
        except BaseException:
            for seg in self._segments:
                seg.close_handlers()
            raise
        self._log_start_offset = self._segments[0].base_offset
        self._leo, last_hdr = self._scan_end()
        self._last_append_time_ms = -1
        if last_hdr is not None and last_hdr.attributes & _TIMESTAMP_TYPE_BIT:
            self._last_append_time_ms = last_hdr.max_timestamp

    def _check_segments(self) -> None:
        i = 0
        while i < len(self._segments):
            seg = self._segments[i]
            is_last = i == len(self._segments) - 1
            problem = None
            if not seg.offset_index_existed:
                problem = "missing offset index"
            elif not seg.time_index_existed:
                problem = "missing time index"
            else:
                try:
                    seg.sanity_check()
                    if not is_last:
                        nxt = self._segments[i + 1].base_offset
                        seg.time_index.sanity_check(max_offset=nxt - 1)
                except CorruptIndexError as e:
                    problem = str(e)
            if problem is not None:
                logger.warning("rebuilding the indexes of segment %s: %s", seg.log_path, problem)
                cut = seg.recover()
                if cut and not is_last:
                    logger.warning("segment %s lost %d invalid bytes; deleting the %d later segment(s)",
                                   seg.log_path, cut, len(self._segments) - i - 1)
                    for later in self._segments[i + 1:]:
                        later.delete()
                    del self._segments[i + 1:]
                    is_last = True
                if is_last:
                    seg.resize_indexes(seg.max_index_size)
            elif is_last:
                seg.resize_indexes(seg.max_index_size)
                cut = seg.recover_tail()
                if cut:
                    logger.warning("cut %d bytes of a torn batch off the end of %s", cut, seg.log_path)
            i += 1
        self._bases = [s.base_offset for s in self._segments]

    def _scan_end(self):
        """(log end offset, header of the last batch or None)."""
        for seg in reversed(self._segments):
            last = None
            start = seg.offset_index.lookup(seg.offset_index.last_offset).position
            for _pos, hdr in seg.iter_batch_headers(start):
                last = hdr
            if last is None and seg.size:
                for _pos, hdr in seg.iter_batch_headers(0):
                    last = hdr
            if last is not None:
                return last.base_offset + last.last_offset_delta + 1, last
            if seg is self._segments[-1]:
                # an empty active segment: its base offset is the end
                return seg.base_offset, None
        return self._segments[-1].base_offset, None  # pragma: no cover

    # ------------------------------------------------------------------ properties
    @property
    def log_start_offset(self) -> int:
        return self._log_start_offset

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
    def size_in_bytes(self) -> int:
        return sum(s.size for s in self._segments)

    @property
    def unflushed_messages(self) -> int:
        return self._leo - self.recovery_point

    def update_config(self, config) -> None:
        """New topic config; new segments use its index settings."""
        self.config = config

    # ------------------------------------------------------------------ append
    def append(self, records, *, magic_hint: int | None = None, in_place: bool = False) -> AppendInfo:
        """Validate, assign offsets, roll if needed, write.  Raises storage errors.
        ``in_place``: ``records`` is a writable buffer the caller gives up, so offsets
        and timestamps are patched in it instead of in a copy."""
        from storage.validator import validate_records

        self._ensure_open()
        now = self.clock.time_ms()
        va = validate_records(records, magic_hint=magic_hint, config=self.config,
                              next_offset=self._leo, now_ms=now,
                              last_append_time_ms=self._last_append_time_ms,
                              in_place=in_place)
        return self.append_validated(va, now_ms=now)

    def append_validated(self, va, *, now_ms: int | None = None) -> AppendInfo:
        """Append an already validated ``ValidatedAppend`` whose base offset is the LEO."""
        self._ensure_open()
        if now_ms is None:
            now_ms = self.clock.time_ms()
        size = len(va.buffer)
        if size == 0 or va.record_count == 0:
            return AppendInfo(-1, -1, va.log_append_time, self._log_start_offset, 0, va.max_timestamp)
        if va.base_offset != self._leo:
            raise ValueError(f"append at base offset {va.base_offset} to {self.topic}-{self.partition} "
                             f"whose log end offset is {self._leo}")
        segment_bytes = self.config.segment_bytes
        if size > segment_bytes:
            raise RecordListTooLargeError(
                f"append of {size} bytes to {self.topic}-{self.partition} is larger than "
                f"segment.bytes={segment_bytes}")
        seg = self._segments[-1]
        try:
            if seg.size > 0 and seg.should_roll(max_timestamp=va.max_timestamp, size=size,
                                                max_offset=va.last_offset, now_ms=now_ms,
                                                segment_bytes=segment_bytes,
                                                segment_ms=self.config.segment_ms):
                seg = self.roll(va.base_offset)
            seg.append(va)
        except OSError as e:
            raise KafkaStorageError(
                f"I/O error appending to {self.topic}-{self.partition} in {self.dir}: {e}") from e
        self._leo = va.last_offset + 1
        self._hw = self._leo
        if va.log_append_time is not None and va.log_append_time >= 0:
            self._last_append_time_ms = max(self._last_append_time_ms, va.log_append_time)
        flush_messages = getattr(self.config, "flush_messages", None)
        if flush_messages is not None and self._leo - self.recovery_point >= flush_messages:
            self.flush()
        return AppendInfo(va.base_offset, va.last_offset, va.log_append_time,
                          self._log_start_offset, va.record_count, va.max_timestamp)

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
        return new

    # ------------------------------------------------------------------ read
    def read(self, fetch_offset: int, max_bytes: int, min_one_message: bool = True) -> FetchDataInfo:
        """Bytes from the batch holding ``fetch_offset`` (one segment at most)."""
        self._ensure_open()
        leo, lso, hw = self._leo, self._log_start_offset, self._hw
        if fetch_offset > leo or fetch_offset < lso:
            raise OffsetOutOfRangeError(
                f"fetch offset {fetch_offset} of {self.topic}-{self.partition} is out of range: "
                f"log start offset {lso}, log end offset {leo}")
        if fetch_offset == leo:
            return FetchDataInfo(None, hw, lso)
        i = max(0, bisect.bisect_right(self._bases, fetch_offset) - 1)
        segs = self._segments
        while i < len(segs):
            seg = segs[i]
            records = seg.read(fetch_offset, max_bytes, max_position=seg.size,
                               min_one_message=min_one_message)
            if records is not None:
                return FetchDataInfo(records if len(records) else None, hw, lso)
            i += 1
        return FetchDataInfo(None, hw, lso)

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
        if found is None or found.offset >= self._hw or found.offset < self._log_start_offset:
            return None
        return found

    # ------------------------------------------------------------------ truncation
    def truncate_to(self, offset: int) -> None:
        """Remove every record at or after ``offset`` (SPEC 7)."""
        self._ensure_open()
        if offset < 0:
            raise ValueError(f"cannot truncate {self.topic}-{self.partition} to {offset}")
        if offset >= self._leo:
            return
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
        else:
            self._segments[-1].truncate_to(offset)
        self._leo = offset
        self._hw = min(self._hw, offset)
        self.recovery_point = min(self.recovery_point, offset)

    # ------------------------------------------------------------------ durability
    def flush(self, offset: int | None = None) -> None:
        """fsync the segments holding [recovery point, offset) (default: up to the LEO)."""
        self._ensure_open()
        if offset is None:
            offset = self._leo
        rp = self.recovery_point
        segs = self._segments
        for i, seg in enumerate(segs):
            if seg.base_offset >= offset:
                break
            end = segs[i + 1].base_offset if i + 1 < len(segs) else None
            if end is not None and end <= rp:
                continue
            seg.flush()
        self.recovery_point = max(rp, offset)
        self.last_flush_ms = self.clock.monotonic_ms()

    def flush_rolled_segments(self) -> bool:
        """fsync segments rolled since the last flush (Kafka's flush on roll)."""
        active_base = self._segments[-1].base_offset
        if self.recovery_point < active_base:
            self.flush(active_base)
            return True
        return False

    def close(self) -> None:
        """Clean close: final time-index entries, indexes trimmed, files closed."""
        if self._closed:
            return
        self._closed = True
        for seg in self._segments:
            seg.close()

    def close_handlers(self) -> None:
        """Close files without writing (tests: simulated crash)."""
        self._closed = True
        for seg in self._segments:
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


def _unlink(path: str) -> None:
    try:
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except FileNotFoundError:
        pass
