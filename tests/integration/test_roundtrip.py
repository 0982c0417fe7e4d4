"""Round trips with CreateTime timestamps through every client, and the KIP-32 message
format (Produce v2 / Fetch v2, magic 1) against the record batch format (magic 2) in both
directions (up-conversion on produce, down-conversion on fetch)."""

from __future__ import annotations

import pytest

from tests.integration.helpers import (
    CLIENTS,
    CREATE_TIME,
    HEADER_CLIENTS,
    Rec,
    assert_records_equal,
    consume,
    end_offset,
    make_records,
    now_ms,
    produce,
)

pytestmark = pytest.mark.timeout(120)


def records_for(client: str, base_ts: int, n: int = 40) -> list[Rec]:
    """N records with distinct, partly out-of-order CreateTime timestamps, plus edge
    cases: a null key, a null value (tombstone), an empty value, a large value."""
    with_headers = client in HEADER_CLIENTS
    recs = make_records(n, base_ts, step=13, headers=with_headers, prefix=client)
    # out of order: swap a few timestamps
    recs[3].timestamp, recs[4].timestamp = recs[4].timestamp, recs[3].timestamp
    recs[10].timestamp = base_ts - 5_000
    recs[5].key = None
    recs[6].value = None
    recs[7].value = b""
    recs[8].value = bytes(range(256)) * 400  # 100 KiB
    if with_headers:
        recs[9].headers = []
        recs[11].headers = [("dup", b"1"), ("dup", b"2"), ("empty", b"")]
    return recs


@pytest.mark.parametrize("client", CLIENTS)
def test_round_trip_create_time(broker, new_topic, client):
    topic = new_topic()
    base = now_ms() - 120_000
    recs = records_for(client, base)

    acks = produce(client, broker.bootstrap, topic, recs)

    assert [a.offset for a in acks] == list(range(len(recs))), f"{client} produce offsets"
    for a, r in zip(acks, recs):
        # CreateTime topic: the acknowledgement carries the record's own timestamp
        # (the broker's log_append_time is -1). aiokafka 0.14 reuses the first record's
        # timestamp for every later record of a batch (a client bug in
        # MessageBatch.done), so only its timestamp type is checked.
        if client != "aio":
            assert a.timestamp == r.timestamp, f"{client}: ack timestamp {a.timestamp} != {r.timestamp}"
        if a.timestamp_type is not None:
            assert a.timestamp_type == CREATE_TIME
    if client == "ck":
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        assert all(a.raw[0] == TIMESTAMP_CREATE_TIME for a in acks)

    got = consume(client, broker.bootstrap, topic, len(recs))
    assert_records_equal(got, recs, ts_type=CREATE_TIME, headers=client in HEADER_CLIENTS, who=client)
    if client == "ck":
        from confluent_kafka import TIMESTAMP_CREATE_TIME

        assert all(g.raw_ts_type == TIMESTAMP_CREATE_TIME for g in got)
    if client in ("kp", "kp010", "aio"):
        assert all(g.raw_ts_type == 0 for g in got)  # ConsumerRecord.timestamp_type 0 = CreateTime
    assert end_offset(broker.bootstrap, topic) == len(recs)


@pytest.mark.parametrize("consumer", ["kp", "ck", "aio"])
def test_legacy_producer_to_modern_consumers(broker, new_topic, consumer):
    """Produce v2 (magic 1 message set, KIP-32 timestamps) is up-converted: modern
    consumers see the producer's timestamps, keys and values at contiguous offsets."""
    topic = new_topic()
    base = now_ms() - 300_000
    recs = make_records(25, base, step=1000, headers=False, prefix="legacy")
    recs[2].timestamp = base - 7_777  # out of order
    acks = produce("kp010", broker.bootstrap, topic, recs)
    assert [a.offset for a in acks] == list(range(25))
    got = consume(consumer, broker.bootstrap, topic, 25)
    assert_records_equal(got, recs, ts_type=CREATE_TIME, headers=True, who=f"kp010->{consumer}")


@pytest.mark.parametrize("producer", ["kp", "ck", "aio"])
def test_modern_producer_to_legacy_consumer(broker, new_topic, producer):
    """Fetch v2 on magic-2 data is down-converted to magic 1: the (0,10,0) consumer sees
    the CreateTime timestamps (headers cannot be represented and are dropped)."""
    topic = new_topic()
    base = now_ms() - 200_000
    recs = make_records(30, base, step=333, headers=True, prefix=producer)
    recs[7].timestamp = base - 1
    produce(producer, broker.bootstrap, topic, recs)
    got = consume("kp010", broker.bootstrap, topic, 30)
    assert_records_equal(got, recs, ts_type=CREATE_TIME, headers=False, who=f"{producer}->kp010")
    # and from the middle: a fetch offset inside a batch still starts at that offset
    got = consume("kp010", broker.bootstrap, topic, 10, start=20)
    assert_records_equal(got, recs[20:], start=20, ts_type=CREATE_TIME, headers=False,
                         who=f"{producer}->kp010 from offset 20")


def test_modern_consumer_mid_batch_start(broker, new_topic):
    """A fetch from an offset inside a multi-record batch: the consumer must see exactly
    the records from that offset on (clients drop the leading part of the batch)."""
    topic = new_topic()
    recs = make_records(50, now_ms() - 50_000, step=100, prefix="mid")
    produce("ck", broker.bootstrap, topic, recs, **{"linger.ms": 200})
    for client in ("kp", "ck", "aio"):
        got = consume(client, broker.bootstrap, topic, 17, start=33)
        assert_records_equal(got, recs[33:], start=33, who=f"{client} from 33")


@pytest.mark.parametrize("client", ["kp", "ck", "aio"])
def test_fetch_out_of_range_resets_to_earliest(broker, new_topic, client):
    """Fetching past the log end gets OFFSET_OUT_OF_RANGE (1); the client's
    auto.offset.reset=earliest then finds offset 0 with ListOffsets -2."""
    topic = new_topic()
    recs = make_records(5, now_ms() - 5_000, prefix="oor", headers=client != "kp010")
    produce("kp", broker.bootstrap, topic, recs)
    extra = {"auto.offset.reset": "earliest"} if client == "ck" else {}
    got = consume(client, broker.bootstrap, topic, 5, start=1_000, **extra)
    assert_records_equal(got, recs, who=f"{client} reset from 1000")
