"""Wiring of share groups (KIP-932) into the running broker (called by broker.server
after the group coordinator is loaded): the membership side joins the GroupCoordinator
(``coord.share``, one namespace for every kind of group), the share-partitions are
loaded from ``__share_group_state``, and both are put on the context for the handlers.
"""

from __future__ import annotations

import logging
import time

from broker.share.group import ShareGroups
from broker.share.partitions import SharePartitionManager
from broker.share.state_store import ShareStateStore, replay

log = logging.getLogger("chronolog.share")


def start_share_groups(ctx, coord) -> SharePartitionManager:
    cfg = ctx.config
    lm = ctx.log_manager

    def group_config(group_id: str):
        from config.group_config import effective_group_config

        store = getattr(ctx, "group_configs", None)
        return effective_group_config(ctx.config, store.get(group_id) if store is not None else {})

    def topic_metadata(topic: str):
        info = lm.get_topic(topic)
        return None if info is None else (info.topic_id, info.num_partitions)

    store = ShareStateStore(lm, ctx.clock, int(cfg.share_coordinator_state_topic_num_partitions),
                            int(cfg.share_coordinator_state_topic_segment_bytes), notify=ctx.notify_append)
    groups = ShareGroups(coord, topic_metadata=topic_metadata, group_config=group_config,
                         max_size=int(cfg.group_share_max_size))
    mgr = SharePartitionManager(lm, ctx.clock, store, group_config,
                                max_sessions=int(cfg.group_share_max_share_sessions), notify=ctx.notify_append,
                                ensure_group=groups.ensure_group)
    groups.on_assigned = mgr.initialize
    groups.on_member_gone = mgr.member_gone
    groups.on_deleted = mgr.delete
    coord.share = groups
    started = time.perf_counter()
    mgr.load(replay(lm))
    if mgr.partitions:
        log.info("share state loaded in %.3f s", time.perf_counter() - started)
    ctx.share_groups = groups
    ctx.share_partitions = mgr
    return mgr
