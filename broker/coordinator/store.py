"""``__consumer_offsets``: where committed offsets and group metadata live on disk.

The topic is created on first write with ``offsets.topic.num.partitions`` partitions
(default 50), ``cleanup.policy=compact`` and ``offsets.topic.segment.bytes`` (default
100 MiB) as its ``segment.bytes``, as Kafka creates it (the log cleaner compacts it:
deleted groups and expired offsets are tombstones that go after ``delete.retention.ms``); a group's records go to partition
``Utils.abs(groupId.hashCode()) % partitions`` as Kafka places them.  Each write is one
v2 batch (CreateTime = now) appended through the LogManager, so the records share the
partitions' durability (flush policy, recovery).  ``replay`` reads every partition at
start-up and feeds the records to the coordinator in offset order: the last record of a
key wins and a null value deletes it.

Transactional offset commits (TxnOffsetCommit) are written as a transactional batch of
the committing producer (Kafka's AppendOrigin.COORDINATOR: no sequence checks), and the
transaction coordinator's COMMIT/ABORT marker follows in the same partition; on replay
such offsets wait for their producer's marker, as Kafka's loader does.

:func:`iter_topic_batches` is the reading loop shared with ``__transaction_state``
(:mod:`broker.coordinator.txn_store`).
"""

from __future__ import annotations

import logging

from protocol import records as rec

from broker.coordinator import consumer_records as cr
from broker.coordinator import records as fmt

log = logging.getLogger("chronolog.coordinator.store")

OFFSETS_TOPIC = "__consumer_offsets"
DEFAULT_PARTITIONS = 50
DEFAULT_SEGMENT_BYTES = 104857600


def internal_topic_partitions(log_manager, topic: str, num_partitions: int, segment_bytes: int) -> int:
    """The partition count of an internal coordinator topic, made on first use as Kafka
    makes it: compacted, with its own segment size (``__consumer_offsets``,
    ``__transaction_state``, ``__share_group_state``)."""
    info = log_manager.get_topic(topic)
    if info is None:
        log.info("creating %s with %d partitions", topic, num_partitions)
        info = log_manager.create_topic(topic, num_partitions,
                                        {"cleanup.policy": "compact", "segment.bytes": str(segment_bytes)})
    return info.num_partitions


class OffsetsTopicStore:
    def __init__(self, log_manager, clock, num_partitions: int = DEFAULT_PARTITIONS, notify=None,
                 segment_bytes: int = DEFAULT_SEGMENT_BYTES):
        self.lm = log_manager
        self.clock = clock
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.notify = notify or (lambda topic, partition: None)

    def _partitions(self) -> int:
        return internal_topic_partitions(self.lm, OFFSETS_TOPIC, self.num_partitions, self.segment_bytes)

    def _append(self, group: str, pairs: list, producer: tuple[int, int] | None = None) -> int:
        """Append one batch; returns the offset of its first record."""
        n = self._partitions()
        partition = fmt.partition_for(group, n)
        now = int(self.clock.time_ms())
        if producer is None:
            batch = bytearray(rec.build_batch([(now, k, v) for k, v in pairs]))
        else:
            batch = bytearray(rec.build_batch([(now, k, v) for k, v in pairs], producer_id=producer[0],
                                              producer_epoch=producer[1], base_sequence=0, is_transactional=True))
        info = self.lm.get_log(OFFSETS_TOPIC, partition).append(batch, in_place=True, coordinator=producer is not None)
        self.notify(OFFSETS_TOPIC, partition)
        return info.base_offset

    def partition_for(self, group: str) -> int:
        return fmt.partition_for(group, self._partitions())

    def write_offsets(self, group: str, offsets: dict, producer: tuple[int, int] | None = None) -> int | None:
        """Write offset records (None values: tombstones); ``producer`` (id, epoch):
        as that producer's transactional batch. Returns the first record's offset."""
        pairs = []
        for (topic, partition), value in offsets.items():
            pairs.append((fmt.offset_key(group, topic, partition),
                          None if value is None else fmt.offset_value(value)))
        if pairs:
            return self._append(group, pairs, producer)
        return None

    def write_group(self, group: str, value) -> None:
        self._append(group, [(fmt.group_key(group), None if value is None else fmt.group_value(value))])

    def write_records(self, group: str, pairs: list) -> None:
        """Key/value bytes already encoded (the consumer group records,
        broker.coordinator.consumer_records), in one batch."""
        if pairs:
            self._append(group, pairs)


def iter_topic_batches(log_manager, topic: str):
    """Every batch of every partition of ``topic``, in offset order per partition:
    yields ``(partition, header, records)`` with ``records`` the batch's records (an
    empty list for a control batch's caller to parse, None for a batch damaged behind a
    valid CRC, which is logged and skipped)."""
    info = log_manager.get_topic(topic)
    if info is None:
        return
    for p in range(info.num_partitions):
        plog = log_manager.get_log(topic, p)
        offset = plog.log_start_offset
        end = plog.log_end_offset
        while offset < end:
            data = plog.read(offset, 1 << 20, min_one_message=True)
            if data.records is None or len(data.records) == 0:
                break
            buf = data.records.read() if hasattr(data.records, "read") else bytes(data.records)
            progressed = False
            for pos, header in rec.iter_batches(buf):
                if header.last_offset < offset:
                    continue
                progressed = True
                offset = header.last_offset + 1
                try:
                    records = list(rec.iter_records(buf, pos, header))
                except rec.RecordFormatError as exc:  # damaged behind a valid CRC: skip the batch
                    log.warning("%s-%d: skipping the unreadable batch at offset %d: %s",
                                topic, p, header.base_offset, exc)
                    continue
                yield p, header, records
            if not progressed:
                break


def replay(log_manager, coordinator) -> int:
    """Feed every record of ``__consumer_offsets`` to the coordinator; returns the
    number of records read. Offsets of transactional batches are held for their
    producer's marker; the markers commit or drop them."""
    count = 0
    num_partitions = None
    for p, header, records in iter_topic_batches(log_manager, OFFSETS_TOPIC):
        if num_partitions is None:
            num_partitions = log_manager.get_topic(OFFSETS_TOPIC).num_partitions
        if header.is_control:
            for r in records:
                try:
                    kind, _epoch = rec.parse_control_record(r.key, r.value)
                except rec.RecordFormatError as exc:
                    log.warning("%s-%d offset %d: skipping unreadable control record: %s",
                                OFFSETS_TOPIC, p, r.offset, exc)
                    continue
                if kind in (rec.CONTROL_COMMIT, rec.CONTROL_ABORT):
                    coordinator.complete_txn(header.producer_id, kind == rec.CONTROL_COMMIT, p, num_partitions)
            continue
        producer = header.producer_id if header.is_transactional else None
        for r in records:
            if r.key is None:
                continue
            count += 1
            try:
                consumer = cr.decode(r.key, r.value)
                if consumer is not None:
                    coordinator.consumer.load(*consumer)
                    continue
                key = fmt.decode_key(r.key)
                if isinstance(key, fmt.OffsetKey):
                    value = None if r.value is None else fmt.decode_offset_value(r.value)
                    coordinator.load_offset(key.group, key.topic, key.partition, value, r.offset, producer)
                elif isinstance(key, fmt.GroupKey):
                    value = None if r.value is None else fmt.decode_group_value(r.value)
                    coordinator.load_group(key.group, value)
            except (fmt.RecordFormatError, ValueError) as exc:
                log.warning("%s-%d offset %d: skipping unreadable record: %s",
                            OFFSETS_TOPIC, p, r.offset, exc)
    coordinator.consumer.finish_load()
    return count
