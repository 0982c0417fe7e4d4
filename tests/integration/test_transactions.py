"""Transactions against a real broker with stock clients: confluent-kafka, kafka-python,
aiokafka and kafkajs commit and abort, read_committed and read_uncommitted consumers
side by side, ``send_offsets_to_transaction``, zombie fencing, the broker aborting a
transaction past its timeout, a broker SIGKILLed mid-transaction, and the admin APIs
(DescribeTransactions, ListTransactions, DescribeProducers) and bad input on the wire."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from protocol import codec
from protocol.errors import ErrorCode
from protocol.messages import (AddPartitionsToTxnRequest, DescribeProducersRequest, DescribeTransactionsRequest,
                               EndTxnRequest, InitProducerIdRequest, ListTransactionsRequest, RequestHeader)
from tests.integration.helpers import REPO_ROOT, RawConn, create_topic, unique_topic

FAST = {"group.initial.rebalance.delay.ms": 0}


def _producer(bootstrap, tid, **kw):
    p = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid, "linger.ms": 5, **kw})
    p.init_transactions(30)
    return p


def _read(bootstrap, topic, isolation, partitions=1, idle=3.0, limit=30.0) -> list[bytes]:
    """Every value a consumer with ``isolation`` reads from the start, in offset order
    per partition (partitions concatenated)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("reader"), "enable.auto.commit": False,
                  "isolation.level": isolation, "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    got: dict[int, list] = {p: [] for p in range(partitions)}
    last = time.monotonic()
    deadline = last + limit
    try:
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            got[m.partition()].append(m.value())
            last = time.monotonic()
    finally:
        c.close()
    return [v for p in range(partitions) for v in got[p]]


def _call(port, api_key, version, body, cid=1):
    with RawConn(port) as conn:
        conn.send(codec.encode_request(RequestHeader(api_key=api_key, api_version=version, correlation_id=cid,
                                                     client_id="it-transactions"), body))
        got, resp = codec.decode_response(api_key, version, conn.recv_frame())
        assert got == cid
        return resp


def test_confluent_commit_and_abort_with_both_isolation_levels(broker, new_topic):
    topic = new_topic(partitions=3)
    p = _producer(broker.bootstrap, unique_topic("ck-tx"))
    p.begin_transaction()
    for i in range(30):
        p.produce(topic, value=b"c%02d" % i, partition=i % 3)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(9):
        p.produce(topic, value=b"a%02d" % i, partition=i % 3)
    p.flush(10)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"last", partition=0)
    p.commit_transaction(30)
    committed = _read(broker.bootstrap, topic, "read_committed", 3)
    uncommitted = _read(broker.bootstrap, topic, "read_uncommitted", 3)
    assert sorted(committed) == sorted([b"c%02d" % i for i in range(30)] + [b"last"])
    assert sorted(uncommitted) == sorted(committed + [b"a%02d" % i for i in range(9)])
    # 30 + 9 + 1 records and a marker per partition per transaction (3 + 3 + 1)
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "wm", "isolation.level": "read_committed"})
    ends = [c.get_watermark_offsets(TopicPartition(topic, part), timeout=10)[1] for part in range(3)]
    c.close()
    assert sum(ends) == 40 + 7


def test_confluent_consume_transform_produce_with_send_offsets(broker, new_topic):
    src, dst = new_topic(partitions=2, suffix="-in"), new_topic(suffix="-out")
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(40):
        plain.produce(src, value=b"%d" % i, partition=i % 2)
    plain.flush(10)
    group = unique_topic("eos-group")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.subscribe([src])
    p = _producer(broker.bootstrap, unique_topic("eos"))
    done, deadline = 0, time.monotonic() + 60
    while done < 40 and time.monotonic() < deadline:
        msgs = [m for m in c.consume(10, 1.0) if not m.error()]
        if not msgs:
            continue
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, value=b"x" + m.value())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 30)
        p.commit_transaction(30)
        done += len(msgs)
    committed = c.committed([TopicPartition(src, 0), TopicPartition(src, 1)], 10)
    c.close()
    assert done == 40
    assert sorted(tp.offset for tp in committed) == [20, 20]
    assert sorted(_read(broker.bootstrap, dst, "read_committed")) == sorted(b"x%d" % i for i in range(40))


def test_zombie_producer_is_fenced_and_its_open_transaction_aborted(broker, new_topic):
    topic = new_topic()
    tid = unique_topic("zombie")
    old = _producer(broker.bootstrap, tid)
    old.begin_transaction()
    old.produce(topic, value=b"zombie-open")
    old.flush(10)
    new = _producer(broker.bootstrap, tid)  # aborts the open transaction, fences `old`
    with pytest.raises(KafkaException) as err:
        old.produce(topic, value=b"zombie-late")
        old.commit_transaction(10)
    assert err.value.args[0].fatal() or err.value.args[0].txn_requires_abort()
    new.begin_transaction()
    new.produce(topic, value=b"fresh")
    new.commit_transaction(30)
    assert _read(broker.bootstrap, topic, "read_committed") == [b"fresh"]


def test_the_broker_aborts_a_transaction_past_its_timeout(broker_factory):
    b = broker_factory({**FAST, "transaction.abort.timed.out.transaction.cleanup.interval.ms": 200})
    topic = create_topic(b.bootstrap, unique_topic("txn-timeout"))
    p = _producer(b.bootstrap, "slow", **{"transaction.timeout.ms": 1500})
    p.begin_transaction()
    p.produce(topic, value=b"too-slow")
    p.flush(10)
    time.sleep(3)
    with pytest.raises(KafkaException):
        p.commit_transaction(10)
    assert "aborting the transaction of transactional id 'slow'" in b.log_text()
    # the LSO moved on: a new instance commits and read_committed sees just that
    p2 = _producer(b.bootstrap, "slow")
    p2.begin_transaction()
    p2.produce(topic, value=b"on-time")
    p2.commit_transaction(30)
    assert _read(b.bootstrap, topic, "read_committed") == [b"on-time"]
    assert _read(b.bootstrap, topic, "read_uncommitted") == [b"too-slow", b"on-time"]


def test_a_transaction_survives_a_broker_sigkill(broker_factory):
    b = broker_factory(FAST)
    topic = create_topic(b.bootstrap, unique_topic("txn-kill"))
    p = _producer(b.bootstrap, "killed")
    p.begin_transaction()
    p.produce(topic, value=b"committed")
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(10)
    b.kill()
    b.restart(graceful=False)
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    # after recovery the open transaction holds the LSO at its first offset (2)
    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level="read_committed")
    assert kc.end_offsets([KTP(topic, 0)])[KTP(topic, 0)] == 2
    kc.close()
    assert _read(b.bootstrap, topic, "read_committed") == [b"committed"]
    # a new instance of the producer aborts it; then the LSO is the log end
    p2 = _producer(b.bootstrap, "killed")
    p2.begin_transaction()
    p2.produce(topic, value=b"after")
    p2.commit_transaction(30)
    assert _read(b.bootstrap, topic, "read_committed") == [b"committed", b"after"]
    assert _read(b.bootstrap, topic, "read_uncommitted") == [b"committed", b"open", b"after"]


def test_kafka_python_transactions_and_read_committed_end_offsets(broker, new_topic):
    from kafka import KafkaConsumer, KafkaProducer
    from kafka import TopicPartition as KTP

    topic = new_topic()
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique_topic("kp-tx"))
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send(topic, b"c%d" % i)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, b"pending")
    p.flush()
    tp = KTP(topic, 0)
    rc = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed")
    ru = KafkaConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_uncommitted")
    # ListOffsets: read_committed answers the LSO (the open transaction's first offset)
    assert rc.end_offsets([tp])[tp] == 4 and ru.end_offsets([tp])[tp] == 5
    p.abort_transaction()
    assert rc.end_offsets([tp])[tp] == 6 == ru.end_offsets([tp])[tp]
    p.close()
    for c, want in ((rc, [b"c0", b"c1", b"c2"]), (ru, [b"c0", b"c1", b"c2", b"pending"])):
        c.assign([tp])
        c.seek_to_beginning(tp)
        got = []
        deadline = time.monotonic() + 15
        while len(got) < len(want) and time.monotonic() < deadline:
            for msgs in c.poll(500).values():
                got += [m.value for m in msgs]
        c.close()
        assert got == want


def test_aiokafka_transactions(broker, new_topic):
    import asyncio

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    topic = new_topic()

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique_topic("aio-tx"))
        await p.start()
        try:
            async with p.transaction():
                for i in range(3):
                    await p.send(topic, b"c%d" % i)
            await p.begin_transaction()
            await p.send(topic, b"aborted")
            await p.abort_transaction()
        finally:
            await p.stop()
        out = {}
        for iso in ("read_committed", "read_uncommitted"):
            c = AIOKafkaConsumer(topic, bootstrap_servers=broker.bootstrap, isolation_level=iso,
                                 auto_offset_reset="earliest")
            await c.start()
            got = []
            try:
                while True:
                    batch = await c.getmany(timeout_ms=2000)
                    if not batch:
                        break
                    for msgs in batch.values():
                        got += [m.value for m in msgs]
            finally:
                await c.stop()
            out[iso] = got
        return out

    out = asyncio.run(run())
    assert out["read_committed"] == [b"c0", b"c1", b"c2"]
    assert out["read_uncommitted"] == [b"c0", b"c1", b"c2", b"aborted"]


def test_kafkajs_transactions(broker, new_topic):
    node = shutil.which("node")
    assert node, "node is needed (make tools installs npm and kafkajs)"
    topic = new_topic()
    env = {**os.environ, "BROKER": broker.bootstrap, "TOPIC": topic, "GROUP": unique_topic("js-group"),
           "TXN_ID": unique_topic("js-tx"), "COUNT": "4"}
    out = subprocess.run([node, str(REPO_ROOT / "tests" / "js" / "transactions.js")], env=env, capture_output=True,
                         timeout=120, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    res = json.loads(out.stdout.strip().splitlines()[-1])
    assert res["committed"] == ["c0", "c1", "c2", "c3"]
    assert res["uncommitted"] == ["c0", "c1", "c2", "c3", "aborted-1", "aborted-2"]
    assert res["offsets"] == [{"partition": 0, "offset": "7"}]


def test_admin_apis_describe_list_and_producers(broker, new_topic):
    topic = new_topic()
    tid = unique_topic("admin-tx")
    p = _producer(broker.bootstrap, tid)
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(10)
    d = _call(broker.port, 65, 0, DescribeTransactionsRequest(transactional_ids=[tid, "no-such-id"]))
    st, missing = d.transaction_states
    assert (st.error_code, st.transaction_state) == (0, "Ongoing")
    assert [(t.topic, list(t.partitions)) for t in st.topics] == [(topic, [0])]
    assert st.transaction_start_time_ms > 0 and st.producer_epoch == 0
    assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
    lst = _call(broker.port, 66, 1, ListTransactionsRequest(state_filters=["Ongoing", "Nonsense"],
                                                            producer_id_filters=[], duration_filter=-1))
    assert lst.error_code == 0 and list(lst.unknown_state_filters) == ["Nonsense"]
    assert tid in [s.transactional_id for s in lst.transaction_states]

    def listed(pattern):  # v2 (KIP-1152): the whole transactional id matches the pattern
        r = _call(broker.port, 66, 2, ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                              duration_filter=-1, transactional_id_pattern=pattern))
        return r.error_code, sorted(s.transactional_id for s in r.transaction_states)

    everything = listed(None)
    assert everything[0] == 0 and tid in everything[1] and listed("")[1] == everything[1]
    assert listed(re.escape(tid)) == (0, [tid])
    assert listed(re.escape(tid[:-2]) + "..") == (0, [tid])
    assert listed(re.escape(tid[:-2])) == (0, [])  # a prefix alone does not match the whole id
    assert listed("(unclosed") == (ErrorCode.INVALID_REGULAR_EXPRESSION, [])
    assert listed("x(?=y)") == (ErrorCode.INVALID_REGULAR_EXPRESSION, [])  # RE2J's syntax: no look-ahead
    # matched in linear time: a backtracking matcher would take ~2**200 steps for this id
    long_id = "a" * 200
    init = _call(broker.port, 22, 4, InitProducerIdRequest(transactional_id=long_id, transaction_timeout_ms=60_000,
                                                           producer_id=-1, producer_epoch=-1))
    assert init.error_code == 0
    assert listed("(a+)+b") == (0, []) and listed("(a+)+") == (0, [long_id])
    prod = _call(broker.port, 61, 0, DescribeProducersRequest(topics=[
        DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0, 5])]))
    part0, part5 = prod.topics[0].partitions
    assert part5.error_code == 3  # UNKNOWN_TOPIC_OR_PARTITION
    [active] = part0.active_producers
    assert (active.producer_id, active.current_txn_start_offset) == (st.producer_id, 0)
    p.commit_transaction(30)
    d = _call(broker.port, 65, 0, DescribeTransactionsRequest(transactional_ids=[tid]))
    assert d.transaction_states[0].transaction_state == "CompleteCommit"


def test_bad_transactional_requests_get_kafkas_errors(broker, new_topic):
    topic = new_topic()
    tid = unique_topic("raw-tx")
    init = _call(broker.port, 22, 4, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=10_000_000,
                                                           producer_id=-1, producer_epoch=-1))
    assert init.error_code == 50  # INVALID_TRANSACTION_TIMEOUT (transaction.max.timeout.ms)
    init = _call(broker.port, 22, 4, InitProducerIdRequest(transactional_id=tid, transaction_timeout_ms=60_000,
                                                           producer_id=-1, producer_epoch=-1))
    pid, epoch = init.producer_id, init.producer_epoch

    def add(partitions, pid=pid, epoch=epoch, version=3):
        r = _call(broker.port, 24, version, AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=tid, v3_and_below_producer_id=pid, v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                                 for t, ps in partitions]))
        return {(t.name, r.partition_index): r.partition_error_code
                for t in r.results_by_topic_v3_and_below for r in t.results_by_partition}

    # an unknown partition fails the request; the others were not attempted
    assert add([(topic, [0]), ("no-such-topic", [0])]) == {(topic, 0): 55, ("no-such-topic", 0): 3}
    assert add([(topic, [0])], epoch=epoch + 1) == {(topic, 0): 90}  # PRODUCER_FENCED
    assert add([(topic, [0])], epoch=epoch + 1, version=1) == {(topic, 0): 47}  # INVALID_PRODUCER_EPOCH below v2
    assert add([(topic, [0])], pid=pid + 999) == {(topic, 0): 49}  # INVALID_PRODUCER_ID_MAPPING
    end = _call(broker.port, 26, 3, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                  committed=True))
    assert end.error_code == 48  # INVALID_TXN_STATE: nothing was added
    assert add([(topic, [0])]) == {(topic, 0): 0}
    end = _call(broker.port, 26, 3, EndTxnRequest(transactional_id=tid, producer_id=pid, producer_epoch=epoch,
                                                  committed=False))
    assert end.error_code == 0
    # clients may not send the broker-to-broker form (v4+) without CLUSTER_ACTION: allowed here
    # (no authorizer), and a verify-only check answers per partition
    r = _call(broker.port, 24, 4, AddPartitionsToTxnRequest(transactions=[
        AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, verify_only=True,
            topics=[AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])])]))
    [res] = r.results_by_transaction
    assert res.topic_results[0].results_by_partition[0].partition_error_code == 120  # TRANSACTION_ABORTABLE


def test_transactions_tool_lists_describes_finds_and_aborts_a_hanging_transaction(broker_factory):
    """A hanging transaction (an open transaction in a partition its coordinator does not
    know; possible when produce verification is off, as before KIP-890) holds the LSO
    back until ``chronolog transactions abort`` ends it."""
    from protocol import records as R
    from protocol.messages import ProduceRequest
    from tests.integration.test_cli_tools import fails, ok, tool

    b = broker_factory({**FAST, "transaction.partition.verification.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("hanging"))
    p = _producer(b.bootstrap, "tool-tx")
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(10)
    lines = ok(tool("transactions", "--bootstrap-server", b.bootstrap, "list"))
    assert lines[0].split() == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    assert any(line.split()[0] == "tool-tx" and line.split()[3] == "Ongoing" for line in lines[1:])
    lines = ok(tool("transactions", "--bootstrap-server", b.bootstrap, "describe", "--transactional-id", "tool-tx"))
    row = lines[1].split()
    assert row[1] == "tool-tx" and row[4] == "Ongoing" and row[-1] == f"{topic}-0"
    p.commit_transaction(30)
    fails(tool("transactions", "--bootstrap-server", b.bootstrap, "describe", "--transactional-id", "nope"), 1,
          "TRANSACTIONAL_ID_NOT_FOUND")
    # a transactional batch written without AddPartitionsToTxn: hanging
    init = _call(b.port, 22, 4, InitProducerIdRequest(transactional_id="hang", transaction_timeout_ms=60_000,
                                                      producer_id=-1, producer_epoch=-1))
    batch = R.build_batch([(int(time.time() * 1000) - 3_600_000, None, b"hanging")], producer_id=init.producer_id,
                          producer_epoch=init.producer_epoch, base_sequence=0, is_transactional=True)
    resp = _call(b.port, 0, 8, ProduceRequest(transactional_id="hang", acks=-1, timeout_ms=5000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=batch)])]))
    assert resp.responses[0].partition_responses[0].error_code == 0
    hang_offset = resp.responses[0].partition_responses[0].base_offset
    lines = ok(tool("transactions", "--bootstrap-server", b.bootstrap, "describe-producers", "--topic", topic,
                    "--partition", "0"))
    assert [ln.split()[0] for ln in lines[1:]] == sorted([str(init.producer_id), row[2]], key=int)
    lines = ok(tool("transactions", "--bootstrap-server", b.bootstrap, "find-hanging", "--broker-id", "0",
                    "--max-transaction-timeout", "1"))
    assert [ln.split()[:3] for ln in lines[1:]] == [[topic, "0", str(init.producer_id)]]
    assert lines[1].split()[5] == str(hang_offset)
    assert _read(b.bootstrap, topic, "read_committed") == [b"open"]  # held back by the LSO
    out = ok(tool("transactions", "--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0",
                  "--start-offset", str(hang_offset)))
    assert "Aborted" in out[0]
    assert ok(tool("transactions", "--bootstrap-server", b.bootstrap, "find-hanging", "--broker-id", "0",
                   "--max-transaction-timeout", "1"))[1:] == []
    fails(tool("transactions", "--bootstrap-server", b.bootstrap, "abort", "--topic", topic, "--partition", "0",
               "--start-offset", str(hang_offset)), 1, "no open transaction starts at offset")
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    kc = KafkaConsumer(bootstrap_servers=b.bootstrap, isolation_level="read_committed")
    assert kc.end_offsets([KTP(topic, 0)])[KTP(topic, 0)] == hang_offset + 2
    kc.close()


def test_kafka_python_zombie_is_fenced(broker, new_topic):
    from kafka import KafkaProducer
    from kafka.errors import KafkaError

    topic = new_topic()
    tid = unique_topic("kp-zombie")
    old = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
    old.init_transactions()
    old.begin_transaction()
    old.send(topic, b"zombie-open")
    old.flush()
    new = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=tid)
    new.init_transactions()  # aborts the open transaction and fences `old`
    with pytest.raises(KafkaError):
        old.send(topic, b"zombie-late")
        old.commit_transaction()
    old.close(timeout=5)
    new.begin_transaction()
    new.send(topic, b"fresh")
    new.commit_transaction()
    new.close()
    assert _read(broker.bootstrap, topic, "read_committed") == [b"fresh"]
    assert _read(broker.bootstrap, topic, "read_uncommitted") == [b"zombie-open", b"fresh"]


def test_aiokafka_send_offsets_to_transaction(broker, new_topic):
    import asyncio

    from aiokafka import AIOKafkaProducer, TopicPartition as ATP

    topic = new_topic()
    group = unique_topic("aio-group")

    async def run():
        p = AIOKafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id=unique_topic("aio-offsets"))
        await p.start()
        try:
            async with p.transaction():
                await p.send(topic, b"x")
                await p.send_offsets_to_transaction({ATP(topic, 0): 5}, group)
        finally:
            await p.stop()

    asyncio.run(run())
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        assert c.committed([TopicPartition(topic, 0)], 10)[0].offset == 5
    finally:
        c.close()
