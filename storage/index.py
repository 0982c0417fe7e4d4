"""Shared machinery of the segment indexes (``.index`` and ``.timeindex``).

An index file is an array of fixed-size big-endian entries, memory-mapped for reads and
writes (writes go to the page cache through the mapping; ``flush()`` forces them to
disk).  Entry formats live in :mod:`storage.offset_index` and :mod:`storage.time_index`.
The map is made on first use, not at open, and is one of the handles the open-files
bound (:mod:`storage.open_files`) may release; it is made again on the next use.

Life cycle (as in Kafka's ``AbstractIndex``):

* A new file is preallocated (sparse ``ftruncate``) to ``max_index_size`` rounded down
  to a multiple of the entry size; it starts with 0 entries.
* An existing file is assumed valid: its entry count is ``file length // entry size``.
  A trimmed index (clean roll/close) therefore opens with exactly its entries.  After a
  process kill the active segment's index is still preallocated and zero-filled past its
  last real entry, so that count is too large: :meth:`sanity_check` detects it (an
  all-zero entry in a slot other than 0 cannot be valid, entries must strictly
  increase) and the log then rebuilds the index from the ``.log`` (Kafka does the same
  through recovery after an unclean shutdown).
* ``trim_to_valid_size()`` shrinks the file to the used entries (on roll and on close);
  ``resize(max_index_size)`` grows it back when a segment becomes active again.

Lookups are binary searches (``bisect`` over slot numbers, entries read with
``struct.unpack_from`` straight from the mapping).
"""

from __future__ import annotations

import bisect
import mmap
import os
import struct

from storage.errors import StorageError
from storage.open_files import OPEN_FILES

__all__ = [
    "AbstractIndex",
    "CorruptIndexError",
    "IndexOffsetOverflowError",
    "InvalidIndexOffsetError",
]

_INT32_MAX = 0x7FFFFFFF


class CorruptIndexError(StorageError):
    """An index file failed its sanity check; it must be rebuilt from the log."""


class IndexOffsetOverflowError(StorageError):
    """An offset does not fit in the index's int32 relative offset."""


class InvalidIndexOffsetError(StorageError):
    """An append would make index entries go backwards."""


def _round_down(number: int, factor: int) -> int:
    return factor * (number // factor)


class AbstractIndex:
    """Entry-format-agnostic part of an mmap-backed index file."""

    # every field a slot: storage/_append.c reads is_full's two where they sit in the object
    __slots__ = ("entries", "max_entries", "_map_obj", "_written", "base_offset", "length", "max_index_size", "path",
                 "writable", "_recent", "__weakref__")

    ENTRY_SIZE: int = 0
    _STRUCT: struct.Struct  # entry layout
    _KEY_STRUCT: struct.Struct  # the search key at offset 0 of an entry
    _VALUE_STRUCT: struct.Struct  # the value field
    _VALUE_OFFSET: int = 0

    def __init__(self, path: str, base_offset: int, max_index_size: int = -1, writable: bool = True,
                 exists: bool | None = None):
        """``exists``: whether the file is there, when the caller knows (None: look)."""
        self.path = os.fspath(path)
        self.base_offset = int(base_offset)
        self.max_index_size = int(max_index_size)
        self.writable = writable
        self._map_obj: mmap.mmap | None = None  # None when empty or released by OPEN_FILES
        self._recent = False  # used since the OPEN_FILES' last pass
        self._written = False  # entries written since the last flush()
        newly_created = not (os.path.exists(self.path) if exists is None else exists)
        flags = os.O_RDWR | os.O_CREAT if writable else os.O_RDONLY
        fd = os.open(self.path, flags, 0o644)
        try:
            if newly_created:
                if self.max_index_size < self.ENTRY_SIZE:
                    raise ValueError(
                        f"invalid max index size {self.max_index_size} for {self.path}: "
                        f"must be >= the entry size {self.ENTRY_SIZE}")
                os.ftruncate(fd, _round_down(self.max_index_size, self.ENTRY_SIZE))
            length = os.fstat(fd).st_size
        finally:
            os.close(fd)
        # mapped on first use (_mm), not here: the index of a segment nobody reads and
        # that has had no entry yet (every new segment, most idle ones) holds no descriptor
        self.length = length
        self.max_entries = length // self.ENTRY_SIZE
        # Kafka's way: a new index is empty; an existing one is assumed full of valid
        # entries (sanity_check() catches the preallocated zero tail left by a crash).
        self.entries = 0 if newly_created else length // self.ENTRY_SIZE

    # ------------------------------------------------------------------ mapping
    def _map(self, fd: int, length: int, reopen: bool = False) -> None:
        if length == 0:
            self._map_obj = None
            return
        if self.writable:
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        else:
            mm = mmap.mmap(fd, length, mmap.MAP_SHARED, mmap.PROT_READ)
        if hasattr(mmap, "MADV_RANDOM"):
            # Index access is binary search plus appends at the tail. Without this the
            # kernel's readahead answers each first touch of the sparse preallocated file
            # by zero-filling a large folio of holes (measured: ~14% of the broker's CPU
            # under produce load).
            mm.madvise(mmap.MADV_RANDOM)
        self._map_obj = mm
        # a map holds a descriptor of its own (CPython dups it): one of the bounded handles
        OPEN_FILES.opened(self, reopen)

    @property
    def _mm(self) -> mmap.mmap | None:
        """The mapping, mapped again by path if OPEN_FILES released it."""
        mm = self._map_obj
        if mm is not None:
            OPEN_FILES.touch(self)
            return mm
        if self.length == 0:
            return None
        fd = os.open(self.path, os.O_RDWR if self.writable else os.O_RDONLY)
        try:
            self._map(fd, self.length, reopen=True)
        finally:
            os.close(fd)
        return self._map_obj

    def _release(self) -> None:
        """Unmap, keep the file usable (an OPEN_FILES eviction). MAP_SHARED: what was written
        through the map is in the page cache already."""
        mm, self._map_obj = self._map_obj, None
        if mm is not None:
            try:
                mm.close()
            except BufferError:  # pragma: no cover - a view of it is alive: keep it mapped
                self._map_obj = mm

    def _unmap(self) -> None:
        if self._map_obj is not None:
            OPEN_FILES.closed(self)
            self._release()

    # ------------------------------------------------------------------ state
    def is_full(self) -> bool:
        return self.entries >= self.max_entries

    def size_in_bytes(self) -> int:
        """Bytes used by the entries (not the file length)."""
        return self.entries * self.ENTRY_SIZE

    def relative_offset(self, offset: int) -> int:
        rel = offset - self.base_offset
        if rel < 0 or rel > _INT32_MAX:
            raise IndexOffsetOverflowError(
                f"offset {offset} does not fit as an int32 relative offset to base offset "
                f"{self.base_offset} ({self.path})")
        return rel

    def can_append_offset(self, offset: int) -> bool:
        return 0 <= offset - self.base_offset <= _INT32_MAX

    def _raw_entry(self, n: int) -> tuple:
        return self._STRUCT.unpack_from(self._mm, n * self.ENTRY_SIZE)

    def _key_at(self, n: int) -> int:
        return self._KEY_STRUCT.unpack_from(self._mm, n * self.ENTRY_SIZE)[0]

    def _value_at(self, n: int) -> int:
        return self._VALUE_STRUCT.unpack_from(self._mm, n * self.ENTRY_SIZE + self._VALUE_OFFSET)[0]

    def _largest_lower_bound_slot(self, target: int, by_value: bool = False) -> int:
        """Slot of the largest entry whose key (or value) is <= target, or -1."""
        n = self.entries
        if n == 0:
            return -1
        get = self._value_at if by_value else self._key_at
        return bisect.bisect_right(range(n), target, key=get) - 1

    def _smallest_upper_bound_slot(self, target: int, by_value: bool = False) -> int:
        """Slot of the smallest entry whose key (or value) is >= target, or -1."""
        n = self.entries
        if n == 0:
            return -1
        get = self._value_at if by_value else self._key_at
        slot = bisect.bisect_left(range(n), target, key=get)
        return -1 if slot >= n else slot

    def _is_zero_entry(self, n: int) -> bool:
        start = n * self.ENTRY_SIZE
        return self._mm[start:start + self.ENTRY_SIZE] == bytes(self.ENTRY_SIZE)

    def _check_common(self) -> None:
        if self.length % self.ENTRY_SIZE != 0:
            raise CorruptIndexError(
                f"index file {self.path} is corrupt: length {self.length} is not a multiple "
                f"of the entry size {self.ENTRY_SIZE}")
        if self.entries > 1 and self._is_zero_entry(self.entries - 1):
            raise CorruptIndexError(
                f"index file {self.path} ends with a zero-filled entry in slot "
                f"{self.entries - 1}: preallocated tail of an index not closed cleanly")

    # ------------------------------------------------------------------ mutation
    def _truncate_to_entries(self, entries: int) -> None:
        self.entries = max(0, min(entries, self.max_entries))

    def truncate(self) -> None:
        """Remove every entry (the file keeps its length)."""
        self._truncate_to_entries(0)

    def resize(self, new_size: int) -> bool:
        """Set the file length (rounded down to the entry size); keeps the entries that fit.

        Returns whether the file changed.
        """
        rounded = _round_down(max(0, int(new_size)), self.ENTRY_SIZE)
        if rounded == self.length:
            return False
        self._unmap()  # MAP_SHARED: the pages already belong to the file
        fd = os.open(self.path, os.O_RDWR)
        try:
            os.ftruncate(fd, rounded)
        finally:
            os.close(fd)
        # mapped again on its next use (_mm): a broker start resizes every active
        # segment's indexes, most of which are not used before their next append
        self.length = rounded
        self.max_entries = rounded // self.ENTRY_SIZE
        if self.entries > self.max_entries:
            self.entries = self.max_entries
        return True

    def trim_to_valid_size(self) -> bool:
        return self.resize(self.entries * self.ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry and grow the file back to ``max_index_size``."""
        self.truncate()
        self.resize(self.max_index_size)

    def flush(self) -> None:
        """Force the entries written since the last flush to disk: msync, or fdatasync
        when OPEN_FILES has unmapped the index meanwhile (its pages are in the page cache)."""
        if self._map_obj is not None:
            self._map_obj.flush()
        elif self._written:
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fdatasync(fd)
            finally:
                os.close(fd)
        self._written = False

    def close(self) -> None:
        """Trim the file to its entries and unmap it."""
        self.trim_to_valid_size()
        self._unmap()

    def close_handler(self) -> None:
        """Unmap without touching the file."""
        self._unmap()

    def delete_if_exists(self) -> bool:
        self._unmap()
        try:
            os.unlink(self.path)
            return True
        except FileNotFoundError:
            return False

    def rename_to(self, new_path: str) -> None:
        os.replace(self.path, new_path)
        self.path = os.fspath(new_path)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(path={self.path!r}, base_offset={self.base_offset}, "
                f"entries={self.entries}, max_entries={self.max_entries})")
