"""Time-based retention works from record timestamps (KIP-32/33): a segment expires when
now - its largest timestamp > retention.ms; the log start offset advances, and ListOffsets
(earliest, by time) and Fetch follow it."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import (
    beginning_offset,
    consume,
    create_topic,
    end_offset,
    make_records,
    now_ms,
    offsets_for_times,
    produce,
    produce_batches,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

MIN = 60_000


@pytest.fixture
def retention_broker(broker_factory):
    return broker_factory({"auto.create.topics.enable": "false",
                           "log.retention.check.interval.ms": 300,
                           "log.segment.delete.delay.ms": 200})



def test_time_retention_deletes_expired_segments(retention_broker):
    b = retention_broker
    topic = create_topic(b.bootstrap, unique_topic("retention"),
                         {"retention.ms": 10 * MIN, "segment.ms": MIN})
    now = now_ms()
    stamps = produce_batches(b.bootstrap, topic, [
        (None, [now - 60 * MIN, now - 59 * MIN]),   # segment 0: expired
        ("gzip", [now - 30 * MIN, now - 29 * MIN, now - 31 * MIN]),  # segment 2: expired
        (None, [now - 1 * MIN]),                     # segment 5: kept
        (None, [now - 30 * 1000]),                   # same segment (30 s later)
    ])
    assert len(stamps) == 7
    wait_for(lambda: beginning_offset(b.bootstrap, topic) == 5, 15,
             "the log start offset to reach 5 (first two segments expired)")
    assert end_offset(b.bootstrap, topic) == 7
    pdir = b.partition_dir(topic)
    wait_for(lambda: not (pdir / ("0" * 20 + ".log")).exists(), 10, "segment 0's .log to be removed")
    got = consume("kp", b.bootstrap, topic, 2, start=0)  # out of range: reset to earliest
    assert [g.offset for g in got] == [5, 6]
    # search by time never answers below the log start offset
    t = now - 120 * MIN
    assert offsets_for_times("kp", b.bootstrap, topic, [t])[t] == (5, stamps[5])
    # appends continue normally
    acks = produce("kp", b.bootstrap, topic, make_records(1, now_ms(), prefix="after"))
    assert acks[0].offset == 7


def test_time_retention_everything_expired(retention_broker):
    """When every segment has expired, the active one is rolled and deleted too: the log
    is empty with log start = log end, and the next append continues the offsets."""
    b = retention_broker
    topic = create_topic(b.bootstrap, unique_topic("allexpired"), {"retention.ms": MIN})
    old = now_ms() - 30 * MIN
    produce("ck", b.bootstrap, topic, make_records(4, old, step=10, prefix="old"))
    wait_for(lambda: beginning_offset(b.bootstrap, topic) == 4, 15, "the log start offset to reach 4")
    assert end_offset(b.bootstrap, topic) == 4
    acks = produce("ck", b.bootstrap, topic, make_records(2, now_ms(), prefix="new"))
    assert [a.offset for a in acks] == [4, 5]
    got = consume("aio", b.bootstrap, topic, 2, start=4)
    assert [g.offset for g in got] == [4, 5]


def test_broker_level_retention_defaults_and_topic_overrides(broker_factory):
    """log.retention.minutes and log.roll.ms are the defaults of every topic without an
    override; a topic override (retention.ms=-1) wins over them (Kafka's precedence)."""
    b = broker_factory({"auto.create.topics.enable": "false",
                        "log.retention.check.interval.ms": 300,
                        "log.segment.delete.delay.ms": 100,
                        "log.retention.minutes": 10,
                        "log.roll.ms": MIN})
    defaults = create_topic(b.bootstrap, unique_topic("brokerdefaults"))
    keep = create_topic(b.bootstrap, unique_topic("override"), {"retention.ms": -1})
    now = now_ms()
    plan = [(None, [now - 60 * MIN]), (None, [now - 40 * MIN]), (None, [now - MIN])]
    for topic in (defaults, keep):
        assert len(produce_batches(b.bootstrap, topic, plan)) == 3
    # log.roll.ms=1 min: every batch above is more than a minute after the previous one
    assert len(list(b.partition_dir(defaults).glob("*.log"))) == 3
    wait_for(lambda: beginning_offset(b.bootstrap, defaults) == 2, 15,
             "log.retention.minutes=10 to expire the two old segments")
    time.sleep(1.0)  # several more retention passes
    assert beginning_offset(b.bootstrap, keep) == 0, "retention.ms=-1 on the topic must keep everything"
    assert end_offset(b.bootstrap, keep) == 3 and end_offset(b.bootstrap, defaults) == 3


def test_size_retention(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false",
                        "log.retention.check.interval.ms": 300,
                        "log.segment.delete.delay.ms": 100})
    topic = create_topic(b.bootstrap, unique_topic("bysize"),
                         {"segment.bytes": 50_000, "retention.bytes": 120_000, "retention.ms": -1})
    now = now_ms()
    for i in range(10):  # ~25 KB per call: about two appends per segment
        produce("ck", b.bootstrap, topic, make_records(100, now - 1000, value_size=200, prefix=f"s{i}"))
    pdir = b.partition_dir(topic)

    def log_bytes():
        return sum(p.stat().st_size for p in pdir.glob("*.log"))

    # ~250 KB were written (retention may already be at work while producing)
    assert end_offset(b.bootstrap, topic) == 1000
    wait_for(lambda: log_bytes() < 170_000, 15, "retention.bytes to delete old segments")
    total = log_bytes()
    assert total >= 120_000, f"size retention deleted too much: {total} bytes left, limit 120000"
    start = beginning_offset(b.bootstrap, topic)
    assert start > 0 and end_offset(b.bootstrap, topic) == 1000
    got = consume("ck", b.bootstrap, topic, 1000 - start, start=start)
    assert [g.offset for g in got] == list(range(start, 1000))
