"""The produce path against hostile and broken input, on a real broker (issue: batches
whose headers disagree with their records were acknowledged and then broke consumers;
compression bombs and partial frames cost unbounded memory and stalled other clients).

* a property test: generated batches with one kind of damage each, sent as Produce v8;
  every one is refused with Kafka's code and nothing appended, or accepted and then read
  back identically by kafka-python and confluent-kafka, with ListOffsets-by-time
  agreeing with a full scan of what they read;
* compression bombs: the broker's RSS and another client's round trip while they land;
* partly sent frames: the broker's RSS, and queued.max.request.bytes muting a reader;
* malformed batches already in a segment: reads answer error codes, connections stay.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol import compression as C
from protocol import records as R
from protocol.messages import FetchRequest, ListOffsetsRequest, ProduceRequest, RequestHeader

from tests.forge import forge_batch, raw_record as _record, set_length_and_crc, zz
from tests.integration import helpers as H
from tests.integration.helpers import RawConn

INVALID_RECORD, CORRUPT_MESSAGE, MESSAGE_TOO_LARGE = 87, 2, 10
UNSUPPORTED_COMPRESSION_TYPE, UNKNOWN_TOPIC_OR_PARTITION = 76, 3


# ----------------------------------------------------------------------------- raw requests

def call(conn: RawConn, api_key: int, version: int, body, cid: int = 1):
    header = RequestHeader(api_key=api_key, api_version=version, correlation_id=cid, client_id="it-hardening")
    conn.send(codec.encode_request(header, body))
    got, resp = codec.decode_response(api_key, version, conn.recv_frame())
    assert got == cid
    return resp


def produce(conn: RawConn, topic: str, records: bytes, version: int = 8, partition: int = 0):
    resp = call(conn, 0, version, ProduceRequest(transactional_id=None, acks=-1, timeout_ms=10_000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=partition, records=records)])]))
    return resp.responses[0].partition_responses[0]


def list_offset(conn: RawConn, topic: str, ts: int, version: int = 7):
    resp = call(conn, 2, version, ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
        ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
            ListOffsetsRequest.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=ts)])]))
    return resp.topics[0].partitions[0]


def fetch(conn: RawConn, topic: str, offset: int, version: int):
    req = FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1,
                       topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
                           partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                           partition_max_bytes=1 << 20)])],
                       forgotten_topics_data=[], rack_id="")
    return call(conn, 1, version, req).responses[0].partitions[0]


def api_versions_rtt(port: int) -> float:
    with RawConn(port) as c:
        t = time.perf_counter()
        c.request(18, 0, b"", 7)
        return time.perf_counter() - t


# ----------------------------------------------------------------------------- forging

def raw_record(ts_delta: int, off_delta: int, key: bytes | None, value: bytes) -> bytes:
    return _record(ts_delta, off_delta, key, value, headers=[(b"h", b"hv")])


def forge(records: bytes, count: int, base_ts: int, max_ts: int, codec_id: int = 0) -> bytes:
    return forge_batch(records, count, base_ts=base_ts, max_ts=max_ts, codec=codec_id)


KINDS = ["honest", "count_high", "count_low", "count_huge", "negative_length", "cut_one_byte",
         "max_ts_lie", "deltas_shuffled", "flip_byte", "null_key_compacted"]
REFUSED = {"count_high", "count_low", "count_huge", "negative_length", "cut_one_byte", "null_key_compacted"}


@st.composite
def cases(draw):
    now = H.now_ms()
    n = draw(st.integers(1, 6))
    deltas = [draw(st.integers(-5_000, 5_000)) for _ in range(n)]
    values = [draw(st.binary(min_size=0, max_size=40)) for _ in range(n)]
    kind = draw(st.sampled_from(KINDS))
    codec_id = draw(st.sampled_from([0, 0, 1, 2, 3, 4]))
    offs = list(range(n))
    if kind == "deltas_shuffled" and n > 1:
        offs = [0] + [draw(st.integers(1, 50)) for _ in range(n - 1)]
    keys = [b"k%d" % i for i in range(n)]
    if kind == "null_key_compacted":
        keys[draw(st.integers(0, n - 1))] = None
    recs = [raw_record(d, o, k, v) for d, o, k, v in zip(deltas, offs, keys, values)]
    data = b"".join(recs)
    count = n
    if kind == "count_high":
        count = n + draw(st.integers(1, 3))
    elif kind == "count_low":
        count = n - 1 if n > 1 else 2
    elif kind == "count_huge":
        count = 2**31 - 1
    elif kind == "negative_length":
        data = data + zz(-draw(st.integers(1, 100))) + b"\x00" * 6
        count = n + 1
    elif kind == "flip_byte":
        # not a record's attributes byte nor its header's key: Kafka checks neither (it
        # does not read the attributes, and decodes a header key's UTF-8 leniently), and a
        # flip there that keeps the record well formed tests the clients' read-back instead
        # (kafka-python reads the attributes as a varint and refuses a key that is not
        # UTF-8, librdkafka takes bit 3 for LogAppendTime)
        unchecked_at, at = set(), 0
        for r in recs:
            n_len = next(i for i, c in enumerate(r) if c < 0x80) + 1  # the length varint's bytes
            unchecked_at.add(at + n_len)
            unchecked_at.add(at + len(r) - 4)  # the key "h" of its header, 4th byte from the end
            at += len(r)
        b = bytearray(data)
        b[draw(st.integers(0, len(b) - 1).filter(lambda i: i not in unchecked_at))] = draw(st.integers(0, 255))
        data = bytes(b)
    true_max = max(now + d for d in deltas)
    max_ts = true_max + draw(st.integers(1, 10**9)) if kind == "max_ts_lie" else true_max
    batch = forge(data, count, now, max_ts, codec_id)
    if kind == "cut_one_byte":
        batch = set_length_and_crc(bytearray(batch)[:-1])
    return kind, codec_id, batch


def expected_records(batch: bytes):
    """What the broker must store for an accepted batch: the records in order, at
    consecutive offsets, with their own timestamps (decoded by the reference decoder)."""
    h = R.parse_batch_header(batch, 0)
    return [(r.timestamp, r.key, r.value) for r in R.iter_records(batch, 0, h)]


@pytest.fixture(scope="module")
def hardening_broker(tmp_path_factory):
    b = H.start_broker(tmp_path_factory.mktemp("hardening"), {"auto.create.topics.enable": "false"})
    yield b
    b.stop()


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.lists(cases(), min_size=1, max_size=4))
def test_malformed_batches_are_refused_or_read_back_whole(hardening_broker, batch_cases):
    b = hardening_broker
    compacted = any(kind == "null_key_compacted" for kind, _, _ in batch_cases)
    topic = H.create_topic(b.bootstrap, H.unique_topic("harden"),
                           {"cleanup.policy": "compact"} if compacted else None)
    expected = []
    with RawConn(b.port) as conn:
        for kind, codec_id, batch in batch_cases:
            before = H.end_offset(b.bootstrap, topic)
            p = produce(conn, topic, batch)
            after = H.end_offset(b.bootstrap, topic)
            if kind in REFUSED:
                # records that break the rules: INVALID_RECORD; a compressed stream cut
                # short cannot even be decompressed: CORRUPT_MESSAGE
                want = CORRUPT_MESSAGE if kind == "cut_one_byte" and codec_id else INVALID_RECORD
                assert p.error_code == want, (kind, codec_id, p)
            if p.error_code:
                assert p.error_code in (INVALID_RECORD, CORRUPT_MESSAGE), (kind, codec_id, p)
                assert p.base_offset == -1 and after == before, f"{kind}: refused but appended"
                if kind == "null_key_compacted":
                    assert p.record_errors, "per-record errors for keyless records on a compacted topic"
                continue
            recs = expected_records(batch)
            assert p.base_offset == before and after == before + len(recs), (kind, p)
            expected.extend(recs)
        # the connection is still usable after every refusal
        assert list_offset(conn, topic, -1).error_code == 0
    n = len(expected)
    if not n:
        return
    want = [(i, ts, k, v) for i, (ts, k, v) in enumerate(expected)]
    for who, consume in (("kafka-python", H.consume_kp), ("confluent-kafka", H.consume_ck)):
        got = consume(b.bootstrap, topic, n)
        assert [(g.offset, g.timestamp, g.key, g.value) for g in got] == want, who
    # the time index agrees with a full scan of what was read
    stamps = [ts for ts, _, _ in expected]
    targets = sorted({t + d for t in stamps for d in (-1, 0, 1) if t + d >= 0})
    with RawConn(b.port) as conn:
        for t in targets:
            p = list_offset(conn, topic, t)
            oracle = H.oracle_offset_for_time(stamps, t)
            assert p.error_code == 0
            assert (p.offset, p.timestamp) == (oracle if oracle else (-1, -1)), (t, stamps)


def test_produce_v8_names_the_failing_record(hardening_broker):
    b = hardening_broker
    topic = H.create_topic(b.bootstrap, H.unique_topic("keyless"), {"cleanup.policy": "compact"})
    now = H.now_ms()
    recs = raw_record(0, 0, b"a", b"1") + raw_record(1, 1, None, b"2")
    with RawConn(b.port) as conn:
        p = produce(conn, topic, forge(recs, 2, now, now + 1))
        assert p.error_code == INVALID_RECORD
        assert [e.batch_index for e in p.record_errors] == [1]
        assert "key" in p.record_errors[0].batch_index_error_message
        p = produce(conn, topic, forge(recs, 3, now, now + 1))
        assert p.error_code == INVALID_RECORD and "declares 3" in p.error_message


def test_request_level_record_rules(hardening_broker):
    """ProduceRequest.validateRecords: from v3 on one v2 batch per partition, no zstd
    before v7; an unknown partition is answered as such before its records are looked at
    (KafkaApis.handleProduceRequest). A refused append stores nothing."""
    b = hardening_broker
    topic = H.create_topic(b.bootstrap, H.unique_topic("one-batch"))
    now = H.now_ms()
    one = R.build_batch([(now, b"k", b"v")])
    with RawConn(b.port) as conn:
        for version in (3, 8, 9):
            p = produce(conn, topic, one + one, version)
            assert p.error_code == INVALID_RECORD, (version, p)
            assert version < 8 or "exactly one record batch" in p.error_message  # v8+ carry a message
        zstd = R.build_batch([(now, b"k", b"v")], compression=4)
        assert produce(conn, topic, zstd, 6).error_code == UNSUPPORTED_COMPRESSION_TYPE
        p = produce(conn, topic, one + one, 8, partition=7)
        assert p.error_code == UNKNOWN_TOPIC_OR_PARTITION
        assert produce(conn, topic, zstd, 7).base_offset == 0
        assert produce(conn, topic, one, 3).base_offset == 1
        assert produce(conn, topic, one + one, 2).base_offset == 2  # before v3 several batches go
        got = fetch(conn, topic, 0, 11)
        assert got.high_watermark == 4
        data = bytes(got.records)
        assert [(r.offset, r.value) for pos, h in R.iter_batches(data)
                for r in R.iter_records(data, pos, h)] == [(i, b"v") for i in range(4)]


# ----------------------------------------------------------------------------- bombs

def rss_kib(pid: int, field: str = "VmRSS") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise AssertionError(f"no {field} for {pid}")


def _zstd_zeros(n: int) -> bytes:
    return C._ZSTD_C.compress(b"\0" * n)


def _gzip_stream(chunks, level=9) -> bytes:
    co = zlib.compressobj(level, zlib.DEFLATED, 31)
    return b"".join(co.compress(c) for c in chunks) + co.flush()


def bombs(now: int) -> list[tuple[str, bytes]]:
    """Batches that decompress to far more than they weigh."""
    zero_mib = b"\0" * (1 << 20)
    out = []
    # 1 GiB of zeros in ~32 KB (zstd) and 256 MiB in ~256 KB (gzip): the records are garbage
    out.append(("zstd 1 GiB of zeros", forge_payload(_zstd_zeros(1 << 30), 4, 1000, now)))
    out.append(("gzip 256 MiB of zeros", forge_payload(_gzip_stream([zero_mib] * 256), 1, 1000, now)))
    # one well-formed record whose value is 512 MiB of zeros: valid until the size bound
    value_len = 512 << 20
    body_prefix = b"\x00" + zz(0) + zz(0) + zz(1) + b"k" + zz(value_len)
    rec_prefix = zz(len(body_prefix) + value_len + 1) + body_prefix
    z = _gzip_stream([rec_prefix] + [zero_mib] * 512 + [zz(0)], level=6)
    out.append(("gzip record of 512 MiB", forge_payload(z, 1, 1, now)))
    zs = C._ZSTD_C.compress(rec_prefix + b"\0" * value_len + zz(0))
    out.append(("zstd record of 512 MiB", forge_payload(zs, 4, 1, now)))
    return out


def forge_payload(payload: bytes, codec_id: int, count: int, now: int) -> bytes:
    return forge_batch(b"", count, base_ts=now, codec=codec_id, compressed=payload)


@pytest.mark.slow
def test_compression_bombs_cost_bounded_memory_and_stall_nobody(tmp_path):
    b = H.start_broker(tmp_path, {"message.max.bytes": str(2 << 20)})
    try:
        topic = H.create_topic(b.bootstrap, H.unique_topic("bombs"))
        cases_ = bombs(H.now_ms())
        pid = b.proc.pid
        base_rss = rss_kib(pid)
        stop = threading.Event()
        rtts: list[float] = []
        peak = [0]

        def watch():
            while not stop.is_set():
                rtts.append(api_versions_rtt(b.port))
                peak[0] = max(peak[0], rss_kib(pid))
                time.sleep(0.005)

        t = threading.Thread(target=watch, daemon=True)
        t.start()
        time.sleep(0.3)
        results = []
        with RawConn(b.port, timeout=60) as conn:
            for name, batch in cases_:
                started = time.perf_counter()
                p = produce(conn, topic, batch)
                results.append((name, p.error_code, time.perf_counter() - started))
        time.sleep(0.3)
        stop.set()
        t.join(10)
        peak[0] = max(peak[0], rss_kib(pid))
        for name, code, _secs in results:
            assert code in (INVALID_RECORD, MESSAGE_TOO_LARGE, CORRUPT_MESSAGE), (name, code)
        codes = dict((n, c) for n, c, _ in results)
        assert codes["gzip record of 512 MiB"] == MESSAGE_TOO_LARGE
        assert codes["zstd record of 512 MiB"] == MESSAGE_TOO_LARGE
        assert H.end_offset(b.bootstrap, topic) == 0
        grown_mib = (peak[0] - base_rss) / 1024
        assert peak[0] / 1024 < 300, f"broker RSS peaked at {peak[0] / 1024:.0f} MiB ({results})"
        assert len(rtts) > 20 and max(rtts) < 0.1, \
            f"another client's round trip reached {max(rtts) * 1000:.0f} ms during the bombs ({results})"
        print(f"bombs: {results}; RSS +{grown_mib:.0f} MiB, peak {peak[0] / 1024:.0f} MiB; "
              f"other client's round trip max {max(rtts) * 1000:.1f} ms over {len(rtts)}")
    finally:
        b.stop()


# ----------------------------------------------------------------------------- partial frames

def test_partial_frames_hold_only_what_they_sent(tmp_path):
    b = H.start_broker(tmp_path)
    socks = []
    try:
        pid = b.proc.pid
        base = rss_kib(pid)
        declared = 100 * 1024 * 1024 - 16
        for _ in range(12):
            s = socket.create_connection(("127.0.0.1", b.port))
            s.sendall(struct.pack(">i", declared) + struct.pack(">hhi", 0, 8, 1) + b"\0" * (256 << 10))
            socks.append(s)
        time.sleep(1.0)
        grown = (rss_kib(pid) - base) / 1024
        assert grown < 64, f"12 partial 100 MB frames grew the broker by {grown:.0f} MiB"
        assert api_versions_rtt(b.port) < 1.0
    finally:
        for s in socks:
            s.close()
        b.stop()


def test_queued_max_request_bytes_mutes_readers_until_memory_returns(tmp_path):
    limit = 1 << 20
    b = H.start_broker(tmp_path, {"socket.request.max.bytes": str(limit), "queued.max.request.bytes": str(limit)})
    try:
        hog = socket.create_connection(("127.0.0.1", b.port))
        hog.sendall(struct.pack(">i", limit - 4) + b"\0" * 100)  # reserves the whole pool
        time.sleep(0.3)
        with RawConn(b.port, timeout=5) as other:
            req = H.request_header_v1(18, 0, 5)
            data = H.frame(req)
            other.send(data[:6])  # an incomplete frame: must wait for memory
            time.sleep(0.3)
            other.send(data[6:])
            other.sock.settimeout(1.0)
            with pytest.raises(socket.timeout):
                other.recv_exact(4)
            hog.close()  # its bytes go back to the pool: the muted reader goes on
            other.sock.settimeout(10)
            resp = other.recv_frame()
            assert struct.unpack_from(">i", resp)[0] == 5
    finally:
        b.stop()


def test_queued_max_request_bytes_below_socket_request_max_bytes_is_refused(tmp_path):
    r = subprocess.run([sys.executable, "-m", "broker", "serve", "--override", "queued.max.request.bytes=1000",
                        "--override", f"log.dirs={tmp_path}"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2
    assert "queued.max.request.bytes" in r.stderr and "socket.request.max.bytes" in r.stderr
    assert "Traceback" not in r.stderr


# ----------------------------------------------------------------------------- stored damage

def test_malformed_batch_already_in_a_segment_is_answered_not_raised(tmp_path):
    """A batch stored before the produce path walked records (or damaged behind a valid
    CRC): reads answer error codes, one log line names the segment, connections stay."""
    b = H.start_broker(tmp_path)
    topic = H.create_topic(b.bootstrap, H.unique_topic("damaged"))
    now = H.now_ms()
    with RawConn(b.port) as conn:
        good = R.build_batch([(now + i, b"k", b"v%d" % i) for i in range(3)])
        assert produce(conn, topic, good).error_code == 0
    b.stop()
    seg = b.partition_dir(topic) / ("0" * 20 + ".log")
    bad = bytearray(forge(raw_record(0, 0, b"k", b"x") + zz(-9) + b"\x00" * 8, 2, now + 100, now + 200, 0))
    struct.pack_into(">q", bad, 0, 3)  # the next offset
    with open(seg, "ab") as f:
        f.write(bad)
    os.remove(b.log_dir / ".kafka_cleanshutdown")  # recovery reads the appended batch
    b.start()
    with RawConn(b.port) as conn:
        assert list_offset(conn, topic, -1).offset == 5
        p = list_offset(conn, topic, now + 150)  # must open the damaged batch
        assert p.error_code == CORRUPT_MESSAGE
        assert list_offset(conn, topic, now + 1).offset == 1  # same connection, still served
        p = list_offset(conn, topic, -3)  # max timestamp: in the damaged batch
        assert p.error_code == CORRUPT_MESSAGE
        assert fetch(conn, topic, 3, version=3).error_code == CORRUPT_MESSAGE  # down-conversion
        assert fetch(conn, topic, 0, version=11).error_code == 0  # v4+: bytes as stored
    text = b.log_tail(400)
    assert "Traceback" not in text
    assert any(f"{topic}-0" in line and "00000000000000000000.log" in line and "offset 3" in line
               for line in text.splitlines() if "ListOffsets" in line)
    b.stop()
    out = subprocess.run([sys.executable, "-m", "broker", "dump-log", "--deep-iteration", "--files", str(seg)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "offset 3" in out.stderr and "Traceback" not in out.stderr


def test_a_frame_larger_than_the_read_ahead_mark_is_read_whole(hardening_broker):
    """A 70 MiB request (over the 64 MiB read-ahead mark, under socket.request.max.bytes)
    is read to its end and answered; the connection does not stall."""
    b = hardening_broker
    topic = H.create_topic(b.bootstrap, H.unique_topic("huge"))
    now = H.now_ms()
    big = forge(raw_record(0, 0, b"k", b"\0" * (70 << 20)), 1, now, now)
    with RawConn(b.port, timeout=60) as conn:
        p = produce(conn, topic, big)
        assert p.error_code == MESSAGE_TOO_LARGE  # max.message.bytes is 1 MiB
        assert list_offset(conn, topic, -1).offset == 0
