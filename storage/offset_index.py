"""The offset index (``<base offset, 20 digits>.index``).

Byte format: an array of 8-byte big-endian entries, no header::

    relative_offset  int32   offset - segment base offset
    position         int32   byte position in the .log of the batch the entry points at

An entry (O, P) is written before an append when more than ``index.interval.bytes``
were appended since the previous entry; O is the last offset of the batch that starts
at P.  Entries strictly increase in both fields.  The file is preallocated to
``segment.index.bytes`` rounded down to 8 and trimmed to ``8 * entries`` on roll and on
clean close.  Lookup returns the largest entry with offset <= target, else
``(base_offset, 0)``.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from storage.index import AbstractIndex, CorruptIndexError, InvalidIndexOffsetError

__all__ = ["OffsetIndex", "OffsetPosition"]


class OffsetPosition(NamedTuple):
    offset: int
    position: int


class OffsetIndex(AbstractIndex):
    __slots__ = ("_last",)
    ENTRY_SIZE = 8
    _STRUCT = struct.Struct(">ii")
    _KEY_STRUCT = struct.Struct(">i")
    _VALUE_STRUCT = struct.Struct(">i")
    _VALUE_OFFSET = 4

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1, writable: bool = True,
                 exists: bool | None = None):
        super().__init__(path, base_offset, max_index_size, writable, exists)
        self._last = self._last_entry()  # the last entry, or (base_offset, 0) when there is none

    # searches compare relative offsets; callers speak absolute offsets
    def _entry(self, n: int) -> OffsetPosition:
        rel, pos = self._STRUCT.unpack_from(self._mm, n * 8)
        return OffsetPosition(self.base_offset + rel, pos)

    def _last_entry(self) -> OffsetPosition:
        if self.entries == 0:
            return OffsetPosition(self.base_offset, 0)
        return self._entry(self.entries - 1)

    @property
    def last_offset(self) -> int:
        return self._last.offset

    def last_entry(self) -> OffsetPosition:
        return self._last_entry()

    def entry(self, n: int) -> OffsetPosition:
        if n < 0 or n >= self.entries:
            raise IndexError(f"entry {n} requested from {self.path} which has {self.entries} entries")
        return self._entry(n)

    def lookup(self, target_offset: int) -> OffsetPosition:
        """Largest entry with offset <= target_offset, else ``(base_offset, 0)``."""
        last = self._last  # the last entry, or (base_offset, 0) when there is none
        if target_offset >= last.offset:
            return last  # a read at the log's end, the common case: no search
        slot = self._largest_lower_bound_slot(target_offset - self.base_offset)
        if slot < 0:
            return OffsetPosition(self.base_offset, 0)
        return self._entry(slot)

    def fetch_upper_bound_offset(self, start_position: int, fetch_size: int) -> int | None:
        """An offset guaranteed to lie past ``start_position + fetch_size`` bytes, if any."""
        slot = self._smallest_upper_bound_slot(start_position + fetch_size, by_value=True)
        return None if slot < 0 else self._entry(slot).offset

    def append(self, offset: int, position: int) -> None:
        if self.is_full():
            raise InvalidIndexOffsetError(
                f"attempt to append to a full index {self.path} ({self.entries} entries)")
        if self.entries and offset <= self._last.offset:
            raise InvalidIndexOffsetError(
                f"attempt to append offset {offset} to slot {self.entries} of {self.path}, "
                f"not larger than the last offset {self._last.offset}")
        self._STRUCT.pack_into(self._mm, self.entries * 8, self.relative_offset(offset), position)
        self._written = True
        self.entries += 1
        self._last = OffsetPosition(offset, position)

    def truncate_to(self, offset: int) -> None:
        """Remove every entry with offset >= ``offset``."""
        rel = offset - self.base_offset
        slot = self._largest_lower_bound_slot(rel)
        if slot < 0:
            n = 0
        elif self._key_at(slot) == rel:
            n = slot
        else:
            n = slot + 1
        self._truncate_to_entries(n)

    def _truncate_to_entries(self, entries: int) -> None:
        super()._truncate_to_entries(entries)
        self._last = self._last_entry()

    def resize(self, new_size: int) -> bool:
        entries = self.entries
        changed = super().resize(new_size)
        if changed and self.entries != entries:  # growing keeps the last entry (and the index unmapped)
            self._last = self._last_entry()
        return changed

    def sanity_check(self, log_size: int | None = None, full: bool = False) -> None:
        """Raise :class:`CorruptIndexError` when the index cannot be trusted.

        Checks: length a multiple of 8; no zero-filled preallocated tail; the last entry
        not below the base offset and (given ``log_size``) pointing inside the log; the
        entries increasing (first vs last, or every neighbour pair with ``full=True``).
        """
        self._check_common()
        n = self.entries
        if n == 0:
            return
        first_rel, first_pos = self._STRUCT.unpack_from(self._mm, 0)
        last_rel, last_pos = self._STRUCT.unpack_from(self._mm, (n - 1) * 8)
        if last_rel < 0 or first_rel < 0 or first_pos < 0:
            raise CorruptIndexError(
                f"index {self.path}: last offset {self.base_offset + last_rel} is below the "
                f"base offset {self.base_offset}")
        if n > 1 and (last_rel <= first_rel or last_pos <= first_pos):
            raise CorruptIndexError(
                f"index {self.path}: entries go backwards (first {first_rel}@{first_pos}, "
                f"last {last_rel}@{last_pos}, relative)")
        if log_size is not None and last_pos >= log_size:
            raise CorruptIndexError(
                f"index {self.path}: last entry points at position {last_pos} beyond the "
                f"log size {log_size}")
        if full and n > 1:
            prev_rel, prev_pos = first_rel, first_pos
            for rel, pos in self._STRUCT.iter_unpack(self._mm[8:n * 8]):
                if rel <= prev_rel or pos <= prev_pos:
                    raise CorruptIndexError(
                        f"index {self.path}: entry {rel}@{pos} does not follow {prev_rel}@{prev_pos}")
                prev_rel, prev_pos = rel, pos
