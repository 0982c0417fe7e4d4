"""DeleteRecords (key 21, v0-2; KIP-107) with real clients and raw requests.

What Kafka does (KafkaApis.handleDeleteRecordsRequest, ReplicaManager.deleteRecords*,
Partition.deleteRecordsOnLeader, UnifiedLog.maybeIncrementLogStartOffset): offset -1 is
the high watermark; any other negative offset or one beyond the high watermark is
OFFSET_OUT_OF_RANGE; an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION; a topic
whose cleanup.policy lacks "delete" POLICY_VIOLATION; errors answer low_watermark -1;
otherwise the log start offset becomes max(current, offset) and is the low_watermark
answered. Afterwards ListOffsets earliest, Fetch, consumers' offset reset and search by
time all follow the new log start offset.

Raw requests are built with Chronolog's codec (tested byte-for-byte against kafka-python
and aiokafka) plus hand-packed v0 and v2 frames as an independent cross-check."""

from __future__ import annotations

import struct
import time

import pytest

from protocol import codec
from protocol.messages import DeleteRecordsRequest, FetchRequest, RequestHeader

from tests.integration.helpers import (
    TIME_CLIENTS,
    RawConn,
    beginning_offset,
    ck_admin,
    consume,
    create_topic,
    end_offset,
    make_records,
    now_ms,
    offsets_for_times,
    parse_api_versions_v0,
    produce,
    special_offsets,
    unique_topic,
    _kstring,
)

pytestmark = pytest.mark.timeout(180)

DELETE_RECORDS, FETCH, API_VERSIONS = 21, 1, 18
NONE, OFFSET_OUT_OF_RANGE, UNKNOWN_TOPIC_OR_PARTITION, POLICY_VIOLATION = 0, 1, 3, 44
INVALID_TOPIC_EXCEPTION = 17


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------


def delete_records(conn: RawConn, version: int, topics: list[tuple[str, list[tuple[int, int]]]],
                   timeout_ms: int = 5_000, correlation_id: int = 7):
    """One DeleteRecords request on ``conn``; returns the decoded response."""
    req = DeleteRecordsRequest(
        topics=[
            DeleteRecordsRequest.DeleteRecordsTopic(
                name=name,
                partitions=[DeleteRecordsRequest.DeleteRecordsPartition(partition_index=p, offset=o)
                            for p, o in parts],
            )
            for name, parts in topics
        ],
        timeout_ms=timeout_ms,
    )
    header = RequestHeader(api_key=DELETE_RECORDS, api_version=version, correlation_id=correlation_id,
                           client_id="chronolog-it-delete-records")
    conn.send(codec.encode_request(header, req))
    cid, resp = codec.decode_response(DELETE_RECORDS, version, conn.recv_frame())
    assert cid == correlation_id
    return resp


def results(resp) -> dict[tuple[str, int], tuple[int, int]]:
    """{(topic, partition): (low_watermark, error_code)}; asserts no entry is repeated."""
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            assert key not in out, f"{key} answered twice: {resp!r}"
            out[key] = (p.low_watermark, p.error_code)
    return out


def delete_one(port: int, topic: str, offset: int, partition: int = 0, version: int = 2) -> tuple[int, int]:
    """(low_watermark, error_code) of deleting ``topic``-``partition`` up to ``offset``."""
    with RawConn(port) as conn:
        resp = delete_records(conn, version, [(topic, [(partition, offset)])])
    assert resp.throttle_time_ms == 0
    return results(resp)[(topic, partition)]


def fetch_error(conn: RawConn, topic: str, offset: int, partition: int = 0, version: int = 11) -> tuple[int, int, int]:
    """Fetch one partition at ``offset``: (error_code, high_watermark, log_start_offset)."""
    req = FetchRequest(
        replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=partition, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=1 << 20)])],
        forgotten_topics_data=[], rack_id="",
    )
    header = RequestHeader(api_key=FETCH, api_version=version, correlation_id=99, client_id="t")
    conn.send(codec.encode_request(header, req))
    cid, resp = codec.decode_response(FETCH, version, conn.recv_frame())
    assert cid == 99
    (part,) = resp.responses[0].partitions
    return part.error_code, part.high_watermark, part.log_start_offset


def first_offset_with_reset(bootstrap: str, topic: str, seek_to: int | None) -> int:
    """kafka-python consumer with auto_offset_reset=earliest: assign, optionally seek to
    ``seek_to`` (an offset the broker answers OFFSET_OUT_OF_RANGE for), return the
    offset of the first record it receives."""
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                      auto_offset_reset="earliest", request_timeout_ms=20_000, fetch_max_wait_ms=100)
    try:
        tp = TopicPartition(topic, 0)
        c.assign([tp])
        if seek_to is not None:
            c.seek(tp, seek_to)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                if recs:
                    return recs[0].offset
        raise AssertionError("kafka-python consumer received nothing in 20 s")
    finally:
        c.close()


def ck_first_offset_with_reset(bootstrap: str, topic: str, start: int) -> int:
    """confluent-kafka consumer with auto.offset.reset=earliest assigned at ``start``
    (OFFSET_BEGINNING, or an offset below the log start offset, which the broker answers
    OFFSET_OUT_OF_RANGE so the reset policy applies): the offset of the first record it
    receives. (Not OFFSET_INVALID: that asks the group coordinator, which Chronolog
    does not have yet.)"""
    from confluent_kafka import Consumer, TopicPartition

    from tests.integration.helpers import ck_consumer_config, ck_poll

    c = Consumer(ck_consumer_config(bootstrap, **{"auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition(topic, 0, start)])
        m = ck_poll(c, 20)
        assert m is not None, "confluent-kafka consumer received nothing in 20 s"
        return m.offset()
    finally:
        c.close()


def produce_n(bootstrap: str, topic: str, n: int, base_ts: int, partition: int = 0, prefix: str = "r"):
    recs = make_records(n, base_ts, step=1000, prefix=prefix)
    acks = produce("kp", bootstrap, topic, recs, partition=partition)
    return recs, [a.offset for a in acks]


# ---------------------------------------------------------------------------------------
# stock clients
# ---------------------------------------------------------------------------------------


def test_confluent_admin_delete_records_moves_everything_to_the_new_start(broker, new_topic):
    from confluent_kafka import OFFSET_BEGINNING, TopicPartition

    topic = new_topic()
    base = now_ms() - 100_000
    recs, offsets = produce_n(broker.bootstrap, topic, 10, base)
    assert offsets == list(range(10))

    admin = ck_admin(broker.bootstrap)
    futs = admin.delete_records([TopicPartition(topic, 0, 4)], request_timeout=15, operation_timeout=5)
    (fut,) = futs.values()
    deleted = fut.result(timeout=20)
    assert deleted.low_watermark == 4

    # ListOffsets earliest (-2), through several clients
    assert beginning_offset(broker.bootstrap, topic) == 4
    for client in ("ck", "ck-admin", "kp-admin", "aio"):
        got = special_offsets(client, broker.bootstrap, topic)
        assert got["earliest"] == 4, f"{client}: earliest {got['earliest']}"
        assert got["latest"] == 10, f"{client}: latest {got['latest']}"
    assert end_offset(broker.bootstrap, topic) == 10

    # Fetch below the new start: OFFSET_OUT_OF_RANGE; at it: records
    with RawConn(broker.port) as conn:
        for off in (0, 3):
            err, hw, lso = fetch_error(conn, topic, off)
            assert err == OFFSET_OUT_OF_RANGE, f"fetch at {off}: error {err}"
        err, hw, lso = fetch_error(conn, topic, 4)
        assert (err, hw, lso) == (NONE, 10, 4)

    # consumers starting "from the beginning" start at the new start
    got = consume("ck", broker.bootstrap, topic, 6, start=OFFSET_BEGINNING)
    assert [g.offset for g in got] == list(range(4, 10))
    assert [g.value for g in got] == [r.value for r in recs[4:]]
    got = consume("kp", broker.bootstrap, topic, 6, start=4)
    assert [g.offset for g in got] == list(range(4, 10))
    assert ck_first_offset_with_reset(broker.bootstrap, topic, OFFSET_BEGINNING) == 4
    assert ck_first_offset_with_reset(broker.bootstrap, topic, 1) == 4  # out of range -> earliest
    assert first_offset_with_reset(broker.bootstrap, topic, None) == 4
    assert first_offset_with_reset(broker.bootstrap, topic, 2) == 4  # out of range -> earliest

    # search by time never answers a deleted offset
    for client in TIME_CLIENTS:
        answers = offsets_for_times(client, broker.bootstrap, topic, [0, base - 1, base, base + 2000, base + 4000,
                                                                      base + 6500])
        assert answers[0][0] == 4, f"{client}: offsets_for_times(0) = {answers[0]}"
        assert answers[base - 1][0] == 4, f"{client}: older than everything -> {answers[base - 1]}"
        assert answers[base][0] == 4, f"{client}: timestamp of deleted offset 0 -> {answers[base]}"
        assert answers[base + 2000][0] == 4, f"{client}: timestamp of deleted offset 2 -> {answers[base + 2000]}"
        assert answers[base + 4000][0] == 4, f"{client}: {answers[base + 4000]}"
        assert answers[base + 6500][0] == 7, f"{client}: {answers[base + 6500]}"


def test_confluent_admin_errors(broker, new_topic):
    from confluent_kafka import KafkaError, KafkaException, TopicPartition

    topic = new_topic()
    produce_n(broker.bootstrap, topic, 5, now_ms())
    admin = ck_admin(broker.bootstrap)
    (fut,) = admin.delete_records([TopicPartition(topic, 0, 6)], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.OFFSET_OUT_OF_RANGE
    assert beginning_offset(broker.bootstrap, topic) == 0

    compact = new_topic({"cleanup.policy": "compact"}, suffix="-compact")
    produce("kp", broker.bootstrap, compact, make_records(3, now_ms()))
    (fut,) = admin.delete_records([TopicPartition(compact, 0, 1)], request_timeout=15).values()
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    assert ei.value.args[0].code() == KafkaError.POLICY_VIOLATION
    assert beginning_offset(broker.bootstrap, compact) == 0

    # -1 (OFFSET_END): everything up to the high watermark
    (fut,) = admin.delete_records([TopicPartition(topic, 0, -1)], request_timeout=15).values()
    assert fut.result(timeout=20).low_watermark == 5


def test_kafka_python_admin_delete_records(broker, new_topic):
    from kafka import TopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import OffsetOutOfRangeError, PolicyViolationError

    topic = new_topic(partitions=2)
    produce_n(broker.bootstrap, topic, 8, now_ms(), partition=0)
    produce_n(broker.bootstrap, topic, 3, now_ms(), partition=1)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        out = admin.delete_records({tp0: 3, tp1: 3})
        assert out[tp0]["low_watermark"] == 3 and out[tp0]["error_code"] == 0
        assert out[tp1]["low_watermark"] == 3 and out[tp1]["error_code"] == 0
        assert beginning_offset(broker.bootstrap, topic, 0) == 3
        assert beginning_offset(broker.bootstrap, topic, 1) == 3

        # a lower offset than the current start: no-op, answers the current start
        out = admin.delete_records({tp0: 1})
        assert out[tp0]["low_watermark"] == 3 and out[tp0]["error_code"] == 0
        assert beginning_offset(broker.bootstrap, topic, 0) == 3
        # the same offset again: also a no-op
        assert admin.delete_records({tp0: 3})[tp0]["low_watermark"] == 3

        with pytest.raises(OffsetOutOfRangeError):
            admin.delete_records({tp1: 4})
        assert beginning_offset(broker.bootstrap, topic, 1) == 3

        compact = create_topic(broker.bootstrap, unique_topic("kp-compact"), {"cleanup.policy": "compact"})
        with pytest.raises(PolicyViolationError):
            admin.delete_records({TopicPartition(compact, 0): 0})

        out = admin.delete_records({tp0: -1})
        assert out[tp0]["low_watermark"] == 8
    finally:
        admin.close()
    assert beginning_offset(broker.bootstrap, topic, 0) == 8
    assert end_offset(broker.bootstrap, topic, 0) == 8


# ---------------------------------------------------------------------------------------
# raw requests, every version
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("version", [0, 1, 2])
def test_raw_every_version(broker, new_topic, version):
    topic = new_topic()
    produce_n(broker.bootstrap, topic, 6, now_ms())
    with RawConn(broker.port) as conn:
        resp = delete_records(conn, version, [(topic, [(0, 2)])], correlation_id=1)
        assert resp.throttle_time_ms == 0
        assert results(resp) == {(topic, 0): (2, NONE)}
        assert beginning_offset(broker.bootstrap, topic) == 2

        # lower than the current start: no-op answering the current start
        assert results(delete_records(conn, version, [(topic, [(0, 1)])], correlation_id=2)) == {(topic, 0): (2, NONE)}
        # beyond the high watermark: error, nothing changes
        assert results(delete_records(conn, version, [(topic, [(0, 7)])], correlation_id=3)) == \
            {(topic, 0): (-1, OFFSET_OUT_OF_RANGE)}
        # negative other than -1
        assert results(delete_records(conn, version, [(topic, [(0, -2)])], correlation_id=4)) == \
            {(topic, 0): (-1, OFFSET_OUT_OF_RANGE)}
        assert beginning_offset(broker.bootstrap, topic) == 2
        # exactly the high watermark
        assert results(delete_records(conn, version, [(topic, [(0, 6)])], correlation_id=5)) == {(topic, 0): (6, NONE)}
        # unknown topic and partition
        assert results(delete_records(conn, version, [("no-such-topic-" + topic, [(0, 1)]), (topic, [(9, 0)])],
                                      correlation_id=6)) == {
            ("no-such-topic-" + topic, 0): (-1, UNKNOWN_TOPIC_OR_PARTITION),
            (topic, 9): (-1, UNKNOWN_TOPIC_OR_PARTITION),
        }
        # the connection still works
        assert results(delete_records(conn, version, [(topic, [(0, -1)])], correlation_id=7)) == {(topic, 0): (6, NONE)}
    assert beginning_offset(broker.bootstrap, topic) == 6
    assert end_offset(broker.bootstrap, topic) == 6


def test_minus_one_is_the_high_watermark_and_appends_continue(broker, new_topic):
    topic = new_topic()
    produce_n(broker.bootstrap, topic, 7, now_ms())
    assert delete_one(broker.port, topic, -1) == (7, NONE)
    assert beginning_offset(broker.bootstrap, topic) == 7
    assert end_offset(broker.bootstrap, topic) == 7
    with RawConn(broker.port) as conn:
        assert fetch_error(conn, topic, 6)[0] == OFFSET_OUT_OF_RANGE
        assert fetch_error(conn, topic, 7) == (NONE, 7, 7)
    # nothing left: search by time finds nothing
    for client in ("kp", "ck-admin"):
        assert offsets_for_times(client, broker.bootstrap, topic, [0]) == {0: None}, client
    # an empty log: -1 again is a no-op answering the same start
    assert delete_one(broker.port, topic, -1) == (7, NONE)

    # appends continue at the old end; consumers starting from the beginning get them
    recs, offsets = produce_n(broker.bootstrap, topic, 3, now_ms(), prefix="after")
    assert offsets == [7, 8, 9]
    got = consume("kp", broker.bootstrap, topic, 3, start=7)
    assert [g.value for g in got] == [r.value for r in recs]
    assert first_offset_with_reset(broker.bootstrap, topic, 0) == 7


def test_empty_topic(broker, new_topic):
    topic = new_topic()
    assert delete_one(broker.port, topic, 0) == (0, NONE)
    assert delete_one(broker.port, topic, -1) == (0, NONE)
    assert delete_one(broker.port, topic, 1) == (-1, OFFSET_OUT_OF_RANGE)


def test_cleanup_policy(broker, new_topic):
    compact = new_topic({"cleanup.policy": "compact"}, suffix="-compact")
    both = new_topic({"cleanup.policy": "compact,delete"}, suffix="-both")
    for t in (compact, both):
        produce("kp", broker.bootstrap, t, make_records(4, now_ms()))
    assert delete_one(broker.port, compact, 2) == (-1, POLICY_VIOLATION)
    assert delete_one(broker.port, compact, -1) == (-1, POLICY_VIOLATION)
    assert beginning_offset(broker.bootstrap, compact) == 0
    assert delete_one(broker.port, both, 2) == (2, NONE)
    assert beginning_offset(broker.bootstrap, both) == 2


def test_same_partition_twice_last_offset_wins(broker, new_topic):
    """Kafka collects (topic-partition -> offset) into a map: the last occurrence wins,
    the partition is answered once, a topic named twice is answered once."""
    topic = new_topic(partitions=2)
    for p in (0, 1):
        produce_n(broker.bootstrap, topic, 6, now_ms(), partition=p)
    with RawConn(broker.port) as conn:
        resp = delete_records(conn, 1, [(topic, [(0, 4), (0, 2)])])
        assert results(resp) == {(topic, 0): (2, NONE)}
        # a repeat beyond the high watermark after a valid one: the error is the answer
        resp = delete_records(conn, 2, [(topic, [(1, 3)]), (topic, [(1, 99)])])
        assert [t.name for t in resp.topics] == [topic]
        assert results(resp) == {(topic, 1): (-1, OFFSET_OUT_OF_RANGE)}
        resp = delete_records(conn, 2, [(topic, [(1, 99), (0, 5)]), (topic, [(1, 3)])])
        assert [t.name for t in resp.topics] == [topic]
        assert results(resp) == {(topic, 1): (3, NONE), (topic, 0): (5, NONE)}
    assert beginning_offset(broker.bootstrap, topic, 0) == 5
    assert beginning_offset(broker.bootstrap, topic, 1) == 3


def test_mixed_partitions_answered_each(broker, new_topic):
    topic = new_topic(partitions=3)
    compact = new_topic({"cleanup.policy": "compact"}, suffix="-compact")
    for p in range(3):
        produce_n(broker.bootstrap, topic, 5, now_ms(), partition=p)
    with RawConn(broker.port) as conn:
        resp = delete_records(conn, 2, [
            (topic, [(0, 2), (1, 6), (2, -1), (3, 0), (-1, 0)]),
            (compact, [(0, 0)]),
            ("", [(0, 0)]),
        ])
        assert results(resp) == {
            (topic, 0): (2, NONE),
            (topic, 1): (-1, OFFSET_OUT_OF_RANGE),
            (topic, 2): (5, NONE),
            (topic, 3): (-1, UNKNOWN_TOPIC_OR_PARTITION),
            (topic, -1): (-1, UNKNOWN_TOPIC_OR_PARTITION),
            (compact, 0): (-1, POLICY_VIOLATION),
            ("", 0): (-1, UNKNOWN_TOPIC_OR_PARTITION),
        }
        # an empty request gets an empty answer
        resp = delete_records(conn, 0, [])
        assert resp.topics == [] and resp.throttle_time_ms == 0
    assert [beginning_offset(broker.bootstrap, topic, p) for p in range(3)] == [2, 0, 5]


def test_internal_topic_refused(broker_factory):
    """ReplicaManager.deleteRecordsOnLocalLog: records of an internal topic
    (Topic.isInternal) cannot be deleted: INVALID_TOPIC_EXCEPTION. A private broker, so
    no other test sees a __consumer_offsets topic."""
    b = broker_factory({"auto.create.topics.enable": "false"})
    create_topic(b.bootstrap, "__consumer_offsets")
    # clients cannot append to an internal topic either (ReplicaManager.appendToLocalLog)
    from tests.integration.helpers import build_v2_batch, parse_produce_response_v3, produce_request_v3

    with RawConn(b.port) as conn:
        body = conn.request(0, 3, produce_request_v3("__consumer_offsets", 0, build_v2_batch(make_records(3, now_ms()))), 5)
    assert parse_produce_response_v3(body)[("__consumer_offsets", 0)][0] == INVALID_TOPIC_EXCEPTION
    assert delete_one(b.port, "__consumer_offsets", 1) == (-1, INVALID_TOPIC_EXCEPTION)
    assert beginning_offset(b.bootstrap, "__consumer_offsets") == 0


# --- hand-packed frames (independent of Chronolog's codec) ---------------------------------


def test_hand_packed_v0(broker, new_topic):
    topic = new_topic()
    produce_n(broker.bootstrap, topic, 5, now_ms())
    body = struct.pack(">i", 1) + _kstring(topic) + struct.pack(">i", 2) + struct.pack(">iq", 0, 3) \
        + struct.pack(">iq", 1, 0) + struct.pack(">i", 1000)
    with RawConn(broker.port) as conn:
        resp = conn.request(DELETE_RECORDS, 0, body, correlation_id=31)
    throttle, nt = struct.unpack_from(">ii", resp, 0)
    pos = 8
    assert throttle == 0 and nt == 1
    (ln,) = struct.unpack_from(">h", resp, pos)
    pos += 2
    assert resp[pos:pos + ln].decode() == topic
    pos += ln
    (np_,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    parts = {}
    for _ in range(np_):
        p, low, err = struct.unpack_from(">iqh", resp, pos)
        pos += 14
        parts[p] = (low, err)
    assert pos == len(resp)
    assert parts == {0: (3, NONE), 1: (-1, UNKNOWN_TOPIC_OR_PARTITION)}


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def test_hand_packed_v2_flexible(broker, new_topic):
    topic = new_topic()
    produce_n(broker.bootstrap, topic, 5, now_ms())
    name = topic.encode()
    header = struct.pack(">hhi", DELETE_RECORDS, 2, 41) + _kstring("chronolog-it") + b"\x00"  # header v2
    body = _uvarint(2) + _uvarint(len(name) + 1) + name + _uvarint(2) + struct.pack(">iq", 0, 4) + b"\x00" \
        + b"\x00" + struct.pack(">i", 1000) + b"\x00"
    with RawConn(broker.port) as conn:
        conn.send(struct.pack(">i", len(header + body)) + header + body)
        resp = conn.recv_frame()
    cid = struct.unpack_from(">i", resp, 0)[0]
    assert cid == 41
    assert resp[4] == 0, "response header v1: no tagged fields"
    pos = 5
    (throttle,) = struct.unpack_from(">i", resp, pos)
    pos += 4
    assert throttle == 0
    assert resp[pos] == 2  # one topic (compact array: n + 1)
    pos += 1
    assert resp[pos] == len(name) + 1
    pos += 1
    assert resp[pos:pos + len(name)] == name
    pos += len(name)
    assert resp[pos] == 2  # one partition
    pos += 1
    p, low, err = struct.unpack_from(">iqh", resp, pos)
    pos += 14
    assert (p, low, err) == (0, 4, NONE)
    assert resp[pos:] == b"\x00\x00\x00"  # partition, topic and top-level tagged fields
    assert beginning_offset(broker.bootstrap, topic) == 4


def test_api_versions_advertises_delete_records(broker):
    with RawConn(broker.port) as conn:
        err, keys = parse_api_versions_v0(conn.request(API_VERSIONS, 0, b"", correlation_id=5))
    assert err == NONE
    assert keys.get(DELETE_RECORDS) == (0, 2)


def test_unsupported_version_closes_like_other_apis(broker, new_topic):
    """DeleteRecords v3 does not exist: Kafka closes the connection (only ApiVersions
    gets an UNSUPPORTED_VERSION answer); the broker keeps serving others."""
    topic = new_topic()
    with RawConn(broker.port) as conn:
        conn.send(struct.pack(">i", 8 + 2 + len("x")) + struct.pack(">hhi", DELETE_RECORDS, 3, 1) + _kstring("x"))
        assert conn.wait_closed(10)
    assert delete_one(broker.port, topic, 0) == (0, NONE)


def test_truncated_request_closes_only_that_connection(broker, new_topic):
    topic = new_topic()
    produce_n(broker.bootstrap, topic, 3, now_ms())
    body = struct.pack(">i", 1) + _kstring(topic) + struct.pack(">i", 1) + struct.pack(">i", 0)  # offset missing
    with RawConn(broker.port) as conn:
        payload = struct.pack(">hhi", DELETE_RECORDS, 0, 3) + _kstring("x") + body
        conn.send(struct.pack(">i", len(payload)) + payload)
        assert conn.wait_closed(10)
    assert beginning_offset(broker.bootstrap, topic) == 0
    assert delete_one(broker.port, topic, 1) == (1, NONE)


# ---------------------------------------------------------------------------------------
# persistence
# ---------------------------------------------------------------------------------------


@pytest.mark.slow
def test_log_start_offset_survives_clean_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("delete-records-restart"), partitions=2)
    base = now_ms() - 50_000
    produce_n(b.bootstrap, topic, 10, base, partition=0)
    produce_n(b.bootstrap, topic, 4, base, partition=1)
    assert delete_one(b.port, topic, 6, partition=0) == (6, NONE)
    assert delete_one(b.port, topic, -1, partition=1) == (4, NONE)

    assert b.stop() == 0
    b.restart()

    assert beginning_offset(b.bootstrap, topic, 0) == 6, "log start offset of partition 0 lost on restart"
    assert beginning_offset(b.bootstrap, topic, 1) == 4, "log start offset of partition 1 lost on restart"
    assert end_offset(b.bootstrap, topic, 0) == 10
    assert end_offset(b.bootstrap, topic, 1) == 4
    with RawConn(b.port) as conn:
        assert fetch_error(conn, topic, 5)[0] == OFFSET_OUT_OF_RANGE
        assert fetch_error(conn, topic, 6) == (NONE, 10, 6)
    assert first_offset_with_reset(b.bootstrap, topic, None) == 6
    assert offsets_for_times("kp", b.bootstrap, topic, [base - 1])[base - 1][0] == 6
    # and it keeps moving from there
    assert delete_one(b.port, topic, 3, partition=0) == (6, NONE)
    assert delete_one(b.port, topic, 8, partition=0) == (8, NONE)


@pytest.mark.slow
def test_retention_pass_removes_segments_below_the_new_start(broker_factory):
    """Segments wholly below the new log start offset go at the next retention pass; the
    segment holding the new start stays, and the start offset stays where DeleteRecords
    put it (not rounded down to a segment base), before and after a restart."""
    b = broker_factory({"auto.create.topics.enable": "false",
                        "log.retention.check.interval.ms": 300,
                        "log.segment.delete.delay.ms": 100})
    topic = create_topic(b.bootstrap, unique_topic("delete-records-segments"),
                         {"segment.bytes": 50_000, "retention.ms": -1})
    base_ts = now_ms() - 60_000
    for i in range(10):  # ~25 KB per call: about two appends per segment
        recs = make_records(100, base_ts + i * 1000, step=1, value_size=200, prefix=f"s{i}")
        produce("ck", b.bootstrap, topic, recs)
    pdir = b.partition_dir(topic)

    def bases():
        return sorted(int(p.name[:20]) for p in pdir.glob("*.log"))

    before = bases()
    assert len(before) >= 4, f"expected several segments: {before}"
    target = before[2] + 10  # inside the third segment
    assert delete_one(b.port, topic, target) == (target, NONE)

    deadline = time.monotonic() + 15
    while bases()[0] != before[2]:
        assert time.monotonic() < deadline, f"segments below {target} not deleted: {bases()} (were {before})"
        time.sleep(0.2)
    time.sleep(1.0)  # more retention passes: nothing else may go
    assert bases() == before[2:]

    def check():
        assert beginning_offset(b.bootstrap, topic) == target
        assert end_offset(b.bootstrap, topic) == 1000
        got = consume("ck", b.bootstrap, topic, 1000 - target, start=target)
        assert [g.offset for g in got] == list(range(target, 1000))
        assert first_offset_with_reset(b.bootstrap, topic, 0) == target
        assert offsets_for_times("kp", b.bootstrap, topic, [0])[0][0] == target
        with RawConn(b.port) as conn:
            assert fetch_error(conn, topic, target - 1)[0] == OFFSET_OUT_OF_RANGE
            assert fetch_error(conn, topic, target) == (NONE, 1000, target)

    check()
    assert b.stop() == 0
    b.restart()
    check()
    assert bases() == before[2:]
