"""Idempotent producers against a real broker: stock clients with idempotence on, and
retries injected by sending the same Produce request bytes twice on a raw socket."""

from __future__ import annotations

import os

import pytest

from protocol import codec
from protocol import records as R
from protocol.messages import InitProducerIdRequest, ProduceRequest, RequestHeader
from tests.integration.helpers import RawConn, create_topic, end_offset, now_ms, unique_topic

NONE, OUT_OF_ORDER, INVALID_EPOCH, INVALID_TXN_STATE, TXN_ID_AUTH, INVALID_REQUEST = 0, 45, 47, 48, 53, 42
INVALID_PRODUCER_ID_MAPPING = 49


def _request(api_key, version, cid, body) -> bytes:
    return codec.encode_request(RequestHeader(api_key=api_key, api_version=version, correlation_id=cid,
                                              client_id="it-idempotence"), body)


def _call(conn: RawConn, api_key, version, cid, body):
    conn.send(_request(api_key, version, cid, body))
    got_cid, resp = codec.decode_response(api_key, version, conn.recv_frame())
    assert got_cid == cid
    return resp


def produce_body(topic: str, records: bytes, transactional_id=None, acks=-1) -> ProduceRequest:
    return ProduceRequest(transactional_id=transactional_id, acks=acks, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])


def produce_raw(conn, topic, records: bytes, cid: int, version: int = 8, **kw):
    """-> (error_code, base_offset, log_append_time, log_start_offset) of partition 0."""
    resp = _call(conn, 0, version, cid, produce_body(topic, records, **kw))
    p = resp.responses[0].partition_responses[0]
    return p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset


def init_producer_id(conn, cid, version=4, producer_id=-1, producer_epoch=-1, transactional_id=None):
    resp = _call(conn, 22, version, cid, InitProducerIdRequest(
        transactional_id=transactional_id, transaction_timeout_ms=60_000, producer_id=producer_id,
        producer_epoch=producer_epoch))
    return resp.error_code, resp.producer_id, resp.producer_epoch


def pbatch(pid, epoch, seq, n=2, ts=None, txn=False, tag=b"") -> bytes:
    ts = now_ms() if ts is None else ts
    return R.build_batch([(ts, b"k", tag + b"v%d" % (seq + i)) for i in range(n)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def stored_batches(partition_dir) -> list[R.BatchHeader]:
    out = []
    for name in sorted(os.listdir(partition_dir)):
        if name.endswith(".log"):
            data = open(os.path.join(partition_dir, name), "rb").read()
            out.extend(h for _pos, h in R.iter_batches(data))
    return out


def values(bootstrap, topic, n):
    from tests.integration.helpers import consume_kp

    return [g.value for g in consume_kp(bootstrap, topic, n)]


# ----------------------------------------------------------------------------- stock clients


def test_confluent_kafka_idempotent_producer(broker, new_topic):
    from confluent_kafka import Producer

    topic = new_topic()
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 2,
                  "batch.num.messages": 7, "message.timeout.ms": 30_000})
    errors, offsets = [], []

    def cb(err, msg):
        if err is not None:
            errors.append(err)
        else:
            offsets.append(msg.offset())

    for i in range(100):
        p.produce(topic, value=b"ck%d" % i, partition=0, on_delivery=cb)
        if i % 10 == 0:
            p.poll(0)
    assert p.flush(30) == 0
    assert errors == []
    assert sorted(offsets) == list(range(100))
    batches = stored_batches(broker.partition_dir(topic))
    assert len(batches) > 1 and all(b.producer_id >= 0 for b in batches)
    seqs = [(b.base_sequence, b.records_count) for b in batches]
    assert [s for s, _ in seqs] == [sum(n for _, n in seqs[:i]) for i in range(len(seqs))]  # contiguous
    assert values(broker.bootstrap, topic, 100) == [b"ck%d" % i for i in range(100)]


def test_kafka_python_idempotent_producer(broker, new_topic):
    from tests.integration.helpers import kp_producer

    topic = new_topic()
    p = kp_producer(broker.bootstrap, enable_idempotence=True, acks="all", linger_ms=2, batch_size=200)
    try:
        futs = [p.send(topic, value=b"kp%d" % i, partition=0) for i in range(60)]
        p.flush(timeout=30)
        offsets = [f.get(timeout=30).offset for f in futs]
    finally:
        p.close(timeout=10)
    assert offsets == list(range(60))
    batches = stored_batches(broker.partition_dir(topic))
    assert batches and all(b.producer_id >= 0 and b.producer_epoch >= 0 for b in batches)
    assert batches[0].base_sequence == 0
    assert values(broker.bootstrap, topic, 60) == [b"kp%d" % i for i in range(60)]


# ----------------------------------------------------------------------------- raw retries


def test_resent_produce_request_gets_the_first_base_offset(broker, new_topic):
    topic = new_topic()
    with RawConn(broker.port) as c:
        err, pid, epoch = init_producer_id(c, 1)
        assert err == NONE and pid >= 0 and epoch == 0
        assert produce_raw(c, topic, R.build_batch([(now_ms(), None, b"plain")]), 2)[:2] == (NONE, 0)
        batch = pbatch(pid, epoch, 0, n=3)
        request = _request(0, 8, 3, produce_body(topic, batch))
        c.send(request)
        first = codec.decode_response(0, 8, c.recv_frame())[1].responses[0].partition_responses[0]
        c.send(request)  # the same bytes again: a retry after a lost answer
        second = codec.decode_response(0, 8, c.recv_frame())[1].responses[0].partition_responses[0]
    assert (first.error_code, first.base_offset) == (NONE, 1)
    assert (second.error_code, second.base_offset, second.log_start_offset) == (NONE, 1, 0)
    assert end_offset(broker.bootstrap, topic) == 4
    headers = stored_batches(broker.partition_dir(topic))
    assert [(h.base_offset, h.producer_id, h.base_sequence) for h in headers] == [(0, -1, -1), (1, pid, 0)]
    assert values(broker.bootstrap, topic, 4) == [b"plain", b"v0", b"v1", b"v2"]


def test_duplicate_of_an_older_in_flight_batch(broker, new_topic):
    topic = new_topic()
    with RawConn(broker.port) as c:
        _err, pid, epoch = init_producer_id(c, 1)
        firsts = [produce_raw(c, topic, pbatch(pid, epoch, 2 * i), 10 + i)[1] for i in range(5)]
        assert firsts == [0, 2, 4, 6, 8]
        # batches 1..4 re-sent (as after a connection loss with 5 in flight)
        again = [produce_raw(c, topic, pbatch(pid, epoch, 2 * i), 20 + i)[:2] for i in range(1, 5)]
    assert again == [(NONE, 2), (NONE, 4), (NONE, 6), (NONE, 8)]
    assert end_offset(broker.bootstrap, topic) == 10


def test_log_append_time_topic_duplicate_answers_the_first_append_time(broker, new_topic):
    topic = new_topic({"message.timestamp.type": "LogAppendTime"})
    with RawConn(broker.port) as c:
        _err, pid, epoch = init_producer_id(c, 1)
        batch = pbatch(pid, epoch, 0)
        e1, b1, t1, _ = produce_raw(c, topic, batch, 2)
        import time

        time.sleep(0.05)
        e2, b2, t2, _ = produce_raw(c, topic, batch, 3)
    assert (e1, b1, e2, b2) == (NONE, 0, NONE, 0)
    assert t1 > 0 and t2 == t1


def test_out_of_order_sequence_is_answered(broker, new_topic):
    topic = new_topic()
    with RawConn(broker.port) as c:
        _err, pid, epoch = init_producer_id(c, 1)
        assert produce_raw(c, topic, pbatch(pid, epoch, 0), 2)[:2] == (NONE, 0)
        assert produce_raw(c, topic, pbatch(pid, epoch, 5), 3)[:2] == (OUT_OF_ORDER, -1)
        assert produce_raw(c, topic, pbatch(pid, epoch, 2), 4)[:2] == (NONE, 2)
    assert end_offset(broker.bootstrap, topic) == 4


def test_epoch_fencing(broker, new_topic):
    topic = new_topic()
    with RawConn(broker.port) as c:
        _err, pid, _ = init_producer_id(c, 1)
        assert produce_raw(c, topic, pbatch(pid, 1, 0), 2)[:2] == (NONE, 0)
        assert produce_raw(c, topic, pbatch(pid, 0, 2), 3)[:2] == (INVALID_EPOCH, -1)
        assert produce_raw(c, topic, pbatch(pid, 2, 2), 4)[:2] == (OUT_OF_ORDER, -1)  # new epoch: from 0
        assert produce_raw(c, topic, pbatch(pid, 2, 0), 5)[:2] == (NONE, 2)
        assert produce_raw(c, topic, pbatch(pid, 1, 2), 6)[:2] == (INVALID_EPOCH, -1)
    assert end_offset(broker.bootstrap, topic) == 4


def test_transactional_batches(broker, new_topic):
    """Transactional batches need a transactional id that holds the producer id and a
    partition added to its transaction (KIP-890 verification); nothing is appended
    otherwise."""
    topic = new_topic()
    with RawConn(broker.port) as c:
        _err, pid, epoch = init_producer_id(c, 1)
        assert produce_raw(c, topic, pbatch(pid, epoch, 0, txn=True), 2)[:2] == (TXN_ID_AUTH, -1)
        # an idempotent producer id is not the transactional id's
        assert produce_raw(c, topic, pbatch(pid, epoch, 0, txn=True), 3,
                           transactional_id="tx-unknown")[:2] == (INVALID_PRODUCER_ID_MAPPING, -1)
        err, tpid, tepoch = init_producer_id(c, 4, transactional_id="tx-batches")
        assert err == NONE and tpid >= 0 and tepoch == 0
        # the partition was never added to a transaction
        assert produce_raw(c, topic, pbatch(tpid, tepoch, 0, txn=True), 5,
                           transactional_id="tx-batches")[:2] == (INVALID_TXN_STATE, -1)
        # an older epoch of the transactional id's producer
        err, _pid, tepoch2 = init_producer_id(c, 6, transactional_id="tx-batches")
        assert err == NONE and tepoch2 == tepoch + 1
        assert produce_raw(c, topic, pbatch(tpid, tepoch, 0, txn=True), 7,
                           transactional_id="tx-batches")[:2] == (INVALID_EPOCH, -1)
    assert end_offset(broker.bootstrap, topic) == 0


def test_init_producer_id_as_kafka_without_transactional_id(broker):
    with RawConn(broker.port) as c:
        err, pid, epoch = init_producer_id(c, 1)
        assert (err, epoch) == (NONE, 0)
        # naming the current id and epoch (librdkafka's KIP-360 bump): a new id, epoch 0
        err2, pid2, epoch2 = init_producer_id(c, 2, producer_id=pid, producer_epoch=epoch)
        assert (err2, epoch2) == (NONE, 0) and pid2 not in (pid, -1)
        assert init_producer_id(c, 3, producer_id=pid, producer_epoch=-1)[0] == INVALID_REQUEST
        assert init_producer_id(c, 4, producer_id=-1, producer_epoch=3)[0] == INVALID_REQUEST


# ----------------------------------------------------------------------------- restarts


@pytest.mark.parametrize("graceful", [True, False], ids=["clean-restart", "sigkill"])
def test_duplicates_recognised_after_restart(broker_factory, graceful):
    b = broker_factory({"log.segment.bytes": "600"})
    topic = create_topic(b.bootstrap, unique_topic("idem-restart"))
    with RawConn(b.port) as c:
        _err, pid, epoch = init_producer_id(c, 1)
        batches = [pbatch(pid, epoch, 2 * i, tag=b"x" * 60) for i in range(8)]
        bases = [produce_raw(c, topic, bt, 10 + i)[1] for i, bt in enumerate(batches)]
    assert bases == [2 * i for i in range(8)]
    assert len([f for f in os.listdir(b.partition_dir(topic)) if f.endswith(".log")]) > 2
    b.restart(graceful=graceful)
    with RawConn(b.port) as c:
        for i in (7, 5, 3):  # the last 5 batches are still known, whichever segment they are in
            assert produce_raw(c, topic, batches[i], 30 + i)[:2] == (NONE, bases[i])
        assert produce_raw(c, topic, pbatch(pid, epoch, 20), 40)[:2] == (OUT_OF_ORDER, -1)
        assert produce_raw(c, topic, pbatch(pid, epoch, 16), 41)[:2] == (NONE, 16)
    assert end_offset(b.bootstrap, topic) == 18
    snaps = [f for f in os.listdir(b.partition_dir(topic)) if f.endswith(".snapshot")]
    assert snaps, "producer snapshots are written"
