"""Wiring of the group coordinator into the running broker (called by broker.server)."""

from __future__ import annotations

import logging
import time

from broker.coordinator.consumer_group import assignor_names
from broker.coordinator.group import GroupCoordinator
from storage.log_manager import INTERNAL_TOPICS
from broker.coordinator.store import DEFAULT_PARTITIONS, OffsetsTopicStore, replay

log = logging.getLogger("chronolog.coordinator")


def start_group_coordinator(ctx) -> GroupCoordinator:
    """Build the coordinator, replay ``__consumer_offsets`` and start the session timers
    of the members loaded from it. Runs inside the event loop, before the listener."""
    cfg = ctx.config
    lm = ctx.log_manager
    partitions = int(getattr(cfg, "offsets_topic_num_partitions", None) or DEFAULT_PARTITIONS)
    store = OffsetsTopicStore(lm, ctx.clock, partitions, notify=ctx.notify_append,
                              segment_bytes=int(cfg.offsets_topic_segment_bytes))

    def topic_partitions(topic: str):
        info = lm.get_topic(topic)
        return None if info is None else info.num_partitions

    def topic_metadata(topic: str):
        info = lm.get_topic(topic)
        return None if info is None else (info.topic_id, info.num_partitions)

    def group_config(group_id: str):
        from config.group_config import effective_group_config

        store = getattr(ctx, "group_configs", None)
        return effective_group_config(cfg, store.get(group_id) if store is not None else {})

    coord = GroupCoordinator(
        consumer_groups=dict(
            topic_metadata=topic_metadata,
            topic_names=lambda: [t for t in lm.topics() if t not in INTERNAL_TOPICS],
            topics_version=lm.topics_version,
            assignors=assignor_names(getattr(cfg, "group_consumer_assignors", None) or ["uniform", "range"]),
            session_timeout_ms=int(cfg.group_consumer_session_timeout_ms),
            heartbeat_interval_ms=int(cfg.group_consumer_heartbeat_interval_ms),
            max_size=int(cfg.group_consumer_max_size),
            migration_policy=str(cfg.group_consumer_migration_policy),
            group_config=group_config),
        clock=ctx.clock,
        store=store,
        initial_rebalance_delay_ms=int(getattr(cfg, "group_initial_rebalance_delay_ms", 3000)),
        min_session_timeout_ms=int(getattr(cfg, "group_min_session_timeout_ms", 6000)),
        max_session_timeout_ms=int(getattr(cfg, "group_max_session_timeout_ms", 1800000)),
        group_max_size=int(getattr(cfg, "group_max_size", 2**31 - 1)),
        offsets_retention_ms=int(getattr(cfg, "offsets_retention_minutes", 7 * 24 * 60)) * 60 * 1000,
        topic_partitions=topic_partitions,
    )
    started = time.perf_counter()
    count = replay(lm, coord)
    coord.start_loaded_timers()
    if count:
        log.info("loaded %d group(s) from %d record(s) of __consumer_offsets in %.3f s",
                 len(coord.groups), count, time.perf_counter() - started)
    return coord
