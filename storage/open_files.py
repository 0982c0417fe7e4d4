"""The bound on the segment files a broker holds open: a cache of file handles, least
recently used out first (by second chance, the CLOCK approximation of LRU).

What it owns: nothing on disk. It keeps the process-wide count of open segment file
handles (a ``.log`` descriptor, or the memory map of an ``.index`` / ``.timeindex``,
which holds a descriptor of its own) under ``capacity``. A handle is registered when it
opens and touched when it is used; when one more would pass the capacity, one not used
since the last pass is released (its descriptor closed or its map unmapped). A released
handle reopens itself by path on its next use, so callers never see the difference.
What it touches: only the handles registered with it, through their ``_release()`` and
their ``_recent`` mark.

Touching marks the handle (``handle._recent = True``, one store into an object the
caller holds anyway; storage/_append.c does the same) instead of moving it to the end of
an ordered list, which would touch the list's nodes of two other handles on every
append: with 10,000 partitions appended to in turn, those are cache misses. Past the
bound, handles are visited oldest first: a marked one loses its mark and goes to the
newest end (its second chance), the first unmarked one is released.

Why: Kafka keeps every segment's files open and asks for a high ``ulimit -n``; one
broker with 10,000 partitions holds 30,000 descriptors that way, more than the default
limit of most machines and containers. Bounded, the broker runs any number of
partitions inside the limit, and pays a reopen (an ``open`` and an ``mmap``, some
microseconds) only when more files are in use than the bound allows.

Rules for users of a handle (segment.py, index.py): ask for the descriptor or the map
each time it is used, never keep one across a call that may open another handle or
across a ``yield`` (the LRU may have closed it meanwhile). Everything runs on the
broker's thread (the event loop); the log cleaner's worker processes open their own.

The capacity is ``log.open.files.max``; -1 (the default) means three quarters of the
process's open-files limit, the rest being left for connections. At start-up the broker
raises its soft open-files limit to the hard one, as the JVM does for Kafka.
"""

from __future__ import annotations

import logging
import resource
from collections import OrderedDict

__all__ = ["OpenFiles", "OPEN_FILES", "auto_capacity", "raise_nofile_limit"]

logger = logging.getLogger(__name__)

MIN_CAPACITY = 16  # a segment needs 3 handles; a few segments must fit at once


def auto_capacity() -> int:
    """Three quarters of the soft RLIMIT_NOFILE (at least MIN_CAPACITY)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft <= 0:
        soft = 1 << 20
    return max(MIN_CAPACITY, soft * 3 // 4)


def raise_nofile_limit() -> tuple[int, int]:
    """Raise the soft open-files limit to the hard one (the JVM's MaxFDLimit, which is
    on for Kafka); returns (before, after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            return soft, target
        except (ValueError, OSError) as e:  # pragma: no cover - a limit the kernel refuses
            logger.warning("cannot raise the open-files limit from %d to %d: %s", soft, target, e)
    return soft, soft


class OpenFiles:
    """The open handles, oldest first. A handle is any object with ``_release()`` and a
    ``_recent`` attribute; it is kept by identity (handles define no
    ``__eq__``/``__hash__`` of their own)."""

    def __init__(self, capacity: int = -1):
        self._lru: OrderedDict = OrderedDict()
        self.capacity = MIN_CAPACITY
        self.reopens = 0  # handles opened again after a release (chronolog_log_file_reopens_total)
        self.evictions = 0
        self.configure(capacity)

    def configure(self, capacity: int) -> None:
        """Set the bound (-1: auto_capacity()); releases handles past it at once."""
        capacity = int(capacity)
        self.capacity = auto_capacity() if capacity < 0 else max(MIN_CAPACITY, capacity)
        self._trim(None)

    def __len__(self) -> int:
        return len(self._lru)

    def opened(self, handle, reopen: bool = False) -> None:
        """``handle`` has just opened a descriptor; release the LRU ones past the bound
        (never ``handle`` itself)."""
        handle._recent = False  # the newest: the first pass leaves it anyway
        self._lru[handle] = None
        if reopen:
            self.reopens += 1
        if len(self._lru) > self.capacity:
            self._trim(handle)

    def touch(self, handle) -> None:
        """``handle`` was used: it gets a second chance at the next pass."""
        handle._recent = True

    def closed(self, handle) -> None:
        """``handle`` closed its descriptor itself."""
        self._lru.pop(handle, None)

    def _trim(self, keep) -> None:
        lru = self._lru
        while len(lru) > self.capacity:
            victim = next(iter(lru))
            if victim is keep or victim._recent:  # used since the last pass: a second chance
                victim._recent = False
                lru.move_to_end(victim)
                if len(lru) == 1:
                    return
                continue
            del lru[victim]
            self.evictions += 1
            victim._release()


# The process's one bound: the open-files limit is per process, so is the cache.
OPEN_FILES = OpenFiles()
