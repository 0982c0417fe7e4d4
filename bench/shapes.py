#!/usr/bin/env python3
"""Workload shapes beyond bulk batches (issue 17), Chronolog and Tansu side by side.

Each broker is started on its own (never both at once, as in bench/throughput.py) and
driven by stock clients (confluent-kafka / librdkafka). Shapes:

* ``small``: small requests. ``--producers`` processes, each producing ``--records``
  records of 100 B with linger.ms=0 and batch.num.messages=1 (one record per request,
  up to 5 in flight), acks=all. Reports aggregate records/s and the broker's CPU per
  record (user+sys of the broker's process tree, from /proc).
* ``partitions``: many partitions. One topic of ``--partitions`` partitions, each given
  one record first (so every partition's log exists before the measured produce: the
  broker CPU from CreateTopics to there is reported on its own, as "create CPU s"); a
  keyed produce of ``--records`` records of 100 B (linger.ms=5), then one consumer
  assigned to every partition reads them all back. Reports records/s and broker CPU
  per record for both phases, and the broker's RSS after them.
* ``latency`` and ``latency-high``: end-to-end latency at a fixed offered rate
  (``--rate``, 2,000 records/s, and ``--high-rate``, 20,000). A producer process
  (acks=all, linger.ms=0) sends for ``--seconds`` with its send time in the value; the
  consumer, in this process, long-polls (fetch.wait.max.ms=100, poll) and records
  receive - send. Reports p50/p99/p99.9 and the broker CPU per record.
* ``fanout``: one partition of ``--records`` records of 100 B read from the start by
  ``--consumers`` (8) consumer processes at once, each its own group. Reports the
  records delivered per second (all consumers together) and the broker CPU per record
  delivered.
* ``idle``: the ``latency`` shape at ``--rate`` alone and with ``--idle-connections``
  (1,000) more connections open to the broker, each having made one ApiVersions request
  and then silent. Paired, in the order alone, idle, idle, alone (after a 2 s warm-up
  run that is not counted, and a second's pause after the connections are opened or
  closed), each condition's p99 taken over both of its runs: a drift of the machine
  over the four runs weighs on both conditions alike, and neither gets a fresh broker's
  first run. Reports both p99s and their ratio.
* ``many``: a broker of ``--many-partitions`` (10,000) partitions: the time to create
  them, a produce of ``--records`` records of 100 B round robin across all of them
  (linger.ms=5), then a clean stop and a start on the same data: the start-up time
  (process start to a Metadata answer listing every partition), the RSS and the open
  file descriptors after it, and the descriptor count during the produce.
* ``beside-bulk``: one client's latency beside a bulk producer. A producer process sends
  ``--bulk-mb`` MB of 10 KB records in batches up to 1 MB (linger.ms=20, acks=1) to one
  topic; meanwhile this process produces one record every 5 ms to another (acks=all,
  linger.ms=0) and waits for each. Reports the bulk MB/s and the probe's p50, p99 and
  worst latency while the bulk ran.
* ``share``: share groups (issue 18). ``--records`` records of 100 B on 4 partitions read
  by ``--share-consumers`` (4) ShareConsumer processes of one share group (implicit
  acknowledgement). Reports records delivered/s, broker CPU per record (acquisition,
  locks, acknowledgements and the ``__share_group_state`` writes) and redeliveries.

    .venv/bin/python bench/shapes.py                         # every shape, both brokers
    .venv/bin/python bench/shapes.py --shapes small --brokers chronolog
    .venv/bin/python bench/shapes.py --shapes small --acls 1000   # with an authorizer
    make bench-shapes

``--acls N`` runs Chronolog with an authorizer (``StandardAuthorizer``) whose store holds N
ACLs of other principals and the ones allowing the benchmark's clients everything
(bench/throughput.py ``seed_acls``; 0: no ACL at all and
``allow.everyone.if.no.acl.found=true``). Tansu has no authorizer: it runs as always.

Every shape also reports the broker's peak RSS (VmHWM, started again at each run through
/proc/PID/clear_refs; for ``many`` the higher of the produce's and the restart's; the
highest of the runs in the table). Memory in MiB.

Before the first shape that reports a latency percentile (``latency``, ``latency-high``,
``idle``, ``beside-bulk``) the machine's own stalls are measured for
``--stall-probe`` seconds (5; 0 skips it) with every CPU busy (bench/_machine.py
``cpu_stalls``) and printed: a percentile near their size is the machine's, not a
broker's.

Prints a Markdown table per shape with Chronolog/Tansu ratios (see bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import socket
import struct
import subprocess
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.shapes
    from bench import _machine, _proc
    from bench.throughput import (BenchError, default_chronolog_cmd, default_tansu_bin, log,
                                  peak_rss_mb, process_tree_cpu_seconds, process_tree_rss_mb, reset_peak_rss,
                                  start_broker, stop_broker, wait_ready)
except ImportError:
    import _machine
    import _proc
    from throughput import (BenchError, default_chronolog_cmd, default_tansu_bin, log, peak_rss_mb,
                            process_tree_cpu_seconds, process_tree_rss_mb, reset_peak_rss, start_broker, stop_broker,
                            wait_ready)

SHAPES = ("small", "partitions", "latency", "latency-high", "fanout", "idle", "many", "share", "beside-bulk")
LATENCY_SHAPES = {"latency", "latency-high", "idle", "beside-bulk"}  # preceded by the stall probe


def create_topic(bootstrap: str, topic: str, partitions: int, timeout: float = 120) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)],
                        operation_timeout=timeout, request_timeout=timeout)[topic].result(timeout)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        md = admin.list_topics(topic, timeout=10).topics.get(topic)
        if md is not None and md.error is None and len(md.partitions) == partitions:
            return
        time.sleep(0.2)
    raise BenchError(f"topic {topic} has not got its {partitions} partitions")


def produce_n(p: Producer, topic: str, n: int, value: bytes, keyed: bool = False, partitions: int = 0,
              start: int = 0) -> None:
    """Records ``start`` .. ``start + n - 1`` through ``p``, waiting while its queue is
    full; keyed ``key-<i>``, or (``partitions``) sent to partition ``i % partitions``."""
    for i in range(start, start + n):
        kw = {}
        if keyed:
            kw["key"] = b"key-%d" % i
        if partitions:
            kw["partition"] = i % partitions
        while True:
            try:
                p.produce(topic, value=value, **kw)
                break
            except BufferError:
                p.poll(0.005)


# ----------------------------------------------------------------------------- small
def _small_producer(bootstrap: str, topic: str, records: int, out) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "batch.num.messages": 1, "acks": "all",
                  "max.in.flight.requests.per.connection": 5, "enable.idempotence": False})
    value = b"x" * 100
    failed = []
    t = time.perf_counter()
    for i in range(records):
        while True:
            try:
                p.produce(topic, value=value, on_delivery=lambda err, msg: err and failed.append(err))
                break
            except BufferError:
                p.poll(0.005)
        p.poll(0)
    left = p.flush(120)
    out.put((time.perf_counter() - t, len(failed) + left))


def shape_small(bp, args) -> dict:
    topic = f"small-{uuid.uuid4().hex[:6]}"
    create_topic(bp.bootstrap, topic, 1)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    procs = [ctx.Process(target=_small_producer, args=(bp.bootstrap, topic, args.records, q))
             for _ in range(args.producers)]
    for p in procs:
        p.start()
    results = [q.get(timeout=600) for _ in procs]
    for p in procs:
        p.join()
    wall = time.perf_counter() - t
    cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    total = args.records * args.producers
    if sum(r[1] for r in results):
        raise BenchError(f"{sum(r[1] for r in results)} records failed or unsent")
    return {"records": total, "seconds": wall, "records_per_s": total / wall, "broker_cpu_s": cpu,
            "cpu_us_per_record": cpu / total * 1e6}


# ----------------------------------------------------------------------------- partitions
def shape_partitions(bp, args) -> dict:
    topic = f"parts-{uuid.uuid4().hex[:6]}"
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    create_topic(bp.bootstrap, topic, args.partitions)
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": False,
                  "queue.buffering.max.messages": 1_000_000})
    # every partition's log made (a broker with files makes them on CreateTopics or at
    # first use, a cost per partition, not per record): measured apart from the produce
    produce_n(p, topic, args.partitions, b"w", partitions=args.partitions)
    if p.flush(300):
        raise BenchError("records left unsent")
    create_cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    produce_n(p, topic, args.records, b"v" * 100, keyed=True)
    if p.flush(300):
        raise BenchError("records left unsent")
    produce_s = time.perf_counter() - t
    produce_cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    c = Consumer({"bootstrap.servers": bp.bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, part, 0) for part in range(args.partitions)])
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    seen, deadline = 0, time.monotonic() + 300
    total = args.records + args.partitions
    while seen < total and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                seen += 1
    consume_s = time.perf_counter() - t
    consume_cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    c.close()
    if seen < total:
        raise BenchError(f"consumed {seen} of {total}")
    return {"partitions": args.partitions, "records": args.records, "create_cpu_s": create_cpu,
            "produce_records_per_s": args.records / produce_s, "produce_cpu_us_per_record":
                produce_cpu / args.records * 1e6,
            "consume_records_per_s": total / consume_s, "consume_cpu_us_per_record":
                consume_cpu / total * 1e6,
            "rss_mb": process_tree_rss_mb(bp.proc.pid)}


# ----------------------------------------------------------------------------- latency
def _latency_producer(bootstrap: str, topic: str, rate: float, seconds: float, out) -> None:
    """Its own process (the consumer's wait must not delay sends): ``rate`` records/s,
    each carrying its send time."""
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    n = int(rate * seconds)
    start = time.time()
    sent = 0
    while sent < n:
        due = min(n, int((time.time() - start) * rate) + 1)
        while sent < due:
            while True:
                try:
                    p.produce(topic, value=repr(time.time()).encode())
                    break
                except BufferError:
                    p.poll(0.001)
            sent += 1
        p.poll(0)
        wait = start + sent / rate - time.time()
        if wait > 0:
            time.sleep(min(wait, 0.001))
    out.put(p.flush(30))


def _latency(bp, args, rate: float, keep: bool = False) -> dict:
    """One run at ``rate``; ``keep``: the sorted latencies (s) too, as ``latencies``."""
    topic = f"lat-{uuid.uuid4().hex[:6]}"
    create_topic(bp.bootstrap, topic, 1)
    c = Consumer({"bootstrap.servers": bp.bootstrap, "group.id": "bench-" + topic, "enable.auto.commit": False,
                  "fetch.wait.max.ms": 100, "fetch.min.bytes": 1})
    c.assign([TopicPartition(topic, 0, 0)])
    c.poll(1.0)  # connected and fetching before the clock starts
    n = int(rate * args.seconds)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    lat: list[float] = []
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    producer = ctx.Process(target=_latency_producer, args=(bp.bootstrap, topic, rate, args.seconds, q))
    producer.start()
    deadline = time.time() + args.seconds + 60
    while len(lat) < n and time.time() < deadline:
        m = c.poll(0.1)
        if m is not None and m.error() is None:
            lat.append(time.time() - float(m.value()))
    cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    producer.join(60)
    c.close()
    if len(lat) < n or q.get(timeout=10):
        raise BenchError(f"received {len(lat)} of {n}")
    lat.sort()
    out = {"rate": rate, "records": n, "p50_ms": _percentile_ms(lat, 0.50), "p99_ms": _percentile_ms(lat, 0.99),
           "p999_ms": _percentile_ms(lat, 0.999), "cpu_us_per_record": cpu / n * 1e6}
    if keep:
        out["latencies"] = lat
    return out


def _percentile_ms(lat: list[float], x: float) -> float:
    """The ``x`` quantile of sorted latencies in seconds, in ms."""
    return lat[min(len(lat) - 1, int(x * len(lat)))] * 1000


def shape_latency(bp, args) -> dict:
    return _latency(bp, args, args.rate)


# ----------------------------------------------------------------------------- fanout
def _fanout_consumer(bootstrap: str, topic: str, records: int, out) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "fan-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "fetch.wait.max.ms": 100})
    c.assign([TopicPartition(topic, 0, 0)])
    seen, deadline = 0, time.monotonic() + 300
    t = time.perf_counter()
    while seen < records and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                seen += 1
    out.put((time.perf_counter() - t, seen))
    c.close()


def shape_fanout(bp, args) -> dict:
    topic = f"fan-{uuid.uuid4().hex[:6]}"
    create_topic(bp.bootstrap, topic, 1)
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 5, "acks": "all",
                  "queue.buffering.max.messages": 1_000_000})
    produce_n(p, topic, args.records, b"f" * 100)
    if p.flush(300):
        raise BenchError("records left unsent")
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=_fanout_consumer, args=(bp.bootstrap, topic, args.records, q))
             for _ in range(args.consumers)]
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    for proc in procs:
        proc.start()
    results = [q.get(timeout=600) for _ in procs]
    wall = time.perf_counter() - t
    cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    for proc in procs:
        proc.join()
    delivered = sum(r[1] for r in results)
    if delivered < args.records * args.consumers:
        raise BenchError(f"delivered {delivered} of {args.records * args.consumers}")
    return {"consumers": args.consumers, "records": args.records, "records_per_s": delivered / wall,
            "cpu_us_per_record": cpu / delivered * 1e6, "rss_mb": process_tree_rss_mb(bp.proc.pid)}


# ----------------------------------------------------------------------------- share
def _share_consumer(bootstrap: str, group: str, topic: str, stop_at: int, out) -> None:
    """One member of a share group (implicit acknowledgement): polls until the group's
    shared counter of delivered records reaches ``stop_at`` or nothing comes for 5 s."""
    from confluent_kafka import ShareConsumer

    sc = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0})
    sc.subscribe([topic])
    got, idle_since = 0, time.monotonic()
    while True:
        batch = [m for m in sc.poll(timeout=0.2) if not m.error()]
        if batch:
            got += len(batch)
            idle_since = time.monotonic()
            with stop_at.get_lock():
                stop_at.value -= len(batch)
        if stop_at.value <= 0 or time.monotonic() - idle_since > 5:
            break
    sc.commit_sync()
    sc.close()
    out.put(got)


def shape_share(bp, args) -> dict:
    """Share groups (KIP-932): ``--records`` records of 100 B on 4 partitions, read by
    ``--share-consumers`` ShareConsumer processes of one share group, each record
    acquired by one of them and accepted implicitly."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    topic, group = f"share-{uuid.uuid4().hex[:6]}", f"sg-{uuid.uuid4().hex[:6]}"
    create_topic(bp.bootstrap, topic, 4)
    admin = AdminClient({"bootstrap.servers": bp.bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 5, "queue.buffering.max.messages": 1_000_000})
    produce_n(p, topic, args.records, b"s" * 100, partitions=4)
    if p.flush(300):
        raise BenchError("records left unsent")
    ctx = mp.get_context("spawn")
    q, left = ctx.Queue(), ctx.Value("q", args.records)
    procs = [ctx.Process(target=_share_consumer, args=(bp.bootstrap, group, topic, left, q))
             for _ in range(args.share_consumers)]
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    for proc in procs:
        proc.start()
    delivered = sum(q.get(timeout=600) for _ in procs)
    wall = time.perf_counter() - t
    cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    for proc in procs:
        proc.join()
    if delivered < args.records:
        raise BenchError(f"delivered {delivered} of {args.records}")
    return {"consumers": args.share_consumers, "records": args.records, "records_per_s": delivered / wall,
            "cpu_us_per_record": cpu / delivered * 1e6, "redelivered": delivered - args.records,
            "rss_mb": process_tree_rss_mb(bp.proc.pid)}


# ----------------------------------------------------------------------------- idle
def _api_versions_request(correlation_id: int) -> bytes:
    client = b"idle-bench"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    return struct.pack(">i", len(body)) + body


def open_idle_connections(bootstrap: str, n: int) -> list[socket.socket]:
    """``n`` connections that each make one ApiVersions round trip, then stay silent."""
    host, port = bootstrap.rsplit(":", 1)
    socks = []
    for i in range(n):
        s = socket.create_connection((host, int(port)), timeout=30)
        s.sendall(_api_versions_request(i))
        size = struct.unpack(">i", _recv_exact(s, 4))[0]
        _recv_exact(s, size)
        socks.append(s)
    return socks


def _recv_exact(s: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise BenchError("the broker closed an idle connection")
        buf += chunk
    return buf


def shape_idle(bp, args) -> dict:
    _latency(bp, argparse.Namespace(**{**vars(args), "seconds": 2}), args.rate)  # warm-up, not counted
    alone = _latency(bp, args, args.rate, keep=True)["latencies"]
    socks = open_idle_connections(bp.bootstrap, args.idle_connections)
    try:
        time.sleep(1)  # opening them is not what is measured
        idle = _latency(bp, args, args.rate, keep=True)["latencies"]
        idle += _latency(bp, args, args.rate, keep=True)["latencies"]
        rss = process_tree_rss_mb(bp.proc.pid)
        # still connected: the broker kept every idle connection open meanwhile
        for s in socks[:: max(1, len(socks) // 20)]:
            s.sendall(_api_versions_request(7))
            _recv_exact(s, struct.unpack(">i", _recv_exact(s, 4))[0])
    finally:
        for s in socks:
            s.close()
    time.sleep(1)
    alone += _latency(bp, args, args.rate, keep=True)["latencies"]
    alone.sort()
    idle.sort()
    p99_alone, p99_idle = _percentile_ms(alone, 0.99), _percentile_ms(idle, 0.99)
    return {"idle": args.idle_connections, "p99_alone_ms": p99_alone, "p99_idle_ms": p99_idle,
            "p99_ratio": p99_idle / p99_alone, "p999_idle_ms": _percentile_ms(idle, 0.999), "rss_mb": rss}


# ----------------------------------------------------------------------------- many
def _fd_count(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _wait_partitions(bootstrap: str, topic: str, partitions: int, timeout: float, bp) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 0})  # refused connects are expected
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if bp.proc.poll() is not None:
            raise BenchError(f"{bp.name} exited during start-up:\n{bp.log_tail()}")
        try:
            md = admin.list_topics(topic, timeout=2).topics.get(topic)
            if md is not None and md.error is None and len(md.partitions) == partitions:
                return
        except Exception:  # noqa: BLE001 - not up yet
            pass
        time.sleep(0.01)
    raise BenchError(f"{topic} has not got its {partitions} partitions within {timeout:g} s")


def shape_many(bp, args) -> dict:
    n = args.many_partitions
    topic = f"many-{uuid.uuid4().hex[:6]}"
    t = time.perf_counter()
    create_topic(bp.bootstrap, topic, n, timeout=600)
    answered_s = time.perf_counter() - t
    if bp.name == "chronolog":  # it answers first and makes a large topic's partitions behind
        made = lambda: sum(1 for d in bp.temp_dirs for e in os.scandir(d) if e.name.startswith(topic + "-"))
        deadline = time.monotonic() + 600
        while made() < n:
            if time.monotonic() > deadline:
                raise BenchError(f"{topic}: not every partition was made within 600 s")
            time.sleep(0.05)
    create_s = time.perf_counter() - t
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": False,
                  "queue.buffering.max.messages": 1_000_000})
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    fds_peak = 0
    for start in range(0, args.records, 20000):  # the descriptor count sampled as it goes
        produce_n(p, topic, min(20000, args.records - start), b"m" * 100, partitions=n, start=start)
        fds_peak = max(fds_peak, _fd_count(bp.proc.pid))
    if p.flush(600):
        raise BenchError("records left unsent")
    produce_s = time.perf_counter() - t
    produce_cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    fds_peak = max(fds_peak, _fd_count(bp.proc.pid))
    rss_loaded = process_tree_rss_mb(bp.proc.pid)
    del p  # no client retrying against the stopped broker
    out = {"partitions": n, "create_answered_s": answered_s, "create_s": create_s, "produce_records_per_s": args.records / produce_s,
           "produce_cpu_us_per_record": produce_cpu / args.records * 1e6, "fds_produce": fds_peak,
           "rss_produce_mb": rss_loaded, "fd_limit": _soft_nofile(bp.proc.pid)}
    if bp.name == "tansu" and args.tansu_storage.startswith("memory:"):
        return out  # its memory storage does not outlive a restart: no start-up to measure
    # a clean stop, then a start on the same data (the run's peak RSS: the higher of the
    # produce's and the start's)
    peak_produce = peak_rss_mb(bp.proc.pid)
    restart_broker(bp)
    t = time.perf_counter()
    _wait_partitions(bp.bootstrap, topic, n, 600, bp)
    startup_s = time.perf_counter() - t
    out["startup_s"] = startup_s
    if bp.name == "chronolog":  # it serves at once and loads cleanly stopped partitions behind
        out["all_loaded_s"] = _wait_all_loaded(bp, t, 600)
    out.update(rss_start_mb=process_tree_rss_mb(bp.proc.pid), fds_start=_fd_count(bp.proc.pid))
    peaks = [m for m in (peak_produce, peak_rss_mb(bp.proc.pid)) if m is not None]
    if peaks:
        out["peak_rss_mb"] = max(peaks)
    return out


def _wait_all_loaded(bp, t0: float, timeout: float) -> float:
    """Seconds from ``t0`` until the broker logs that every partition is loaded."""
    deadline = time.monotonic() + timeout
    with open(bp.log_path, "rb") as f:
        f.seek(0, os.SEEK_END)
        start = max(0, f.tell() - 1_000_000)
    while time.monotonic() < deadline:
        with open(bp.log_path, "rb") as f:
            f.seek(start)
            text = f.read().decode(errors="replace")
        started = text.rfind("storage.log_manager loaded ")  # this start's first line
        if started >= 0:
            line = text[started:text.find("\n", started)]
            if "load in the background" not in line or "partition log(s) loaded" in text[started + len(line):]:
                return time.perf_counter() - t0
        time.sleep(0.02)
    raise BenchError("the broker did not log that every partition was loaded")


def _soft_nofile(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/limits") as f:
            for line in f:
                if line.startswith("Max open files"):
                    return int(line.split()[3])
    except (OSError, ValueError):
        pass
    return -1


def restart_broker(bp) -> None:
    """Stop the broker cleanly (SIGTERM, its data kept) and start it again, same command."""
    rc = _proc.stop_group(bp.proc, 120)
    if rc not in (0, -15, 143):
        raise BenchError(f"{bp.name} stopped with exit code {rc}:\n{bp.log_tail()}")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).resolve().parent.parent),
                                                      env.get("PYTHONPATH")]))
    with open(bp.log_path, "ab") as log_file:
        bp.proc = subprocess.Popen(bp.cmd, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                   stderr=subprocess.STDOUT, start_new_session=True, cwd=bp.log_path.parent)


def shape_latency_high(bp, args) -> dict:
    return _latency(bp, args, args.high_rate)


# ----------------------------------------------------------------------------- beside-bulk
def _bulk_producer(bootstrap: str, topic: str, mb: int, out) -> None:
    """Its own process: ``mb`` MB of 10 KB records as fast as the client sends them."""
    errors: list = []
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "acks": "1", "batch.size": 1_000_000,
                  "queue.buffering.max.kbytes": 500_000,
                  "on_delivery": lambda err, msg: err is not None and errors.append(str(err))})
    value = os.urandom(10_000)
    p.list_topics(topic, timeout=30)
    t0 = time.time()
    produce_n(p, topic, mb * 100, value)
    left = p.flush(120)
    out.put((left + len(errors), time.time() - t0, errors[:1]))


def shape_beside_bulk(bp, args) -> dict:
    bulk, probe_topic = f"bulk-{uuid.uuid4().hex[:6]}", f"probe-{uuid.uuid4().hex[:6]}"
    create_topic(bp.bootstrap, bulk, 1)
    create_topic(bp.bootstrap, probe_topic, 1)
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 0, "acks": "all"})
    p.list_topics(probe_topic, timeout=30)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    producer = ctx.Process(target=_bulk_producer, args=(bp.bootstrap, bulk, args.bulk_mb, q))
    producer.start()
    lat: list[float] = []
    done: list[float] = []
    while producer.is_alive() and q.empty():
        done.clear()
        t0 = time.perf_counter()
        p.produce(probe_topic, b"x", on_delivery=lambda err, msg: done.append(time.perf_counter()))
        if p.flush(60) or not done:
            raise BenchError("a probe record was not delivered")
        lat.append(done[0] - t0)
        time.sleep(0.005)
    left, seconds, error = q.get(timeout=180)
    producer.join(60)
    if left or len(lat) < 20:
        raise BenchError(f"bulk: {left} records not delivered {error}; {len(lat)} probe records")
    lat.sort()
    return {"bulk_mb_per_s": args.bulk_mb / seconds, "probes": len(lat), "p50_ms": _percentile_ms(lat, 0.50),
            "p99_ms": _percentile_ms(lat, 0.99), "max_ms": lat[-1] * 1000}


RUNNERS = {"small": shape_small, "partitions": shape_partitions, "latency": shape_latency,
           "latency-high": shape_latency_high, "fanout": shape_fanout, "idle": shape_idle, "many": shape_many,
           "share": shape_share, "beside-bulk": shape_beside_bulk}
COLUMNS = {
    "small": [("records_per_s", "records/s", "{:,.0f}"), ("cpu_us_per_record", "broker CPU µs/record", "{:.1f}")],
    "partitions": [("create_cpu_s", "create CPU s", "{:.2f}"), ("produce_records_per_s", "produce rec/s", "{:,.0f}"),
                   ("produce_cpu_us_per_record", "produce CPU µs/rec", "{:.2f}"),
                   ("consume_records_per_s", "consume rec/s", "{:,.0f}"),
                   ("consume_cpu_us_per_record", "consume CPU µs/rec", "{:.2f}"), ("rss_mb", "RSS MiB", "{:.0f}")],
    "latency": [("p50_ms", "p50 ms", "{:.2f}"), ("p99_ms", "p99 ms", "{:.2f}"), ("p999_ms", "p99.9 ms", "{:.2f}"),
                ("cpu_us_per_record", "broker CPU µs/record", "{:.1f}")],
}
COLUMNS["latency-high"] = list(COLUMNS["latency"])
COLUMNS["fanout"] = [("records_per_s", "records delivered/s", "{:,.0f}"),
                     ("cpu_us_per_record", "broker CPU µs/record", "{:.2f}"), ("rss_mb", "RSS MiB", "{:.0f}")]
COLUMNS["share"] = [("records_per_s", "records delivered/s", "{:,.0f}"),
                    ("cpu_us_per_record", "broker CPU µs/record", "{:.1f}"), ("redelivered", "redelivered", "{:,.0f}"),
                    ("rss_mb", "RSS MiB", "{:.0f}")]
COLUMNS["idle"] = [("p99_alone_ms", "p99 alone ms", "{:.2f}"), ("p99_idle_ms", "p99 with idle ms", "{:.2f}"),
                   ("p99_ratio", "p99 ratio", "{:.2f}"), ("p999_idle_ms", "p99.9 with idle ms", "{:.2f}"),
                   ("rss_mb", "RSS MiB", "{:.0f}")]
COLUMNS["many"] = [("create_answered_s", "CreateTopics answered s", "{:.1f}"),
                   ("create_s", "all partitions made s", "{:.1f}"), ("produce_records_per_s", "produce rec/s", "{:,.0f}"),
                   ("produce_cpu_us_per_record", "produce CPU µs/rec", "{:.1f}"),
                   ("fds_produce", "fds (produce)", "{:,.0f}"), ("startup_s", "start-up s", "{:.2f}"),
                   ("all_loaded_s", "all loaded s", "{:.2f}"),
                   ("rss_start_mb", "RSS after start MiB", "{:.0f}"), ("fds_start", "fds after start", "{:,.0f}"),
                   ("fd_limit", "fd limit", "{:,.0f}")]
COLUMNS["beside-bulk"] = [("bulk_mb_per_s", "bulk MB/s", "{:.0f}"), ("probes", "probe records", "{:,.0f}"),
                          ("p50_ms", "probe p50 ms", "{:.2f}"), ("p99_ms", "probe p99 ms", "{:.1f}"),
                          ("max_ms", "probe max ms", "{:.1f}")]
#: memory stays bounded under every shape: each reports the broker's peak RSS (VmHWM,
#: started again at each run; the highest of the runs)
for _cols in COLUMNS.values():
    _cols.append(("peak_rss_mb", "peak RSS MiB", "{:.0f}"))


#: shapes whose run changes the broker the next run would measure: ``many`` makes 10,000
#: partitions, so a second run on the same broker would be a 20,000-partition broker
FRESH_BROKER_PER_RUN = {"many"}


def _runs_on_one_broker(shape: str, name: str, sargs, res: dict, runs: range) -> bool:
    """Runs ``runs`` of ``shape`` on one broker ``name`` started on empty data, appended
    to ``res["runs"]``; False (``res["error"]`` set) when the broker or a run failed."""
    with tempfile.TemporaryDirectory(prefix=f"shapes-{name}-") as work:
        try:
            bp = start_broker(name, sargs, Path(work))
        except BenchError as e:
            res["error"] = str(e)
            log(f"{shape} {name}: FAILED: {e}")
            return False
        try:
            wait_ready(bp, sargs.startup_timeout)
            for run in runs:
                reset_peak_rss(bp.proc.pid)  # each run's own peak
                r = RUNNERS[shape](bp, sargs)
                r.setdefault("peak_rss_mb", peak_rss_mb(bp.proc.pid))
                res["runs"].append(r)
                log(f"{shape} {name} run {run}: " + json.dumps({k: round(v, 3) if isinstance(v, float)
                                                                 else v for k, v in r.items()}))
        except Exception as e:  # noqa: BLE001 - reported in the table
            res["error"] = f"{type(e).__name__}: {e}"
            log(f"{shape} {name}: FAILED: {res['error']}")
            return False
        finally:
            stop_broker(bp)
    return True


def median_of(runs: list[dict]) -> dict:
    """Each measure's median over the runs; the peak RSS is the highest of them."""
    out = {k: statistics.median(r[k] for r in runs if k in r) for k in runs[0]
           if isinstance(runs[0][k], (int, float))}
    if all(isinstance(r.get("peak_rss_mb"), (int, float)) for r in runs):
        out["peak_rss_mb"] = max(r["peak_rss_mb"] for r in runs)
    return out


def render(shape: str, results: dict) -> str:
    cols = COLUMNS[shape]
    lines = [f"### {shape}", "", "| broker | " + " | ".join(c[1] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:80]} |")
            continue
        lines.append(f"| {name} | " + " | ".join(c[2].format(r["median"][c[0]]) if c[0] in r["median"] else "-"
                                                 for c in cols) + " |")
    ok = {n: r for n, r in results.items() if "median" in r}
    if {"chronolog", "tansu"} <= set(ok):
        a, b = ok["chronolog"]["median"], ok["tansu"]["median"]
        lines.append("| chronolog / tansu | " + " | ".join(
            f"{a[c[0]] / b[c[0]]:.2f}x" if b.get(c[0]) and c[0] in a else "-" for c in cols) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--brokers", default="chronolog,tansu")
    ap.add_argument("--runs", type=int, default=3, help="runs per shape and broker; medians reported (3)")
    ap.add_argument("--producers", type=int, default=4, help="small: producer processes (4)")
    ap.add_argument("--records", type=int, default=None,
                    help="small: records per producer (15000); partitions: records (200000)")
    ap.add_argument("--partitions", type=int, default=500, help="partitions: partitions (500)")
    ap.add_argument("--rate", type=float, default=2000, help="latency: records/s offered (2000)")
    ap.add_argument("--high-rate", type=float, default=20000, help="latency-high: records/s offered (20000)")
    ap.add_argument("--seconds", type=float, default=10, help="latency: seconds per run (10)")
    ap.add_argument("--consumers", type=int, default=8, help="fanout: consumer processes (8)")
    ap.add_argument("--idle-connections", type=int, default=1000, help="idle: idle connections (1000)")
    ap.add_argument("--share-consumers", type=int, default=4, help="share: share consumer processes (4)")
    ap.add_argument("--many-partitions", type=int, default=10_000, help="many: partitions (10000)")
    ap.add_argument("--bulk-mb", type=int, default=1000, help="beside-bulk: MB the bulk producer sends (1000)")
    ap.add_argument("--chronolog-cmd", default=default_chronolog_cmd())
    ap.add_argument("--acls", type=int, default=None, metavar="N",
                    help="Chronolog with an authorizer (StandardAuthorizer) and N ACLs of other principals beside "
                         "those allowing the clients; 0: no ACL, allow.everyone.if.no.acl.found=true (default: "
                         "no authorizer)")
    ap.add_argument("--tansu-bin", default=default_tansu_bin())
    ap.add_argument("--tansu-storage", default="memory://tansu/")
    ap.add_argument("--startup-timeout", type=float, default=60)
    ap.add_argument("--stall-probe", type=float, default=5, metavar="SECONDS",
                    help="before the first latency shape, the machine's own stalls measured this long (5; 0 skips)")
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    out: dict = {"machine": _machine.base_info(), "shapes": {}}
    tables = []
    for shape in args.shapes.split(","):
        if shape in LATENCY_SHAPES and args.stall_probe > 0 and "stalls" not in out["machine"]:
            out["machine"]["stalls"] = _machine.cpu_stalls(args.stall_probe)
            print(_machine.stalls_line(out["machine"]["stalls"]) + "\n", flush=True)
        sargs = argparse.Namespace(**vars(args))
        if sargs.records is None:
            sargs.records = {"small": 15000, "many": 100_000}.get(shape, 200_000)
        results = {}
        for name in args.brokers.split(","):
            res: dict = {"runs": []}
            # one broker for all runs of a shape, except where a run leaves what the next
            # would measure (FRESH_BROKER_PER_RUN): then a broker on empty data per run
            groups = ([range(r, r + 1) for r in range(1, args.runs + 1)] if shape in FRESH_BROKER_PER_RUN
                      else [range(1, args.runs + 1)])
            for runs in groups:
                if not _runs_on_one_broker(shape, name, sargs, res, runs):
                    break
            if res["runs"] and "error" not in res:
                res["median"] = median_of(res["runs"])
            results[name] = res
        out["shapes"][shape] = results
        tables.append(render(shape, results))
        print(tables[-1] + "\n", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
