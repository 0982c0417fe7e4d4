"""A fetch of a consumer at the log's end parks without making its empty answer
(broker/handlers/fetch.py ``_at_the_end``). That shortcut is only right if the read it
skips would have answered every partition with no records and no error: random requests
(unknown topics and ids, denied topics, partitions out of range, offsets around the log
end, leader epochs, last fetched epochs, versions, isolation levels) are checked against
``_read_all``, the reference, on a real log manager."""

from __future__ import annotations

import random
import uuid

import pytest

from broker.context import BrokerContext
from broker.handlers import fetch as F
from config.broker_config import load_broker_config
from protocol.messages import FetchRequest
from protocol.records import build_batch
from storage.clock import ManualClock
from storage.log_manager import LogManager

NOW = 1_700_000_000_000


@pytest.fixture
def ctx(tmp_path):
    cfg = load_broker_config(overrides=[f"log.dirs={tmp_path}", "metrics.port=0"], env={}, warn=False)
    lm = LogManager(cfg, ManualClock(NOW))
    lm.startup()
    lm.create_topic("a", 3)
    lm.create_topic("b", 1)
    for p, n in ((0, 5), (1, 1), (2, 0)):
        for i in range(n):
            lm.get_log("a", p).append_produced(bytearray(build_batch([(NOW, None, b"v%d" % i)])), NOW)
    yield BrokerContext(config=cfg, log_manager=lm, clock=lm.clock, node_id=0, host="127.0.0.1", port=9092,
                        cluster_id="test")
    lm.shutdown()


def _request(rng, lm, version):
    topics = []
    for _ in range(rng.randint(0, 3)):
        name = rng.choice(["a", "a", "b", "zz", None])
        parts = []
        for _ in range(rng.randint(0, 3)):
            index = rng.choice([0, 1, 2, 3]) if name == "a" else rng.choice([0, 0, 1])
            try:
                leo = lm.get_log(name, index).log_end_offset
            except Exception:  # noqa: BLE001 - an unknown topic or partition: any offset
                leo = 0
            parts.append(FetchRequest.FetchPartition(
                partition=index, current_leader_epoch=rng.choice([-1, -1, 0, 1]),
                fetch_offset=rng.choice([leo, leo, leo - 1, leo + 1, 0]), log_start_offset=-1,
                last_fetched_epoch=rng.choice([-1, -1, 0]), partition_max_bytes=1 << 20))
        t = FetchRequest.FetchTopic(topic=name, topic_id=uuid.uuid4() if name is None else uuid.UUID(int=0),
                                    partitions=parts)
        topics.append(t)
    return FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20,
                        isolation_level=rng.choice([0, 1]), session_id=0, session_epoch=-1, topics=topics,
                        forgotten_topics_data=[], rack_id="")


@pytest.mark.parametrize("seed", range(5))
def test_a_fetch_parked_at_once_is_one_the_read_would_answer_empty(ctx, seed):
    rng = random.Random(seed)
    lm = ctx.log_manager
    parked = 0
    for _ in range(400):
        version = rng.choice([4, 7, 9, 11, 12, 13, 15, 16])
        request = _request(rng, lm, version)
        denied = frozenset(rng.sample(["a", "b"], rng.randint(0, 1))) if rng.random() < 0.3 else frozenset()
        if not F._at_the_end(ctx, version, request, denied):
            continue
        parked += 1
        response, total, had_error = F._read_all(ctx, version, request, denied)
        assert total == 0 and not had_error
        assert all(p.error_code == 0 and not p.records for t in response.responses for p in t.partitions)
    assert parked > 20  # the shortcut is taken, not only refused


def test_the_plain_consumer_at_the_end_is_taken_and_one_record_behind_is_not(ctx):
    lm = ctx.log_manager

    def one(offset, epoch=-1):
        return FetchRequest(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                            session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="", topics=[
                                FetchRequest.FetchTopic(topic="a", partitions=[FetchRequest.FetchPartition(
                                    partition=0, current_leader_epoch=epoch, fetch_offset=offset,
                                    log_start_offset=-1, partition_max_bytes=1 << 20)])])

    leo = lm.get_log("a", 0).log_end_offset
    assert F._at_the_end(ctx, 11, one(leo), frozenset())
    assert not F._at_the_end(ctx, 11, one(leo - 1), frozenset())  # a record to read
    assert not F._at_the_end(ctx, 11, one(leo, epoch=7), frozenset())  # an epoch error to answer
    assert not F._at_the_end(ctx, 11, one(leo), frozenset({"a"}))  # denied: answered at once
