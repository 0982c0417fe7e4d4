"""Admin calls of modern clients (issue 15): DescribeLogDirs and ``chronolog log-dirs``,
answered as a single-broker Kafka cluster answers them, with kafka-python's admin
client and raw requests at every version."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.integration.helpers import REPO_ROOT, Rec, create_topic, produce_kp, unique_topic
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(180)


def partition_bytes(path) -> int:
    return sum(os.path.getsize(os.path.join(path, f)) for f in os.listdir(path) if f.endswith(".log"))


@pytest.fixture
def two_dir_broker(broker_factory, tmp_path):
    dirs = [tmp_path / "d1", tmp_path / "d2"]
    b = broker_factory({"log.dirs": ",".join(map(str, dirs)), "num.partitions": "1"})
    return b, [str(d) for d in dirs]


def test_describe_log_dirs_kafka_python_and_every_version(two_dir_broker):
    from kafka import KafkaAdminClient

    b, dirs = two_dir_broker
    topic = create_topic(b.bootstrap, unique_topic("logdirs"), partitions=4)
    other = create_topic(b.bootstrap, unique_topic("logdirs-other"), partitions=1)
    for p in range(4):
        produce_kp(b.bootstrap, topic, [Rec(b"k", b"v" * (100 * (p + 1)))] * (p + 1), partition=p)
    where = {}
    for d in dirs:
        for name in os.listdir(d):
            if name.startswith(topic + "-"):
                where[int(name.rsplit("-", 1)[1])] = (d, partition_bytes(os.path.join(d, name)))
    assert sorted(where) == [0, 1, 2, 3] and {d for d, _ in where.values()} == set(dirs)

    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        (node,) = admin.describe_log_dirs()
    finally:
        admin.close()
    assert node["broker"] == 0
    assert sorted(d["log_dir"] for d in node["log_dirs"]) == sorted(dirs)
    seen = {}
    for d in node["log_dirs"]:
        assert d["error_code"] == 0
        for t in d["topics"]:
            for p in t["partitions"]:
                seen[(t["name"], p["partition_index"])] = (d["log_dir"], p["partition_size"], p["offset_lag"],
                                                          p["is_future_key"])
    for p, (d, size) in where.items():
        assert seen[(topic, p)] == (d, size, 0, False)
    assert (other, 0) in seen

    # raw, every version: only the named partitions (an unknown one is left out); the
    # dir's other topics are listed without partitions, as Kafka does
    from protocol.messages import DescribeLogDirsRequest as Req

    for version in range(5):
        resp = raw(b.port, 35, version, Req(topics=[Req.DescribableLogDirTopic(topic=topic, partitions=[0, 3, 99])]))
        assert [r.error_code for r in resp.results] == [0, 0]
        got = {}
        for r in resp.results:
            names = {t.name: [p.partition_index for p in t.partitions] for t in r.topics}
            for p in names.get(topic, []):
                got[p] = (r.log_dir, next(x.partition_size for t in r.topics if t.name == topic
                                          for x in t.partitions if x.partition_index == p))
            if other in names:
                assert names[other] == []
            if version >= 4:
                assert r.total_bytes > 0 and 0 <= r.usable_bytes <= r.total_bytes
        assert got == {0: where[0], 3: where[3]}, version


def test_log_dirs_tool(two_dir_broker):
    b, dirs = two_dir_broker
    topic = create_topic(b.bootstrap, unique_topic("logdirs-cli"), partitions=2)
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v" * 500)], partition=1)

    def tool(*args):
        env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
        return subprocess.run([sys.executable, "-m", "broker", "log-dirs", "--bootstrap-server", b.bootstrap, *args],
                              cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=60)

    p = tool("--describe", "--topic-list", topic)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert lines[:2] == ["Querying brokers for log directories information",
                         "Received log directory information from brokers 0"]
    doc = json.loads(lines[2])
    assert doc["version"] == 1 and [x["broker"] for x in doc["brokers"]] == [0]
    parts = {}
    for d in doc["brokers"][0]["logDirs"]:
        assert d["error"] is None and d["logDir"] in dirs
        for part in d["partitions"]:
            assert part["partition"].startswith(topic + "-")
            parts[part["partition"]] = (d["logDir"], part["size"], part["offsetLag"], part["isFuture"])
    assert set(parts) == {f"{topic}-0", f"{topic}-1"}
    d1, size1, lag1, fut1 = parts[f"{topic}-1"]
    assert (size1, lag1, fut1) == (partition_bytes(os.path.join(d1, f"{topic}-1")), 0, False) and size1 > 500
    p = tool("--describe", "--broker-list", "0,7")
    assert p.returncode == 1 and p.stderr.strip().splitlines() == [
        "chronolog log-dirs: ERROR: The given brokers do not exist from --broker-list: 7. Current existent brokers: 0"]
    p = tool("--describe", "--broker-list", "zero")
    assert p.returncode == 2 and "--broker-list" in p.stderr and "Traceback" not in p.stderr


# ------------------------------------------------------------------ DescribeTopicPartitions


def dtp(port, names=None, limit=2000, cursor=None):
    from protocol.messages import DescribeTopicPartitionsRequest as Req

    body = Req(topics=[Req.TopicRequest(name=n) for n in (names or [])], response_partition_limit=limit,
               cursor=None if cursor is None else Req.Cursor(topic_name=cursor[0], partition_index=cursor[1]))
    return raw(port, 75, 0, body)


def test_describe_topic_partitions_paging_and_errors(broker_factory):
    from protocol.messages import MetadataRequest

    b = broker_factory({"max.request.partition.size.limit": "5", "auto.create.topics.enable": "false"})
    a = create_topic(b.bootstrap, "dtp-a", partitions=3)
    c = create_topic(b.bootstrap, "dtp-c", partitions=4)

    md = raw(b.port, 3, 12, MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
    ids = {t.name: t.topic_id for t in md.topics}

    def summary(resp):
        return ([(t.name, t.error_code, [p.partition_index for p in t.partitions]) for t in resp.topics],
                None if resp.next_cursor is None else (resp.next_cursor.topic_name, resp.next_cursor.partition_index))

    # named, sorted, the unknown and the illegal ones answered in place
    resp = dtp(b.port, ["dtp-c", "dtp-missing", "dtp-a", "bad/name"])
    assert summary(resp) == ([("bad/name", 17, []), ("dtp-a", 0, [0, 1, 2]), ("dtp-c", 0, [0, 1])], ("dtp-c", 2))
    ta = next(t for t in resp.topics if t.name == "dtp-a")
    assert ta.topic_id == ids["dtp-a"] and not ta.is_internal
    p0 = ta.partitions[0]
    assert (p0.leader_id, p0.leader_epoch, p0.replica_nodes, p0.isr_nodes, p0.eligible_leader_replicas,
            p0.last_known_elr, p0.offline_replicas) == (0, 0, [0], [0], [], [], [])
    assert ta.topic_authorized_operations > 0
    # the cursor continues the topic it names, then the others
    resp = dtp(b.port, ["dtp-c", "dtp-missing", "dtp-a"], cursor=("dtp-c", 2))
    assert summary(resp) == ([("dtp-c", 0, [2, 3]), ("dtp-missing", 3, [])], None)
    # every topic (internal ones too once they exist), limited by the request's limit
    resp = dtp(b.port, limit=3)
    assert summary(resp) == ([("dtp-a", 0, [0, 1, 2])], ("dtp-c", 0))
    resp = dtp(b.port, limit=3, cursor=("dtp-c", 0))
    assert summary(resp) == ([("dtp-c", 0, [0, 1, 2])], ("dtp-c", 3))
    # a limit below 1 is 1
    assert summary(dtp(b.port, ["dtp-a"], limit=0)) == ([("dtp-a", 0, [0])], ("dtp-a", 1))
    # a cursor outside the named topics, or a negative partition: INVALID_REQUEST for each
    resp = dtp(b.port, ["dtp-a"], cursor=("dtp-c", 0))
    assert summary(resp) == ([("dtp-a", 42, [])], None)
    resp = dtp(b.port, ["dtp-a"], cursor=("dtp-a", -1))
    assert summary(resp) == ([("dtp-a", 42, [])], None)
    assert a == "dtp-a" and c == "dtp-c"


# ----------------------------------------- ElectLeaders, partition reassignments


def test_elect_leaders_clients_and_raw(broker_factory):
    from confluent_kafka import ElectionType, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient
    from kafka import KafkaAdminClient

    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("elect"), partitions=2)
    ck = AdminClient({"bootstrap.servers": b.bootstrap})
    for etype in (ElectionType.PREFERRED, ElectionType.UNCLEAN):
        res = ck.elect_leaders(etype, [TopicPartition(topic, 0), TopicPartition(topic, 9),
                                       TopicPartition("no-such-topic", 0)]).result(20)
        got = {(tp.topic, tp.partition): (err.code(), err.str()) for tp, err in res.items()}
        assert got == {
            (topic, 0): (KafkaError.ELECTION_NOT_NEEDED, "Leader election not needed for topic partition."),
            (topic, 9): (KafkaError.UNKNOWN_TOPIC_OR_PART, f"No such partition as {topic}-9"),
            ("no-such-topic", 0): (KafkaError.UNKNOWN_TOPIC_OR_PART, "No such topic as no-such-topic")}
    # every partition: the ones that need no election are left out
    assert ck.elect_leaders(ElectionType.PREFERRED, None).result(20) == {}
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        resp = kp.elect_leaders(0, {topic: [0, 1]}, raise_errors=False)
    finally:
        kp.close()
    assert sorted((p[0], p[1]) for t in resp.replica_election_results for p in t.partition_result) == \
        [(0, 84), (1, 84)]
    from protocol.messages import ElectLeadersRequest as Req

    for version in range(3):
        body = Req(election_type=1, timeout_ms=1000,
                   topic_partitions=[Req.TopicPartitions(topic=topic, partitions=[0, 1])])
        resp = raw(b.port, 43, version, body)
        codes = [(p.partition_id, p.error_code) for r in resp.replica_election_results for p in r.partition_result]
        assert codes == [(0, 84), (1, 84)], version
        if version >= 1:
            assert resp.error_code == 0
    resp = raw(b.port, 43, 1, Req(election_type=5, timeout_ms=1000,
                                  topic_partitions=[Req.TopicPartitions(topic=topic, partitions=[0])]))
    assert resp.error_code == 42
    assert [(p.error_code, p.error_message) for p in resp.replica_election_results[0].partition_result] == \
        [(42, "Unknown election type 5")]


def test_partition_reassignments_clients_and_raw(broker_factory):
    import shutil

    from kafka import KafkaAdminClient

    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("reassign"), partitions=2)
    kp = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        assert kp.list_partition_reassignments() == {}
        assert kp.list_partition_reassignments({topic: [0, 1]}) == {}
    finally:
        kp.close()
    from protocol.messages import AlterPartitionReassignmentsRequest as Req

    def alter(partitions, version=0, allow_rf_change=True):
        body = Req(timeout_ms=5000, allow_replication_factor_change=allow_rf_change, topics=[Req.ReassignableTopic(
            name=topic, partitions=[Req.ReassignablePartition(partition_index=p, replicas=r) for p, r in partitions])])
        resp = raw(b.port, 45, version, body)
        assert resp.error_code == 0
        if version >= 1:  # Kafka 4.1 (KIP-860): the request's choice comes back
            assert resp.allow_replication_factor_change is allow_rf_change
        return [(p.partition_index, p.error_code, p.error_message) for p in resp.responses[0].partitions]

    assert alter([(0, [0]), (1, [0])]) == [(0, 0, None), (1, 0, None)]
    for allow in (True, False):  # one broker: the current assignment never changes the replication factor
        assert alter([(0, [0]), (1, [0, 0])], 1, allow) == [
            (0, 0, None), (1, 39, "The manual partition assignment includes the broker 0 more than once.")]
    assert alter([(0, None), (1, []), (0, [0, 0]), (1, [0, 3]), (5, [0])]) == [
        (0, 85, "No partition reassignment is in progress."),
        (1, 39, "The manual partition assignment includes an empty replica list."),
        (0, 39, "The manual partition assignment includes the broker 0 more than once."),
        (1, 39, "The manual partition assignment includes broker 3, but no such broker is registered."),
        (5, 3, f"Unable to find partition {topic}:5.")]
    node = shutil.which("node")
    assert node, "node is needed (make tools installs npm and kafkajs)"
    env = {**os.environ, "BROKER": b.bootstrap, "TOPIC": topic}
    out = subprocess.run([node, str(REPO_ROOT / "tests" / "js" / "admin.js")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"same": "ok", "other": "INVALID_REPLICA_ASSIGNMENT", "list": {"topics": []},
                   "listAll": {"topics": []}}


def test_alter_replica_log_dirs_moves_a_partition(two_dir_broker):
    """AlterReplicaLogDirs (kafka-python's alter_replica_log_dirs and raw v0-2): a
    partition moved to the other log dir keeps every record, takes new ones, is listed
    there by DescribeLogDirs and stays there after a restart; its current dir is a no-op;
    an unknown dir or partition is refused with Kafka's error and nothing moves."""
    from kafka import KafkaAdminClient
    from kafka.errors import NoError
    from kafka.structs import TopicPartitionReplica

    from protocol.messages import AlterReplicaLogDirsRequest as Req
    from tests.integration.helpers import consume_kp

    b, dirs = two_dir_broker
    topic = create_topic(b.bootstrap, unique_topic("move"), partitions=2)
    first = [Rec(b"k%d" % i, b"before-%d" % i) for i in range(50)]
    produce_kp(b.bootstrap, topic, first, partition=0)

    def dir_of(p):
        (d,) = [d for d in dirs if os.path.isdir(os.path.join(d, f"{topic}-{p}"))]
        return d

    src = dir_of(0)
    (dest,) = [d for d in dirs if d != src]
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        tpr = TopicPartitionReplica(topic, 0, 0)
        assert admin.alter_replica_log_dirs({tpr: src}) == {tpr: NoError}  # already there
        assert dir_of(0) == src
        assert admin.alter_replica_log_dirs({tpr: dest}) == {tpr: NoError}
        assert dir_of(0) == dest
        (node,) = admin.describe_log_dirs()
        listed = {d["log_dir"]: {(t["name"], p["partition_index"]) for t in d["topics"] for p in t["partitions"]}
                  for d in node["log_dirs"]}
        assert (topic, 0) in listed[dest] and (topic, 0) not in listed[src]
    finally:
        admin.close()
    second = [Rec(b"k%d" % i, b"after-%d" % i) for i in range(50)]
    produce_kp(b.bootstrap, topic, second, partition=0)
    got = consume_kp(b.bootstrap, topic, 100, partition=0)
    assert [g.value for g in got] == [r.value for r in first + second]
    assert [g.offset for g in got] == list(range(100))

    # raw: every version; a dir that is not a log dir, an unknown partition, the current dir
    for version in range(3):
        resp = raw(b.port, 34, version, Req(dirs=[
            Req.AlterReplicaLogDir(path="/no/such/dir", topics=[Req.AlterReplicaLogDirTopic(name=topic,
                                                                                            partitions=[1])]),
            Req.AlterReplicaLogDir(path=dest, topics=[Req.AlterReplicaLogDirTopic(name="no-such-topic",
                                                                                  partitions=[0]),
                                                      Req.AlterReplicaLogDirTopic(name=topic, partitions=[0])])]))
        got_codes = {(r.topic_name, p.partition_index): p.error_code for r in resp.results for p in r.partitions}
        assert got_codes == {(topic, 1): 57, ("no-such-topic", 0): 3, (topic, 0): 0}, version
    assert dir_of(0) == dest

    b.restart()
    assert dir_of(0) == dest
    got = consume_kp(b.bootstrap, topic, 100, partition=0)
    assert [g.value for g in got] == [r.value for r in first + second]


def test_describe_quorum_clients_and_raw(broker):
    """DescribeQuorum (Admin's describeMetadataQuorum): this node is the one voter and
    the leader of ``__cluster_metadata``; v2 lists its listeners; any other partition
    answers UNKNOWN_TOPIC_OR_PARTITION."""
    import time

    from kafka import KafkaAdminClient

    from protocol.messages import DescribeQuorumRequest as Req

    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        before = int(time.time() * 1000)
        q = admin.describe_metadata_quorum()
    finally:
        admin.close()
    (t,) = q["topics"]
    (p,) = t["partitions"]
    assert t["topic_name"] == "__cluster_metadata" and p["partition_index"] == 0 and p["error"] is None
    assert (p["leader_id"], p["leader_epoch"], p["high_watermark"], p["observers"]) == (0, 1, 0, [])
    (v,) = p["current_voters"]
    assert v["replica_id"] == 0 and v["last_fetch_timestamp"] >= before and v["last_caught_up_timestamp"] >= before
    assert q["nodes"] == [{"node_id": 0, "listeners": [{"name": "PLAINTEXT", "host": "127.0.0.1",
                                                           "port": broker.port}]}]
    metadata = Req(topics=[Req.TopicData(topic_name="__cluster_metadata",
                                         partitions=[Req.PartitionData(partition_index=0)])])
    for version in range(3):
        resp = raw(broker.port, 55, version, metadata)
        assert resp.error_code == 0 and resp.topics[0].partitions[0].leader_id == 0, version
    resp = raw(broker.port, 55, 2, Req(topics=[Req.TopicData(topic_name="__cluster_metadata", partitions=[
        Req.PartitionData(partition_index=1)])]))
    assert resp.error_code == 0 and resp.nodes == []
    assert [(x.partition_index, x.error_code) for x in resp.topics[0].partitions] == [(1, 3)]


def test_list_config_resources_clients_and_raw(broker_factory):
    """ListConfigResources (KIP-1142): v1 lists groups with configs of their own, this
    broker and every topic (internal ones included), only the types asked for; v0
    (ListClientMetricsResources) lists the client-metrics resources, none here; a type
    Chronolog does not list answers UNSUPPORTED_VERSION."""
    from kafka import KafkaAdminClient

    from protocol.messages import ListConfigResourcesRequest as Req
    from tests.integration.test_admin_configs import ck_incremental

    from confluent_kafka.admin import ResourceType

    b = broker_factory({})
    topic = create_topic(b.bootstrap, unique_topic("lcr"))
    ck_incremental(b.bootstrap, ResourceType.GROUP, "lcr-group", [("consumer.session.timeout.ms", "SET", "50000")])
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        got = admin.list_config_resources()
    finally:
        admin.close()
    assert got["broker"] == ["0"] and got["group"] == ["lcr-group"] and topic in got["topic"]
    resp = raw(b.port, 74, 1, Req(resource_types=[]))
    assert resp.error_code == 0
    pairs = [(r.resource_type, r.resource_name) for r in resp.config_resources]
    assert pairs[:2] == [(32, "lcr-group"), (4, "0")] and (2, topic) in pairs
    assert {t for t, _ in pairs} == {2, 4, 32}
    resp = raw(b.port, 74, 1, Req(resource_types=[2]))
    assert resp.error_code == 0 and {r.resource_type for r in resp.config_resources} == {2}
    assert (raw(b.port, 74, 1, Req(resource_types=[8])).error_code,
            raw(b.port, 74, 1, Req(resource_types=[4, 99])).error_code) == (35, 35)
    resp = raw(b.port, 74, 0, Req())
    assert (resp.error_code, resp.config_resources) == (0, [])


def test_alter_replica_log_dirs_to_another_filesystem_under_load(broker_factory, tmp_path):
    """A partition moved from a disk log dir to one on tmpfs (/dev/shm: another
    filesystem here, so copied in the background) while a producer keeps writing: the
    move finishes, every acknowledged record is there in order, and it stays after a
    restart."""
    import shutil
    import threading
    import time
    import uuid

    from kafka import KafkaAdminClient
    from kafka.structs import TopicPartitionReplica

    from tests.integration.helpers import consume_kp, kp_producer

    shm = f"/dev/shm/chronolog-test-{uuid.uuid4().hex[:8]}"
    disk = str(tmp_path / "disk")
    b = None
    try:
        b = broker_factory({"log.dirs": f"{disk},{shm}", "num.partitions": "1", "log.segment.bytes": "200000"})
        topic = create_topic(b.bootstrap, unique_topic("movefs"), partitions=1)
        src = disk if os.path.isdir(os.path.join(disk, f"{topic}-0")) else shm
        dest = shm if src == disk else disk
        copying = os.stat(src).st_dev != os.stat(dest).st_dev
        produce_kp(b.bootstrap, topic, [Rec(b"k", b"%06d" % i + b"x" * 500) for i in range(2000)])
        sent, stop = [2000], threading.Event()

        def keep_writing():
            p = kp_producer(b.bootstrap, linger_ms=5)
            try:
                while not stop.is_set():
                    p.send(topic, key=b"k", value=b"%06d" % sent[0] + b"x" * 500, partition=0).get(timeout=30)
                    sent[0] += 1
            finally:
                p.close()

        writer = threading.Thread(target=keep_writing)
        writer.start()
        try:
            admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
            try:
                tpr = TopicPartitionReplica(topic, 0, 0)
                assert admin.alter_replica_log_dirs({tpr: dest})[tpr].__name__ == "NoError"
            finally:
                admin.close()
            deadline = time.monotonic() + 60
            while not os.path.isdir(os.path.join(dest, f"{topic}-0")):
                assert time.monotonic() < deadline, "the move did not finish"
                time.sleep(0.1)
            time.sleep(0.5)  # the producer keeps writing into the moved log
        finally:
            stop.set()
            writer.join(60)
        assert not os.path.isdir(os.path.join(src, f"{topic}-0"))
        assert not [n for d in (src, dest) for n in os.listdir(d) if n.endswith(("-future", "-delete"))]
        if copying:
            assert "copied in" in b.log_path.read_text()
        n = sent[0]
        got = consume_kp(b.bootstrap, topic, n)
        assert [g.value[:6] for g in got] == [b"%06d" % i for i in range(n)]
        b.restart()
        got = consume_kp(b.bootstrap, topic, n)
        assert len(got) == n and got[-1].value[:6] == b"%06d" % (n - 1)
    finally:
        if b is not None:
            b.stop()  # before its log dir goes
        shutil.rmtree(shm, ignore_errors=True)
