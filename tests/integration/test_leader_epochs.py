"""Leader epochs (issue 15): OffsetForLeaderEpoch v0-4, the current-leader-epoch checks
of Fetch v9+, ListOffsets v4+ and OffsetForLeaderEpoch v2+, the diverging epoch of
Fetch v12+, the epoch stamped into every stored batch, and librdkafka's KIP-320 offset
validation against a restarted broker."""

from __future__ import annotations

import re
import urllib.request
import uuid

import pytest

from protocol import messages as T
from protocol.errors import ErrorCode
from tests.integration.helpers import (Rec, ck_consumer_config, create_topic, free_port, produce_kp,
                                       unique_topic)
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(180)

OFLE = T.OffsetForLeaderEpochRequest


def ofle(port, version, topic, partitions, current=-1):
    req = OFLE(replica_id=-1, topics=[OFLE.OffsetForLeaderTopic(topic=topic, partitions=[
        OFLE.OffsetForLeaderPartition(partition=p, current_leader_epoch=current, leader_epoch=e)
        for p, e in partitions])])
    resp = raw(port, 23, version, req)
    (t,) = resp.topics
    assert t.topic == topic
    return [(p.partition, p.error_code, p.leader_epoch, p.end_offset) for p in t.partitions]


@pytest.fixture
def epoch_broker(broker_factory):
    port = free_port()
    b = broker_factory({"num.partitions": "1", "metrics.port": str(port)})
    b.metrics_port = port
    return b


def requests_answered(b, api):
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    m = re.search(r'^chronolog_requests_total\{api="%s"\} (\S+)$' % api, text, re.M)
    return float(m.group(1)) if m else 0.0


def test_offset_for_leader_epoch_every_version(epoch_broker):
    b = epoch_broker
    topic = create_topic(b.bootstrap, unique_topic("ofle"), partitions=2)
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")] * 5, partition=0)
    for v in range(5):
        got = ofle(b.port, v, topic, [(0, 0), (1, 0), (0, 1), (7, 0)])
        # v0 has no leader epoch in the answer: it decodes as the default -1
        epoch = 0 if v >= 1 else -1
        assert got == [(0, 0, epoch, 5), (1, 0, epoch, 0),
                       (0, 0, -1, -1),  # an epoch after the latest: unknown, no error
                       (7, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)], v
    # v2+: the client's current leader epoch is checked against the partition's (0)
    assert ofle(b.port, 4, topic, [(0, 0)], current=3) == [(0, ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)]
    assert ofle(b.port, 4, topic, [(0, 0)], current=0) == [(0, 0, 0, 5)]
    assert ofle(b.port, 4, "no-such-topic-" + uuid.uuid4().hex[:6], [(0, 0)]) == [
        (0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, -1, -1)]


def test_stored_batches_carry_the_epoch_and_survive_restart(epoch_broker):
    from confluent_kafka import Consumer, TopicPartition

    b = epoch_broker
    topic = create_topic(b.bootstrap, unique_topic("epoch-stamp"))
    produce_kp(b.bootstrap, topic, [Rec(b"k%d" % i, b"v") for i in range(3)])
    (pdir,) = [p for p in b.log_dir.iterdir() if p.name == f"{topic}-0"]
    assert (pdir / "leader-epoch-checkpoint").read_text() == "0\n1\n0 0\n"
    # the batch header on disk: partitionLeaderEpoch (bytes 12-16) is the broker's, not the client's -1
    with open(next(pdir.glob("*.log")), "rb") as fh:
        head = fh.read(61)
    assert int.from_bytes(head[12:16], "big", signed=True) == 0
    b.restart()
    c = Consumer(ck_consumer_config(b.bootstrap, **{"group.id": "g-" + uuid.uuid4().hex[:8]}))
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msgs = []
        while len(msgs) < 3:
            m = c.poll(10)
            assert m is not None, "no records after restart"
            if m.error() is None:
                msgs.append(m)
        assert [m.leader_epoch() for m in msgs] == [0, 0, 0]
    finally:
        c.close()
    assert ofle(b.port, 4, topic, [(0, 0)]) == [(0, 0, 0, 3)]


def test_fetch_and_list_offsets_check_the_current_leader_epoch(epoch_broker):
    b = epoch_broker
    topic = create_topic(b.bootstrap, unique_topic("epoch-check"))
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"v")] * 4)
    F = T.FetchRequest

    def fetch(version, current=-1, last_fetched=-1, offset=0):
        req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=current, fetch_offset=offset, last_fetched_epoch=last_fetched,
                    log_start_offset=-1, partition_max_bytes=1 << 20)])], forgotten_topics_data=[], rack_id="")
        (p,) = raw(b.port, 1, version, req).responses[0].partitions
        return p

    for v in (9, 12):
        assert fetch(v, current=2).error_code == ErrorCode.UNKNOWN_LEADER_EPOCH
        p = fetch(v, current=0)
        assert p.error_code == 0 and p.high_watermark == 4 and len(p.records) > 0
    # below v9 the field does not exist: nothing to check
    assert fetch(8, current=2).error_code == 0
    # v12: a last fetched epoch the log knows and an offset inside it reads on ...
    p = fetch(12, last_fetched=0, offset=2)
    assert p.error_code == 0 and p.diverging_epoch.epoch == -1 and len(p.records) > 0
    # ... an offset past the end of that epoch is divergence (Kafka's readRecords) ...
    p = fetch(12, last_fetched=0, offset=6)
    assert p.error_code == 0 and (p.diverging_epoch.epoch, p.diverging_epoch.end_offset) == (0, 4)
    assert len(p.records) == 0
    # ... and an epoch it has never had is OFFSET_OUT_OF_RANGE
    assert fetch(12, last_fetched=5, offset=2).error_code == ErrorCode.OFFSET_OUT_OF_RANGE

    L = T.ListOffsetsRequest

    def list_offsets(version, current):
        req = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(name=topic, partitions=[
            L.ListOffsetsPartition(partition_index=0, current_leader_epoch=current, timestamp=-1)])])
        (p,) = raw(b.port, 2, version, req).topics[0].partitions
        return p.error_code, p.offset, p.leader_epoch

    assert list_offsets(4, 1) == (ErrorCode.UNKNOWN_LEADER_EPOCH, -1, -1)
    assert list_offsets(9, 0) == (0, 4, 0)
    assert list_offsets(3, 1) == (0, 4, -1)  # v3 answers no leader epoch (decoded as -1)


def test_librdkafka_validates_positions_with_offset_for_leader_epoch(epoch_broker):
    """librdkafka commits the leader epoch of the last consumed record (OffsetCommit v6+)
    and validates a position that carries an epoch with OffsetForLeaderEpoch (KIP-320):
    a valid one reads on, one past the epoch's end is reported as log truncation."""
    from confluent_kafka import Consumer, TopicPartition

    b = epoch_broker
    topic = create_topic(b.bootstrap, unique_topic("epoch-validate"))
    produce_kp(b.bootstrap, topic, [Rec(b"k%d" % i, b"v%d" % i) for i in range(6)])
    group = "g-" + uuid.uuid4().hex[:8]
    conf = ck_consumer_config(b.bootstrap, **{"group.id": group, "enable.auto.commit": False,
                                              "auto.offset.reset": "earliest"})

    def poll_until(c, n):
        got = []
        while len(got) < n:
            m = c.poll(10)
            assert m is not None, f"only {len(got)} of {n} records"
            if m.error() is None:
                got.append(m)
        return got

    c = Consumer(conf)
    try:
        c.assign([TopicPartition(topic, 0)])
        got = poll_until(c, 3)
        c.commit(message=got[-1], asynchronous=False)
        (committed,) = c.committed([TopicPartition(topic, 0)], timeout=10)
        assert (committed.offset, committed.leader_epoch) == (3, 0)
    finally:
        c.close()
    b.restart()
    produce_kp(b.bootstrap, topic, [Rec(b"k", b"later")])
    c = Consumer(conf)
    try:
        c.assign([TopicPartition(topic, 0)])
        assert [m.offset() for m in poll_until(c, 4)] == [3, 4, 5, 6]
        # a seek that names the epoch is validated before fetching
        c.seek(TopicPartition(topic, 0, 1, leader_epoch=0))
        assert [m.offset() for m in poll_until(c, 2)] == [1, 2]
        assert requests_answered(b, "OffsetForLeaderEpoch") >= 1
        # epoch 0 ends at 7 here: a position at 20 in epoch 0 is past it, which librdkafka
        # takes as truncation and (auto.offset.reset set) moves to the epoch's end, 7;
        # without the answer it would fetch 20, get OFFSET_OUT_OF_RANGE and reset to 0
        c.seek(TopicPartition(topic, 0, 20, leader_epoch=0))
        produce_kp(b.bootstrap, topic, [Rec(b"k", b"after-seek")])
        (m,) = poll_until(c, 1)
        assert (m.offset(), m.value()) == (7, b"after-seek")
    finally:
        c.close()
