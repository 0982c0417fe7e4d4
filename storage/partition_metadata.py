"""``partition.metadata``: the topic id a partition directory belongs to (KIP-516), Kafka's
PartitionMetadataFile.

One file per partition directory, UTF-8 text, ``\\n`` line ends::

    version: 0
    topic_id: 8S4LTbxcRzWs_1FmvUO4Hw     <- Kafka's Uuid string: URL-safe base64, no padding

Written atomically (temp file, fsync, rename, fsync of the directory) when the partition
is created or first loaded without one. It tells a partition directory of a deleted and
re-created topic (same name, new id) from the current one: the log manager sets such a
directory aside as ``<topic>-<partition>.<id>-stray`` (Kafka's stray replica handling,
KIP-858) instead of serving its data under the new topic.
"""

from __future__ import annotations

import os
import re
import uuid

from protocol import kafka_uuid as kafka_uuid_string
from storage.checkpoint import atomic_write

FILE_NAME = "partition.metadata"
_VERSION = 0
_LINE = re.compile(r"^(version|topic_id): (\S+)$")


class PartitionMetadataError(Exception):
    """The file exists but is not Kafka's format; the message names the file and line."""


# Kafka's Uuid string form (protocol.kafka_uuid), under the names the callers use
kafka_uuid = kafka_uuid_string.to_string
parse_kafka_uuid = kafka_uuid_string.from_string


def read(directory: str) -> uuid.UUID | None:
    """The topic id recorded in ``directory``, None without a file."""
    path = os.path.join(directory, FILE_NAME)
    try:
        with open(path, "rb") as fh:
            text = fh.read().decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise PartitionMetadataError(f"{path} cannot be read: {exc}") from None
    fields = {}
    for n, line in enumerate(text.splitlines(), 1):
        m = _LINE.match(line)
        if m is None:
            raise PartitionMetadataError(f"{path} line {n}: malformed line {line!r}")
        fields[m.group(1)] = m.group(2)
    if fields.get("version") != str(_VERSION):
        raise PartitionMetadataError(f"{path}: unrecognized version {fields.get('version')!r}")
    try:
        return parse_kafka_uuid(fields.get("topic_id", ""))
    except ValueError as exc:
        raise PartitionMetadataError(f"{path}: {exc}") from None


def write(directory: str, topic_id: uuid.UUID, sync: bool = True) -> None:
    body = f"version: {_VERSION}\ntopic_id: {kafka_uuid(topic_id)}\n"
    atomic_write(os.path.join(directory, FILE_NAME), body.encode("utf-8"), sync=sync)
