"""``queued.max.request.bytes``: the bytes all connections may hold in requests being
received, as Kafka's ``SimpleMemoryPool`` in non-strict mode (SocketServer).

A connection that has read the size of a frame whose bytes have not all arrived reserves
that size here before it reads on.  While the pool has any bytes left (``available >= 1``)
the reservation succeeds, even past zero (non-strict: at most one frame over the bound);
otherwise the connection stops reading (it is muted, as Kafka mutes the channel) until
another connection's frame is processed and its bytes come back.  A value <= 0 (the
default, -1, as Kafka's) means no pool.

Owns: the count and the queue of connections waiting for memory.  Touches: nothing but
``conn.memory_available()`` on the connections it wakes.
"""

from __future__ import annotations

from collections import OrderedDict


class RequestMemoryPool:
    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.available = capacity
        self._waiting: OrderedDict = OrderedDict()

    def try_reserve(self, conn, size: int) -> bool:
        """Reserve ``size`` bytes for ``conn``; False (and ``conn`` queued) when the pool
        is exhausted."""
        if self.available >= 1:
            self.available -= size
            self._waiting.pop(conn, None)
            return True
        self._waiting[conn] = None
        return False

    def release(self, size: int) -> None:
        self.available += size
        while self.available >= 1 and self._waiting:
            conn, _ = self._waiting.popitem(last=False)
            conn.memory_available()

    def forget(self, conn) -> None:
        self._waiting.pop(conn, None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)
