"""Classic members inside consumer groups and the online migration between the classic
and the consumer protocol (broker/coordinator/classic_members.py), driven by a manual
clock: upgrade on the first ConsumerGroupHeartbeat, JoinGroup/SyncGroup/Heartbeat/
LeaveGroup of classic members answered from the consumer group's reconciliation, their
timers, offset commits, the migration policy, and the downgrade when the last
consumer-protocol member leaves."""

from __future__ import annotations

import struct

import pytest

from protocol import codec
from protocol import messages as M
from protocol.errors import ErrorCode as E

from broker.coordinator import consumer_protocol as CP
from broker.coordinator.consumer_group import M_STABLE, M_UNREVOKED
from broker.coordinator.group import PREPARING_REBALANCE, STABLE, GroupCoordinator
from tests.unit.test_consumer_group_protocol import T1, RecordStore, hb, ok
from tests.unit.test_group_coordinator import ManualTime


def sub(topics, owned=None, version=1) -> bytes:
    S = M.ConsumerProtocolSubscription
    body = S(topics=list(topics), user_data=None, generation_id=-1, rack_id=None,
             owned_partitions=[S.TopicPartition(topic=t, partitions=sorted(ps)) for t, ps in (owned or {}).items()])
    return struct.pack(">h", version) + codec.encode_body(body, version)


def make(policy="bidirectional"):
    import asyncio

    loop = asyncio.new_event_loop()
    t = ManualTime()
    topics = {"t": (T1, 4)}
    coord = GroupCoordinator(clock=t, scheduler=t, store=RecordStore(), future_factory=loop.create_future,
                             initial_rebalance_delay_ms=0,
                             topic_partitions=lambda n: (topics.get(n) or (0, None))[1],
                             consumer_groups=dict(topic_metadata=topics.get, topic_names=lambda: sorted(topics),
                                                  session_timeout_ms=1000, heartbeat_interval_ms=100, max_size=10,
                                                  migration_policy=policy))
    return coord, t, loop


@pytest.fixture
def env():
    coord, t, loop = make()
    yield coord, t
    loop.close()


def join(coord, member="", owned=None, instance=None, protocol="roundrobin", session=10000, rebalance=5000):
    f = coord.join(group_id="g", member_id=member, group_instance_id=instance, protocol_type="consumer",
                   protocols=[(protocol, sub(["t"], owned))], session_timeout_ms=session,
                   rebalance_timeout_ms=rebalance, client_id="k", client_host="/h", require_known_member_id=True)
    return f


def sync(coord, member, gen, assignments=None, protocol="roundrobin"):
    f = coord.sync(group_id="g", generation_id=gen, member_id=member, group_instance_id=None,
                   protocol_type="consumer", protocol_name=protocol, assignments=assignments or {})
    return f


def classic_member(coord, t):
    """One classic member A that owns all of topic t (generation 1)."""
    r = join(coord).result()
    assert r.error == E.MEMBER_ID_REQUIRED
    f = join(coord, r.member_id)
    t.advance(0)
    r = f.result()
    assert r.error == 0 and r.leader == r.member_id and r.generation_id == 1
    s = sync(coord, r.member_id, 1, {r.member_id: CP.encode_assignment(1, {"t": {0, 1, 2, 3}})}).result()
    assert s.error == 0 and CP.decode_assignment(s.assignment) == {"t": {0, 1, 2, 3}}
    return r.member_id


def keep_alive(coord, t, ms):
    """Advance the clock by ``ms`` while member c1 (session timeout 1 s) heartbeats."""
    for _ in range(ms // 300):
        t.advance(300)
        m = coord.group("g").members["c1"]
        ok(hb(coord, "c1", m.member_epoch, owned={T1: set(m.assigned.get(T1, ()))}))


def test_upgrade_reconcile_and_downgrade(env):
    coord, t = env
    a = classic_member(coord, t)
    assert coord.commit_offsets(group_id="g", generation_id=1, member_id=a, group_instance_id=None,
                                offsets=[("t", 0, 7, -1, "", -1)], version=8) == {("t", 0): 0}
    # a member of the consumer protocol joins: the group is upgraded
    epoch, assignment = ok(hb(coord, "c1", 0, ["t"]))
    g = coord.group("g")
    assert g.kind == "consumer" and g.group_epoch == 2 and epoch == 2
    assert assignment == {}  # its partitions are still A's
    ma = g.members[a]
    assert ma.classic is not None and ma.member_epoch == 1 and ma.assigned == {T1: {0, 1, 2, 3}}
    assert g.offsets[("t", 0)].offset == 7
    assert coord.list_groups() == [("g", "consumer", "Reconciling", "consumer")]
    # A is told to rejoin; it rejoins owning everything and must give two partitions up first
    assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == \
        E.REBALANCE_IN_PROGRESS
    r = join(coord, a, owned={"t": {0, 1, 2, 3}}).result()
    assert (r.error, r.generation_id, r.leader, r.members, r.protocol_name) == (0, 1, "", [], "roundrobin")
    assert g.members[a].state == M_UNREVOKED
    kept = CP.decode_assignment(sync(coord, a, 1).result().assignment)["t"]
    assert len(kept) == 2
    assert coord.heartbeat(group_id="g", generation_id=1, member_id=a, group_instance_id=None) == \
        E.REBALANCE_IN_PROGRESS
    r = join(coord, a, owned={"t": kept}).result()
    assert (r.error, r.generation_id) == (0, 2) and g.members[a].state == M_STABLE
    assert CP.decode_assignment(sync(coord, a, 2).result().assignment) == {"t": kept}
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=a, group_instance_id=None) == 0
    # the consumer-protocol member gets the released partitions
    epoch, assignment = ok(hb(coord, "c1", 2, owned={}))
    assert assignment == {T1: {0, 1, 2, 3} - kept}
    assert g.state == "Stable"
    # classic commits: generation = member epoch, any version; a wrong one is ILLEGAL_GENERATION
    assert coord.commit_offsets(group_id="g", generation_id=2, member_id=a, group_instance_id=None,
                                offsets=[("t", 1, 3, -1, "", -1)], version=7) == {("t", 1): 0}
    assert coord.commit_offsets(group_id="g", generation_id=1, member_id=a, group_instance_id=None,
                                offsets=[("t", 1, 3, -1, "", -1)], version=7) == {("t", 1): E.ILLEGAL_GENERATION}
    # the last member of the consumer protocol leaves: the group is a classic one again
    ok(hb(coord, "c1", -1))
    c = coord.group("g")
    assert c.kind == "classic" and c.generation_id == 2 and c.state == PREPARING_REBALANCE
    assert set(c.members) == {a} and c.offsets[("t", 1)].offset == 3
    assert CP.decode_assignment(c.members[a].assignment) == {"t": kept}
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=a, group_instance_id=None) == \
        E.REBALANCE_IN_PROGRESS
    f = join(coord, a, owned={"t": kept})
    t.advance(0)
    r = f.result()
    assert (r.error, r.generation_id, r.leader) == (0, 3, a)
    assert sync(coord, a, 3, {a: CP.encode_assignment(1, {"t": {0, 1, 2, 3}})}).result().error == 0
    assert c.state == STABLE


def test_parked_classic_requests_are_told_to_rejoin_on_upgrade(env):
    coord, t = env
    a = classic_member(coord, t)
    r = join(coord).result()
    parked = join(coord, r.member_id)  # a second member: the group prepares a rebalance, A's join is awaited
    assert not parked.done()
    ok(hb(coord, "c1", 0, ["t"]))
    assert parked.result().error == E.REBALANCE_IN_PROGRESS
    g = coord.group("g")
    assert g.kind == "consumer" and set(g.members) == {a, r.member_id, "c1"}


def test_upgrade_refused_by_policy_or_protocol_type():
    coord, t, loop = make(policy="downgrade")
    try:
        classic_member(coord, t)
        code, message, *_ = hb(coord, "c1", 0, ["t"])
        assert (code, message) == (E.GROUP_ID_NOT_FOUND, "Cannot upgrade classic group g to consumer group because "
                                                           "online upgrade is disabled.")
        assert coord.group("g").kind == "classic" and coord.group("g").state == STABLE
    finally:
        loop.close()
    coord, t, loop = make()
    try:
        f = coord.join(group_id="g", member_id="", group_instance_id="i", protocol_type="connect",
                       protocols=[("x", b"")], session_timeout_ms=10000, rebalance_timeout_ms=5000, client_id="k",
                       client_host="/h", require_known_member_id=True)
        t.advance(0)
        assert f.result().error == 0
        assert hb(coord, "c1", 0, ["t"])[0] == E.GROUP_ID_NOT_FOUND
        assert coord.group("g").kind == "classic"
    finally:
        loop.close()


def test_classic_member_joins_a_consumer_group_and_its_timers(env):
    coord, t = env
    ok(hb(coord, "c1", 0, ["t"]))
    r = join(coord).result()
    assert r.error == E.MEMBER_ID_REQUIRED
    r = join(coord, r.member_id, rebalance=3000).result()
    g = coord.group("g")
    assert r.error == 0 and r.generation_id == g.group_epoch == 2
    # its partitions are c1's until c1 revokes them: an empty assignment for now
    assert CP.decode_assignment(sync(coord, r.member_id, 2).result().assignment) == {}
    assert g.members[r.member_id].classic.session_timeout_ms == 10000
    # a wrong generation, protocol name, or a consumer-protocol member id
    assert sync(coord, r.member_id, 1).result().error == E.ILLEGAL_GENERATION
    assert sync(coord, r.member_id, 2, protocol="range").result().error == E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.heartbeat(group_id="g", generation_id=2, member_id="c1", group_instance_id=None) == \
        E.UNKNOWN_MEMBER_ID
    assert coord.leave("g", [("c1", None)])[1] == [("c1", None, E.UNKNOWN_MEMBER_ID)]
    # c1 revokes, the classic member is told to rejoin and gets its half
    ok(hb(coord, "c1", 1, owned={T1: {0, 1, 2, 3}}))
    ok(hb(coord, "c1", 1, owned={T1: set(g.members["c1"].assigned.get(T1, ()))}))
    assert coord.heartbeat(group_id="g", generation_id=2, member_id=r.member_id, group_instance_id=None) == \
        E.REBALANCE_IN_PROGRESS
    j = join(coord, r.member_id).result()
    assert len(CP.decode_assignment(sync(coord, r.member_id, j.generation_id).result().assignment)["t"]) == 2
    # LeaveGroup takes it out and bumps the epoch
    before = g.group_epoch
    assert coord.leave("g", [(r.member_id, None)]) == (0, [(r.member_id, None, 0)])
    assert r.member_id not in g.members and g.group_epoch == before + 1
    # a classic member that never sends SyncGroup is fenced after its rebalance timeout
    x = join(coord, join(coord).result().member_id, rebalance=3000).result()
    assert x.member_id in g.members
    keep_alive(coord, t, 2700)
    assert x.member_id in g.members
    keep_alive(coord, t, 600)
    assert x.member_id not in g.members and coord.group("g") is g


def test_classic_member_session_timeout_in_a_consumer_group(env):
    coord, t = env
    ok(hb(coord, "c1", 0, ["t"]))
    r = join(coord, join(coord).result().member_id, session=6000, rebalance=60000).result()
    g = coord.group("g")
    sync(coord, r.member_id, r.generation_id)
    keep_alive(coord, t, 5700)  # c1 keeps heartbeating; the classic member goes quiet
    assert r.member_id in g.members
    keep_alive(coord, t, 600)
    assert r.member_id not in g.members and "c1" in g.members


def test_an_empty_consumer_group_becomes_classic_on_join(env):
    coord, t = env
    ok(hb(coord, "c1", 0, ["t"]))
    ok(hb(coord, "c1", -1))
    assert coord.group("g").kind == "consumer"
    classic_member(coord, t)
    assert coord.group("g").kind == "classic"


def test_no_downgrade_when_disabled():
    coord, t, loop = make(policy="upgrade")
    try:
        a = classic_member(coord, t)
        ok(hb(coord, "c1", 0, ["t"]))
        ok(hb(coord, "c1", -1))
        g = coord.group("g")
        assert g.kind == "consumer" and set(g.members) == {a}
    finally:
        loop.close()
