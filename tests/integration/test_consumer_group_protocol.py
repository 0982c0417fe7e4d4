"""The consumer group protocol of KIP-848 (issue 15) with confluent-kafka's
``group.protocol=consumer`` members, each its own process: three members split the
partitions, one leaves, one is SIGKILLed (removed after the session timeout), partitions
are added; a classic group on the same topic is unaffected; the group, its type and its
committed offsets survive a broker SIGKILL; ConsumerGroupDescribe and the heartbeat's
errors with raw requests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest

from protocol import messages as T
from protocol.errors import ErrorCode
from tests.integration.helpers import REPO_ROOT, Rec, create_topic, produce_kp, unique_topic, wait_for
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(240)

MEMBER = os.path.join(os.path.dirname(__file__), "kip848_member.py")


class Member:
    def __init__(self, bootstrap, group, topic, name, protocol="consumer"):
        env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
        self.proc = subprocess.Popen([sys.executable, MEMBER, bootstrap, group, topic, name, protocol],
                                     stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True, env=env)
        self.state = {"assigned": [], "consumed": 0}
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                self.state = json.loads(line)
            except ValueError:
                pass

    @property
    def assigned(self):
        return self.state["assigned"]

    def stop(self, sig=signal.SIGTERM):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()


@pytest.fixture
def kbroker(broker_factory):
    return broker_factory({"num.partitions": "1", "group.consumer.heartbeat.interval.ms": "500",
                           "group.consumer.min.heartbeat.interval.ms": "500",
                           "group.consumer.session.timeout.ms": "6000",
                           "group.consumer.min.session.timeout.ms": "6000"})


def split(members, partitions):
    got = [sorted(m.assigned) for m in members]
    flat = sorted(p for a in got for p in a)
    return flat == list(range(partitions)) and max(map(len, got)) - min(map(len, got)) <= 1


def list_groups(port):
    resp = raw(port, 16, 5, T.ListGroupsRequest(states_filter=[], types_filter=[]))
    return {g.group_id: (g.group_type, g.group_state, g.protocol_type) for g in resp.groups}


def describe(port, group, version=1):
    (g,) = raw(port, 69, version, T.ConsumerGroupDescribeRequest(group_ids=[group],
                                                                include_authorized_operations=False)).groups
    return g


def committed(port, group, topic, partitions):
    F = T.OffsetFetchRequest
    resp = raw(port, 9, 9, F(groups=[F.OffsetFetchRequestGroup(group_id=group, member_id=None, member_epoch=-1,
                                                               topics=[F.OffsetFetchRequestTopics(
                                                                   name=topic, partition_indexes=list(partitions))])],
                             require_stable=False))
    (g,) = resp.groups
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def test_members_split_leave_crash_grow_and_survive_restart(kbroker):
    from confluent_kafka import Consumer
    from kafka.admin import KafkaAdminClient, NewPartitions

    b = kbroker
    topic = create_topic(b.bootstrap, unique_topic("kip848"), partitions=6)
    for p in range(6):
        produce_kp(b.bootstrap, topic, [Rec(b"k", b"v%d" % i) for i in range(10)], partition=p)
    group = "g848-" + uuid.uuid4().hex[:6]
    members = [Member(b.bootstrap, group, topic, f"m{i}") for i in range(3)]
    try:
        wait_for(lambda: split(members, 6) and all(len(m.assigned) == 2 for m in members), 60, "three-way split")
        wait_for(lambda: sum(m.state["consumed"] for m in members) == 60, 30, "all 60 records consumed")
        assert list_groups(b.port)[group] == ("consumer", "Stable", "consumer")
        d = describe(b.port, group)
        assert d.error_code == 0 and d.group_state == "Stable" and d.assignor_name == "uniform"
        assert len(d.members) == 3 and d.group_epoch == d.assignment_epoch >= 3
        assert all(m.member_epoch == d.group_epoch and m.assignment.topic_partitions[0].topic_name == topic
                   and m.member_type == 1 for m in d.members)
        # v0 has no member type (it decodes as the default -1)
        assert [m.member_type for m in describe(b.port, group, version=0).members] == [-1, -1, -1]
        # a classic group on the same topic reads everything, unaffected
        classic = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group + "-classic",
                            "auto.offset.reset": "earliest"})
        classic.subscribe([topic])
        seen = 0
        deadline = time.time() + 30
        while seen < 60 and time.time() < deadline:
            m = classic.poll(0.5)
            if m is not None and m.error() is None:
                seen += 1
        classic.close()
        assert seen == 60
        assert list_groups(b.port)[group + "-classic"][0] == "classic"
        # one leaves: the two others take its partitions
        members[0].stop()
        wait_for(lambda: split(members[1:], 6), 30, "split after a leave")
        # one is SIGKILLed: the last one gets everything once its session times out
        killed_at = time.time()
        members[1].stop(signal.SIGKILL)
        wait_for(lambda: sorted(members[2].assigned) == list(range(6)), 40, "takeover after a crash")
        assert time.time() - killed_at >= 4  # the session timeout (6 s), not at once
        # partitions are added: the member gets them
        admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
        try:
            admin.create_partitions({topic: NewPartitions(total_count=8)})
        finally:
            admin.close()
        wait_for(lambda: sorted(members[2].assigned) == list(range(8)), 40, "new partitions assigned")
        wait_for(lambda: committed(b.port, group, topic, range(6)) == {p: 10 for p in range(6)}, 30,
                 "offsets committed")
        # chronolog consumer-groups --describe shows the consumer-protocol group's members
        from tests.integration.test_cli_tools import ok, tool

        lines = ok(tool("consumer-groups", "--bootstrap-server", b.bootstrap, "--describe", "--group", group))
        rows = [line.split() for line in lines if line.startswith(group + " ")]
        assert sorted(int(r[2]) for r in rows) == list(range(8))
        assert {r[3] for r in rows if int(r[2]) < 6} == {"10"} and {r[9] for r in rows} == {"m2"}
    finally:
        for m in members:
            m.stop(signal.SIGKILL)
    # the broker crashes: the group, its type, epochs and offsets are replayed
    epoch = describe(b.port, group).group_epoch
    b.restart(graceful=False)
    assert list_groups(b.port)[group][0] == "consumer"
    d = describe(b.port, group)
    assert d.error_code == 0 and d.group_epoch == epoch
    assert committed(b.port, group, topic, range(6)) == {p: 10 for p in range(6)}
    # the member that was left behind is removed after its session timeout
    wait_for(lambda: describe(b.port, group).group_state == "Empty", 30, "loaded member expired")


def test_heartbeat_errors_and_describe_of_other_groups(kbroker):
    b = kbroker
    topic = create_topic(b.bootstrap, unique_topic("kip848-raw"), partitions=2)
    H = T.ConsumerGroupHeartbeatRequest

    def heartbeat(member_id, epoch, version=1, **kw):
        req = H(group_id=kw.pop("group", "raw-g"), member_id=member_id, member_epoch=epoch,
                instance_id=kw.pop("instance_id", None), rack_id=None,
                rebalance_timeout_ms=kw.pop("rebalance_timeout_ms", 30000 if epoch == 0 else -1),
                subscribed_topic_names=kw.pop("topics", [topic] if epoch == 0 else None),
                subscribed_topic_regex=kw.pop("regex", None), server_assignor=kw.pop("assignor", None),
                topic_partitions=kw.pop("owned", [] if epoch == 0 else None))
        return raw(b.port, 68, version, req)

    first = heartbeat("member-a", 0)
    assert first.error_code == 0 and first.member_id == "member-a" and first.member_epoch == 1
    assert first.heartbeat_interval_ms == 500
    assert sorted(first.assignment.topic_partitions[0].partitions) == [0, 1]
    # v0: the coordinator names the member
    v0 = heartbeat("", 0, version=0, group="raw-g0")
    assert v0.error_code == 0 and len(v0.member_id) > 10
    for resp, code, message in [
        (heartbeat("member-a", 7), ErrorCode.FENCED_MEMBER_EPOCH, "greater member epoch"),
        (heartbeat("nobody", 3), ErrorCode.UNKNOWN_MEMBER_ID, "nobody"),
        (heartbeat("member-b", 0, assignor="sticky"), ErrorCode.UNSUPPORTED_ASSIGNOR,
         "ServerAssignor sticky is not supported. Supported assignors: uniform, range."),
        (heartbeat("member-b", 0, regex="(oops"), ErrorCode.INVALID_REGULAR_EXPRESSION, "(oops"),
        (heartbeat("", 0), ErrorCode.INVALID_REQUEST, "MemberId can't be empty."),
        (heartbeat("member-b", -5), ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid."),
        (heartbeat("member-b", 0, rebalance_timeout_ms=-1), ErrorCode.INVALID_REQUEST,
         "RebalanceTimeoutMs must be provided in first request."),
    ]:
        assert resp.error_code == code and message in (resp.error_message or ""), (code, resp)
    # a classic group of the consumer protocol type is upgraded when a member of the new
    # protocol joins (test_group_migration.py); one of another type cannot be joined
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")])
    from confluent_kafka import Consumer

    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "classic-g", "auto.offset.reset": "earliest"})
    c.subscribe([topic])
    deadline = time.time() + 20
    while time.time() < deadline and not c.assignment():
        c.poll(0.2)
    try:
        assert heartbeat("member-c", 0, group="classic-g").error_code == 0
        assert sorted(m.member_type for m in describe(b.port, "classic-g").members) == [0, 1]
    finally:
        c.close()
    assert describe(b.port, "nope").error_code == ErrorCode.GROUP_ID_NOT_FOUND
    # DescribeGroups (the classic API) describes a consumer group as Dead, as Kafka
    (dg,) = raw(b.port, 15, 5, T.DescribeGroupsRequest(groups=["raw-g"], include_authorized_operations=False)).groups
    assert (dg.error_code, dg.group_state) == (0, "Dead")
    # from v6 (KIP-1043) it is GROUP_ID_NOT_FOUND, with Kafka's message
    (dg,) = raw(b.port, 15, 6, T.DescribeGroupsRequest(groups=["raw-g"], include_authorized_operations=False)).groups
    assert (dg.error_code, dg.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group raw-g is not a classic group.")
    # leaving
    left = heartbeat("member-a", -1)
    assert left.error_code == 0 and left.member_epoch == -1
    assert describe(b.port, "raw-g").group_state == "Empty"
    J = T.JoinGroupRequest
    joined = raw(b.port, 11, 5, J(group_id="connect-g", session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                  member_id="", group_instance_id="w1", protocol_type="connect",
                                  protocols=[J.JoinGroupRequestProtocol(name="default", metadata=b"")]))
    assert joined.error_code == 0
    assert heartbeat("member-c", 0, group="connect-g").error_code == ErrorCode.GROUP_ID_NOT_FOUND
    d = describe(b.port, "connect-g")
    assert (d.error_code, d.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND, "Group connect-g is not a consumer group.")


def test_confluent_admin_describes_and_lists_both_kinds(kbroker):
    """confluent-kafka's AdminClient: describe_consumer_groups goes through
    ConsumerGroupDescribe for a consumer-protocol group (with its target assignment) and
    DescribeGroups for a classic one; list_consumer_groups reports each one's type."""
    from confluent_kafka import Consumer, ConsumerGroupState, ConsumerGroupType
    from confluent_kafka.admin import AdminClient

    b = kbroker
    topic = create_topic(b.bootstrap, unique_topic("kip848-admin"), partitions=3)
    new = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "admin-new", "group.protocol": "consumer"})
    old = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "admin-classic"})
    new.subscribe([topic])
    old.subscribe([topic])
    try:
        deadline = time.time() + 30
        while time.time() < deadline and not (len(new.assignment()) == 3 and len(old.assignment()) == 3):
            new.poll(0.1)
            old.poll(0.1)
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        found = {gid: f.result() for gid, f in admin.describe_consumer_groups(["admin-new", "admin-classic"]).items()}
        d = found["admin-new"]
        assert (d.type, d.state, d.partition_assignor) == (ConsumerGroupType.CONSUMER, ConsumerGroupState.STABLE,
                                                           "uniform")
        (m,) = d.members
        assert sorted(tp.partition for tp in m.assignment.topic_partitions) == [0, 1, 2]
        assert sorted(tp.partition for tp in m.target_assignment.topic_partitions) == [0, 1, 2]
        assert found["admin-classic"].type == ConsumerGroupType.CLASSIC
        listed = {g.group_id: g.type for g in admin.list_consumer_groups().result().valid}
        assert listed["admin-new"] == ConsumerGroupType.CONSUMER and listed["admin-classic"] == ConsumerGroupType.CLASSIC
    finally:
        new.close()
        old.close()


def test_a_regex_subscription_is_matched_in_linear_time(kbroker):
    """confluent-kafka subscribed by a regex that a backtracking matcher takes ~2**200 steps
    to refuse on a topic of 200 a's: the broker (RE2, as Kafka's RE2J) assigns the topic
    that matches and stays responsive; a pattern RE2 refuses is INVALID_REGULAR_EXPRESSION."""
    from confluent_kafka import Consumer

    b = kbroker
    prefix = "a" * 190
    long_a = create_topic(b.bootstrap, prefix + "a" * 10, partitions=1)
    matching = create_topic(b.bootstrap, prefix + "a" * 9 + "b", partitions=1)
    produce_kp(b.bootstrap, matching, [Rec(b"k", b"matched")])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("re2"), "group.protocol": "consumer",
                  "auto.offset.reset": "earliest"})
    c.subscribe(["^(a+)+b"])
    try:
        got = None
        deadline = time.time() + 60
        while time.time() < deadline and got is None:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got = (m.topic(), m.value())
        assert got == (matching, b"matched")
        assert {tp.topic for tp in c.assignment()} == {matching} and long_a not in {tp.topic for tp in c.assignment()}
    finally:
        c.close()
    # librdkafka refuses look-ahead itself: the raw heartbeat carries it to the broker
    resp = raw(b.port, 68, 1, T.ConsumerGroupHeartbeatRequest(
        group_id=unique_topic("re2-bad"), member_id=str(uuid.uuid4()), member_epoch=0, instance_id=None, rack_id=None,
        rebalance_timeout_ms=30000, subscribed_topic_names=None, subscribed_topic_regex="a(?=b)",
        server_assignor=None, topic_partitions=[]))
    assert resp.error_code == ErrorCode.INVALID_REGULAR_EXPRESSION
    assert resp.error_message == ("SubscribedTopicRegex `a(?=b)` is not a valid regular expression: "
                                  "invalid perl operator: (?=.")
