"""The Kafka command-line tools (`chronolog get-offsets | topics | configs |
consumer-groups`) run as subprocesses against the session broker.

Data is produced, and group offsets committed, with stock clients (kafka-python,
confluent-kafka) at known timestamps; the offsets the tools print are checked exactly
against an oracle computed from what was produced, and what the tools change is read
back with a stock client."""

from __future__ import annotations

import datetime as dt
import os
import re
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

from tests.integration.helpers import (
    REPO_ROOT,
    Rec,
    ck_admin,
    ck_consumer_config,
    create_topic,
    free_port,
    kp_admin,
    now_ms,
    oracle_offset_for_time,
    produce_kp,
    unique_topic,
)

pytestmark = pytest.mark.timeout(240)

HOUR = 3_600_000
MINUTE = 60_000
EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def tool(*args: str, timeout: float = 90) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(REPO_ROOT)
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=REPO_ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def ok(p: subprocess.CompletedProcess) -> list[str]:
    assert p.returncode == 0, f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    return p.stdout.splitlines()


def fails(p: subprocess.CompletedProcess, rc: int, *words: str) -> str:
    assert p.returncode == rc, f"exit {p.returncode}, expected {rc}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}"
    err = p.stderr.strip()
    assert len(err.splitlines()) == 1, f"expected a one-line error, got:\n{err}"
    for w in words:
        assert w in err, f"{w!r} not in the error: {err}"
    assert "Traceback" not in p.stderr
    return err


def iso(ms: int, offset_minutes: int = 0) -> str:
    """ms -> ISO-8601 with milliseconds, in the zone UTC+offset ('Z' for 0)."""
    tz = dt.timezone(dt.timedelta(minutes=offset_minutes))
    d = (EPOCH + dt.timedelta(milliseconds=ms)).astimezone(tz)
    text = d.strftime("%Y-%m-%dT%H:%M:%S") + f".{ms % 1000:03d}"
    if offset_minutes == 0:
        return text + "Z"
    z = d.strftime("%z")
    return text + z[:3] + ":" + z[3:]


def produce_at(bootstrap: str, topic: str, partition: int, timestamps: list[int]) -> None:
    recs = [Rec(key=b"k%d" % i, value=b"v%d" % i, timestamp=ts) for i, ts in enumerate(timestamps)]
    acks = produce_kp(bootstrap, topic, recs, partition=partition)
    assert [a.offset for a in acks] == list(range(len(timestamps)))


# ------------------------------------------------------------------------------ get-offsets


@pytest.fixture(scope="module")
def timed_topic(broker):
    """Two partitions with known CreateTime timestamps; partition 0 has its largest
    timestamp in the middle (offset 5)."""
    topic = create_topic(broker.bootstrap, unique_topic("cli-offsets"), {"message.timestamp.type": "CreateTime"},
                         partitions=2)
    base = (now_ms() // 1000) * 1000 - 20 * HOUR
    ts0 = [base + i * MINUTE for i in range(10)]
    ts0[5] = base + 100 * MINUTE
    ts1 = [base + 30_000 + i * 2 * MINUTE for i in range(5)]
    produce_at(broker.bootstrap, topic, 0, ts0)
    produce_at(broker.bootstrap, topic, 1, ts1)
    return topic, base, {0: ts0, 1: ts1}


def expected_for_time(topic: str, stamps: dict[int, list[int]], target: int) -> list[str]:
    out = []
    for p in sorted(stamps):
        hit = oracle_offset_for_time(stamps[p], target)
        if hit is not None:
            out.append(f"{topic}:{p}:{hit[0]}")
    return out


def test_get_offsets_special_times(broker, timed_topic):
    topic, _, stamps = timed_topic
    b = broker.bootstrap
    latest = [f"{topic}:0:10", f"{topic}:1:5"]
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic)) == latest
    for spec in ("latest", "-1"):
        assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", spec)) == latest
    for spec in ("earliest", "-2"):
        assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", spec)) == \
            [f"{topic}:0:0", f"{topic}:1:0"]
    for spec in ("max-timestamp", "-3"):
        assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", spec)) == \
            [f"{topic}:0:5", f"{topic}:1:4"]


def test_get_offsets_for_a_point_in_time(broker, timed_topic):
    topic, base, stamps = timed_topic
    b = broker.bootstrap
    targets = [base - 1, base, base + 1, base + 3 * MINUTE, base + 3 * MINUTE + 1, base + 4 * MINUTE + 30_000,
               base + 9 * MINUTE, base + 9 * MINUTE + 1, base + 100 * MINUTE, base + 100 * MINUTE + 1]
    seen_partial = False
    for target in targets:
        want = expected_for_time(topic, stamps, target)
        seen_partial |= len(want) == 1
        for spec in (str(target), iso(target), iso(target, 330), iso(target, -300)):
            got = ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--time", spec))
            assert got == want, f"--time {spec} (target {target})"
    assert seen_partial  # a time after every record of one partition prints only the other
    # after every record: no line at all (as kafka-get-offsets.sh)
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic,
                   "--time", iso(base + 101 * MINUTE))) == []
    # without milliseconds or zone seconds: 2026-...T..:..:..Z and +0100 forms
    t = base + 3 * MINUTE
    d = (EPOCH + dt.timedelta(milliseconds=t))
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic,
                   "--time", d.strftime("%Y-%m-%dT%H:%M:%SZ"))) == expected_for_time(topic, stamps, t)
    d1 = d.astimezone(dt.timezone(dt.timedelta(hours=1)))
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic,
                   "--time", d1.strftime("%Y-%m-%dT%H:%M:%S+0100"))) == expected_for_time(topic, stamps, t)


def test_get_offsets_partition_filter(broker, timed_topic):
    topic, base, stamps = timed_topic
    b = broker.bootstrap
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--partitions", "1")) == \
        [f"{topic}:1:5"]
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--partitions", "0",
                   "--time", iso(base + 2 * MINUTE))) == [f"{topic}:0:2"]
    # --topic as a regular expression (full match)
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", topic[:-1] + ".", "--time", "-2")) == \
        [f"{topic}:0:0", f"{topic}:1:0"]
    fails(tool("get-offsets", "--bootstrap-server", b, "--topic", topic[:-1]), 1, topic[:-1])
    fails(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--partitions", "7"), 1, "7")
    fails(tool("get-offsets", "--bootstrap-server", b, "--topic", topic, "--partitions", "x"), 2,
          "--partitions", "x")


def test_get_offsets_errors(broker):
    b = broker.bootstrap
    missing = "no-such-topic-" + uuid.uuid4().hex[:6]
    p = tool("get-offsets", "--bootstrap-server", b, "--topic", missing)
    fails(p, 1, "--topic", missing)
    assert p.stdout == ""
    fails(tool("get-offsets", "--bootstrap-server", b, "--topic", missing, "--time", "2026-13-45T99:00:00Z"),
          2, "--time", "2026-13-45T99:00:00Z")
    fails(tool("get-offsets", "--bootstrap-server", b, "--time", "yesterday"), 2, "--time", "yesterday")
    fails(tool("get-offsets", "--bootstrap-server", b, "--time", "-7"), 2, "--time", "-7")
    fails(tool("get-offsets", "--bootstrap-server", "localhost", "--topic", "x"), 2, "--bootstrap-server")


def test_unreachable_and_silent_broker():
    port = free_port()
    for args in (["get-offsets", "--topic", "t"], ["topics", "--list"], ["configs", "--entity-type", "topics",
                 "--entity-name", "t", "--describe"], ["consumer-groups", "--list"]):
        fails(tool(*args, "--bootstrap-server", f"127.0.0.1:{port}"), 1, f"127.0.0.1:{port}")
    # a listener that accepts and never answers: a timeout, not a hang
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(5)
    held = []
    stop = threading.Event()

    def accept():
        srv.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(srv.accept()[0])
            except OSError:
                pass

    th = threading.Thread(target=accept, daemon=True)
    th.start()
    try:
        t0 = time.monotonic()
        p = tool("get-offsets", "--bootstrap-server", f"127.0.0.1:{srv.getsockname()[1]}", "--topic", "t",
                 "--request-timeout-ms", "1500", timeout=60)
        elapsed = time.monotonic() - t0
        fails(p, 1, "did not answer", "1500 ms")
        assert elapsed < 15, f"took {elapsed:.1f}s"
    finally:
        stop.set()
        th.join(5)
        for c in held:
            c.close()
        srv.close()


# ------------------------------------------------------------------------------ topics


def _kp_topics(bootstrap: str) -> set[str]:
    admin = kp_admin(bootstrap)
    try:
        return set(admin.list_topics())
    finally:
        admin.close()


def test_topics_create_list_describe_delete(broker):
    b = broker.bootstrap
    name = unique_topic("cli-topics")
    assert ok(tool("topics", "--bootstrap-server", b, "--create", "--topic", name, "--partitions", "3",
                   "--config", "retention.ms=3600000", "--config", "message.timestamp.type=LogAppendTime")) == \
        [f"Created topic {name}."]
    assert name in _kp_topics(b)
    assert name in ok(tool("topics", "--bootstrap-server", b, "--list"))
    lines = ok(tool("topics", "--bootstrap-server", b, "--describe", "--topic", name))
    assert len(lines) == 4, lines
    m = re.fullmatch(rf"Topic: {re.escape(name)}\tTopicId: ([A-Za-z0-9_-]{{22}})\tPartitionCount: 3"
                     r"\tReplicationFactor: 1\tConfigs: (.*)", lines[0])
    assert m, lines[0]
    # the topic's overrides and every config not at Kafka's default: the cluster-level
    # min.insync.replicas of eligible leader replicas (KIP-966) too, as Kafka 4.1+ shows
    assert sorted(m.group(2).split(",")) == ["message.timestamp.type=LogAppendTime", "min.insync.replicas=1",
                                             "retention.ms=3600000"]
    # the eligible leader replicas as DescribeTopicPartitions lists them (none on one
    # node), as Kafka 4's kafka-topics prints them
    assert lines[1:] == [f"\tTopic: {name}\tPartition: {p}\tLeader: 0\tReplicas: 0\tIsr: 0\tElr: "
                         f"\tLastKnownElr: " for p in range(3)]
    # the topic id is the one a stock client sees
    from confluent_kafka import TopicCollection

    admin = ck_admin(b)
    desc = admin.describe_topics(TopicCollection([name]))[name].result(timeout=20)
    # Kafka prints ids URL-safe base64 (Uuid.toString); librdkafka uses the standard alphabet
    assert str(desc.topic_id).replace("+", "-").replace("/", "_") == m.group(1)
    assert len(desc.partitions) == 3
    # more partitions (CreatePartitions); fewer is refused by the broker
    assert ok(tool("topics", "--bootstrap-server", b, "--alter", "--topic", name, "--partitions", "5")) == []
    desc = admin.describe_topics(TopicCollection([name]))[name].result(timeout=20)
    assert len(desc.partitions) == 5
    assert ok(tool("get-offsets", "--bootstrap-server", b, "--topic", name)) == [f"{name}:{p}:0" for p in range(5)]
    fails(tool("topics", "--bootstrap-server", b, "--alter", "--topic", name, "--partitions", "2"), 1,
          "INVALID_PARTITIONS")
    fails(tool("topics", "--bootstrap-server", b, "--create", "--topic", name), 1, name, "TOPIC_ALREADY_EXISTS")
    ok(tool("topics", "--bootstrap-server", b, "--create", "--topic", name, "--if-not-exists"))
    assert ok(tool("topics", "--bootstrap-server", b, "--delete", "--topic", name)) == []
    deadline = time.monotonic() + 10
    while name in _kp_topics(b) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert name not in _kp_topics(b)
    assert name not in ok(tool("topics", "--bootstrap-server", b, "--list"))
    fails(tool("topics", "--bootstrap-server", b, "--delete", "--topic", name), 1, name, "does not exist")
    fails(tool("topics", "--bootstrap-server", b, "--describe", "--topic", name), 1, name, "does not exist")


def test_topics_describe_reads_partitions_page_by_page(broker):
    """DescribeTopicPartitions answers at most ResponsePartitionLimit partitions and a
    cursor to go on from: every partition of every topic is read once."""
    from broker.tools.client import Client
    from broker.tools.topics import _describe_topics

    a = unique_topic("cli-elr-a")
    b = unique_topic("cli-elr-b")
    for name, n in ((a, 5), (b, 2)):
        ok(tool("topics", "--bootstrap-server", broker.bootstrap, "--create", "--topic", name, "--partitions", str(n)))
    with Client(broker.bootstrap) as client:
        for limit in (1, 2, 3, 2000):
            topics = _describe_topics(client, [a, b], limit=limit)
            lists = {(n, p.partition_index): (p.eligible_leader_replicas, p.last_known_elr)
                     for n, (error, _tid, parts) in topics.items() for p in parts}
            assert [topics[n][0] for n in (a, b)] == [0, 0]
            assert sorted(lists) == sorted([(a, p) for p in range(5)] + [(b, p) for p in range(2)]), limit
            assert sum(len(parts) for _e, _t, parts in topics.values()) == 7, limit  # none read twice
            assert all(v == ([], []) for v in lists.values()), lists  # one node: no ELR


def test_topics_create_with_broker_default_partitions_and_errors(broker):
    b = broker.bootstrap
    name = unique_topic("cli-topics-default")
    ok(tool("topics", "--bootstrap-server", b, "--create", "--topic", name))
    lines = ok(tool("topics", "--bootstrap-server", b, "--describe", "--topic", name))
    assert "\tPartitionCount: 1\t" in lines[0] and lines[0].endswith("\tConfigs: min.insync.replicas=1"), lines
    bad = unique_topic("cli-topics-bad")
    fails(tool("topics", "--bootstrap-server", b, "--create", "--topic", bad, "--config", "retention.ms=abc"),
          1, "INVALID_CONFIG")
    assert bad not in _kp_topics(b)
    fails(tool("topics", "--bootstrap-server", b, "--create"), 2, "--topic")
    fails(tool("topics", "--bootstrap-server", b, "--create", "--topic", bad, "--config", "novalue"),
          2, "--config", "novalue")
    fails(tool("topics", "--bootstrap-server", b, "--create", "--topic", bad, "--partitions", "0"),
          2, "--partitions", "0")


# ------------------------------------------------------------------------------ configs


def _ck_topic_configs(bootstrap: str, topic: str) -> dict:
    from confluent_kafka.admin import ConfigResource, ResourceType

    res = ConfigResource(ResourceType.TOPIC, topic)
    admin = ck_admin(bootstrap)  # kept alive until the result is in
    return admin.describe_configs([res])[res].result(timeout=20)


def test_configs_describe_and_alter_topic(broker, new_topic):
    from confluent_kafka.admin import ConfigSource

    b = broker.bootstrap
    topic = new_topic({"retention.ms": "3600000"})
    lines = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                    "--describe"))
    assert lines[0] == f"Dynamic configs for topic {topic} are:"
    assert len(lines) == 2 and lines[1].startswith(
        "  retention.ms=3600000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=3600000"), lines
    out = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                  "--alter", "--add-config", "segment.ms=600000,cleanup.policy=[delete]",
                  "--delete-config", "retention.ms"))
    assert out == [f"Completed updating config for topic {topic}."]
    cfg = _ck_topic_configs(b, topic)
    assert cfg["segment.ms"].value == "600000"
    assert cfg["segment.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["retention.ms"].source != ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    lines = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                    "--describe"))
    assert [ln.split(" ")[2] for ln in lines[1:]] == ["cleanup.policy=delete", "segment.ms=600000"], lines
    every = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
                    "--describe", "--all"))
    assert every[0] == f"All configs for topic {topic} are:"
    assert any(ln.startswith("  retention.ms=") for ln in every) and len(every) > 5


def test_configs_brokers_and_errors(broker, new_topic):
    b = broker.bootstrap
    lines = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "0",
                    "--describe"))
    assert lines[0] == "Dynamic configs for broker 0 are:"
    every = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "0",
                    "--describe", "--all"))
    assert every[0] == "All configs for broker 0 are:"
    assert any(ln.startswith("  log.segment.bytes=") for ln in every), every
    missing = "no-such-topic-" + uuid.uuid4().hex[:6]
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", missing,
               "--describe"), 1, missing)
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", missing,
               "--alter", "--add-config", "retention.ms=1"), 1, missing)
    topic = new_topic()
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
               "--alter", "--add-config", "retention.ms=abc"), 1, "INVALID_CONFIG")
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
               "--alter", "--add-config", "novalue"), 2, "--add-config", "novalue")
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "brokers", "--entity-name", "x",
               "--describe"), 2, "--entity-name", "x")
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "topics", "--entity-name", topic,
               "--alter"), 2, "--add-config")


def test_configs_groups(broker):
    b = broker.bootstrap
    group = "cli-group-" + uuid.uuid4().hex[:6]
    assert ok(tool("configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
                   "--alter", "--add-config", "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000")) \
        == [f"Completed updating config for group {group}."]
    lines = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group, "--describe"))
    assert lines == [
        f"Dynamic configs for group {group} are:",
        "  consumer.heartbeat.interval.ms=6000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.heartbeat.interval.ms=6000}",
        "  consumer.session.timeout.ms=50000 sensitive=false synonyms={DYNAMIC_GROUP_CONFIG:consumer.session.timeout.ms=50000}",
    ]
    every = ok(tool("configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
                    "--describe", "--all"))
    assert "  share.session.timeout.ms=45000 sensitive=false synonyms={DEFAULT_CONFIG:share.session.timeout.ms=45000}" \
        in every
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "groups", "--entity-name", group,
               "--alter", "--add-config", "consumer.heartbeat.interval.ms=1"), 1, "INVALID_CONFIG",
          "group.consumer.min.heartbeat.interval.ms")
    fails(tool("configs", "--bootstrap-server", b, "--entity-type", "groups", "--describe"), 2, "--entity-name")


# ------------------------------------------------------------------------------ consumer-groups


@pytest.fixture
def group_topic(broker):
    """Partition 0: 10 records one hour apart ending one hour ago; partition 1: 3 records
    at now-6h, now-4h, now-2h."""
    topic = create_topic(broker.bootstrap, unique_topic("cli-groups"), {"message.timestamp.type": "CreateTime"},
                         partitions=2)
    now = now_ms()
    ts0 = [now - (10 - i) * HOUR for i in range(10)]
    ts1 = [now - 6 * HOUR, now - 4 * HOUR, now - 2 * HOUR]
    produce_at(broker.bootstrap, topic, 0, ts0)
    produce_at(broker.bootstrap, topic, 1, ts1)
    return topic, {0: ts0, 1: ts1}


def join_and_commit(bootstrap: str, group: str, topic: str, offsets: dict[int, int]):
    """A confluent-kafka consumer joins ``group``, waits for its assignment and commits
    ``offsets``; returned still in the group (close it to leave)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bootstrap, **{"group.id": group, "auto.offset.reset": "earliest",
                                                  "session.timeout.ms": 10_000}))
    c.subscribe([topic])
    deadline = time.monotonic() + 30
    while not c.assignment() and time.monotonic() < deadline:
        c.poll(0.2)
    assert c.assignment(), "the consumer got no assignment from the group coordinator"
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()], asynchronous=False)
    return c


def committed(bootstrap: str, group: str, topic: str, partitions=(0, 1)) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(ck_consumer_config(bootstrap, **{"group.id": group}))
    try:
        got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=20)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def table(lines: list[str]) -> list[list[str]]:
    rows = [ln.split() for ln in lines if ln.strip()]
    return rows


def test_consumer_groups_describe_with_lag_seconds(broker, group_topic):
    b = broker.bootstrap
    topic, stamps = group_topic
    group = "cli-g-" + uuid.uuid4().hex[:8]
    c = join_and_commit(b, group, topic, {0: 4, 1: 3})
    try:
        t0 = time.time()
        rows = table(ok(tool("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group)))
        t1 = time.time()
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG",
                           "LAG-SECONDS", "CONSUMER-ID", "HOST", "CLIENT-ID"]
        assert [r[:6] for r in rows[1:]] == [[group, topic, "0", "4", "10", "6"], [group, topic, "1", "3", "3", "0"]]
        lag_s = float(rows[1][6])
        # now minus the timestamp of offset 4 (the next unconsumed record)
        assert (t0 * 1000 - stamps[0][4]) / 1000 - 1 <= lag_s <= (t1 * 1000 - stamps[0][4]) / 1000 + 1, lag_s
        assert rows[2][6] == "0"
        member = rows[1][7]
        assert member != "-" and rows[2][7] == member and rows[1][9] == "chronolog-it-ck"
        assert group in ok(tool("consumer-groups", "--bootstrap-server", b, "--list"))
    finally:
        c.close()
    p = tool("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group)
    rows = table(ok(p))
    assert f"Consumer group '{group}' has no active members." in p.stderr
    assert [r[:7] for r in rows[1:]][1] == [group, topic, "1", "3", "3", "0", "0"]
    assert rows[1][7:] == ["-", "-", "-"]


def test_consumer_groups_reset_offsets(broker, group_topic):
    b = broker.bootstrap
    topic, stamps = group_topic
    group = "cli-g-" + uuid.uuid4().hex[:8]
    c = join_and_commit(b, group, topic, {0: 4, 1: 3})
    try:
        fails(tool("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group,
                   "--to-earliest", "--all-topics", "--execute"), 1, "inactive", "Stable")
    finally:
        c.close()
    assert committed(b, group, topic) == {0: 4, 1: 3}

    def reset(*scenario: str, execute: bool = True, topic_args=("--all-topics",)) -> list[list[str]]:
        p = tool("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group, *scenario,
                 *topic_args, "--execute" if execute else "--dry-run")
        rows = table(ok(p))
        assert rows[0] == ["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]
        return rows[1:]

    # by time, dry run: the plan is printed, nothing committed
    assert reset("--to-datetime", iso(stamps[0][7], 120), execute=False, topic_args=("--topic", f"{topic}:0")) == \
        [[group, topic, "0", "7"]]
    assert committed(b, group, topic) == {0: 4, 1: 3}
    # one ms later: the next offset; only partition 0 named
    assert reset("--to-datetime", iso(stamps[0][7] + 1), topic_args=("--topic", f"{topic}:0")) == \
        [[group, topic, "0", "8"]]
    assert committed(b, group, topic) == {0: 8, 1: 3}
    # by duration: now - 5h30m lies between offsets 4 and 5 of partition 0, 0 and 1 of partition 1
    assert reset("--by-duration", "PT5H30M") == [[group, topic, "0", "5"], [group, topic, "1", "1"]]
    assert committed(b, group, topic) == {0: 5, 1: 1}
    # a time after every record: the log end offset (as Kafka)
    assert reset("--to-datetime", iso(now_ms() + HOUR), topic_args=("--topic", topic)) == \
        [[group, topic, "0", "10"], [group, topic, "1", "3"]]
    assert committed(b, group, topic) == {0: 10, 1: 3}
    assert reset("--to-earliest", topic_args=("--topic", topic)) == [[group, topic, "0", "0"], [group, topic, "1", "0"]]
    assert committed(b, group, topic) == {0: 0, 1: 0}
    assert reset("--to-offset", "2") == [[group, topic, "0", "2"], [group, topic, "1", "2"]]
    assert committed(b, group, topic) == {0: 2, 1: 2}
    assert reset("--to-offset", "999") == [[group, topic, "0", "10"], [group, topic, "1", "3"]]
    assert reset("--shift-by", "-4", topic_args=("--topic", f"{topic}:1")) == [[group, topic, "1", "0"]]
    assert committed(b, group, topic) == {0: 10, 1: 0}
    assert reset("--to-latest") == [[group, topic, "0", "10"], [group, topic, "1", "3"]]
    assert committed(b, group, topic) == {0: 10, 1: 3}
    # the group's consumer resumes where the reset put it
    assert reset("--to-datetime", iso(stamps[0][6], -90), topic_args=("--topic", f"{topic}:0")) == \
        [[group, topic, "0", "6"]]
    from confluent_kafka import Consumer

    cons = Consumer(ck_consumer_config(b, **{"group.id": group, "auto.offset.reset": "latest"}))
    try:
        cons.subscribe([topic])
        got = []
        deadline = time.monotonic() + 30
        while len(got) < 4 and time.monotonic() < deadline:
            m = cons.poll(0.2)
            if m is not None and not m.error():
                got.append((m.partition(), m.offset(), m.timestamp()[1]))
        assert sorted(got) == [(0, i, stamps[0][i]) for i in range(6, 10)]
    finally:
        cons.close()


def test_consumer_groups_errors(broker, group_topic):
    b = broker.bootstrap
    topic, _ = group_topic
    group = "cli-g-" + uuid.uuid4().hex[:8]
    fails(tool("consumer-groups", "--bootstrap-server", b, "--describe", "--group", group), 1, group,
          "does not exist")
    base = ("consumer-groups", "--bootstrap-server", b, "--reset-offsets", "--group", group)
    fails(tool(*base, "--to-datetime", "last tuesday", "--topic", topic), 2, "--to-datetime", "last tuesday")
    fails(tool(*base, "--by-duration", "5 hours", "--topic", topic), 2, "--by-duration", "5 hours")
    fails(tool(*base, "--topic", topic), 2, "--to-datetime")
    fails(tool(*base, "--to-earliest", "--to-latest", "--topic", topic), 2, "--to-earliest", "--to-latest")
    fails(tool(*base, "--to-earliest"), 2, "--all-topics")
    fails(tool(*base, "--to-earliest", "--topic", topic, "--all-topics"), 2, "--all-topics")
    missing = "no-such-topic-" + uuid.uuid4().hex[:6]
    fails(tool(*base, "--to-earliest", "--topic", missing, "--execute"), 1, missing)
    fails(tool(*base, "--to-earliest", "--topic", f"{topic}:5", "--execute"), 1, "5")
    fails(tool("consumer-groups", "--bootstrap-server", b, "--describe"), 2, "--group")
    # nothing was committed by the failed runs
    assert committed(b, group, topic) == {0: -1001, 1: -1001}
