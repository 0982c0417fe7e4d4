"""``__transaction_state``: where the transaction coordinator keeps every transactional
id's state (its record formats in :mod:`broker.coordinator.txn_records`).

The topic is created on first write with ``transaction.state.log.num.partitions``
partitions (default 50), ``cleanup.policy=compact`` and
``transaction.state.log.segment.bytes``; an id's records go to partition
``Utils.abs(transactionalId.hashCode()) % partitions`` as Kafka places them. Each state
change is one v2 batch (CreateTime = now) appended before the coordinator answers,
with the durability of every other partition (the flush policy; the page cache survives
a killed process). ``replay`` feeds every record
to the coordinator in offset order at start-up (the last record of an id wins, a null
value removes it).
"""

from __future__ import annotations

import logging

from protocol import records as rec

from broker.coordinator import records as fmt
from broker.coordinator import txn_records as txf
from broker.coordinator.store import internal_topic_partitions, iter_topic_batches

log = logging.getLogger("chronolog.coordinator.txn_store")

TXN_STATE_TOPIC = "__transaction_state"
DEFAULT_PARTITIONS = 50


class TransactionStateStore:
    def __init__(self, log_manager, clock, num_partitions: int = DEFAULT_PARTITIONS,
                 segment_bytes: int = 104857600):
        self.lm = log_manager
        self.clock = clock
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes

    def _partitions(self) -> int:
        return internal_topic_partitions(self.lm, TXN_STATE_TOPIC, self.num_partitions, self.segment_bytes)

    def partition_for(self, transactional_id: str) -> int:
        return fmt.partition_for(transactional_id, self._partitions())

    def write(self, transactional_id: str, value: txf.TxnLogValue | None) -> None:
        partition = self.partition_for(transactional_id)
        now = int(self.clock.time_ms())
        batch = bytearray(rec.build_batch([(now, txf.key(transactional_id),
                                            None if value is None else txf.value(value))]))
        self.lm.get_log(TXN_STATE_TOPIC, partition).append(batch, in_place=True)


def replay(log_manager, coordinator) -> int:
    """Feed every record of ``__transaction_state`` to ``coordinator.load``; returns the
    number of records read."""
    count = 0
    for p, header, records in iter_topic_batches(log_manager, TXN_STATE_TOPIC):
        if header.is_control:
            continue
        for r in records:
            if r.key is None:
                continue
            count += 1
            try:
                tid = txf.decode_key(r.key)
                coordinator.load(tid, None if r.value is None else txf.decode_value(r.value))
            except (fmt.RecordFormatError, ValueError) as exc:
                log.warning("%s-%d offset %d: skipping unreadable record: %s", TXN_STATE_TOPIC, p, r.offset, exc)
    return count
