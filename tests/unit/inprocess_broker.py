"""A real broker run in the test's own process (a thread runs its event loop), for tests
that patch the broker's code or look at its objects while clients talk to it over TCP."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Callable, Iterator

from broker.server import BrokerServer
from config import load_broker_config


@contextlib.contextmanager
def in_process_broker(log_dir, settle_heap: bool = False,
                      before_start: Callable[[BrokerServer], None] | None = None) -> Iterator[tuple[BrokerServer, int]]:
    """Yields (server, port) of a broker listening on loopback; stops it on exit.
    ``before_start`` sees the server before it starts."""
    cfg = load_broker_config(None, [f"log.dirs={log_dir}", "listeners=PLAINTEXT://127.0.0.1:0", "metrics.port=0"],
                             env={}, warn=False)
    server = BrokerServer(cfg, settle_heap=settle_heap)
    if before_start is not None:
        before_start(server)
    loop = asyncio.new_event_loop()
    started = threading.Event()

    def run():
        asyncio.set_event_loop(loop)
        loop.run_until_complete(server.start())
        started.set()
        loop.run_forever()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    assert started.wait(30)
    try:
        yield server, server.servers[0].sockets[0].getsockname()[1]
    finally:
        asyncio.run_coroutine_threadsafe(server.stop(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        t.join(10)
