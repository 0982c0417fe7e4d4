"""Topic ids end to end (issue 15, KIP-516): a partition.metadata file per partition,
ids in Metadata, CreateTopics and DeleteTopics (delete by id), Fetch v13-17 by id with
UNKNOWN_TOPIC_ID for an id no topic has, ids that survive restart and a new id for a
topic created again under the same name."""

from __future__ import annotations

import uuid

import pytest

from protocol import messages as T
from protocol.errors import ErrorCode
from storage import partition_metadata as PM
from tests.integration.helpers import Rec, create_topic, produce_kp, unique_topic, wait_for
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(180)


def metadata_ids(port, names=None):
    M = T.MetadataRequest
    md = raw(port, 3, 12, M(topics=None if names is None else [M.MetadataRequestTopic(name=n) for n in names],
                            allow_auto_topic_creation=False, include_topic_authorized_operations=False))
    return {t.name: (t.error_code, t.topic_id) for t in md.topics}


def fetch_by_id(port, version, topic_id, partitions=(0,), offset=0):
    F = T.FetchRequest
    req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, topics=[F.FetchTopic(topic_id=topic_id, partitions=[F.FetchPartition(
                partition=p, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                log_start_offset=-1, partition_max_bytes=1 << 20) for p in partitions])],
            forgotten_topics_data=[], rack_id="")
    resp = raw(port, 1, version, req)
    assert resp.error_code == 0
    (t,) = resp.responses
    assert t.topic_id == topic_id
    return t.partitions


@pytest.fixture
def idbroker(broker_factory):
    return broker_factory({"num.partitions": "1"})


def test_fetch_by_topic_id_every_version(idbroker):
    b = idbroker
    topic = create_topic(b.bootstrap, unique_topic("by-id"), partitions=2)
    produce_kp(b.bootstrap, topic, [Rec(b"k%d" % i, b"v%d" % i) for i in range(3)])
    code, tid = metadata_ids(b.port, [topic])[topic]
    assert code == 0 and tid != uuid.UUID(int=0)
    for v in range(13, 18):
        p0, p1 = fetch_by_id(b.port, v, tid, partitions=(0, 1))
        assert (p0.error_code, p0.high_watermark) == (0, 3) and len(p0.records) > 0, v
        assert (p1.error_code, p1.high_watermark, len(p1.records)) == (0, 0, 0), v
        (unknown,) = fetch_by_id(b.port, v, uuid.uuid4())
        assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_ID, v
    # an unknown partition of a known id is still UNKNOWN_TOPIC_OR_PARTITION
    (p9,) = fetch_by_id(b.port, 13, tid, partitions=(9,))
    assert p9.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_ids_survive_restart_and_recreation_gets_a_new_one(idbroker):
    from kafka.admin import KafkaAdminClient

    b = idbroker
    topic = create_topic(b.bootstrap, unique_topic("recreate"))
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")] * 2)
    _, old_id = metadata_ids(b.port, [topic])[topic]
    (pdir,) = [p for p in b.log_dir.iterdir() if p.name == f"{topic}-0"]
    assert (pdir / "partition.metadata").read_text() == f"version: 0\ntopic_id: {PM.kafka_uuid(old_id)}\n"
    b.restart(graceful=False)
    assert metadata_ids(b.port, [topic])[topic] == (0, old_id)
    (p,) = fetch_by_id(b.port, 16, old_id)
    assert p.error_code == 0 and p.high_watermark == 2
    # delete and create again under the same name: a new id; a client holding the old
    # one gets UNKNOWN_TOPIC_ID, never the new topic's records
    admin = KafkaAdminClient(bootstrap_servers=b.bootstrap)
    try:
        admin.delete_topics([topic])
    finally:
        admin.close()
    wait_for(lambda: topic not in metadata_ids(b.port), 30, "topic deleted")
    create_topic(b.bootstrap, topic)
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"new")])
    code, new_id = metadata_ids(b.port, [topic])[topic]
    assert code == 0 and new_id != old_id
    (p,) = fetch_by_id(b.port, 16, old_id)
    assert p.error_code == ErrorCode.UNKNOWN_TOPIC_ID
    (p,) = fetch_by_id(b.port, 16, new_id)
    assert p.error_code == 0 and p.high_watermark == 1
    (pdir,) = [p for p in b.log_dir.iterdir() if p.name == f"{topic}-0"]
    assert PM.read(str(pdir)) == new_id


def test_delete_topics_by_id(idbroker):
    b = idbroker
    topic = create_topic(b.bootstrap, unique_topic("del-by-id"))
    _, tid = metadata_ids(b.port, [topic])[topic]
    D = T.DeleteTopicsRequest
    missing = uuid.uuid4()
    resp = raw(b.port, 20, 6, D(topics=[D.DeleteTopicState(name=None, topic_id=missing),
                                        D.DeleteTopicState(name=None, topic_id=tid)], timeout_ms=10000))
    got = {r.topic_id: (r.name, r.error_code) for r in resp.responses}
    assert got[missing] == (None, ErrorCode.UNKNOWN_TOPIC_ID)
    assert got[tid] == (topic, 0)
    assert topic not in metadata_ids(b.port)
    # CreateTopics v7 answers the new topic's id, which Metadata then reports
    C = T.CreateTopicsRequest
    resp = raw(b.port, 19, 7, C(topics=[C.CreatableTopic(name=topic, num_partitions=1, replication_factor=-1,
                                                         assignments=[], configs=[])],
                                timeout_ms=10000, validate_only=False))
    (r,) = resp.topics
    assert r.error_code == 0 and r.topic_id not in (tid, uuid.UUID(int=0))
    assert metadata_ids(b.port, [topic])[topic] == (0, r.topic_id)


def test_librdkafka_fetches_by_topic_id(idbroker):
    """librdkafka 2.x sends Fetch v16 (topic ids) to a broker offering it."""
    from confluent_kafka import Consumer, TopicPartition

    b = idbroker
    topic = create_topic(b.bootstrap, unique_topic("rdk-ids"))
    produce_kp(b.bootstrap, topic, [Rec(b"k%d" % i, b"v%d" % i) for i in range(4)])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-" + uuid.uuid4().hex[:6],
                  "auto.offset.reset": "earliest"})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        got = []
        for _ in range(40):
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
            if len(got) == 4:
                break
        assert got == [b"v%d" % i for i in range(4)]
    finally:
        c.close()
