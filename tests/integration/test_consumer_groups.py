"""Consumer groups with stock clients: the broker as group coordinator.

One private broker for the module with ``group.initial.rebalance.delay.ms=0`` and a 1 s
minimum session timeout so rebalances take well under a second; tests that restart a
broker start their own. Every test talks to the broker only over TCP.
"""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
import uuid

import pytest

from tests.integration import helpers
from tests.integration.helpers import REQUEST_TIMEOUT_MS, create_topic, start_broker, unique_topic

GROUP_OVERRIDES = {
    "auto.create.topics.enable": "false",
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
}
SESSION_MS = 3000
SETTLE_S = 40.0


@pytest.fixture(scope="module")
def gbroker(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("groups"), GROUP_OVERRIDES, name="groups")
    yield b
    assert b.stop() == 0


def _group() -> str:
    return "g-" + uuid.uuid4().hex[:10]


def _topic(b, request, partitions) -> str:
    return create_topic(b.bootstrap, unique_topic(request.node.name), None, partitions)


def produce_round_robin(bootstrap: str, topic: str, partitions: int, n: int, tag: str) -> set:
    """n records spread over the partitions; returns {(partition, value)}."""
    from confluent_kafka import Producer

    p = Producer(helpers.ck_producer_config(bootstrap))
    sent = set()
    for i in range(n):
        v = f"{tag}-{i}".encode()
        p.produce(topic, value=v, partition=i % partitions)
        sent.add((i % partitions, v))
    assert p.flush(30) == 0
    return sent


# ------------------------------------------------------------------------------ clients


class CK:
    """A confluent-kafka group member polled from the test thread."""

    def __init__(self, bootstrap, group, topic, name, **kw):
        from confluent_kafka import Consumer

        cfg = {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "client.id": name,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": SESSION_MS,
            "heartbeat.interval.ms": 300,
            "max.poll.interval.ms": 10_000,
            "enable.auto.commit": True,
            "auto.commit.interval.ms": 200,
            "socket.timeout.ms": 10_000,
        }
        cfg.update(kw)
        self.name = name
        self.got: set = set()
        self.assigned_events = 0
        self.revoked_events = 0
        self.revoked: list[int] = []
        self.c = Consumer(cfg)
        self.c.subscribe([topic], on_assign=self._on_assign, on_revoke=self._on_revoke)

    def _on_assign(self, consumer, parts):
        self.assigned_events += 1

    def _on_revoke(self, consumer, parts):
        self.revoked_events += 1
        self.revoked.extend(tp.partition for tp in parts)

    def poll(self):
        m = self.c.poll(0.05)
        if m is not None and not m.error():
            self.got.add((m.partition(), m.value()))

    def assignment(self) -> list[int]:
        return sorted(tp.partition for tp in self.c.assignment())

    def close(self):
        self.c.close()


class KP:
    """A kafka-python group member, polled in a loop on its own thread as a kafka-python
    application runs one: ``poll(timeout_ms=1000)`` again and again.

    Not polled round-robin from the test thread like CK: kafka-python 3.0.12 only
    finishes a join from inside poll(), and it drops a join that completed while no
    poll() was waiting on it and sends JoinGroup again. The leader's repeated JoinGroup
    then forces a rebalance (Kafka's rule, tests/unit/test_group_coordinator.py), so
    three members sharing one thread with short polls rebalance endlessly, against
    Apache Kafka as against this broker. Likewise a rejoin that kafka-python starts
    because the topic's partitions showed up after its first assignment is forgotten
    if a poll() times out during it (its heartbeats stay off until the session
    expires), so the topic's metadata is fetched before subscribing.
    """

    def __init__(self, bootstrap, group, topic, name, **kw):
        import threading

        from kafka import KafkaConsumer

        cfg = dict(bootstrap_servers=bootstrap, group_id=group, client_id=name, auto_offset_reset="earliest",
                   session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, max_poll_interval_ms=10_000,
                   request_timeout_ms=20_000, enable_auto_commit=True, auto_commit_interval_ms=200,
                   fetch_max_wait_ms=100)
        cfg.update(kw)
        self.name = name
        self.got: frozenset = frozenset()
        self._assignment: list[int] = []
        self._error: BaseException | None = None
        self.c = KafkaConsumer(**cfg)
        deadline = time.monotonic() + 30
        while not self.c.partitions_for_topic(topic):
            assert time.monotonic() < deadline, f"{name}: no metadata for {topic}"
            time.sleep(0.05)
        self.c.subscribe([topic])
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"kp-{name}", daemon=True)
        self._thread.start()

    def _run(self):
        try:
            while not self._stop.is_set():
                batch = self.c.poll(timeout_ms=1000)
                got = {(m.partition, m.value) for recs in batch.values() for m in recs}
                if got:
                    self.got = self.got | got  # rebinding: readers never see a set being changed
                self._assignment = sorted(tp.partition for tp in self.c.assignment())
        except BaseException as e:  # surfaced to the test thread by poll()
            self._error = e

    def poll(self):
        if self._error is not None:
            raise AssertionError(f"{self.name}: poll loop failed") from self._error
        time.sleep(0.05)

    def assignment(self) -> list[int]:
        return self._assignment

    def close(self):
        self._stop.set()
        self._thread.join(30)
        assert not self._thread.is_alive(), f"{self.name}: poll loop did not stop"
        self.c.close()


def _until_stable(pollers, snapshot, ok, timeout: float, failure: str):
    """Poll ``pollers`` until ``snapshot()`` is ``ok`` and unchanged for 1 s; returns
    that snapshot, or fails with ``failure`` and the last one."""
    deadline = time.monotonic() + timeout
    stable_since = None
    last = None
    while time.monotonic() < deadline:
        for m in pollers:
            m.poll()
        snap = snapshot()
        if ok(snap) and snap == last:
            if stable_since is None:
                stable_since = time.monotonic()
            elif time.monotonic() - stable_since >= 1.0:
                return snap
        else:
            stable_since = None
        last = snap
    raise AssertionError(f"{failure}: {last}")


def settle(members, partitions: int, timeout: float = SETTLE_S, extra=()) -> dict:
    """Poll every member until their assignments cover each partition exactly once and
    every member has one (stable for 1 s). Returns {name: [partitions]}."""

    def ok(snap):
        return sorted(p for ps in snap.values() for p in ps) == list(range(partitions)) and all(snap.values())

    return _until_stable(list(members) + list(extra), lambda: {m.name: m.assignment() for m in members}, ok,
                         timeout, f"assignments never covered partitions 0..{partitions - 1} exactly once")


def consume_all(members, expected: set, timeout: float = 30.0, gone=()) -> None:
    """Poll until every expected record was consumed by some member (``gone``: closed
    members whose records count too)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for m in members:
            m.poll()
        got = set().union(*(m.got for m in list(members) + list(gone)))
        if expected <= got:
            return
    got = set().union(*(m.got for m in list(members) + list(gone)))
    missing = sorted(expected - got)
    raise AssertionError(f"{len(missing)} of {len(expected)} records never consumed, e.g. {missing[:5]}")


CRASHER = r"""
import sys, time
kind, bootstrap, group, topic = sys.argv[1:5]
if kind == "ck":
    from confluent_kafka import Consumer
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "client.id": "crasher",
                  "auto.offset.reset": "earliest", "session.timeout.ms": %d, "heartbeat.interval.ms": 300,
                  "max.poll.interval.ms": 10000, "enable.auto.commit": True, "auto.commit.interval.ms": 200})
    c.subscribe([topic])
    while True:
        c.poll(0.1)
        if c.assignment():
            print("ASSIGNED", len(c.assignment()), flush=True)
else:
    from kafka import KafkaConsumer
    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=group, client_id="crasher",
                      auto_offset_reset="earliest", session_timeout_ms=%d, heartbeat_interval_ms=300,
                      max_poll_interval_ms=10000, request_timeout_ms=20000, auto_commit_interval_ms=200)
    while not c.partitions_for_topic(topic):  # see the KP class
        time.sleep(0.05)
    c.subscribe([topic])
    while True:
        c.poll(timeout_ms=1000)
        if c.assignment():
            print("ASSIGNED", len(c.assignment()), flush=True)
""" % (SESSION_MS, SESSION_MS)


class Crasher:
    """A group member in its own process, to be SIGKILLed (no LeaveGroup: only the
    session timeout tells the coordinator). Its assignment is reported by name only."""

    name = "crasher"

    def __init__(self, kind, bootstrap, group, topic):
        env = dict(os.environ, PYTHONPATH=str(helpers.REPO_ROOT), PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, "-c", CRASHER, kind, bootstrap, group, topic],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env,
                                     start_new_session=True)
        os.set_blocking(self.proc.stdout.fileno(), False)
        self.count = 0
        self.got: set = set()

    def poll(self):
        try:
            data = self.proc.stdout.read()
        except (BlockingIOError, TypeError):
            data = None
        if data:
            for line in data.decode().splitlines():
                if line.startswith("ASSIGNED"):
                    self.count = int(line.split()[1])

    def assignment(self):
        return ["x"] * self.count  # only its size is known

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)


def settle_with_crasher(members, crasher, partitions, timeout=SETTLE_S):
    """Like settle, with a member in another process: the in-process members hold
    distinct partitions and leave exactly ``crasher.count`` (> 0) to it."""

    def snapshot():
        return {m.name: m.assignment() for m in members}, crasher.count

    def ok(key):
        snap, count = key
        flat = [p for ps in snap.values() for p in ps]
        return (len(flat) == len(set(flat)) and all(snap.values()) and count > 0
                and len(flat) + count == partitions)

    snap, _ = _until_stable([crasher] + list(members), snapshot, ok, timeout,
                            "no stable assignment with the other-process member")
    return snap


# ------------------------------------------------------------------------------ tests


def _read_str(body, pos):
    (n,) = struct.unpack_from(">h", body, pos)
    pos += 2
    if n < 0:
        return None, pos
    return body[pos:pos + n].decode(), pos + n


def test_find_coordinator_names_this_broker(gbroker):
    from tests.integration.helpers import RawConn, _kstring

    with RawConn(gbroker.port) as conn:
        # v1, key type 0 (group): this broker
        body = conn.request(10, 1, _kstring(_group()) + b"\x00", 1)
        throttle, err = struct.unpack_from(">ih", body, 0)
        msg, pos = _read_str(body, 6)
        (node,) = struct.unpack_from(">i", body, pos)
        host, pos = _read_str(body, pos + 4)
        (port,) = struct.unpack_from(">i", body, pos)
        assert (err, node, host, port) == (0, 0, "127.0.0.1", gbroker.port)
        # key type 1 (transaction): this broker too
        body = conn.request(10, 1, _kstring("txn") + b"\x01", 2)
        throttle, err = struct.unpack_from(">ih", body, 0)
        msg, pos = _read_str(body, 6)
        (node,) = struct.unpack_from(">i", body, pos)
        host, pos = _read_str(body, pos + 4)
        (port,) = struct.unpack_from(">i", body, pos)
        assert (err, node, host, port) == (0, 0, "127.0.0.1", gbroker.port)
        # key type 2 (share group) below v6: INVALID_REQUEST
        body = conn.request(10, 1, _kstring("share") + b"\x02", 3)
        assert struct.unpack_from(">ih", body, 0)[1] == 42


def test_raw_join_member_id_required_and_heartbeat_errors(gbroker):
    from tests.integration.helpers import RawConn, _kbytes, _kstring

    group = _group()

    def join_v4(member_id):
        return (_kstring(group) + struct.pack(">ii", SESSION_MS, SESSION_MS) + _kstring(member_id)
                + _kstring("consumer") + struct.pack(">i", 1) + _kstring("range") + _kbytes(b"meta"))

    with RawConn(gbroker.port) as conn:
        body = conn.request(11, 4, join_v4(""), 1)
        _, err, gen = struct.unpack_from(">ihi", body, 0)
        proto, pos = _read_str(body, 10)
        leader, pos = _read_str(body, pos)
        member, pos = _read_str(body, pos)
        assert err == 79 and gen == -1 and member.startswith("chronolog-it-raw-")  # MEMBER_ID_REQUIRED
        body = conn.request(11, 4, join_v4(member), 2)
        _, err, gen = struct.unpack_from(">ihi", body, 0)
        proto, pos = _read_str(body, 10)
        leader, pos = _read_str(body, pos)
        me, pos = _read_str(body, pos)
        (n,) = struct.unpack_from(">i", body, pos)
        assert (err, gen, proto, leader, me, n) == (0, 1, "range", member, member, 1)

        def heartbeat(g, gen_id, mid):
            b = conn.request(12, 1, _kstring(g) + struct.pack(">i", gen_id) + _kstring(mid), 3)
            return struct.unpack_from(">ih", b, 0)[1]

        assert heartbeat(group, 1, member) == 0
        assert heartbeat(group, 0, member) == 22  # ILLEGAL_GENERATION
        assert heartbeat(group, 1, "nobody") == 25  # UNKNOWN_MEMBER_ID
        assert heartbeat(_group(), 1, member) == 25  # unknown group: UNKNOWN_MEMBER_ID
        # a join with a different protocol type: INCONSISTENT_GROUP_PROTOCOL
        other = (_kstring(group) + struct.pack(">ii", SESSION_MS, SESSION_MS) + _kstring("")
                 + _kstring("connect") + struct.pack(">i", 1) + _kstring("range") + _kbytes(b""))
        body = conn.request(11, 4, other, 4)
        assert struct.unpack_from(">ih", body, 0)[1] == 23
        # LeaveGroup v0
        body = conn.request(13, 0, _kstring(group) + _kstring(member), 5)
        assert struct.unpack_from(">h", body, 0)[0] == 0
        assert heartbeat(group, 1, member) == 25


def test_member_host_is_the_clients_address(gbroker):
    """DescribeGroups reports each member's own address ("/<ip>", as Kafka): a member
    connecting from 127.0.0.2 is not reported as 127.0.0.1."""
    import socket

    from tests.integration.helpers import RawConn, _kbytes, _kstring

    group = _group()
    conn = RawConn.__new__(RawConn)
    conn.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    conn.sock.settimeout(10)
    conn.sock.bind(("127.0.0.2", 0))
    conn.sock.connect(("127.0.0.1", gbroker.port))

    def join_v4(member_id):
        return (_kstring(group) + struct.pack(">ii", SESSION_MS, SESSION_MS) + _kstring(member_id)
                + _kstring("consumer") + struct.pack(">i", 1) + _kstring("range") + _kbytes(b""))

    try:
        body = conn.request(11, 4, join_v4(""), 1)
        _, pos = _read_str(body, 10)
        _, pos = _read_str(body, pos)
        member, pos = _read_str(body, pos)
        body = conn.request(11, 4, join_v4(member), 2)
        assert struct.unpack_from(">ih", body, 0)[1] == 0
        with RawConn(gbroker.port) as other:  # DescribeGroups v0 from 127.0.0.1
            body = other.request(15, 0, struct.pack(">i", 1) + _kstring(group), 4)
        (n_groups, err) = struct.unpack_from(">ih", body, 0)
        pos = 6
        for _ in range(4):  # group id, state, protocol type, protocol
            _, pos = _read_str(body, pos)
        (n_members,) = struct.unpack_from(">i", body, pos)
        mid, pos = _read_str(body, pos + 4)
        client_id, pos = _read_str(body, pos)
        host, pos = _read_str(body, pos)
        assert (n_groups, err, n_members, mid, host) == (1, 0, 1, member, "/127.0.0.2")
        conn.request(13, 0, _kstring(group) + _kstring(member), 3)
    finally:
        conn.sock.close()


@pytest.mark.parametrize("client", ["ck", "kp"])
def test_group_split_join_leave_crash(gbroker, request, client):
    parts = 6
    topic = _topic(gbroker, request, parts)
    group = _group()
    cls = CK if client == "ck" else KP
    expected = produce_round_robin(gbroker.bootstrap, topic, parts, 60, "a")
    m1 = cls(gbroker.bootstrap, group, topic, "m1")
    m2 = cls(gbroker.bootstrap, group, topic, "m2")
    members = [m1, m2]
    try:
        snap = settle(members, parts)
        assert sorted(len(v) for v in snap.values()) == [3, 3], snap
        consume_all(members, expected)

        # a third member joins
        m3 = cls(gbroker.bootstrap, group, topic, "m3")
        members.append(m3)
        snap = settle(members, parts)
        assert sorted(len(v) for v in snap.values()) == [2, 2, 2], snap
        expected |= produce_round_robin(gbroker.bootstrap, topic, parts, 60, "b")
        consume_all(members, expected)

        # it leaves cleanly (LeaveGroup)
        members.remove(m3)
        m3.close()
        snap = settle(members, parts)
        assert sorted(len(v) for v in snap.values()) == [3, 3], snap
        expected |= produce_round_robin(gbroker.bootstrap, topic, parts, 60, "c")
        consume_all(members, expected, gone=[m3])

        # a member in another process joins, then is killed: its session times out
        crasher = Crasher(client, gbroker.bootstrap, group, topic)
        try:
            settle_with_crasher(members, crasher, parts)
        finally:
            crasher.kill()
        t0 = time.monotonic()
        snap = settle(members, parts)
        elapsed = time.monotonic() - t0
        assert sorted(len(v) for v in snap.values()) == [3, 3], snap
        assert elapsed >= 1.0, "the killed member's partitions moved before any session timeout"
        # the killed member's records are not known here: everything from "d" on must
        # reach the survivors (nothing committed past what they consumed)
        d = produce_round_robin(gbroker.bootstrap, topic, parts, 60, "d")
        consume_all(members, d)
    finally:
        for m in members:
            m.close()


def test_commit_restart_resume(broker_factory, request):
    b = broker_factory(GROUP_OVERRIDES)
    topic = create_topic(b.bootstrap, unique_topic(request.node.name), None, 2)
    group = _group()
    produce_round_robin(b.bootstrap, topic, 2, 20, "x")
    from confluent_kafka import TopicPartition

    m = CK(b.bootstrap, group, topic, "first", **{"enable.auto.commit": False})
    try:
        settle([m], 2)
        consume_all([m], {(p, f"x-{i}".encode()) for i, p in ((i, i % 2) for i in range(20))})
        # commit offsets 4 and 7 explicitly
        m.c.commit(offsets=[TopicPartition(topic, 0, 4), TopicPartition(topic, 1, 7)], asynchronous=False)
    finally:
        m.close()
    b.restart()
    # the records are on disk in __consumer_offsets, in Kafka's key format
    part = _java_partition(group, 5)
    log_bytes = b"".join(f.read_bytes() for f in b.partition_dir("__consumer_offsets", part).glob("*.log"))
    key = b"\x00\x01" + len(group).to_bytes(2, "big") + group.encode() + len(topic).to_bytes(2, "big") + topic.encode()
    assert key + (0).to_bytes(4, "big") in log_bytes and key + (1).to_bytes(4, "big") in log_bytes

    from confluent_kafka import Consumer

    c = Consumer(helpers.ck_consumer_config(b.bootstrap, **{"group.id": group, "auto.offset.reset": "earliest"}))
    try:
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=15)
        assert [(tp.partition, tp.offset) for tp in committed] == [(0, 4), (1, 7)]
    finally:
        c.close()
    # a new member of the group resumes there: first records are offset 4 / 7
    first = {}
    from kafka import KafkaConsumer

    k = KafkaConsumer(bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest",
                      session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300, request_timeout_ms=20_000,
                      enable_auto_commit=False)
    try:
        k.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < deadline:
            for tp, recs in k.poll(timeout_ms=200).items():
                if recs and tp.partition not in first:
                    first[tp.partition] = recs[0].offset
    finally:
        k.close()
    assert first == {0: 4, 1: 7}
    # Metadata flags the offsets topic as internal, as Kafka does (clients hide it)
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
    from kafka import KafkaAdminClient

    adm = KafkaAdminClient(bootstrap_servers=b.bootstrap, request_timeout_ms=20_000)
    try:
        described = {t.get("topic", t.get("name")): t for t in adm.describe_topics()}
    finally:
        adm.close()
    assert "__consumer_offsets" in md.topics
    assert described["__consumer_offsets"]["is_internal"] is True
    assert described[topic]["is_internal"] is False


def _java_partition(group: str, n: int) -> int:
    h = 0
    for ch in group:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    if h & 0x80000000:
        h -= 1 << 32
    return (0 if h == -(1 << 31) else abs(h)) % n


def test_cooperative_sticky_ck(gbroker, request):
    parts = 4
    topic = _topic(gbroker, request, parts)
    group = _group()
    expected = produce_round_robin(gbroker.bootstrap, topic, parts, 40, "a")
    kw = {"partition.assignment.strategy": "cooperative-sticky"}
    m1 = CK(gbroker.bootstrap, group, topic, "m1", **kw)
    members = [m1]
    try:
        snap = settle(members, parts)
        assert snap == {"m1": [0, 1, 2, 3]}
        before = set(snap["m1"])
        m2 = CK(gbroker.bootstrap, group, topic, "m2", **kw)
        members.append(m2)
        snap = settle(members, parts)
        assert sorted(len(v) for v in snap.values()) == [2, 2]
        # sticky: m1 kept two of its partitions (only the moved ones were revoked)
        assert set(snap["m1"]) <= before
        # incremental (cooperative) rebalance: m1 gave up only the two moved partitions,
        # never the ones it kept (an eager rebalance revokes all four first)
        assert sorted(m1.revoked) == sorted(before - set(snap["m1"])), m1.revoked
        expected |= produce_round_robin(gbroker.bootstrap, topic, parts, 40, "b")
        consume_all(members, expected)
        members.remove(m2)
        m2.close()
        snap = settle(members, parts)
        assert snap == {"m1": [0, 1, 2, 3]}
    finally:
        for m in members:
            m.close()


def test_static_member_rejoins_without_rebalance(gbroker, request):
    parts = 4
    topic = _topic(gbroker, request, parts)
    group = _group()
    other = CK(gbroker.bootstrap, group, topic, "other")
    s1 = CK(gbroker.bootstrap, group, topic, "static", **{"group.instance.id": "inst-1",
                                                         "session.timeout.ms": 10_000})
    try:
        snap = settle([other, s1], parts)
        mine = snap["static"]
        events = (other.assigned_events, other.revoked_events)
        s1.close()  # a static member does not send LeaveGroup on close
        s2 = CK(gbroker.bootstrap, group, topic, "static", **{"group.instance.id": "inst-1",
                                                             "session.timeout.ms": 10_000})
        s1 = s2
        snap2 = settle([other, s1], parts)
        assert snap2["static"] == mine and snap2["other"] == snap["other"]
        assert (other.assigned_events, other.revoked_events) == events, \
            "the other member went through a rebalance"
    finally:
        other.close()
        s1.close()


def test_offset_fetch_unknown_group_and_unknown_topic_commit(gbroker, request):
    from confluent_kafka import Consumer, KafkaException, TopicPartition

    topic = _topic(gbroker, request, 1)
    c = Consumer(helpers.ck_consumer_config(gbroker.bootstrap, **{"group.id": _group()}))
    try:
        (tp,) = c.committed([TopicPartition(topic, 0)], timeout=15)
        assert tp.offset == -1001 and tp.error is None  # OFFSET_INVALID: nothing committed
        with pytest.raises(KafkaException) as ei:
            c.commit(offsets=[TopicPartition("no-such-topic-" + uuid.uuid4().hex[:6], 0, 5)], asynchronous=False)
        assert "UNKNOWN_TOPIC_OR_PART" in str(ei.value) or "Unknown topic" in str(ei.value)
    finally:
        c.close()
    a = helpers.kp_admin(gbroker.bootstrap)
    try:
        from kafka import TopicPartition as KTP

        g = _group()
        res = a.list_group_offsets({g: [KTP(topic, 0)]})
        assert res[g][KTP(topic, 0)].offset == -1
    finally:
        a.close()


def test_admin_ck_list_describe_offsets_delete(gbroker, request):
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    topic = _topic(gbroker, request, 2)
    group = _group()
    admin = AdminClient({"bootstrap.servers": gbroker.bootstrap})
    m = CK(gbroker.bootstrap, group, topic, "member", **{"enable.auto.commit": False})
    try:
        settle([m], 2)
        listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
        mine = [g for g in listed.valid if g.group_id == group]
        assert len(mine) == 1 and str(mine[0].state).endswith("STABLE"), listed.valid
        # ListGroups v5: the group's type, and a types filter
        from confluent_kafka import ConsumerGroupType

        assert mine[0].type == ConsumerGroupType.CLASSIC
        for types, present in (({ConsumerGroupType.CLASSIC}, True), ({ConsumerGroupType.CONSUMER}, False),
                               ({ConsumerGroupType.CONSUMER, ConsumerGroupType.CLASSIC}, True)):
            listed = admin.list_consumer_groups(types=types, request_timeout=15).result(timeout=20)
            assert (group in [g.group_id for g in listed.valid]) is present, types
        desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert str(desc.state).endswith("STABLE") and desc.partition_assignor == "range"
        assert len(desc.members) == 1 and desc.members[0].client_id == "member"
        assert sorted(tp.partition for tp in desc.members[0].assignment.topic_partitions) == [0, 1]
        # a group with a member cannot be deleted
        fut = admin.delete_consumer_groups([group], request_timeout=15)[group]
        with pytest.raises(Exception) as ei:
            fut.result(timeout=20)
        assert "NON_EMPTY_GROUP" in str(ei.value) or "not empty" in str(ei.value).lower()
    finally:
        m.close()
    # alter (simple commit: the group is empty now), then list the offsets
    req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 11), TopicPartition(topic, 1, 12)])
    r = admin.alter_consumer_group_offsets([req], request_timeout=15)[group].result(timeout=20)
    assert all(tp.error is None for tp in r.topic_partitions)
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)[group]
    got = got.result(timeout=20)
    assert sorted((tp.partition, tp.offset) for tp in got.topic_partitions) == [(0, 11), (1, 12)]
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    assert [str(g.state) for g in listed.valid if g.group_id == group][0].endswith("EMPTY")
    admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
    listed = admin.list_consumer_groups(request_timeout=15).result(timeout=20)
    assert group not in [g.group_id for g in listed.valid]
    got = admin.list_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(topic, 0)])], request_timeout=15)[group].result(timeout=20)
    assert [tp.offset for tp in got.topic_partitions] == [-1001]
    # deleting an unknown group
    with pytest.raises(Exception) as ei:
        admin.delete_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
    assert "GROUP_ID_NOT_FOUND" in str(ei.value) or "does not exist" in str(ei.value)


def test_admin_kp_list_describe_offsets_delete(gbroker, request):
    from kafka import TopicPartition as KTP

    topic = _topic(gbroker, request, 3)
    group = _group()
    # the member is a librdkafka consumer (kafka-python's own group membership is covered
    # by test_group_split_join_leave_crash[kp]); the admin side is kafka-python's
    from confluent_kafka import TopicPartition

    m = CK(gbroker.bootstrap, group, topic, "kp-member", **{"enable.auto.commit": False})
    a = helpers.kp_admin(gbroker.bootstrap)
    try:
        settle([m], 3)
        m.c.commit(offsets=[TopicPartition(topic, 0, 5), TopicPartition(topic, 2, 6)], asynchronous=False)
        mine = [g for g in a.list_groups() if g["group_id"] == group]
        # kafka-python speaks ListGroups v5, which adds each group's type (KIP-848)
        assert mine == [{"group_id": group, "protocol_type": "consumer", "group_state": "Stable", "group_type": "classic"}]
        assert group not in [g["group_id"] for g in a.list_groups(states_filter=["Empty"])]
        assert group in [g["group_id"] for g in a.list_groups(states_filter=["stable"])]
        d = a.describe_groups([group])[group]
        assert d["group_state"] == "Stable" and d["protocol_data"] == "range" and len(d["members"]) == 1
        assert d["members"][0]["client_id"] == "kp-member"
        assert d["members"][0]["member_assignment"]["assigned_partitions"] == [{"topic": topic, "partitions": [0, 1, 2]}]
        offs = a.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items()} == {0: 5, 2: 6}
        assert a.delete_groups([group]) == {group: "NonEmptyGroupError"}
        # OffsetDelete of a subscribed topic is refused while the member is there
        res = a.delete_group_offsets(group, [KTP(topic, 0)])
        assert res[KTP(topic, 0)].__name__ == "GroupSubscribedToTopicError"
    finally:
        m.close()
    try:
        d = a.describe_groups([group])[group]
        assert d["group_state"] == "Empty" and d["members"] == []
        assert group in [g["group_id"] for g in a.list_groups(states_filter=["Empty"])]
        res = a.delete_group_offsets(group, [KTP(topic, 0)])
        assert res[KTP(topic, 0)].__name__ == "NoError"
        offs = a.list_group_offsets({group: None})[group]
        assert {tp.partition: om.offset for tp, om in offs.items()} == {2: 6}
        assert a.delete_groups([group]) == {group: "OK"}
        assert a.delete_groups([group]) == {group: "GroupIdNotFoundError"}
        assert a.list_group_offsets({group: None})[group] == {}
    finally:
        a.close()


def test_parked_join_does_not_block_other_groups(gbroker):
    """A rebalance waiting (up to 10 s) for a member to rejoin in one group must not hold
    up another group on the same broker, nor other requests on other connections."""
    from tests.integration.helpers import RawConn, _kbytes, _kstring, frame, request_header_v1

    def join_v4(group, member_id):
        return (_kstring(group) + struct.pack(">ii", 10_000, 10_000) + _kstring(member_id)
                + _kstring("consumer") + struct.pack(">i", 1) + _kstring("range") + _kbytes(b""))

    def full_join(conn, group, cid):
        body = conn.request(11, 4, join_v4(group, ""), cid)
        member, _ = _read_str(body, 10 + 2 + 2)  # after throttle, error, generation, "", ""
        body = conn.request(11, 4, join_v4(group, member), cid + 1)
        assert struct.unpack_from(">ih", body, 0)[1] == 0
        return member

    slow, other = _group(), _group()
    with RawConn(gbroker.port) as c1, RawConn(gbroker.port) as c2, RawConn(gbroker.port) as c3:
        full_join(c1, slow, 1)  # member 1: Stable alone, will not rejoin
        body = c2.request(11, 4, join_v4(slow, ""), 10)
        member2, _ = _read_str(body, 14)
        c2.send(frame(request_header_v1(11, 4, 12) + join_v4(slow, member2)))  # parks up to 10 s
        t0 = time.monotonic()
        full_join(c3, other, 20)
        assert time.monotonic() - t0 < 2.0, "a parked JoinGroup of another group delayed this one"
        c2.sock.settimeout(0.5)
        with pytest.raises(OSError):  # still parked
            c2.recv_frame()


def test_aiokafka_group_split_and_commit(gbroker, request):
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    parts = 4
    topic = _topic(gbroker, request, parts)
    group = _group()

    async def run():
        cs = [AIOKafkaConsumer(topic, bootstrap_servers=gbroker.bootstrap, group_id=group,
                               session_timeout_ms=SESSION_MS, heartbeat_interval_ms=300,
                               auto_offset_reset="earliest", enable_auto_commit=False,
                               request_timeout_ms=REQUEST_TIMEOUT_MS) for _ in range(2)]
        for c in cs:
            await asyncio.wait_for(c.start(), 20)
        try:
            deadline = time.monotonic() + SETTLE_S
            while time.monotonic() < deadline:
                a = [sorted(tp.partition for tp in c.assignment()) for c in cs]
                if sorted(p for x in a for p in x) == list(range(parts)) and all(a):
                    break
                await asyncio.sleep(0.1)
            assert sorted(p for x in a for p in x) == list(range(parts)) and all(a), a
            owner = cs[0] if 0 in a[0] else cs[1]
            await owner.commit({TopicPartition(topic, 0): 3})
            assert await owner.committed(TopicPartition(topic, 0)) == 3
        finally:
            for c in cs:
                await asyncio.wait_for(c.stop(), 20)

    asyncio.run(run())


@pytest.mark.parametrize("graceful", [True, False], ids=["sigterm", "sigkill"])
def test_offsets_and_deletions_survive_restart(broker_factory, request, graceful):
    """Commits and group deletions are replayed from __consumer_offsets at start-up
    (after a SIGKILL too: the records are recovered from the log like any other)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition
    from confluent_kafka.admin import AdminClient

    b = broker_factory(GROUP_OVERRIDES)
    topic = create_topic(b.bootstrap, unique_topic(request.node.name), None, 3)
    keep, gone = _group(), _group()

    def admin():
        return AdminClient({"bootstrap.servers": b.bootstrap})

    def offsets(a, group):
        r = a.list_consumer_group_offsets([ConsumerGroupTopicPartitions(group)], request_timeout=15)[group]
        return sorted((tp.partition, tp.offset) for tp in r.result(timeout=20).topic_partitions)

    a = admin()
    for group, base in ((keep, 100), (gone, 200)):
        req = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p, base + p) for p in range(3)])
        a.alter_consumer_group_offsets([req], request_timeout=15)[group].result(timeout=20)
    # a later commit overwrites an earlier one
    req = ConsumerGroupTopicPartitions(keep, [TopicPartition(topic, 1, 150)])
    a.alter_consumer_group_offsets([req], request_timeout=15)[keep].result(timeout=20)
    a.delete_consumer_groups([gone], request_timeout=15)[gone].result(timeout=20)
    del a
    b.restart(graceful=graceful)
    a = admin()
    assert offsets(a, keep) == [(0, 100), (1, 150), (2, 102)]
    assert offsets(a, gone) == []
    listed = [g.group_id for g in a.list_consumer_groups(request_timeout=15).result(timeout=20).valid]
    assert keep in listed and gone not in listed


# ------------------------------------------------------------------------------ group.max.size


def _ck_generation(member: CK) -> int:
    """The generation librdkafka's consumer is in: its serialized group metadata is
    ``CGMDv2:`` + int32 generation id (host byte order) + group id, member id, instance id."""
    meta = member.c.consumer_group_metadata()
    assert meta[:7] == b"CGMDv2:", meta
    return struct.unpack_from("=i", meta, 7)[0]


def test_group_max_size_refuses_second_consumer(broker_factory, request):
    """group.max.size=1: a second consumer of the group gets GROUP_MAX_SIZE_REACHED (81)
    at every JoinGroup, while the first keeps its assignment without a rebalance; once
    the first leaves, the second gets in."""
    from confluent_kafka import Consumer, KafkaError

    b = broker_factory(dict(GROUP_OVERRIDES, **{"group.max.size": "1"}))
    topic = create_topic(b.bootstrap, unique_topic(request.node.name), None, 2)
    group = _group()
    first = CK(b.bootstrap, group, topic, "first")
    second = None
    try:
        assert settle([first], 2) == {"first": [0, 1]}
        gen = _ck_generation(first)
        errors = []
        second = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "client.id": "second",
                           "session.timeout.ms": SESSION_MS, "heartbeat.interval.ms": 300,
                           "auto.offset.reset": "earliest"})
        second.subscribe([topic])
        deadline = time.monotonic() + 30
        while len(errors) < 2 and time.monotonic() < deadline:  # refused, and again on its retry
            first.poll()
            m = second.poll(0.05)
            if m is not None and m.error() and m.error().code() == KafkaError.GROUP_MAX_SIZE_REACHED:
                errors.append(m.error())
        assert len(errors) >= 2, "the second consumer never got GROUP_MAX_SIZE_REACHED"
        assert errors[0].code() == 81 and not errors[0].fatal()
        assert second.assignment() == []
        assert first.assignment() == [0, 1] and _ck_generation(first) == gen
        assert (first.assigned_events, first.revoked_events) == (1, 0), "the first consumer was rebalanced"
        from confluent_kafka.admin import AdminClient

        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept: its futures die with it
        desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result(timeout=20)
        assert [m.client_id for m in desc.members] == ["first"]
        # the first one leaves: the second one's next JoinGroup is accepted
        first.close()
        first = None
        deadline = time.monotonic() + SETTLE_S
        while not second.assignment() and time.monotonic() < deadline:
            second.poll(0.1)
        assert sorted(tp.partition for tp in second.assignment()) == [0, 1]
    finally:
        if first is not None:
            first.close()
        if second is not None:
            second.close()


def test_group_over_max_size_after_restart_drops_the_excess(broker_factory, request):
    """Restarted with a lower group.max.size, the broker loads the group with its two
    members and rebalances it at once (Kafka's onLoaded); the member that rejoins second
    is refused and removed, the other ends up with every partition."""
    b = broker_factory(GROUP_OVERRIDES)
    topic = create_topic(b.bootstrap, unique_topic(request.node.name), None, 2)
    group = _group()
    members = [CK(b.bootstrap, group, topic, name) for name in ("m1", "m2")]
    try:
        settle(members, 2)
        b.overrides["group.max.size"] = "1"
        b.restart()
        deadline = time.monotonic() + SETTLE_S
        snap = None
        while time.monotonic() < deadline:
            for m in members:
                m.poll()
            snap = {m.name: m.assignment() for m in members}
            if sorted(snap.values()) == [[], [0, 1]]:
                break
        assert sorted(snap.values()) == [[], [0, 1]], snap
        log = b.log_text()
        assert "over capacity group.max.size=1" in log and "refusing member" in log
    finally:
        for m in members:
            m.close()


# ------------------------------------------------------------------------------ static members


def test_static_member_restart_after_broker_restart_keeps_generation(broker_factory, request):
    """KIP-345 across a broker restart: the group is reloaded from __consumer_offsets,
    then a static member's process restarts (JoinGroup without a member id, the same
    group.instance.id): it gets its old partitions back in the same generation and the
    other member goes through no rebalance. (librdkafka offers two protocols, range and
    roundrobin; the reloaded member only knows the selected one, and a comparison of
    protocol lists instead of Kafka's selected-protocol rule rebalanced here.)"""
    b = broker_factory(GROUP_OVERRIDES)
    parts = 4
    topic = create_topic(b.bootstrap, unique_topic(request.node.name), None, parts)
    group = _group()

    def static(name, instance):
        return CK(b.bootstrap, group, topic, name, **{"group.instance.id": instance, "session.timeout.ms": 10_000})

    other = static("other", "inst-2")
    s1 = static("static", "inst-1")
    try:
        snap = settle([other, s1], parts)
        gen = _ck_generation(s1)
        assert _ck_generation(other) == gen
        events = (other.assigned_events, other.revoked_events)
        s1.close()  # a static member sends no LeaveGroup
        b.restart()
        s1 = static("static", "inst-1")
        snap2 = settle([other, s1], parts)
        assert snap2 == snap
        assert _ck_generation(s1) == gen and _ck_generation(other) == gen
        assert (other.assigned_events, other.revoked_events) == events, "the other member went through a rebalance"
        # the leader (the first to join) restarts too: JoinGroup v0-8 names the old leader
        # id and sends no members, so it does not assign and gets its partitions back
        events = (s1.assigned_events, s1.revoked_events)
        other.close()
        other = static("other", "inst-2")
        assert settle([other, s1], parts) == snap
        assert _ck_generation(other) == gen and _ck_generation(s1) == gen
        assert (s1.assigned_events, s1.revoked_events) == events
    finally:
        other.close()
        s1.close()
