"""Wiring of the group coordinator into the running broker (called by broker.server)."""

from __future__ import annotations

import logging
import time

from broker.coordinator.group import GroupCoordinator
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

    coord = GroupCoordinator(
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
