"""Bad and edge-case input over raw sockets. Requests are packed by hand here (plus
kafka-python's record-batch builder), never with the broker's own codec.

After each case the broker must still serve a normal client on another connection, and
data acknowledged before must be intact."""

from __future__ import annotations

import socket
import struct
import zlib

import pytest

from tests.integration.helpers import (
    RawConn,
    Rec,
    assert_records_equal,
    build_v2_batch,
    consume,
    end_offset,
    frame,
    make_records,
    metadata_request_v1,
    now_ms,
    parse_api_versions_v0,
    parse_produce_response_v3,
    produce,
    produce_request_v3,
    request_header_v1,
    _kbytes,
    _kstring,
)

pytestmark = pytest.mark.timeout(120)

API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA, API_VERSIONS = 0, 1, 2, 3, 18
NONE, CORRUPT_MESSAGE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_TIMESTAMP = 0, 2, 3, 32
UNSUPPORTED_VERSION, INVALID_RECORD = 35, 87


@pytest.fixture(scope="module")
def intact(broker):
    """A topic with acknowledged data that every test re-reads afterwards."""
    from tests.integration.helpers import create_topic, unique_topic

    topic = create_topic(broker.bootstrap, unique_topic("raw-intact"))
    recs = make_records(8, now_ms() - 30_000, step=100, prefix="intact")
    acks = produce("kp", broker.bootstrap, topic, recs)
    assert [a.offset for a in acks] == list(range(8))
    return topic, recs


def assert_healthy(broker, intact) -> None:
    """A new raw connection gets an ApiVersions answer and a stock client reads the
    acknowledged data unchanged."""
    with RawConn(broker.port) as c:
        body = c.request(API_VERSIONS, 0, b"", correlation_id=4242)
        err, keys = parse_api_versions_v0(body)
        assert err == NONE and API_PRODUCE in keys
    topic, recs = intact
    got = consume("kp", broker.bootstrap, topic, len(recs), timeout=20)
    assert_records_equal(got, recs, who="intact data")
    assert end_offset(broker.bootstrap, topic) == len(recs)


def closed_or_answered(conn: RawConn, correlation_id: int, timeout: float = 10.0) -> str:
    """'closed' if the broker closes the connection, 'answered' if a response with our
    correlation id arrives; fails if it does neither within the timeout."""
    conn.sock.settimeout(timeout)
    try:
        head = conn.sock.recv(8)
    except (ConnectionResetError, BrokenPipeError):
        return "closed"
    except socket.timeout:
        pytest.fail(f"broker neither answered nor closed the connection within {timeout}s")
    if not head:
        return "closed"
    while len(head) < 8:
        more = conn.sock.recv(8 - len(head))
        assert more, "connection closed inside a response header"
        head += more
    size, cid = struct.unpack(">ii", head)
    assert cid == correlation_id, f"answer with correlation id {cid}, sent {correlation_id}"
    return "answered"


# --- framing --------------------------------------------------------------------------------


def test_negative_frame_length(broker, intact):
    with RawConn(broker.port) as c:
        c.send(struct.pack(">i", -5) + b"\x00" * 16)
        assert c.wait_closed(10), "broker kept a connection open after a negative frame size"
    assert_healthy(broker, intact)


def test_frame_larger_than_socket_request_max_bytes(broker, intact):
    limit = 104_857_600  # socket.request.max.bytes default
    with RawConn(broker.port) as c:
        c.send(struct.pack(">i", limit + 1) + b"\x00" * 64)
        assert c.wait_closed(10), "broker kept a connection open after an oversized frame size"
    assert_healthy(broker, intact)


def test_socket_request_max_bytes_override(broker_factory):
    b = broker_factory({"socket.request.max.bytes": 4096, "auto.create.topics.enable": "false"})
    with RawConn(b.port) as c:
        c.send(struct.pack(">i", 5000) + b"\x00" * 100)
        assert c.wait_closed(10), "frame above socket.request.max.bytes=4096 was not refused"
    with RawConn(b.port) as c:  # below the limit still fine
        err, keys = parse_api_versions_v0(c.request(API_VERSIONS, 0, b"", correlation_id=1))
        assert err == NONE


def test_truncated_frame_then_close(broker, intact):
    with RawConn(broker.port) as c:
        c.send(struct.pack(">i", 100) + request_header_v1(API_METADATA, 1, 7)[:10])
    # and one that stays open, half sent, while others work
    hanging = RawConn(broker.port)
    try:
        hanging.send(struct.pack(">i", 1000) + b"\x00\x03\x00\x01")
        assert_healthy(broker, intact)
    finally:
        hanging.close()
    assert_healthy(broker, intact)


def test_garbage_inside_a_frame(broker, intact):
    with RawConn(broker.port) as c:
        c.send(frame(b"\x00\x03\x00\x09\x00\x00\x00\x01\x7f\xff" + b"\xff" * 40))  # Metadata v9, bad client id
        closed_or_answered(c, 1)
    assert_healthy(broker, intact)


# --- api keys and versions ------------------------------------------------------------------


def test_unknown_api_key(broker, intact):
    with RawConn(broker.port) as c:
        c.send(frame(request_header_v1(1234, 0, 77) + b"\x00" * 8))
        closed_or_answered(c, 77)
    assert_healthy(broker, intact)


def test_unsupported_version_of_known_api(broker, intact):
    with RawConn(broker.port) as c:
        c.send(frame(request_header_v1(API_METADATA, 999, 78) + b"\x00" * 8))
        closed_or_answered(c, 78)
    assert_healthy(broker, intact)


def test_api_versions_unsupported_version(broker, intact):
    """Kafka answers an ApiVersions request of a version it does not know with a v0
    response: error UNSUPPORTED_VERSION (35) and its list of api keys, so the client
    can retry with a version both support."""
    header = struct.pack(">hhi", API_VERSIONS, 127, 99) + _kstring("chronolog-it") + b"\x00"  # header v2
    body = b"\x0dchronolog-it\x061.0.0\x00"  # v3-style compact strings + tags
    with RawConn(broker.port) as c:
        c.send(frame(header + body))
        resp = c.recv_frame()
    (cid,) = struct.unpack_from(">i", resp, 0)
    assert cid == 99
    err, keys = parse_api_versions_v0(resp[4:])
    assert err == UNSUPPORTED_VERSION, f"error {err}, expected 35"
    for key in (API_PRODUCE, API_FETCH, API_LIST_OFFSETS, API_METADATA, API_VERSIONS):
        assert key in keys, f"api key {key} missing from the UNSUPPORTED_VERSION answer: {keys}"
    assert keys[API_VERSIONS][1] >= 3
    assert_healthy(broker, intact)


def test_api_versions_v0_ranges(broker):
    with RawConn(broker.port) as c:
        err, keys = parse_api_versions_v0(c.request(API_VERSIONS, 0, b"", correlation_id=5))
    assert err == NONE
    for key, (lo, hi) in keys.items():
        assert 0 <= lo <= hi, f"api {key}: bad range {lo}..{hi}"
    # KIP-32 versions and the old formats stay supported; KIP-734 MAX_TIMESTAMP needs v7
    assert keys[API_PRODUCE][0] == 0 and keys[API_PRODUCE][1] >= 3
    assert keys[API_FETCH][0] == 0 and keys[API_FETCH][1] >= 4
    assert keys[API_LIST_OFFSETS][0] == 0 and keys[API_LIST_OFFSETS][1] >= 7


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def test_api_versions_v3_response_shape(broker):
    """ApiVersions v3 (flexible body, response header v0): no tagged fields per API
    entry; at the top level Kafka's three feature tags (SupportedFeatures,
    FinalizedFeaturesEpoch, FinalizedFeatures), the supported ones without those whose
    minimum is 0 (KAFKA-17492); v4 lists those too. Debian's kcat (librdkafka 2.0)
    reads this response: test_kcat drives it."""
    from protocol import messages as T
    from tests.integration.helpers import raw_request

    header = struct.pack(">hhi", API_VERSIONS, 3, 11) + _kstring("chronolog-it") + b"\x00"
    body = b"\x0dchronolog-it\x061.0.0\x00"
    with RawConn(broker.port) as c:
        c.send(frame(header + body))
        resp = c.recv_frame()
    cid, err = struct.unpack_from(">ih", resp, 0)
    assert cid == 11 and err == NONE
    n, pos = _uvarint(resp, 6)
    n -= 1
    assert n > 0
    keys = {}
    for _ in range(n):
        k, lo, hi = struct.unpack_from(">hhh", resp, pos)
        pos += 6
        tags, pos = _uvarint(resp, pos)
        assert tags == 0, f"api key {k} entry carries {tags} tagged fields"
        keys[k] = (lo, hi)
    pos += 4  # throttle_time_ms
    count, pos = _uvarint(resp, pos)
    tag_ids = []
    for _ in range(count):
        tag, pos = _uvarint(resp, pos)
        size, pos = _uvarint(resp, pos)
        tag_ids.append(tag)
        pos += size
    assert tag_ids == [0, 1, 2]
    assert pos == len(resp), f"{len(resp) - pos} unexpected trailing bytes"
    assert API_VERSIONS in keys and keys[API_VERSIONS][1] >= 4

    def features(version):
        r = raw_request(broker.port, 18, version, T.ApiVersionsRequest(client_software_name="chronolog-it",
                                                                         client_software_version="1.0.0"))
        return ({f.name: (f.min_version, f.max_version) for f in r.supported_features},
                {f.name: (f.min_version_level, f.max_version_level) for f in r.finalized_features},
                r.finalized_features_epoch)

    finalized = {"metadata.version": (25, 25), "group.version": (1, 1), "eligible.leader.replicas.version": (1, 1),
                 "share.version": (1, 1)}
    assert features(3) == ({"metadata.version": (7, 25)}, finalized, 0)
    assert features(4) == ({"metadata.version": (7, 25), "group.version": (0, 1),
                            "eligible.leader.replicas.version": (0, 1), "share.version": (0, 1),
                            "transaction.version": (0, 1)}, finalized, 0)


def test_pipelined_requests_answered_in_order(broker):
    reqs = b"".join(frame(request_header_v1(key, ver, cid) + body) for key, ver, cid, body in [
        (API_VERSIONS, 0, 1001, b""),
        (API_METADATA, 1, 1002, metadata_request_v1([])),
        (API_VERSIONS, 1, 1003, b""),
        (API_METADATA, 1, 1004, metadata_request_v1(None)),
    ])
    with RawConn(broker.port) as c:
        c.send(reqs)
        cids = [struct.unpack_from(">i", c.recv_frame(), 0)[0] for _ in range(4)]
    assert cids == [1001, 1002, 1003, 1004]


# --- produce --------------------------------------------------------------------------------


def test_produce_corrupt_crc(broker, new_topic, intact):
    topic = new_topic()
    produce("kp", broker.bootstrap, topic, [Rec(b"ok", b"ok", now_ms())])
    batch = build_v2_batch([Rec(b"k%d" % i, b"value-%d" % i, now_ms()) for i in range(3)])
    batch[-1] ^= 0xFF  # last byte of the last record's value: covered by the CRC
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 0, batch), 21))
    err, base, _ = resp[(topic, 0)]
    assert err == CORRUPT_MESSAGE, f"error {err} for a batch with a bad CRC, expected CORRUPT_MESSAGE (2)"
    assert base == -1
    assert end_offset(broker.bootstrap, topic) == 1, "a corrupt batch was appended"
    # the same batch with its byte restored is accepted at the next offset
    batch[-1] ^= 0xFF
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 0, batch), 22))
    assert resp[(topic, 0)][:2] == (NONE, 1)
    assert end_offset(broker.bootstrap, topic) == 4
    assert_healthy(broker, intact)


def test_produce_nonzero_base_offset(broker, new_topic, intact):
    """A v2 batch from a client must have baseOffset 0 (Kafka: INVALID_RECORD, 87);
    the base offset is outside the CRC, so the CRC is still valid."""
    topic = new_topic()
    batch = build_v2_batch([Rec(b"k", b"v", now_ms())])
    struct.pack_into(">q", batch, 0, 5)
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 0, batch), 23))
    assert resp[(topic, 0)][0] == INVALID_RECORD, resp
    assert end_offset(broker.bootstrap, topic) == 0
    assert_healthy(broker, intact)


def test_produce_unknown_topic_without_auto_create(broker, intact):
    topic = "raw-no-such-topic-" + str(now_ms())
    batch = build_v2_batch([Rec(b"k", b"v", now_ms())])
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 0, batch), 31))
        assert resp[(topic, 0)][0] == UNKNOWN_TOPIC_OR_PARTITION, resp
        assert resp[(topic, 0)][1] == -1
        # and it was not created as a side effect
        md = c.request(API_METADATA, 1, metadata_request_v1([topic]), 32)
    assert topic.encode() in md
    nb = struct.unpack_from(">i", md, 0)[0]
    pos = 4
    for _ in range(nb):  # brokers v1: node_id, host, port, rack
        pos += 4
        (ln,) = struct.unpack_from(">h", md, pos)
        pos += 2 + ln + 4
        (ln,) = struct.unpack_from(">h", md, pos)
        pos += 2 + max(ln, 0)
    pos += 4  # controller_id
    (nt,) = struct.unpack_from(">i", md, pos)
    pos += 4
    assert nt == 1
    (terr,) = struct.unpack_from(">h", md, pos)
    assert terr == UNKNOWN_TOPIC_OR_PARTITION, f"Metadata for the unknown topic: error {terr}"
    assert_healthy(broker, intact)


def test_produce_unknown_partition(broker, new_topic, intact):
    topic = new_topic()
    batch = build_v2_batch([Rec(b"k", b"v", now_ms())])
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 7, batch), 33))
    assert resp[(topic, 7)][0] == UNKNOWN_TOPIC_OR_PARTITION, resp
    assert_healthy(broker, intact)


def test_produce_acks_zero_gets_no_response(broker, new_topic):
    topic = new_topic()
    batch = build_v2_batch([Rec(b"k0", b"v0", now_ms())])
    with RawConn(broker.port) as c:
        c.send(frame(request_header_v1(API_PRODUCE, 3, 41) + produce_request_v3(topic, 0, batch, acks=0)))
        body = c.request(API_VERSIONS, 0, b"", correlation_id=42)  # asserts the next answer is #42
        assert parse_api_versions_v0(body)[0] == NONE
    assert end_offset(broker.bootstrap, topic) == 1


def test_produce_timestamp_minus_one_not_range_checked(broker, new_topic):
    """A record timestamp of -1 (none) is not checked against the window (Kafka)."""
    topic = new_topic({"message.timestamp.before.max.ms": 60_000, "message.timestamp.after.max.ms": 60_000})
    batch = build_v2_batch([Rec(b"k0", b"v0", -1), Rec(b"k1", b"v1", -1)])
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, produce_request_v3(topic, 0, batch), 51))
    assert resp[(topic, 0)][:2] == (NONE, 0), resp
    got = consume("kp", broker.bootstrap, topic, 2)
    assert [(g.offset, g.key, g.timestamp) for g in got] == [(0, b"k0", -1), (1, b"k1", -1)]


def test_produce_v3_partial_failure_is_per_partition(broker, new_topic):
    """One partition failing (bad timestamp) does not affect another in the same request."""
    topic = new_topic({"message.timestamp.before.max.ms": 60_000}, partitions=2)
    good = build_v2_batch([Rec(b"g", b"good", now_ms())])
    bad = build_v2_batch([Rec(b"b", b"bad", now_ms() - 3_600_000)])
    body = _kstring(None) + struct.pack(">hi", 1, 10_000) + struct.pack(">i", 1) + _kstring(topic)
    body += struct.pack(">i", 2)
    body += struct.pack(">i", 0) + _kbytes(bytes(good))
    body += struct.pack(">i", 1) + _kbytes(bytes(bad))
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 3, body, 61))
    assert resp[(topic, 0)][:2] == (NONE, 0), resp
    assert resp[(topic, 1)][0] == INVALID_TIMESTAMP and resp[(topic, 1)][1] == -1, resp
    assert end_offset(broker.bootstrap, topic, 0) == 1
    assert end_offset(broker.bootstrap, topic, 1) == 0


# --- legacy message format (magic 1), hand-packed -------------------------------------------


def magic1_message(key: bytes | None, value: bytes | None, ts: int, offset: int = 0) -> bytearray:
    body = struct.pack(">bbq", 1, 0, ts) + _kbytes(key) + _kbytes(value)
    crc = zlib.crc32(body) & 0xFFFFFFFF
    msg = struct.pack(">I", crc) + body
    return bytearray(struct.pack(">qi", offset, len(msg)) + msg)


def produce_request_v2(topic: str, partition: int, message_set: bytes, acks: int = 1) -> bytes:
    body = struct.pack(">hi", acks, 10_000)
    body += struct.pack(">i", 1) + _kstring(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition) + _kbytes(bytes(message_set))
    return body


def test_legacy_magic1_produce_and_corrupt_crc(broker, new_topic, intact):
    topic = new_topic()
    ts0 = now_ms() - 10_000
    good = magic1_message(b"m1-k0", b"m1-v0", ts0) + magic1_message(b"m1-k1", b"m1-v1", ts0 - 5, offset=1)
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 2, produce_request_v2(topic, 0, good), 71))
    assert resp[(topic, 0)] == (NONE, 0, -1), f"Produce v2 magic 1: {resp}"
    bad = magic1_message(b"m1-k2", b"m1-v2", ts0)
    bad[-1] ^= 0x55
    with RawConn(broker.port) as c:
        resp = parse_produce_response_v3(c.request(API_PRODUCE, 2, produce_request_v2(topic, 0, bad), 72))
    assert resp[(topic, 0)][0] == CORRUPT_MESSAGE, resp
    assert end_offset(broker.bootstrap, topic) == 2
    got = consume("ck", broker.bootstrap, topic, 2)
    assert [(g.offset, g.key, g.value, g.timestamp, g.timestamp_type) for g in got] == [
        (0, b"m1-k0", b"m1-v0", ts0, 0), (1, b"m1-k1", b"m1-v1", ts0 - 5, 0)]
    assert_healthy(broker, intact)


# --- ListOffsets ------------------------------------------------------------------------------

INVALID_REQUEST = 42


def list_offsets_v1(topic: str, entries: list[tuple[int, int]]) -> bytes:
    body = struct.pack(">i", -1)  # replica_id
    body += struct.pack(">i", 1) + _kstring(topic) + struct.pack(">i", len(entries))
    for partition, ts in entries:
        body += struct.pack(">iq", partition, ts)
    return body


def parse_list_offsets_v1(body: bytes) -> list[tuple[int, int, int, int]]:
    """-> [(partition, error, timestamp, offset)] of the single topic."""
    (nt,) = struct.unpack_from(">i", body, 0)
    assert nt == 1
    (ln,) = struct.unpack_from(">h", body, 4)
    pos = 6 + ln
    (np_,) = struct.unpack_from(">i", body, pos)
    pos += 4
    out = []
    for _ in range(np_):
        out.append(struct.unpack_from(">ihqq", body, pos))
        pos += 22
    return out


def test_list_offsets_v1_by_time_and_duplicates(broker, new_topic):
    topic = new_topic()
    base = now_ms() - 20_000
    recs = make_records(6, base, step=1000, prefix="lo", headers=False)
    recs[2].timestamp = base + 4_500  # out of order: 0, 1000, 4500, 3000, 4000, 5000
    produce("kp", broker.bootstrap, topic, recs)
    with RawConn(broker.port) as c:
        res = parse_list_offsets_v1(c.request(API_LIST_OFFSETS, 1, list_offsets_v1(topic, [(0, base + 3_500)]), 81))
        assert res == [(0, NONE, base + 4_500, 2)], res
        res = parse_list_offsets_v1(c.request(API_LIST_OFFSETS, 1, list_offsets_v1(topic, [(0, -1)]), 82))
        assert res == [(0, NONE, -1, 6)], res
        res = parse_list_offsets_v1(c.request(API_LIST_OFFSETS, 1, list_offsets_v1(topic, [(0, -2)]), 83))
        assert res == [(0, NONE, -1, 0)], res
        res = parse_list_offsets_v1(c.request(API_LIST_OFFSETS, 1, list_offsets_v1(topic, [(0, base + 99_000)]), 84))
        assert res == [(0, NONE, -1, -1)], res
        # the same partition twice in one request: INVALID_REQUEST (Kafka)
        res = parse_list_offsets_v1(c.request(API_LIST_OFFSETS, 1,
                                              list_offsets_v1(topic, [(0, -1), (0, base)]), 85))
        assert res and all(r[0] == 0 and r[1] == INVALID_REQUEST for r in res), res
    # ListOffsets v0 (what a (0,10,0) client uses for end/beginning offsets)
    from kafka import TopicPartition

    from tests.integration.helpers import kp_consumer

    c = kp_consumer(broker.bootstrap, legacy=True)
    try:
        tp = TopicPartition(topic, 0)
        assert c.end_offsets([tp], timeout_ms=15_000)[tp] == 6
        assert c.beginning_offsets([tp], timeout_ms=15_000)[tp] == 0
    finally:
        c.close()
