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
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

MIN = 60_000


@pytest.fixture
def retention_broker(broker_factory):
    return broker_factory({"auto.create.topics.enable": "false",
                           "log.retention.check.interval.ms": 300,
                           "log.segment.delete.delay.ms": 200})


def wait_for(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(0.2)


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
