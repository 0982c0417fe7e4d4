"""The consumer group protocol of KIP-848 (broker/coordinator/consumer_group.py) driven by
a manual clock and scheduler: joining, the assignors, revocation before reassignment,
fencing, leaving, timeouts, regex subscriptions, offset-commit checks, and the records
written to __consumer_offsets replayed into the same state."""

from __future__ import annotations

import uuid

import pytest

from protocol import messages as M
from protocol.errors import ErrorCode as E

from broker.coordinator import consumer_records as CR
from broker.coordinator.consumer_group import M_STABLE, M_UNRELEASED, M_UNREVOKED, _range, _uniform
from broker.coordinator.group import CoordinatorError, GroupCoordinator
from tests.unit.test_group_coordinator import ManualTime

T1, T2 = uuid.UUID(int=1), uuid.UUID(int=2)
TP = M.ConsumerGroupHeartbeatRequest.TopicPartitions


class RecordStore:
    def __init__(self):
        self.records: list = []

    def write_offsets(self, group, offsets, producer=None):
        pass

    def write_group(self, group, value):
        pass

    def write_records(self, group, pairs):
        self.records += pairs


@pytest.fixture
def env():
    import asyncio

    loop = asyncio.new_event_loop()
    t = ManualTime()
    store = RecordStore()
    topics = {"t": (T1, 4), "u": (T2, 2)}
    coord = GroupCoordinator(clock=t, scheduler=t, store=store, future_factory=loop.create_future,
                             topic_partitions=lambda n: (topics.get(n) or (0, None))[1],
                             consumer_groups=dict(topic_metadata=topics.get, topic_names=lambda: sorted(topics),
                                                  session_timeout_ms=1000, heartbeat_interval_ms=100, max_size=3))
    yield coord, t, store, topics
    loop.close()


def hb(coord, member, epoch, topics=None, owned=(), gid="g", regex=None, assignor=None, instance=None,
       rebalance=5000, version=1):
    owned_list = None if owned is None else [TP(topic_id=tid, partitions=sorted(ps)) for tid, ps in dict(owned).items()]
    return coord.consumer.heartbeat(group_id=gid, member_id=member, member_epoch=epoch, instance_id=instance,
                                    rack_id=None, rebalance_timeout_ms=rebalance if epoch == 0 else -1,
                                    subscribed_topic_names=topics, subscribed_topic_regex=regex,
                                    server_assignor=assignor, owned=owned_list if epoch != 0 else [],
                                    client_id="c", client_host="/h", version=version)


def ok(result):
    code, message, member_id, epoch, interval, assignment = result
    assert code == 0, message
    return epoch, assignment


def test_assignors():
    topics = {"t": (T1, 4), "u": (T2, 3)}
    subs = {"a": {"t", "u"}, "b": {"t", "u"}, "c": {"t"}}
    uni = _uniform(subs, topics, {})
    counts = sorted(sum(len(p) for p in a.values()) for a in uni.values())
    assert counts == [2, 2, 3] and not set(uni["c"]) - {T1}
    assert sorted(p for a in uni.values() for p in a.get(T1, ())) == [0, 1, 2, 3]
    # sticky: a member joining takes partitions only from the others' surplus
    again = _uniform({**subs, "d": {"t", "u"}}, topics, uni)
    moved = sum(len(ps - again[m].get(t, set())) for m in uni for t, ps in uni[m].items())
    assert moved == 1
    rng = _range({"a": {"t"}, "b": {"t"}, "c": {"t", "u"}}, topics, {})
    assert rng == {"a": {T1: {0, 1}}, "b": {T1: {2}}, "c": {T1: {3}, T2: {0, 1, 2}}}


def test_join_split_revoke_then_assign(env):
    coord, t, store, _ = env
    epoch, a = ok(hb(coord, "m1", 0, ["t"]))
    assert epoch == 1 and a == {T1: {0, 1, 2, 3}}
    epoch2, a2 = ok(hb(coord, "m2", 0, ["t"]))
    # m2 joins at epoch 2, but m1 still owns everything: nothing released yet
    g = coord.group("g")
    assert epoch2 == 2 and a2 == {} and g.state == "Reconciling"
    assert g.members["m2"].state == M_UNRELEASED
    # m1 is told to revoke two partitions; its epoch stays until it has
    e1, a1 = ok(hb(coord, "m1", 1, owned={T1: {0, 1, 2, 3}}))
    assert e1 == 1 and g.members["m1"].state == M_UNREVOKED
    kept = a1[T1]
    assert len(kept) == 2
    e1, _ = ok(hb(coord, "m1", 1, owned={T1: kept}))
    assert e1 == 2 and g.members["m1"].state == M_STABLE
    e2, a2 = ok(hb(coord, "m2", 2, owned={}))
    assert e2 == 2 and a2 == {T1: {0, 1, 2, 3} - kept} and g.state == "Stable"
    # every change was written as Kafka's records
    versions = [int.from_bytes(k[:2], "big") for k, _ in store.records]
    assert {CR.GROUP_METADATA, CR.MEMBER_METADATA, CR.TARGET_METADATA, CR.TARGET_MEMBER,
            CR.CURRENT_ASSIGNMENT} <= set(versions)


def test_fencing_and_unknown_members(env):
    coord, t, _, _ = env
    ok(hb(coord, "m1", 0, ["t"]))
    assert hb(coord, "m1", 5)[0] == E.FENCED_MEMBER_EPOCH
    assert hb(coord, "nobody", 3)[0] == E.UNKNOWN_MEMBER_ID
    assert hb(coord, "m1", 1, gid="other")[0] == E.GROUP_ID_NOT_FOUND
    ok(hb(coord, "m2", 0, ["t"]))
    ok(hb(coord, "m1", 1, owned={T1: {0, 1, 2, 3}}))  # revoking at epoch 1
    # invalid requests, with Kafka's messages
    for args, code, words in [((coord, "", 0, ["t"]), E.INVALID_REQUEST, "MemberId can't be empty."),
                              ((coord, "m9", 0, None), E.INVALID_REQUEST, "Either SubscribedTopicNames"),
                              ((coord, "m9", -3), E.INVALID_REQUEST, "MemberEpoch is invalid."),
                              ((coord, "m9", 0, ["t"]), E.UNSUPPORTED_ASSIGNOR, "ServerAssignor sticky"),
                              ((coord, "m9", 0, ["t"]), E.INVALID_REGULAR_EXPRESSION, "not a valid regular")]:
        kw = {"assignor": "sticky"} if code == E.UNSUPPORTED_ASSIGNOR else {}
        if code == E.INVALID_REGULAR_EXPRESSION:
            kw = {"regex": "t[("}
        code_got, message, *_ = hb(*args, **kw)
        assert code_got == code and words in message
    # RE2 syntax, as Kafka's RE2J: look-around, back-references and repetition counts over
    # 1000 (all of which Python's re accepts) are refused, with RE2's reason
    for regex, reason in (("t(?=x)", "invalid perl operator: (?="), (r"(t)\1", r"invalid escape sequence: \1"),
                          ("t{1001}", "invalid repetition size: {1001}")):
        code_got, message, *_ = hb(coord, "m9", 0, ["t"], regex=regex)
        assert code_got == E.INVALID_REGULAR_EXPRESSION, (regex, message)
        assert message == f"SubscribedTopicRegex `{regex}` is not a valid regular expression: {reason}."
    # the group is full at 3 (max_size)
    ok(hb(coord, "m3", 0, ["t"]))
    assert hb(coord, "m4", 0, ["t"])[0] == E.GROUP_MAX_SIZE_REACHED


def test_leave_session_timeout_and_rebalance_timeout(env):
    coord, t, _, _ = env
    ok(hb(coord, "m1", 0, ["t"]))
    ok(hb(coord, "m2", 0, ["t"]))
    assert hb(coord, "m2", -1)[3] == -1 and set(coord.group("g").members) == {"m1"}
    # m1 stops heartbeating: removed after the session timeout, the group is Empty
    t.advance(1001)
    assert coord.group("g").state == "Empty"
    # a member that does not revoke in its rebalance timeout is fenced
    ok(hb(coord, "a", 0, ["t"], rebalance=300))
    ok(hb(coord, "b", 0, ["t"]))
    ok(hb(coord, "a", coord.group("g").members["a"].member_epoch, owned={T1: {0, 1, 2, 3}}))
    assert coord.group("g").members["a"].state == M_UNREVOKED
    t.advance(200)
    ok(hb(coord, "b", coord.group("g").members["b"].member_epoch, owned={}))
    t.advance(150)
    assert "a" not in coord.group("g").members


def test_regex_subscription_follows_new_topics(env):
    coord, t, _, topics = env
    # Kafka resolves a new regex asynchronously: nothing is assigned until it has been
    epoch, a = ok(hb(coord, "m1", 0, ["u"], regex="^(t|v)$"))
    assert a == {T2: {0, 1}}
    t.advance(0)
    epoch, a = ok(hb(coord, "m1", epoch, owned={T2: {0, 1}}))
    assert a == {T1: {0, 1, 2, 3}, T2: {0, 1}}
    t3 = uuid.UUID(int=3)
    topics["v"] = (t3, 1)  # a matching topic is created: the next heartbeat bumps the epoch
    e, a = ok(hb(coord, "m1", epoch, owned={T1: {0, 1, 2, 3}, T2: {0, 1}}))
    assert e == epoch + 1 and a == {T1: {0, 1, 2, 3}, T2: {0, 1}, t3: {0}}


def test_a_regex_is_matched_once_per_state_of_the_topics(tmp_path):
    """With topics_version (the log manager's), what a regex matches is kept until the
    topics change: steady heartbeats of many members match nothing again, and the
    group's subscription metadata is not made again; a matching topic created, or
    partitions added to a subscribed one, reach the next heartbeat, as without it."""
    import asyncio

    loop = asyncio.new_event_loop()
    t = ManualTime()
    topics = {f"x{i}": (uuid.UUID(int=100 + i), 1) for i in range(50)}
    topics["t"], topics["u"] = (T1, 4), (T2, 2)
    version = [0]
    listed = []

    def names():
        listed.append(1)
        return sorted(topics)

    coord = GroupCoordinator(clock=t, scheduler=t, store=RecordStore(), future_factory=loop.create_future,
                             topic_partitions=lambda n: (topics.get(n) or (0, None))[1],
                             consumer_groups=dict(topic_metadata=topics.get, topic_names=names,
                                                  topics_version=lambda: version[0], session_timeout_ms=60000,
                                                  heartbeat_interval_ms=100, max_size=50))
    try:
        members = [f"m{i}" for i in range(10)]
        epochs = {}
        for m in members:
            epochs[m] = ok(hb(coord, m, 0, [], regex="^(t|u|v)$"))[0]
        t.advance(0)  # resolved
        g = coord.group("g")
        state = {m: (epochs[m], {}) for m in members}
        for _ in range(4):  # to a steady state
            for m in members:
                e, a = ok(hb(coord, m, state[m][0], owned=state[m][1]))
                state[m] = (e, a if a is not None else state[m][1])
        assert g.state == "Stable" and set(g.subscription_metadata) == {"t", "u"}
        made, matched = g.metadata_made, len(listed)
        for _ in range(3):
            for m in members:
                ok(hb(coord, m, state[m][0], owned=state[m][1]))
        assert len(listed) == matched and g.metadata_made is made  # nothing matched or made again
        t3 = uuid.UUID(int=3)
        topics["v"] = (t3, 1)
        version[0] += 1  # a matching topic is created
        epoch = g.group_epoch
        ok(hb(coord, members[0], state[members[0]][0], owned=state[members[0]][1]))
        assert len(listed) == matched + 1 and g.group_epoch == epoch + 1 and "v" in g.subscription_metadata
        topics["t"] = (T1, 6)
        version[0] += 1  # partitions added
        ok(hb(coord, members[1], state[members[1]][0], owned=None))
        assert g.group_epoch == epoch + 2 and g.subscription_metadata["t"] == (T1, 6)
    finally:
        loop.close()


def test_regex_is_matched_in_linear_time(env):
    """A backtracking matcher takes about 2**n steps for (a+)+b against n a's: with a
    topic name of 200 a's the heartbeat below would never return. RE2 matches in time
    linear in the name."""
    coord, t, _, topics = env
    topics["a" * 200] = (uuid.UUID(int=3), 1)
    topics["a" * 199 + "b"] = (uuid.UUID(int=4), 1)
    epoch, _ = ok(hb(coord, "m1", 0, ["u"], regex="(a+)+b"))
    t.advance(0)  # the regex is resolved
    epoch, a = ok(hb(coord, "m1", epoch, owned={T2: {0, 1}}))
    assert a == {T2: {0, 1}, uuid.UUID(int=4): {0}}


def test_static_member_leaves_and_comes_back(env):
    coord, t, _, _ = env
    epoch, a = ok(hb(coord, "s1", 0, ["t"], instance="i1"))
    assert hb(coord, "s1", -2, instance="i1")[3] == -2
    # another member id for the same instance takes the assignment over, without a new epoch
    e2, a2 = ok(hb(coord, "s2", 0, ["t"], instance="i1"))
    assert a2 == a and coord.group("g").group_epoch == 1
    # while s2 holds the instance, a third id is refused
    assert hb(coord, "s3", 0, ["t"], instance="i1")[0] == E.UNRELEASED_INSTANCE_ID


def test_offset_commit_and_fetch_checks(env):
    coord, t, _, _ = env
    epoch, _ = ok(hb(coord, "m1", 0, ["t"]))
    commit = dict(group_id="g", member_id="m1", group_instance_id=None, offsets=[("t", 0, 5, -1, "", -1)])
    assert coord.commit_offsets(generation_id=epoch, version=9, **commit) == {("t", 0): 0}
    assert coord.commit_offsets(generation_id=epoch + 1, version=9, **commit) == {("t", 0): E.STALE_MEMBER_EPOCH}
    assert coord.commit_offsets(generation_id=epoch, version=8, **commit) == {("t", 0): E.UNSUPPORTED_VERSION}
    assert coord.commit_offsets(generation_id=-1, version=9, **{**commit, "member_id": ""}) == {
        ("t", 0): E.UNKNOWN_MEMBER_ID}
    g = coord.group("g")
    coord.consumer.validate_fetch(g, "m1", epoch)
    with pytest.raises(CoordinatorError) as info:
        coord.consumer.validate_fetch(g, "m1", epoch - 1)
    assert info.value.code == E.STALE_MEMBER_EPOCH
    # a member of another protocol type may not join it; it lists as a consumer group
    f = coord.join(group_id="g", member_id="", group_instance_id=None, protocol_type="connect",
                   protocols=[("range", b"")], session_timeout_ms=10000, rebalance_timeout_ms=10000,
                   client_id="x", client_host="/h", require_known_member_id=True)
    assert f.result().error == E.INCONSISTENT_GROUP_PROTOCOL
    assert coord.list_groups() == [("g", "consumer", "Stable", "consumer")]


def test_records_replay_into_the_same_group(env):
    coord, t, store, topics = env
    ok(hb(coord, "m1", 0, ["t"]))
    ok(hb(coord, "m2", 0, ["t", "u"]))
    ok(hb(coord, "m1", 1, owned={T1: {0, 1, 2, 3}}))
    g = coord.group("g")
    fresh = GroupCoordinator(clock=t, scheduler=t, store=RecordStore(),
                             consumer_groups=dict(topic_metadata=topics.get, topic_names=lambda: sorted(topics)))
    for k, v in store.records:
        decoded = CR.decode(k, v)
        assert decoded is not None
        fresh.consumer.load(*decoded)
    fresh.consumer.finish_load()
    h = fresh.group("g")
    assert (h.group_epoch, h.assignment_epoch, h.target) == (g.group_epoch, g.assignment_epoch, g.target)
    for mid, m in g.members.items():
        n = h.members[mid]
        assert (n.member_epoch, n.previous_member_epoch, n.state, n.assigned, n.pending_revocation,
                n.subscribed_topic_names) == (m.member_epoch, m.previous_member_epoch, m.state, m.assigned,
                                               m.pending_revocation, m.subscribed_topic_names)
    # a member leaving writes tombstones; replayed, it is gone
    ok(hb(coord, "m2", -1))
    again = GroupCoordinator(clock=t, scheduler=t, store=RecordStore(),
                             consumer_groups=dict(topic_metadata=topics.get))
    for k, v in store.records:
        again.consumer.load(*CR.decode(k, v))
    assert set(again.group("g").members) == {"m1"}


def test_delete_an_empty_consumer_group_writes_its_tombstones(env):
    coord, t, store, topics = env
    ok(hb(coord, "m1", 0, ["t"]))
    assert coord.delete_group("g") == E.NON_EMPTY_GROUP
    ok(hb(coord, "m1", -1))
    before = len(store.records)
    assert coord.delete_group("g") == 0 and coord.group("g") is None
    written = [(int.from_bytes(k[:2], "big"), v) for k, v in store.records[before:]]
    assert written[-1] == (CR.GROUP_METADATA, None) and all(v is None for _, v in written)
    # the whole history replayed: nothing of the group is left
    fresh = GroupCoordinator(clock=t, scheduler=t, store=RecordStore(), consumer_groups=dict(topic_metadata=topics.get))
    for k, v in store.records:
        fresh.consumer.load(*CR.decode(k, v))
    assert fresh.group("g") is None
