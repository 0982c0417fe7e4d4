#!/usr/bin/env python3
"""Rows/s of a full-topic batch read through the ``kafka-compatible`` PySpark source.

Starts a Chronolog broker from this checkout (temporary data dir), creates a topic,
produces ``--records`` records with ``--size``-byte values (confluent-kafka), then times
``spark.read.format("kafka-compatible")...load()`` written to Spark's ``noop`` sink (every
row materialised, nothing stored) on ``local[N]``, ``--runs`` times (default 5) after one warm-up.

    .venv/bin/python bench/spark_read.py                       # 1,000,000 records, 2 partitions
    .venv/bin/python bench/spark_read.py --records 200000 --partitions 4 --master 'local[4]'

Needs the ``spark`` and ``bench`` extras (``make test`` installs both) and Java 17+.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"broker did not listen on port {port} within {timeout} s")


def produce(bootstrap: str, topic: str, partitions: int, n: int, size: int) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(30)
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.size": 1 << 20,
                  "queue.buffering.max.messages": 1_000_000, "acks": "all"})
    value = os.urandom(size)
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, key=b"k%d" % (i % 1000), partition=i % partitions)
                break
            except BufferError:
                p.poll(0.05)
    if p.flush(120):
        raise SystemExit("producer did not flush within 120 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--size", type=int, default=100, help="value size in bytes")
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--master", default="local[2]")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--min-partitions", type=int, default=0, help="minPartitions option (0: unset)")
    args = ap.parse_args()

    port = free_port()
    data = tempfile.mkdtemp(prefix="chronolog-spark-bench-")
    env = dict(os.environ, PYTHONPATH=str(REPO))
    log = open(Path(data) / "broker.log", "wb")
    cmd = [sys.executable, "-m", "broker", "serve", "--override", f"listeners=PLAINTEXT://127.0.0.1:{port}",
           "--override", f"log.dirs={data}/data"]
    if "metrics.port" in (REPO / "config" / "broker_config.py").read_text():
        cmd += ["--override", "metrics.port=0"]  # no clash with a running broker's endpoint
    broker = subprocess.Popen(cmd,
                              cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_port(port)
        bootstrap = f"127.0.0.1:{port}"
        t0 = time.monotonic()
        produce(bootstrap, "bench", args.partitions, args.records, args.size)
        print(f"produced {args.records} records of {args.size} B in {time.monotonic() - t0:.1f} s",
              file=sys.stderr)

        os.environ["PYSPARK_PYTHON"] = sys.executable
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master(args.master).appName("kafka-compatible-bench")
                 .config("spark.ui.enabled", "false").config("spark.driver.host", "127.0.0.1")
                 .config("spark.driver.bindAddress", "127.0.0.1").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
        reader = (spark.read.format("kafka-compatible").option("kafka.bootstrap.servers", bootstrap)
                  .option("subscribe", "bench"))
        if args.min_partitions:
            reader = reader.option("minPartitions", str(args.min_partitions))
        assert reader.load().count() == args.records  # warm-up (Python workers started)
        rates = []
        for run in range(args.runs):
            t0 = time.monotonic()
            reader.load().write.format("noop").mode("overwrite").save()
            dt = time.monotonic() - t0
            rates.append(args.records / dt)
            print(f"run {run + 1}: {dt:.2f} s, {args.records / dt:,.0f} rows/s", file=sys.stderr)
        spark.stop()
        med = statistics.median(rates)
        print(f"kafka-compatible full-topic read, {args.master}, {args.partitions} partitions, "
              f"{args.records} x {args.size} B: median {med:,.0f} rows/s "
              f"({med * args.size / 1e6:.1f} MB/s of values) over {args.runs} runs")
        return 0
    finally:
        os.killpg(broker.pid, signal.SIGTERM)
        try:
            broker.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(broker.pid, signal.SIGKILL)


if __name__ == "__main__":
    sys.exit(main())
