"""Key/value bytes of the KIP-848 consumer group records in ``__consumer_offsets``.

Kafka's formats (group-coordinator/src/main/resources/common/message/, vendored in
protocol/schemas with the other message definitions and encoded by the generated
codec): a key is ``int16 version`` then the key struct, a value ``int16 version`` (0)
then the value struct (flexible: compact strings and arrays, tagged fields), a null
value a tombstone.

* ConsumerGroupMetadataKey v3 (group) -> ConsumerGroupMetadataValue: the group epoch;
* ConsumerGroupMemberMetadataKey v5 (group, member) -> the member's subscription,
  instance id, rack, client id and host, rebalance timeout, server assignor;
* ConsumerGroupTargetAssignmentMetadataKey v6 (group) -> the assignment epoch;
* ConsumerGroupTargetAssignmentMemberKey v7 (group, member) -> its target partitions;
* ConsumerGroupCurrentMemberAssignmentKey v8 (group, member) -> member epoch, previous
  member epoch, state, assigned partitions, partitions pending revocation.

Group tombstones are written in Kafka's order when a group goes (current assignments,
target members, target metadata, members, then the group record).
"""

from __future__ import annotations

import struct

from protocol import codec
from protocol import messages as M

GROUP_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT = 3, 5, 6, 7, 8
_KEYS = {
    GROUP_METADATA: (M.ConsumerGroupMetadataKey, M.ConsumerGroupMetadataValue),
    MEMBER_METADATA: (M.ConsumerGroupMemberMetadataKey, M.ConsumerGroupMemberMetadataValue),
    TARGET_METADATA: (M.ConsumerGroupTargetAssignmentMetadataKey, M.ConsumerGroupTargetAssignmentMetadataValue),
    TARGET_MEMBER: (M.ConsumerGroupTargetAssignmentMemberKey, M.ConsumerGroupTargetAssignmentMemberValue),
    CURRENT_ASSIGNMENT: (M.ConsumerGroupCurrentMemberAssignmentKey, M.ConsumerGroupCurrentMemberAssignmentValue),
}
KEY_VERSIONS = frozenset(_KEYS)


def key(version: int, group_id: str, member_id: str | None = None) -> bytes:
    cls = _KEYS[version][0]
    body = cls(group_id=group_id) if member_id is None else cls(group_id=group_id, member_id=member_id)
    return struct.pack(">h", version) + codec.encode_body(body, version)


def value(version: int, body) -> bytes:
    return struct.pack(">h", 0) + codec.encode_body(body, 0)


def decode(key_bytes, value_bytes):
    """(key version, group id, member id or None, value struct or None) for a consumer
    group record; None for other keys. Raises ValueError for unreadable bytes."""
    kb = memoryview(bytes(key_bytes))
    (version,) = struct.unpack_from(">h", kb, 0)
    if version not in _KEYS:
        return None
    key_cls, value_cls = _KEYS[version]
    k, _ = codec.decode_body(key_cls, version, kb, 2)
    member = getattr(k, "member_id", None)
    if value_bytes is None:
        return version, k.group_id, member, None
    vb = memoryview(bytes(value_bytes))
    (vversion,) = struct.unpack_from(">h", vb, 0)
    if vversion != 0:
        raise ValueError(f"unknown {value_cls.__name__} version {vversion}")
    v, _ = codec.decode_body(value_cls, 0, vb, 2)
    return version, k.group_id, member, v


def topic_partitions(cls, assignment: dict) -> list:
    """{topic id: set(partitions)} -> [cls(topic_id, partitions)] sorted."""
    return [cls(topic_id=tid, partitions=sorted(parts)) for tid, parts in sorted(assignment.items(), key=lambda e: str(e[0]))
            if parts]


def from_topic_partitions(items) -> dict:
    return {tp.topic_id: set(tp.partitions) for tp in items or [] if tp.partitions}
