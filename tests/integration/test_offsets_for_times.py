"""KIP-33 search by time: ListOffsets with a timestamp must return exactly the first offset
(in offset order) whose record timestamp is >= T, with that record's timestamp, also when
timestamps are out of order and when the record sits inside a compressed batch. Plus the
special ListOffsets values: -1 latest, -2 earliest, -3 max timestamp."""

from __future__ import annotations

import random
import time

import pytest

from tests.integration.helpers import (
    TIME_CLIENTS,
    TimeOracle,
    Rec,
    compare_offsets_for_times,
    consume,
    create_topic,
    now_ms,
    offsets_for_times,
    oracle_max_timestamp,
    produce,
    produce_batches,
    query_points,
    special_offsets,
    unique_topic,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def out_of_order_topic(broker):
    topic = create_topic(broker.bootstrap, unique_topic("ooo"))
    base = now_ms() - 600_000
    rnd = random.Random(33)
    inner = [base + 6_000 + 50 * k for k in range(40)] + [base + 7_000] * 3
    rnd.shuffle(inner)
    batches = [
        # single-record batches, out of order: 1000, 3000, 2000, 5000, 4000 (scaled)
        (None, [base + 1_000]), (None, [base + 3_000]), (None, [base + 2_000]),
        (None, [base + 5_000]), (None, [base + 4_000]),
        # one gzip batch of 43 shuffled records (with duplicates)
        ("gzip", inner),
        # an lz4 batch whose records go back below earlier maxima
        ("lz4", [base + 2_500, base + 9_000, base + 1_500, base + 9_000, base + 8_999]),
        # uncompressed multi-record batch containing the maximum twice
        (None, [base + 20_000, base + 100, base + 20_000, base + 19_999]),
        ("zstd", [base + 10, base + 15_000, base + 12_000]),
    ]
    stamps = produce_batches(broker.bootstrap, topic, batches)
    return topic, stamps


@pytest.fixture(scope="module")
def monotonic_topic(broker):
    topic = create_topic(broker.bootstrap, unique_topic("mono"))
    base = now_ms() - 300_000
    stamps = [base + 10 * i for i in range(120)]
    sizes = [1, 7, 30, 2, 50, 30]  # batches of varying size, compressed
    batches, pos = [], 0
    for k, n in enumerate(sizes):
        batches.append((["lz4", "gzip", None, "zstd", "snappy", "lz4"][k], stamps[pos:pos + n]))
        pos += n
    assert pos == len(stamps)
    produce_batches(broker.bootstrap, topic, batches)
    return topic, stamps


@pytest.mark.parametrize("client", TIME_CLIENTS)
def test_offsets_for_times_out_of_order(broker, out_of_order_topic, client):
    topic, stamps = out_of_order_topic
    targets = query_points(stamps)
    answers = offsets_for_times(client, broker.bootstrap, topic, targets)
    compare_offsets_for_times(client, answers, stamps)


@pytest.mark.parametrize("client", TIME_CLIENTS)
def test_offsets_for_times_monotonic(broker, monotonic_topic, client):
    topic, stamps = monotonic_topic
    targets = query_points(stamps)
    answers = offsets_for_times(client, broker.bootstrap, topic, targets)
    compare_offsets_for_times(client, answers, stamps)


@pytest.mark.parametrize("client", TIME_CLIENTS)
def test_special_offsets(broker, out_of_order_topic, client):
    topic, stamps = out_of_order_topic
    got = special_offsets(client, broker.bootstrap, topic)
    assert got["earliest"] == 0
    assert got["latest"] == len(stamps)
    if "max_timestamp" in got:
        # the FIRST record having the largest timestamp
        assert got["max_timestamp"] == oracle_max_timestamp(stamps), got


@pytest.mark.parametrize("client", TIME_CLIENTS)
def test_empty_topic_offsets(broker, new_topic, client):
    topic = new_topic()
    answers = offsets_for_times(client, broker.bootstrap, topic, [0, now_ms()])
    assert all(v is None for v in answers.values()), f"offsets_for_times on an empty log: {answers}"
    got = special_offsets(client, broker.bootstrap, topic)
    assert got["earliest"] == 0 and got["latest"] == 0, got
    if "max_timestamp" in got:
        assert got["max_timestamp"][0] == -1, f"MAX_TIMESTAMP on an empty log: {got['max_timestamp']}"


def test_log_append_time_search(broker, new_topic):
    """On a LogAppendTime topic the index holds the broker's append times: searching for
    each acknowledged append time finds the first record of that append."""
    topic = new_topic({"message.timestamp.type": "LogAppendTime"})
    stamps: list[int] = []
    for k in range(6):
        acks = produce("kp", broker.bootstrap, topic,
                       [Rec(b"k", b"v%d-%d" % (k, j), 1_000 + j) for j in range(k + 1)])
        assert [a.offset for a in acks] == list(range(len(stamps), len(stamps) + k + 1))
        stamps += [a.timestamp for a in acks]
        time.sleep(0.005)
    assert stamps == sorted(stamps)
    targets = query_points(stamps)
    for client in ("kp", "ck-admin"):
        compare_offsets_for_times(client, offsets_for_times(client, broker.bootstrap, topic, targets), stamps)
    # an old CreateTime is not what the index holds: T=1_000 finds offset 0 (append time >= T)
    assert offsets_for_times("kp", broker.bootstrap, topic, [1_000])[1_000] == (0, stamps[0])


def test_confluent_offset_beginning_and_end(broker, new_topic):
    """librdkafka resolves OFFSET_BEGINNING / OFFSET_END with ListOffsets -2 / -1."""
    from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, TopicPartition

    from tests.integration.helpers import ck_consumer, ck_poll, make_records

    topic = new_topic()
    recs = make_records(10, now_ms() - 10_000, step=10, prefix="be")
    produce("ck", broker.bootstrap, topic, recs)

    c = ck_consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        m = ck_poll(c, 20)
        assert m is not None, "nothing consumed from OFFSET_BEGINNING"
        assert m.offset() == 0 and m.value() == recs[0].value
    finally:
        c.close()

    c = ck_consumer(broker.bootstrap)
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_END)])
        # let the consumer resolve OFFSET_END (ListOffsets -1) before producing
        m = ck_poll(c, 2.5)
        assert m is None, f"consumed offset {m.offset()} from OFFSET_END before anything was produced"
        produce("ck", broker.bootstrap, topic, [Rec(b"late", b"late", now_ms())])
        m = ck_poll(c, 20)
        assert m is not None, "the record produced after OFFSET_END was not consumed"
        assert (m.offset(), m.value()) == (10, b"late")
    finally:
        c.close()


def test_seek_to_time_and_consume(broker, out_of_order_topic):
    """What an application does with offsets_for_times: seek there and consume; every
    record with timestamp >= T must be in what it reads."""
    topic, stamps = out_of_order_topic
    t = sorted(stamps)[len(stamps) // 2]
    (off, ts) = offsets_for_times("kp", broker.bootstrap, topic, [t])[t]
    got = consume("aio", broker.bootstrap, topic, len(stamps) - off, start=off)
    seen = {g.offset for g in got}
    must = {i for i, s in enumerate(stamps) if s >= t}
    assert must <= seen, f"records with ts >= T missing after seeking to {off}: {sorted(must - seen)}"
    assert stamps[off] == ts >= t


def test_max_timestamp_inside_compressed_batch(broker, new_topic):
    """ListOffsets -3 (KIP-734) must name the first record with the largest timestamp,
    even in the middle of a compressed batch (not the batch's base or last offset)."""
    topic = new_topic()
    base = now_ms() - 100_000
    stamps = produce_batches(broker.bootstrap, topic, [
        (None, [base, base + 10]),
        ("gzip", [base + 20, base + 30, base + 90_000, base + 40, base + 90_000, base + 50]),
        ("lz4", [base + 60, base + 70]),
    ])
    assert oracle_max_timestamp(stamps) == (4, base + 90_000)
    for client in ("kp-admin", "ck-admin"):
        got = special_offsets(client, broker.bootstrap, topic)
        assert got["max_timestamp"] == (4, base + 90_000), f"{client}: {got}"
    # and search by time lands inside the batch too
    compare_offsets_for_times("kp", offsets_for_times("kp", broker.bootstrap, topic, query_points(stamps)), stamps)


def test_offsets_for_times_many_partitions_one_request(broker, new_topic):
    """kafka-python sends one ListOffsets request for all partitions; each partition's
    answer must come from its own log."""
    from kafka import TopicPartition

    from tests.integration.helpers import kp_consumer, make_records

    topic = new_topic(partitions=3)
    base = now_ms() - 60_000
    stamps = {}
    for p in range(3):
        recs = make_records(10 + p, base + 1000 * p, step=100, prefix=f"p{p}", headers=False)
        produce("kp", broker.bootstrap, topic, recs, partition=p)
        stamps[p] = [r.timestamp for r in recs]
    c = kp_consumer(broker.bootstrap)
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        for t in (base, base + 1050, base + 1500, base + 2000, base + 2950, base + 5000):
            got = c.offsets_for_times({tp: t for tp in tps}, timeout_ms=15_000)
            for tp in tps:
                want = TimeOracle(stamps[tp.partition]).lookup(t)
                have = None if got[tp] is None else (got[tp].offset, got[tp].timestamp)
                assert have == want, f"partition {tp.partition}, T={t}: {have} != {want}"
        ends = c.end_offsets(tps, timeout_ms=15_000)
        assert {tp.partition: v for tp, v in ends.items()} == {0: 10, 1: 11, 2: 12}
    finally:
        c.close()
