"""A handler that fails unexpectedly (Kafka's KafkaApis.handleError): a real broker, run in
this process so that a handler can be made to fail, answers the request with
UNKNOWN_SERVER_ERROR for every partition or resource in it, logs the traceback once and
keeps the connection open; a produce with acks=0 has no response, so its connection is
closed, as Kafka closes it."""

from __future__ import annotations

import asyncio
import struct
import threading

import pytest

from broker import dispatcher
from protocol import codec
from protocol.messages import ApiVersionsRequest, ListGroupsRequest, MetadataRequest, ProduceRequest, RequestHeader
from tests.integration.helpers import RawConn
from tests.unit.inprocess_broker import in_process_broker

UNKNOWN = -1


def boom(*_a, **_kw):
    raise RuntimeError("a handler bug")


async def async_boom(*_a, **_kw):
    await asyncio.sleep(0)
    raise RuntimeError("an async handler bug")


def _serve(tmp_path, with_server=False):
    """A real broker in this process: yields its port (and the server, with ``with_server``)."""
    with in_process_broker(tmp_path) as (server, port):
        yield (port, server) if with_server else port


@pytest.fixture
def broker(tmp_path, monkeypatch):
    monkeypatch.setitem(dispatcher.SUPPORTED, 16, (0, 4, boom))
    monkeypatch.setitem(dispatcher.SUPPORTED, 3, (0, 12, boom))
    monkeypatch.setitem(dispatcher.SUPPORTED, 0, (0, 9, lambda ctx, h, r, session=None: async_boom()))
    yield from _serve(tmp_path)


@pytest.fixture
def plain_broker(tmp_path):
    yield from _serve(tmp_path, with_server=True)


def call(conn, api_key, version, body, cid):
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=cid, client_id="t")
    conn.send(codec.encode_request(header, body))
    frame = conn.recv_frame()
    (got,) = struct.unpack_from(">i", frame, 0)
    assert got == cid
    return codec.decode_response(api_key, version, frame)[1]


def test_a_failing_handler_answers_unknown_server_error_and_keeps_the_connection(broker, caplog):
    with RawConn(broker) as conn:
        lg = call(conn, 16, 4, ListGroupsRequest(), 1)
        assert lg.error_code == UNKNOWN
        md = call(conn, 3, 12, MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="a"),
                                                        MetadataRequest.MetadataRequestTopic(name="b")]), 2)
        assert [(t.name, t.error_code) for t in md.topics] == [("a", UNKNOWN), ("b", UNKNOWN)]
        pr = call(conn, 0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(index=2, records=None)])]), 3)
        assert [(r.name, [(p.index, p.error_code) for p in r.partition_responses]) for r in pr.responses] == [
            ("t", [(2, UNKNOWN)])]
        # the same connection still serves
        av = call(conn, 18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4)
        assert av.error_code == 0
    assert caplog.text.count("a handler bug") >= 2 and "answering UNKNOWN_SERVER_ERROR" in caplog.text


def test_a_failing_acks_0_produce_closes_the_connection(broker):
    with RawConn(broker) as conn:
        header = RequestHeader(api_key=0, api_version=9, correlation_id=7, client_id="t")
        body = ProduceRequest(acks=0, timeout_ms=1000, topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=None)])])
        conn.send(codec.encode_request(header, body))
        assert conn.wait_closed(10)


def test_a_parked_fetch_whose_read_fails_answers_unknown_server_error(plain_broker, monkeypatch, caplog):
    """A parked Fetch is answered through its future: a read that raises once it is woken
    is answered UNKNOWN_SERVER_ERROR, as a failing handler is, and the connection serves on."""
    from broker.handlers import fetch as fetch_handler
    from protocol.messages import CreateTopicsRequest, FetchRequest
    from protocol.records import build_batch

    port, server = plain_broker

    def read_all(*args, **kwargs):  # a consumer at the end parks without a read: this is the woken one's
        raise RuntimeError("a read bug")

    monkeypatch.setattr(fetch_handler, "_read_all", read_all)
    with RawConn(port) as conn, RawConn(port) as other:
        created = call(conn, 19, 5, CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="parked", num_partitions=1, replication_factor=1)], timeout_ms=5000), 1)
        assert created.topics[0].error_code == 0
        header = RequestHeader(api_key=1, api_version=11, correlation_id=2, client_id="t")
        conn.send(codec.encode_request(header, FetchRequest(
            replica_id=-1, max_wait_ms=30_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[FetchRequest.FetchTopic(
                topic="parked", partitions=[FetchRequest.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=0, log_start_offset=-1,
                    partition_max_bytes=1 << 20)])])))
        for _ in range(500):  # parked
            if server.context.fetch_waiters:
                break
            threading.Event().wait(0.01)
        assert server.context.fetch_waiters
        produced = call(other, 0, 9, ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
            ProduceRequest.TopicProduceData(name="parked", partition_data=[ProduceRequest.PartitionProduceData(
                index=0, records=build_batch([(1, None, b"v")]))])]), 3)
        assert produced.responses[0].partition_responses[0].error_code == 0
        frame = conn.recv_frame()
        cid, answer = codec.decode_response(1, 11, frame)
        assert cid == 2 and [p.error_code for t in answer.responses for p in t.partitions] == [UNKNOWN]
        av = call(conn, 18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"), 4)
        assert av.error_code == 0
    assert "a read bug" in caplog.text and "answering UNKNOWN_SERVER_ERROR" in caplog.text
