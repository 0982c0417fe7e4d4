"""How long a Prometheus scrape of a broker with many partitions holds up the event
loop: a 1 ms timer on the loop measures its own lateness while ``--scrapes`` (3) scrapes
run, first on the loop itself (as the metrics endpoint ran them until 2026-11-29), then in
a worker thread (as it runs them now).

The broker state is in-process (bench/metrics_overhead.py ``in_process_log_manager``):
one topic of ``--partitions`` (10,000) partitions; its heap frozen as the broker's is
after start-up (broker.server ``settle_heap``).

    .venv/bin/python bench/scrape.py [--partitions 10000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))


async def _lateness(scrape, in_thread: bool, scrapes: int) -> list[float]:
    stop, lates = asyncio.Event(), []

    async def tick():
        while not stop.is_set():
            t = time.perf_counter()
            await asyncio.sleep(0.001)
            lates.append(time.perf_counter() - t - 0.001)

    task = asyncio.create_task(tick())
    await asyncio.sleep(0.05)
    lates.clear()
    for _ in range(scrapes):
        if in_thread:
            await asyncio.get_running_loop().run_in_executor(None, scrape)
        else:
            scrape()
        await asyncio.sleep(0.01)
    stop.set()
    await task
    return lates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--partitions", type=int, default=10_000)
    ap.add_argument("--scrapes", type=int, default=3)
    args = ap.parse_args()
    from metrics_overhead import in_process_log_manager

    from broker.metrics import BrokerMetrics

    tmp = tempfile.mkdtemp(prefix="bench-scrape-")
    try:
        _cfg, clock, lm = in_process_log_manager(tmp, args.partitions)
        m = BrokerMetrics()
        m.attach_state(lm, lambda: None, clock)
        gc.collect()
        gc.freeze()
        t = time.perf_counter()
        size = len(m.exposition())
        print(f"{args.partitions:,} partitions: one scrape {(time.perf_counter() - t) * 1000:.0f} ms, "
              f"{size / 1e6:.1f} MB")
        for in_thread in (False, True):
            lates = sorted(asyncio.run(_lateness(m.exposition, in_thread, args.scrapes)))
            print(f"scrapes {'in a thread' if in_thread else 'on the loop'}: the loop's 1 ms timer late by "
                  f"at most {lates[-1] * 1000:.1f} ms (p99 {lates[int(len(lates) * 0.99)] * 1000:.1f} ms, "
                  f"{len(lates)} ticks)")
        lm.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
