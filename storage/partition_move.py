"""Moving a partition to a log dir on another filesystem (AlterReplicaLogDirs), where one
rename cannot do it: the partition's directory is copied while the log keeps serving,
then switched over with the log closed for the last, small difference.

On disk: while the copy runs, the destination log dir holds the *future* directory
``<topic>-<partition>.<32 hex digits>-future`` (Kafka's future-replica name). Each copy
pass (:meth:`PartitionMove.copy_pass`, on a worker thread) makes it mirror the
partition's directory file by file: files gone from the source are removed; a ``.log``
file that only grew (same inode, not smaller) gets its new tail appended, since log
files are written only at their end; any other new or changed file (indexes, which are
rewritten in place, snapshots, checkpoints, a segment the cleaner replaced) is copied
whole. ``*.deleted`` files (segments waiting for ``file.delete.delay.ms``) are not
copied. Passes repeat until one copies less than ``FINAL_DELTA_BYTES``, throttled by
``replica.alter.log.dirs.io.max.bytes.per.second`` (storage.cleaner.Throttler).

The switch (``LogManager.finish_move``, on the event loop, nothing else running):
the log is flushed and closed; a last pass copies what changed since; every file of the
future directory and the directory itself are fsynced; the future directory is renamed
to ``<topic>-<partition>`` in the destination (then fsync of that log dir); the source
directory is renamed to ``<topic>-<partition>.<hex>-delete`` (fsync of its log dir) and
removed; the log reopens in the destination without recovery.

After a crash: before the first rename, the source is intact and a ``-future``
directory is removed at start; between the two renames, two complete identical copies
exist and the start uses the one in the first log dir of ``log.dirs`` (logged); after,
a ``-delete`` directory is removed at start. No point leaves the partition without one
complete copy under its own name.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
import uuid

from storage.checkpoint import fsync_dir
from storage.cleaner import Throttler

#: a pass copying less than this ends the copying: the rest is copied with the log closed
FINAL_DELTA_BYTES = 8 * 1024 * 1024
#: passes before the switch happens anyway (a partition written faster than it copies)
MAX_PASSES = 20
FUTURE_DIR = re.compile(r"^.+\.[0-9a-f]{32}-future$")
_CHUNK = 1 << 20


class MoveCancelled(Exception):
    """The move was cancelled while a pass ran (another destination, topic deleted,
    shutdown)."""


class PartitionMove:
    """One partition's copy into ``dest_root``. ``copy_pass`` runs on a worker thread and
    touches only files; everything else runs on the event loop."""

    def __init__(self, topic: str, partition: int, src_dir: str, dest_root: str) -> None:
        self.topic = topic
        self.partition = partition
        self.src_dir = src_dir
        self.dest_root = dest_root
        self.future_dir = os.path.join(dest_root, f"{os.path.basename(src_dir)}.{uuid.uuid4().hex}-future")
        self._stop = threading.Event()
        # replica.alter.log.dirs.io.max.bytes.per.second on the copy passes (its rate set
        # before each pass; None: unthrottled, as the last pass with the log closed is);
        # a cancel wakes its sleep
        self.throttle: Throttler | None = Throttler(float("inf"), sleep=self._stop.wait)
        self.passes = 0
        self.last_copied: int | None = None
        self.pending = None  # the running pass's concurrent future (LogManager.advance_moves)
        # the source's log end offset when the running pass began, and when the last
        # finished pass began: the copy holds at least the records below it (DescribeLogDirs'
        # offset lag of the future replica)
        self.pass_leo = 0
        self.copied_leo = 0
        # file name -> (inode, size, mtime_ns) of the source when last copied
        self._copied: dict[str, tuple[int, int, int]] = {}

    @property
    def cancelled(self) -> bool:
        return self._stop.is_set()

    def cancel(self) -> None:
        self._stop.set()

    def copy_pass(self) -> int:
        """Make the future directory mirror the source; bytes copied."""
        os.makedirs(self.future_dir, exist_ok=True)
        names = {n for n in os.listdir(self.src_dir) if not n.endswith(".deleted")}
        for n in os.listdir(self.future_dir):
            if n not in names:
                os.unlink(os.path.join(self.future_dir, n))
                self._copied.pop(n, None)
        copied = 0
        for n in sorted(names):
            if self.cancelled:
                raise MoveCancelled(f"move of {self.topic}-{self.partition} cancelled")
            src = os.path.join(self.src_dir, n)
            try:
                st = os.stat(src)
            except FileNotFoundError:
                continue
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            before = self._copied.get(n)
            dst = os.path.join(self.future_dir, n)
            if before == key and os.path.exists(dst):
                continue
            if (n.endswith(".log") and before is not None and before[0] == st.st_ino
                    and os.path.exists(dst) and os.path.getsize(dst) <= st.st_size):
                copied += self._copy_tail(src, dst)
            else:
                copied += self._copy_whole(src, dst)
            self._copied[n] = key
        self.passes += 1
        self.last_copied = copied
        return copied

    def _copy_tail(self, src: str, dst: str) -> int:
        with open(src, "rb") as fin, open(dst, "r+b") as fout:
            start = fout.seek(0, os.SEEK_END)
            fin.seek(start)
            return self._pump(fin, fout)

    def _copy_whole(self, src: str, dst: str) -> int:
        with open(src, "rb") as fin, open(dst, "wb") as fout:
            return self._pump(fin, fout)

    def _pump(self, fin, fout) -> int:
        n = 0
        while True:
            if self.cancelled:
                raise MoveCancelled(f"move of {self.topic}-{self.partition} cancelled")
            chunk = fin.read(_CHUNK)
            if not chunk:
                return n
            fout.write(chunk)
            n += len(chunk)
            if self.throttle is not None:
                self.throttle.maybe_throttle(len(chunk))

    def sync(self) -> None:
        """fsync every file of the future directory, then the directory."""
        for n in os.listdir(self.future_dir):
            fd = os.open(os.path.join(self.future_dir, n), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_dir(self.future_dir)

    def future_bytes(self) -> int:
        try:
            return sum(os.path.getsize(os.path.join(self.future_dir, n)) for n in os.listdir(self.future_dir)
                       if n.endswith(".log"))
        except OSError:
            return 0

    def discard(self) -> None:
        self.cancel()
        shutil.rmtree(self.future_dir, ignore_errors=True)
