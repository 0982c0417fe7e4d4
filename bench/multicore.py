#!/usr/bin/env python3
"""Prototype measurement for more than one core (issue 17, docs/DESIGN.md "More than one core").

The design under test is process-per-shard: N broker processes, each owning its own
partitions (and log dirs), which Kafka clients reach directly because each partition's
leader is a separate node in Metadata. The upper bound of what that design can reach on
this machine is N independent Chronolog processes serving disjoint topics with no
coordination between them at all, so that is what this measures: the ``small`` shape
(one record per request, acks=all, the shape where the broker is the bottleneck) and the
``partitions`` produce (keyed, 500 partitions, linger 5 ms), against 1 process and
against ``--workers`` processes with the same clients split evenly among them.

    .venv/bin/python bench/multicore.py                # 1 vs 2 processes, 3 runs each
    .venv/bin/python bench/multicore.py --workers 2 --producers 4

Reports aggregate records/s, the brokers' CPU per record (all processes together) and
the ratio; the design ships if the ratio reaches 1.6 (the issue's bar).
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

from confluent_kafka import Producer

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.multicore
    from bench import _machine
    from bench.shapes import _small_producer, create_topic, produce_n
    from bench.throughput import (BenchError, default_chronolog_cmd, log, process_tree_cpu_seconds, start_broker,
                                  stop_broker, wait_ready)
except ImportError:
    import _machine
    from shapes import _small_producer, create_topic, produce_n
    from throughput import (BenchError, default_chronolog_cmd, log, process_tree_cpu_seconds, start_broker,
                            stop_broker, wait_ready)


def _keyed_producer(bootstrap: str, topic: str, records: int, out) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", "enable.idempotence": False,
                  "queue.buffering.max.messages": 1_000_000})
    t = time.perf_counter()
    produce_n(p, topic, records, b"v" * 100, keyed=True)
    left = p.flush(300)
    out.put((time.perf_counter() - t, left))


def machine_busy_seconds() -> float:
    """CPU seconds the whole machine spent busy (all cores, /proc/stat), clients included."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle + iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def run_once(brokers: list, shape: str, args) -> dict:
    topics = []
    for bp in brokers:
        topic = f"mc-{uuid.uuid4().hex[:6]}"
        create_topic(bp.bootstrap, topic, 1 if shape == "small" else args.partitions)
        topics.append(topic)
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    target = _small_producer if shape == "small" else _keyed_producer
    per = args.records if shape == "small" else args.keyed_records // args.producers
    procs = [ctx.Process(target=target, args=(brokers[i % len(brokers)].bootstrap, topics[i % len(brokers)], per, q))
             for i in range(args.producers)]
    cpu0 = sum(process_tree_cpu_seconds(bp.proc.pid) for bp in brokers)
    busy0 = machine_busy_seconds()
    t = time.perf_counter()
    for p in procs:
        p.start()
    results = [q.get(timeout=900) for _ in procs]
    wall = time.perf_counter() - t
    cpu = sum(process_tree_cpu_seconds(bp.proc.pid) for bp in brokers) - cpu0
    busy = machine_busy_seconds() - busy0
    for p in procs:
        p.join()
    if sum(r[1] for r in results):
        raise BenchError(f"{sum(r[1] for r in results)} records failed or unsent")
    total = per * args.producers
    return {"records_per_s": total / wall, "cpu_us_per_record": cpu / total * 1e6,
            "broker_cores": cpu / wall, "machine_cores": busy / wall}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--workers", type=int, default=2, help="broker processes in the multi-process case (2)")
    ap.add_argument("--producers", type=int, default=4, help="producer processes, split among the brokers (4)")
    ap.add_argument("--records", type=int, default=15000, help="small: records per producer (15000)")
    ap.add_argument("--keyed-records", type=int, default=200_000, help="partitions: records in all (200000)")
    ap.add_argument("--partitions", type=int, default=500, help="partitions: per broker (500)")
    ap.add_argument("--shapes", default="small,partitions")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--chronolog-cmd", default=default_chronolog_cmd())
    ap.add_argument("--startup-timeout", type=float, default=60)
    ap.add_argument("--json-out", type=Path)
    args = ap.parse_args(argv)
    out: dict = {"machine": _machine.base_info(), "shapes": {}}
    for shape in args.shapes.split(","):
        res = {}
        for n in (1, args.workers):
            runs = []
            with tempfile.TemporaryDirectory(prefix="multicore-") as work:
                brokers = []
                try:
                    for i in range(n):
                        d = Path(work) / f"b{i}"
                        d.mkdir()
                        brokers.append(start_broker("chronolog", args, d))
                    for bp in brokers:
                        wait_ready(bp, args.startup_timeout)
                    for run in range(args.runs):
                        r = run_once(brokers, shape, args)
                        runs.append(r)
                        log(f"{shape} {n} process(es) run {run + 1}: {json.dumps({k: round(v, 2) for k, v in r.items()})}")
                finally:
                    for bp in brokers:
                        stop_broker(bp)
            res[n] = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
        out["shapes"][shape] = res
        one, many = res[1], res[args.workers]
        print(f"### {shape}\n\n| processes | records/s | broker CPU µs/record | broker cores busy | "
              f"machine cores busy |\n|---|---|---|---|---|")
        for n, r in res.items():
            print(f"| {n} | {r['records_per_s']:,.0f} | {r['cpu_us_per_record']:.1f} | {r['broker_cores']:.2f} | "
                  f"{r['machine_cores']:.2f} |")
        print(f"| {args.workers} / 1 | {many['records_per_s'] / one['records_per_s']:.2f}x | "
              f"{many['cpu_us_per_record'] / one['cpu_us_per_record']:.2f}x | | |\n", flush=True)
    if args.json_out:
        args.json_out.write_text(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
