"""Start the broker: storage, the listener, periodic tasks, and an explicit shutdown.

``run(config)`` blocks until SIGTERM/SIGINT, then shuts down in bounded time
(``controlled.shutdown.timeout.ms``, see ``BrokerServer.stop``): stops accepting, answers
the requests in flight, closes the connections, flushes and closes every log, writes the
checkpoints and the clean-shutdown marker, and returns (exit code 0).
"""

from __future__ import annotations

import asyncio
import errno
import gc
import logging
import os
import signal
import threading

from broker.context import BrokerContext, load_or_create_cluster_id
from broker.errors import ShutdownError, StartupError
from broker.dispatcher import Dispatcher
from broker.connection import KafkaConnection, TlsServer
from broker.handlers.init_producer_id import ProducerIdManager

log = logging.getLogger("chronolog.server")

# how often files of deleted segments are checked against file.delete.delay.ms
_DELETE_TICK_MS = 200
# how often the log cleaner collects finished cleans and (after its backoff) starts new ones
_CLEANER_TICK_MS = 100
# the APIs a producer or consumer sends in its first seconds, every version of each:
# ApiVersions, Metadata, Produce, Fetch, ListOffsets, FindCoordinator, OffsetCommit,
# OffsetFetch, JoinGroup, Heartbeat, LeaveGroup, SyncGroup, InitProducerId and
# ConsumerGroupHeartbeat
FIRST_SECONDS_API_KEYS = (18, 3, 0, 1, 2, 10, 8, 9, 11, 12, 13, 14, 22, 68)


async def flush_off_the_loop(log_manager) -> int:
    """One pass of the periodic flush (rolled segments, Kafka's flush on roll, and the logs
    whose flush.ms has passed), its fsyncs on a worker thread: a segment rolled while the
    page cache still holds it dirty takes 120-145 ms to fsync for 256 MiB (measured under
    a bulk produce), which every client waited for while the loop did it. The loop only
    opens the descriptors before and moves the recovery points after
    (storage.log.LogFlush). Returns the logs flushed."""
    from storage.log import fsync_flushes

    flushes = log_manager.start_flushes()
    if not flushes:
        return 0
    # (cancelled at shutdown, the thread still closes the descriptors; the stop syncs the
    # filesystem)
    await asyncio.get_running_loop().run_in_executor(None, fsync_flushes, flushes)
    return len(log_manager.finish_flushes(flushes))


async def _prepare_codec() -> None:
    """The codec's plans for what every client sends in its first seconds
    (FIRST_SECONDS_API_KEYS), made once the listeners are up, a pair per loop turn (a
    quarter of a millisecond or so each; about 40 ms in all) so that requests arriving
    meanwhile wait for one pair at most. A pair met first in a request costs that request
    a millisecond or two (protocol.codec.prepare): a producer's first record and a
    consumer's first fetch would wait for it."""
    from protocol import codec

    try:
        for _ in codec.prepare(FIRST_SECONDS_API_KEYS):
            await asyncio.sleep(0)
    except Exception as exc:  # noqa: BLE001 - the pairs are then made by their first requests
        log.warning("preparing the codec's plans failed (%s: %s); each API version's first request makes its own",
                    type(exc).__name__, exc)


# deferred partitions (a cleanly stopped log dir's at start-up, a large new topic's) loaded
# or made per loop turn, about 0.3 ms each to load: slices keep requests flowing meanwhile.
# A turn stops after 2 ms: making a partition (six file creations) takes 1.5-2.5 ms on a
# filesystem still busy with a large deletion, and with 10 ms turns a produce made while a
# 10,000-partition topic was being made waited 3.5-3.9 ms in the median (p99 12 ms); with
# 2 ms, 1.3-1.5 (p99 4.2). Start-up's background load of 10,000 partitions took as long.
_DEFERRED_LOAD_SLICE = 32
_DEFERRED_LOAD_BUDGET_S = 0.002  # and at most this long a turn
#: partitions opened or made since the heap was last settled (settle_heap) from which the
#: background loader settles it again: 1,000 partitions are about 24,000 objects the
#: cyclic collector tracks; 10,000 unsettled made a full collection of 50-150 ms
SETTLE_AGAIN_AFTER = 1000


def _apply_dynamic_configs(listeners, static_cfg, effective_cfg) -> None:
    """The dynamic broker configs stored by (Incremental)AlterConfigs apply again after a
    restart: listener keystores and TLS settings, advertised endpoints, SASL settings.
    Ones that no longer load are logged and the configured ones serve."""
    from broker.security.listeners import apply_listener_settings, plan_listener_settings, plan_tls_update
    from config import ConfigError
    from config.describe import DynamicConfigError

    if effective_cfg is static_cfg:
        return
    try:
        plan = plan_tls_update(listeners, static_cfg, effective_cfg, check_compatible=False)
    except (ConfigError, DynamicConfigError) as exc:
        log.error("the dynamic TLS settings do not load (%s); the listeners serve their configured keystores", exc)
        plan = []
    for lst, context, certificate in plan:
        lst.use_tls(context, certificate)
        log.info("listener %s serves the keystore from the dynamic broker configs", lst.name)
    try:
        apply_listener_settings(plan_listener_settings(listeners, effective_cfg))
    except ConfigError as exc:
        log.error("the dynamic listener settings do not load (%s); the configured ones apply", exc)


def _elr_safety_configs(lm, static_cfg) -> None:
    """Eligible leader replicas (KIP-966) are on in a Kafka 4.1+ cluster: its controller
    writes a cluster-level ``min.insync.replicas`` (the static value) when there is none,
    and removes per-broker ones, before serving (config.describe.elr_safety_configs).
    Stored like any dynamic broker config, so it is written once."""
    from config import ConfigError
    from config.describe import elr_safety_configs

    if lm.dynamic_broker_configs_ignored:
        log.warning("the stored dynamic broker configs did not load: the cluster-level min.insync.replicas "
                    "is not written, so that the file stays as it is")
        return
    per_broker, default = lm.dynamic_broker_configs()
    change = elr_safety_configs(static_cfg.min_insync_replicas, per_broker, default)
    if change is None:
        return
    try:
        lm.set_dynamic_broker_configs(per_broker=change[0], default=change[1])
    except ConfigError as exc:  # the configs as they are keep serving
        log.error("the cluster-level min.insync.replicas could not be written: %s", exc)
        return
    log.info("cluster-level min.insync.replicas=%s (eligible leader replicas, KIP-966)",
             change[1]["min.insync.replicas"])


class BrokerServer:
    """The running broker. Usable from tests in-process as well as from ``run``."""

    def __init__(self, config, clock=None, settle_heap: bool = False) -> None:
        """``settle_heap``: the broker process's own (``serve``): see settle_heap()."""
        from storage.clock import SystemClock
        from storage.log_manager import LogManager

        self.settle_heap = settle_heap
        self._settled_logs: int | None = None  # LogManager.logs_opened at the last settle_heap()
        self.config = config
        self.clock = clock or SystemClock()
        self.log_manager = LogManager(config, self.clock)
        self.server: asyncio.AbstractServer | None = None
        self.dispatcher: Dispatcher | None = None
        self._tasks: list[asyncio.Task] = []
        self._stopped = asyncio.Event()
        self._stopping = False

    async def start(self) -> None:
        """Start everything; a failure stops what was started and raises StartupError
        with one line for the operator (the cause is logged at DEBUG)."""
        from config import ConfigError
        from storage.errors import LogDirError

        try:
            await self._start()
        except StartupError:
            await self._abort_start()
            raise
        except (LogDirError, ConfigError) as exc:  # ConfigError: a listener's TLS files or JAAS text
            await self._abort_start()
            raise StartupError(str(exc)) from exc
        except BaseException:
            await self._abort_start()
            raise

    async def _abort_start(self) -> None:
        for task in self._tasks:
            task.cancel()
        for server in getattr(self, "servers", []):
            server.close()
        cleaner = getattr(self, "cleaner", None)
        if cleaner is not None:
            cleaner.shutdown()
        ctx = getattr(self, "_ctx", None)
        if ctx is not None:
            ctx.close()
        if self.log_manager._started:
            try:
                self.log_manager.shutdown()
            except Exception:  # pragma: no cover - already failing
                log.debug("closing the logs after a failed start", exc_info=True)
        else:
            self.log_manager.unlock_dirs()

    async def _bind(self, lst, loop):
        try:
            if lst.tls:  # handshakes run by TlsServer: failures logged, the current keystore used
                return await TlsServer.start(self.dispatcher, lst, lst.host, lst.port, backlog=1024)
            return await loop.create_server(
                lambda lst=lst: KafkaConnection(self.dispatcher, lst),
                host=lst.host,
                port=lst.port,
                reuse_address=True,
                backlog=1024,
            )
        except OSError as exc:
            why = {errno.EADDRINUSE: "the address is already in use (another broker or program holds it)",
                   errno.EACCES: "permission denied (ports below 1024 need privileges)",
                   errno.EADDRNOTAVAIL: "the address is not one of this machine's"}.get(exc.errno, exc.strerror)
            raise StartupError(
                f"cannot listen on {lst.host or '0.0.0.0'}:{lst.port} for listener {lst.name}: {why}; "
                f"change it in `listeners`") from exc

    async def _start(self) -> None:
        cfg = self.config
        from broker.security.listeners import build_listeners
        from broker.quotas import ClientQuotas
        from storage.entity_configs import EntityConfigStore
        from storage.scram_credentials import ScramCredentialStore

        listeners = build_listeners(cfg)  # ConfigError (TLS files, JAAS) before anything binds
        host, port = listeners[0].host, listeners[0].port
        self.log_manager.lock_dirs()  # before anything is written to them
        cluster_id = load_or_create_cluster_id(list(cfg.log_dirs), cfg.node_id)
        metrics = None
        if (getattr(cfg, "metrics_port", 0) or 0) > 0:
            from broker.metrics import BrokerMetrics

            metrics = BrokerMetrics()
        loading_started = asyncio.get_running_loop().time()
        self.log_manager.startup(defer=True)  # clean partitions load after the listeners are up
        _elr_safety_configs(self.log_manager, cfg)
        _apply_dynamic_configs(listeners, cfg, self.log_manager.broker_config)
        if metrics is not None:
            metrics.recovery_seconds.set(asyncio.get_running_loop().time() - loading_started)
        loop = asyncio.get_running_loop()
        # The context needs the real port (the listener may ask for port 0).
        ctx = BrokerContext(
            config=self.log_manager.broker_config,  # with the stored dynamic configs
            log_manager=self.log_manager,
            clock=self.clock,
            node_id=cfg.node_id,
            host=host,
            port=port,
            cluster_id=cluster_id,
            producer_ids=ProducerIdManager(os.path.join(cfg.log_dirs[0], "chronolog-producer-id-block")),
            metrics=metrics,
            listeners=listeners,
            scram_store=ScramCredentialStore(cfg.log_dirs[0]),
            group_configs=EntityConfigStore(cfg.log_dirs[0], "group-configs"),
            client_quotas=ClientQuotas(EntityConfigStore(cfg.log_dirs[0], "client-quotas"),
                                       cfg.quota_window_num, cfg.quota_window_size_seconds),
        )
        if cfg.authorizer_class_name:
            from broker.security.authorizer import Authorizer
            from storage.acl_store import AclStore

            ctx.authorizer = Authorizer(AclStore(cfg.log_dirs[0]), cfg.super_users,
                                        cfg.allow_everyone_if_no_acl_found, metrics)
        self.dispatcher = Dispatcher(ctx)
        # group coordinator: replay __consumer_offsets before the first client connects
        from broker.coordinator.service import start_group_coordinator

        ctx.group_coordinator = start_group_coordinator(ctx)
        self._tasks.append(asyncio.ensure_future(self._periodic(
            "offsets expiration", cfg.offsets_retention_check_interval_ms, ctx.group_coordinator.expire_offsets)))
        # share groups (KIP-932): replay __share_group_state; acquisition locks expire on a 100 ms tick
        from broker.share.service import start_share_groups

        shares = start_share_groups(ctx, ctx.group_coordinator)
        self._tasks.append(asyncio.ensure_future(self._periodic("share lock expiry", 100, shares.expire_locks)))
        # transaction coordinator: replay __transaction_state, finish prepared transactions
        from broker.coordinator.txn_service import start_transaction_coordinator

        ctx.txn_coordinator = start_transaction_coordinator(ctx)
        self._tasks += [
            asyncio.ensure_future(self._periodic(
                "timed-out transaction abort", cfg.transaction_abort_timed_out_transaction_cleanup_interval_ms,
                ctx.txn_coordinator.abort_timed_out)),
            asyncio.ensure_future(self._periodic(
                "transactional id expiration", cfg.transaction_remove_expired_transaction_cleanup_interval_ms,
                ctx.txn_coordinator.expire_transactional_ids)),
        ]
        # log cleaner: compacts cleanup.policy=compact topics in worker processes; the
        # swap of a finished clean runs here on the loop (storage.log_cleaner)
        from storage.log_cleaner import LogCleaner

        self.cleaner = LogCleaner(self.log_manager, self.log_manager.broker_config, self.clock)
        ctx.log_cleaner = self.cleaner
        if metrics is not None:
            metrics.attach_cleaner(self.cleaner)
        self._tasks.append(asyncio.ensure_future(self._periodic("log cleaner", _CLEANER_TICK_MS, self.cleaner.tick)))
        # partitions copied to a log dir on another filesystem (AlterReplicaLogDirs): the
        # copy runs on a thread, each step and the switch-over here (storage.partition_move)
        self._tasks.append(asyncio.ensure_future(self._periodic("log dir moves", 200, self.log_manager.advance_moves)))
        self.servers = []
        self._ctx = ctx
        for lst in listeners:
            server = await self._bind(lst, loop)
            self.servers.append(server)
            lst.port = server.sockets[0].getsockname()[1]
        self.server = self.servers[0]
        ctx.host, ctx.port = listeners[0].endpoint()
        self.context = ctx
        self._tasks.append(asyncio.ensure_future(self._load_deferred_logs()))
        self._tasks.append(asyncio.ensure_future(_prepare_codec()))
        self._tasks.append(asyncio.ensure_future(self._flush_loop()))
        lm = self.log_manager
        cleanup_logs = lm.cleanup_logs
        if metrics is not None:
            from broker.metrics import MetricsServer

            def cleanup_logs(lm=lm, counter=metrics.retention_segments_deleted):
                deleted = lm.cleanup_logs()
                if deleted:
                    counter.inc(deleted)
                return deleted

            metrics.attach_state(lm, lambda: ctx.group_coordinator, self.clock)
            metrics.attach_share(lm, lambda: None if ctx.share_partitions is None else (ctx.share_groups,
                                                                                           ctx.share_partitions))
            self._tasks.append(asyncio.ensure_future(watch_loop_lag(metrics)))
            self.metrics_server = MetricsServer(metrics, host, cfg.metrics_port)
            if await self.metrics_server.start():
                # cancelled (and so closed) with the other tasks by stop()
                self._tasks.append(asyncio.ensure_future(self.metrics_server.serve_until_cancelled()))
        idle_ms = getattr(cfg, "connections_max_idle_ms", -1)
        if idle_ms and idle_ms > 0:
            self._tasks.append(asyncio.ensure_future(self._periodic(
                "idle connections", max(100, min(idle_ms // 4, 30000)), lambda: self._close_idle(idle_ms))))
        self._tasks += [
            asyncio.ensure_future(self._periodic("log retention", cfg.log_retention_check_interval_ms,
                                                 cleanup_logs)),
            asyncio.ensure_future(self._periodic("deleted segment removal", _DELETE_TICK_MS,
                                                 lm.delete_due_files)),
            asyncio.ensure_future(self._periodic("recovery point checkpoint",
                                                 cfg.log_flush_offset_checkpoint_interval_ms,
                                                 lm.checkpoint_recovery_points)),
            asyncio.ensure_future(self._periodic("log start offset checkpoint",
                                                 cfg.log_flush_start_offset_checkpoint_interval_ms,
                                                 lm.checkpoint_log_start_offsets)),
        ]
        from protocol import _codegen, record_walk
        from storage import cleaner as _cleaner_mod
        from storage import log as _log_mod

        if not record_walk.COMPILED:
            log.warning("the compiled record walker (protocol/_recwalk.c) is not built: every produced "
                        "record is checked in pure Python, ~250x slower; reinstall with a C compiler "
                        "(pip install .) to build it")
        if not _codegen.FAST_CODEC:
            log.warning("the compiled message codec (protocol/_fastwire.c) is not built: requests are decoded "
                        "and responses encoded by the generated Python code, 3-10x slower (a one-record produce "
                        "costs about 15% more CPU); reinstall with a C compiler (pip install .) to build it")
        if not _log_mod.APPEND_COMPILED:
            log.warning("the compiled common append (storage/_append.c) is not built: every produced batch "
                        "is appended by the Python path, about 10,000 instructions more each; reinstall with a "
                        "C compiler (pip install .) to build it")
        from broker.handlers import produce as _produce_handler

        if _produce_handler.RUN is None:
            log.warning("the compiled produce loop (broker/_produce.c) is not built or cannot run: every "
                        "partition of a produce request goes through the Python path, about 7,000 instructions "
                        "more each; reinstall with a C compiler (pip install .) to build it")
        from broker import metrics as _metrics_mod

        if metrics is not None and not _metrics_mod.COMPILED:
            log.warning("the compiled request metrics (broker/_metrics.c) are not built: each request's metrics "
                        "are counted by the Python path, about 10,000 instructions more for a produce; reinstall "
                        "with a C compiler (pip install .) to build them")
        if not _cleaner_mod.COMPILED:
            log.warning("the compiled log cleaner loops (storage/_cleaner.c) are not built: compaction runs "
                        "in pure Python, far slower; reinstall with a C compiler (pip install .) to build them")
        log.info(
            "Chronolog listening on %s (node.id=%d, cluster.id=%s, log.dirs=%s)",
            ", ".join(f"{lst.host}:{lst.port} [{lst.name}/{lst.protocol}]" for lst in listeners),
            cfg.node_id,
            cluster_id,
            ",".join(cfg.log_dirs),
        )

    def _close_idle(self, idle_ms: int) -> None:
        """connections.max.idle.ms: close connections with no bytes read or written for
        that long (never one with a request in flight), as Kafka's Selector does."""
        import time

        cutoff = time.monotonic() - idle_ms / 1000.0
        for conn in list(self.dispatcher.connections):
            if not conn._busy and not conn._closed and conn.last_active < cutoff:
                log.debug("closing connection from %s: idle for more than connections.max.idle.ms=%d",
                          conn._peer, idle_ms)
                conn.close()

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

    async def _load_deferred_logs(self) -> None:
        """Load the partitions left for later (LogManager.startup(defer=True), and
        create_topic(defer=True) for a large topic), a slice per loop turn while there are
        some; a request for one of them loads it at once (LogManager.get_log). Woken by
        every addition of partitions, it also settles the heap as it grows."""
        lm = self.log_manager
        more = asyncio.Event()
        lm.on_new_partitions.append(more.set)
        while True:
            more.clear()
            while lm.load_pending(_DEFERRED_LOAD_SLICE, _DEFERRED_LOAD_BUDGET_S):
                if self._settled_logs is not None:  # a large topic being made (not start-up's load)
                    self._settle_if_grown()
                await asyncio.sleep(0)
            self._settle_if_grown()  # at the first drain: started and every partition loaded
            await more.wait()

    def _settle_if_grown(self) -> None:
        """settle_heap() in the broker process: once started and loaded, then whenever
        SETTLE_AGAIN_AFTER more partitions have been opened or made (each full collection
        while a large topic is made then walks at most that many partitions' objects)."""
        if not self.settle_heap:
            return
        opened = self.log_manager.logs_opened
        if self._settled_logs is None or opened - self._settled_logs >= SETTLE_AGAIN_AFTER:
            self._settled_logs = opened
            settle_heap()

    async def _flush_loop(self) -> None:
        interval_ms = getattr(self.config, "log_flush_scheduler_interval_ms", None)
        if not interval_ms or interval_ms <= 0 or interval_ms >= 2**62:
            # Kafka's default (Long.MAX_VALUE) never runs the flusher; keep a slow
            # tick for flush.ms topics anyway.
            interval_ms = 1000
        while True:
            await asyncio.sleep(interval_ms / 1000.0)
            try:
                await flush_off_the_loop(self.log_manager)
            except Exception:
                log.exception("periodic flush failed")

    async def stop(self, timeout_ms: int | None = None) -> None:
        """Controlled shutdown, bounded by ``controlled.shutdown.timeout.ms``:

        1. stop accepting connections and stop reading new requests on the open ones;
        2. answer what is in flight: parked Fetch long polls are woken and answered with
           what they have (``ctx.shutting_down`` makes Fetch stop waiting), parked
           JoinGroup/SyncGroup get COORDINATOR_NOT_AVAILABLE; this phase gets at most
           half of the timeout, then the connections still busy are closed unanswered;
        3. close the connections (queued responses are written first, at most 1 s);
        4. flush and close every log, write both checkpoints and the clean-shutdown
           marker (``LogManager.shutdown``).

        A second call waits for the first. ``serve`` adds a watchdog that ends the
        process with exit code 1 (and no clean-shutdown marker) if all this takes longer
        than the timeout."""
        if self._stopping:
            await self._stopped.wait()
            return
        self._stopping = True
        if timeout_ms is None:
            timeout_ms = getattr(self.config, "controlled_shutdown_timeout_ms", 8000)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        drain_deadline = t0 + timeout_ms / 2000.0
        ctx = getattr(self, "context", None)
        for server in getattr(self, "servers", []):
            server.close()
        for task in list(self.dispatcher.handshakes) if self.dispatcher is not None else []:
            task.cancel()  # TLS handshakes not finished: their connections close
        conns = list(self.dispatcher.connections) if self.dispatcher is not None else []
        for conn in conns:
            transport = conn._transport
            if transport is not None and not transport.is_closing():
                try:
                    transport.pause_reading()
                except Exception:  # pragma: no cover - already closing
                    pass
        if ctx is not None:
            ctx.shutting_down = True
        coordinator = getattr(ctx, "group_coordinator", None)
        if coordinator is not None:
            try:
                coordinator.shutdown()  # completes parked JoinGroup/SyncGroup requests
            except Exception:
                log.exception("group coordinator shutdown failed")
        if ctx is not None:
            for topic, partition in list(ctx.fetch_waiters):
                ctx.notify_append(topic, partition)  # parked fetches answer now
        in_flight = sum(1 for c in conns if c._busy and not c._closed)
        if in_flight:
            log.info("waiting for %d in-flight request(s)", in_flight)
        while loop.time() < drain_deadline and any(c._busy and not c._closed for c in conns):
            await asyncio.sleep(0.01)
        busy = sum(1 for c in conns if c._busy and not c._closed)
        if busy:
            log.warning("%d request(s) still in flight after %.1f s; closing their connections",
                        busy, loop.time() - t0)
        for task in self._tasks:
            task.cancel()
        for conn in conns:
            conn.close()
        close_deadline = min(loop.time() + 1.0, t0 + timeout_ms / 1000.0 * 0.75)
        while loop.time() < close_deadline and any(
                c._transport is not None and c._transport.get_write_buffer_size() for c in conns):
            await asyncio.sleep(0.01)
        for conn in conns:
            if conn._transport is not None and conn._transport.get_write_buffer_size():
                conn._transport.abort()  # a client that does not read its responses
        for server in getattr(self, "servers", []):
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=max(0.1, close_deadline - loop.time()))
            except asyncio.TimeoutError:  # pragma: no cover
                log.warning("the listener did not close in time")
        if ctx is not None:
            ctx.close()
        cleaner = getattr(self, "cleaner", None)
        if cleaner is not None:
            try:
                cleaner.shutdown()  # workers stopped before the logs close
            except Exception:
                log.exception("log cleaner shutdown failed")
        try:
            self.log_manager.shutdown()
        except Exception as exc:  # each failure logged by the log manager
            raise ShutdownError(f"closing the logs failed ({type(exc).__name__}: {exc})") from exc
        else:
            log.info("Chronolog stopped (shutdown took %.0f ms)", (loop.time() - t0) * 1000)
        finally:
            self._stopped.set()


_STOP_SIGNALS = {signal.SIGTERM, signal.SIGINT}


async def watch_loop_lag(metrics, tick_s: float = 0.1, warn_s: float = 1.0) -> None:
    """Every ``tick_s``, how late the event loop ran a timer due then, into
    chronolog_event_loop_lag_seconds: how long every request and timer waited at that
    moment (one piece of work holding the loop, or the process not scheduled). A lag of
    ``warn_s`` or more is also logged, one line."""
    loop = asyncio.get_running_loop()
    while True:
        due = loop.time() + tick_s
        await asyncio.sleep(tick_s)
        lag = max(0.0, loop.time() - due)
        metrics.loop_lag.observe(lag)
        if lag >= warn_s:
            log.warning("the event loop ran %.0f ms late: every request and timer waited that long (one piece "
                        "of work holding the loop, or the process not scheduled)", lag * 1000)


def settle_heap() -> int:
    """Move every object the cyclic garbage collector tracks now out of its reach
    (``gc.freeze``), after a collection of the young generations; returns how many.
    Called when the broker has started and its partitions are loaded, and again each
    time SETTLE_AGAIN_AFTER more partitions have been opened or made (a large topic made
    in the background, or many small ones): what is there then is what the broker is
    made of (modules, schemas, codec plans, every partition's log, segments and indexes)
    and lives until its topic is deleted. Without
    this, each full collection walked all of it on the event loop: 30-45 ms for a broker
    of a few partitions, 50-150 ms with 10,000 made at run time (measured), whenever
    enough objects had outlived the younger generations. Objects made later are
    collected as before. A frozen object that later becomes garbage is still freed by
    reference counting (a deleted topic's logs, segments and indexes are: no cycles);
    one left in a cycle is kept. What else is alive at that moment is frozen too:
    connections, groups, producers' states. Measured with the collector off, a broker
    serving producers (plain, idempotent, transactional), consumers of both group
    protocols, share consumers and commits left no cyclic garbage of theirs (only the json
    module's encoder closures, a few dozen objects per file written), so those are freed
    by reference counting as well. What can be kept is the cyclic garbage of that one
    moment: bounded, at most once per SETTLE_AGAIN_AFTER partitions made."""
    gc.collect(1)
    before = gc.get_freeze_count()
    gc.freeze()
    moved = gc.get_freeze_count() - before
    log.info("heap settled: %d objects out of the cyclic collector's reach (%d in all)", moved,
              gc.get_freeze_count())
    return moved


async def serve(config) -> None:
    server = BrokerServer(config, settle_heap=True)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    timeout_ms = getattr(config, "controlled_shutdown_timeout_ms", 8000)

    def on_signal(sig: signal.Signals) -> None:
        if stop.is_set():
            log.info("%s received while shutting down; still stopping (bounded by "
                     "controlled.shutdown.timeout.ms=%d)", sig.name, timeout_ms)
            return
        log.info("%s received: shutting down", sig.name)
        stop.set()

    # Handlers first: a signal that arrives while starting (even right after the
    # "listening" line) stops the broker cleanly once it has started.
    if _STOP_SIGNALS <= signal.pthread_sigmask(signal.SIG_BLOCK, []):
        # run() blocked the stop signals before any thread existed, so every thread has
        # them blocked and no thread ever runs their default action: one thread takes
        # them with sigwait and hands them to the loop. A SIGTERM arriving after the
        # loop is gone (the process is exiting) is consumed and dropped, so it cannot
        # kill the process with a signal status. (Removing loop handlers at the end left
        # a moment with the default action in place: a repeated SIGTERM landing there
        # ended a clean shutdown with exit status -15.)
        queued = threading.Event()  # a signal handed over and not yet seen by the loop

        def deliver(sig: signal.Signals) -> None:
            queued.clear()
            on_signal(sig)

        def take_signals() -> None:
            while True:
                sig = signal.Signals(signal.sigwait(_STOP_SIGNALS))
                if queued.is_set():
                    continue  # a flood of signals queues one callback, not one each
                queued.set()
                try:
                    loop.call_soon_threadsafe(deliver, sig)
                except RuntimeError:  # the loop is closed: the process is exiting
                    pass

        threading.Thread(target=take_signals, name="chronolog-signals", daemon=True).start()
        loop_handlers = False
    else:  # serve() run without run(): the loop's own handlers
        loop_handlers = True
        for sig in _STOP_SIGNALS:
            try:
                loop.add_signal_handler(sig, on_signal, sig)
            except NotImplementedError:  # pragma: no cover
                pass
    try:
        await server.start()
    except StartupError as exc:
        log.error("Chronolog could not start: %s", exc)
        log.debug("start-up failure", exc_info=True)
        raise
    await stop.wait()
    log.info("shutting down")
    watchdog = threading.Timer(timeout_ms / 1000.0, _shutdown_overdue, args=(timeout_ms,))
    watchdog.daemon = True
    watchdog.start()
    try:
        await server.stop(timeout_ms)
    except ShutdownError as exc:
        log.error("Chronolog stopped with errors: %s; the log dirs concerned have no clean-shutdown marker "
                  "and are recovered at the next start", exc)
        raise
    finally:
        watchdog.cancel()
        if loop_handlers:
            # a late SIGTERM/SIGINT must not kill the exiting process with a signal status
            for sig in _STOP_SIGNALS:
                try:
                    loop.remove_signal_handler(sig)
                    signal.signal(sig, signal.SIG_IGN)
                except (NotImplementedError, ValueError, RuntimeError):  # pragma: no cover
                    pass


def _shutdown_overdue(timeout_ms: int) -> None:
    """Watchdog thread: the controlled shutdown overran its bound. Exit 1 at once; the
    clean-shutdown marker is written last, so the next start recovers what it must."""
    log.error("shutdown did not finish within controlled.shutdown.timeout.ms=%d; exiting with code 1",
              timeout_ms)
    for h in logging.getLogger().handlers:
        try:
            h.flush()
        except Exception:  # pragma: no cover
            pass
    os._exit(1)


def run(config) -> int:
    # Before any thread exists (threads inherit the mask): see serve().
    signal.pthread_sigmask(signal.SIG_BLOCK, _STOP_SIGNALS)
    from storage.open_files import raise_nofile_limit

    before, after = raise_nofile_limit()  # as the JVM does for Kafka (MaxFDLimit)
    if after != before:
        log.info("open-files limit raised from %d to %d (the hard limit)", before, after)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a hard dependency
        uvloop = None
    if uvloop is not None:
        uvloop.run(serve(config))
    else:  # pragma: no cover
        asyncio.run(serve(config))
    return 0
