"""Durability: every record acknowledged with acks=all survives a SIGKILL of the broker
and a restart on the same log dir (recovery), at its offset; the log and its time index
stay usable; a graceful SIGTERM stop exits cleanly and loses nothing either."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import (
    compare_offsets_for_times,
    consume,
    create_topic,
    ck_producer_config,
    end_offset,
    make_records,
    now_ms,
    offsets_for_times,
    produce,
    query_points,
    unique_topic,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]


def produce_acked(bootstrap: str, topic: str, n: int, base_ts: int, kill=None, kill_after: int | None = None,
                  codec: str = "none"):
    """Produce n records (acks=all) and return {offset: (key, value, timestamp)} for every
    record whose delivery report succeeded. With ``kill``, call it once ``kill_after``
    records have been acknowledged, while the rest are still in flight."""
    from confluent_kafka import Producer

    p = Producer(ck_producer_config(bootstrap, **{"acks": "all", "linger.ms": 5, "batch.size": 8192,
                                                  "compression.type": codec, "message.timeout.ms": 10_000,
                                                  "retries": 0}))
    acked: dict[int, tuple] = {}
    failed = [0]

    def cb(err, msg):
        if err is None:
            acked[msg.offset()] = (msg.key(), msg.value(), msg.timestamp()[1])
        else:
            failed[0] += 1

    killed = False
    for i in range(n):
        ts = base_ts + i
        while True:
            try:
                p.produce(topic, key=b"k%d" % i, value=b"durable-%d-" % i + b"y" * 50, partition=0,
                          timestamp=ts, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
        if kill is not None and not killed and len(acked) >= kill_after:
            kill()
            killed = True
    if kill is not None:
        deadline = time.monotonic() + 20
        while not killed and time.monotonic() < deadline:
            p.poll(0.1)
            if len(acked) >= kill_after:
                kill()
                killed = True
        assert killed, f"only {len(acked)} records acknowledged before the kill point {kill_after}"
        p.poll(0.5)
        p.purge(in_queue=True, in_flight=True, blocking=True)
        p.flush(5)
    else:
        assert p.flush(60) == 0
        assert failed[0] == 0, f"{failed[0]} records failed"
    return acked


def check_acked(bootstrap: str, topic: str, acked: dict[int, tuple], who: str) -> list:
    leo = end_offset(bootstrap, topic)
    top = max(acked) + 1 if acked else 0
    assert leo >= top, f"{who}: log end offset {leo} < last acknowledged offset + 1 ({top})"
    got = consume("ck", bootstrap, topic, leo, timeout=60)
    assert [g.offset for g in got] == list(range(leo)), f"{who}: offsets after restart not 0..{leo - 1}"
    lost = []
    for off, (k, v, ts) in sorted(acked.items()):
        g = got[off]
        if (g.key, g.value, g.timestamp) != (k, v, ts):
            lost.append((off, (k, v[:20], ts), (g.key, (g.value or b"")[:20], g.timestamp)))
    assert not lost, f"{who}: {len(lost)} acknowledged records differ after restart, first {lost[:3]}"
    return got


def test_sigkill_keeps_acknowledged_records(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 200_000,
                        "log.index.interval.bytes": 2048})
    topic = create_topic(b.bootstrap, unique_topic("durable"))
    base = now_ms() - 600_000

    # Phase 1: all acknowledged, then SIGKILL with nothing in flight.
    acked = produce_acked(b.bootstrap, topic, 3000, base, codec="lz4")
    assert sorted(acked) == list(range(3000))
    b.kill()
    b.restart()
    check_acked(b.bootstrap, topic, acked, "after SIGKILL #1")

    # Phase 2: SIGKILL while records are in flight; only the acknowledged ones count.
    more = produce_acked(b.bootstrap, topic, 4000, base + 3000, kill=b.kill, kill_after=1500)
    assert len(more) >= 1500
    acked.update(more)
    b.restart()
    got = check_acked(b.bootstrap, topic, acked, "after SIGKILL #2")

    # The recovered log keeps working: appends continue at the log end, and the rebuilt
    # time index answers exactly.
    leo = len(got)
    acks = produce("ck", b.bootstrap, topic, make_records(5, now_ms() - 1000, prefix="after"))
    assert [a.offset for a in acks] == list(range(leo, leo + 5))
    stamps = [g.timestamp for g in got]
    targets = sorted(set(query_points(stamps[::97] + [stamps[-1]]) + [stamps[0] - 1]))
    compare_offsets_for_times("kp", offsets_for_times("kp", b.bootstrap, topic, targets),
                              stamps + [a.timestamp for a in acks])


def test_graceful_stop_and_restart(broker_factory):
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("graceful"), {"message.timestamp.type": "LogAppendTime"})
    recs = make_records(500, now_ms() - 5_000, prefix="g")
    acks = produce("kp", b.bootstrap, topic, recs)
    rc = b.stop()
    assert rc == 0, f"SIGTERM: broker exit code {rc} (expected a clean 0 within 20 s)"
    b.restart()
    assert end_offset(b.bootstrap, topic) == 500
    got = consume("aio", b.bootstrap, topic, 500)
    assert [g.offset for g in got] == list(range(500))
    assert [g.timestamp for g in got] == [a.timestamp for a in acks]
    assert all(g.timestamp_type == 1 for g in got), "topic config (LogAppendTime) lost over restart"
    # the topic's configuration survived: new appends are still stamped by the broker
    before = now_ms()
    acks2 = produce("kp", b.bootstrap, topic, make_records(3, 1_000, prefix="g2"))
    assert all(a.timestamp >= before for a in acks2)


def test_recovery_after_torn_write_and_lost_indexes(broker_factory):
    """SIGKILL, then damage the files as a crash can: a partial batch at the end of the
    active segment, and a rolled segment's .index/.timeindex missing. On restart the
    broker must truncate the torn tail, rebuild the indexes, serve every acknowledged
    record, append after the last valid record, and search by time exactly."""
    import re

    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 50_000,
                        "log.index.interval.bytes": 1024})
    topic = create_topic(b.bootstrap, unique_topic("torn"))
    base = now_ms() - 900_000
    acked = produce_acked(b.bootstrap, topic, 2000, base)
    b.kill()

    pdir = b.partition_dir(topic)
    logs = sorted(p for p in pdir.iterdir() if re.match(r"^\d{20}\.log$", p.name))
    assert len(logs) >= 3, f"expected several segments: {[p.name for p in logs]}"
    active = logs[-1]
    data = active.read_bytes()
    # a torn append: the first 40 bytes of a copy of the segment's first batch header,
    # with an offset past the end (a batch header claiming more bytes than exist)
    torn = bytearray(data[:40])
    torn[0:8] = (10**6).to_bytes(8, "big")
    with open(active, "ab") as f:
        f.write(bytes(torn))
    victim = logs[1]
    for suffix in (".index", ".timeindex"):
        (pdir / (victim.stem + suffix)).unlink()

    b.restart()
    got = check_acked(b.bootstrap, topic, acked, "after torn write")
    assert len(got) == 2000, f"log end offset {len(got)} after recovery, 2000 records were written"
    acks = produce("ck", b.bootstrap, topic, make_records(3, now_ms() - 1000, prefix="post"))
    assert [a.offset for a in acks] == [2000, 2001, 2002]
    tail = consume("kp", b.bootstrap, topic, 4, start=1999)
    assert [g.offset for g in tail] == [1999, 2000, 2001, 2002]
    stamps = [g.timestamp for g in got] + [a.timestamp for a in acks]
    targets = sorted(set(query_points(stamps[::41] + [stamps[-1]])))
    compare_offsets_for_times("kp", offsets_for_times("kp", b.bootstrap, topic, targets), stamps)
    assert (pdir / (victim.stem + ".index")).exists() and (pdir / (victim.stem + ".timeindex")).exists(), \
        "missing index files were not rebuilt"


def test_checkpoint_files_after_clean_stop(broker_factory):
    """SPEC section 1: Kafka's per-log-dir checkpoint files are written on an orderly
    stop (text: version 0, count, "topic partition offset" lines); after a clean stop the
    recovery point is the log end."""
    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("ckpt"))
    produce("ck", b.bootstrap, topic, make_records(500, now_ms() - 5_000, prefix="c"))
    assert b.stop() == 0
    for name, want in (("recovery-point-offset-checkpoint", 500), ("log-start-offset-checkpoint", 0)):
        path = b.log_dir / name
        assert path.exists(), f"no {name} in the log dir after a clean stop"
        lines = path.read_text().split("\n")
        assert lines[0] == "0" and int(lines[1]) == len([x for x in lines[2:] if x.strip()]), lines[:4]
        entries = {tuple(x.split()[:2]): int(x.split()[2]) for x in lines[2:] if x.strip()}
        if name == "log-start-offset-checkpoint" and (topic, "0") not in entries:
            continue  # Kafka writes only partitions whose log start offset is above 0
        assert entries.get((topic, "0")) == want, f"{name}: {entries}"
