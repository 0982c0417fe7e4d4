"""Start the broker: storage, the listener, periodic tasks, and an explicit shutdown.

``run(config)`` blocks until SIGTERM/SIGINT, then stops accepting connections, closes
the open ones, flushes and closes every log, and returns.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal

from broker.context import BrokerContext, load_or_create_cluster_id
from broker.dispatcher import Dispatcher
from broker.connection import KafkaConnection
from broker.handlers.init_producer_id import ProducerIdManager

log = logging.getLogger("chronolog.server")

# how often files of deleted segments are checked against file.delete.delay.ms
_DELETE_TICK_MS = 200


class BrokerServer:
    """The running broker. Usable from tests in-process as well as from ``run``."""

    def __init__(self, config, clock=None) -> None:
        from storage.clock import SystemClock
        from storage.log_manager import LogManager

        self.config = config
        self.clock = clock or SystemClock()
        self.log_manager = LogManager(config, self.clock)
        self.server: asyncio.AbstractServer | None = None
        self.dispatcher: Dispatcher | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()

    async def start(self) -> None:
        cfg = self.config
        host, port = cfg.listener()
        cluster_id = load_or_create_cluster_id(list(cfg.log_dirs), cfg.node_id)
        self.log_manager.startup()
        loop = asyncio.get_running_loop()
        # The context needs the real port (the listener may ask for port 0).
        ctx = BrokerContext(
            config=cfg,
            log_manager=self.log_manager,
            clock=self.clock,
            node_id=cfg.node_id,
            host=host,
            port=port,
            cluster_id=cluster_id,
            producer_ids=ProducerIdManager(os.path.join(cfg.log_dirs[0], "chronolog-producer-id-block")),
        )
        self.dispatcher = Dispatcher(ctx)
        # group coordinator: replay __consumer_offsets before the first client connects
        from broker.coordinator.service import start_group_coordinator

        ctx.group_coordinator = start_group_coordinator(ctx)
        self._tasks.append(asyncio.ensure_future(self._periodic(
            "offsets expiration", cfg.offsets_retention_check_interval_ms, ctx.group_coordinator.expire_offsets)))
        self.server = await loop.create_server(
            lambda: KafkaConnection(self.dispatcher),
            host=host,
            port=port,
            reuse_address=True,
            backlog=1024,
        )
        bound = self.server.sockets[0].getsockname()
        ctx.port = bound[1]
        adv_host, adv_port = cfg.advertised_listener()
        ctx.host = adv_host or host
        if not adv_port:
            ctx.port = bound[1]
        else:
            ctx.port = adv_port
        self.context = ctx
        self._tasks.append(asyncio.ensure_future(self._flush_loop()))
        lm = self.log_manager
        self._tasks += [
            asyncio.ensure_future(self._periodic("log retention", cfg.log_retention_check_interval_ms,
                                                 lm.cleanup_logs)),
            asyncio.ensure_future(self._periodic("deleted segment removal", _DELETE_TICK_MS,
                                                 lm.delete_due_files)),
            asyncio.ensure_future(self._periodic("recovery point checkpoint",
                                                 cfg.log_flush_offset_checkpoint_interval_ms,
                                                 lm.checkpoint_recovery_points)),
            asyncio.ensure_future(self._periodic("log start offset checkpoint",
                                                 cfg.log_flush_start_offset_checkpoint_interval_ms,
                                                 lm.checkpoint_log_start_offsets)),
        ]
        log.info(
            "Chronolog listening on %s:%d (node.id=%d, cluster.id=%s, log.dirs=%s)",
            bound[0],
            bound[1],
            cfg.node_id,
            cluster_id,
            ",".join(cfg.log_dirs),
        )

    async def _periodic(self, what: str, interval_ms: int, fn) -> None:
        """Run ``fn`` every ``interval_ms`` (first run one interval after start; Kafka
        waits 30 s for all of these, which only slows tests down).  0 disables."""
        if not interval_ms or interval_ms <= 0:
            return
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                fn()
            except Exception:
                log.exception("periodic task %s failed", what)

    async def _flush_loop(self) -> None:
        interval_ms = getattr(self.config, "log_flush_scheduler_interval_ms", None)
        if not interval_ms or interval_ms <= 0 or interval_ms >= 2**62:
            # Kafka's default (Long.MAX_VALUE) never runs the flusher; keep a slow
            # tick for flush.ms topics anyway.
            interval_ms = 1000
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                self.log_manager.flush_due()
            except Exception:
                log.exception("periodic flush failed")

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self._tasks:
            task.cancel()
        if self.dispatcher is not None:
            for conn in list(self.dispatcher.connections):
                conn.close()
        if self.server is not None:
            try:
                await asyncio.wait_for(self.server.wait_closed(), timeout=5)
            except asyncio.TimeoutError:  # pragma: no cover
                log.warning("connections did not close within 5 s")
        coordinator = getattr(getattr(self, "context", None), "group_coordinator", None)
        if coordinator is not None:
            coordinator.shutdown()
        self.log_manager.shutdown()
        log.info("Chronolog stopped")
        self._stopped.set()


async def serve(config) -> None:
    server = BrokerServer(config)
    await server.start()
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, stop.set)
        except NotImplementedError:  # pragma: no cover
            pass
    await stop.wait()
    log.info("shutting down")
    await server.stop()


def run(config) -> int:
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a hard dependency
        uvloop = None
    if uvloop is not None:
        uvloop.run(serve(config))
    else:  # pragma: no cover
        asyncio.run(serve(config))
    return 0
