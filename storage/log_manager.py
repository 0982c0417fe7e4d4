"""All partition logs of the broker, across ``log.dirs``, plus topic metadata.

On disk, per log dir:

* ``<topic>-<partition>/``: one :class:`storage.log.Log` each;
* ``__chronolog_topics.json``: the topic metadata, the same document in every log dir
  (the one with the highest ``generation`` wins at startup)::

      {"version": 1, "generation": 7,
       "topics": {"events": {"topic_id": "<uuid4>", "partitions": 3,
                             "configs": {"retention.ms": "86400000"}}}}

  written atomically: temp file, fsync, rename over the old file, fsync the directory;
* ``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint`` and the
  ``.kafka_cleanshutdown`` marker (format and rules in :mod:`storage.checkpoint`):
  written on an orderly ``shutdown``; the checkpoints also periodically
  (``log.flush.offset.checkpoint.interval.ms``,
  ``log.flush.start.offset.checkpoint.interval.ms``, driven by the broker) and the log
  start offsets after a retention pass that deleted segments.  ``startup`` reads and
  removes the marker, then loads each log trusting its indexes (clean) or recovering it
  from its recovery point (unclean; see :class:`storage.log.Log`);
* ``<topic>-<partition>.<uuid hex>-delete/``: a partition being deleted (removed at
  startup if a crash interrupted the deletion);
* ``<topic>-<partition>.<uuid hex>-stray/``: a partition directory whose
  ``partition.metadata`` (:mod:`storage.partition_metadata`) names an earlier topic id
  than the topic of that name now has, set aside at startup and kept for the operator;
* ``.lock``: an empty file the broker holds an exclusive lock on (``fcntl`` record lock,
  as Kafka's ``FileChannel.tryLock``) from start-up to shutdown, so two brokers can never
  share a log dir; the kernel releases it when the process dies.

New partitions go to the log dir holding the fewest partitions (ties: the order of
``log.dirs``).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import re
import shutil
import time
import uuid
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Callable, Mapping

from storage.errors import (
    InvalidPartitionsError,
    KafkaStorageError,
    LogDirError,
    LogDirNotFoundError,
    InvalidTopicError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from storage.partition_move import FINAL_DELTA_BYTES, FUTURE_DIR, MAX_PASSES, PartitionMove
from storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    atomic_write,
    fsync_dir,
    sync_filesystem,
    read_checkpoint,
    write_checkpoint,
)
from storage import partition_metadata
from storage.open_files import OPEN_FILES
from storage.log import Log, LogFlush, fsync_flushes, parse_topic_partition_dir

__all__ = ["LogManager", "TopicInfo", "validate_topic_name", "TOPICS_FILE"]

logger = logging.getLogger(__name__)

TOPICS_FILE = "__chronolog_topics.json"
LOCK_FILE = ".lock"
_METADATA_VERSION = 1
_MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")
_DELETE_DIR = re.compile(r"^.+\.[0-9a-f]{32}-delete$")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    num_partitions: int
    config: Any
    overrides: dict[str, str] = field(default_factory=dict)


class _TopicTable(dict):
    """The topics by name, with the names by topic id kept beside them (a Fetch v13+ or
    ConsumerGroupDescribe names its topics by id: a lookup, not a pass over every topic).
    Changed only by item assignment, ``del``, ``pop`` and ``clear``; ``version`` counts
    those changes, and a TopicInfo's partition count changed in place
    (``create_partitions``): what a cache of something computed over the topics checks."""

    __slots__ = ("by_id", "version")

    def __init__(self):
        super().__init__()
        self.by_id: dict[uuid.UUID, str] = {}
        self.version = 0

    def __setitem__(self, name: str, info: TopicInfo) -> None:
        self.version += 1
        old = self.get(name)
        if old is not None and self.by_id.get(old.topic_id) == name:
            del self.by_id[old.topic_id]
        super().__setitem__(name, info)
        self.by_id[info.topic_id] = name

    def __delitem__(self, name: str) -> None:
        self.version += 1
        info = self[name]
        super().__delitem__(name)
        if self.by_id.get(info.topic_id) == name:
            del self.by_id[info.topic_id]

    def pop(self, name, *default):
        if name in self:
            info = self[name]
            del self[name]
            return info
        return super().pop(name, *default)

    def clear(self) -> None:
        self.version += 1
        super().clear()
        self.by_id.clear()

    def _refuse(self, *args, **kwargs):
        raise TypeError("the topic table changes only by item, del, pop and clear")

    update = setdefault = popitem = __ior__ = _refuse


# The leader epoch of every partition: this broker leads them all and leadership never
# moves, so it stays 0 (Metadata, ListOffsets, DescribeTopicPartitions report it; every
# appended batch carries it; leader-epoch-checkpoint records where it began).
LEADER_EPOCH = 0

# org.apache.kafka.common.internals.Topic.INTERNAL_TOPICS
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})


LONG_MAX = 2**63 - 1


def volume_bytes(path: str) -> tuple[int, int]:
    """(total, usable) bytes of the file system holding ``path``, for DescribeLogDirs and
    the log dir metrics. As Kafka's adjustForLargeFileSystems, a size that overflows a
    Java long is Long.MAX_VALUE. OSError if the path cannot be read."""
    st = os.statvfs(path)
    total, usable = st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize
    return (total if 0 <= total <= LONG_MAX else LONG_MAX), (usable if 0 <= usable <= LONG_MAX else LONG_MAX)


def validate_topic_name(name: str) -> None:
    """Kafka's Topic.validate: raises InvalidTopicError."""
    if not isinstance(name, str) or name == "":
        raise InvalidTopicError("Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise InvalidTopicError(f"Topic name cannot be \".\" or \"..\" (got {name!r})")
    if len(name) > _MAX_NAME_LENGTH:
        raise InvalidTopicError(
            f"Topic name is illegal, it can't be longer than {_MAX_NAME_LENGTH} characters, "
            f"topic name: {name}")
    if not _LEGAL_NAME.match(name):
        raise InvalidTopicError(
            f"Topic name \"{name}\" is illegal, it contains a character other than ASCII "
            f"alphanumerics, '.', '_' and '-'")


def _unify(name: str) -> str:
    return name.replace(".", "_")


def _default_topic_config_factory(broker_config, overrides: dict[str, str]):
    from config import TopicConfig  # imported late: config/ is written concurrently

    return TopicConfig.from_broker(broker_config, overrides)


@dataclass
class _PendingLog:
    """A partition not loaded yet: of a cleanly shut down log dir, or of a topic created
    with ``defer`` and not made yet (its directory does not exist); its directory and
    the checkpointed values it will be loaded with."""

    path: str
    recovery_point: int | None
    log_start_offset: int | None


class LogManager:
    def __init__(self, broker_config, clock, *,
                 topic_config_factory: Callable[[Any, dict[str, str]], Any] | None = None):
        self.broker_config = broker_config
        self.clock = clock
        self._topic_config = topic_config_factory or _default_topic_config_factory
        dirs = list(getattr(broker_config, "log_dirs", None) or [])
        if not dirs:
            raise ValueError("broker config has no log_dirs")
        self.log_dirs = [os.path.abspath(d) for d in dirs]
        self._topics: dict[str, TopicInfo] = _TopicTable()
        self._logs: dict[tuple[str, int], Log] = {}
        # partitions not loaded yet (_PendingLog: a cleanly shut down log dir's, a deferred
        # topic's not made yet): loaded on first use (get_log, logs()) or by load_pending()
        self._pending: dict[tuple[str, int], _PendingLog] = {}
        # the logs that may have background work (Log.on_background): what flush_due and
        # delete_due_files visit, instead of every log; a log leaves once it has none
        self._background: set[Log] = set()
        # called when partitions are added, made at once or left for load_pending
        # (create_topic, create_partitions): the broker wakes its background loader, which
        # makes deferred ones and settles its heap as it grows
        self.on_new_partitions: list[Callable[[], None]] = []
        # partition logs opened or made since start, deleted ones included (a count that
        # only grows: what the broker's heap has gained, for broker.server.settle_heap)
        self.logs_opened = 0
        self._load_started: float | None = None  # perf_counter at start-up while some are deferred
        self._generation = 0
        self._started = False
        self._locks: list[int] = []  # fds holding each log dir's .lock
        # partitions a background clean is reading (storage.log_cleaner): retention skips
        # them until the clean is swapped in, as Kafka's cleaner pauses deletion meanwhile
        self.busy: set[tuple[str, int]] = set()
        # called with (topic, partition) before a partition's log is deleted
        self.on_partition_deleted: list[Callable[[str, int], None]] = []
        # partitions being copied to a log dir on another filesystem (storage.partition_move),
        # moves cancelled while a pass still runs, and the one thread that copies
        self.moves: dict[tuple[str, int], PartitionMove] = {}
        self._dying_moves: list[PartitionMove] = []
        self._move_pool = None

    # ------------------------------------------------------------------ startup / shutdown
    def lock_dirs(self) -> None:
        """Create every log dir, check it is writable and lock it (Kafka's
        LogManager.lockLogDirs). Raises LogDirError with a one-line reason naming the dir."""
        if self._locks:
            return
        locks = []
        try:
            for d in self.log_dirs:
                try:
                    os.makedirs(d, exist_ok=True)
                except OSError as e:
                    raise LogDirError(f"log.dirs: cannot create the log dir {d}: {e.strerror}") from None
                if not os.access(d, os.W_OK | os.X_OK):
                    raise LogDirError(f"log.dirs: the log dir {d} is not writable by this process (uid {os.getuid()})")
                path = os.path.join(d, LOCK_FILE)
                try:
                    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
                except OSError as e:
                    raise LogDirError(f"log.dirs: cannot create {path}: {e.strerror}") from None
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    raise LogDirError(f"Failed to acquire lock on file .lock in {d}. A Kafka instance in another "
                                      f"process or thread is using this directory.") from None
                locks.append(fd)
        except BaseException:
            for fd in locks:
                os.close(fd)
            raise
        self._locks = locks

    def unlock_dirs(self) -> None:
        locks, self._locks = self._locks, []
        for fd in locks:
            try:
                os.close(fd)  # closing the descriptor releases the lock
            except OSError:  # pragma: no cover
                pass

    def startup(self, defer: bool = False) -> None:
        """Load every partition of the log dirs. ``defer``: the partitions of a log dir
        shut down cleanly (nothing to recover) are only listed; each is loaded on first
        use or by :meth:`load_pending` (the broker calls it in the background after it
        starts listening: 10,000 partitions take seconds to load)."""
        self.lock_dirs()
        cap = getattr(self.broker_config, "log_open_files_max", None)
        OPEN_FILES.configure(-1 if cap is None else int(cap))
        self.load_dynamic_broker_configs()  # before any topic config is resolved
        started = time.perf_counter()
        clean: dict[str, bool] = {}
        recovery_points: dict[str, dict] = {}
        start_offsets: dict[str, dict] = {}
        for d in self.log_dirs:
            marker = os.path.join(d, CLEAN_SHUTDOWN_FILE)
            clean[d] = os.path.exists(marker)
            if clean[d]:
                # removed as soon as it is read: a crash while loading counts as unclean
                os.unlink(marker)
                fsync_dir(d)
            recovery_points[d] = self._read_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT))
            start_offsets[d] = self._read_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT))
        meta = self._read_metadata()
        found: dict[tuple[str, int], str] = {}
        for d in self.log_dirs:
            with os.scandir(d) as it:  # scandir: the entry type without a stat per directory
                dirs = sorted(e.name for e in it if e.is_dir())
            for name in dirs:
                path = os.path.join(d, name)
                if _DELETE_DIR.match(name):
                    logger.info("removing partition directory left by an interrupted delete: %s", path)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                if FUTURE_DIR.match(name):
                    logger.info("removing the copy of an unfinished move to this log dir: %s", path)
                    shutil.rmtree(path, ignore_errors=True)
                    continue
                tp = parse_topic_partition_dir(name)
                if tp is None:
                    continue
                if tp in found:
                    logger.error("partition %s-%d found in two log dirs (%s and %s); using the first",
                                 tp[0], tp[1], found[tp], path)
                    continue
                found[tp] = path
        not_made, pick = 0, None
        for name, entry in meta.items():
            overrides = {str(k): str(v) for k, v in (entry.get("configs") or {}).items()}
            info = TopicInfo(name=name, topic_id=uuid.UUID(entry["topic_id"]),
                             num_partitions=int(entry["partitions"]),
                             config=self._topic_config(self.broker_config, overrides),
                             overrides=overrides)
            self._topics[name] = info
            for p in range(info.num_partitions):
                path = found.pop((name, p), None)
                d = None if path is None else os.path.dirname(os.path.abspath(path))
                pending = _PendingLog(path, recovery_points.get(d, {}).get((name, p)),
                                      start_offsets.get(d, {}).get((name, p)))
                if path is not None and clean.get(d, False) and defer:
                    # nothing to recover: loaded on first use or in the background
                    self._pending[(name, p)] = pending
                elif (path is None and defer
                      and not any((name, p) in points for points in recovery_points.values())):
                    # created in the background (create_topic(defer=True)) and not made
                    # before the stop: it never held a record, nothing is missing
                    pick = pick or self._log_dir_picker()
                    pending.path = os.path.join(pick(), f"{name}-{p}")
                    self._pending[(name, p)] = pending
                    not_made += 1
                else:
                    self._load_partition(name, p, pending, clean.get(d, False))
        for (topic, p), path in found.items():
            logger.warning("ignoring partition directory %s: topic %s-%d is not in %s",
                           path, topic, p, TOPICS_FILE)
        self._started = True
        self._load_started = started if self._pending else None  # load_pending logs the end
        if not_made:
            logger.info("%d partition(s) of topics created before the stop were not made yet; they are made "
                        "in the background", not_made)
        logger.info("loaded %d partition log(s)%s from %d log dir(s) in %.3f s (%s)", len(self._logs),
                    f" ({len(self._pending)} more, cleanly shut down, load in the background)"
                    if self._pending else "", len(self.log_dirs), time.perf_counter() - started,
                    ", ".join(f"{d}: {'clean shutdown' if clean[d] else 'no clean-shutdown marker, recovered from the recovery points'}"
                              for d in self.log_dirs))
        # the recovery points and start offsets on disk now match what was loaded
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()

    def _load_partition(self, name: str, p: int, pending: "_PendingLog", clean: bool,
                        sync_new_files: bool = True) -> Log:
        info = self._topics[name]
        path, recorded = pending.path, False
        if path is not None:
            path, recorded = self._set_aside_if_stray(path, info)
        if path is None:
            path = os.path.join(self._next_log_dir(), f"{name}-{p}")
            logger.warning("partition directory of %s-%d is missing; creating %s", name, p, path)
        log = self._logs[(name, p)] = Log(
            path, info.config, self.clock, topic=name, partition=p,
            recovery_point=pending.recovery_point, log_start_offset=pending.log_start_offset,
            had_clean_shutdown=clean, producer_id_expiration_ms=self._pid_expiration_ms(),
            leader_epoch=LEADER_EPOCH, topic_id=info.topic_id, topic_id_recorded=recorded,
            sync_new_files=sync_new_files)
        self._adopt(log)
        return log

    def _adopt(self, log: Log) -> None:
        """What the manager does for each log it opens or makes: hears of its background
        work from now on, and looks at it once in the next periodic passes."""
        self.logs_opened += 1
        log.on_background = self._background.add
        self._background.add(log)

    def _background_logs(self) -> list[Log]:
        """The logs that may have background work and are still this manager's."""
        out = []
        for log in list(self._background):
            if not log.closed and self._logs.get((log.topic, log.partition)) is log:
                out.append(log)
            else:
                self._background.discard(log)
        return out

    def _load_deferred(self, key: tuple[str, int]) -> Log | None:
        pending = self._pending.pop(key, None)
        if pending is None:
            return None
        # a partition of a deferred topic, made now: its partition.metadata and epoch
        # checkpoint without fsyncs (an empty partition loses nothing in a crash, and the
        # next start rewrites a torn file)
        fresh = not os.path.isdir(pending.path)
        return self._load_partition(key[0], key[1], pending, True, sync_new_files=not fresh)

    def load_pending(self, limit: int, budget_s: float | None = None) -> int:
        """Load up to ``limit`` deferred partitions, stopping early once ``budget_s``
        seconds have gone (a partition made on a busy disk takes milliseconds); returns
        how many are left."""
        t0 = time.perf_counter()
        for _ in range(min(limit, len(self._pending))):
            if budget_s is not None and time.perf_counter() - t0 >= budget_s:
                break
            key = next(iter(self._pending))
            try:
                self._load_deferred(key)
            except Exception as e:  # the others still load; this one stays offline
                logger.error("could not load partition %s-%d: %s", key[0], key[1], e)
        if not self._pending and self._load_started is not None:
            logger.info("all %d partition log(s) loaded, %.3f s after start-up began", len(self._logs),
                        time.perf_counter() - self._load_started)
            self._load_started = None
        return len(self._pending)

    def _load_all_pending(self) -> None:
        while self._pending:
            self.load_pending(len(self._pending))

    def _read_checkpoint(self, path: str) -> dict:
        try:
            return read_checkpoint(path)
        except (CheckpointError, OSError) as e:
            logger.error("ignoring %s (every partition of that dir is recovered in full): %s", path, e)
            return {}

    def shutdown(self) -> None:
        """Orderly stop: flush and cleanly close every log (final time-index entries,
        indexes trimmed), write both checkpoint files, then the clean-shutdown marker in
        each log dir whose logs all closed without error."""
        for key in list(self.moves):
            self.cancel_move(key, "the broker is stopping")
        if self._move_pool is not None:
            self._move_pool.shutdown(wait=True)  # a cancelled pass stops at its next chunk
            self._move_pool = None
        for move in self._dying_moves:
            move.discard()
        self._dying_moves.clear()
        errors = []
        failed_dirs = set()
        closing = []
        for log in self._logs.values():
            try:
                if not log.closed:
                    # no fsync per file: one filesystem sync below covers them all
                    log.close(sync=False)
                    closing.append(log)
            except Exception as e:  # keep closing the others
                if isinstance(e, OSError):  # a file gone or a disk failing: one line names it
                    logger.error("error closing %r: %s", log, e)
                else:  # pragma: no cover - a bug: its traceback
                    logger.exception("error closing %r", log)
                errors.append(e)
                failed_dirs.add(self._dir_of(log))
        synced = set()
        for d in self.log_dirs:
            try:
                sync_filesystem(d)
                synced.add(d)
            except OSError as e:  # pragma: no cover - disk failure
                logger.error("could not sync the log dir %s: %s", d, e)
                errors.append(e)
                failed_dirs.add(d)
        for log in closing:
            if self._dir_of(log) in synced:
                log.closed_durably()
        try:
            self.checkpoint_recovery_points(include_closed=True)
            self.checkpoint_log_start_offsets(include_closed=True)
        except Exception as e:  # pragma: no cover - disk failure
            logger.exception("could not write the checkpoint files")
            errors.append(e)
            failed_dirs.update(self.log_dirs)
        for d in self.log_dirs:
            if d in failed_dirs:
                continue
            try:
                atomic_write(os.path.join(d, CLEAN_SHUTDOWN_FILE), b"")
            except OSError as e:  # pragma: no cover
                logger.error("could not write the clean-shutdown marker in %s: %s", d, e)
                errors.append(e)
        self._logs.clear()
        self._pending.clear()  # untouched since the clean start: still clean on disk
        self._topics.clear()
        self._started = False
        self.unlock_dirs()
        if errors:
            raise errors[0]

    # ------------------------------------------------------------------ topics
    def _set_aside_if_stray(self, path: str, info: TopicInfo) -> tuple[str | None, bool]:
        """A partition directory whose ``partition.metadata`` names another topic id holds
        an earlier topic of the same name (deleted, then created again): it is renamed
        ``<dir>.<its id>-stray`` and kept, never served under the new topic (Kafka's stray
        replicas, KIP-858, which Kafka then deletes). Returns the path to load, or None, and
        whether the directory records the topic's id already."""
        try:
            recorded = partition_metadata.read(path)
        except partition_metadata.PartitionMetadataError as exc:
            logger.warning("%s; rewriting it with topic id %s", exc, partition_metadata.kafka_uuid(info.topic_id))
            return path, False
        if recorded is None or recorded == info.topic_id:
            return path, recorded is not None
        stray = f"{path}.{recorded.hex}-stray"
        logger.warning("partition directory %s belongs to topic id %s, not %s's current id %s: renamed %s and "
                       "not loaded", path, partition_metadata.kafka_uuid(recorded), info.name,
                       partition_metadata.kafka_uuid(info.topic_id), stray)
        os.rename(path, stray)
        fsync_dir(os.path.dirname(os.path.abspath(path)))
        return None, False

    def topics(self) -> dict[str, TopicInfo]:
        return dict(self._topics)

    def get_topic(self, name: str) -> TopicInfo | None:
        return self._topics.get(name)

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with this id, None when no topic has it."""
        return self._topics.by_id.get(topic_id)

    def topics_version(self) -> int:
        """A number that changes whenever a topic is created, deleted, replaced or given
        more partitions: equal numbers mean the same topics with the same partition
        counts (a cache over every topic checks it)."""
        return self._topics.version

    def topic_names_view(self) -> Mapping[uuid.UUID, str]:
        """Every topic's name by its id, read-only and live (no copy: what a request
        looks a few ids up in, on a broker of many topics)."""
        return MappingProxyType(self._topics.by_id)

    def validate_new_topic(self, name: str, partitions: int,
                           configs: dict[str, str] | None = None) -> TopicInfo:
        """Every check ``create_topic`` makes, without creating anything (CreateTopics
        validate_only). Returns the TopicInfo the topic would get."""
        validate_topic_name(name)
        if name in self._topics:
            raise TopicExistsError(f"Topic '{name}' already exists.")
        unified = _unify(name)
        for other in self._topics:
            if _unify(other) == unified:
                raise InvalidTopicError(
                    f"Topic '{name}' collides with existing topic: {other}")
        if not isinstance(partitions, int) or partitions < 1:
            raise InvalidPartitionsError(f"Number of partitions must be larger than 0, got {partitions}.")
        overrides = {str(k): str(v) for k, v in (configs or {}).items()}
        topic_config = self._topic_config(self.broker_config, overrides)  # validates
        return TopicInfo(name=name, topic_id=uuid.uuid4(), num_partitions=partitions,
                         config=topic_config, overrides=overrides)

    def create_topic(self, name: str, partitions: int, configs: dict[str, str] | None = None,
                     defer: bool = False) -> TopicInfo:
        """Create a topic and its partitions' logs. ``defer``: the topic exists (topics.json)
        at once and its partitions are made as deferred ones load: on first use or by
        load_pending (10,000 partitions take seconds of file creation, which a broker must
        not spend in one go on its event loop; Kafka's brokers make them asynchronously too)."""
        info = self.validate_new_topic(name, partitions, configs)
        if defer:
            pick = self._log_dir_picker()
            for p in range(partitions):
                self._pending[(name, p)] = _PendingLog(os.path.join(pick(), f"{name}-{p}"), None, None)
            self._topics[name] = info
            try:
                self._write_metadata()
            except BaseException:
                self._topics.pop(name, None)
                for p in range(partitions):
                    self._pending.pop((name, p), None)
                raise
            self._partitions_added()
            return info
        topic_config = info.config
        created = []
        pick = self._log_dir_picker()
        try:
            for p in range(partitions):
                path = os.path.join(pick(), f"{name}-{p}")
                log = Log(path, topic_config, self.clock, topic=name, partition=p,
                          producer_id_expiration_ms=self._pid_expiration_ms(), leader_epoch=LEADER_EPOCH,
                          topic_id=info.topic_id, sync_new_files=False)
                self._adopt(log)
                self._logs[(name, p)] = log
                created.append(log)
            # the new partitions' files without an fsync, as a deferred topic's are made:
            # empty, they lose nothing in a crash, and the next start makes a partition
            # whose directory is missing and rewrites a torn file. Not a syncfs of the log
            # dir either: that flushes every dirty page of the filesystem (the records
            # producers wrote, other programs' files) while the event loop waits, 0.5 s
            # for 1 GB dirty, every client stalled. The topic exists once topics.json is
            # written (with fsync).
            self._topics[name] = info
            self._write_metadata()
        except BaseException:
            self._topics.pop(name, None)
            for log in created:
                self._logs.pop((name, log.partition), None)
                log.delete()
            raise
        self._partitions_added()
        return info

    def _partitions_added(self) -> None:
        for callback in self.on_new_partitions:
            callback()

    def delete_topic(self, name: str) -> None:
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        for p in range(info.num_partitions):
            if (name, p) in self.moves:
                self.cancel_move((name, p), "the topic is deleted")
            pending = self._pending.get((name, p))
            if pending is not None and not os.path.isdir(pending.path):
                del self._pending[(name, p)]  # never made: nothing on disk
            else:
                self._load_deferred((name, p))
            for callback in self.on_partition_deleted:
                callback(name, p)
        logs = [self._logs.pop((name, p)) for p in range(info.num_partitions) if (name, p) in self._logs]
        renamed = []
        for log in logs:
            log.close_handlers()
            target = f"{log.dir}.{uuid.uuid4().hex}-delete"
            try:
                os.rename(log.dir, target)
                renamed.append(target)
            except FileNotFoundError:
                pass
        del self._topics[name]
        self._write_metadata()
        for path in renamed:
            shutil.rmtree(path, ignore_errors=True)

    def set_topic_config(self, name: str, overrides: dict[str, str]) -> TopicInfo:
        """Replace the topic's override set (validated), persist it, apply it to its logs."""
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError(f"topic {name!r} does not exist")
        overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        new_config = self._topic_config(self.broker_config, overrides)
        old = (info.config, info.overrides)
        info.config, info.overrides = new_config, overrides
        try:
            self._write_metadata()
        except BaseException:
            info.config, info.overrides = old
            raise
        for p in range(info.num_partitions):
            log = self._logs.get((name, p))
            if log is not None:
                log.update_config(new_config)
        return info

    @property
    def logs_by_key(self) -> dict[tuple[str, int], Log]:
        """{(topic, partition): Log} of the logs loaded so far, itself, not a copy as
        loaded_logs() gives: to read, not to change (the produce handler's compiled loop
        finds partitions in it; one not in it goes through get_log, which also loads a
        deferred partition)."""
        return self._logs

    def get_log(self, topic: str, partition: int) -> Log:
        log = self._logs.get((topic, partition))
        if log is None and self._pending:
            log = self._load_deferred((topic, partition))
        if log is None:
            raise UnknownTopicOrPartitionError(
                f"This server does not host this topic-partition: {topic}-{partition}")
        return log

    def move_partition(self, topic: str, partition: int, dest: str) -> bool:
        """Move a partition's directory into the log dir ``dest`` (AlterReplicaLogDirs).
        False when it is there already (a move elsewhere in progress is cancelled, as
        Kafka drops a future replica whose destination changed). On the same filesystem
        the log is flushed and closed cleanly, its directory renamed into ``dest`` (one
        atomic rename: after a crash the partition is in exactly one log dir) and reopened
        there without recovery. On another filesystem a copy starts in the background
        (storage.partition_move; :meth:`advance_moves` drives it, :meth:`finish_move`
        switches over) and True is returned at once, as Kafka answers before its future
        replica has caught up. Raises LogDirNotFoundError for a path that is not a log
        dir, UnknownTopicOrPartitionError, and KafkaStorageError while the cleaner works
        on the partition (nothing moved)."""
        dest = os.path.abspath(dest)
        if dest not in self.log_dirs:
            raise LogDirNotFoundError(f"Log dir {dest} is not found in the config.")
        log = self.get_log(topic, partition)
        src = self._dir_of(log)
        key = (topic, partition)
        current = self.moves.get(key)
        if current is not None:
            if current.dest_root == dest:
                return True  # under way
            self.cancel_move(key, f"its destination changed to {dest}")
        if src == dest:
            return False
        if key in self.busy:
            raise KafkaStorageError(f"{topic}-{partition} is being cleaned; move it to {dest} afterwards")
        target = os.path.join(dest, os.path.basename(log.dir))
        if os.path.exists(target):
            raise KafkaStorageError(f"cannot move {topic}-{partition} to {dest}: {target} exists")
        if not self.same_filesystem(src, dest):
            self.moves[key] = PartitionMove(topic, partition, log.dir, dest)
            logger.info("copying partition %s-%d from log dir %s to %s (another filesystem)",
                        topic, partition, src, dest)
            return True
        log.flush()
        log.close()
        where = target
        try:
            os.rename(log.dir, target)
        except OSError as e:
            logger.error("could not move %s-%d from %s to %s: %s", topic, partition, src, dest, e)
            where = log.dir
        else:
            fsync_dir(src)
            fsync_dir(dest)
        self._reopen(log, where)
        if where != target:
            raise KafkaStorageError(f"could not move {topic}-{partition} from {src} to {dest}")
        logger.info("moved partition %s-%d from log dir %s to %s", topic, partition, src, dest)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()
        return True

    def _reopen(self, log: Log, path: str) -> None:
        """Load a cleanly closed partition again from ``path`` (its directory as it was,
        or where a move put it), with the values it closed with, without recovery."""
        del self._logs[(log.topic, log.partition)]
        self._load_partition(log.topic, log.partition, _PendingLog(path, log.recovery_point, log.log_start_offset),
                             True)

    @staticmethod
    def same_filesystem(a: str, b: str) -> bool:
        """Whether a rename can move a directory from ``a`` to ``b`` (tests replace it to
        take the copying path on one filesystem)."""
        return os.stat(a).st_dev == os.stat(b).st_dev

    def cancel_move(self, key: tuple[str, int], why: str) -> None:
        move = self.moves.pop(key, None)
        if move is None:
            return
        logger.info("cancelled the move of %s-%d to %s: %s", key[0], key[1], move.dest_root, why)
        move.cancel()
        if move.pending is not None and not move.pending.done():
            self._dying_moves.append(move)  # its copy is removed once the pass has stopped
        else:
            move.discard()

    def advance_moves(self) -> int:
        """One step of every copy under way (called on the event loop every few hundred
        ms): start the next pass on the copy thread, or, once a pass copied little,
        switch over (:meth:`finish_move`). Returns the moves finished."""
        for move in [m for m in self._dying_moves if m.pending is None or m.pending.done()]:
            self._dying_moves.remove(move)
            move.discard()
        finished = 0
        for key, move in list(self.moves.items()):
            if move.pending is not None:
                if not move.pending.done():
                    continue
                error = move.pending.exception()
                move.pending = None
                if error is not None:
                    logger.error("the move of %s-%d to %s failed: %s", key[0], key[1], move.dest_root, error)
                    self.cancel_move(key, "the copy failed")
                    continue
                move.copied_leo = move.pass_leo
            if (move.last_copied is not None and (move.last_copied < FINAL_DELTA_BYTES or move.passes >= MAX_PASSES)
                    and key not in self.busy):
                try:
                    self.finish_move(move)
                    finished += 1
                except Exception as e:
                    logger.error("the move of %s-%d to %s failed at the switch: %s", key[0], key[1],
                                 move.dest_root, e)
                    self.cancel_move(key, "the switch failed")
                continue
            if self._move_pool is None:
                from concurrent.futures import ThreadPoolExecutor

                self._move_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="chronolog-move")
            move.pass_leo = self.get_log(*key).log_end_offset
            move.throttle.rate = float(getattr(self.broker_config, "replica_alter_log_dirs_io_max_bytes_per_second",
                                               float("inf")))
            move.pending = self._move_pool.submit(move.copy_pass)
        return finished

    def finish_move(self, move: PartitionMove) -> None:
        """The switch of a copied partition (the steps and what a crash leaves are in
        storage.partition_move). Runs on the event loop with the log closed throughout."""
        key = (move.topic, move.partition)
        log = self.get_log(move.topic, move.partition)
        src = self._dir_of(log)
        target = os.path.join(move.dest_root, os.path.basename(log.dir))
        log.flush()
        log.close()
        move.throttle = None  # the last pass runs on the event loop: never asleep
        try:
            move.copy_pass()
            move.sync()
            os.rename(move.future_dir, target)
            fsync_dir(move.dest_root)
        except BaseException:
            self._reopen(log, log.dir)
            raise
        del self.moves[key]
        doomed: str | None = f"{log.dir}.{uuid.uuid4().hex}-delete"
        try:
            os.rename(log.dir, doomed)
            fsync_dir(src)
        except OSError as e:  # the partition is served from its new dir all the same
            logger.error("moved %s-%d to %s but could not remove its old directory %s (%s): remove it before "
                         "the next start", move.topic, move.partition, move.dest_root, log.dir, e)
            doomed = None
        self._reopen(log, target)
        if doomed is not None:
            shutil.rmtree(doomed, ignore_errors=True)
        logger.info("moved partition %s-%d from log dir %s to %s (copied in %d passes)", move.topic,
                    move.partition, src, move.dest_root, move.passes)
        self.checkpoint_recovery_points()
        self.checkpoint_log_start_offsets()

    def logs(self) -> dict[tuple[str, int], Log]:
        """Every partition's log (deferred ones are loaded first)."""
        self._load_all_pending()
        return dict(self._logs)

    def loaded_logs(self) -> dict[tuple[str, int], Log]:
        """The logs loaded so far: for background work (cleaner, metrics) that can wait
        for a deferred partition rather than load them all at once."""
        return dict(self._logs)

    def hosted(self) -> set[tuple[str, int]]:
        """Every partition this broker hosts, loaded or not."""
        return set(self._logs) | set(self._pending)

    # ------------------------------------------------------------------ flushing
    def start_flushes(self) -> list[LogFlush]:
        """The periodic flush policy, begun: each log's flush on roll, or for a log whose
        ``flush.ms`` has passed, its flush up to the log end (Log.start_rolled_flush,
        Log.start_flush), for ``fsync_flushes`` on a worker thread and then
        ``finish_flushes``: the broker's periodic flush, which must not hold the event
        loop for the fsyncs (Kafka's log flusher is a thread of its own too)."""
        flushes = []
        now = self.clock.monotonic_ms()
        for log in self._background_logs():
            try:
                flush_ms = log.flush_interval_ms
                if flush_ms is not None and log.unflushed_messages > 0 and now - log.last_flush_ms >= flush_ms:
                    flush = log.start_flush(log.log_end_offset)
                else:
                    flush = log.start_rolled_flush()
            except OSError as e:  # a segment file gone or a disk failing: the next pass tries again
                logger.error("%s-%d: cannot begin its flush (the next pass tries again): %s",
                             log.topic, log.partition, e)
                continue
            if flush is not None:
                flushes.append(flush)
        return flushes

    def finish_flushes(self, flushes: list[LogFlush]) -> set[Log]:
        """After ``fsync_flushes``: each log's recovery point moved (or an error line naming
        the file; the next pass flushes again), and the logs left with no background work
        forgotten by the periodic passes. The logs flushed."""
        done = set()
        for flush in flushes:
            if flush.error is not None:
                logger.error("%s-%d: not flushed (the next pass tries again): %s",
                             flush.log.topic, flush.log.partition, flush.error)
            elif flush.log.finish_flush(flush):
                done.add(flush.log)
        for log in self._background_logs():
            if not log.has_background_work():
                self._background.discard(log)
        return done

    def flush_due(self) -> int:
        """The periodic flush policy (rolled segments, and ``flush.ms`` per log, visiting
        the logs that may have background work, not every log) here and now, the fsyncs
        on this thread; the broker takes it apart (``start_flushes``). Returns the logs
        flushed."""
        flushes = self.start_flushes()
        fsync_flushes(flushes)
        return len(self.finish_flushes(flushes))

    # ------------------------------------------------------------------ retention
    def cleanup_logs(self) -> int:
        """One retention pass over every log (``log.retention.check.interval.ms``)."""
        now = self.clock.time_ms()
        deleted = 0
        for (topic, p), log in list(self._logs.items()):
            if log.closed or (topic, p) in self.busy:
                continue
            try:
                deleted += log.delete_old_segments(now)
            except Exception:  # keep going with the other logs
                logger.exception("retention failed for %r", log)
        if deleted:
            self.checkpoint_log_start_offsets()
        return deleted

    def delete_due_files(self) -> int:
        """Remove the files of deleted segments whose ``file.delete.delay.ms`` passed
        (visiting the logs that may have background work: a tick costs nothing per idle
        partition)."""
        now = self.clock.time_ms()
        n = 0
        for log in self._background_logs():
            if log.pending_deletes:
                try:
                    n += log.delete_due_files(now)
                except OSError:
                    logger.exception("could not remove deleted segment files of %r", log)
                    continue
            if not log.has_background_work():
                self._background.discard(log)
        return n

    # ------------------------------------------------------------------ checkpoints
    def _dir_of(self, log: Log) -> str:
        return os.path.dirname(os.path.abspath(log.dir))

    def _by_dir(self, include_closed: bool) -> dict[str, list[Log]]:
        out: dict[str, list[Log]] = {d: [] for d in self.log_dirs}
        for log in self._logs.values():
            if include_closed or not log.closed:
                out.setdefault(self._dir_of(log), []).append(log)
        return out

    def _pending_by_dir(self) -> dict[str, dict[tuple[str, int], "_PendingLog"]]:
        out: dict[str, dict] = {}
        for key, pending in self._pending.items():
            out.setdefault(os.path.dirname(os.path.abspath(pending.path)), {})[key] = pending
        return out

    def checkpoint_recovery_points(self, include_closed: bool = False) -> None:
        """Write ``recovery-point-offset-checkpoint`` in every log dir (a deferred
        partition keeps the value it was started with: nothing of it has changed)."""
        pending = self._pending_by_dir()
        for d, logs in self._by_dir(include_closed).items():
            points = {k: pl.recovery_point for k, pl in pending.get(d, {}).items() if pl.recovery_point is not None}
            points.update({(log.topic, log.partition): log.recovery_point for log in logs})
            write_checkpoint(os.path.join(d, RECOVERY_POINT_CHECKPOINT), points)

    def checkpoint_log_start_offsets(self, include_closed: bool = False) -> None:
        """Write ``log-start-offset-checkpoint`` in every log dir (as Kafka: only the
        partitions whose log start offset is above their first segment's base)."""
        pending = self._pending_by_dir()
        for d, logs in self._by_dir(include_closed).items():
            starts = {k: pl.log_start_offset for k, pl in pending.get(d, {}).items()
                      if pl.log_start_offset is not None}
            starts.update({(log.topic, log.partition): log.log_start_offset for log in logs
                           if log.log_start_offset > log.first_base_offset})
            write_checkpoint(os.path.join(d, LOG_START_OFFSET_CHECKPOINT), starts)

    def flush_all(self) -> None:
        for log in self._logs.values():
            if not log.closed:
                log.flush()

    # ------------------------------------------------------------------ internals
    def _next_log_dir(self) -> str:
        return self._log_dir_picker()()

    def _log_dir_picker(self) -> Callable[[], str]:
        """Picks the log dir with the fewest partitions (loaded or deferred), counting
        each pick: one count for a whole topic's partitions, not one per partition."""
        if len(self.log_dirs) == 1:
            return lambda: self.log_dirs[0]
        counts = {d: 0 for d in self.log_dirs}
        for parent in [os.path.dirname(os.path.abspath(log.dir)) for log in self._logs.values()] + [
                os.path.dirname(os.path.abspath(pl.path)) for pl in self._pending.values()]:
            if parent in counts:
                counts[parent] += 1

        def pick() -> str:
            d = min(self.log_dirs, key=lambda d: counts[d])  # min keeps the first of equals
            counts[d] += 1
            return d
        return pick

    def _read_newest(self, name: str, version: int) -> dict | None:
        """The JSON document ``name`` with the highest ``generation`` over the log dirs
        (unreadable or unknown-format copies are logged and skipped); leftover ``.tmp``
        files of an interrupted write are removed."""
        best = None
        for d in self.log_dirs:
            path = os.path.join(d, name)
            try:
                with open(path, "rb") as f:
                    doc = json.loads(f.read())
            except FileNotFoundError:
                continue
            except (OSError, ValueError) as e:
                logger.error("cannot read %s: %s", path, e)
                continue
            if not isinstance(doc, dict) or doc.get("version") != version:
                logger.error("ignoring %s: unknown format", path)
                continue
            if best is None or doc.get("generation", 0) > best.get("generation", 0):
                best = doc
        for d in self.log_dirs:
            tmp = os.path.join(d, name + ".tmp")
            if os.path.exists(tmp):
                os.unlink(tmp)
        return best

    def _read_metadata(self) -> dict[str, dict]:
        best = self._read_newest(TOPICS_FILE, _METADATA_VERSION)
        if best is None:
            return {}
        self._generation = int(best.get("generation", 0))
        return dict(best.get("topics") or {})

    def _write_metadata(self) -> None:
        self._generation += 1
        doc = {
            "version": _METADATA_VERSION,
            "generation": self._generation,
            "topics": {
                name: {"topic_id": str(info.topic_id), "partitions": info.num_partitions,
                       "configs": dict(sorted(info.overrides.items()))}
                for name, info in sorted(self._topics.items())
            },
        }
        data = json.dumps(doc, indent=1, sort_keys=False).encode()
        for d in self.log_dirs:
            atomic_write(os.path.join(d, TOPICS_FILE), data)


    # ------------------------------------------------------------------ partitions (CreatePartitions)
    def create_partitions(self, name: str, new_total: int, validate_only: bool = False) -> TopicInfo:
        """Raise the topic's partition count to ``new_total`` (Kafka's CreatePartitions:
        only an increase). The new partitions get empty logs at once; the new count
        persists in the topic metadata. Raises UnknownTopicOrPartitionError or
        InvalidPartitionsError (messages as Kafka's controller words them)."""
        info = self._topics.get(name)
        if info is None:
            raise UnknownTopicOrPartitionError("This server does not host this topic-partition.")
        current = info.num_partitions
        if not isinstance(new_total, int) or new_total == current:
            raise InvalidPartitionsError(f"Topic already has {current} partition(s).")
        if new_total < current:
            raise InvalidPartitionsError(
                f"The topic {name} currently has {current} partition(s); {new_total} would not be an increase.")
        if validate_only:
            return TopicInfo(name=info.name, topic_id=info.topic_id, num_partitions=new_total,
                             config=info.config, overrides=dict(info.overrides))
        created = []
        pick = self._log_dir_picker()
        try:
            for p in range(current, new_total):
                path = os.path.join(pick(), f"{name}-{p}")
                log = Log(path, info.config, self.clock, topic=name, partition=p,
                          producer_id_expiration_ms=self._pid_expiration_ms(), leader_epoch=LEADER_EPOCH,
                          topic_id=info.topic_id)
                self._adopt(log)
                self._logs[(name, p)] = log
                created.append(log)
            info.num_partitions = new_total
            self._topics.version += 1  # changed in place (not through the table's item assignment)
            self._write_metadata()
        except BaseException:
            info.num_partitions = current
            for log in created:
                self._logs.pop((name, log.partition), None)
                log.delete()
            raise
        logger.info("topic %s: partitions %d -> %d", name, current, new_total)
        self._partitions_added()
        return info

    # ------------------------------------------------------------------ dynamic broker configs
    @property
    def static_broker_config(self):
        """The broker config as started (file, env, overrides), without dynamic configs."""
        return self.__dict__.get("_static_broker_config", self.broker_config)

    @property
    def dynamic_broker_configs_ignored(self) -> bool:
        """True when the stored dynamic broker configs did not load at start (invalid
        together): the file is left as it is until an AlterConfigs replaces it."""
        return bool(self.__dict__.get("_dynamic_ignored"))

    def dynamic_broker_configs(self) -> tuple[dict[str, str], dict[str, str]]:
        """(this broker's dynamic configs, the dynamic cluster defaults)."""
        return (dict(self.__dict__.get("_dynamic_broker", {})),
                dict(self.__dict__.get("_dynamic_default", {})))

    def load_dynamic_broker_configs(self) -> None:
        """Read ``__chronolog_dynamic_broker_configs.json`` (the newest generation over the
        log dirs) and make the effective broker config the static one with them laid over
        it. Called by ``startup`` before any topic config is resolved. An invalid file is
        logged and ignored (the static config applies)."""
        static = self.static_broker_config
        best = self._read_newest(DYNAMIC_BROKER_CONFIGS_FILE, 1)
        self.__dict__["_static_broker_config"] = static
        if best is None:
            return
        from config.describe import effective_broker_config, is_dynamic, listener_ssl_name

        layers = []
        for section in ("broker", "default"):
            props = {}
            for k, v in (best.get(section) or {}).items():
                if is_dynamic(k) and (section == "broker" or not listener_ssl_name(k)):
                    props[str(k)] = str(v)
                else:  # as Kafka: non-dynamic configs found in the dynamic store are ignored
                    logger.warning("ignoring %s=%s in %s: not a dynamically updatable broker config",
                                   k, v, DYNAMIC_BROKER_CONFIGS_FILE)
            layers.append(props)
        per_broker, default = layers
        self.__dict__["_dynamic_generation"] = int(best.get("generation", 0))

        try:
            effective = effective_broker_config(static, default, per_broker)
        except Exception as e:
            logger.error("ignoring the dynamic broker configs in %s: %s", DYNAMIC_BROKER_CONFIGS_FILE, e)
            self.__dict__["_dynamic_ignored"] = True
            return
        self.__dict__["_dynamic_broker"] = per_broker
        self.__dict__["_dynamic_default"] = default
        self.broker_config = effective
        logger.info("dynamic broker configs: %s; cluster defaults: %s", per_broker or "{}", default or "{}")

    def _pid_expiration_ms(self):
        return getattr(self.broker_config, "producer_id_expiration_ms", None)

    def set_dynamic_broker_configs(self, per_broker: dict[str, str] | None = None,
                                   default: dict[str, str] | None = None,
                                   validate_only: bool = False):
        """Replace this broker's dynamic configs and/or the dynamic cluster defaults
        (None keeps the current set). The combined config and every topic's re-resolved
        config are validated first (ConfigError); then the file is written atomically in
        every log dir, the effective broker config replaced and every open log given its
        topic's new config (topic overrides still win). Returns the effective config."""
        from config.describe import effective_broker_config

        cur_broker, cur_default = self.dynamic_broker_configs()
        new_broker = cur_broker if per_broker is None else {str(k): str(v) for k, v in per_broker.items()}
        new_default = cur_default if default is None else {str(k): str(v) for k, v in default.items()}
        static = self.static_broker_config
        effective = effective_broker_config(static, new_default, new_broker)
        new_configs = {name: self._topic_config(effective, info.overrides) for name, info in self._topics.items()}
        if validate_only:
            return effective
        generation = int(self.__dict__.get("_dynamic_generation", 0)) + 1
        doc = {"version": 1, "generation": generation,
               "broker": dict(sorted(new_broker.items())), "default": dict(sorted(new_default.items()))}
        data = json.dumps(doc, indent=1).encode()
        for d in self.log_dirs:
            atomic_write(os.path.join(d, DYNAMIC_BROKER_CONFIGS_FILE), data, mode=0o600)  # may hold TLS key passwords
        self.__dict__["_static_broker_config"] = static
        self.__dict__["_dynamic_broker"] = new_broker
        self.__dict__["_dynamic_default"] = new_default
        self.__dict__["_dynamic_generation"] = generation
        self.broker_config = effective
        for name, cfg in new_configs.items():
            info = self._topics[name]
            info.config = cfg
            for p in range(info.num_partitions):
                log = self._logs.get((name, p))
                if log is not None:
                    log.producer_id_expiration_ms = self._pid_expiration_ms()
                    log.update_config(cfg)
        logger.info("dynamic broker configs now %s; cluster defaults %s", new_broker or "{}", new_default or "{}")
        return effective


DYNAMIC_BROKER_CONFIGS_FILE = "__chronolog_dynamic_broker_configs.json"
