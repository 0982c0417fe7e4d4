"""One share-partition's delivery state (KIP-932): which records of a topic partition a
share group has delivered, to whom, how often, and which are done. Kafka's
``SharePartition``, without I/O: the caller reads the log, passes the batches it found,
and passes the time (``now_ms``) to everything that starts or checks a lock.

Offsets and states
------------------
* ``start`` (the share-partition start offset, SPSO): every offset below it is done.
* ``end`` (SPEO): the first offset never acquired. Offsets in ``[start, end)`` are in
  flight; at most ``max_in_flight`` of them (``end - start``,
  ``group.share.partition.max.record.locks``) before acquisition waits for ``start`` to
  move.
* An in-flight offset is AVAILABLE (0: released or its lock expired, to be delivered
  again), ACQUIRED (1: delivered to one member, locked until a deadline), ACKNOWLEDGED (2)
  or ARCHIVED (4: rejected, a gap, a transaction marker, or out of delivery attempts).
  These are Kafka's RecordState ids. An offset in ``[start, end)`` with no entry is done
  (a hole of a compacted log, skipped on acquisition).
* Each acquisition counts a delivery. A record released or unlocked by expiry with
  ``delivery_limit`` deliveries behind it is archived instead of made available.
* ``start`` moves up over done offsets after every change; when the log's start passes
  it (retention, DeleteRecords) it follows.

Acknowledgement types (ShareFetch/ShareAcknowledge): 0 GAP (no record at that offset),
1 ACCEPT, 2 RELEASE, 3 REJECT, 4 RENEW (lock extended, v2). Every offset of an
acknowledged range must be ACQUIRED by the acknowledging member, else the whole range is
refused with INVALID_RECORD_STATE and nothing changes.

Persistence
-----------
:meth:`snapshot` gives what ``__share_group_state`` keeps (Kafka's ShareSnapshotValue):
the start offset and state batches ``(first, last, state, delivery count)`` for the
offsets in flight, runs of equal state and count merged. An acquired record is written
as AVAILABLE with its count: a lock does not survive a restart, the delivery does.
:meth:`load` is the inverse.
"""

from __future__ import annotations

from dataclasses import dataclass

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = 0, 1, 2, 4
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4
_DONE = (ACKNOWLEDGED, ARCHIVED)
_ACK_STATE = {GAP: ARCHIVED, ACCEPT: ACKNOWLEDGED, REJECT: ARCHIVED}

# outcomes of acknowledge() (Kafka error codes, kept numeric: storage knows no protocol)
OK, INVALID_REQUEST, INVALID_RECORD_STATE = 0, 42, 121


@dataclass(slots=True)
class _Rec:
    state: int
    count: int = 0
    member: str | None = None
    deadline: int = 0


@dataclass(frozen=True, slots=True)
class Batch:
    """A record batch the log returned: its offsets and whether it is a control batch
    (a transaction marker, never delivered)."""
    base_offset: int
    last_offset: int
    is_control: bool = False


class SharePartition:
    def __init__(self, start_offset: int, *, max_in_flight: int = 2000, delivery_limit: int = 5):
        self.start = start_offset
        self.end = start_offset
        self.max_in_flight = max_in_flight
        self.delivery_limit = delivery_limit
        self._recs: dict[int, _Rec] = {}  # in offset order (inserted ascending)
        self._available = 0  # how many of them are AVAILABLE, and ACQUIRED
        self._acquired = 0
        # counters for /metrics: deliveries after the first, records archived by the limit or a reject
        self.redelivered = 0
        self.archived = 0

    # ------------------------------------------------------------------ reading
    def state_of(self, offset: int) -> tuple[int, int, str | None] | None:
        """(state, delivery count, member) of an in-flight offset, ACKNOWLEDGED for one
        below the start, None past the end or for a hole."""
        if offset < self.start:
            return (ACKNOWLEDGED, 0, None)
        r = self._recs.get(offset)
        return None if r is None else (r.state, r.count, r.member)

    def next_fetch_offset(self) -> int:
        """Where the next read of the log should start: the lowest available in-flight
        offset, else the end."""
        if self._available:
            for off, r in self._recs.items():  # offset order
                if r.state == AVAILABLE:
                    return off
        return self.end

    def has_available(self) -> bool:
        return self._available > 0

    def acquired_count(self) -> int:
        return self._acquired

    def done_in_flight(self) -> int:
        return sum(1 for r in self._recs.values() if r.state in _DONE)

    def can_acquire(self) -> bool:
        return self.end - self.start < self.max_in_flight or self.has_available()

    # ------------------------------------------------------------------ changes
    def acquire(self, member: str, batches, max_records: int, now_ms: int, lock_ms: int,
                strict: bool = False) -> list[tuple[int, int, int]]:
        """Acquire for ``member`` the available records of ``batches`` (read from the
        log at :meth:`next_fetch_offset`, in offset order), whole batches at a time, until
        ``max_records`` are acquired (a batch is not split to stay under it, as Kafka's
        batch-optimized mode; ``strict``, the record-limit mode of ShareFetch v2, stops at
        exactly ``max_records``) or the in-flight limit is reached. Returns the acquired
        ranges ``(first, last, delivery count)``."""
        got: list[list[int]] = []
        taken = 0
        deadline = now_ms + lock_ms
        for b in batches:
            if taken >= max_records:
                break
            first = max(b.base_offset, self.start)
            if b.last_offset < first:
                continue
            if first > self.end:  # a hole in the log (compaction): nothing to deliver there
                if not self._recs:
                    self.start = first
                self.end = first
            for off in range(first, b.last_offset + 1):
                if strict and taken >= max_records:
                    break
                if off >= self.end:
                    if self.end - self.start >= self.max_in_flight:
                        break
                    self.end = off + 1
                    if b.is_control:
                        self._recs[off] = _Rec(ARCHIVED)
                        continue
                    r = self._recs[off] = _Rec(ACQUIRED)
                else:
                    r = self._recs.get(off)
                    if r is None or r.state != AVAILABLE or b.is_control:
                        continue
                    self._available -= 1
                r.state, r.member, r.deadline = ACQUIRED, member, deadline
                self._acquired += 1
                r.count += 1
                if r.count > 1:
                    self.redelivered += 1
                taken += 1
                if got and got[-1][1] == off - 1 and got[-1][2] == r.count:
                    got[-1][1] = off
                else:
                    got.append([off, off, r.count])
            else:
                continue
            break  # the in-flight limit (or a strict record limit) stopped this batch
        self._advance()
        return [tuple(g) for g in got]

    def acknowledge(self, member: str, first: int, last: int, types, now_ms: int = 0, lock_ms: int = 0) -> int:
        """Apply one acknowledgement batch; ``types`` has one type for the whole range
        or one per offset. Returns OK, INVALID_REQUEST (a malformed batch) or
        INVALID_RECORD_STATE (an offset not acquired by ``member``); on an error
        nothing changes."""
        recs = self._held(member, first, last, types)
        if isinstance(recs, int):
            return recs
        for i, r in enumerate(recs):
            t = types[0] if len(types) == 1 else types[i]
            if t == RENEW:
                r.deadline = now_ms + lock_ms
            elif t == RELEASE:
                self._release(r)
            else:
                r.state, r.member = _ACK_STATE[t], None
                self._acquired -= 1
                if t == REJECT:
                    self.archived += 1
        self._advance()
        return OK

    def check_acknowledge(self, member: str, first: int, last: int, types) -> int:
        """What :meth:`acknowledge` would answer, changing nothing (to check every batch of
        a request before applying any)."""
        found = self._held(member, first, last, types)
        return found if isinstance(found, int) else OK

    def _held(self, member: str, first: int, last: int, types):
        """The records of ``first``..``last``, all ACQUIRED by ``member``, or the error code."""
        n = last - first + 1
        if n <= 0 or len(types) not in (1, n) or any(t not in (GAP, ACCEPT, RELEASE, REJECT, RENEW) for t in types):
            return INVALID_REQUEST
        recs = []
        for off in range(first, last + 1):
            r = self._recs.get(off) if off >= self.start else None
            if r is None or r.state != ACQUIRED or r.member != member:
                return INVALID_RECORD_STATE
            recs.append(r)
        return recs

    def expire(self, now_ms: int) -> int:
        """Unlock every record whose lock has passed; returns how many."""
        return self._release_where(lambda r: r.deadline <= now_ms)

    def release_member(self, member: str) -> int:
        """A member's session ended or it left: its records are released."""
        return self._release_where(lambda r: r.member == member)

    def log_start_moved(self, log_start: int) -> None:
        """The log's start passed records in flight (retention, DeleteRecords)."""
        if log_start > self.start:
            for off in [o for o in self._recs if o < log_start]:
                r = self._recs.pop(off)
                self._available -= r.state == AVAILABLE
                self._acquired -= r.state == ACQUIRED
            self.start = log_start
            self.end = max(self.end, log_start)
            self._advance()

    def reset(self, start_offset: int) -> None:
        """A new start offset, nothing in flight (an admin reset of an empty group)."""
        self._recs.clear()
        self._available = self._acquired = 0
        self.start = self.end = start_offset

    # ------------------------------------------------------------------ persistence
    def snapshot(self) -> tuple[int, list[tuple[int, int, int, int]]]:
        """(start offset, [(first, last, state, delivery count)]) with ACQUIRED written
        as AVAILABLE and adjacent equal runs merged."""
        out: list[list[int]] = []
        for off, r in self._recs.items():  # offset order
            state = AVAILABLE if r.state == ACQUIRED else r.state
            if out and out[-1][1] == off - 1 and out[-1][2] == state and out[-1][3] == r.count:
                out[-1][1] = off
            else:
                out.append([off, off, state, r.count])
        return self.start, [tuple(b) for b in out]

    def load(self, start_offset: int, batches) -> None:
        """Restore a :meth:`snapshot` (state batches may overlap; later ones win)."""
        recs: dict[int, _Rec] = {}
        self.start = self.end = start_offset
        for first, last, state, count in batches:
            if state not in (AVAILABLE, ACKNOWLEDGED, ARCHIVED):
                state = AVAILABLE
            for off in range(max(first, start_offset), last + 1):
                recs[off] = _Rec(state, count)
            self.end = max(self.end, last + 1)
        self._recs = {off: recs[off] for off in sorted(recs)}
        self._available = sum(1 for r in recs.values() if r.state == AVAILABLE)
        self._acquired = 0
        self._advance()

    # ------------------------------------------------------------------ internals
    def _release_where(self, pred) -> int:
        if not self._acquired:
            return 0
        n = 0
        for r in self._recs.values():
            if r.state == ACQUIRED and pred(r):
                self._release(r)
                n += 1
        if n:
            self._advance()
        return n

    def _release(self, r: _Rec) -> None:
        r.member = None
        self._acquired -= 1
        if r.count >= self.delivery_limit:
            r.state = ARCHIVED
            self.archived += 1
        else:
            r.state = AVAILABLE
            self._available += 1

    def _advance(self) -> None:
        recs = self._recs
        while self.start < self.end:
            r = recs.get(self.start)
            if r is None:
                self.start = min(recs) if recs else self.end
                continue
            if r.state not in _DONE:
                break
            del recs[self.start]
            self.start += 1
