"""A broker with more segment files than ``log.open.files.max`` lets it hold open:
confluent-kafka produces to and consumes from every partition, searches by time, and a
clean restart and a SIGKILL restart keep every record, with the broker's descriptors
staying within the bound (plus its connections) throughout."""

from __future__ import annotations

import os

import pytest

from tests.integration.helpers import (consume_partitions, create_topic, produce_to_partitions, start_broker,
                                       unique_topic)

pytestmark = [pytest.mark.timeout(240)]

PARTITIONS = 60  # 60 active segments: 180 segment files, the bound is 24
BOUND = 24


def _fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def _value(tag, part, r):
    return b"%s-%d-%d-" % (tag, part, r) + b"x" * 200


def _produce(bootstrap, topic, rounds, tag):
    produce_to_partitions(bootstrap, topic, [(part, _value(tag, part, r), 1_700_000_000_000 + r)
                                             for r in range(rounds) for part in range(PARTITIONS)],
                          **{"linger.ms": 2, "batch.size": 1500})


def _offsets_for_times(bootstrap, topic, ts):
    """Search by time in every partition: the time indexes, reopened on demand."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g")})
    found = c.offsets_for_times([TopicPartition(topic, part, ts) for part in range(PARTITIONS)], timeout=30)
    c.close()
    return {tp.partition: tp.offset for tp in found}


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
        got = consume_partitions(b.bootstrap, topic, PARTITIONS, PARTITIONS * 40)
        by_time = _offsets_for_times(b.bootstrap, topic, 1_700_000_000_000 + 3)
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
        got = consume_partitions(b.bootstrap, topic, PARTITIONS, PARTITIONS * 45)
        for part in range(PARTITIONS):
            assert got[part] == ([_value(b"a", part, r) for r in range(40)]
                                 + [_value(b"b", part, r) for r in range(5)]), part
        assert "Traceback" not in b.log_path.read_text()
    finally:
        b.stop()
