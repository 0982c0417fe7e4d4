"""``__share_group_state``: where share groups' delivery state lives on disk (KIP-932).

The topic is made on first write with ``share.coordinator.state.topic.num.partitions``
partitions (default 50), ``cleanup.policy=compact`` and
``share.coordinator.state.topic.segment.bytes`` as its ``segment.bytes``, as Kafka's
share coordinator makes it. A share-partition's records go to partition
``Utils.abs("<group>:<topic id>:<partition>".hashCode()) % partitions`` (Kafka's
SharePartitionKey.asCoordinatorKey).

Record format (Kafka's share coordinator records, vendored in protocol/schemas):

* key: ``int16 record type`` (0, ShareSnapshot) then ShareSnapshotKey v0 (non-flexible):
  group id (int16-length string), topic id (16 bytes), partition (int32);
* value: ``int16 version`` (0) then ShareSnapshotValue v0 (flexible): snapshot epoch,
  state epoch, leader epoch (int32 each), start offset, create and write timestamps
  (int64 each), state batches ``(first offset, last offset, delivery state, delivery
  count)`` (int64, int64, int8, int16), tagged DeliveryCompleteCount;
* a null value is a tombstone (the share-partition's state was deleted).

Chronolog writes a whole snapshot at every change (never ShareUpdate deltas; they are
read if found): one record per share-partition, the records of one request in one batch
per partition of the topic, through the LogManager before the request is answered, so
the state has the log's durability (flush policy, recovery). ``replay`` reads it all at
start; the last record of a key wins.
"""

from __future__ import annotations

import logging
import struct
from dataclasses import dataclass

from protocol import codec
from protocol import messages as M
from protocol import records as rec

from broker.coordinator import records as fmt
from broker.coordinator.store import internal_topic_partitions, iter_topic_batches

log = logging.getLogger("chronolog.share.state")

STATE_TOPIC = "__share_group_state"
SNAPSHOT, UPDATE = 0, 1


@dataclass
class ShareState:
    """One share-partition's persisted state."""
    start_offset: int
    batches: list  # [(first, last, state, count)]
    state_epoch: int = 0
    snapshot_epoch: int = 0
    create_timestamp: int = -1
    write_timestamp: int = -1


def coordinator_key(group: str, topic_id, partition: int) -> str:
    return f"{group}:{topic_id}:{partition}"


def encode_key(group: str, topic_id, partition: int, record_type: int = SNAPSHOT) -> bytes:
    cls = M.ShareSnapshotKey if record_type == SNAPSHOT else M.ShareUpdateKey
    return struct.pack(">h", record_type) + codec.encode_body(cls(group_id=group, topic_id=topic_id,
                                                                  partition=partition), 0)


def encode_value(state: ShareState) -> bytes:
    V = M.ShareSnapshotValue
    return struct.pack(">h", 0) + codec.encode_body(V(
        snapshot_epoch=state.snapshot_epoch, state_epoch=state.state_epoch, leader_epoch=0,
        start_offset=state.start_offset, create_timestamp=state.create_timestamp,
        write_timestamp=state.write_timestamp,
        state_batches=[V.StateBatch(first_offset=a, last_offset=b, delivery_state=s, delivery_count=c)
                       for a, b, s, c in state.batches]), 0)


def decode(key_bytes, value_bytes):
    """(record type, group, topic id, partition, value struct or None); None for a key
    of another kind. Raises ValueError for unreadable bytes."""
    kb = memoryview(bytes(key_bytes))
    (rtype,) = struct.unpack_from(">h", kb, 0)
    if rtype not in (SNAPSHOT, UPDATE):
        return None
    key_cls, value_cls = ((M.ShareSnapshotKey, M.ShareSnapshotValue) if rtype == SNAPSHOT
                          else (M.ShareUpdateKey, M.ShareUpdateValue))
    k, _ = codec.decode_body(key_cls, 0, kb, 2)
    if value_bytes is None:
        return rtype, k.group_id, k.topic_id, k.partition, None
    vb = memoryview(bytes(value_bytes))
    (version,) = struct.unpack_from(">h", vb, 0)
    if version != 0:
        raise ValueError(f"unknown {value_cls.__name__} version {version}")
    v, _ = codec.decode_body(value_cls, 0, vb, 2)
    return rtype, k.group_id, k.topic_id, k.partition, v


class ShareStateStore:
    def __init__(self, log_manager, clock, num_partitions: int = 50, segment_bytes: int = 104857600, notify=None):
        self.lm = log_manager
        self.clock = clock
        self.num_partitions = num_partitions
        self.segment_bytes = segment_bytes
        self.notify = notify or (lambda topic, partition: None)

    def _partitions(self) -> int:
        return internal_topic_partitions(self.lm, STATE_TOPIC, self.num_partitions, self.segment_bytes)

    def write(self, entries) -> None:
        """``entries``: [((group, topic id, partition), ShareState or None)], one batch per
        partition of the topic."""
        if not entries:
            return
        n = self._partitions()
        now = int(self.clock.time_ms())
        by_partition: dict[int, list] = {}
        for (group, tid, p), state in entries:
            if state is not None:
                state.write_timestamp = now
                if state.create_timestamp < 0:
                    state.create_timestamp = now
            by_partition.setdefault(fmt.partition_for(coordinator_key(group, tid, p), n), []).append(
                (now, encode_key(group, tid, p), None if state is None else encode_value(state)))
        for partition, records in sorted(by_partition.items()):
            batch = bytearray(rec.build_batch(records))
            self.lm.get_log(STATE_TOPIC, partition).append(batch, in_place=True)
            self.notify(STATE_TOPIC, partition)


def replay(log_manager) -> dict:
    """Every share-partition's last state: {(group, topic id, partition): ShareState}."""
    out: dict = {}
    for p, header, records in iter_topic_batches(log_manager, STATE_TOPIC):
        if header.is_control:
            continue
        for r in records:
            if r.key is None:
                continue
            try:
                found = decode(r.key, r.value)
            except (ValueError, struct.error, codec.DecodeError) as exc:
                log.warning("%s-%d offset %d: skipping unreadable record: %s", STATE_TOPIC, p, r.offset, exc)
                continue
            if found is None:
                continue
            rtype, group, tid, part, v = found
            key = (group, tid, part)
            if v is None:
                out.pop(key, None)
            elif rtype == SNAPSHOT:
                out[key] = ShareState(v.start_offset, [(b.first_offset, b.last_offset, b.delivery_state,
                                                        b.delivery_count) for b in v.state_batches],
                                      v.state_epoch, v.snapshot_epoch, v.create_timestamp, v.write_timestamp)
            elif key in out:  # an update (Kafka's delta) applies over the snapshot
                st = out[key]
                if v.start_offset >= 0:
                    st.start_offset = v.start_offset
                st.batches = st.batches + [(b.first_offset, b.last_offset, b.delivery_state, b.delivery_count)
                                           for b in v.state_batches]
    return out
