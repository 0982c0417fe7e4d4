"""The transaction index (``<base offset, 20 digits>.txnindex``): the aborted
transactions whose ABORT marker sits in the segment (KIP-98).

Byte format: an array of 34-byte big-endian entries, no header, appended in the order
of the ABORT markers (so ``last_offset`` strictly increases)::

    version             int16   0
    producer_id         int64
    first_offset        int64   the transaction's first offset in this partition
    last_offset         int64   the offset of its ABORT marker
    last_stable_offset  int64   the partition's last stable offset once the marker was written

The file is created with the first entry (a segment without aborted transactions has
none) and never preallocated. A read_committed fetch of ``[fetch_offset, upper)`` asks
every segment from the one holding ``fetch_offset`` onwards for the entries that overlap
the range (``last_offset >= fetch_offset and first_offset < upper``) and may stop at the
first entry whose ``last_stable_offset >= upper``: transactions aborted after that point
began after the range (:meth:`TransactionIndex.collect`). A partial entry at the end (a
crash mid-append) is dropped when the file is opened; entries are rebuilt from the log by
recovery (the caller truncates the file and appends again).
"""

from __future__ import annotations

import os
import struct
from typing import NamedTuple

from storage.index import CorruptIndexError

__all__ = ["AbortedTxn", "TransactionIndex", "ENTRY_SIZE"]

_ENTRY = struct.Struct(">hqqqq")
ENTRY_SIZE = _ENTRY.size  # 34
VERSION = 0


class AbortedTxn(NamedTuple):
    producer_id: int
    first_offset: int
    last_offset: int
    last_stable_offset: int


class TransactionIndex:
    """One segment's ``.txnindex``; the entries are kept in memory (a few per aborted
    transaction), the file is append-only."""

    def __init__(self, path: str, base_offset: int, exists: bool | None = None) -> None:
        self.path = path
        self.base_offset = base_offset
        self._entries: list[AbortedTxn] = []
        if os.path.exists(path) if exists is None else exists:
            self._load()

    def _load(self) -> None:
        with open(self.path, "rb") as fh:
            data = fh.read()
        whole = len(data) - len(data) % ENTRY_SIZE
        if whole != len(data):  # a torn append: keep the complete entries
            with open(self.path, "r+b") as fh:
                fh.truncate(whole)
        last = None
        for pos in range(0, whole, ENTRY_SIZE):
            version, pid, first, last_offset, lso = _ENTRY.unpack_from(data, pos)
            if version > VERSION:
                raise CorruptIndexError(f"unexpected aborted transaction version {version} at byte {pos} of "
                                        f"{self.path} (this broker reads version {VERSION})")
            if last is not None and last_offset <= last:
                raise CorruptIndexError(f"{self.path}: aborted transaction ending at {last_offset} (byte {pos}) "
                                        f"does not follow the one ending at {last}")
            last = last_offset
            self._entries.append(AbortedTxn(pid, first, last_offset, lso))

    # ------------------------------------------------------------------ writing
    def append(self, txn: AbortedTxn) -> None:
        """Append one aborted transaction (its ABORT marker at ``txn.last_offset``)."""
        if self._entries and txn.last_offset <= self._entries[-1].last_offset:
            raise ValueError(f"the last offset of appended transactions must increase: {txn.last_offset} is not "
                             f"greater than {self._entries[-1].last_offset} in {self.path}")
        with open(self.path, "ab") as fh:
            fh.write(_ENTRY.pack(VERSION, *txn))
        self._entries.append(txn)

    def flush(self) -> None:
        if os.path.exists(self.path):
            fd = os.open(self.path, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

    def truncate_to(self, offset: int) -> None:
        """Drop the entries whose ABORT marker is at ``offset`` or later (the log was
        truncated to ``offset``)."""
        keep = [t for t in self._entries if t.last_offset < offset]
        if len(keep) == len(self._entries):
            return
        self._entries = keep
        with open(self.path, "r+b") as fh:
            fh.truncate(len(keep) * ENTRY_SIZE)

    def reset(self) -> None:
        """Remove every entry (recovery rebuilds them from the log)."""
        self._entries = []
        if os.path.exists(self.path):
            with open(self.path, "r+b") as fh:
                fh.truncate(0)

    def delete(self) -> None:
        self._entries = []
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass

    def rename(self, path: str) -> None:
        if os.path.exists(self.path):
            os.replace(self.path, path)
        self.path = path

    # ------------------------------------------------------------------ reading
    @property
    def entries(self) -> list[AbortedTxn]:
        return list(self._entries)

    def collect(self, fetch_offset: int, upper_bound: int) -> tuple[list[AbortedTxn], bool]:
        """The aborted transactions overlapping ``[fetch_offset, upper_bound)``, and
        whether the search is complete (the next segments need not be read)."""
        out = []
        for txn in self._entries:
            if txn.last_offset >= fetch_offset and txn.first_offset < upper_bound:
                out.append(txn)
            if txn.last_stable_offset >= upper_bound:
                return out, True
        return out, False

    def sanity_check(self) -> None:
        for txn in self._entries:
            if txn.last_offset < self.base_offset:
                raise CorruptIndexError(f"{self.path}: aborted transaction {txn} ends before the segment's base "
                                        f"offset {self.base_offset}")
