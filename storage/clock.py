"""Time sources for the storage layer.

Storage code never reads the system clock directly: every component that needs the
time gets a :class:`Clock`.  ``time_ms()`` is the wall clock in epoch milliseconds
(used for LogAppendTime, segment creation times and retention), ``monotonic_ms()`` a
monotonic reading for measuring intervals (flush.ms).
"""

from __future__ import annotations

import time
from typing import Protocol, runtime_checkable

__all__ = ["Clock", "SystemClock", "ManualClock"]


@runtime_checkable
class Clock(Protocol):
    def time_ms(self) -> int:  # pragma: no cover - protocol
        ...

    def monotonic_ms(self) -> float:  # pragma: no cover - protocol
        ...


class SystemClock:
    """The real clock."""

    __slots__ = ()

    def time_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> float:
        return time.monotonic_ns() / 1_000_000.0

    def __repr__(self) -> str:
        return "SystemClock()"


_SYSTEM_TIME_MS = SystemClock.time_ms


def reads_system_time(clock) -> bool:
    """Whether ``clock.time_ms()`` is SystemClock's own reading (not a replaced method, not
    another clock): compiled code (broker/_lane.c) may then read CLOCK_REALTIME itself, as
    time.time_ns() does, without a Python call per request."""
    return type(clock) is SystemClock and SystemClock.time_ms is _SYSTEM_TIME_MS


class ManualClock:
    """A clock that only moves when told to (tests).

    Both readings move together: ``monotonic_ms()`` starts at 0 and advances by the
    same amounts as ``time_ms()``; ``set()`` moving the wall clock backwards does not
    move the monotonic reading backwards.
    """

    __slots__ = ("_now", "_mono")

    def __init__(self, start_ms: int = 0):
        self._now = int(start_ms)
        self._mono = 0.0

    def time_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> float:
        return self._mono

    def advance(self, ms: int) -> int:
        if ms < 0:
            raise ValueError(f"ManualClock.advance: ms must be >= 0, got {ms}")
        self._now += int(ms)
        self._mono += ms
        return self._now

    def set(self, ms: int) -> int:
        delta = int(ms) - self._now
        self._now = int(ms)
        if delta > 0:
            self._mono += delta
        return self._now

    def __repr__(self) -> str:
        return f"ManualClock({self._now})"
