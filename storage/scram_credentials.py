"""``scram-credentials``: the SCRAM credentials of SASL users, durable.

One file in the first log dir. Never a password: per user and mechanism the salt, the
stored key, the server key and the iteration count (RFC 5802), as Kafka keeps them in
its metadata. Format (UTF-8 text, ``\\n`` line ends)::

    chronolog-scram-credentials 1                     <- magic and version
    alice SCRAM-SHA-256 4096 <salt> <stored key> <server key>
    bob%20smith SCRAM-SHA-512 8192 <salt> <stored key> <server key>

The user name is percent-encoded (RFC 3986 unreserved characters stay as they are),
the three byte strings are standard base64. Every change rewrites the whole file
atomically (temp file, fsync, rename, fsync of the directory: ``checkpoint.atomic_write``)
before the change is acknowledged, so it survives SIGKILL. A malformed file raises
:class:`CredentialStoreError` naming the file and the line: the broker refuses to start
rather than lose users.
"""

from __future__ import annotations

import base64
import binascii
import os
import threading
from urllib.parse import quote, unquote

from storage.checkpoint import read_headed_lines, write_headed_lines
from storage.errors import StorageError

FILE_NAME = "scram-credentials"
_HEADER = "chronolog-scram-credentials 1"  # magic and version
MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")


class CredentialStoreError(StorageError):
    pass


class ScramCredentialStore:
    """``{(user, mechanism): (salt, stored_key, server_key, iterations)}`` on disk.

    Values are plain tuples so this module needs nothing from ``protocol``; the broker
    wraps them in ``protocol.sasl.ScramCredential``."""

    def __init__(self, directory: str) -> None:
        self.path = os.path.join(directory, FILE_NAME)
        self._lock = threading.Lock()
        self._creds: dict[tuple[str, str], tuple[bytes, bytes, bytes, int]] = self._load()

    def _load(self) -> dict:
        out = {}
        for n, line in read_headed_lines(self.path, _HEADER, CredentialStoreError):
            parts = line.split(" ")
            try:
                if len(parts) != 6 or parts[1] not in MECHANISMS:
                    raise ValueError
                user = unquote(parts[0], errors="strict")
                iterations = int(parts[2])
                salt, stored, server = (base64.b64decode(p, validate=True) for p in parts[3:])
            except (ValueError, binascii.Error, UnicodeDecodeError):
                raise CredentialStoreError(f"{self.path}: line {n} is not 'user mechanism iterations salt "
                                           "stored_key server_key'") from None
            out[(user, parts[1])] = (salt, stored, server, iterations)
        return out

    def _write(self, creds: dict) -> None:
        write_headed_lines(self.path, _HEADER, [
            " ".join([quote(user, safe=""), mech, str(it),
                      *(base64.b64encode(x).decode() for x in (salt, stored, server))])
            for (user, mech), (salt, stored, server, it) in sorted(creds.items())], mode=0o600)

    def get(self, user: str, mechanism: str):
        return self._creds.get((user, mechanism))

    def users(self) -> dict[str, list[tuple[str, int]]]:
        """``{user: [(mechanism, iterations), ...]}``."""
        out: dict[str, list[tuple[str, int]]] = {}
        for (user, mech), value in sorted(self._creds.items()):
            out.setdefault(user, []).append((mech, value[3]))
        return out

    def apply(self, upserts: dict, deletions) -> None:
        """Upsert ``{(user, mech): (salt, stored, server, iterations)}`` and delete the
        ``(user, mech)`` pairs, durably, all at once."""
        with self._lock:
            creds = dict(self._creds)
            for key in deletions:
                creds.pop(key, None)
            creds.update(upserts)
            self._write(creds)
            self._creds = creds
