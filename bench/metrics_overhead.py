"""Cost of the Prometheus metrics on the produce path, measured in one process.

Two dispatchers share one LogManager: one with ``BrokerMetrics`` (metrics.port > 0), one
without (metrics.port=0). Produce requests (acks=1, one v2 batch of ``--records``
records of ``--size`` bytes, CreateTime) are dispatched alternately through each, so
both see the same page-cache state, log size and CPU frequency; the CPU time
(``time.thread_time``) of every dispatch is summed per side. Also times one scrape
(``generate_latest``) of the resulting registry.

    .venv/bin/python bench/metrics_overhead.py [--requests 1000] [--records 1000] [--size 100]

Why in-process: the end-to-end benchmark's broker CPU per record (bench/throughput.py)
swings by 4x between runs on a VM with the state of free memory (first-touch cost of
page-cache pages, see README's Performance section), which hides a difference of a few
percent; alternating requests in one process cancels that out.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


class _Conn:
    _peer = "bench:0"
    session = None  # no authentication: the PLAINTEXT listener without SASL
    peer_host = "/127.0.0.1"

    def close(self) -> None:  # pragma: no cover - a failed request
        raise SystemExit("a request failed")


def in_process_log_manager(log_dir: str, partitions: int = 1):
    """``(config, clock, log_manager)`` of a broker whose one log dir is ``log_dir``
    (metrics.port=0), with the CreateTime topic "bench" of ``partitions`` partitions: the
    storage side of the in-process benchmarks (this one and bench/instructions.py)."""
    from config.broker_config import load_broker_config
    from storage.clock import SystemClock
    from storage.log_manager import LogManager

    cfg = load_broker_config(overrides=[f"log.dirs={log_dir}", "metrics.port=0"], env={}, warn=False)
    clock = SystemClock()
    lm = LogManager(cfg, clock)
    lm.startup()
    lm.create_topic("bench", partitions, {"message.timestamp.type": "CreateTime"})
    return cfg, clock, lm


def _produce_frame(topic: str, n: int, size: int, ts: int) -> bytes:
    from kafka.record.default_records import DefaultRecordBatchBuilder

    from protocol import codec
    from protocol.messages import ProduceRequest, RequestHeader

    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                  producer_epoch=-1, base_sequence=-1, batch_size=1 << 30)
    payload = os.urandom(size)
    for i in range(n):
        b.append(i, timestamp=ts + i, key=None, value=payload, headers=[])
    records = bytes(b.build())
    req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
        ProduceRequest.TopicProduceData(name=topic, partition_data=[
            ProduceRequest.PartitionProduceData(index=0, records=records)])])
    header = RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="bench")
    frame = codec.encode_request(header, req)
    return frame[4:] if len(frame) == int.from_bytes(frame[:4], "big") + 4 else frame


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=1000, help="produce requests per side")
    ap.add_argument("--records", type=int, default=1000, help="records per request (one batch)")
    ap.add_argument("--size", type=int, default=100, help="value bytes per record")
    args = ap.parse_args()

    from broker.context import BrokerContext
    from broker.dispatcher import Dispatcher
    from broker.metrics import BrokerMetrics
    tmp = tempfile.mkdtemp(prefix="metrics-overhead-")
    try:
        cfg, clock, lm = in_process_log_manager(tmp)
        metrics = BrokerMetrics()
        common = dict(config=cfg, log_manager=lm, clock=clock, node_id=0, host="127.0.0.1", port=9092,
                      cluster_id="bench")
        ctx_on = BrokerContext(**common, metrics=metrics)
        ctx_off = BrokerContext(**common)
        metrics.attach_state(lm, lambda: None, clock)
        sides = {"on": Dispatcher(ctx_on), "off": Dispatcher(ctx_off)}
        frame = _produce_frame("bench", args.records, args.size, clock.time_ms() - 1000)
        conn = _Conn()
        cpu = {"on": [], "off": []}
        for i in range(40):  # warm-up (labelled children, code paths), not counted
            sides[("on", "off")[i % 2]].dispatch(conn, memoryview(bytearray(frame)))
        for i in range(2 * args.requests):
            # alternate, and swap the order every other pair
            side = ("on", "off")[(i + (i // 2)) % 2]
            buf = bytearray(frame)  # the connection's buffer: patched in place by the append
            view = memoryview(buf)
            t0 = time.thread_time()
            out = sides[side].dispatch(conn, view)
            t1 = time.thread_time()
            assert out, "no response"
            cpu[side].append(t1 - t0)
            del view
        # The hooks alone, exactly as the "on" side runs them per produce request (no I/O,
        # so none of the page-cache noise above): what metrics add to a request.
        from broker.handlers import produce as produce_handler
        from protocol import codec

        plog = lm.get_log("bench", 0)
        hdr, off = codec.decode_request_header(memoryview(bytearray(frame)))
        req = codec.decode_request_body(hdr, memoryview(bytearray(frame)), off)
        records = req.topic_data[0].partition_data[0].records
        response = produce_handler.handle(ctx_off, hdr, req)  # one more append, metrics off
        from storage.log import AppendInfo

        # a LogAppendTime topic's AppendInfo has the log append time, a CreateTime one's -1
        now = clock.time_ms()
        info = AppendInfo(0, args.records - 1, now if plog.config.is_log_append_time else -1, 0, args.records, now)
        reps = 20000
        t0 = time.thread_time()
        for _ in range(reps):
            started = time.perf_counter()
            tally = {}
            produce_handler._count(tally, "bench", records, info, clock.time_ms(), True)
            metrics.produced(response.responses, tally)
            metrics.request_done(0, response, time.perf_counter() - started)
        hooks_us = (time.thread_time() - t0) / reps * 1e6
        t0 = time.perf_counter()
        body = metrics.exposition()
        scrape_ms = (time.perf_counter() - t0) * 1e3
        n = args.requests * args.records
        on, off = sum(cpu["on"]), sum(cpu["off"])
        print(f"{args.requests} produce requests per side x {args.records} records x {args.size} B "
              f"(one batch per request), alternating metrics on/off in one process")
        print("| metrics | CPU s | CPU µs/request (median) | CPU µs/record |")
        print("|---|---:|---:|---:|")
        for name, total in (("on", on), ("off", off)):
            print(f"| {name} | {total:.3f} | {statistics.median(cpu[name]) * 1e6:.1f} | {total / n * 1e6:.4f} |")
        print(f"difference: {(on - off) / off * 100:+.2f}% CPU "
              f"({(on - off) / args.requests * 1e6:+.1f} µs per request)")
        med_off = statistics.median(cpu["off"]) * 1e6
        print(f"metrics hooks alone: {hooks_us:.2f} µs CPU per produce request = "
              f"{hooks_us / med_off * 100:.2f}% of the median metrics-off dispatch ({med_off:.0f} µs), "
              f"{hooks_us / args.records * 1e3:.2f} ns per record")
        print(f"one scrape: {scrape_ms:.2f} ms, {len(body)} bytes")
        print(f"load average: {open('/proc/loadavg').read().strip()}")
        lm.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
