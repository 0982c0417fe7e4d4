"""Just enough of the consumer protocol's subscription bytes (ConsumerProtocolSubscription:
int16 version, [string topic], ...) to know which topics a member subscribes to."""

from __future__ import annotations

import struct


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
