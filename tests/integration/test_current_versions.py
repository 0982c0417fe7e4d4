"""The newest versions of the APIs Kafka 3.9/4.x clients send (issue 15), at the version
where each one changed something: Produce v11 (TRANSACTION_ABORTABLE) and v12, JoinGroup
v8-9 and LeaveGroup v5 (the client's reason, KIP-800), OffsetCommit v9
(GROUP_ID_NOT_FOUND), OffsetFetch v9 (member id and epoch), FindCoordinator v6 (share key
type), ListOffsets v10-11, ApiVersions v4, InitProducerId v5, Metadata v13, DescribeGroups
v6, DescribeCluster v2; raw requests, then a librdkafka client on them, and kafka-python
told it talks to Kafka 4.0 (it then sends 4.0's versions without asking)."""

from __future__ import annotations

import uuid

import pytest

from protocol import messages as T
from protocol import records as R
from protocol.errors import ErrorCode
from tests.integration.helpers import Rec, create_topic, now_ms, produce_kp, unique_topic
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(180)


@pytest.fixture
def vbroker(broker_factory):
    return broker_factory({"num.partitions": "1", "group.initial.rebalance.delay.ms": "0"})


def test_api_versions_v4_reads_as_a_current_broker(vbroker):
    resp = raw(vbroker.port, 18, 4, T.ApiVersionsRequest(client_software_name="chronolog-tests",
                                                          client_software_version="1.0"))
    assert resp.error_code == 0
    got = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
    for key, top in {0: 12, 2: 11, 3: 13, 8: 9, 9: 9, 10: 6, 11: 9, 13: 5, 15: 6, 18: 4, 22: 5, 23: 4,
                     60: 2}.items():
        assert got[key] == (0, top), key
    # the feature flags, as Admin's describeFeatures reads them (kafka-python's)
    from kafka import KafkaAdminClient

    admin = KafkaAdminClient(bootstrap_servers=vbroker.bootstrap)
    try:
        features = admin.describe_features()
    finally:
        admin.close()
    assert features["metadata.version"] == {"supported": (7, 25), "finalized": (25, 25), "finalized_epoch": 0}
    assert features["group.version"]["finalized"] == (1, 1)
    assert features["transaction.version"] == {"supported": (0, 1)}  # V1 transactions: not finalized


def _produce_txn(port, version, topic, txn_id, pid, epoch):
    batch = R.build_batch([(now_ms(), b"k", b"v")], producer_id=pid, producer_epoch=epoch, base_sequence=0,
                          is_transactional=True)
    P = T.ProduceRequest
    resp = raw(port, 0, version, P(transactional_id=txn_id, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
    (p,) = resp.responses[0].partition_responses
    return p.error_code, p.error_message


def test_produce_v11_answers_transaction_abortable(vbroker):
    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("v11"))
    txn_id = "tx-" + uuid.uuid4().hex[:8]
    init = raw(b.port, 22, 5, T.InitProducerIdRequest(transactional_id=txn_id, transaction_timeout_ms=60000,
                                                       producer_id=-1, producer_epoch=-1))
    assert init.error_code == 0 and init.producer_id >= 0
    # the partition was never added to the transaction (KIP-890 verification): v11 clients
    # get TRANSACTION_ABORTABLE, older ones INVALID_TXN_STATE, as Kafka's AddPartitionsToTxnManager
    code, msg = _produce_txn(b.port, 11, topic, txn_id, init.producer_id, init.producer_epoch)
    assert code == ErrorCode.TRANSACTION_ABORTABLE and topic in msg
    code, _ = _produce_txn(b.port, 9, topic, txn_id, init.producer_id, init.producer_epoch)
    assert code == ErrorCode.INVALID_TXN_STATE
    # v12 (KIP-890 part 2) is v11 while transaction.version is not finalized: the client
    # adds the partition itself, so one it did not add is refused the same way
    code, msg = _produce_txn(b.port, 12, topic, txn_id, init.producer_id, init.producer_epoch)
    assert code == ErrorCode.TRANSACTION_ABORTABLE and topic in msg
    # nothing was appended
    L = T.ListOffsetsRequest
    resp = raw(b.port, 2, 10, L(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[L.ListOffsetsTopic(
        name=topic, partitions=[L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])]))
    (p,) = resp.topics[0].partitions
    assert (p.error_code, p.offset) == (0, 0)


def test_group_calls_at_their_newest_versions(vbroker):
    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("groups-v9"))
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")] * 3)
    group = "g-" + uuid.uuid4().hex[:8]
    J = T.JoinGroupRequest

    def join(member_id):
        return raw(b.port, 11, 9, J(group_id=group, session_timeout_ms=30000, rebalance_timeout_ms=30000,
                                    member_id=member_id, group_instance_id=None, protocol_type="consumer",
                                    protocols=[J.JoinGroupRequestProtocol(name="range", metadata=b"")],
                                    reason="tests want a rebalance"))

    first = join("")
    assert first.error_code == ErrorCode.MEMBER_ID_REQUIRED and first.member_id
    joined = join(first.member_id)
    assert joined.error_code == 0 and joined.leader == first.member_id and joined.skip_assignment is False
    S = T.SyncGroupRequest
    synced = raw(b.port, 14, 5, S(group_id=group, generation_id=joined.generation_id, member_id=joined.member_id,
                                  group_instance_id=None, protocol_type="consumer", protocol_name="range",
                                  assignments=[S.SyncGroupRequestAssignment(member_id=joined.member_id,
                                                                            assignment=b"")]))
    assert synced.error_code == 0
    C = T.OffsetCommitRequest

    def commit(version, group_id, generation, member_id):
        resp = raw(b.port, 8, version, C(group_id=group_id, generation_id_or_member_epoch=generation,
                                         member_id=member_id, group_instance_id=None, topics=[
            C.OffsetCommitRequestTopic(name=topic, partitions=[C.OffsetCommitRequestPartition(
                partition_index=0, committed_offset=2, committed_leader_epoch=0, committed_metadata="m")])]))
        return resp.topics[0].partitions[0].error_code

    assert commit(9, group, joined.generation_id, joined.member_id) == 0
    # a group that does not exist, committed to with a generation: v9 says so, older ILLEGAL_GENERATION
    assert commit(9, group + "-none", 1, "someone") == ErrorCode.GROUP_ID_NOT_FOUND
    assert commit(8, group + "-none", 1, "someone") == ErrorCode.ILLEGAL_GENERATION
    F = T.OffsetFetchRequest
    fetched = raw(b.port, 9, 9, F(groups=[F.OffsetFetchRequestGroup(
        group_id=group, member_id=joined.member_id, member_epoch=joined.generation_id,
        topics=[F.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])], require_stable=True))
    (g,) = fetched.groups
    (p,) = g.topics[0].partitions
    assert (g.error_code, p.error_code, p.committed_offset, p.committed_leader_epoch, p.metadata) == (0, 0, 2, 0, "m")
    Lv = T.LeaveGroupRequest
    left = raw(b.port, 13, 5, Lv(group_id=group, members=[Lv.MemberIdentity(
        member_id=joined.member_id, group_instance_id=None, reason="the test is done")]))
    assert left.error_code == 0 and [m.error_code for m in left.members] == [0]
    text = b.log_path.read_text()
    assert "client reason: tests want a rebalance" in text and "client reason: the test is done" in text


def test_find_coordinator_v6_and_share_key_type(vbroker):
    b = vbroker
    FC = T.FindCoordinatorRequest
    resp = raw(b.port, 10, 6, FC(key_type=0, coordinator_keys=["g1", "g2"]))
    assert [(c.key, c.error_code, c.node_id, c.port) for c in resp.coordinators] == [
        ("g1", 0, 0, b.port), ("g2", 0, 0, b.port)]
    # share groups (KIP-932) have no coordinator here: Kafka without one answers INVALID_REQUEST
    resp = raw(b.port, 10, 6, FC(key_type=2, coordinator_keys=["grp:topic-id:0"]))
    assert [c.error_code for c in resp.coordinators] == [ErrorCode.INVALID_REQUEST]


def test_librdkafka_on_the_newest_versions(vbroker):
    """confluent-kafka negotiates the highest versions both sides know: a transactional
    produce, a group commit and a read_committed consume run on them end to end."""
    from confluent_kafka import Consumer, Producer

    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("newest"))
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "tx-" + uuid.uuid4().hex[:8]})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i)
    p.commit_transaction(30)
    group = "g-" + uuid.uuid4().hex[:8]
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "isolation.level": "read_committed", "enable.auto.commit": False})
    try:
        c.subscribe([topic])
        got = []
        for _ in range(60):
            m = c.poll(1)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 5:
                break
        assert got == [b"v%d" % i for i in range(5)]
        c.commit(asynchronous=False)
    finally:
        c.close()


def test_list_offsets_v11_earliest_pending_upload(vbroker):
    """ListOffsets v11 (Kafka 4.2, KIP-1023): EARLIEST_PENDING_UPLOAD (-6) answers -1/-1
    with leader epoch -1, as Kafka for a topic without remote storage; below v11 the
    timestamp is UNSUPPORTED_VERSION. kafka-python infers at least a 4.2 broker from it
    (4.3 with DescribeLogDirs v5, the newest version it checks)."""
    from kafka import KafkaConsumer

    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("v11lo"))
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")] * 3)
    L = T.ListOffsetsRequest

    def ask(version, ts):
        resp = raw(b.port, 2, version, L(replica_id=-1, isolation_level=0, timeout_ms=1000, topics=[
            L.ListOffsetsTopic(name=topic, partitions=[L.ListOffsetsPartition(
                partition_index=0, current_leader_epoch=-1, timestamp=ts)])]))
        (p,) = resp.topics[0].partitions
        return p.error_code, p.offset, p.timestamp, p.leader_epoch

    assert ask(11, -6) == (0, -1, -1, -1)
    assert ask(10, -6)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert ask(11, -1)[:2] == (0, 3) and ask(11, -2)[:2] == (0, 0)
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, api_version=None)
    try:
        assert c.config["api_version"] == (4, 3)
    finally:
        c.close()


def test_produce_v12_appends_and_answers_as_v11(vbroker):
    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("v12"))
    P = T.ProduceRequest
    for expected_base in (0, 2):
        batch = R.build_batch([(now_ms(), b"k", b"v1"), (now_ms(), b"k", b"v2")])
        resp = raw(b.port, 0, 12, P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            P.TopicProduceData(name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])]))
        (t,) = resp.responses
        (p,) = t.partition_responses
        assert (t.name, p.index, p.error_code, p.base_offset, p.log_start_offset) == (topic, 0, 0, expected_base, 0)
    # an unknown topic is named as at v11
    resp = raw(b.port, 0, 12, P(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
        P.TopicProduceData(name=topic + "-none", partition_data=[P.PartitionProduceData(
            index=0, records=R.build_batch([(now_ms(), b"k", b"v")]))])]))
    assert resp.responses[0].partition_responses[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_metadata_v13_and_describe_cluster_v2(vbroker):
    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("v13"))
    M = T.MetadataRequest
    resp = raw(b.port, 3, 13, M(topics=[M.MetadataRequestTopic(name=topic)],
                                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert resp.error_code == 0  # v13's top-level error code (KIP-1102)
    (t,) = resp.topics
    assert (t.error_code, t.name, [p.partition_index for p in t.partitions]) == (0, topic, [0])
    assert [(n.node_id, n.port) for n in resp.brokers] == [(0, b.port)]
    resp = raw(b.port, 3, 13, M(topics=[M.MetadataRequestTopic(name=topic + "-none")],
                                allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    assert resp.error_code == 0 and resp.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    D = T.DescribeClusterRequest
    for fenced_too in (False, True):  # no broker is ever fenced: the same one broker either way
        resp = raw(b.port, 60, 2, D(include_cluster_authorized_operations=False, endpoint_type=1,
                                    include_fenced_brokers=fenced_too))
        assert resp.error_code == 0
        assert [(n.broker_id, n.port, n.is_fenced) for n in resp.brokers] == [(0, b.port, False)]


def test_describe_groups_v6_names_a_group_not_found(vbroker):
    """KIP-1043: from v6 an unknown group is GROUP_ID_NOT_FOUND with Kafka's message
    (before: state Dead, no error); a group that exists answers as before, no message."""
    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("dg6"))
    group = "g-" + uuid.uuid4().hex[:8]
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")])
    from kafka import KafkaConsumer

    c = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, group_id=group, auto_offset_reset="earliest",
                      consumer_timeout_ms=15000)
    try:
        assert len([m for _, m in zip(range(1), c)]) == 1
        D = T.DescribeGroupsRequest
        missing = "missing-" + group
        resp = raw(b.port, 15, 6, D(groups=[group, missing], include_authorized_operations=False))
        found, absent = resp.groups
        assert (found.group_id, found.error_code, found.error_message, found.group_state) == (group, 0, None, "Stable")
        assert len(found.members) == 1
        assert (absent.group_id, absent.error_code, absent.error_message) == (
            missing, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {missing} not found.")
        (old,) = raw(b.port, 15, 5, D(groups=[missing], include_authorized_operations=False)).groups
        assert (old.error_code, old.group_state) == (0, "Dead")
    finally:
        c.close()


def test_kafka_python_told_kafka_4_0(vbroker):
    """kafka-python given ``api_version=(4, 0)`` does not ask which versions the broker
    has: it sends a Kafka 4.0 broker's (Metadata v13, DescribeGroups v6, DescribeCluster
    v2). Before this broker had them it closed each connection at the first Metadata
    request and the client never bootstrapped."""
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("kp40"))
    group = "g-" + uuid.uuid4().hex[:8]
    p = KafkaProducer(bootstrap_servers=b.bootstrap, api_version=(4, 0))
    try:
        for i in range(3):
            p.send(topic, key=b"k", value=b"v%d" % i).get(timeout=30)
    finally:
        p.close()
    c = KafkaConsumer(topic, bootstrap_servers=b.bootstrap, api_version=(4, 0), group_id=group,
                      auto_offset_reset="earliest", consumer_timeout_ms=15000)
    try:
        assert [m.value for _, m in zip(range(3), c)] == [b"v0", b"v1", b"v2"]
        c.commit()
    finally:
        c.close()
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap, api_version=(4, 0))
    try:
        assert topic in a.list_topics()
        cluster = a.describe_cluster()
        assert [(n["broker_id"], n["port"], n["is_fenced"]) for n in cluster["brokers"]] == [(0, b.port, False)]
        groups = a.describe_groups([group, "missing-" + group])
        assert groups[group]["group_state"] == "Empty"
        assert "GroupIdNotFoundError" in str(groups["missing-" + group]["error"])
    finally:
        a.close()


def test_kafka_python_told_kafka_4_2_and_4_3_admin_calls(vbroker):
    """kafka-python given ``api_version=(4, 2)`` sends ListTransactions v2 (KIP-1152's
    transactional id pattern) and AlterPartitionReassignments v1 (KIP-860) unasked, and
    given ``(4, 3)`` DescribeLogDirs v5: all are answered, the pattern matching whole ids."""
    from confluent_kafka import Producer
    from kafka import KafkaAdminClient, TopicPartition

    b = vbroker
    topic = create_topic(b.bootstrap, unique_topic("kp42"))
    tid = "tx-" + uuid.uuid4().hex[:8]
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap, api_version=(4, 2))
    try:
        listed = a.list_transactions(transactional_id_pattern=tid[:3] + ".*")
        assert tid in str(listed)
        assert tid not in str(a.list_transactions(transactional_id_pattern=tid[:3]))
        result = a.alter_partition_reassignments({TopicPartition(topic, 0): [0]})
        assert result == {TopicPartition(topic, 0): None}
    finally:
        a.close()
    a = KafkaAdminClient(bootstrap_servers=b.bootstrap, api_version=(4, 3))  # DescribeLogDirs v5 (IsCordoned)
    try:
        assert topic in str(a.describe_log_dirs())
    finally:
        a.close()
