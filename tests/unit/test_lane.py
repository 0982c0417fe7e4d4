"""The connection's compiled lane (broker/_lane.c) against the dispatcher's path: the same
stream of frames (random produce requests of every version and kind, other requests
between them, split into reads at random places) read by a connection of two brokers,
one with the lane and one without, gives the same bytes written, the same segment,
index and checkpoint files and the same metrics; and the lane does take most of the
produce requests, and leaves each kind it does not finish to the dispatcher."""

from __future__ import annotations

import asyncio
import random

import pytest

from broker import _lane as lane_mod
from broker import dispatcher as dispatcher_mod
from broker.connection import KafkaConnection
from broker.handlers import produce
from broker.security.authenticator import COMPLETE, Session
from protocol import codec
from protocol.messages import ApiVersionsRequest, MetadataRequest, ProduceRequest, RequestHeader
from tests.unit.test_produce_compiled import (START_MS, TOPICS, _batch, _broker, _files, _Producers, _request,
                                              _topic_series)


class _Transport:
    def __init__(self) -> None:
        self.data = bytearray()
        self.aborted = False

    def write(self, data) -> None:
        self.data += data

    def writelines(self, chunks) -> None:
        for c in chunks:
            self.data += c

    def get_extra_info(self, name, default=None):
        return default

    def get_write_buffer_size(self) -> int:
        return 0

    def abort(self) -> None:
        self.aborted = True

    close = abort

    def pause_reading(self) -> None:  # pragma: no cover - no high-water mark is reached
        pass

    def resume_reading(self) -> None:  # pragma: no cover
        pass


def _connection(dispatcher, session) -> tuple[KafkaConnection, _Transport]:
    conn = KafkaConnection(dispatcher, None)
    transport = _Transport()
    conn._transport = transport
    conn.session = session
    return conn, transport


def _other(rng, correlation_id: int) -> bytes:
    """A request that is not the lane's: Metadata or ApiVersions."""
    if rng.random() < 0.5:
        header = RequestHeader(api_key=3, api_version=9, correlation_id=correlation_id, client_id="t")
        body = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="ct")],
                               allow_auto_topic_creation=False)
    else:
        header = RequestHeader(api_key=18, api_version=3, correlation_id=correlation_id, client_id="t")
        body = ApiVersionsRequest(client_software_name="t", client_software_version="1")
    return bytes(codec.encode_request(header, body))


def _plain(rng, now, correlation_id: int) -> bytes:
    """A produce request of the lane's kind: v3+, plain batches to partitions that exist."""
    topic_data = []
    for name in rng.sample(["ct", "lat", "big"], rng.randint(1, 2)):
        parts = rng.sample(range(TOPICS[name][0]), rng.randint(1, TOPICS[name][0]))
        topic_data.append(ProduceRequest.TopicProduceData(name=name, partition_data=[
            ProduceRequest.PartitionProduceData(index=p, records=_batch(rng, now)) for p in parts]))
    req = ProduceRequest(transactional_id=None, acks=rng.choice([1, -1, 0]), timeout_ms=30000, topic_data=topic_data)
    header = RequestHeader(api_key=0, api_version=rng.choice([3, 7, 9, 11]), correlation_id=correlation_id,
                           client_id="t")
    return bytes(codec.encode_request(header, req))[4:]


def _feed(conn, data: bytes) -> None:
    buf = conn.get_buffer(len(data))
    buf[: len(data)] = data
    conn.buffer_updated(len(data))


def _request_series(metrics) -> list[str]:
    """The request counts and errors (not the latencies, which are times)."""
    return sorted(line for line in metrics.exposition().decode().splitlines()
                  if line.startswith(("chronolog_requests_total", "chronolog_request_errors_total")))


def _authorizer(ctx, log_dir):
    """An authorizer letting User:alice write ct (LITERAL), lat (PREFIXED ``la``) and big
    (LITERAL, for every principal), with 200 ACLs of other principals beside them."""
    from broker.security import authorizer as A
    from storage.acl_store import AclBinding, AclStore

    log_dir.mkdir(parents=True, exist_ok=True)
    store = AclStore(str(log_dir))
    store.change(add=[AclBinding(A.TOPIC, "ct", A.LITERAL, "User:alice", "*", A.WRITE, A.ALLOW),
                      AclBinding(A.TOPIC, "la", A.PREFIXED, "User:alice", "*", A.WRITE, A.ALLOW),
                      AclBinding(A.TOPIC, "big", A.LITERAL, "User:*", "127.0.0.1", A.ALL, A.ALLOW)]
                 + [AclBinding(A.TOPIC, f"t{i}", A.PREFIXED, f"User:u{i}", "*", A.WRITE, A.ALLOW) for i in range(200)])
    ctx.authorizer = A.Authorizer(store, "", False, ctx.metrics)


# a DENY of WRITE on big for User:alice, added to both brokers' ACLs at this request of
# the "authorizer" case: what the lane was handed before (big among the topics written)
# must not let a later request through
DENY_AT = 300


def _denied(metrics) -> float:
    lines = [line for line in metrics.exposition().decode().splitlines()
             if line.startswith('chronolog_authorization_denied_total{api="Produce",resource_type="Topic"}')]
    return float(lines[0].split()[-1]) if lines else 0.0


@pytest.mark.parametrize("session", ["none", "complete", "authorizer"])
def test_lane_matches_the_dispatcher_path(tmp_path, session):
    """With an authorizer, the connection's principal may write each topic until a DENY
    on one of them is added at DENY_AT: from then on both paths answer that topic's
    partitions TOPIC_AUTHORIZATION_FAILED, and the lane still answers the others."""
    rng = random.Random({"none": 41, "complete": 42, "authorizer": 43}[session])
    sides = {}
    for side in ("lane", "dispatch"):
        ctx, dispatcher = _broker(tmp_path / side)
        if session == "authorizer":
            _authorizer(ctx, tmp_path / side / "acl")
        if side == "dispatch":
            dispatcher.lane = None
        else:
            assert dispatcher.lane is not None, "the lane is built with every compiled step it calls"
        s = None if session == "none" else Session(listener=None, client_ip="127.0.0.1", state=COMPLETE,
                                                   principal="User:alice")
        sides[side] = (ctx, dispatcher) + _connection(dispatcher, s)

    # what the lane did: frames answered, frames left to the dispatcher by outcome
    counts = {"answered": 0, "not its case": 0, "went on": 0, "failed": 0}
    real = sides["lane"][1].lane

    def counting(view, start, end, out, writable):
        r = real(view, start, end, out, writable)
        if r.__class__ is int:
            pos = start
            while pos < r:  # the frames answered
                pos += 4 + int.from_bytes(view[pos:pos + 4], "big")
                counts["answered"] += 1
        else:
            outcome = r[3]
            counts["failed" if isinstance(outcome, BaseException) else "went on" if isinstance(outcome, tuple)
                   else "not its case"] += 1
        return r

    sides["lane"][1].lane = counting

    producers = _Producers()
    loop = asyncio.new_event_loop()
    stream = bytearray()
    produce_frames = 0
    try:
        for i in range(600):
            now = START_MS + i * 250
            if session == "authorizer" and i == DENY_AT:
                from broker.security import authorizer as A
                from storage.acl_store import AclBinding

                denied_before = _denied(sides["lane"][0].metrics)  # topics without an ACL
                for ctx, *_rest in sides.values():
                    ctx.authorizer.store.change(add=[
                        AclBinding(A.TOPIC, "big", A.LITERAL, "User:alice", "*", A.WRITE, A.DENY)])
                answered_before = counts["answered"]
            kind = rng.random()
            if kind < 0.1:
                stream += _other(rng, i)
            else:  # the lane's kind, or any produce request (v2 and odd partitions included)
                frame = _plain(rng, now, i) if kind < 0.6 else _request(rng, now, producers, i)
                stream += len(frame).to_bytes(4, "big") + frame
                produce_frames += 1
            if rng.random() < 0.6 and i < 599:
                continue  # pipelined: the next request in the same stream
            # the stream so far, read in pieces cut anywhere (inside a size, a header, a batch)
            pieces = []
            while stream:
                n = rng.randint(1, max(1, min(len(stream), rng.choice([7, 200, 5000, 60000]))))
                pieces.append(bytes(stream[:n]))
                del stream[:n]
            waited = {}
            for side, (ctx, _dispatcher, conn, _transport) in sides.items():
                ctx.clock.advance(now - ctx.clock.time_ms())
                # a parked fetch on one partition: told of an append on both paths
                waiter = loop.create_future()
                ctx.wait_for_append([("ct", 1)], waiter)
                for piece in pieces:
                    _feed(conn, piece)
                waited[side] = waiter.done()
                ctx.forget_waiter([("ct", 1)], waiter)
            assert waited["lane"] == waited["dispatch"], f"request {i}"
            assert sides["lane"][3].data == sides["dispatch"][3].data, f"request {i}"
    finally:
        loop.close()
    lane_side, dispatch_side = sides["lane"], sides["dispatch"]
    assert not lane_side[3].aborted and not dispatch_side[3].aborted
    assert len(lane_side[3].data) > 50_000
    assert _files(tmp_path / "lane") == _files(tmp_path / "dispatch")
    assert _topic_series(lane_side[1].metrics) == _topic_series(dispatch_side[1].metrics)
    assert _request_series(lane_side[1].metrics) == _request_series(dispatch_side[1].metrics)
    # the lane answered most plain produce requests (half of the mix; a segment roll or an
    # odd batch is its handle's Python path) and left the others of each kind to the dispatcher
    assert counts["answered"] > produce_frames // (4 if session == "authorizer" else 3), counts
    assert counts["not its case"] >= 5 and counts["went on"] >= 20, counts
    if session == "authorizer":
        assert _denied(lane_side[0].metrics) == _denied(dispatch_side[0].metrics) > denied_before + 20
        assert counts["answered"] - answered_before > produce_frames // 20, counts  # after the DENY too


def test_lane_leaves_what_is_not_its_case(tmp_path):
    """An incomplete frame, a size the connection refuses, another API, an older version
    and a frame the codec cannot decode: the lane answers none of them and returns where
    it stopped; the frames before are answered."""
    ctx, dispatcher = _broker(tmp_path)
    lane = dispatcher.lane
    rng = random.Random(7)
    frames = []
    for i in range(3):
        f = _plain(rng, START_MS, i)
        _decoded_body(f)  # the codec meets its version (the lane's decode takes pairs it has met)
        frames.append(len(f).to_bytes(4, "big") + f)
    good = b"".join(frames)

    def run(data: bytes):
        view = memoryview(bytearray(data))
        out: list = []
        return lane(view, 0, len(data), out, None), out

    at, out = run(good)
    assert at == len(good)  # every one answered (acks=0: no chunks)
    tails = {
        "incomplete": frames[0][:-1],
        "too large": (dispatcher.socket_request_max_bytes + 1).to_bytes(4, "big") + b"\x00" * 8,
        "negative": b"\xff\xff\xff\xf0" + b"\x00" * 8,
        "another api": _other(rng, 9),
        "an older version": (lambda f: len(f).to_bytes(4, "big") + f)(
            bytes(codec.encode_request(RequestHeader(api_key=0, api_version=2, correlation_id=5, client_id="t"),
                                       _decoded_body(frames[0][4:])))[4:]),
        "undecodable": (12).to_bytes(4, "big") + b"\x00\x00\x00\x09" + b"\x00" * 8,
    }
    for name, tail in tails.items():
        at, _ = run(good + tail)
        assert at == len(good), name


def _decoded_body(frame: bytes):
    """The request of a frame (without its size)."""
    header, offset = codec.decode_request_header_view(memoryview(frame))
    return codec.decode_request_body_view(header, memoryview(frame), offset)


def test_lane_hands_back_a_request_that_failed(tmp_path):
    """An exception on the way (here from the clock) comes back with the frame, for the
    dispatcher to answer as any failed request: UNKNOWN_SERVER_ERROR in every partition,
    counted as a failed request."""
    ctx, dispatcher = _broker(tmp_path)
    rng = random.Random(3)
    frame = _plain(rng, START_MS, 1)
    while _decoded_body(frame).acks == 0:  # answered
        frame = _plain(rng, START_MS, 1)
    data = len(frame).to_bytes(4, "big") + frame

    def broken_clock():
        raise RuntimeError("the clock broke")

    broken = lane_mod.Lane(
        decode=dispatcher_mod._decode_request, request_table=codec.REQUEST_TABLE, common=produce.COMMON,
        not_common=produce._NOT_COMMON, logs=ctx.log_manager.logs_by_key, waiters={}, notify=ctx.notify_append,
        clock_ms=broken_clock, produced=None, request_done=None, encode=codec._encode_response_compiled,
        response_table=codec.RESPONSE_TABLE, encode_python=codec.encode_response, min_version=3, max_version=11,
        max_frame=1 << 20, coalesce=64)
    out: list = []
    r = broken(memoryview(bytearray(data)), 0, len(data), out, None)
    assert isinstance(r, tuple) and r[0] == len(data) and not out
    assert isinstance(r[3], RuntimeError) and r[3].__traceback__ is not None
    conn, _transport = _connection(dispatcher, None)
    answer = b"".join(bytes(c) for c in dispatcher.lane_rest(conn, r, len(frame)))
    request = _decoded_body(frame)
    correlation_id, response = codec.decode_response(0, r[1].api_version, memoryview(answer)[4:])
    assert correlation_id == r[1].correlation_id
    codes = [p.error_code for t in response.responses for p in t.partition_responses]
    assert codes == [-1] * sum(len(t.partition_data) for t in request.topic_data)
    assert 'chronolog_request_errors_total{api="Produce",error="UNKNOWN_SERVER_ERROR"} 1.0' in \
        ctx.metrics.exposition().decode().splitlines()


def test_the_lane_is_built_only_where_it_may_answer(tmp_path, monkeypatch):
    """None for a session not complete or one that expires; none once Produce's entry in
    SUPPORTED is not the one it was made from. With an authorizer, a session's read gets
    the set of topics the authorizer allowed it to write: the same set until the ACLs
    change, then a new one that holds none of them."""
    from broker.security import authorizer as A
    from storage.acl_store import AclBinding

    ctx, dispatcher = _broker(tmp_path)
    lane = dispatcher.lane
    assert lane is not None
    assert dispatcher.lane_for(None) == (lane, None)
    assert dispatcher.lane_for(Session(listener=None, client_ip="x", state=COMPLETE)) == (lane, None)
    assert dispatcher.lane_for(Session(listener=None, client_ip="x", state="initial")) == (None, None)
    assert dispatcher.lane_for(Session(listener=None, client_ip="x", state=COMPLETE, expires_at_ms=1)) == (None, None)
    monkeypatch.setitem(dispatcher_mod.SUPPORTED, 0, (0, 11, lambda *a, **kw: None))
    assert dispatcher.lane_for(None) == (None, None)
    monkeypatch.undo()
    assert dispatcher.lane_for(None) == (lane, None)

    _authorizer(ctx, tmp_path / "acl")
    alice = Session(listener=None, client_ip="127.0.0.1", state=COMPLETE, principal="User:alice")
    assert dispatcher.lane_for(None) == (lane, None)  # no session: in-process, nothing asked
    got, writable = dispatcher.lane_for(alice)
    assert got is lane and writable == set()
    assert ctx.unauthorized(alice, A.WRITE, A.TOPIC, ["ct", "lat", "nope"], "Produce") == {"nope"}
    assert dispatcher.lane_for(alice)[1] is writable == {"ct", "lat"}  # the allowed ones, not the denied
    bob = Session(listener=None, client_ip="127.0.0.1", state=COMPLETE, principal="User:bob")
    assert dispatcher.lane_for(bob)[1] == set()  # another principal's own
    ctx.authorizer.store.change(add=[AclBinding(A.TOPIC, "ct", A.LITERAL, "User:alice", "*", A.WRITE, A.DENY)])
    assert dispatcher.lane_for(alice)[1] == set() and writable == {"ct", "lat"}
    assert ctx.unauthorized(alice, A.WRITE, A.TOPIC, ["ct", "lat"], "Produce") == {"ct"}
    assert dispatcher.lane_for(alice)[1] == {"lat"}


def test_the_lane_reads_the_system_clock_itself_and_any_other_clock_through_it(tmp_path, monkeypatch):
    """With storage.clock's SystemClock the lane reads CLOCK_REALTIME in C (no Python call
    per request): a LogAppendTime topic's answer carries time.time_ns() // 1e6 of the
    moment it was answered. Any other clock (a ManualClock, a SystemClock whose time_ms
    was replaced) is called as before."""
    import dataclasses
    import time

    from protocol.messages import ProduceResponse
    from storage import clock as clock_mod

    ctx, _ = _broker(tmp_path)
    rng = random.Random(5)

    def stamp(dispatcher, partition=0) -> int:
        conn, transport = _connection(dispatcher, None)
        req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
            ProduceRequest.TopicProduceData(name="lat", partition_data=[
                ProduceRequest.PartitionProduceData(index=partition, records=_batch(rng, START_MS))])])
        header = RequestHeader(api_key=0, api_version=9, correlation_id=7, client_id="t")
        _feed(conn, bytes(codec.encode_request(header, req)))
        body = codec.decode_response(0, 9, bytes(transport.data[4:]))[1]
        assert isinstance(body, ProduceResponse)
        (part,) = body.responses[0].partition_responses
        assert part.error_code == 0
        return part.log_append_time_ms

    assert stamp(dispatcher_mod.Dispatcher(ctx)) == START_MS  # the ManualClock
    system = dispatcher_mod.Dispatcher(dataclasses.replace(ctx, clock=clock_mod.SystemClock()))
    assert system.lane is not None and clock_mod.reads_system_time(system.ctx.clock)
    before = time.time_ns() // 1_000_000
    got = stamp(system)
    assert before <= got <= time.time_ns() // 1_000_000
    monkeypatch.setattr(clock_mod.SystemClock, "time_ms", lambda self: 12345)
    replaced = dispatcher_mod.Dispatcher(dataclasses.replace(ctx, clock=clock_mod.SystemClock()))
    assert not clock_mod.reads_system_time(replaced.ctx.clock)
    assert stamp(replaced, 1) == 12345  # (partition 0's append time never goes back)
