"""message.timestamp.type=LogAppendTime: the broker replaces the producer's timestamps with
its own append time, reports it in the produce response, and every consumer sees the
LogAppendTime timestamp type."""

from __future__ import annotations

import pytest

from tests.integration.helpers import (
    CLIENTS,
    HEADER_CLIENTS,
    LOG_APPEND_TIME,
    assert_records_equal,
    consume,
    make_records,
    now_ms,
    produce,
)

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("producer", CLIENTS)
def test_log_append_time_topic(broker, new_topic, producer):
    topic = new_topic({"message.timestamp.type": "LogAppendTime"})
    n = 20
    old = now_ms() - 3_600_000  # an hour old CreateTime: must not survive
    recs = make_records(n, old, step=1, headers=producer in HEADER_CLIENTS, prefix=producer)

    before = now_ms()
    first = produce(producer, broker.bootstrap, topic, recs[:10])
    second = produce(producer, broker.bootstrap, topic, recs[10:])
    after = now_ms()
    acks = first + second

    assert [a.offset for a in acks] == list(range(n))
    for a in acks:
        # kafka-python's RecordMetadata.timestamp / aiokafka's / confluent's delivery report
        # carry the broker's log_append_time for LogAppendTime topics.
        assert before <= a.timestamp <= after, (
            f"{producer}: ack timestamp {a.timestamp} not the broker's append time "
            f"(test window {before}..{after}, CreateTime sent {old}..)")
    if producer == "ck":
        from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

        assert all(a.raw[0] == TIMESTAMP_LOG_APPEND_TIME for a in acks), [a.raw for a in acks[:3]]
    if producer == "aio":
        assert all(a.timestamp_type == LOG_APPEND_TIME for a in acks)
    # append times never go backwards within a partition
    assert first[-1].timestamp <= second[0].timestamp

    for consumer in CLIENTS:
        got = consume(consumer, broker.bootstrap, topic, n)
        assert_records_equal(got, recs, ts_type=LOG_APPEND_TIME,
                             headers=producer in HEADER_CLIENTS and consumer in HEADER_CLIENTS,
                             who=f"{producer}->{consumer}")
        for g, a in zip(got, acks):
            assert g.timestamp == a.timestamp, (
                f"{producer}->{consumer}: offset {g.offset} read timestamp {g.timestamp}, "
                f"the produce response said log_append_time {a.timestamp}")
        stamps = [g.timestamp for g in got]
        assert stamps == sorted(stamps), f"{consumer}: append times go backwards: {stamps}"
        if consumer == "ck":
            from confluent_kafka import TIMESTAMP_LOG_APPEND_TIME

            assert all(g.raw_ts_type == TIMESTAMP_LOG_APPEND_TIME for g in got)
        else:
            assert all(g.raw_ts_type == 1 for g in got)  # ConsumerRecord.timestamp_type 1


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_log_append_time_compressed_batch(broker, new_topic, codec):
    """A compressed multi-record batch on a LogAppendTime topic: stamped without
    recompression; every record reads as the append time."""
    topic = new_topic({"message.timestamp.type": "LogAppendTime"})
    recs = make_records(30, now_ms() - 86_400_000, step=1, prefix=codec)
    before = now_ms()
    acks = produce("ck", broker.bootstrap, topic, recs, compression=codec, **{"linger.ms": 100})
    after = now_ms()
    assert [a.offset for a in acks] == list(range(30))
    assert all(before <= a.timestamp <= after for a in acks)
    for consumer in ("kp", "ck", "aio", "kp010"):
        if consumer == "kp010" and codec == "zstd":
            continue  # cannot be down-converted (test_compression checks the error)
        got = consume(consumer, broker.bootstrap, topic, 30)
        assert_records_equal(got, recs, ts_type=LOG_APPEND_TIME, headers=consumer != "kp010",
                             who=f"ck({codec})->{consumer}")
        assert [g.timestamp for g in got] == [a.timestamp for a in acks]
