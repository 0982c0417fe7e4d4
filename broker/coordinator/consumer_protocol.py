"""The consumer protocol's embedded bytes (ConsumerProtocolSubscription and
ConsumerProtocolAssignment: an int16 version, then the body of that version), as the
coordinator reads them: the topics a classic member subscribes to, the partitions it
owns, and the assignment a classic member of a consumer group is handed in SyncGroup
(Kafka's ConsumerProtocol.serializeAssignment, at the version the member speaks, capped
at the highest one known)."""

from __future__ import annotations

import struct

from protocol import codec
from protocol import messages as M

HIGHEST_VERSION = 3


def subscription_topics(metadata: bytes) -> list[str]:
    buf = bytes(metadata)
    if len(buf) < 6:
        return []
    version = struct.unpack_from(">h", buf, 0)[0]
    if version < 0:
        raise ValueError(f"bad subscription version {version}")
    if version >= 4:
        raise ValueError("flexible subscription versions are not parsed")
    (n,) = struct.unpack_from(">i", buf, 2)
    pos = 6
    topics = []
    for _ in range(max(0, n)):
        (ln,) = struct.unpack_from(">h", buf, pos)
        pos += 2
        topics.append(buf[pos:pos + ln].decode("utf-8"))
        pos += ln
    return topics


def version_of(data: bytes) -> int:
    """The version a subscription or assignment is written in (0 when unreadable)."""
    buf = bytes(data or b"")
    return max(0, struct.unpack_from(">h", buf, 0)[0]) if len(buf) >= 2 else 0


def _decode(name: str, data: bytes):
    buf = bytes(data or b"")
    if len(buf) < 2:
        raise ValueError(f"{name} of {len(buf)} bytes")
    (version,) = struct.unpack_from(">h", buf, 0)
    if version < 0:
        raise ValueError(f"{name} version {version}")
    try:
        body, _ = codec.decode_body(name, min(version, HIGHEST_VERSION), buf, 2)
    except codec.CodecError as exc:
        raise ValueError(f"{name}: {exc}") from None
    return min(version, HIGHEST_VERSION), body


def decode_subscription(metadata: bytes) -> tuple[list[str], dict[str, set], str | None]:
    """-> (topics, owned partitions {topic: set}, rack id); ValueError if malformed."""
    version, s = _decode("ConsumerProtocolSubscription", metadata)
    owned = {}
    if version >= 1:
        for tp in s.owned_partitions or []:
            owned.setdefault(tp.topic, set()).update(tp.partitions)
    return list(s.topics or []), owned, (s.rack_id if version >= 3 else None)


def decode_assignment(data: bytes) -> dict[str, set]:
    """-> {topic: set of partitions}; empty bytes (no assignment yet) is an empty one."""
    if not data:
        return {}
    _, a = _decode("ConsumerProtocolAssignment", data)
    out: dict[str, set] = {}
    for tp in a.assigned_partitions or []:
        out.setdefault(tp.topic, set()).update(tp.partitions)
    return out


def encode_assignment(version: int, assignment: dict[str, set]) -> bytes:
    v = min(max(version, 0), HIGHEST_VERSION)
    A = M.ConsumerProtocolAssignment
    body = A(assigned_partitions=[A.TopicPartition(topic=t, partitions=sorted(ps))
                                  for t, ps in sorted(assignment.items()) if ps], user_data=None)
    return struct.pack(">h", v) + codec.encode_body(body, v)
