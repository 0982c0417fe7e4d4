"""broker.share: share-group membership (assignment, fencing, session timeouts) and the
share-partition manager (sessions, acknowledgements, lock expiry, __share_group_state
written and replayed) on a manual clock and a real LogManager; nothing sleeps."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.share.group import ShareGroups, simple_assign
from broker.share.partitions import ShareError, SharePartitionManager
from broker.share.state_store import ShareStateStore, replay
from protocol import records as rec
from protocol.errors import ErrorCode as E
from storage.log_manager import LogManager
from tests.unit.test_group_coordinator import ManualTime
from tests.unit.test_log_manager import factory

CONFIG = {"share.session.timeout.ms": 45000, "share.heartbeat.interval.ms": 5000,
          "share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 3,
          "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "earliest",
          "share.isolation.level": "read_uncommitted"}


def test_simple_assign_spreads_partitions_and_shares_them_when_members_outnumber_them():
    topics = {"a": ("ida", 4), "b": ("idb", 1)}
    out = simple_assign({"m1": {"a"}, "m2": {"a", "b"}}, topics)
    assert out == {"m1": {"ida": {0, 2}}, "m2": {"ida": {1, 3}, "idb": {0}}}
    crowd = simple_assign({f"m{i}": {"b"} for i in range(3)}, topics)
    assert all(a == {"idb": {0}} for a in crowd.values())  # one partition, three members: shared


class Time(ManualTime):
    """The coordinator tests' clock and scheduler, with the monotonic reading logs want."""

    def monotonic_ms(self) -> float:
        return float(self.now)


class FakeCoord:
    def __init__(self, t):
        self.scheduler = t

    def group(self, group_id):
        return None


@pytest.fixture
def world(tmp_path):
    t = Time()
    broker = SimpleNamespace(log_dirs=[str(tmp_path)])
    lm = LogManager(broker, t, topic_config_factory=factory)
    lm.startup()
    lm.create_topic("t", 2, {})
    store = ShareStateStore(lm, t, num_partitions=3)
    groups = ShareGroups(FakeCoord(t), topic_metadata=lambda name: (lambda i: None if i is None else
                                                                     (i.topic_id, i.num_partitions))(lm.get_topic(name)),
                         group_config=lambda g: CONFIG, max_size=3)
    mgr = SharePartitionManager(lm, t, store, lambda g: CONFIG, max_sessions=3, ensure_group=groups.ensure_group)
    groups.on_assigned, groups.on_member_gone, groups.on_deleted = mgr.initialize, mgr.member_gone, mgr.delete
    yield SimpleNamespace(t=t, lm=lm, store=store, groups=groups, mgr=mgr, tid=lm.get_topic("t").topic_id)
    lm.shutdown()


def produce(lm, n, partition=0):
    plog = lm.get_log("t", partition)
    plog.append(bytearray(rec.build_batch([(1000 + i, None, b"v%d" % i) for i in range(n)])), in_place=True)


def hb(w, member, epoch, topics=None):
    return w.groups.heartbeat(group_id="g", member_id=member, member_epoch=epoch, rack_id=None,
                              subscribed_topic_names=topics, client_id="c", client_host="/h")


def test_heartbeat_join_fence_and_session_timeout_release_records(world):
    w = world
    code, _, mid, epoch, interval, assignment = hb(w, "m1", 0, ["t"])
    assert code == 0 and epoch >= 1 and interval == 5000 and assignment == {w.tid: {0, 1}}
    assert hb(w, "m1", epoch + 1)[0] == E.FENCED_MEMBER_EPOCH
    assert hb(w, "zz", 4)[0] == E.UNKNOWN_MEMBER_ID
    assert hb(w, "m2", 0, None)[0] == E.INVALID_REQUEST
    e2 = hb(w, "m2", 0, ["t"])
    assert e2[3] > epoch and e2[5] == {w.tid: {1}}
    back = hb(w, "m1", epoch)  # the group moved on: m1 takes the new epoch and assignment
    assert back[0] == 0 and back[3] == e2[3] and back[5] == {w.tid: {0}}
    hb(w, "m3", 0, ["t"])
    assert hb(w, "m4", 0, ["t"])[0] == E.GROUP_MAX_SIZE_REACHED
    # m1 acquires records, then stops heartbeating: removed after the session timeout, records released
    produce(w.lm, 5)
    w.mgr.open_fetch("g", "m1", 0, [(w.tid, 0)], [], False)
    got = w.mgr.acquire("g", "m1", [(w.tid, 0)], 100, 1 << 20)
    assert got[0].acquired == [(0, 4, 1)]
    for _ in range(10):  # the others keep heartbeating
        w.t.advance(5000)
        for m in ("m2", "m3"):
            cur = w.groups.groups["g"].members[m].member_epoch
            assert hb(w, m, cur)[0] == 0
    assert "m1" not in w.groups.groups["g"].members
    assert ("g", "m1") not in w.mgr.sessions
    assert w.mgr.partitions[("g", w.tid, 0)].state_of(0)[0] == 0  # AVAILABLE again


def test_sessions_epochs_acks_and_lock_expiry(world):
    w = world
    hb(w, "a", 0, ["t"])
    produce(w.lm, 10)
    tp = (w.tid, 0)
    with pytest.raises(ShareError) as err:
        w.mgr.open_fetch("g", "a", 3, [tp], [], False)
    assert err.value.code == E.SHARE_SESSION_NOT_FOUND
    with pytest.raises(ShareError) as err:
        w.mgr.open_fetch("g", "a", 0, [tp], [], True)
    assert err.value.code == E.INVALID_REQUEST
    w.mgr.open_fetch("g", "a", 0, [tp], [], False)
    assert w.mgr.acquire("g", "a", [tp], 100, 1 << 20)[0].acquired == [(0, 9, 1)]
    with pytest.raises(ShareError) as err:
        w.mgr.share_acknowledge("g", "a", 7, [], False)
    assert err.value.code == E.INVALID_SHARE_SESSION_EPOCH
    # a partition's batches are all or nothing: 0-1 is fine, 20-21 was never acquired
    mixed = [SimpleNamespace(first_offset=0, last_offset=1, acknowledge_types=[1]),
             SimpleNamespace(first_offset=20, last_offset=21, acknowledge_types=[1])]
    assert w.mgr.acknowledge_all("g", "a", [(w.tid, 0, mixed)], False)[tp][0] == E.INVALID_RECORD_STATE
    assert w.mgr.partitions[("g", w.tid, 0)].state_of(0)[0] == 1  # still ACQUIRED
    ack = SimpleNamespace(first_offset=0, last_offset=3, acknowledge_types=[1])
    assert w.mgr.share_acknowledge("g", "a", 1, [(w.tid, 0, [ack])], False) == {tp: (0, None)}
    again = SimpleNamespace(first_offset=3, last_offset=4, acknowledge_types=[1])
    assert w.mgr.share_acknowledge("g", "a", 2, [(w.tid, 0, [again])], False)[tp][0] == E.INVALID_RECORD_STATE
    # the lock passes on the manual clock: 4-9 come back with a second delivery
    w.t.advance(999)
    assert w.mgr.expire_locks() == 0
    w.t.advance(1)
    assert w.mgr.expire_locks() == 6
    assert w.mgr.acquire("g", "a", [tp], 100, 1 << 20)[0].acquired == [(4, 9, 2)]
    # too many sessions
    for m in ("b", "c"):
        w.mgr.open_fetch("g", m, 0, [tp], [], False)
    with pytest.raises(ShareError) as err:
        w.mgr.open_fetch("g", "d", 0, [tp], [], False)
    assert err.value.code == E.SHARE_SESSION_LIMIT_REACHED


def test_state_is_written_to_share_group_state_and_replayed(world):
    w = world
    hb(w, "a", 0, ["t"])
    produce(w.lm, 6)
    tp = (w.tid, 0)
    w.mgr.open_fetch("g", "a", 0, [tp], [], False)
    w.mgr.acquire("g", "a", [tp], 100, 1 << 20)
    acks = [SimpleNamespace(first_offset=0, last_offset=1, acknowledge_types=[1]),
            SimpleNamespace(first_offset=2, last_offset=2, acknowledge_types=[3])]
    w.mgr.share_acknowledge("g", "a", 1, [(w.tid, 0, acks)], False)
    states = replay(w.lm)
    st = states[("g", w.tid, 0)]
    assert st.start_offset == 3
    assert st.batches == [(3, 5, 0, 1)]  # held records are written available, their delivery counted
    assert st.create_timestamp > 0 and st.write_timestamp >= st.create_timestamp
    # a new manager (a restart) carries on from there
    fresh = SharePartitionManager(w.lm, w.t, w.store, lambda g: CONFIG)
    fresh.load(states)
    sp = fresh.partitions[("g", w.tid, 0)]
    assert sp.start == 3 and sp.state_of(3) == (0, 1, None)
    # deleting the group's state writes tombstones
    assert sorted(w.mgr.delete("g"), key=lambda e: e[1]) == [(w.tid, 0), (w.tid, 1)]
    assert ("g", w.tid, 0) not in replay(w.lm)


def test_a_deleted_topic_takes_its_share_state_with_it(world):
    w = world
    hb(w, "a", 0, ["t"])
    assert {k[1] for k in replay(w.lm)} == {w.tid}
    w.mgr.topic_deleted(w.tid)
    assert w.mgr.partitions == {} and replay(w.lm) == {}
