"""Wiring of the transaction coordinator into the running broker (called by
broker.server after the group coordinator): replays ``__transaction_state``, finishes
the transactions a crash left in PrepareCommit/PrepareAbort, and writes markers through
the partitions' logs (``Log.append_end_txn_marker``), telling the group coordinator
when a marker reaches ``__consumer_offsets``."""

from __future__ import annotations

import logging
import time

from broker.coordinator.store import OFFSETS_TOPIC
from broker.coordinator.transaction import TransactionCoordinator
from broker.coordinator.txn_store import TransactionStateStore, replay

log = logging.getLogger("chronolog.coordinator.txn")


def write_marker(ctx, topic, partition, producer_id, producer_epoch, commit, coordinator_epoch):
    """One COMMIT/ABORT marker in one partition (the coordinator's, and WriteTxnMarkers');
    raises the storage errors of ``Log.append_end_txn_marker`` (unknown partition, an
    older producer or coordinator epoch). Parked fetches of the partition wake up (the
    last stable offset may have moved) and a marker in ``__consumer_offsets`` commits or
    drops the producer's pending transactional offsets."""
    lm = ctx.log_manager
    lm.get_log(topic, partition).append_end_txn_marker(producer_id, producer_epoch, commit, coordinator_epoch)
    ctx.notify_append(topic, partition)
    if topic == OFFSETS_TOPIC and ctx.group_coordinator is not None:
        info = lm.get_topic(OFFSETS_TOPIC)
        ctx.group_coordinator.complete_txn(producer_id, commit, partition,
                                           info.num_partitions if info is not None else None)


def start_transaction_coordinator(ctx) -> TransactionCoordinator:
    cfg = ctx.config
    lm = ctx.log_manager
    store = TransactionStateStore(lm, ctx.clock, int(cfg.transaction_state_log_num_partitions),
                                  int(cfg.transaction_state_log_segment_bytes))
    coord = TransactionCoordinator(
        clock=ctx.clock, store=store, allocate_producer_id=ctx.producer_ids.allocate,
        write_marker=lambda *a: write_marker(ctx, *a),
        max_timeout_ms=int(cfg.transaction_max_timeout_ms),
        id_expiration_ms=int(cfg.transactional_id_expiration_ms))
    started = time.perf_counter()
    count = replay(lm, coord)
    finished = coord.complete_loaded()
    if count:
        log.info("loaded %d transactional id(s) from %d record(s) of __transaction_state in %.3f s%s",
                 len(coord.txns), count, time.perf_counter() - started,
                 f"; completed {finished} transaction(s) left prepared" if finished else "")
    return coord
