"""The time index (``<base offset, 20 digits>.timeindex``), KIP-33.

Byte format: an array of 12-byte big-endian entries, no header::

    timestamp        int64   a max timestamp
    relative_offset  int32   offset - segment base offset

An entry (T, O) means: the largest timestamp in the segment up to and including the
batch ending at offset O is T (O is the last offset of the batch that carries T), so
any record with a timestamp > T sits after O.  Entries are appended only when T is
strictly greater than the last entry's timestamp, so timestamps strictly increase and
offsets never decrease.  The file is preallocated to ``segment.index.bytes`` rounded
down to 12 and counts as full one slot early: the last slot is kept for the final entry
(the segment's max timestamp) written when the segment is rolled or closed, after which
it is trimmed to ``12 * entries``.  Lookup returns the largest entry with timestamp <=
target, else ``(-1, base_offset)``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from storage.index import AbstractIndex, CorruptIndexError, InvalidIndexOffsetError

__all__ = ["TimeIndex", "TimestampOffset", "NO_TIMESTAMP"]

NO_TIMESTAMP = -1


class TimestampOffset(NamedTuple):
    timestamp: int
    offset: int


class TimeIndex(AbstractIndex):
    __slots__ = ("_last",)
    ENTRY_SIZE = 12
    _STRUCT = struct.Struct(">qi")
    _KEY_STRUCT = struct.Struct(">q")
    _VALUE_STRUCT = struct.Struct(">i")
    _VALUE_OFFSET = 8

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1, writable: bool = True,
                 exists: bool | None = None):
        super().__init__(path, base_offset, max_index_size, writable, exists)
        self._last = self._last_entry_from_file()

    def _entry(self, n: int) -> TimestampOffset:
        ts, rel = self._STRUCT.unpack_from(self._mm, n * 12)
        return TimestampOffset(ts, self.base_offset + rel)

    def _last_entry_from_file(self) -> TimestampOffset:
        if self.entries == 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._entry(self.entries - 1)

    def is_full(self) -> bool:
        # one slot is reserved for the final entry written on roll / close
        return self.entries >= self.max_entries - 1

    def last_entry(self) -> TimestampOffset:
        return self._last

    def entry(self, n: int) -> TimestampOffset:
        if n < 0 or n >= self.entries:
            raise IndexError(f"entry {n} requested from {self.path} which has {self.entries} entries")
        return self._entry(n)

    def lookup(self, target_timestamp: int) -> TimestampOffset:
        """Largest entry with timestamp <= target, else ``(-1, base_offset)``."""
        slot = self._largest_lower_bound_slot(target_timestamp)
        if slot < 0:
            return TimestampOffset(NO_TIMESTAMP, self.base_offset)
        return self._entry(slot)

    def maybe_append(self, timestamp: int, offset: int, skip_full_check: bool = False) -> bool:
        """Append (timestamp, offset) if timestamp > the last entry's; returns whether it did.

        ``skip_full_check`` is for the final entry on roll / close (the reserved slot).
        """
        if not skip_full_check and self.is_full():
            raise InvalidIndexOffsetError(
                f"attempt to append to a full time index {self.path} ({self.entries} entries)")
        last = self._last
        if self.entries:
            if offset < last.offset:
                raise InvalidIndexOffsetError(
                    f"attempt to append offset {offset} to slot {self.entries} of {self.path}, "
                    f"smaller than the last offset {last.offset}")
            if timestamp < last.timestamp:
                raise InvalidIndexOffsetError(
                    f"attempt to append timestamp {timestamp} to slot {self.entries} of "
                    f"{self.path}, smaller than the last timestamp {last.timestamp}")
        if timestamp > last.timestamp:
            if self.entries >= self.max_entries:
                raise InvalidIndexOffsetError(
                    f"time index {self.path} has no free slot ({self.entries} entries)")
            self._STRUCT.pack_into(self._mm, self.entries * 12, timestamp, self.relative_offset(offset))
            self._written = True
            self.entries += 1
            self._last = TimestampOffset(timestamp, offset)
            return True
        return False

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        rel = offset - self.base_offset
        slot = self._largest_lower_bound_slot(rel, by_value=True)
        if slot < 0:
            n = 0
        elif self._value_at(slot) == rel:
            # several entries may share an offset only in a hand-made file; drop them all
            n = slot
            while n > 0 and self._value_at(n - 1) == rel:
                n -= 1
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last = self._last_entry_from_file()

    def resize(self, new_size: int) -> bool:
        entries = self.entries
        changed = super().resize(new_size)
        if changed and self.entries != entries:  # growing keeps the last entry (and the index unmapped)
            self._last = self._last_entry_from_file()
        return changed

    def sanity_check(self, max_offset: int | None = None, full: bool = False) -> None:
        """Raise :class:`CorruptIndexError` when the index cannot be trusted.

        Checks: length a multiple of 12; no zero-filled preallocated tail; the last entry
        not below the base offset, not before the first entry, and (given
        ``max_offset``, the segment's last offset) not beyond the log; with
        ``full=True`` every neighbour pair increasing.
        """
        self._check_common()
        n = self.entries
        if n == 0:
            return
        first_ts, first_rel = self._STRUCT.unpack_from(self._mm, 0)
        last_ts, last_rel = self._STRUCT.unpack_from(self._mm, (n - 1) * 12)
        if last_rel < 0 or first_rel < 0:
            raise CorruptIndexError(
                f"time index {self.path}: last offset {self.base_offset + last_rel} is below "
                f"the base offset {self.base_offset}")
        if n > 1 and (last_ts <= first_ts or last_rel < first_rel):
            raise CorruptIndexError(
                f"time index {self.path}: entries go backwards (first {first_ts}@{first_rel}, "
                f"last {last_ts}@{last_rel}, relative offsets)")
        if max_offset is not None and self.base_offset + last_rel > max_offset:
            raise CorruptIndexError(
                f"time index {self.path}: last entry offset {self.base_offset + last_rel} is "
                f"beyond the segment's last offset {max_offset}")
        if full and n > 1:
            prev_ts, prev_rel = first_ts, first_rel
            for ts, rel in self._STRUCT.iter_unpack(self._mm[12:n * 12]):
                if ts <= prev_ts or rel < prev_rel:
                    raise CorruptIndexError(
                        f"time index {self.path}: entry {ts}@{rel} does not follow {prev_ts}@{prev_rel}")
                prev_ts, prev_rel = ts, rel
