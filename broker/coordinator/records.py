"""Key/value bytes of the records in ``__consumer_offsets``.

The formats are Kafka's (group-coordinator/src/main/resources/common/message/):

* OffsetCommitKey v1: ``int16 version=1, string group, string topic, int32 partition``;
* OffsetCommitValue v3: ``int16 version=3, int64 offset, int32 leaderEpoch,
  string metadata, int64 commitTimestamp`` (v0-v2 are also read);
* GroupMetadataKey v2: ``int16 version=2, string group``;
* GroupMetadataValue v3: ``int16 version=3, string protocolType, int32 generation,
  nullable string protocol, nullable string leader, int64 currentStateTimestamp,
  [memberId, nullable groupInstanceId, clientId, clientHost, int32 rebalanceTimeout,
  int32 sessionTimeout, bytes subscription, bytes assignment]`` (v0-v3 are read).

A record with a null value is a tombstone (the offset or group was deleted).
Strings are int16-length-prefixed UTF-8 (-1 = null), bytes int32-length-prefixed.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    pass


def _str(s: str | None) -> bytes:
    if s is None:
        return b"\xff\xff"
    b = s.encode("utf-8")
    return struct.pack(">h", len(b)) + b


def _bytes(b: bytes | None) -> bytes:
    if b is None:
        return b"\xff\xff\xff\xff"
    return struct.pack(">i", len(b)) + bytes(b)


class _Reader:
    def __init__(self, buf):
        self.buf = bytes(buf)
        self.pos = 0

    def _take(self, n):
        if self.pos + n > len(self.buf):
            raise RecordFormatError(f"truncated record at byte {self.pos} (needs {n} more)")
        b = self.buf[self.pos:self.pos + n]
        self.pos += n
        return b

    def i16(self):
        return struct.unpack(">h", self._take(2))[0]

    def i32(self):
        return struct.unpack(">i", self._take(4))[0]

    def i64(self):
        return struct.unpack(">q", self._take(8))[0]

    def string(self):
        n = self.i16()
        if n < 0:
            return None
        try:
            return self._take(n).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise RecordFormatError(f"string at byte {self.pos - n} is not UTF-8: {exc}") from None

    def bytes_(self):
        n = self.i32()
        if n < 0:
            return None
        return self._take(n)


@dataclass
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass
class GroupKey:
    group: str


@dataclass
class OffsetValue:
    offset: int
    leader_epoch: int = -1
    metadata: str = ""
    commit_timestamp: int = -1


@dataclass
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout: int
    session_timeout: int
    subscription: bytes
    assignment: bytes


@dataclass
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int = -1
    members: list[MemberValue] = field(default_factory=list)


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return struct.pack(">h", OFFSET_COMMIT_KEY_VERSION) + _str(group) + _str(topic) + struct.pack(">i", partition)


def offset_value(v: OffsetValue) -> bytes:
    return (struct.pack(">hqi", OFFSET_COMMIT_VALUE_VERSION, v.offset, v.leader_epoch)
            + _str(v.metadata or "") + struct.pack(">q", v.commit_timestamp))


def group_key(group: str) -> bytes:
    return struct.pack(">h", GROUP_METADATA_KEY_VERSION) + _str(group)


def group_value(v: GroupValue) -> bytes:
    out = [struct.pack(">h", GROUP_METADATA_VALUE_VERSION), _str(v.protocol_type or ""),
           struct.pack(">i", v.generation), _str(v.protocol), _str(v.leader),
           struct.pack(">q", v.current_state_timestamp), struct.pack(">i", len(v.members))]
    for m in v.members:
        out += [_str(m.member_id), _str(m.group_instance_id), _str(m.client_id or ""), _str(m.client_host or ""),
                struct.pack(">ii", m.rebalance_timeout, m.session_timeout),
                _bytes(m.subscription or b""), _bytes(m.assignment or b"")]
    return b"".join(out)


def decode_key(buf) -> OffsetKey | GroupKey | None:
    """OffsetKey / GroupKey, or None for other key versions (transactions etc.)."""
    r = _Reader(buf)
    version = r.i16()
    if version in (0, 1):
        return OffsetKey(r.string(), r.string(), r.i32())
    if version == 2:
        return GroupKey(r.string())
    return None


def decode_offset_value(buf) -> OffsetValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 4:
        raise RecordFormatError(f"unknown OffsetCommitValue version {version}")
    if version >= 4:
        raise RecordFormatError("flexible OffsetCommitValue v4 is not read")
    offset = r.i64()
    leader_epoch = r.i32() if version >= 3 else -1
    metadata = r.string()
    ts = r.i64()
    return OffsetValue(offset, leader_epoch, metadata or "", ts)


def decode_group_value(buf) -> GroupValue:
    r = _Reader(buf)
    version = r.i16()
    if not 0 <= version <= 3:
        raise RecordFormatError(f"unknown GroupMetadataValue version {version}")
    protocol_type = r.string()
    generation = r.i32()
    protocol = r.string()
    leader = r.string()
    ts = r.i64() if version >= 2 else -1
    members = []
    for _ in range(r.i32()):
        mid = r.string()
        gid = r.string() if version >= 3 else None
        cid = r.string()
        host = r.string()
        rebalance = r.i32() if version >= 1 else -1
        session = r.i32()
        sub = r.bytes_()
        asg = r.bytes_()
        members.append(MemberValue(mid, gid, cid, host, rebalance, session, sub or b"", asg or b""))
    return GroupValue(protocol_type or "", generation, protocol, leader, ts, members)


def java_string_hash(s: str) -> int:
    """Java's String.hashCode (UTF-16 code units, int32 overflow)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for(group: str, num_partitions: int) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % numPartitions`` (Utils.abs maps
    Integer.MIN_VALUE to 0)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
