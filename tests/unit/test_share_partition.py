"""storage.share_partition: the share-partition state machine (KIP-932), driven by a
fake clock, with examples and a property test against a dense model."""

from __future__ import annotations

import random

from hypothesis import given, settings, strategies as st

from storage import share_partition as S
from storage.share_partition import Batch, SharePartition

LOCK = 1000


def batches(*ranges, control=()):
    return [Batch(a, b, (a, b) in control) for a, b in ranges]


def test_acquire_whole_batches_then_accept_moves_start():
    sp = SharePartition(0)
    got = sp.acquire("m1", batches((0, 4), (5, 9)), max_records=3, now_ms=0, lock_ms=LOCK)
    assert got == [(0, 4, 1)]  # the batch is not split to stay under max_records
    assert sp.end == 5 and sp.start == 0
    assert sp.acknowledge("m1", 0, 4, [S.ACCEPT]) == S.OK
    assert sp.start == 5 and sp.end == 5


def test_record_limit_mode_cuts_inside_a_batch():
    sp = SharePartition(0)
    assert sp.acquire("m1", batches((0, 4), (5, 9)), 3, 0, LOCK, strict=True) == [(0, 2, 1)]
    assert sp.end == 3
    assert sp.acquire("m2", batches((0, 4), (5, 9)), 3, 0, LOCK, strict=True) == [(3, 5, 1)]


def test_ack_by_another_member_or_unacquired_is_refused_and_changes_nothing():
    sp = SharePartition(0)
    sp.acquire("m1", batches((0, 4)), 10, 0, LOCK)
    assert sp.acknowledge("m2", 0, 1, [S.ACCEPT]) == S.INVALID_RECORD_STATE
    assert sp.acknowledge("m1", 3, 6, [S.ACCEPT]) == S.INVALID_RECORD_STATE  # 5, 6 never acquired
    assert sp.acknowledge("m1", 2, 1, [S.ACCEPT]) == S.INVALID_REQUEST
    assert sp.acknowledge("m1", 0, 2, [S.ACCEPT, S.ACCEPT]) == S.INVALID_REQUEST  # 2 types for 3 offsets
    assert sp.acknowledge("m1", 0, 0, [7]) == S.INVALID_REQUEST
    assert [sp.state_of(o)[0] for o in range(5)] == [S.ACQUIRED] * 5
    # an acknowledged record cannot be acknowledged again
    assert sp.acknowledge("m1", 0, 0, [S.ACCEPT]) == S.OK
    assert sp.acknowledge("m1", 0, 0, [S.REJECT]) == S.INVALID_RECORD_STATE


def test_lock_expiry_redelivers_with_a_higher_count_until_the_limit_archives():
    sp = SharePartition(0, delivery_limit=3)
    for attempt in (1, 2, 3):
        got = sp.acquire("m", batches((0, 0)) if sp.next_fetch_offset() == 0 else [], 10, attempt * 10_000, LOCK)
        assert got == [(0, 0, attempt)]
        assert sp.expire(attempt * 10_000 + LOCK - 1) == 0  # not yet
        assert sp.expire(attempt * 10_000 + LOCK) == 1
    assert sp.state_of(0)[0] == S.ACKNOWLEDGED  # archived, then passed by the start offset
    assert sp.start == 1 and sp.archived == 1 and sp.redelivered == 2


def test_release_reject_gap_and_renew():
    sp = SharePartition(10)
    sp.acquire("m", batches((10, 13)), 10, 0, LOCK)
    assert sp.acknowledge("m", 10, 13, [S.RENEW, S.RELEASE, S.REJECT, S.GAP], now_ms=500, lock_ms=LOCK) == S.OK
    assert sp.state_of(10) == (S.ACQUIRED, 1, "m")
    assert sp.state_of(11) == (S.AVAILABLE, 1, None)
    assert sp.state_of(12)[0] == S.ARCHIVED and sp.state_of(13)[0] == S.ARCHIVED
    assert sp.expire(LOCK) == 0  # renewed to 1500
    assert sp.next_fetch_offset() == 11
    # the released record goes to the next member; the rejected one never again
    got = sp.acquire("n", batches((10, 13)), 10, 600, LOCK)
    assert got == [(11, 11, 2)]


def test_control_batches_and_holes_are_never_delivered():
    sp = SharePartition(0)
    got = sp.acquire("m", batches((0, 1), (2, 2), (7, 8), control={(2, 2)}), 100, 0, LOCK)
    assert got == [(0, 1, 1), (7, 8, 1)]
    assert sp.acknowledge("m", 0, 1, [S.ACCEPT]) == S.OK
    assert sp.start == 7  # the marker and the hole 3-6 are done
    assert sp.acknowledge("m", 2, 2, [S.ACCEPT]) == S.INVALID_RECORD_STATE


def test_in_flight_limit_waits_for_the_start_offset():
    sp = SharePartition(0, max_in_flight=4)
    got = sp.acquire("m", batches((0, 9)), 100, 0, LOCK)
    assert got == [(0, 3, 1)]  # the limit cuts inside a batch
    assert not sp.can_acquire()
    assert sp.acquire("m", batches((0, 9)), 100, 0, LOCK) == []
    sp.acknowledge("m", 0, 1, [S.ACCEPT])
    assert sp.acquire("n", batches((0, 9)), 100, 0, LOCK) == [(4, 5, 1)]


def test_member_release_and_snapshot_round_trip():
    sp = SharePartition(0, delivery_limit=5)
    sp.acquire("a", batches((0, 2)), 10, 0, LOCK)
    sp.acquire("b", batches((3, 5)), 10, 0, LOCK)
    sp.acknowledge("b", 4, 4, [S.ACCEPT])
    assert sp.release_member("a") == 3
    start, state = sp.snapshot()
    assert start == 0
    assert state == [(0, 3, S.AVAILABLE, 1), (4, 4, S.ACKNOWLEDGED, 1), (5, 5, S.AVAILABLE, 1)]
    back = SharePartition(0)
    back.load(start, state)
    assert back.snapshot() == (start, state) and back.end == 6
    # acquired-before-restart records come back available, their deliveries counted
    assert back.acquire("c", batches((0, 2), (3, 5)), 10, 0, LOCK) == [(0, 3, 2), (5, 5, 2)]


def test_log_start_passing_records_in_flight():
    sp = SharePartition(0)
    sp.acquire("m", batches((0, 9)), 100, 0, LOCK)
    sp.log_start_moved(6)
    assert sp.start == 6 and sp.state_of(5)[0] == S.ACKNOWLEDGED
    assert sp.acknowledge("m", 5, 6, [S.ACCEPT]) == S.INVALID_RECORD_STATE
    assert sp.acknowledge("m", 6, 9, [S.ACCEPT]) == S.OK and sp.start == 10


# --------------------------------------------------------------------------- the model
class Model:
    """Every offset of the log, densely: the semantics without the sparse bookkeeping."""

    def __init__(self, log, limit):
        self.log = log  # [Batch]
        self.limit = limit
        self.st = {}  # offset -> [state, count, member, deadline]; absent: never delivered
        for b in log:
            for o in range(b.base_offset, b.last_offset + 1):
                self.st[o] = [S.ARCHIVED if b.is_control else S.AVAILABLE, 0, None, 0]

    def acquire(self, member, batches, max_records, now, lock):
        got, taken = [], 0
        for b in batches:
            if taken >= max_records:
                break
            for o in range(b.base_offset, b.last_offset + 1):
                e = self.st[o]
                if e[0] != S.AVAILABLE:
                    continue
                e[0], e[1], e[2], e[3] = S.ACQUIRED, e[1] + 1, member, now + lock
                taken += 1
                if got and got[-1][1] == o - 1 and got[-1][2] == e[1]:
                    got[-1][1] = o
                else:
                    got.append([o, o, e[1]])
        return [tuple(g) for g in got]

    def release(self, e):
        e[0] = S.ARCHIVED if e[1] >= self.limit else S.AVAILABLE
        e[2] = None

    def acknowledge(self, member, first, last, types, now, lock):
        if last < first or len(types) not in (1, last - first + 1):
            return S.INVALID_REQUEST
        es = []
        for o in range(first, last + 1):
            e = self.st.get(o)
            if e is None or e[0] != S.ACQUIRED or e[2] != member:
                return S.INVALID_RECORD_STATE
            es.append(e)
        for i, e in enumerate(es):
            t = types[0] if len(types) == 1 else types[i]
            if t == S.RENEW:
                e[3] = now + lock
            elif t == S.RELEASE:
                self.release(e)
            else:
                e[0], e[2] = (S.ACKNOWLEDGED if t == S.ACCEPT else S.ARCHIVED), None
        return S.OK

    def expire(self, now):
        n = 0
        for e in self.st.values():
            if e[0] == S.ACQUIRED and e[3] <= now:
                self.release(e)
                n += 1
        return n

    def release_member(self, member):
        n = 0
        for e in self.st.values():
            if e[0] == S.ACQUIRED and e[2] == member:
                self.release(e)
                n += 1
        return n

    def next_fetch(self):
        for b in self.log:
            for o in range(b.base_offset, b.last_offset + 1):
                if self.st[o][0] == S.AVAILABLE:
                    return o
        return None


def _log(rng):
    out, off = [], 0
    for _ in range(rng.randint(1, 8)):
        off += rng.choice((0, 0, 0, 2))  # sometimes a hole (compaction)
        n = rng.randint(1, 5)
        out.append(Batch(off, off + n - 1, rng.random() < 0.12))
        off += n
    return out


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 2**32))
def test_state_machine_agrees_with_the_dense_model(seed):
    rng = random.Random(seed)
    log = _log(rng)
    limit = rng.randint(1, 4)
    sp = SharePartition(0, max_in_flight=10_000, delivery_limit=limit)
    model = Model(log, limit)
    members = ["a", "b", "c"]
    now = 0
    for _ in range(rng.randint(1, 40)):
        op = rng.random()
        if op < 0.35:
            m, mx = rng.choice(members), rng.randint(1, 6)
            start = sp.next_fetch_offset()
            # what a log read from there returns, cut short as max.bytes may cut it
            read = [b for b in log if b.last_offset >= start][: rng.randint(1, len(log))]
            assert sp.acquire(m, read, mx, now, LOCK) == model.acquire(m, read, mx, now, LOCK)
        elif op < 0.7:
            m = rng.choice(members)
            first = rng.randint(0, log[-1].last_offset)
            last = first + rng.randint(0, 3)
            n = last - first + 1
            types = [rng.choice((S.GAP, S.ACCEPT, S.RELEASE, S.REJECT, S.RENEW))
                     for _ in range(1 if rng.random() < 0.5 else n)]
            assert sp.acknowledge(m, first, last, types, now, LOCK) == model.acknowledge(m, first, last, types, now, LOCK)
        elif op < 0.85:
            now += rng.choice((100, 500, LOCK))
            assert sp.expire(now) == model.expire(now)
        elif op < 0.93:
            m = rng.choice(members)
            assert sp.release_member(m) == model.release_member(m)
        else:  # a restart: acquisitions are lost, deliveries are not
            start, state = sp.snapshot()
            sp = SharePartition(0, max_in_flight=10_000, delivery_limit=limit)
            sp.load(start, state)
            for e in model.st.values():
                if e[0] == S.ACQUIRED:
                    e[0], e[2] = S.AVAILABLE, None
        # the same state for every record; the start offset never passes a record not done
        for b in log:
            for o in range(b.base_offset, b.last_offset + 1):
                e = model.st[o]
                got = sp.state_of(o)
                if e[0] in (S.ACKNOWLEDGED, S.ARCHIVED):
                    assert got is None or got[0] in (S.ACKNOWLEDGED, S.ARCHIVED) or o >= sp.end
                elif e[1] == 0:  # never delivered
                    assert o >= sp.end or got is None or got[0] == S.AVAILABLE
                else:
                    assert got == (e[0], e[1], e[2]), (o, got, e)
                    assert o >= sp.start
        # the counters kept beside the records agree with a recount, and offsets stay in order
        assert sp.acquired_count() == sum(1 for e in model.st.values() if e[0] == S.ACQUIRED)
        assert sp.has_available() == any(r.state == S.AVAILABLE for r in sp._recs.values())
        assert list(sp._recs) == sorted(sp._recs)
        nf = model.next_fetch()
        assert nf is None or sp.next_fetch_offset() <= nf
