"""State shared by the request handlers: config, storage, identity, fetch waiters."""

from __future__ import annotations

import asyncio
import logging
import os
import uuid
from dataclasses import dataclass, field

from broker.errors import StartupError
from broker.security.authorizer import TOPIC as _TOPIC
from broker.security.authorizer import WRITE as _WRITE
from protocol import kafka_uuid

log = logging.getLogger("chronolog.broker")


@dataclass
class BrokerContext:
    config: object
    log_manager: object
    clock: object
    node_id: int
    host: str
    port: int
    cluster_id: str
    producer_ids: object = None
    # broker.coordinator.GroupCoordinator once __consumer_offsets is loaded (None before)
    group_coordinator: object = None
    # share groups (KIP-932): broker.share.group.ShareGroups and
    # broker.share.partitions.SharePartitionManager once __share_group_state is loaded
    share_groups: object = None
    share_partitions: object = None
    # broker.coordinator.transaction.TransactionCoordinator once __transaction_state is loaded
    txn_coordinator: object = None
    # broker.metrics.BrokerMetrics when metrics.port > 0, else None (hooks are no-ops)
    metrics: object = None
    # (topic, partition) -> futures of Fetch requests parked until data arrives
    fetch_waiters: dict = field(default_factory=dict)
    # broker.security.listeners.Listener per configured listener (bound ports filled in)
    listeners: list = field(default_factory=list)
    # storage.scram_credentials.ScramCredentialStore (None in bare in-process contexts)
    scram_store: object = None
    # storage.entity_configs.EntityConfigStore of the GROUP config resources
    group_configs: object = None
    # broker.quotas.ClientQuotas: client quotas (AlterClientQuotas) and their throttling
    client_quotas: object = None
    # broker.security.authorizer.Authorizer when authorizer.class.name is set, else None
    authorizer: object = None
    # storage.log_cleaner.LogCleaner (compaction of cleanup.policy=compact topics)
    log_cleaner: object = None
    # worker threads for validation work too long for the event loop (created on first use)
    _offload_pool: object = None
    # components with ``reconfigure(cfg)`` (Kafka's Reconfigurable): told of every dynamic
    # broker config change after it is stored
    reconfigurables: list = field(default_factory=list)

    def offload(self, fn) -> asyncio.Future:
        """Run ``fn()`` in the validation thread pool; await the returned future.  Used
        for the rest of a long record walk (decompression releases the GIL), so the event
        loop keeps serving other connections."""
        if self._offload_pool is None:
            from concurrent.futures import ThreadPoolExecutor

            self._offload_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="chronolog-validate")
        return asyncio.get_running_loop().run_in_executor(self._offload_pool, fn)

    def close(self) -> None:
        """Stop the validation threads (work still queued is dropped: its connections are
        being closed)."""
        pool, self._offload_pool = self._offload_pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)

    def authorize(self, session, op: int, rtype: int, name: str, api: str = "") -> bool:
        """Whether the session's principal may do ``op`` on the resource; always True
        without an authorizer (or without a session: in-process callers)."""
        if self.authorizer is None or session is None:
            return True
        return self.authorizer.authorize(session, op, rtype, name, api)

    def unauthorized(self, session, op: int, rtype: int, names, api: str = "") -> frozenset:
        """Those of ``names`` (each asked once) the session may not do ``op`` on: the
        per-topic check of Produce, Fetch, ListOffsets, OffsetCommit and the like."""
        if self.authorizer is None or session is None:
            return frozenset()
        return frozenset(n for n in set(names) if not self.authorizer.authorize(session, op, rtype, n, api))

    def writable_topics(self, session):
        """None when Produce asks no authorization (no authorizer, or no session), else
        the set of topics the authorizer allowed this session to write
        (Authorizer.allowed_names): what the compiled produce path reads instead of
        asking per topic. A topic not in it is asked about through ``unauthorized``,
        which adds it when allowed."""
        if self.authorizer is None or session is None:
            return None
        return self.authorizer.allowed_names(session, _WRITE, _TOPIC)

    def authorized_ops(self, session, rtype: int, name: str) -> int:
        """Kafka's authorized-operations bitfield for the resource."""
        from broker.security.authorizer import SUPPORTED_OPS

        if self.authorizer is None or session is None:
            return sum(1 << op for op in SUPPORTED_OPS.get(rtype, ()))
        return self.authorizer.authorized_ops(session, rtype, name)

    def apply_broker_config(self, cfg, tls_plan=(), listener_plan=()) -> None:
        """A dynamic broker config change, already validated and stored, reaching what
        runs: the handlers' config, the listeners (TLS contexts, advertised endpoints,
        SASL settings) and every registered Reconfigurable (connection limits)."""
        from broker.security.listeners import apply_listener_settings
        from broker.security.tls import subject_dn

        self.config = cfg
        for lst, context, certificate in tls_plan:
            lst.use_tls(context, certificate)
            log.info("listener %s: new TLS connections now use the keystore %s (subject %s)", lst.name,
                     cfg.listener_value(lst.name, "ssl.keystore.location") or "(inline)", subject_dn(certificate))
        apply_listener_settings(listener_plan)
        for r in self.reconfigurables:
            r.reconfigure(cfg)

    def endpoint(self, session=None) -> tuple[str, int]:
        """(host, port) to advertise to a client: its listener's, else the first one's."""
        if session is not None and session.listener is not None and session.listener.advertised_host:
            return session.listener.endpoint()
        return self.host, self.port

    def notify_append(self, topic: str, partition: int) -> None:
        """Wake what waits for an append to the partition: a waiter is a future (the
        ``appended`` of ShareFetch) or anything with ``done()`` and ``set_result()``
        (Fetch's ``_ParkedFetch``)."""
        waiters = self.fetch_waiters.pop((topic, partition), None)
        if waiters:
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    def wait_for_append(self, keys, fut: asyncio.Future) -> None:
        for key in keys:
            self.fetch_waiters.setdefault(key, set()).add(fut)

    def forget_waiter(self, keys, fut: asyncio.Future) -> None:
        for key in keys:
            waiters = self.fetch_waiters.get(key)
            if waiters is not None:
                waiters.discard(fut)
                if not waiters:
                    del self.fetch_waiters[key]

    async def appended(self, keys, timeout_s: float) -> None:
        """Park until an append to (or another wake-up of) one of ``keys``
        ((topic, partition)), or ``timeout_s`` seconds: the long poll of Fetch and ShareFetch."""
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        timer = loop.call_later(timeout_s, lambda: fut.done() or fut.set_result(None))
        self.wait_for_append(keys, fut)
        try:
            await fut
        finally:
            timer.cancel()
            self.forget_waiter(keys, fut)


def load_or_create_cluster_id(log_dirs: list[str], node_id: int) -> str:
    """Kafka keeps ``meta.properties`` in every log dir with the cluster id and node id.
    Reuse it when present (and refuse a node id mismatch); create it on first start."""
    cluster_id = None
    for d in log_dirs:
        path = os.path.join(d, "meta.properties")
        if not os.path.exists(path):
            continue
        props = {}
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                line = line.strip()
                if not line or line.startswith("#") or "=" not in line:
                    continue
                k, v = line.split("=", 1)
                props[k.strip()] = v.strip()
        stored_node = props.get("node.id")
        if stored_node is not None and int(stored_node) != node_id:
            raise StartupError(
                f"log dir {d} belongs to node.id={stored_node} but this broker has node.id={node_id}"
            )
        if props.get("cluster.id"):
            if cluster_id is not None and props["cluster.id"] != cluster_id:
                raise StartupError(f"log dirs disagree on cluster.id ({cluster_id} vs {props['cluster.id']} in {d})")
            cluster_id = props["cluster.id"]
    if cluster_id is None:
        cluster_id = kafka_uuid.to_string(uuid.uuid4())
    for d in log_dirs:
        os.makedirs(d, exist_ok=True)
        path = os.path.join(d, "meta.properties")
        if os.path.exists(path):
            continue
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write("#Written by Chronolog\n")
            fh.write(f"cluster.id={cluster_id}\nnode.id={node_id}\nversion=1\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    return cluster_id
