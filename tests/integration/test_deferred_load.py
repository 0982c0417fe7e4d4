"""After a clean stop, a broker of many partitions listens at once and loads them behind:
clients produced to every partition, the broker restarts, and a consumer reading every
partition right away (some partitions loaded on demand, the others in the background)
gets every record, and a producer appends after them."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import (consume_partitions, create_topic, produce_to_partitions, start_broker,
                                       unique_topic)

pytestmark = [pytest.mark.timeout(240)]

PARTITIONS = 300


def _produce(bootstrap, topic, tag):
    produce_to_partitions(bootstrap, topic, [(part, b"%s-%d" % (tag, part), None) for part in range(PARTITIONS)])


def _read_all(bootstrap, topic, expect):
    return consume_partitions(bootstrap, topic, PARTITIONS, expect, timeout=90)


def test_restart_serves_before_every_partition_is_loaded(tmp_path):
    b = start_broker(tmp_path, {"num.partitions": 1})
    try:
        topic = unique_topic("deferred")
        create_topic(b.bootstrap, topic, partitions=PARTITIONS)
        _produce(b.bootstrap, topic, b"a")
        b.stop()
        b.start()
        text = b.log_path.read_text()
        this_start = text[text.rfind("===== start #2"):]
        assert "load in the background" in this_start  # deferred, not loaded before listening
        _produce(b.bootstrap, topic, b"b")
        got = _read_all(b.bootstrap, topic, 2 * PARTITIONS)
        assert got == {part: [b"a-%d" % part, b"b-%d" % part] for part in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while "heap settled" not in b.log_path.read_text()[len(text) - len(this_start):]:
            assert time.monotonic() < deadline, "the background load did not finish"
            time.sleep(0.1)
        # what the broker is made of, out of the cyclic collector's reach once loaded
        # (broker.server.settle_heap): not before every partition is
        loaded = b.log_path.read_text()[len(text) - len(this_start):]
        assert loaded.index("partition log(s) loaded") < loaded.index("heap settled")
        b.stop()
        b.start()  # and the checkpoints written meanwhile hold: a clean start again
        got = _read_all(b.bootstrap, topic, 2 * PARTITIONS)
        assert got == {part: [b"a-%d" % part, b"b-%d" % part] for part in range(PARTITIONS)}
        assert "Traceback" not in b.log_path.read_text()
    finally:
        b.stop()


def test_a_large_topic_is_answered_at_once_and_made_behind(tmp_path):
    """CreateTopics of a large topic returns when the topic exists; its partitions are
    made on first use and in the background. A SIGKILL right after the creation, before
    they are all made, leaves a topic whose every partition works after the restart, and
    no warning of missing partitions."""
    b = start_broker(tmp_path, {"num.partitions": 1})
    try:
        topic = unique_topic("large")
        create_topic(b.bootstrap, topic, partitions=PARTITIONS)
        made = len([d for d in b.log_dir.iterdir() if d.name.startswith(topic + "-")])
        b.kill()
        assert made < PARTITIONS  # answered before every partition was made
        b.start()
        _produce(b.bootstrap, topic, b"a")
        got = _read_all(b.bootstrap, topic, PARTITIONS)
        assert got == {part: [b"a-%d" % part] for part in range(PARTITIONS)}
        deadline = time.monotonic() + 60
        while len([d for d in b.log_dir.iterdir() if d.name.startswith(topic + "-")]) < PARTITIONS:
            assert time.monotonic() < deadline, "the partitions were not made in the background"
            time.sleep(0.1)
        b.stop()
        b.start()
        got = _read_all(b.bootstrap, topic, PARTITIONS)
        assert got == {part: [b"a-%d" % part] for part in range(PARTITIONS)}
        text = b.log_path.read_text()
        assert "is missing" not in text and "Traceback" not in text
    finally:
        b.stop()
