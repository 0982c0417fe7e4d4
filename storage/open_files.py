"""The bound on the segment files a broker holds open: an LRU of file handles.

What it owns: nothing on disk. It keeps the process-wide count of open segment file
handles (a ``.log`` descriptor, or the memory map of an ``.index`` / ``.timeindex``,
which holds a descriptor of its own) under ``capacity``. A handle is registered when it
opens and touched when it is used; when one more would pass the capacity, the least
recently used one is released (its descriptor closed or its map unmapped). A released
handle reopens itself by path on its next use, so callers never see the difference.
What it touches: only the handles registered with it, through their ``_release()``.

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
    """LRU of open handles. A handle is any object with ``_release()``; it is kept by
    identity (handles define no ``__eq__``/``__hash__`` of their own)."""

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
        self._lru[handle] = None
        if reopen:
            self.reopens += 1
        if len(self._lru) > self.capacity:
            self._trim(handle)

    def touch(self, handle) -> None:
        try:
            self._lru.move_to_end(handle)
        except KeyError:
            pass

    def closed(self, handle) -> None:
        """``handle`` closed its descriptor itself."""
        self._lru.pop(handle, None)

    def _trim(self, keep) -> None:
        lru = self._lru
        while len(lru) > self.capacity:
            victim = next(iter(lru))
            if victim is keep:
                lru.move_to_end(victim)
                if len(lru) == 1:
                    return
                continue
            del lru[victim]
            self.evictions += 1
            victim._release()


# The process's one bound: the open-files limit is per process, so is the cache.
OPEN_FILES = OpenFiles()
