"""Controlled shutdown (issue 5, Lifecycle): SIGTERM/SIGINT stop accepting, answer the
requests in flight (a parked Fetch long poll gets its answer, not a dropped connection),
flush, write the checkpoints and ``.kafka_cleanshutdown``, and exit 0 within 10 s; the
next start finds the marker and recovers nothing; every acknowledged record survives; a
second signal while stopping changes nothing.

The raw Fetch is built with Chronolog's codec (as in test_fetch_rules.py, which checks it
against kafka-python); everything else uses stock clients."""

from __future__ import annotations

import re
import signal
import threading
import time

import pytest

from protocol import codec
from protocol.messages import FetchRequest, RequestHeader

from tests.integration.helpers import (
    RawConn,
    ck_producer_config,
    consume,
    create_topic,
    end_offset,
    make_records,
    now_ms,
    produce,
    unique_topic,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

EXIT_BOUND_S = 10.0
CLEAN_MARKER = ".kafka_cleanshutdown"
RECOVERY_RE = re.compile(r"recover|rebuilding the indexes|cut \d+ invalid", re.I)


def fetch_request(topic: str, offset: int, max_wait_ms: int, correlation_id: int = 7, version: int = 11) -> bytes:
    req = FetchRequest(
        replica_id=-1, max_wait_ms=max_wait_ms, min_bytes=1, max_bytes=50 * 1024 * 1024, isolation_level=0,
        session_id=0, session_epoch=-1,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchPartition(
            partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
            partition_max_bytes=1024 * 1024)])],
        forgotten_topics_data=[], rack_id="",
    )
    header = RequestHeader(api_key=1, api_version=version, correlation_id=correlation_id, client_id="t-shutdown")
    return codec.encode_request(header, req)


def sigterm_and_wait(b, sig=signal.SIGTERM) -> tuple[int, float]:
    """Send ``sig`` to the broker process and wait for it; -> (exit code, seconds)."""
    proc = b.proc
    t0 = time.monotonic()
    proc.send_signal(sig)
    try:
        rc = proc.wait(timeout=EXIT_BOUND_S + 5)
    except Exception:
        b.kill()
        pytest.fail(f"broker did not exit within {EXIT_BOUND_S + 5} s of {sig.name}; log:\n{b.log_tail(40)}")
    elapsed = time.monotonic() - t0
    b.proc = None
    b.exit_codes.append(rc)
    return rc, elapsed


def assert_clean_restart(b, topics: list[str]) -> None:
    """The marker is on disk; the restarted broker reports a clean shutdown and logs no
    recovery for the topics."""
    assert (b.log_dir / CLEAN_MARKER).exists(), "no .kafka_cleanshutdown after a SIGTERM stop"
    pos = b.log_size()
    b.start()
    text = b.log_text(since=pos)
    assert "clean shutdown" in text and "no clean-shutdown marker" not in text, text[-3000:]
    bad = [line for line in text.splitlines()
           if RECOVERY_RE.search(line) and any(t in line for t in topics)]
    assert not bad, "recovery after a clean shutdown:\n" + "\n".join(bad)
    assert not (b.log_dir / CLEAN_MARKER).exists(), "the marker is removed once it has been read"


def test_sigterm_answers_a_parked_long_poll_and_restarts_clean(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("shutdown-poll"))
    produce("kp", b.bootstrap, topic, make_records(3, now_ms()))

    result: dict = {}

    def parked_fetch():
        try:
            with RawConn(b.port, timeout=40) as conn:
                conn.send(fetch_request(topic, 3, max_wait_ms=30_000))
                t0 = time.monotonic()
                cid, resp = codec.decode_response(1, 11, conn.recv_frame())
                result["elapsed"] = time.monotonic() - t0
                result["cid"] = cid
                result["part"] = resp.responses[0].partitions[0]
        except Exception as exc:  # reported below
            result["error"] = exc

    t = threading.Thread(target=parked_fetch)
    t.start()
    time.sleep(1.0)  # parked at the log end (max_wait 30 s)
    assert t.is_alive(), f"the fetch should be parked, got {result}"
    rc, elapsed = sigterm_and_wait(b)
    t.join(timeout=20)
    assert rc == 0, f"exit code {rc}; log:\n{b.log_tail(30)}"
    assert elapsed < EXIT_BOUND_S, f"took {elapsed:.1f} s to exit"
    assert "error" not in result, f"the parked fetch was dropped instead of answered: {result['error']!r}"
    assert result["cid"] == 7
    part = result["part"]
    assert part.error_code == 0 and part.high_watermark == 3 and len(part.records) == 0
    assert result["elapsed"] < 20, "answered at shutdown, not at max_wait_ms"
    assert_clean_restart(b, [topic])
    got = consume("kp", b.bootstrap, topic, 3)
    assert [g.offset for g in got] == [0, 1, 2]


def test_sigterm_during_sustained_produce_keeps_every_acknowledged_record(broker_factory):
    from confluent_kafka import Producer

    b = broker_factory({"auto.create.topics.enable": "false"})
    topics = [create_topic(b.bootstrap, unique_topic(f"shutdown-produce-{i}")) for i in range(2)]
    acked: dict[str, dict[int, bytes]] = {t: {} for t in topics}
    failed = [0]
    stop = threading.Event()

    def on_delivery(err, msg):
        if err is None:
            acked[msg.topic()][msg.offset()] = msg.value()
        else:
            failed[0] += 1

    def run_producer():
        p = Producer(ck_producer_config(b.bootstrap, **{
            "linger.ms": 2, "acks": "all", "message.timeout.ms": 4000, "request.timeout.ms": 3000, "retries": 0,
            "reconnect.backoff.max.ms": 200}))
        i = 0
        while not stop.is_set():
            for topic in topics:
                try:
                    p.produce(topic, key=b"k%d" % i, value=b"value-%d" % i, partition=0, on_delivery=on_delivery)
                except BufferError:
                    p.poll(0.05)
            i += 1
            if i % 100 == 0:
                p.poll(0)
        p.flush(8)

    t = threading.Thread(target=run_producer)
    t.start()
    try:
        deadline = time.monotonic() + 20
        while sum(len(a) for a in acked.values()) < 2000 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sum(len(a) for a in acked.values()) >= 2000, "the producer did not get going"
        rc, elapsed = sigterm_and_wait(b)
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(timeout=30)
    assert rc == 0, f"exit code {rc}; log:\n{b.log_tail(30)}"
    assert elapsed < EXIT_BOUND_S, f"took {elapsed:.1f} s to exit"
    assert_clean_restart(b, topics)
    for topic in topics:
        ends = end_offset(b.bootstrap, topic)
        mine = acked[topic]
        assert mine, topic
        assert ends >= max(mine) + 1, f"{topic}: log end {ends} below acknowledged offset {max(mine)}"
        got = {g.offset: g.value for g in consume("kp", b.bootstrap, topic, ends)}
        missing = [o for o in mine if got.get(o) != mine[o]]
        assert not missing, f"{topic}: {len(missing)} acknowledged record(s) lost or changed, e.g. {missing[:5]}"


@pytest.mark.parametrize("second", [signal.SIGTERM, signal.SIGINT])
def test_repeated_signals_while_stopping_still_exit_0(broker_factory, second):
    b = broker_factory()
    topic = create_topic(b.bootstrap, unique_topic("shutdown-twice"))
    produce("kp", b.bootstrap, topic, make_records(5, now_ms()))
    conns = [RawConn(b.port, timeout=30) for _ in range(3)]
    try:
        for c in conns:  # three parked long polls to answer while signals keep coming
            c.send(fetch_request(topic, 5, max_wait_ms=30_000))
        time.sleep(0.5)
        proc = b.proc
        t0 = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        while proc.poll() is None and time.monotonic() - t0 < EXIT_BOUND_S + 5:
            # again and again, as fast as we can, in every phase of the shutdown up to
            # the process's exit (a 3 ms pause between signals missed the end of it)
            proc.send_signal(second)
        rc = proc.wait(timeout=5)
        elapsed = time.monotonic() - t0
        b.proc = None
        b.exit_codes.append(rc)
        for c in conns:
            cid, resp = codec.decode_response(1, 11, c.recv_frame())
            assert cid == 7 and resp.responses[0].partitions[0].error_code == 0
    finally:
        for c in conns:
            c.close()
    assert rc == 0, f"exit code {rc}; log:\n{b.log_tail(30)}"
    assert elapsed < EXIT_BOUND_S
    text = b.log_text()
    assert "received while shutting down" in text
    assert "Traceback" not in text
    assert_clean_restart(b, [topic])


def test_sigint_stops_cleanly(broker_factory):
    b = broker_factory()
    topic = create_topic(b.bootstrap, unique_topic("shutdown-int"))
    produce("kp", b.bootstrap, topic, make_records(4, now_ms()))
    rc, elapsed = sigterm_and_wait(b, signal.SIGINT)
    assert rc == 0 and elapsed < EXIT_BOUND_S, (rc, elapsed, b.log_tail(20))
    assert_clean_restart(b, [topic])


def test_a_segment_file_gone_at_shutdown_is_named_in_one_line_exit_1_and_recovered(broker_factory):
    """A file removed under the running broker (here a segment's offset index): the stop
    names it in one line and exits 1, without a traceback; that log dir gets no
    clean-shutdown marker, so the next start recovers it (the index rebuilt) and every
    acknowledged record is still there."""
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("shutdown-gone"))
    produce("kp", b.bootstrap, topic, make_records(3, now_ms()))
    index = b.log_dir / f"{topic}-0" / "00000000000000000000.index"
    assert index.exists()
    pos = b.log_size()
    index.unlink()
    rc, elapsed = sigterm_and_wait(b)
    text = b.log_text(since=pos)
    assert rc == 1, f"exit code {rc}; log:\n{text[-3000:]}"
    assert elapsed < EXIT_BOUND_S
    assert "Traceback" not in text, text[-3000:]
    assert any("error closing" in line and str(index) in line for line in text.splitlines()), text[-3000:]
    assert "Chronolog stopped with errors: closing the logs failed (FileNotFoundError" in text, text[-3000:]
    assert not (b.log_dir / CLEAN_MARKER).exists()
    pos = b.log_size()
    b.start()
    assert "no clean-shutdown marker" in b.log_text(since=pos)
    got = consume("kp", b.bootstrap, topic, 3)
    assert [g.offset for g in got] == [0, 1, 2]
    assert index.exists()
