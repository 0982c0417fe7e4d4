#!/usr/bin/env python3
"""Workload shapes beyond bulk batches (issue 17), Chronolog and Tansu side by side.

Each broker is started on its own (never both at once, as in bench/throughput.py) and
driven by stock clients (confluent-kafka / librdkafka). Shapes:

* ``small``: small requests. ``--producers`` processes, each producing ``--records``
  records of 100 B with linger.ms=0 and batch.num.messages=1 (one record per request,
  up to 5 in flight), acks=all. Reports aggregate records/s and the broker's CPU per
  record (user+sys of the broker's process tree, from /proc).
* ``partitions``: many partitions. One topic of ``--partitions`` partitions; a keyed
  produce of ``--records`` records of 100 B (linger.ms=5), then one consumer assigned to
  every partition reads them all back. Reports records/s and broker CPU per record for
  both phases, and the broker's RSS after them.
* ``latency`` and ``latency-high``: end-to-end latency at a fixed offered rate
  (``--rate``, 2,000 records/s, and ``--high-rate``, 20,000). A producer process
  (acks=all, linger.ms=0) sends for ``--seconds`` with its send time in the value; the
  consumer, in this process, long-polls (fetch.wait.max.ms=100, poll) and records
  receive - send. Reports p50/p99/p99.9 and the broker CPU per record.

    .venv/bin/python bench/shapes.py                         # every shape, both brokers
    .venv/bin/python bench/shapes.py --shapes small --brokers chronolog
    make bench-shapes

Prints a Markdown table per shape with Chronolog/Tansu ratios (see bench/README.md).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.shapes
    from bench import _machine
    from bench.throughput import (BenchError, default_chronolog_cmd, default_tansu_bin, log,
                                  process_tree_cpu_seconds, process_tree_rss_mb, start_broker, stop_broker,
                                  wait_ready)
except ImportError:
    import _machine
    from throughput import (BenchError, default_chronolog_cmd, default_tansu_bin, log, process_tree_cpu_seconds,
                            process_tree_rss_mb, start_broker, stop_broker, wait_ready)

SHAPES = ("small", "partitions", "latency", "latency-high")


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
    create_topic(bp.bootstrap, topic, args.partitions)
    p = Producer({"bootstrap.servers": bp.bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": False,
                  "queue.buffering.max.messages": 1_000_000})
    value = b"v" * 100
    cpu0 = process_tree_cpu_seconds(bp.proc.pid)
    t = time.perf_counter()
    for i in range(args.records):
        while True:
            try:
                p.produce(topic, key=b"key-%d" % i, value=value)
                break
            except BufferError:
                p.poll(0.005)
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
    while seen < args.records and time.monotonic() < deadline:
        for m in c.consume(10000, 0.5):
            if m.error() is None:
                seen += 1
    consume_s = time.perf_counter() - t
    consume_cpu = process_tree_cpu_seconds(bp.proc.pid) - cpu0
    c.close()
    if seen < args.records:
        raise BenchError(f"consumed {seen} of {args.records}")
    return {"partitions": args.partitions, "records": args.records,
            "produce_records_per_s": args.records / produce_s, "produce_cpu_us_per_record":
                produce_cpu / args.records * 1e6,
            "consume_records_per_s": args.records / consume_s, "consume_cpu_us_per_record":
                consume_cpu / args.records * 1e6,
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


def _latency(bp, args, rate: float) -> dict:
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

    def pct(x):
        return lat[min(len(lat) - 1, int(x * len(lat)))] * 1000

    return {"rate": rate, "records": n, "p50_ms": pct(0.50), "p99_ms": pct(0.99), "p999_ms": pct(0.999),
            "cpu_us_per_record": cpu / n * 1e6}


def shape_latency(bp, args) -> dict:
    return _latency(bp, args, args.rate)


def shape_latency_high(bp, args) -> dict:
    return _latency(bp, args, args.high_rate)


RUNNERS = {"small": shape_small, "partitions": shape_partitions, "latency": shape_latency,
           "latency-high": shape_latency_high}
COLUMNS = {
    "small": [("records_per_s", "records/s", "{:,.0f}"), ("cpu_us_per_record", "broker CPU µs/record", "{:.1f}")],
    "partitions": [("produce_records_per_s", "produce rec/s", "{:,.0f}"),
                   ("produce_cpu_us_per_record", "produce CPU µs/rec", "{:.2f}"),
                   ("consume_records_per_s", "consume rec/s", "{:,.0f}"),
                   ("consume_cpu_us_per_record", "consume CPU µs/rec", "{:.2f}"), ("rss_mb", "RSS MiB", "{:.0f}")],
    "latency": [("p50_ms", "p50 ms", "{:.2f}"), ("p99_ms", "p99 ms", "{:.2f}"), ("p999_ms", "p99.9 ms", "{:.2f}"),
                ("cpu_us_per_record", "broker CPU µs/record", "{:.1f}")],
}
COLUMNS["latency-high"] = COLUMNS["latency"]


def median_of(runs: list[dict]) -> dict:
    return {k: statistics.median(r[k] for r in runs) for k in runs[0] if isinstance(runs[0][k], (int, float))}


def render(shape: str, results: dict) -> str:
    cols = COLUMNS[shape]
    lines = [f"### {shape}", "", "| broker | " + " | ".join(c[1] for c in cols) + " |",
             "|---|" + "---|" * len(cols)]
    for name, r in results.items():
        if "error" in r:
            lines.append(f"| {name} | failed: {r['error'][:80]} |")
            continue
        lines.append(f"| {name} | " + " | ".join(c[2].format(r["median"][c[0]]) for c in cols) + " |")
    ok = {n: r for n, r in results.items() if "median" in r}
    if {"chronolog", "tansu"} <= set(ok):
        a, b = ok["chronolog"]["median"], ok["tansu"]["median"]
        lines.append("| chronolog / tansu | " + " | ".join(
            f"{a[c[0]] / b[c[0]]:.2f}x" if b[c[0]] else "-" for c in cols) + " |")
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
    ap.add_argument("--chronolog-cmd", default=default_chronolog_cmd())
    ap.add_argument("--tansu-bin", default=default_tansu_bin())
    ap.add_argument("--tansu-storage", default="memory://tansu/")
    ap.add_argument("--startup-timeout", type=float, default=60)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    out: dict = {"machine": _machine.base_info(), "shapes": {}}
    tables = []
    for shape in args.shapes.split(","):
        sargs = argparse.Namespace(**vars(args))
        if sargs.records is None:
            sargs.records = 15000 if shape == "small" else 200_000
        results = {}
        for name in args.brokers.split(","):
            res: dict = {"runs": []}
            with tempfile.TemporaryDirectory(prefix=f"shapes-{name}-") as work:
                try:
                    bp = start_broker(name, sargs, Path(work))
                except BenchError as e:
                    res["error"] = str(e)
                    results[name] = res
                    log(f"{shape} {name}: FAILED: {e}")
                    continue
                try:
                    wait_ready(bp, args.startup_timeout)
                    for run in range(1, args.runs + 1):
                        r = RUNNERS[shape](bp, sargs)
                        res["runs"].append(r)
                        log(f"{shape} {name} run {run}: " + json.dumps({k: round(v, 3) if isinstance(v, float)
                                                                         else v for k, v in r.items()}))
                    res["median"] = median_of(res["runs"])
                except Exception as e:  # noqa: BLE001 - reported in the table
                    res["error"] = f"{type(e).__name__}: {e}"
                    log(f"{shape} {name}: FAILED: {res['error']}")
                finally:
                    stop_broker(bp)
            results[name] = res
        out["shapes"][shape] = results
        tables.append(render(shape, results))
        print(tables[-1] + "\n", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
