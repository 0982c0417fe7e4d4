"""``acls``: the broker's access control list bindings, durable.

One file in the first log dir; every change rewrites it atomically (temp file, fsync,
rename, fsync of the directory) before CreateAcls / DeleteAcls are answered, so ACLs
survive SIGKILL and apply at once. Format (UTF-8 text, ``\\n`` line ends)::

    chronolog-acls 1                                  <- magic and version
    TOPIC LITERAL User:alice * READ ALLOW orders
    GROUP PREFIXED User:%2A * READ ALLOW app-
    CLUSTER LITERAL User:admin 10.0.0.1 ALTER DENY kafka-cluster

Fields: resource type, pattern type, principal, host, operation, permission, resource
name, each percent-encoded (RFC 3986 unreserved characters and ``:`` stay as they are),
the names being Kafka's (``AclOperation``, ``ResourceType``...). A malformed file
raises :class:`AclStoreError` naming the file and line: the broker refuses to start
rather than run with fewer ACLs than were acknowledged.
"""

from __future__ import annotations

import os
import threading
from typing import Iterable, NamedTuple
from urllib.parse import quote, unquote

from storage.checkpoint import read_headed_lines, write_headed_lines
from storage.errors import StorageError

FILE_NAME = "acls"
_HEADER = "chronolog-acls 1"  # magic and version

RESOURCE_TYPES = {2: "TOPIC", 3: "GROUP", 4: "CLUSTER", 5: "TRANSACTIONAL_ID", 6: "DELEGATION_TOKEN", 7: "USER"}
PATTERN_TYPES = {3: "LITERAL", 4: "PREFIXED"}
OPERATIONS = {2: "ALL", 3: "READ", 4: "WRITE", 5: "CREATE", 6: "DELETE", 7: "ALTER", 8: "DESCRIBE",
              9: "CLUSTER_ACTION", 10: "DESCRIBE_CONFIGS", 11: "ALTER_CONFIGS", 12: "IDEMPOTENT_WRITE",
              13: "CREATE_TOKENS", 14: "DESCRIBE_TOKENS"}
PERMISSIONS = {2: "DENY", 3: "ALLOW"}
_BY_NAME = [{v: k for k, v in table.items()} for table in (RESOURCE_TYPES, PATTERN_TYPES, OPERATIONS, PERMISSIONS)]


class AclStoreError(StorageError):
    pass


class AclBinding(NamedTuple):
    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int


def _enc(text: str) -> str:
    return quote(text, safe=":")


class AclStore:
    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._lock = threading.Lock()
        self._acls: frozenset[AclBinding] = self._load()

    def _load(self) -> frozenset:
        out = set()
        for n, line in read_headed_lines(self.path, _HEADER, AclStoreError):
            parts = line.split(" ")
            try:
                if len(parts) != 7:
                    raise KeyError
                rtype, ptype, principal, host, op, perm, name = parts
                out.add(AclBinding(_BY_NAME[0][rtype], unquote(name, errors="strict"), _BY_NAME[1][ptype],
                                   unquote(principal, errors="strict"), unquote(host, errors="strict"),
                                   _BY_NAME[2][op], _BY_NAME[3][perm]))
            except (KeyError, UnicodeDecodeError):
                raise AclStoreError(f"{self.path}: line {n} is not 'RESOURCE_TYPE PATTERN_TYPE principal host "
                                    "OPERATION PERMISSION name'") from None
        return frozenset(out)

    def _write(self, acls: Iterable[AclBinding]) -> None:
        write_headed_lines(self.path, _HEADER, [
            " ".join([RESOURCE_TYPES[a.resource_type], PATTERN_TYPES[a.pattern_type], _enc(a.principal),
                      _enc(a.host), OPERATIONS[a.operation], PERMISSIONS[a.permission], _enc(a.resource_name)])
            for a in sorted(acls)])

    def all(self) -> frozenset:
        """A snapshot (immutable: readers never see a half-applied change)."""
        return self._acls

    def change(self, add: Iterable[AclBinding] = (), remove: Iterable[AclBinding] = ()) -> None:
        with self._lock:
            acls = (set(self._acls) - set(remove)) | set(add)
            if acls != self._acls:
                self._write(acls)
            self._acls = frozenset(acls)
