"""Log compaction benchmark: cleaning throughput, the cleaner's peak memory, cleaning in
passes with many distinct keys, and request latency while a large partition is cleaned.

    .venv/bin/python bench/compaction.py                 # every part, default sizes
    .venv/bin/python bench/compaction.py --parts throughput --log-mb 400
    make bench-compaction ARGS="--keys 10000000"

Parts (method in bench/README.md):

* ``throughput``: a compacted partition of ``--log-mb`` MB is written straight through
  the storage layer in three shapes (batches of 100 records of 100 B; single-record
  batches; lz4-compressed batches of 100), then cleaned by a real cleaner worker process
  (what the broker runs). Reported: MB of log per second (bytes the clean read, over its
  whole time: offset map + filter + fsync), the map and filter phases apart, and the
  worker's peak RSS.
* ``keys``: ``--keys`` distinct keys (default 10 million), one record each, cleaned with
  the default 128 MiB dedupe buffer: the passes it takes, the time and peak RSS.
* ``latency``: a broker process with a large dirty compacted partition; synchronous
  Produce (acks=1, one record) and Fetch requests to another topic, round trips timed,
  first while the cleaner is held back (min.cleanable.dirty.ratio=1), then while it
  cleans (the ratio lowered with IncrementalAlterConfigs). Reported: p50/p99/p99.9 of each.

Prints a Markdown report on stdout (``--json-out`` writes the numbers too).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench._machine import base_info, chronolog_info, markdown_lines  # noqa: E402
from bench._proc import stop_group  # noqa: E402


def log(msg: str) -> None:
    print(f"[compaction] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- building logs


def build_partition(data_dir: Path, topic: str, target_bytes: int, *, records_per_batch: int, value_size: int,
                    key_space: int, codec: int = 0, topic_configs: dict | None = None, unique_keys: bool = False,
                    target_records: int | None = None) -> dict:
    """Write a compacted partition straight through the storage layer (no broker), then
    close it cleanly. Returns what was written."""
    from config import load_broker_config
    from protocol import records as R
    from storage.clock import SystemClock
    from storage.log_manager import LogManager

    cfg = load_broker_config(None, [f"log.dirs={data_dir}"], env={}, warn=False)
    lm = LogManager(cfg, SystemClock())
    lm.startup()
    configs = {"cleanup.policy": "compact", "segment.bytes": str(100 * 1024 * 1024),
               "min.cleanable.dirty.ratio": "0.01"}
    configs.update(topic_configs or {})
    lm.create_topic(topic, 1, configs)
    plog = lm.get_log(topic, 0)
    rnd = random.Random(7)
    # 1000 random values: incompressible within a batch, as distinct records are
    values = [rnd.randbytes(value_size) for _ in range(1000)]
    written = records = 0
    now = int(time.time() * 1000)
    i = 0
    started = time.monotonic()
    while (records < target_records) if target_records else (written < target_bytes):
        if unique_keys:
            keys = [b"key-%010d" % (i + j) for j in range(records_per_batch)]
        else:
            keys = [b"key-%010d" % rnd.randrange(key_space) for _ in range(records_per_batch)]
        batch = R.build_batch([(now, k, values[(i + j) % 1000]) for j, k in enumerate(keys)], compression=codec)
        info = plog.append(batch)
        written += len(batch)
        records += records_per_batch
        i += records_per_batch
    # one more record a day later, so that everything before it is in inactive segments
    plog.roll()
    plog.append(R.build_batch([(now + 86_400_000, b"tail", b"tail")]))
    lm.shutdown()
    log(f"built {topic}: {written / 1e6:.0f} MB, {records} records in {time.monotonic() - started:.0f} s")
    return {"bytes": written, "records": records, "last_offset": info.last_offset}


def clean_with_worker(data_dir: Path, overrides: list[str] | None = None) -> dict:
    """Clean every dirty compacted log of ``data_dir`` with a real worker process, as
    the broker does, until nothing is eligible. Returns the totals."""
    from config import load_broker_config
    from storage.clock import SystemClock
    from storage.log_cleaner import LogCleaner
    from storage.log_manager import LogManager

    cfg = load_broker_config(None, [f"log.dirs={data_dir}", "log.cleaner.backoff.ms=0"] + (overrides or []),
                             env={}, warn=False)
    lm = LogManager(cfg, SystemClock())
    lm.startup()
    c = LogCleaner(lm, cfg, SystemClock())
    started = time.monotonic()
    try:
        c.tick()  # starts a clean if one is due; when it ends, tick() starts the next
        while c.busy():
            time.sleep(0.005)
            c.tick()
            if c.metrics.failures:
                raise RuntimeError("a clean failed: see the log above")
        wall = time.monotonic() - started
        m = c.metrics
        return {"rounds": m.runs, "wall_s": wall, "clean_s": m.clean_seconds_total,
                "bytes_read": m.bytes_read, "bytes_written": m.bytes_written, "records_read": m.messages_read,
                "records_written": m.messages_written, "peak_rss": m.peak_rss_bytes}
    finally:
        c.shutdown()
        lm.shutdown()


# --------------------------------------------------------------------------- parts


SHAPES = [
    ("batched", dict(records_per_batch=100, value_size=100, codec=0)),
    ("single-record batches", dict(records_per_batch=1, value_size=100, codec=0)),
    ("lz4 batches", dict(records_per_batch=100, value_size=100, codec=3)),
]


def part_throughput(args, work: Path) -> list[dict]:
    rows = []
    for name, shape in SHAPES:
        d = work / f"tp-{name.split()[0]}"
        target = int(args.log_mb * 1e6)
        built = build_partition(d, "t", target, key_space=max(1, int(target / 200 / 10)), **shape)
        r = clean_with_worker(d)
        mb = r["bytes_read"] / 1e6
        rows.append({"shape": name, "log_mb": built["bytes"] / 1e6, "records": built["records"],
                     "rounds": r["rounds"], "clean_s": r["clean_s"], "mb_per_s": mb / r["clean_s"],
                     "kept_mb": r["bytes_written"] / 1e6, "peak_rss_mb": r["peak_rss"] / 2**20})
        log(f"{name}: {mb:.0f} MB cleaned in {r['clean_s']:.2f} s ({mb / r['clean_s']:.0f} MB/s), "
            f"peak RSS {r['peak_rss'] / 2**20:.0f} MiB")
        shutil.rmtree(d, ignore_errors=True)
    return rows


def part_keys(args, work: Path) -> dict:
    d = work / "keys"
    # 10-byte keys + 8-byte values: one record per key
    built = build_partition(d, "t", 0, records_per_batch=1000, value_size=8, key_space=0, unique_keys=True,
                            target_records=args.keys)
    r = clean_with_worker(d)
    out = {"keys": built["records"], "log_mb": built["bytes"] / 1e6, "passes": r["rounds"],
           "clean_s": r["clean_s"], "mb_per_s": r["bytes_read"] / 1e6 / r["clean_s"],
           "peak_rss_mb": r["peak_rss"] / 2**20}
    log(f"{out['keys']} keys: {out['passes']} passes in {out['clean_s']:.1f} s, peak RSS {out['peak_rss_mb']:.0f} MiB")
    shutil.rmtree(d, ignore_errors=True)
    return out


def _percentiles(xs: list[float]) -> dict:
    xs = sorted(xs)
    if not xs:
        return {"n": 0}

    def q(p):
        return xs[min(len(xs) - 1, int(p * len(xs)))] * 1000

    return {"n": len(xs), "p50_ms": q(0.5), "p99_ms": q(0.99), "p999_ms": q(0.999), "max_ms": xs[-1] * 1000}


def _probe(port: int, topic: str, stop: threading.Event, rate: float, out: dict) -> None:
    """Alternate synchronous Produce (acks=1, one record) and Fetch round trips."""
    from broker.tools.client import Connection
    from protocol import records as R
    from protocol.messages import FetchRequest as F, ProduceRequest as P

    conn = Connection("127.0.0.1", port, timeout_ms=30000)
    produce, fetch = [], []
    interval = 1.0 / rate
    offset = 0
    nxt = time.perf_counter()
    try:
        while not stop.is_set():
            batch = R.build_batch([(int(time.time() * 1000), b"k", b"x" * 100)])
            req = P(acks=1, timeout_ms=30000, topic_data=[P.TopicProduceData(
                name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
            t0 = time.perf_counter()
            _, resp = conn.request(req, 9)
            produce.append(time.perf_counter() - t0)
            offset = resp.responses[0].partition_responses[0].base_offset  # fetch what was just written
            req = F(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[F.FetchTopic(
                topic=topic, partitions=[F.FetchPartition(partition=0, fetch_offset=offset,
                                                          partition_max_bytes=1 << 20)])])
            t0 = time.perf_counter()
            conn.request(req, 12)
            fetch.append(time.perf_counter() - t0)
            nxt += interval
            delay = nxt - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:
                nxt = time.perf_counter()
    finally:
        conn.close()
        out["produce"], out["fetch"] = produce, fetch


def part_latency(args, work: Path) -> dict:
    from broker.tools.client import Connection
    from protocol.messages import IncrementalAlterConfigsRequest as IAC

    d = work / "latency"
    bigs = [f"big{i}" for i in range(args.latency_partitions)]
    built = {"bytes": 0}
    for name in bigs:
        b = build_partition(d, name, int(args.latency_log_mb * 1e6), records_per_batch=100, value_size=100,
                            key_space=max(1, int(args.latency_log_mb * 1e6 / 200 / 10)),
                            topic_configs={"min.cleanable.dirty.ratio": "1"})
        built["bytes"] += b["bytes"]
    port = _free_port()
    cmd = [sys.executable, "-m", "broker", "serve", "-o", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "-o", f"log.dirs={d}", "-o", "log.cleaner.backoff.ms=200", "-o", "metrics.port=0",
           "-o", "auto.create.topics.enable=true"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=open(work / "latency-broker.log", "ab"), stderr=subprocess.STDOUT,
                            start_new_session=True)
    try:
        _wait_port(port, 60)
        conn = Connection("127.0.0.1", port)
        from protocol.messages import CreateTopicsRequest as CT

        conn.request(CT(topics=[CT.CreatableTopic(name="probe", num_partitions=1, replication_factor=1)],
                        timeout_ms=30000), 5)
        conn.close()
        results = {}
        checkpoint = d / "cleaner-offset-checkpoint"
        for phase in ("idle", "cleaning"):
            if phase == "cleaning":
                c = Connection("127.0.0.1", port)
                c.request(IAC(resources=[IAC.AlterConfigsResource(resource_type=2, resource_name=name, configs=[
                    IAC.AlterableConfig(name="min.cleanable.dirty.ratio", config_operation=0, value="0.01")])
                    for name in bigs], validate_only=False), 1)
                c.close()
            stop = threading.Event()
            out: dict = {}
            t = threading.Thread(target=_probe, args=(port, "probe", stop, args.probe_rate, out))
            t.start()
            started = time.monotonic()
            if phase == "idle":
                time.sleep(args.idle_s)
            else:
                while not all(_checkpointed(checkpoint, n) for n in bigs) and time.monotonic() - started < 900:
                    time.sleep(0.05)
            duration = time.monotonic() - started
            stop.set()
            t.join()
            results[phase] = {"seconds": duration, "produce": _percentiles(out["produce"]),
                              "fetch": _percentiles(out["fetch"])}
            log(f"{phase}: {duration:.1f} s, produce p99 {results[phase]['produce']['p99_ms']:.2f} ms, "
                f"fetch p99 {results[phase]['fetch']['p99_ms']:.2f} ms")
        results["log_mb"] = built["bytes"] / 1e6
        results["partitions"] = len(bigs)
        return results
    finally:
        stop_group(proc, 20)
        shutil.rmtree(d, ignore_errors=True)


def _checkpointed(path: Path, topic: str) -> bool:
    from storage.checkpoint import read_checkpoint

    try:
        return read_checkpoint(str(path)).get((topic, 0), 0) > 0
    except Exception:
        return False


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_port(port: int, timeout: float) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"the broker did not listen on {port}")


# --------------------------------------------------------------------------- report


def render(result: dict) -> str:
    lines = ["# Log compaction benchmark", ""]
    if "throughput" in result:
        lines += ["## Cleaning throughput (one worker process)", "",
                  "| shape | log MB | records | cleans | seconds | MB/s of log | kept MB | worker peak RSS MiB |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in result["throughput"]:
            lines.append(f"| {r['shape']} | {r['log_mb']:.0f} | {r['records']} | {r['rounds']} | {r['clean_s']:.2f} | "
                         f"{r['mb_per_s']:.0f} | {r['kept_mb']:.1f} | {r['peak_rss_mb']:.0f} |")
        lines.append("")
    if "keys" in result:
        k = result["keys"]
        lines += ["## Many distinct keys, default log.cleaner.dedupe.buffer.size (128 MiB)", "",
                  "| keys | log MB | passes | seconds | MB/s | worker peak RSS MiB |", "|---:|---:|---:|---:|---:|---:|",
                  f"| {k['keys']} | {k['log_mb']:.0f} | {k['passes']} | {k['clean_s']:.1f} | {k['mb_per_s']:.0f} | "
                  f"{k['peak_rss_mb']:.0f} |", ""]
    if "latency" in result:
        lat = result["latency"]
        lines += [f"## Request latency while {lat['partitions']} partitions of {lat['log_mb'] / lat['partitions']:.0f} MB "
                  "are cleaned, one after the other", "",
                  "| phase | seconds | produce p50 / p99 / p99.9 ms | fetch p50 / p99 / p99.9 ms |",
                  "|---|---:|---|---|"]
        for phase in ("idle", "cleaning"):
            p = lat[phase]
            lines.append(f"| {phase} | {p['seconds']:.1f} | {p['produce']['p50_ms']:.2f} / {p['produce']['p99_ms']:.2f} / "
                         f"{p['produce']['p999_ms']:.2f} | {p['fetch']['p50_ms']:.2f} / {p['fetch']['p99_ms']:.2f} / "
                         f"{p['fetch']['p999_ms']:.2f} |")
        i, c = lat["idle"], lat["cleaning"]
        lines += ["", f"p99 while cleaning / idle: produce {c['produce']['p99_ms'] / i['produce']['p99_ms']:.2f}x, "
                      f"fetch {c['fetch']['p99_ms'] / i['fetch']['p99_ms']:.2f}x", ""]
    lines += ["## Machine", ""] + markdown_lines(result["machine"])
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parts", default="throughput,keys,latency")
    ap.add_argument("--log-mb", type=float, default=300, help="size of each throughput shape's partition")
    ap.add_argument("--keys", type=int, default=10_000_000, help="distinct keys of the keys part")
    ap.add_argument("--latency-log-mb", type=float, default=500, help="size of each partition cleaned in the latency part")
    ap.add_argument("--latency-partitions", type=int, default=4, help="partitions cleaned while latency is measured")
    ap.add_argument("--idle-s", type=float, default=10)
    ap.add_argument("--probe-rate", type=float, default=500, help="produce+fetch pairs per second")
    ap.add_argument("--json-out", type=Path)
    ap.add_argument("--workdir", type=Path, help="where to build logs (default: a temporary directory)")
    args = ap.parse_args(argv)
    parts = [p.strip() for p in args.parts.split(",") if p.strip()]
    work = Path(tempfile.mkdtemp(prefix="chronolog-compaction-", dir=args.workdir))
    result: dict = {}
    try:
        if "throughput" in parts:
            result["throughput"] = part_throughput(args, work)
        if "keys" in parts:
            result["keys"] = part_keys(args, work)
        if "latency" in parts:
            result["latency"] = part_latency(args, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["machine"] = {**base_info(), **chronolog_info(REPO)}
    text = render(result)
    print(text)
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
