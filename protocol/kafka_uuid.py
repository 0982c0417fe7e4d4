"""Kafka's Uuid string form (``org.apache.kafka.common.Uuid.toString``/``fromString``):
URL-safe base64 of the 16 bytes without padding, 22 characters. Topic ids, cluster ids
and ``partition.metadata`` files use it."""

from __future__ import annotations

import base64
import uuid


def to_string(u: uuid.UUID) -> str:
    return base64.urlsafe_b64encode(u.bytes).decode("ascii").rstrip("=")


def from_string(text: str) -> uuid.UUID:
    """ValueError for anything but a 22-character base64 id."""
    if len(text) != 22:
        raise ValueError(f"{text!r} is not a 22-character base64 topic id")
    raw = base64.urlsafe_b64decode(text + "==")
    if len(raw) != 16:
        raise ValueError(f"{text!r} is not a 16-byte topic id")
    return uuid.UUID(bytes=raw)
