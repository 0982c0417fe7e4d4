#!/usr/bin/env python3
"""What transactions cost: transactional produce (a commit every ``--txn-ms``, 100 ms by
default) against plain idempotent produce, and read_committed against read_uncommitted
consume, on one Chronolog broker in the same run.

Each run creates two fresh one-partition topics. The plain phase is
bench/throughput.py's (confluent-kafka, linger.ms=5, acks=all, random values). The
transactional phase is the same producer with a ``transactional.id``: it begins a
transaction, produces until ``--txn-ms`` have passed, commits, and goes on (the commit
waits for the transaction's records, so the producer pipeline drains at every commit,
as in a real application). Both consume phases then read the transactional topic from
offset 0 with assign(): read_uncommitted and read_committed (the latter stops at the last
stable offset and gets the aborted transactions, here none). Medians over ``--runs``,
with the broker's CPU per record.

    .venv/bin/python bench/transactions.py          # or: make bench-transactions
    .venv/bin/python bench/transactions.py --records 100000 --runs 5 --json-out /tmp/txn.json
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.transactions
    from bench import _machine, throughput as T
except ImportError:
    import _machine
    import throughput as T

PHASES = ("plain produce", "transactional produce", "read_uncommitted consume", "read_committed consume")


def txn_produce_phase(bootstrap: str, topic: str, payloads: list[bytes], linger_ms: float, txn_ms: float,
                      timeout: float, broker_cpu) -> tuple[T.PhaseResult, int]:
    """Returns the phase and the number of transactions committed."""
    errors: list[Any] = []
    p = T.Producer({"bootstrap.servers": bootstrap, "linger.ms": linger_ms,
                    "transactional.id": f"bench-{uuid.uuid4().hex[:8]}", "delivery.report.only.error": True,
                    "on_delivery": lambda err, msg: err is not None and errors.append(err)})
    p.init_transactions(min(30.0, timeout))  # untimed, like the plain phase's metadata call
    cpu0, ccpu0 = broker_cpu(), time.process_time()
    t0 = time.perf_counter()
    deadline = t0 + timeout
    txns = 0
    i, n = 0, len(payloads)
    while i < n:
        p.begin_transaction()
        ends = time.perf_counter() + txn_ms / 1000.0
        while i < n and time.perf_counter() < ends:
            try:
                p.produce(topic, payloads[i], partition=0)
                i += 1
            except BufferError:
                p.poll(0.005)
        p.commit_transaction(max(1.0, deadline - time.perf_counter()))
        txns += 1
        if time.perf_counter() > deadline:
            raise T.BenchError(f"transactional produce exceeded {timeout:g} s")
    t1 = time.perf_counter()
    cpu1, ccpu1 = broker_cpu(), time.process_time()
    if errors:
        raise T.BenchError(f"{len(errors)} records failed; first error: {errors[0]}")
    return T.PhaseResult(t1 - t0, cpu1 - cpu0, ccpu1 - ccpu0, n, sum(len(x) for x in payloads)), txns


def consume_all(bootstrap: str, topic: str, records: int, size: int, isolation: str, timeout: float,
                broker_cpu) -> T.PhaseResult:
    """Read ``records`` records from offset 0 (the offsets have gaps: the markers)."""
    c = T.Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex}",
                    "enable.auto.commit": False, "enable.auto.offset.store": False,
                    "auto.offset.reset": "earliest", "isolation.level": isolation, "fetch.queue.backoff.ms": 10})
    try:
        c.list_topics(topic, timeout=min(10.0, timeout))
        n = 0
        cpu0, ccpu0 = broker_cpu(), time.process_time()
        t0 = time.perf_counter()
        c.assign([T.TopicPartition(topic, 0, T.OFFSET_BEGINNING)])
        while n < records:
            if time.perf_counter() > t0 + timeout:
                raise T.BenchError(f"{isolation} consume exceeded {timeout:g} s: {n} of {records} records")
            for m in c.consume(min(10000, records - n), 0.5):
                if m.error() is not None:
                    raise T.BenchError(f"consumer error: {m.error()}")
                if len(m.value() or b"") != size:
                    raise T.BenchError(f"record at offset {m.offset()} has the wrong size")
                n += 1
        t1 = time.perf_counter()
        cpu1, ccpu1 = broker_cpu(), time.process_time()
    finally:
        c.close()
    return T.PhaseResult(t1 - t0, cpu1 - cpu0, ccpu1 - ccpu0, n, n * size)


def render_markdown(result: dict[str, Any]) -> str:
    cfg, med = result["config"], result["median"]
    base_p, base_c = med["plain produce"], med["read_uncommitted consume"]
    out = [f"### Transactions: median of {cfg['runs']} runs, {cfg['records']:,} records x {cfg['size']} B, "
           f"1 partition, linger.ms={cfg['linger_ms']:g}, acks=all, a commit every {cfg['txn_ms']:g} ms", "",
           "| phase | records/s | vs plain | broker CPU µs/record |", "|---|---:|---:|---:|"]
    for phase in PHASES:
        base = base_p if "produce" in phase else base_c
        m = med[phase]
        out.append(f"| {phase} | {m['records_per_s']:,.0f} | {m['records_per_s'] / base['records_per_s']:.0%} | "
                   f"{m['broker_cpu_us_per_record']:.2f} |")
    out += ["", f"Transactions per run (median): {med['transactions']:.0f}.", "",
            "Per run (records/s):", "", "| run | " + " | ".join(PHASES) + " |", "|---:|" + "---:|" * len(PHASES)]
    for i, r in enumerate(result["runs"], 1):
        out.append(f"| {i} | " + " | ".join(f"{r[ph]['records_per_s']:,.0f}" for ph in PHASES) + " |")
    m = result["machine"]
    out += ["", "### Machine", ""]
    out.extend(_machine.markdown_lines(
        m, python_extra=f"; confluent-kafka {m.get('confluent_kafka')}, librdkafka {m.get('librdkafka')}",
        extra_keys=("chronolog", "chronolog_git")))
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Chronolog: transactional against plain produce and consume.")
    ap.add_argument("--records", type=int, default=200_000, help="records per phase (200000)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes (100)")
    ap.add_argument("--runs", type=int, default=3, help="runs; the table shows medians (3)")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms (5)")
    ap.add_argument("--txn-ms", type=float, default=100.0, help="length of each transaction in ms (100)")
    ap.add_argument("--phase-timeout", type=float, default=180.0, help="seconds per phase (180)")
    ap.add_argument("--startup-timeout", type=float, default=60.0, help="seconds to start (60)")
    ap.add_argument("--chronolog-cmd", default=T.default_chronolog_cmd(), help="broker command ({port}, {log_dir})")
    ap.add_argument("--json-out", type=Path, help="also write every number to this JSON file")
    args = ap.parse_args(argv)
    if args.records < 1 or args.size < 0 or args.runs < 1 or args.txn_ms <= 0:
        ap.error("--records and --runs must be >= 1, --size >= 0, --txn-ms > 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    watchdog = T._watchdog(args.startup_timeout + 60 + args.runs * (4 * args.phase_timeout + 10))
    payloads = T.random_payloads(args.records, args.size)
    info = _machine.base_info()
    info.update(_machine.chronolog_info(T.REPO))
    info.update(T.client_info())
    result: dict[str, Any] = {
        "config": {"records": args.records, "size": args.size, "runs": args.runs, "linger_ms": args.linger_ms,
                   "txn_ms": args.txn_ms},
        "machine": info, "runs": [], "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    workdir = Path(tempfile.mkdtemp(prefix="chronolog-bench-txn-"))
    bp = None
    try:
        bp = T.start_broker("chronolog", args, workdir)
        T.wait_ready(bp, args.startup_timeout)

        def cpu() -> float:
            return T.process_tree_cpu_seconds(bp.proc.pid)

        for run in range(1, args.runs + 1):
            plain, txn = (f"bench-txn-{run}-{kind}-{uuid.uuid4().hex[:6]}" for kind in ("plain", "txn"))
            for t in (plain, txn):
                T.create_topic(bp.bootstrap, t, args.phase_timeout)
            row: dict[str, Any] = {}
            row["plain produce"] = T.produce_phase(bp.bootstrap, plain, payloads, "none", args.linger_ms,
                                                   args.phase_timeout, cpu).as_dict()
            phase, txns = txn_produce_phase(bp.bootstrap, txn, payloads, args.linger_ms, args.txn_ms,
                                            args.phase_timeout, cpu)
            row["transactional produce"], row["transactions"] = phase.as_dict(), txns
            for iso in ("read_uncommitted", "read_committed"):
                row[f"{iso} consume"] = consume_all(bp.bootstrap, txn, args.records, args.size, iso,
                                                    args.phase_timeout, cpu).as_dict()
            T.log(f"run {run}: " + ", ".join(f"{ph} {row[ph]['records_per_s']:,.0f} rec/s" for ph in PHASES)
                  + f", {txns} transactions")
            result["runs"].append(row)
        result["median"] = {ph: {k: statistics.median(r[ph][k] for r in result["runs"])
                                 for k in ("records_per_s", "mb_per_s", "broker_cpu_us_per_record")}
                            for ph in PHASES}
        result["median"]["transactions"] = statistics.median(r["transactions"] for r in result["runs"])
        result["command"] = " ".join(bp.cmd)
    except (T.BenchError, T.KafkaException) as e:
        tail = f"\n--- log tail ---\n{bp.log_tail()}" if bp is not None else ""
        T.log(f"FAILED: {e}{tail}")
        return 1
    finally:
        if bp is not None:
            T.stop_broker(bp)
        shutil.rmtree(workdir, ignore_errors=True)
        watchdog.cancel()
    T.emit(render_markdown(result), result, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
