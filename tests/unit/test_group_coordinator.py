"""The classic group state machine (broker/coordinator/group.py) driven by a manual
clock and scheduler, and the __consumer_offsets record formats."""

from __future__ import annotations

import asyncio
import heapq
import itertools

import pytest

from protocol.errors import ErrorCode as E

from broker.coordinator import records as fmt
from broker.coordinator.group import (
    COMPLETING_REBALANCE,
    EMPTY,
    PREPARING_REBALANCE,
    STABLE,
    GroupCoordinator,
)


class ManualTime:
    """Clock + scheduler: ``advance(ms)`` runs the callbacks that fall due, in order."""

    def __init__(self, start_ms: int = 1_000_000):
        self.now = start_ms
        self._q: list = []
        self._seq = itertools.count()

    def time_ms(self) -> int:
        return self.now

    def call_later(self, delay_ms, fn):
        h = _Handle(fn)
        heapq.heappush(self._q, (self.now + max(0, delay_ms), next(self._seq), h))
        return h

    def advance(self, ms: int = 0) -> None:
        target = self.now + ms
        while self._q and self._q[0][0] <= target:
            due, _, h = heapq.heappop(self._q)
            self.now = max(self.now, due)
            if not h.cancelled:
                h.fn()
        self.now = target


class _Handle:
    def __init__(self, fn):
        self.fn = fn
        self.cancelled = False

    def cancel(self):
        self.cancelled = True


class MemStore:
    def __init__(self):
        self.offsets: list = []
        self.groups: list = []

    def write_offsets(self, group, offsets):
        self.offsets.append((group, dict(offsets)))

    def write_group(self, group, value):
        self.groups.append((group, value))


@pytest.fixture
def env():
    loop = asyncio.new_event_loop()
    t = ManualTime()
    store = MemStore()
    topics = {"t": 4, "u": 1}
    coord = GroupCoordinator(clock=t, scheduler=t, future_factory=loop.create_future, store=store,
                             initial_rebalance_delay_ms=0, min_session_timeout_ms=100,
                             max_session_timeout_ms=60_000, offsets_retention_ms=60_000,
                             topic_partitions=topics.get)
    yield coord, t, store
    loop.close()


def join(coord, member_id="", gid="g", protocols=(("range", b"m"),), session=1000, rebalance=2000,
         instance=None, ptype="consumer", v4=True, client="c"):
    return coord.join(group_id=gid, member_id=member_id, group_instance_id=instance, protocol_type=ptype,
                      protocols=list(protocols), session_timeout_ms=session, rebalance_timeout_ms=rebalance,
                      client_id=client, client_host="/h", require_known_member_id=v4)


def sync(coord, member_id, gen, assignments=None, gid="g", instance=None):
    return coord.sync(group_id=gid, generation_id=gen, member_id=member_id, group_instance_id=instance,
                      protocol_type=None, protocol_name=None, assignments=assignments or {})


def full_join(coord, t, **kw):
    """MEMBER_ID_REQUIRED round trip, then the real join; returns the join future."""
    f = join(coord, **kw)
    assert f.done() and f.result().error == E.MEMBER_ID_REQUIRED
    mid = f.result().member_id
    assert mid.startswith(kw.get("client", "c") + "-")
    f2 = join(coord, member_id=mid, **kw)
    return mid, f2


def test_member_id_required_then_single_member_generation_1(env):
    coord, t, store = env
    mid, f = full_join(coord, t)
    assert not f.done()  # the initial delayed join fires from the scheduler
    t.advance(0)
    r = f.result()
    assert r.error == 0 and r.generation_id == 1 and r.leader == mid and r.member_id == mid
    assert r.protocol_name == "range" and [m[0] for m in r.members] == [mid]
    assert coord.group("g").state == COMPLETING_REBALANCE
    s = sync(coord, mid, 1, {mid: b"A"})
    assert s.result().error == 0 and s.result().assignment == b"A"
    assert coord.group("g").state == STABLE
    assert store.groups[-1][1].generation == 1 and store.groups[-1][1].members[0].assignment == b"A"


def test_v3_join_without_member_id_is_accepted(env):
    coord, t, _ = env
    f = join(coord, v4=False)
    t.advance(0)
    assert f.result().error == 0 and f.result().member_id


def test_second_member_triggers_rebalance_follower_waits_for_leader_sync(env):
    coord, t, _ = env
    a, fa = full_join(coord, t)
    t.advance(0)
    sync(coord, a, 1, {a: b"all"})
    b, fb = full_join(coord, t, client="d")
    assert coord.group("g").state == PREPARING_REBALANCE and not fb.done()
    assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == E.REBALANCE_IN_PROGRESS
    fa2 = join(coord, member_id=a)
    assert fa2.done() and fb.done()  # everyone rejoined: completes without waiting for the timeout
    ra, rb = fa2.result(), fb.result()
    assert ra.generation_id == rb.generation_id == 2
    assert ra.leader == a and len(ra.members) == 2 and rb.members == []
    sb = sync(coord, b, 2)
    assert not sb.done()
    sa = sync(coord, a, 2, {a: b"p0", b: b"p1"})
    assert sa.result().assignment == b"p0" and sb.result().assignment == b"p1"
    # a stale generation is fenced
    assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == E.ILLEGAL_GENERATION
    assert sync(coord, a, 1).result().error == E.ILLEGAL_GENERATION


def test_member_not_rejoining_is_removed_after_rebalance_timeout(env):
    coord, t, _ = env
    a, _ = full_join(coord, t, rebalance=5000, session=10_000)
    t.advance(0)
    sync(coord, a, 1, {a: b"x"})
    b, fb = full_join(coord, t, client="d", rebalance=5000, session=10_000)
    t.advance(4999)
    assert not fb.done()
    t.advance(1)
    r = fb.result()
    assert r.error == 0 and r.generation_id == 2 and r.leader == b and [m[0] for m in r.members] == [b]
    assert a not in coord.group("g").members
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=a, group_instance_id=None) == E.UNKNOWN_MEMBER_ID


def test_session_timeout_removes_silent_member_and_rebalances(env):
    coord, t, _ = env
    a, _ = full_join(coord, t, session=1000)
    b, _ = full_join(coord, t, client="d", session=1000)
    t.advance(0)
    g = coord.group("g")
    assert g.state == COMPLETING_REBALANCE and len(g.members) == 2
    sync(coord, a, 1, {a: b"1", b: b"2"})
    sync(coord, b, 1)
    for _ in range(5):  # a heartbeats, b is silent
        t.advance(400)
        assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) in (0, E.REBALANCE_IN_PROGRESS)
    assert b not in g.members and g.state == PREPARING_REBALANCE
    fa = join(coord, member_id=a)
    assert fa.result().generation_id == 2 and fa.result().members[0][0] == a


def test_parked_requests_keep_member_alive(env):
    coord, t, _ = env
    a, _ = full_join(coord, t, session=500, rebalance=3000)
    t.advance(0)
    sync(coord, a, 1, {a: b""})
    b, fb = full_join(coord, t, client="d", session=500, rebalance=3000)
    for _ in range(5):  # b parked in JoinGroup far beyond its session timeout: still a member
        t.advance(400)
        assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == E.REBALANCE_IN_PROGRESS
    assert b in coord.group("g").members and not fb.done()
    fa = join(coord, member_id=a, session=500, rebalance=3000)
    assert fa.done() and fb.done() and fa.result().leader == a
    sb = sync(coord, b, 2)  # the follower parks in SyncGroup while the leader heartbeats
    for _ in range(5):
        t.advance(400)
        assert coord.heartbeat(group_id="g", generation_id=2, member_id=a, group_instance_id=None) == 0
    assert set(coord.group("g").members) == {a, b} and not sb.done()
    sync(coord, a, 2, {a: b"A", b: b"B"})
    assert sb.result().error == 0 and sb.result().assignment == b"B"
    # a member that neither heartbeats nor waits is removed
    t.advance(2000)
    assert coord.group("g").members == {} or b not in coord.group("g").members


def test_member_that_never_syncs_is_removed_after_rebalance_timeout(env):
    coord, t, _ = env
    a, _ = full_join(coord, t, session=1000, rebalance=3000)
    b, fb = full_join(coord, t, client="d", session=1000, rebalance=3000)
    t.advance(0)
    assert fb.result().leader == a
    sb = sync(coord, b, 1)  # the follower waits; the leader heartbeats but never syncs
    for _ in range(7):
        t.advance(400)
        coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None)
    assert not sb.done()
    t.advance(400)
    assert sb.result().error == E.REBALANCE_IN_PROGRESS
    assert a not in coord.group("g").members and coord.group("g").state == PREPARING_REBALANCE


def test_leave_group_rebalances_remaining_member(env):
    coord, t, _ = env
    a, _ = full_join(coord, t)
    b, _ = full_join(coord, t, client="d")
    t.advance(0)
    err, res = coord.leave("g", [(b, None)])
    assert err == 0 and res == [(b, None, 0)]
    assert coord.group("g").state == PREPARING_REBALANCE
    r = join(coord, member_id=a).result()
    assert r.generation_id == 2 and [m[0] for m in r.members] == [a]
    err, res = coord.leave("g", [(b, None)])
    assert res == [(b, None, E.UNKNOWN_MEMBER_ID)]
    assert coord.leave("nope", [("x", None)])[0] == E.UNKNOWN_MEMBER_ID


def test_last_member_leaving_empties_group(env):
    coord, t, store = env
    a, _ = full_join(coord, t)
    t.advance(0)
    sync(coord, a, 1, {a: b"x"})
    coord.leave("g", [(a, None)])
    g = coord.group("g")
    assert g.state == EMPTY and g.generation_id == 2 and not g.members
    assert store.groups[-1][1].members == [] and store.groups[-1][1].generation == 2


def test_protocol_selection_and_inconsistent_protocol(env):
    coord, t, _ = env
    a, _ = full_join(coord, t, protocols=[("roundrobin", b"1"), ("range", b"2")])
    b, _ = full_join(coord, t, client="d", protocols=[("range", b"3"), ("roundrobin", b"4")])
    c, fc = full_join(coord, t, client="e", protocols=[("range", b"5")])
    t.advance(0)
    r = fc.result()
    assert r.protocol_name == "range"  # the only one every member supports
    leader = r.leader
    fl = join(coord, member_id=leader, protocols=[("range", b"x")])  # rejoin of the leader: a new rebalance
    bad = join(coord, protocols=[("sticky", b"")])
    assert bad.result().error == E.INCONSISTENT_GROUP_PROTOCOL
    bad = join(coord, protocols=[("range", b"")], ptype="connect")
    assert bad.result().error == E.INCONSISTENT_GROUP_PROTOCOL
    assert not fl.done()


def test_protocol_vote_majority(env):
    coord, t, _ = env
    full_join(coord, t, protocols=[("cooperative-sticky", b""), ("range", b"")])
    full_join(coord, t, client="d", protocols=[("cooperative-sticky", b""), ("range", b"")])
    _, f = full_join(coord, t, client="e", protocols=[("range", b""), ("cooperative-sticky", b"")])
    t.advance(0)
    assert f.result().protocol_name == "cooperative-sticky"


def test_invalid_session_timeout_and_unknown_member(env):
    coord, t, _ = env
    assert join(coord, session=50).result().error == E.INVALID_SESSION_TIMEOUT
    assert join(coord, member_id="ghost").result().error == E.UNKNOWN_MEMBER_ID
    assert coord.group("g") is None
    assert join(coord, gid="").result().error == E.INVALID_GROUP_ID
    assert sync(coord, "ghost", 1).result().error == E.UNKNOWN_MEMBER_ID
    assert coord.heartbeat(group_id="g", generation_id=1, member_id="x", group_instance_id=None) == E.UNKNOWN_MEMBER_ID


def test_pending_member_expires(env):
    coord, t, _ = env
    a, _ = full_join(coord, t)
    t.advance(0)
    sync(coord, a, 1, {a: b""})
    f = join(coord, client="d")
    pending = f.result().member_id
    assert pending in coord.group("g").pending_members
    t.advance(1001)
    assert pending not in coord.group("g").pending_members
    assert join(coord, member_id=pending, client="d").result().error == E.UNKNOWN_MEMBER_ID


def test_static_member_rejoin_without_rebalance_and_fencing(env):
    coord, t, _ = env
    f = join(coord, instance="i1")  # static members need no MEMBER_ID_REQUIRED round trip
    t.advance(0)
    r = f.result()
    a = r.member_id
    assert r.error == 0 and a.startswith("i1-")
    b, _ = full_join(coord, t, client="d")
    fa = join(coord, member_id=a, instance="i1")
    t.advance(0)
    gen = fa.result().generation_id
    assert gen == 2
    leader = fa.result().leader
    other = b if leader == a else a
    so = sync(coord, other, gen, instance="i1" if other == a else None)
    sync(coord, leader, gen, {a: b"A", b: b"B"}, instance="i1" if leader == a else None)
    assert so.result().error == 0
    # the static member restarts (new process, no member id): same assignment, no rebalance
    f2 = join(coord, instance="i1")
    r2 = f2.result()
    assert r2.error == 0 and r2.generation_id == 2 and r2.member_id != a
    assert coord.group("g").state == STABLE
    assert sync(coord, r2.member_id, 2, instance="i1").result().assignment == b"A"
    # the old incarnation is fenced
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=a, group_instance_id="i1") == E.FENCED_INSTANCE_ID
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=r2.member_id, group_instance_id="i1") == 0
    # leave by instance id only
    err, res = coord.leave("g", [("", "i1")])
    assert res[0][2] == 0 and coord.group("g").state == PREPARING_REBALANCE


def test_commit_validation_and_fetch(env):
    coord, t, store = env
    # simple commit to an unknown group creates it (Empty, offsets only)
    res = coord.commit_offsets(group_id="s", generation_id=-1, member_id="", group_instance_id=None, version=8,
                               offsets=[("t", 0, 5, -1, "meta", -1), ("t", 9, 1, -1, "", -1), ("zz", 0, 1, -1, "", -1)])
    assert res == {("t", 0): 0, ("t", 9): E.UNKNOWN_TOPIC_OR_PARTITION, ("zz", 0): E.UNKNOWN_TOPIC_OR_PARTITION}
    assert coord.fetch_offsets("s", [("t", 0), ("t", 1)]) == (0, [("t", 0, 5, -1, "meta", 0), ("t", 1, -1, -1, "", 0)])
    assert coord.fetch_offsets("s", None)[1] == [("t", 0, 5, -1, "meta", 0)]
    assert coord.fetch_offsets("unknown", [("t", 0)]) == (0, [("t", 0, -1, -1, "", 0)])
    assert store.offsets[-1][0] == "s" and store.offsets[-1][1][("t", 0)].offset == 5
    # generation >= 0 for an unknown group
    r = coord.commit_offsets(group_id="nog", generation_id=3, member_id="m", group_instance_id=None, version=8,
                             offsets=[("t", 0, 1, -1, "", -1)])
    assert r == {("t", 0): E.ILLEGAL_GENERATION}
    # member commits
    a, _ = full_join(coord, t)
    t.advance(0)

    def commit(gen, mid, off):
        return coord.commit_offsets(group_id="g", generation_id=gen, member_id=mid, group_instance_id=None,
                                    version=8, offsets=[("t", 1, off, -1, "", -1)])[("t", 1)]

    assert commit(1, a, 3) == E.REBALANCE_IN_PROGRESS  # CompletingRebalance
    sync(coord, a, 1, {a: b""})
    assert commit(1, a, 3) == 0
    assert commit(0, a, 4) == E.ILLEGAL_GENERATION
    assert commit(1, "other", 4) == E.UNKNOWN_MEMBER_ID
    assert commit(-1, "", 4) == E.UNKNOWN_MEMBER_ID  # simple commit while the group has members
    assert coord.fetch_offsets("g", [("t", 1)])[1][0][2] == 3


def test_delete_groups_offsets_and_list(env):
    coord, t, store = env
    a, _ = full_join(coord, t)
    t.advance(0)
    sync(coord, a, 1, {a: b""})
    coord.commit_offsets(group_id="g", generation_id=1, member_id=a, group_instance_id=None, version=8,
                         offsets=[("t", 0, 7, -1, "", -1)])
    coord.commit_offsets(group_id="s", generation_id=-1, member_id="", group_instance_id=None, version=8,
                         offsets=[("u", 0, 1, -1, "", -1)])
    assert coord.list_groups() == [("g", "consumer", STABLE, "classic"), ("s", "", EMPTY, "classic")]
    assert coord.list_groups(["empty"]) == [("s", "", EMPTY, "classic")]
    assert coord.list_groups(types=["CONSUMER"]) == []
    assert coord.delete_group("g") == E.NON_EMPTY_GROUP
    assert coord.delete_group("nope") == E.GROUP_ID_NOT_FOUND
    coord.leave("g", [(a, None)])
    assert coord.delete_group("g") == 0
    assert coord.group("g") is None and coord.fetch_offsets("g", [("t", 0)])[1][0][2] == -1
    assert store.offsets[-1] == ("g", {("t", 0): None}) and store.groups[-1] == ("g", None)
    assert coord.delete_offsets("s", [("u", 0)]) == (0, {("u", 0): 0})
    assert coord.fetch_offsets("s", None)[1] == []


def test_offsets_expire_for_empty_groups_only(env):
    coord, t, store = env
    coord.commit_offsets(group_id="s", generation_id=-1, member_id="", group_instance_id=None, version=8,
                         offsets=[("t", 0, 1, -1, "", -1)])
    a, _ = full_join(coord, t, gid="g", session=120_000 // 4)
    t.advance(0)
    sync(coord, a, 1, {a: b""}, gid="g")
    coord.commit_offsets(group_id="g", generation_id=1, member_id=a, group_instance_id=None, version=8,
                         offsets=[("t", 0, 1, -1, "", -1)])
    for _ in range(59):
        t.advance(1000)
        assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == 0
    assert coord.expire_offsets() == 0
    t.advance(1_000)
    assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == 0
    assert coord.expire_offsets() == 1
    assert coord.group("s") is None
    assert coord.fetch_offsets("g", [("t", 0)])[1][0][2] == 1


def test_replay_restores_offsets_and_group(env):
    coord, t, store = env
    a, _ = full_join(coord, t, instance=None)
    t.advance(0)
    sync(coord, a, 1, {a: b"asg"})
    coord.commit_offsets(group_id="g", generation_id=1, member_id=a, group_instance_id=None, version=8,
                         offsets=[("t", 0, 10, 4, "m", -1), ("t", 1, 11, -1, "", -1)])
    # round trip every stored record through Kafka's byte formats into a new coordinator
    loop = asyncio.new_event_loop()
    t2 = ManualTime(t.now)
    c2 = GroupCoordinator(clock=t2, scheduler=t2, future_factory=loop.create_future, store=MemStore(),
                          min_session_timeout_ms=100)
    for gid, offsets in store.offsets:
        for (topic, p), v in offsets.items():
            k = fmt.decode_key(fmt.offset_key(gid, topic, p))
            val = None if v is None else fmt.decode_offset_value(fmt.offset_value(v))
            c2.load_offset(k.group, k.topic, k.partition, val)
    for gid, v in store.groups:
        k = fmt.decode_key(fmt.group_key(gid))
        c2.load_group(k.group, None if v is None else fmt.decode_group_value(fmt.group_value(v)))
    c2.start_loaded_timers()
    g = c2.group("g")
    assert g.generation_id == 1 and g.state == STABLE and list(g.members) == [a]
    assert g.members[a].assignment == b"asg"
    assert c2.fetch_offsets("g", None)[1] == [("t", 0, 10, 4, "m", 0), ("t", 1, 11, -1, "", 0)]
    assert c2.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == 0
    t2.advance(1001)  # the loaded member never comes back: removed, the group empties
    assert c2.group("g").state == EMPTY and c2.group("g").generation_id == 2
    loop.close()


def test_record_formats_match_kafka_bytes():
    # OffsetCommitKey v1 / GroupMetadataKey v2 as Kafka writes them
    assert fmt.offset_key("g", "t", 3) == b"\x00\x01\x00\x01g\x00\x01t\x00\x00\x00\x03"
    assert fmt.group_key("grp") == b"\x00\x02\x00\x03grp"
    v = fmt.offset_value(fmt.OffsetValue(42, 7, "md", 1700000000000))
    assert v == (b"\x00\x03" + (42).to_bytes(8, "big") + (7).to_bytes(4, "big") + b"\x00\x02md"
                 + (1700000000000).to_bytes(8, "big"))
    # OffsetCommitValue v1 (with expireTimestamp) is still readable
    v1 = b"\x00\x01" + (5).to_bytes(8, "big") + b"\x00\x00" + (9).to_bytes(8, "big") + (10).to_bytes(8, "big")
    assert fmt.decode_offset_value(v1) == fmt.OffsetValue(5, -1, "", 9)
    gv = fmt.GroupValue("consumer", 3, "range", "m1", 123,
                        [fmt.MemberValue("m1", "i1", "c", "/h", 300, 100, b"sub", b"asg")])
    assert fmt.decode_group_value(fmt.group_value(gv)) == gv


def test_partition_for_uses_java_hashcode():
    # values computed with Java's "...".hashCode()
    assert fmt.java_string_hash("") == 0
    assert fmt.java_string_hash("a") == 97
    assert fmt.java_string_hash("hello") == 99162322
    assert fmt.java_string_hash("polygenelubricants") == -2147483648  # Integer.MIN_VALUE
    assert fmt.partition_for("polygenelubricants", 50) == 0  # Utils.abs(MIN_VALUE) == 0
    assert fmt.partition_for("hello", 50) == 99162322 % 50


def test_rejoin_with_unchanged_metadata_follows_kafka(env):
    """Kafka's rules for a known member that sends JoinGroup again with the same
    protocols: in CompletingRebalance anyone (leader too) gets the current generation
    back; in Stable a follower does, but the leader forces a rebalance (that is how a
    leader makes the group pick up changes its members' metadata cannot show, such as
    new partitions). kafka-python 3.0.12 sometimes sends such a leader rejoin by
    accident (it drops a finished join task when a poll timed out before it completed),
    and on Apache Kafka that is a rebalance too."""
    coord, t, _ = env
    a, fa = full_join(coord, t)
    t.advance(0)
    sync(coord, a, 1, {a: b"all"})
    b, fb = full_join(coord, t, client="d")
    join(coord, member_id=a)
    assert fb.result().generation_id == 2
    g = coord.group("g")
    assert g.state == COMPLETING_REBALANCE
    # CompletingRebalance: the leader and the follower both get generation 2 again
    ra = join(coord, member_id=a).result()
    assert (ra.error, ra.generation_id, ra.leader, len(ra.members)) == (0, 2, a, 2)
    rb = join(coord, member_id=b, client="d").result()
    assert (rb.error, rb.generation_id, rb.members) == (0, 2, [])
    assert g.state == COMPLETING_REBALANCE
    sync(coord, b, 2)
    sync(coord, a, 2, {a: b"p0", b: b"p1"})
    assert g.state == STABLE
    # Stable: a follower's rejoin changes nothing
    rb = join(coord, member_id=b, client="d").result()
    assert (rb.error, rb.generation_id, rb.leader) == (0, 2, a)
    assert g.state == STABLE and g.generation_id == 2
    # Stable: the leader's rejoin starts a rebalance; the follower learns of it by heartbeat
    fa3 = join(coord, member_id=a)
    assert not fa3.done() and g.state == PREPARING_REBALANCE
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=b, group_instance_id=None) == E.REBALANCE_IN_PROGRESS
    fb3 = join(coord, member_id=b, client="d")
    assert fa3.result().generation_id == fb3.result().generation_id == 3


# ------------------------------------------------------------------------------ group.max.size


def _coord(t, loop, store=None, **kw):
    return GroupCoordinator(clock=t, scheduler=t, future_factory=loop.create_future, store=store or MemStore(),
                            initial_rebalance_delay_ms=0, min_session_timeout_ms=100,
                            max_session_timeout_ms=60_000, topic_partitions={"t": 4}.get, **kw)


@pytest.fixture
def small():
    """A coordinator with group.max.size=2."""
    loop = asyncio.new_event_loop()
    t = ManualTime()
    store = MemStore()
    yield _coord(t, loop, store, group_max_size=2), t, store
    loop.close()


def _stable(coord, t, *specs):
    """Join the given members (kwargs for join(); static ones without the MEMBER_ID_REQUIRED
    round trip) into a Stable group; returns their member ids, the first is the leader."""

    def first_join(kw):
        if kw.get("instance") is not None:
            return None, join(coord, **kw)
        return full_join(coord, t, **kw)

    _, f = first_join(specs[0])
    t.advance(0)
    r = f.result()
    ids = [r.member_id]
    sync(coord, ids[0], r.generation_id, {ids[0]: ids[0].encode()}, instance=specs[0].get("instance"))
    if len(specs) > 1:
        futs = [first_join(kw)[1] for kw in specs[1:]]
        # the leader rejoins: the rebalance completes once everyone is in
        futs.append(join(coord, member_id=ids[0], **specs[0]))
        t.advance(0)
        res = [f.result() for f in futs]
        ids += [x.member_id for x in res[:-1]]
        gen = res[-1].generation_id
        assert all(x.error == 0 and x.generation_id == gen for x in res) and res[-1].leader == ids[0]
        for mid, kw in zip(ids[1:], specs[1:]):
            sync(coord, mid, gen, instance=kw.get("instance"))
        sync(coord, ids[0], gen, {mid: mid.encode() for mid in ids}, instance=specs[0].get("instance"))
    assert coord.group("g").state == STABLE
    return ids


def test_group_max_size_config_key():
    from config import BrokerConfig
    from config.properties import ConfigError

    assert BrokerConfig().group_max_size == 2**31 - 1  # Kafka's default, Integer.MAX_VALUE
    assert BrokerConfig(**{"group.max.size": "3"}).group_max_size == 3
    with pytest.raises(ConfigError):
        BrokerConfig(**{"group.max.size": "0"})  # atLeast(1)
    loop = asyncio.new_event_loop()
    assert _coord(ManualTime(), loop).group_max_size == 2**31 - 1
    loop.close()


def test_group_max_size_refuses_new_members_of_a_full_stable_group(small):
    coord, t, _ = small
    a, b = _stable(coord, t, {}, {"client": "d"})
    g = coord.group("g")
    gen = g.generation_id
    # a new v4+ member: refused before it gets a member id (no pending member is kept)
    r = join(coord, client="e").result()
    assert (r.error, r.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert not g.pending_members
    # a v0-v3 member (no MEMBER_ID_REQUIRED round trip) and a new static member too
    assert join(coord, client="e", v4=False).result().error == E.GROUP_MAX_SIZE_REACHED
    assert join(coord, instance="new-1").result().error == E.GROUP_MAX_SIZE_REACHED
    assert "new-1" not in g.static_members
    # nothing changed for the members: no rebalance
    assert g.state == STABLE and g.generation_id == gen and set(g.members) == {a, b}
    assert coord.heartbeat(group_id="g", generation_id=gen, member_id=b, group_instance_id=None) == 0
    # the members themselves may rejoin (a follower: same generation back)
    rb = join(coord, member_id=b, client="d").result()
    assert (rb.error, rb.generation_id) == (0, gen)
    # once one leaves, a new member fits again
    coord.leave("g", [(b, None)])
    f = join(coord, client="e")
    assert f.result().error == E.MEMBER_ID_REQUIRED


def test_group_max_size_pending_members_and_completing_rebalance(small):
    """Kafka's testDynamicMembersJoinGroupWithMaxSizeAndRequiredKnownMember: an Empty
    group hands out member ids to anyone; the pending members coming back are taken while
    fewer than group.max.size are waiting in JoinGroup; the others are refused and
    forgotten, before and after the join completes."""
    coord, t, _ = small
    ids = [join(coord, client=f"c{i}").result().member_id for i in range(3)]
    g = coord.group("g")
    assert g.state == EMPTY and len(g.pending_members) == 3
    f0 = join(coord, member_id=ids[0], client="c0")
    f1 = join(coord, member_id=ids[1], client="c1")
    assert g.state == PREPARING_REBALANCE
    r2 = join(coord, member_id=ids[2], client="c2").result()
    assert (r2.error, r2.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert ids[2] not in g.pending_members and ids[2] not in g.members
    t.advance(0)
    assert f0.result().error == f1.result().error == 0 and f0.result().generation_id == 1
    assert g.state == COMPLETING_REBALANCE and set(g.members) == set(ids[:2])
    # CompletingRebalance: members are accepted, the refused one still is not
    assert join(coord, member_id=ids[0], client="c0").result().error == 0
    assert join(coord, member_id=ids[2], client="c2").result().error == E.GROUP_MAX_SIZE_REACHED
    assert join(coord, client="c3").result().error == E.GROUP_MAX_SIZE_REACHED


def test_group_max_size_last_members_to_rejoin_are_kicked_out(small):
    """Kafka's testLastJoiningMembersAreKickedOutWhenRejoiningGroupWithMaxSize: in
    PreparingRebalance the count of members already waiting in JoinGroup decides, so
    when a group is over the limit the members that rejoin last are refused and removed
    from the group (without completing the join early: the rebalance timeout does)."""
    loop = asyncio.new_event_loop()
    t = ManualTime()
    big = _coord(t, loop)
    ids = _stable(big, t, {}, {"client": "d"}, {"client": "e"})
    g = big.group("g")
    gen = g.generation_id
    big.group_max_size = 2  # as if lowered
    # a follower with new metadata starts a rebalance
    fb = join(big, member_id=ids[1], client="d", protocols=(("range", b"new"),))
    assert g.state == PREPARING_REBALANCE
    fa = join(big, member_id=ids[0])
    r = join(big, member_id=ids[2], client="e").result()
    assert (r.error, r.member_id) == (E.GROUP_MAX_SIZE_REACHED, "")
    assert ids[2] not in g.members and len(g.members) == 2
    assert not fa.done()  # the join still waits for the rebalance timeout
    t.advance(2000)
    assert fa.result().generation_id == fb.result().generation_id == gen + 1
    assert {m for m, _, _ in fa.result().members} == set(ids[:2])
    loop.close()


def test_group_max_size_static_members(small):
    """Static members count like any other: a new instance id is refused by a full
    group, and so is a static member that restarts (JoinGroup without a member id) while
    the group is full: Kafka's acceptJoiningMember only looks at the member id of the
    request (GroupMetadataManager.classicGroupJoinToClassicGroup); it gets in once its old
    member has left or timed out. With its member id it is accepted."""
    coord, t, _ = small
    a, b = _stable(coord, t, {"instance": "i1"}, {"instance": "i2", "client": "d"})
    g = coord.group("g")
    gen = g.generation_id
    assert join(coord, instance="i3", client="e").result().error == E.GROUP_MAX_SIZE_REACHED
    r = join(coord, instance="i2", client="d").result()
    assert r.error == E.GROUP_MAX_SIZE_REACHED
    assert g.static_members == {"i1": a, "i2": b} and g.state == STABLE and g.generation_id == gen
    rb = join(coord, member_id=b, instance="i2", client="d").result()
    assert (rb.error, rb.member_id, rb.generation_id) == (0, b, gen)
    # i2 leaves (or its session expires): its restarted process gets in
    coord.leave("g", [("", "i2")])
    f = join(coord, instance="i2", client="d")
    assert not f.done() and g.state == PREPARING_REBALANCE


def test_group_over_max_size_after_load_rebalances_and_drops_the_excess(small):
    """A group loaded with more members than group.max.size (the limit was lowered
    across a restart) starts a rebalance right after loading (Kafka's onLoaded); the
    members rejoining beyond the limit get GROUP_MAX_SIZE_REACHED and are removed, the
    others form the next generation."""
    coord, t, _ = small
    members = [fmt.MemberValue(f"m{i}", None, f"c{i}", "/h", 2000, 1000, b"sub", b"asg%d" % i) for i in range(3)]
    coord.load_group("g", fmt.GroupValue("consumer", 7, "range", "m0", t.now, members))
    g = coord.group("g")
    assert g.state == STABLE
    coord.start_loaded_timers()
    assert g.state == PREPARING_REBALANCE and len(g.members) == 3 and g.generation_id == 7
    assert coord.heartbeat(group_id="g", generation_id=7, member_id="m2", group_instance_id=None) == \
        E.REBALANCE_IN_PROGRESS
    f1 = join(coord, member_id="m1", client="c1", protocols=(("range", b"sub"),))
    f0 = join(coord, member_id="m0", client="c0", protocols=(("range", b"sub"),))
    r2 = join(coord, member_id="m2", client="c2", protocols=(("range", b"sub"),)).result()
    assert r2.error == E.GROUP_MAX_SIZE_REACHED and "m2" not in g.members
    t.advance(2000)
    assert f0.result().generation_id == f1.result().generation_id == 8
    assert g.state == COMPLETING_REBALANCE and set(g.members) == {"m0", "m1"}


def test_group_within_max_size_after_load_stays_stable(small):
    coord, t, _ = small
    members = [fmt.MemberValue(f"m{i}", None, f"c{i}", "/h", 2000, 1000, b"sub", b"") for i in range(2)]
    coord.load_group("g", fmt.GroupValue("consumer", 7, "range", "m0", t.now, members))
    coord.start_loaded_timers()
    assert coord.group("g").state == STABLE


# ------------------------------------------------------------------------------ static members after a restart


TWO = (("range", b"sub"), ("roundrobin", b"sub"))


def _restart(coord, t, store, loop):
    """A new coordinator fed with every record the old one stored (in Kafka's byte formats)."""
    t2 = ManualTime(t.now)
    c2 = _coord(t2, loop, MemStore())
    for gid, v in store.groups:
        k = fmt.decode_key(fmt.group_key(gid))
        c2.load_group(k.group, None if v is None else fmt.decode_group_value(fmt.group_value(v)))
    c2.start_loaded_timers()
    return c2, t2


def test_static_member_restarting_after_a_broker_restart_gets_no_rebalance(env):
    """KIP-345 across a coordinator restart: the loaded members only know the group's
    selected protocol (GroupMetadata stores one subscription per member), so a
    restarted static member sending its full protocol list does not "match" its loaded
    self. Kafka (updateStaticMemberThenRebalanceOrCompleteJoin) only rebalances a Stable
    group when the protocol it would select changes: same generation, same assignment."""
    coord, t, store = env
    loop = asyncio.new_event_loop()
    lead, other = _stable(coord, t, {"instance": "i1", "protocols": TWO},
                          {"instance": "i2", "client": "d", "protocols": TWO})
    gen = coord.group("g").generation_id
    c2, t2 = _restart(coord, t, store, loop)
    g = c2.group("g")
    assert g.state == STABLE and g.generation_id == gen and g.members[lead].protocols == [("range", b"sub")]
    # the follower process restarts: no member id
    r = join(c2, instance="i2", client="d", protocols=TWO).result()
    assert (r.error, r.generation_id, r.leader, r.members) == (0, gen, lead, [])
    assert r.member_id != other and g.state == STABLE
    assert sync(c2, r.member_id, gen, instance="i2").result().assignment == other.encode()
    assert c2.heartbeat(group_id="g", generation_id=gen, member_id=lead, group_instance_id="i1") == 0
    # the leader process restarts: no rebalance either (KIP-814: it is told to skip the assignment)
    r = join(c2, instance="i1", protocols=TWO).result()
    assert (r.error, r.generation_id, r.leader, r.skip_assignment, r.previous_leader) == (0, gen, r.member_id,
                                                                                         True, lead)
    assert g.state == STABLE and g.leader_id == r.member_id
    assert sync(c2, r.member_id, gen, instance="i1").result().assignment == lead.encode()
    # the new member ids are stored: a second restart knows them
    assert {m.member_id for m in c2.store.groups[-1][1].members} == {r.member_id, g.static_members["i2"]}
    loop.close()


def test_static_member_rejoin_rebalances_only_when_the_selected_protocol_changes(env):
    """Kafka's testStaticMemberRejoinWithUnknownMemberIdAndChangeOfProtocolWhileSelect
    ProtocolUnchanged / ...WithSelectedProtocolChanged."""
    coord, t, _ = env
    lead, other = _stable(coord, t, {"instance": "i1", "protocols": TWO},
                          {"instance": "i2", "client": "d", "protocols": TWO})
    g = coord.group("g")
    gen = g.generation_id
    # new subscription metadata, same selected protocol: the current generation back
    r = join(coord, instance="i2", client="d", protocols=(("range", b"other"), ("roundrobin", b"other"))).result()
    assert (r.error, r.generation_id) == (0, gen) and g.state == STABLE
    # the protocol the group would select changes: rebalance
    f = join(coord, instance="i2", client="d", protocols=(("roundrobin", b"sub"),))
    assert not f.done() and g.state == PREPARING_REBALANCE
    join(coord, member_id=lead, instance="i1", protocols=TWO)
    assert f.result().generation_id == gen + 1 and g.protocol_name == "roundrobin"


def test_static_leader_rejoin_before_join_group_v9_is_answered_as_a_follower(env):
    """JoinGroup v0-8 cannot carry SkipAssignment: Kafka names the leader as it was before
    the member id changed and sends no member list, so the client does not assign."""
    from types import SimpleNamespace

    from broker.handlers import join_group
    from protocol.messages import JoinGroupRequest

    coord, t, _ = env
    lead, other = _stable(coord, t, {"instance": "i1", "protocols": TWO},
                          {"instance": "i2", "client": "d", "protocols": TWO})
    req = JoinGroupRequest(group_id="g", session_timeout_ms=1000, rebalance_timeout_ms=2000, member_id="",
                           group_instance_id="i1", protocol_type="consumer",
                           protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in TWO])
    loop = coord.new_future().get_loop()
    resp = loop.run_until_complete(join_group.handle(SimpleNamespace(group_coordinator=coord),
                                                     SimpleNamespace(api_version=5, client_id="c"), req))
    assert resp.error_code == 0 and resp.leader == lead and resp.members == []
    assert resp.member_id != lead and coord.group("g").leader_id == resp.member_id
