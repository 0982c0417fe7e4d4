"""``leader-epoch-checkpoint``: the partition's leader epochs and the offset each began
at, Kafka's LeaderEpochFileCache and its checkpoint file.

One file per partition directory, Kafka's ``LeaderEpochCheckpointFile`` text format
(UTF-8, ``\\n`` line ends)::

    0              <- version
    1              <- number of entries
    0 0            <- leader epoch, start offset (one space between), epochs ascending

Every change rewrites the file atomically (temp file, fsync, rename, fsync of the
directory). What it is for: OffsetForLeaderEpoch (KIP-101, KIP-320) answers, for an
epoch, the end offset of that epoch (:meth:`LeaderEpochCache.end_offset_for`), which
consumers use to detect log truncation after a leader change. On this single broker the
leader epoch is always 0 and begins where the log ended when the partition was first
led; the cache still follows the log as Kafka's does: entries at or past a truncation
point go (:meth:`truncate_from_end`), and when the log start offset moves up the epochs
wholly before it go and the one it falls in starts there (:meth:`truncate_from_start`).

A file that cannot be parsed is logged and ignored (the cache starts empty and the
current epoch is assigned again at the log end): epochs are only ever used to answer
OffsetForLeaderEpoch, never to read or delete data.
"""

from __future__ import annotations

import logging
import os
from typing import Optional

from storage.checkpoint import atomic_write

logger = logging.getLogger(__name__)

FILE_NAME = "leader-epoch-checkpoint"
_VERSION = 0
UNDEFINED_EPOCH = -1
UNDEFINED_EPOCH_OFFSET = -1


class LeaderEpochCache:
    """``[(epoch, start_offset)]`` ascending in both, kept in ``<dir>/leader-epoch-checkpoint``."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self.entries = self._read()

    @property
    def entries(self) -> list[tuple[int, int]]:
        return self._entries

    @entries.setter
    def entries(self, entries: list[tuple[int, int]]) -> None:
        """Every change is a new list (never one changed in place), and sets
        ``latest_epoch`` with it: the last entry's epoch, None when there is none, a
        plain attribute that every append reads."""
        self._entries = entries
        self.latest_epoch: Optional[int] = entries[-1][0] if entries else None

    def _read(self) -> list[tuple[int, int]]:
        try:
            with open(self.path, "rb") as fh:
                text = fh.read().decode("utf-8")
        except FileNotFoundError:
            return []
        except (OSError, UnicodeDecodeError) as exc:
            logger.warning("%s cannot be read (%s); leader epochs start again", self.path, exc)
            return []
        lines = text.split("\n")
        try:
            if int(lines[0]) != _VERSION:
                raise ValueError(f"unknown version {lines[0]!r}")
            n = int(lines[1])
            out = []
            for line in lines[2:2 + n]:
                epoch, start = line.split(" ")
                out.append((int(epoch), int(start)))
            if len(out) != n:
                raise ValueError(f"{n} entries announced, {len(out)} found")
            for (e1, s1), (e2, s2) in zip(out, out[1:]):
                if e2 <= e1 or s2 < s1:
                    raise ValueError("epochs and start offsets must ascend")
            return out
        except (ValueError, IndexError) as exc:
            logger.warning("%s is malformed (%s); leader epochs start again", self.path, exc)
            return []

    def load(self, end_offset: int, start_offset: int, epoch: int | None, sync: bool = True) -> None:
        """Start-up (Kafka's LogLoader, then makeLeader): truncate_from_end(end_offset),
        truncate_from_start(start_offset), assign(epoch, end_offset); the file is written
        once, and only when that changed its entries (a restart of 10,000 unchanged
        partitions writes nothing)."""
        before = list(self.entries)
        self._hold = True
        try:
            self.truncate_from_end(end_offset)
            self.truncate_from_start(start_offset)
            if epoch is not None:
                self.assign(epoch, end_offset)
        finally:
            self._hold = False
        if self.entries != before:
            self._write(sync)

    _hold = False  # load(): the entries change in memory, the file once at the end

    def _write(self, sync: bool = True) -> None:
        if self._hold:
            return
        body = [str(_VERSION), str(len(self.entries)), *(f"{e} {s}" for e, s in self.entries)]
        atomic_write(self.path, ("\n".join(body) + "\n").encode("utf-8"), sync=sync)

    def assign(self, epoch: int, start_offset: int) -> None:
        """Kafka's assign / maybeAssignEpochStartOffset: ``epoch`` begins at
        ``start_offset`` unless it is already the latest epoch; entries it supersedes
        (a same or later epoch, or a start at or past it) are dropped."""
        if self.entries and self.entries[-1][0] == epoch and self.entries[-1][1] <= start_offset:
            return
        kept = [(e, s) for e, s in self.entries if e < epoch and s < start_offset]
        self.entries = kept + [(epoch, start_offset)]
        self._write()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """Kafka's LeaderEpochFileCache.endOffsetFor: (epoch, end offset), or
        (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET) when nothing is known."""
        if requested_epoch == UNDEFINED_EPOCH or not self.entries:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self.entries[-1][0] == requested_epoch:
            return requested_epoch, log_end_offset
        higher = next(((e, s) for e, s in self.entries if e > requested_epoch), None)
        if higher is None:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        floor = None
        for e, s in self.entries:
            if e <= requested_epoch:
                floor = (e, s)
        if floor is None:
            return requested_epoch, higher[1]
        return floor[0], higher[1]

    def epoch_for_offset(self, offset: int) -> Optional[int]:
        """The epoch that wrote ``offset`` (Kafka's epochForOffset), None before the first."""
        found = None
        for e, s in self.entries:
            if s <= offset:
                found = e
        return found

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: epochs starting at or after it go."""
        kept = [(e, s) for e, s in self.entries if s < end_offset]
        if kept != self.entries:
            self.entries = kept
            self._write()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start offset moved up to ``start_offset``: the epochs wholly before it
        go and the one it falls in starts there (Kafka's truncateFromStart)."""
        before = [(e, s) for e, s in self.entries if s <= start_offset]
        if not before or (len(before) == 1 and before[0][1] == start_offset):
            return
        last_epoch = before[-1][0]
        self.entries = [(last_epoch, start_offset)] + [(e, s) for e, s in self.entries if s > start_offset]
        self._write()

    def clear(self) -> None:
        if self.entries:
            self.entries = []
            self._write()
