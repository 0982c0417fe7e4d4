"""Entity config files: config overrides kept per named entity, durable.

Kafka keeps these in its metadata log as ConfigRecords (GROUP resources) and
ClientQuotaRecords (client quotas); a single broker keeps each kind in one file in the
first log dir: ``group-configs`` (the ``consumer.*`` / ``share.*`` configs of consumer
groups, IncrementalAlterConfigs on resource type GROUP) and ``client-quotas``
(AlterClientQuotas). Format (UTF-8 text, ``\\n`` line ends)::

    chronolog-entity-configs 1 group-configs          <- magic, version, kind
    billing consumer.session.timeout.ms=50000 consumer.heartbeat.interval.ms=6000
    user=alice&client-id= producer_byte_rate=1048576

One line per entity: the entity, then its ``name=value`` pairs, each of the three
percent-encoded (RFC 3986 unreserved characters stay as they are; what the entity
string means is the caller's). An entity with no config left has no line. Every change
rewrites the whole file atomically (temp file, fsync, rename, fsync of the directory:
``checkpoint.atomic_write``) before it is acknowledged, so it survives SIGKILL. A
malformed file raises :class:`EntityConfigError` naming the file and the line: the
broker refuses to start rather than lose configs.
"""

from __future__ import annotations

import os
import threading
from typing import Mapping
from urllib.parse import quote, unquote

from storage.checkpoint import read_headed_lines, write_headed_lines
from storage.errors import StorageError

_MAGIC = "chronolog-entity-configs 1"


class EntityConfigError(StorageError):
    pass


class EntityConfigStore:
    """``{entity: {name: value}}`` on disk, one file per kind."""

    def __init__(self, directory: str, kind: str) -> None:
        self.path = os.path.join(directory, kind)
        self.kind = kind
        self._header = f"{_MAGIC} {kind}"
        self._lock = threading.Lock()
        self._configs: dict[str, dict[str, str]] = self._load()

    def _load(self) -> dict[str, dict[str, str]]:
        out: dict[str, dict[str, str]] = {}
        for n, line in read_headed_lines(self.path, self._header, EntityConfigError):
            parts = line.split(" ")
            try:
                entity = unquote(parts[0], errors="strict")
                props = {}
                for p in parts[1:]:
                    name, sep, value = p.partition("=")
                    if not sep or not name:
                        raise ValueError
                    props[unquote(name, errors="strict")] = unquote(value, errors="strict")
                if not props or entity in out:
                    raise ValueError
            except (ValueError, UnicodeDecodeError):
                raise EntityConfigError(f"{self.path}: line {n} is not 'entity name=value ...' "
                                        "(percent-encoded, one line per entity)") from None
            out[entity] = props
        return out

    def _write(self, configs: Mapping[str, Mapping[str, str]]) -> None:
        write_headed_lines(self.path, self._header, [
            " ".join([quote(entity, safe=""), *(f"{quote(k, safe='')}={quote(v, safe='')}"
                                                 for k, v in sorted(props.items()))])
            for entity, props in sorted(configs.items()) if props])

    def get(self, entity: str) -> dict[str, str]:
        """The entity's configs (a copy; empty when it has none)."""
        return dict(self._configs.get(entity, {}))

    def all(self) -> dict[str, dict[str, str]]:
        return {e: dict(p) for e, p in self._configs.items()}

    def set(self, entity: str, props: Mapping[str, str]) -> None:
        """Replace the entity's configs (empty: remove them), durably, then in memory."""
        with self._lock:
            new = dict(self._configs)
            if props:
                new[entity] = {str(k): str(v) for k, v in props.items()}
            else:
                new.pop(entity, None)
            if new == self._configs:
                return
            self._write(new)
            self._configs = new
