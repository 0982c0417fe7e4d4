"""broker.server.watch_loop_lag: how late the event loop runs a timer due every tick,
observed into chronolog_event_loop_lag_seconds, and a stall over the warning bound
logged in one line. The loop is really held (a blocking sleep in a callback): what is
measured is the loop's own lateness, which no injected clock has."""

from __future__ import annotations

import asyncio
import logging
import time

import uvloop

from broker.metrics import BrokerMetrics
from broker.server import watch_loop_lag


def _counts(metrics) -> tuple[int, float, list[int]]:
    child = metrics.loop_lag.labels()
    return sum(child.counts), child.sum, list(child.counts)


def test_a_held_loop_is_observed_and_logged(caplog):
    metrics = BrokerMetrics(process_metrics=False)

    async def main():
        task = asyncio.ensure_future(watch_loop_lag(metrics, tick_s=0.02, warn_s=0.2))
        await asyncio.sleep(0.2)  # on-time ticks first
        n_before, _sum, _ = _counts(metrics)
        time.sleep(0.3)  # the loop held: the next tick runs about 0.3 s late
        await asyncio.sleep(0.1)
        task.cancel()
        return n_before

    with caplog.at_level(logging.WARNING, logger="chronolog.server"):
        n_before = uvloop.run(main())
    n, total, counts = _counts(metrics)
    assert n_before >= 3 and n > n_before
    bounds = list(metrics.loop_lag.bounds)
    late = sum(c for b, c in zip(bounds + [float("inf")], counts) if b > 0.25)
    assert late == 1, counts  # the one tick that waited for the held loop
    assert total >= 0.25
    warned = [r.getMessage() for r in caplog.records if "event loop ran" in r.getMessage()]
    assert len(warned) == 1 and " ms late" in warned[0], warned
    assert 250 <= int(warned[0].split("ran ")[1].split(" ms")[0]) <= 2000
