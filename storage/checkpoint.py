"""Per-log-dir offset checkpoint files and the clean-shutdown marker.

Checkpoint files (Kafka's ``OffsetCheckpointFile`` text format), one of each per log dir:

* ``recovery-point-offset-checkpoint``: per partition, the offset up to which the log
  is known to be on disk (fsync'd); recovery after a crash starts at the segment
  holding it;
* ``log-start-offset-checkpoint``: per partition, the log start offset (Kafka writes
  only partitions whose log start offset is above their first segment's base offset;
  we do the same);
* ``cleaner-offset-checkpoint``: per compacted partition, the first offset the log
  cleaner has not cleaned yet (its "first dirty offset"), written after every clean
  (:mod:`storage.log_cleaner`). A value below the log start offset or past the log end
  is reset to the log start offset when read, as Kafka's LogCleanerManager does.

Format (UTF-8 text, ``\\n`` line ends)::

    0                      <- version
    2                      <- number of entries
    events 0 1500          <- topic, partition, offset (one space between)
    events 1 1498

Written atomically: ``<name>.tmp``, fsync, rename over the old file, fsync the
directory.  A missing file reads as no entries; a malformed one raises
:class:`CheckpointError` naming the file, the line and what is wrong (the caller then
treats every partition of that dir as having no checkpoint: full recovery).

``.kafka_cleanshutdown`` (Kafka's name; empty file) is written in each log dir after
every log of the dir was flushed and closed on an orderly stop, and removed as soon as
startup has read it, so a crash during loading counts as unclean.
"""

from __future__ import annotations

import os

from storage.errors import StorageError

__all__ = [
    "CheckpointError",
    "RECOVERY_POINT_CHECKPOINT",
    "LOG_START_OFFSET_CHECKPOINT",
    "CLEANER_OFFSET_CHECKPOINT",
    "CLEAN_SHUTDOWN_FILE",
    "read_checkpoint",
    "write_checkpoint",
    "atomic_write",
    "read_headed_lines",
    "write_headed_lines",
]

RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
LOG_START_OFFSET_CHECKPOINT = "log-start-offset-checkpoint"
CLEANER_OFFSET_CHECKPOINT = "cleaner-offset-checkpoint"
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"
_VERSION = 0


class CheckpointError(StorageError):
    """A checkpoint file that cannot be parsed."""


def read_checkpoint(path: str) -> dict[tuple[str, int], int]:
    """``{(topic, partition): offset}``; ``{}`` when the file does not exist."""
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except FileNotFoundError:
        return {}
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CheckpointError(f"checkpoint file {path} is not UTF-8 text: {e}") from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    if len(lines) < 2:
        raise CheckpointError(f"checkpoint file {path} is truncated: {len(lines)} line(s), "
                              f"expected a version and a count line")
    if lines[0].strip() != str(_VERSION):
        raise CheckpointError(f"checkpoint file {path} has unknown version {lines[0]!r} (expected 0)")
    try:
        count = int(lines[1])
    except ValueError:
        raise CheckpointError(f"checkpoint file {path}: line 2 {lines[1]!r} is not an entry count") from None
    entries = lines[2:]
    if count != len(entries):
        raise CheckpointError(f"checkpoint file {path} says {count} entries but has {len(entries)}")
    out: dict[tuple[str, int], int] = {}
    for i, line in enumerate(entries, start=3):
        parts = line.split(" ")
        if len(parts) != 3:
            raise CheckpointError(f"checkpoint file {path}: line {i} {line!r} is not 'topic partition offset'")
        topic, part, off = parts
        try:
            partition, offset = int(part), int(off)
        except ValueError:
            raise CheckpointError(f"checkpoint file {path}: line {i} {line!r} has a non-integer "
                                  f"partition or offset") from None
        if partition < 0 or offset < 0 or not topic:
            raise CheckpointError(f"checkpoint file {path}: line {i} {line!r} has a negative value "
                                  f"or an empty topic")
        out[(topic, partition)] = offset
    return out


def write_checkpoint(path: str, entries: dict[tuple[str, int], int]) -> None:
    """Write ``entries`` atomically (sorted by topic, partition)."""
    lines = [str(_VERSION), str(len(entries))]
    lines += [f"{t} {p} {o}" for (t, p), o in sorted(entries.items())]
    atomic_write(path, ("\n".join(lines) + "\n").encode("utf-8"))


def read_headed_lines(path: str, header: str, error_cls: type) -> list[tuple[int, str]]:
    """The non-empty lines of a UTF-8 text file after its first line, which must be
    ``header`` (a magic and version), with their line numbers; ``[]`` when the file does
    not exist. A damaged file raises ``error_cls`` naming it (the ACL and SCRAM stores)."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read()
    except FileNotFoundError:
        return []
    try:
        lines = raw.decode("utf-8").split("\n")
    except UnicodeDecodeError:
        raise error_cls(f"{path}: not UTF-8 text") from None
    if lines[0] != header:
        raise error_cls(f"{path}: line 1 must be '{header}'")
    return [(n, line) for n, line in enumerate(lines[1:], start=2) if line]


def write_headed_lines(path: str, header: str, lines: list[str], mode: int = 0o644) -> None:
    """``header`` then ``lines``, written atomically (``atomic_write``)."""
    atomic_write(path, ("\n".join([header, *lines]) + "\n").encode("utf-8"), mode)


def atomic_write(path: str, data: bytes, mode: int = 0o644, sync: bool = True) -> None:
    """temp file (created with ``mode``; 0o600 for files holding secrets) + fsync +
    rename + fsync of the directory. ``sync=False``: no fsync, the caller syncs the
    filesystem afterwards (sync_filesystem: a topic's partitions created together)."""
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    try:
        if not mode & 0o077:  # private: also when a leftover .tmp had another mode
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if sync:
        fsync_dir(os.path.dirname(path) or ".")


def sync_filesystem(path: str) -> None:
    """Make every write to the filesystem holding ``path`` durable: one syncfs(2) (Linux)
    instead of an fsync per file, or sync(2) where syncfs is not available. A clean
    shutdown of 10,000 partitions writes 10,000 producer-state snapshots and has 30,000
    files to flush; one call waits for all of them."""
    global _syncfs
    if _syncfs is None:
        try:
            import ctypes

            libc = ctypes.CDLL(None, use_errno=True)
            _syncfs = libc.syncfs
            _syncfs.argtypes = [ctypes.c_int]
        except (OSError, AttributeError):  # pragma: no cover - not Linux / no syncfs
            _syncfs = False
    if not _syncfs:  # pragma: no cover
        os.sync()
        return
    fd = os.open(path, os.O_RDONLY)
    try:
        if _syncfs(fd) != 0:
            import ctypes

            err = ctypes.get_errno()
            raise OSError(err, f"syncfs({path}): {os.strerror(err)}")
    finally:
        os.close(fd)


_syncfs = None


def fsync_dir(path: str) -> None:
    dfd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)
