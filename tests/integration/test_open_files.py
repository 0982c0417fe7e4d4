"""A broker with more segment files than ``log.open.files.max`` lets it hold open:
confluent-kafka produces to and consumes from every partition, searches by time, and a
clean restart and a SIGKILL restart keep every record, with the broker's descriptors
staying within the bound (plus its connections) throughout."""

from __future__ import annotations

import os

import pytest

from tests.integration.helpers import create_topic, start_broker, unique_topic

pytestmark = [pytest.mark.timeout(240)]

PARTITIONS = 60  # 60 active segments: 180 segment files, the bound is 24
BOUND = 24


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _value(tag, part, r):
    return b"%s-%d-%d-" % (tag, part, r) + b"x" * 200


def _produce(bootstrap, topic, rounds, tag):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2, "acks": "all", "batch.size": 1500})
    errors = []
    for r in range(rounds):
        for part in range(PARTITIONS):
            p.produce(topic, value=_value(tag, part, r), partition=part, timestamp=1_700_000_000_000 + r,
                      on_delivery=lambda err, msg: err and errors.append(err))
        p.poll(0)
    assert p.flush(60) == 0 and not errors


def _consume_all(bootstrap, topic, expect):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, part, 0) for part in range(PARTITIONS)])
    got: dict[int, list[bytes]] = {}
    import time

    deadline = time.monotonic() + 60
    while sum(map(len, got.values())) < expect and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                got.setdefault(m.partition(), []).append(m.value())
    # search by time in every partition: the time indexes, reopened on demand
    found = c.offsets_for_times([TopicPartition(topic, part, 1_700_000_000_000 + 3)
                                 for part in range(PARTITIONS)], timeout=30)
    c.close()
    return got, {tp.partition: tp.offset for tp in found}


def test_more_segment_files_than_the_bound(tmp_path):
    b = start_broker(tmp_path, {"log.open.files.max": BOUND, "num.partitions": 1,
                                "log.segment.bytes": 4096})  # several segments per partition
    try:
        topic = unique_topic("bounded")
        create_topic(b.bootstrap, topic, partitions=PARTITIONS)
        base = _fds(b.proc.pid)
        _produce(b.bootstrap, topic, 40, b"a")
        # sockets and the like aside, the broker's descriptors grew by at most the bound
        assert _fds(b.proc.pid) - base <= BOUND + 8
        got, by_time = _consume_all(b.bootstrap, topic, PARTITIONS * 40)
        for part in range(PARTITIONS):
            assert got[part] == [_value(b"a", part, r) for r in range(40)], part
            assert by_time[part] == 3
        segments = [n for n in os.listdir(b.log_dir / f"{topic}-0") if n.endswith(".log")]
        assert len(segments) > 1  # rolled: more files than one per partition

        b.stop()  # clean: every evicted file closed, trimmed and synced
        b.start()
        _produce(b.bootstrap, topic, 5, b"b")
        b.kill()  # unclean: recovery from the recovery points
        b.start()
        got, _ = _consume_all(b.bootstrap, topic, PARTITIONS * 45)
        for part in range(PARTITIONS):
            assert got[part] == ([_value(b"a", part, r) for r in range(40)]
                                 + [_value(b"b", part, r) for r in range(5)]), part
        assert "Traceback" not in b.log_path.read_text()
    finally:
        b.stop()
