"""The produce handler's compiled per-partition loop (broker/_produce.c) against its
Python path: the same random produce requests dispatched to two brokers, one with the
loop and one without, give the same answers byte for byte, the same segment, index and
checkpoint files, and the same per-topic metrics; and the loop does take most of them."""

from __future__ import annotations

import asyncio
import gzip
import os
import random
from pathlib import Path

import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder

from broker.context import BrokerContext
from broker.dispatcher import Dispatcher
from broker.handlers import produce
from broker.metrics import BrokerMetrics
from config.broker_config import load_broker_config
from protocol import codec
from protocol.messages import ProduceRequest, RequestHeader
from storage.clock import ManualClock
from storage.log_manager import LogManager

START_MS = 1_700_000_000_000

TOPICS = {  # name: (partitions, configs)
    "ct": (3, {"message.timestamp.type": "CreateTime", "index.interval.bytes": "300", "segment.bytes": "4000",
               "segment.ms": "20000"}),
    "lat": (2, {"message.timestamp.type": "LogAppendTime"}),
    "big": (1, {}),
    "__consumer_offsets": (1, {"cleanup.policy": "compact"}),  # internal: never produced to
}


class _Conn:
    _peer = "test:0"
    session = None
    peer_host = "/127.0.0.1"

    def close(self) -> None:  # pragma: no cover - only a framing error closes
        raise AssertionError("connection closed")


def _broker(log_dir: Path):
    cfg = load_broker_config(overrides=[f"log.dirs={log_dir}", "metrics.port=0"], env={}, warn=False)
    clock = ManualClock(START_MS)
    lm = LogManager(cfg, clock)
    lm.startup()
    for name, (n, configs) in TOPICS.items():
        lm.create_topic(name, n, configs)
    metrics = BrokerMetrics(process_metrics=False)
    ctx = BrokerContext(config=cfg, log_manager=lm, clock=clock, node_id=0, host="127.0.0.1", port=9092,
                        cluster_id="test", metrics=metrics)
    metrics.attach_state(lm, lambda: None, clock)
    return ctx, Dispatcher(ctx)


def _batch(rng: random.Random, now: int, pid=-1, epoch=-1, seq=-1, gz=False, txn=False) -> bytes:
    b = DefaultRecordBatchBuilder(magic=2, compression_type=1 if gz else 0, is_transactional=txn,
                                  producer_id=pid, producer_epoch=epoch, base_sequence=seq, batch_size=1 << 30)
    for i in range(rng.randint(1, 3)):
        ts = now - rng.randint(-2000, 60_000)  # some from the future: a negative append delay
        b.append(i, timestamp=ts, key=rng.choice([None, b"k%d" % rng.randint(0, 9)]),
                 value=os.urandom(rng.randint(0, 300)), headers=[])
    return bytes(b.build())


class _Producers:
    """Idempotent producers' next sequence per (producer, topic, partition)."""

    def __init__(self) -> None:
        self.seq: dict = {}
        self.last: dict = {}

    def batch(self, rng, now, topic, partition):
        pid = rng.choice([1000, 1001])
        key = (pid, topic, partition)
        kind = rng.random()
        if kind < 0.15 and key in self.last:
            return self.last[key]  # a retry: answered with the first offsets, not appended again
        seq = self.seq.get(key, 0)
        if kind < 0.22:
            seq += 3  # a gap: OUT_OF_ORDER_SEQUENCE_NUMBER, raised by the append
        b = _batch(rng, now, pid, 0, seq)
        if seq == self.seq.get(key, 0):
            count = int.from_bytes(b[57:61], "big")  # the v2 header's record count
            self.seq[key] = seq + count
            self.last[key] = b
        return b


def _records(rng, now, topic, partition, producers):
    kind = rng.random()
    if kind < 0.55:
        return _batch(rng, now)
    if kind < 0.75:
        return producers.batch(rng, now, topic, partition)
    if kind < 0.82:  # a corrupt CRC
        b = bytearray(_batch(rng, now))
        b[-1] ^= 0xFF
        return bytes(b)
    if kind < 0.88:
        return _batch(rng, now, gz=True)  # compressed: the validator's other path
    if kind < 0.92:
        return b""
    if kind < 0.95:
        return None
    if kind < 0.97:  # transactional, in a request without a transactional id: all of it refused
        return _batch(rng, now, 2000, 0, 0, txn=True)
    return _batch(rng, now)[:40]  # truncated


def _request(rng, now, producers, correlation_id):
    names = rng.sample(["ct", "ct", "lat", "big", "nope", "__consumer_offsets"], rng.randint(1, 3))
    topic_data = []
    for name in dict.fromkeys(names):
        parts = TOPICS.get(name, (1, None))[0]
        indices = rng.sample(range(parts + 1), rng.randint(1, parts + 1))  # parts: out of range
        topic_data.append(ProduceRequest.TopicProduceData(name=name, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=_records(rng, now, name, p, producers))
            for p in indices]))
    version = rng.choice([2, 3, 7, 9, 9, 9, 10, 11])
    req = ProduceRequest(transactional_id=None, acks=rng.choice([1, 1, -1, 0]), timeout_ms=30000,
                         topic_data=topic_data)
    header = RequestHeader(api_key=0, api_version=version, correlation_id=correlation_id, client_id="t")
    return bytes(codec.encode_request(header, req))[4:]


def _files(root: Path) -> dict:
    out = {}
    for path in root.rglob("*"):
        if path.is_file() and path.suffix in (".log", ".index", ".timeindex", ".snapshot") \
                or path.name in ("leader-epoch-checkpoint", "recovery-point-offset-checkpoint",
                                 "log-start-offset-checkpoint"):
            out[str(path.relative_to(root))] = path.read_bytes()
    return out


def _topic_series(metrics: BrokerMetrics) -> list[str]:
    return sorted(line for line in metrics.exposition().decode().splitlines()
                  if line.startswith(("chronolog_topic_", "chronolog_produce_append_delay")))


@pytest.mark.parametrize("compiled_side", ["run", "handle"])
def test_compiled_loop_matches_the_python_path(tmp_path, monkeypatch, compiled_side):
    """``run``: the compiled per-partition loop called by the Python handler; ``handle``:
    the whole request compiled (broker/_produce.c handle) where it can be, going on
    with the handler's loop where it stops."""
    assert _RUN is not None and _COMMON is not None, "broker/_produce.c is not built (make test builds it)"
    rng = random.Random(1729)
    compiled, python = _broker(tmp_path / "compiled"), _broker(tmp_path / "python")
    taken_by_python = {"compiled": 0, "python": 0}
    original = produce._append_one

    def counting(side):
        def append_one(*args, **kwargs):
            taken_by_python[side] += 1
            return original(*args, **kwargs)
        return append_one

    outcomes = {"answered": 0, "went on": 0, "not its case": 0}

    def common(*args):  # the compiled handle, its outcomes counted
        r = _COMMON(*args)
        outcomes["not its case" if r is produce._NOT_COMMON else "went on" if isinstance(r, tuple)
                 else "answered"] += 1
        return r

    producers = _Producers()
    loop = asyncio.new_event_loop()
    try:
        for i in range(400):
            now = START_MS + i * 250
            frame = _request(rng, now, producers, i)
            answers = []
            for side, (ctx, dispatcher) in (("compiled", compiled), ("python", python)):
                ctx.clock.advance(now - ctx.clock.time_ms())
                # a parked fetch on one partition: told of an append on both paths
                waiter = loop.create_future()
                ctx.wait_for_append([("ct", 1)], waiter)
                monkeypatch.setattr(produce, "_append_one", counting(side))
                monkeypatch.setattr(produce, "RUN", _RUN if side == "compiled" else None)
                monkeypatch.setattr(produce, "COMMON", common if side == "compiled" and compiled_side == "handle"
                                    else None)
                answers.append((dispatcher.dispatch(_Conn(), memoryview(bytearray(frame))), waiter.done()))
                ctx.forget_waiter([("ct", 1)], waiter)
            assert answers[0] == answers[1], f"request {i}"
    finally:
        loop.close()
    assert _files(tmp_path / "compiled") == _files(tmp_path / "python")
    assert _topic_series(compiled[0].metrics) == _topic_series(python[0].metrics)
    # partitions of every kind went through the Python path; the compiled loop took the
    # common ones (about a third of this mix) on its side
    assert taken_by_python["python"] > 1000
    assert 300 < taken_by_python["compiled"] < taken_by_python["python"] - 300
    if compiled_side == "handle":  # v3+ requests: whole, gone on with, left to the handler
        assert min(outcomes.values()) >= 10, outcomes


_RUN = produce.RUN
_COMMON = produce.COMMON


def test_a_one_topic_answer_is_made_again_only_when_nothing_else_holds_it(tmp_path):
    """broker/_produce.c keeps the last one-topic answer and makes it again for the next
    one-topic request when it alone holds the answer, its lists and its topic answer and
    no field was changed; the answer is then the next request's, field for field. Held,
    changed or grown anywhere but in the partitions' answers (which are replaced whole),
    it is left as it is and the next answer is a new one."""
    from protocol.messages import ProduceRequest

    ctx, _dispatcher = _broker(tmp_path)
    logs = ctx.log_manager.logs_by_key
    rng = random.Random(7)

    def req(*topics, acks=1):
        return ProduceRequest(transactional_id=None, acks=acks, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name=name, partition_data=[
                ProduceRequest.PartitionProduceData(index=p, records=bytearray(_batch(rng, START_MS)))
                for p in parts]) for name, parts in topics])

    def answer(*topics, acks=1):
        r = _COMMON(req(*topics, acks=acks), logs, START_MS, None, None, None)
        assert r is None or not isinstance(r, tuple) and r is not produce._NOT_COMMON, r
        return r

    def fields(a):
        return (a.throttle_time_ms, a.node_endpoints, a._unknown_tags,
                [(t.name, t._unknown_tags, [(p.index, p.error_code, p.base_offset, p.log_start_offset,
                                              p.record_errors, p.error_message)
                                             for p in t.partition_responses]) for t in a.responses])

    def offsets(name, parts):
        return [logs[(name, p)].log_end_offset for p in parts]

    first = answer(("ct", [0, 1]))
    kept_id = id(first)
    del first  # nothing else holds it: made again
    before = offsets("big", [0])
    again = answer(("big", [0]))
    assert id(again) == kept_id
    assert fields(again) == (0, [], None, [("big", None, [(0, 0, before[0], 0, [], None)])])

    held = again  # held: the next answer is another object, and this one is left alone
    other = answer(("ct", [2]))
    assert other is not held and fields(held)[3][0][0] == "big" and fields(other)[3][0][0] == "ct"
    del held, again, other

    changes = (lambda a: setattr(a, "throttle_time_ms", 100),
                   lambda a: a.node_endpoints.append(ProduceRequest),
                   lambda a: setattr(a, "_unknown_tags", {9: b"x"}),
                   lambda a: setattr(a.responses[0], "_unknown_tags", {9: b"x"}),
                   lambda a: a.responses.append(a.responses[0]))
    for change in changes:
        a = answer(("ct", [0]))
        changed_id = id(a)
        change(a)
        del a
        b = answer(("lat", [1]))
        assert id(b) != changed_id, changes.index(change)
        assert fields(b)[:3] == (0, [], None) and [t.name for t in b.responses] == ["lat"]
        del b

    a = answer(("ct", [0]))  # its partitions' answers are replaced whole: a grown list is no matter
    a.responses[0].partition_responses.append(a.responses[0].partition_responses[0])
    a_id = id(a)
    del a
    b = answer(("ct", [1]))
    assert id(b) == a_id and [p.index for p in b.responses[0].partition_responses] == [1]
    del b

    a = answer(("ct", [0]))
    topic_answer = a.responses[0]  # a part of it held: not made again
    a_id = id(a)
    del a
    b = answer(("ct", [1]))
    assert id(b) != a_id and topic_answer.name == "ct" and topic_answer.partition_responses[0].index == 0
    del b, topic_answer

    a = answer(("ct", [0]), ("big", [0]))  # two topics: not kept, not made from the kept one
    assert [t.name for t in a.responses] == ["ct", "big"]
    assert answer(("ct", [0]), acks=0) is None


def test_a_topic_not_among_the_writable_ones_leaves_the_request_to_the_python_path(tmp_path):
    """With ``writable`` (the topics the authorizer allowed the connection to write), a
    request naming any other topic is ``not_common`` before anything is appended, even
    when its other topics are writable; one whose topics all are is answered."""
    from protocol.messages import ProduceRequest

    ctx, _dispatcher = _broker(tmp_path)
    logs = ctx.log_manager.logs_by_key
    rng = random.Random(9)

    def req(*names):
        return ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name=name, partition_data=[
                ProduceRequest.PartitionProduceData(index=0, records=bytearray(_batch(rng, START_MS)))])
            for name in names])

    def ends():
        return [logs[(name, 0)].log_end_offset for name in ("ct", "lat", "big")]

    before = ends()
    assert _COMMON(req("ct", "big"), logs, START_MS, None, None, None, {"ct", "lat"}) is produce._NOT_COMMON
    assert _COMMON(req("big"), logs, START_MS, None, None, None, set()) is produce._NOT_COMMON
    assert ends() == before  # nothing appended, the writable topic's partition neither
    r = _COMMON(req("ct", "lat"), logs, START_MS, None, None, None, frozenset({"ct", "lat"}))
    assert [p.error_code for t in r.responses for p in t.partition_responses] == [0, 0]
    assert ends()[:2] != before[:2] and ends()[2] == before[2]
    r = _COMMON(req("big"), logs, START_MS, None, None, None, None)  # None: nothing asked
    assert r.responses[0].partition_responses[0].error_code == 0
    with pytest.raises(TypeError, match="writable a set or None"):
        _COMMON(req("ct"), logs, START_MS, None, None, None, ["ct"])
