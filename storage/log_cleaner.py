"""The log cleaner service (Kafka's ``LogCleaner`` + ``LogCleanerManager``): decides which
compacted partition to clean next, runs the clean in a worker process, swaps the result
in on the broker's thread, and keeps each partition's cleaner checkpoint.

What it owns: the ``cleaner-offset-checkpoint`` file of each log dir (format in
:mod:`storage.checkpoint`), the cleaning state of every partition (in progress,
aborted, uncleanable after an error) and the worker processes. What it touches: logs,
through :meth:`storage.log.Log.replace_segments`, and ``LogManager.busy`` (retention
skips a partition while its clean runs).

Choosing a log (``grab_filthiest``, Kafka's grabFilthiestCompactedLog), among the logs
whose ``cleanup.policy`` includes ``compact``:

* first dirty offset: the checkpoint, reset to the log start offset when it is below it
  or past the log end;
* first uncleanable offset: the lowest of the last stable offset (never past an open
  transaction or the high watermark), the active segment's base offset and, with
  ``min.compaction.lag.ms``, the base offset of the first dirty segment whose largest
  record timestamp is younger than the lag (KIP-58: record time, not file time); rounded
  down to a segment boundary;
* dirty ratio: bytes of the segments in [first dirty, first uncleanable) over those plus
  the clean segments below;
* ``max.compaction.lag.ms`` (KIP-354): a log whose first dirty segment's first batch
  timestamp is older than the lag must be cleaned now, whatever its ratio;
* eligible: dirty ratio > ``min.cleanable.dirty.ratio``, or must be cleaned now (and has
  dirty bytes); the one with the highest ratio is cleaned.

Running: up to ``log.cleaner.threads`` worker processes (spawned on first need; each
gets ``log.cleaner.dedupe.buffer.size / threads`` for its offset map, sized down to what
the dirty range can hold, and half the I/O buffer and throttle). A worker reads segment
files and writes ``.cleaned`` files only (:mod:`storage.cleaner`), so the event loop
never waits on a clean; the swap, a few renames and an fsync of the directory, runs on
the loop when the result arrives, after checking that the segments it replaces are still
the log's. A worker dies with the broker (``PR_SET_PDEATHSIG``), so no clean outlives
it. After a clean the next choice is made at once; when nothing is eligible, after
``log.cleaner.backoff.ms``. Time comes from the injected clock; ``inline=True`` runs the
clean in the calling thread (tests, no processes).

Deleting a topic aborts its partitions' cleans (the result is dropped). An error while
cleaning marks the partition uncleanable (logged with the reason) until restart, as
Kafka does; it is counted in the metrics.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import signal
import traceback
from dataclasses import dataclass

from storage.checkpoint import CLEANER_OFFSET_CHECKPOINT, CheckpointError, read_checkpoint, write_checkpoint
from storage.cleaner import (CLEANED_SUFFIX, Cleaner, CleaningAborted, CleanResult, CleanTask,
                             SegmentInfo, Throttler, map_slots, new_offset_map)

__all__ = ["LogCleaner", "LogToClean", "cleanable_offsets", "build_task", "CleanerMetrics"]

logger = logging.getLogger(__name__)

_LONG_MAX = (1 << 63) - 1


# --------------------------------------------------------------------------- choosing


def segments_between(log, frm: int, to: int) -> list:
    """Kafka's logSegments(from, to): the segment holding ``frm`` and the next ones whose
    base offset is below ``to``."""
    if frm >= to:
        return []
    segs = log.segments
    out = []
    for i, s in enumerate(segs):
        nxt = segs[i + 1].base_offset if i + 1 < len(segs) else None
        if s.base_offset >= to:
            break
        if nxt is not None and nxt <= frm:
            continue
        out.append(s)
    return out


def cleanable_offsets(log, checkpoint: int | None, now_ms: int) -> tuple[int, int, bool]:
    """(first dirty offset, first uncleanable offset, whether the checkpoint was reset)."""
    lso = log.log_start_offset
    cp = lso if checkpoint is None else checkpoint
    force = False
    if cp < lso:
        if not (log.config.compact and log.config.delete):
            logger.warning("%s-%d: resetting the first dirty offset to the log start offset %d: the checkpointed "
                           "offset %d is below it", log.topic, log.partition, lso, cp)
        cp, force = lso, True
    elif cp > log.log_end_offset:
        logger.warning("%s-%d: the cleaner checkpoint %d is past the log end offset %d; resetting it to the log "
                       "start offset %d", log.topic, log.partition, cp, log.log_end_offset, lso)
        cp, force = lso, True
    bounds = [log.last_stable_offset, log.active_segment.base_offset]
    min_lag = max(int(log.config.min_compaction_lag_ms), 0)
    if min_lag > 0:
        for s in log.non_active_segments_from(cp):
            if s.largest_timestamp > now_ms - min_lag:
                bounds.append(s.base_offset)
                break
    return cp, min(bounds), force


def max_compaction_delay(log, first_dirty: int, now_ms: int) -> int:
    """KIP-354: how long past ``max.compaction.lag.ms`` the oldest dirty record is (its
    segment's first batch timestamp); 0 when none is."""
    stamps = [s.first_batch_timestamp() for s in log.non_active_segments_from(first_dirty)]
    stamps = [t for t in stamps if t > 0]
    earliest = min(stamps) if stamps else _LONG_MAX
    until = now_ms - max(int(log.config.max_compaction_lag_ms), 0)
    return until - earliest if earliest < until else 0


@dataclass
class LogToClean:
    tp: tuple
    log: object
    first_dirty: int
    first_uncleanable: int  # rounded down to a segment boundary
    clean_bytes: int
    cleanable_bytes: int
    need_now: bool
    compaction_delay_ms: int = 0

    @property
    def total_bytes(self) -> int:
        return self.clean_bytes + self.cleanable_bytes

    @property
    def ratio(self) -> float:
        return self.cleanable_bytes / self.total_bytes if self.total_bytes else 0.0


def log_to_clean(tp, log, checkpoint: int | None, now_ms: int) -> tuple[LogToClean, bool]:
    first_dirty, uncleanable, force = cleanable_offsets(log, checkpoint, now_ms)
    segs = log.non_active_segments_from(uncleanable)
    first_uncleanable = (segs[0] if segs else log.active_segment).base_offset
    cleanable = sum(s.size for s in segments_between(log, min(first_dirty, first_uncleanable), first_uncleanable))
    clean = sum(s.size for s in log.segments if s.base_offset < first_dirty)
    delay = max_compaction_delay(log, first_dirty, now_ms)
    return LogToClean(tp, log, first_dirty, first_uncleanable, clean, cleanable, delay > 0, delay), force


def build_task(log, ltc: LogToClean, now_ms: int) -> CleanTask:
    """What a worker needs to clean ``log`` (read on the broker's thread)."""
    segs = log.segments
    infos = []
    for i, s in enumerate(segs[:-1]):
        if s.base_offset >= ltc.first_uncleanable:
            break
        infos.append(SegmentInfo(s.base_offset, s.size, segs[i + 1].base_offset,
                                 s.offset_index.entries * s.offset_index.ENTRY_SIZE,
                                 s.time_index.entries * s.time_index.ENTRY_SIZE, s.max_timestamp_so_far))
    cfg = log.config
    return CleanTask(
        topic=log.topic, partition=log.partition, dir=log.dir, segments=infos,
        first_dirty_offset=ltc.first_dirty, first_uncleanable_offset=ltc.first_uncleanable, now_ms=now_ms,
        delete_retention_ms=int(cfg.delete_retention_ms), segment_bytes=int(cfg.segment_bytes),
        segment_index_bytes=int(cfg.segment_index_bytes), index_interval_bytes=int(cfg.index_interval_bytes),
        max_message_bytes=int(cfg.max_message_bytes),
        strategy=getattr(cfg, "compaction_strategy", "offset") or "offset",
        strategy_header=getattr(cfg, "compaction_strategy_header", "") or "",
        aborted=log.collect_aborted_txns(log.first_base_offset, ltc.first_uncleanable),
        producers=log.producer_state.last_records())


# --------------------------------------------------------------------------- workers


def _die_with_parent() -> None:
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # pragma: no cover - not Linux
        pass


def _worker_main(conn, abort, memory_bytes: int, load_factor: float, io_buffer_size: int, max_io: float) -> None:
    """A cleaner worker process: cleans the tasks it is sent, one at a time."""
    _die_with_parent()
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the broker stops it
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    import resource

    throttler = Throttler(max_io)
    maps: dict[bool, object] = {}

    def check_done():
        if abort.value:
            raise CleaningAborted()

    while True:
        try:
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        try:
            result = run_task(task, maps, memory_bytes, load_factor, io_buffer_size, throttler, check_done)
            result.stats.peak_rss_bytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
            answer = ("ok", result)
        except CleaningAborted:
            answer = ("aborted", None)
        except Exception as exc:
            answer = ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc())
        try:
            conn.send(answer)
        except OSError:  # the broker is gone (PR_SET_PDEATHSIG is on its way)
            return


def run_task(task: CleanTask, maps: dict, memory_bytes: int, load_factor: float, io_buffer_size: int,
             throttler, check_done, hook=None, compiled: bool = True) -> CleanResult:
    """Clean one task with a map from ``maps`` (reused between tasks; grown up to
    ``memory_bytes`` as the dirty ranges need, never more)."""
    versioned = task.strategy in ("timestamp", "header") and not (task.strategy == "header"
                                                                   and not task.strategy_header)
    limit = map_slots(memory_bytes, versioned)
    need = int((task.first_uncleanable_offset - task.first_dirty_offset) / load_factor) + 2
    slots = max(1, min(limit, need))
    m = maps.get(versioned)
    if m is None or m.slots < slots:
        maps.pop(versioned, None)
        m = maps[versioned] = new_offset_map(slots, versioned, compiled)
    cleaner = Cleaner(m, load_factor=load_factor, io_buffer_size=io_buffer_size, throttler=throttler,
                      check_done=check_done, hook=hook, compiled=compiled)
    return cleaner.clean(task)


class _Worker:
    """The broker's end of one worker process."""

    def __init__(self, index: int, memory_bytes: int, load_factor: float, io_buffer_size: int, max_io: float):
        self.index = index
        self.args = (memory_bytes, load_factor, io_buffer_size, max_io)
        self.proc = None
        self.conn = None
        self.abort = None
        self.busy_with = None  # LogToClean

    def alive(self) -> bool:
        return self.proc is not None and self.proc.is_alive()

    def start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        # multiprocessing's resource tracker start-up unblocks SIGINT/SIGTERM in the calling
        # thread; the broker keeps them blocked (one thread takes them with sigwait, see
        # broker.server.run), so its mask is put back
        mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
        try:
            parent, child = ctx.Pipe()
            self.abort = ctx.Value("i", 0, lock=False)
            self.proc = ctx.Process(target=_worker_main, args=(child, self.abort, *self.args),
                                    name=f"chronolog-log-cleaner-{self.index}", daemon=True)
            self.proc.start()
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        child.close()
        self.conn = parent
        logger.info("started log cleaner worker %d (pid %d)", self.index, self.proc.pid)

    def submit(self, task: CleanTask) -> None:
        if not self.alive():
            self.start()
        self.abort.value = 0
        self.conn.send(task)

    def poll(self):
        """The worker's answer, or None while it works; a dead worker answers 'died'."""
        try:
            if self.conn.poll(0):
                return self.conn.recv()
        except (EOFError, OSError):
            pass
        else:
            if self.alive():
                return None
        code = self.proc.exitcode if self.proc is not None else None
        return ("died", f"the cleaner worker process exited with code {code}", "")

    def stop(self, kill: bool = True) -> None:
        if self.proc is None:
            return
        try:
            if kill:
                self.proc.kill()
            else:
                self.conn.send(None)
            self.proc.join(5)
        except Exception:  # pragma: no cover
            pass
        try:
            self.conn.close()
        except Exception:  # pragma: no cover
            pass
        self.proc = self.conn = None


# --------------------------------------------------------------------------- the service


@dataclass
class CleanerMetrics:
    """What /metrics reports of the cleaner (Kafka's LogCleaner and LogCleanerManager
    gauges, plus running totals)."""

    runs: int = 0
    failures: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    messages_read: int = 0
    messages_written: int = 0
    last_clean_end_ms: int = 0  # wall-clock time the last clean was swapped in (0: none yet)
    last_clean_seconds: float = 0.0
    max_clean_seconds: float = 0.0
    clean_seconds_total: float = 0.0
    last_buffer_utilization: float = 0.0
    last_recopy_ratio: float = 0.0
    max_dirty_ratio: float = 0.0
    max_compaction_delay_ms: int = 0
    time_of_last_run_ms: int = 0  # the last time logs were considered
    dead_workers: int = 0
    peak_rss_bytes: int = 0


class LogCleaner:
    def __init__(self, log_manager, broker_config, clock, *, inline: bool = False, hook=None,
                 compiled: bool = True):
        self.lm = log_manager
        self.clock = clock
        self.inline = inline
        self.hook = hook  # tests: hook(step, **info) at each durable step of a clean and its swap
        self.compiled = compiled
        self.metrics = CleanerMetrics()
        self.in_progress: dict[tuple, str] = {}  # tp -> "cleaning" | "aborted"
        self.uncleanable: dict[str, set] = {}
        self.checkpoints: dict[str, dict] = {}
        self._workers: list[_Worker] = []
        self._inline_maps: dict = {}
        self._next_check_ms = 0
        self.reconfigure(broker_config)
        for d in self.lm.log_dirs:
            self.checkpoints[d] = self._read(d)
        self.lm.on_partition_deleted.append(self.abort)

    def reconfigure(self, cfg) -> None:
        self.cfg = cfg
        self.enabled = bool(cfg.log_cleaner_enable) and int(cfg.log_cleaner_threads) > 0
        threads = max(1, int(cfg.log_cleaner_threads))
        self.backoff_ms = int(cfg.log_cleaner_backoff_ms)
        self.load_factor = float(cfg.log_cleaner_io_buffer_load_factor)
        per = (int(cfg.log_cleaner_dedupe_buffer_size) // threads, self.load_factor,
               max(int(cfg.log_cleaner_io_buffer_size) // threads // 2, 64 * 1024),
               float(cfg.log_cleaner_io_max_bytes_per_second) / threads)
        if getattr(self, "_per_worker", None) is not None and (self._per_worker != per or self._threads != threads):
            logger.info("log cleaner settings now: %d worker(s), each with %d bytes of offset map and %s of I/O",
                        threads, per[0], "no limit" if per[3] >= 1e300 else f"{per[3]:.0f} bytes/s")
        # idle workers with other settings stop (started again on demand); busy ones finish first
        for w in list(self._workers):
            if w.busy_with is None and (w.args != per or w.index >= threads):
                w.stop()
                if w.index >= threads:
                    self._workers.remove(w)
        have = {w.index for w in self._workers}
        for i in range(threads):
            if i not in have:
                self._workers.append(_Worker(i, *per))
            else:
                w = next(w for w in self._workers if w.index == i)
                if w.busy_with is None:
                    w.args = per
        self._workers.sort(key=lambda w: w.index)
        self._threads = threads
        self._per_worker = per
        self._inline_throttler = Throttler(per[3])

    # ------------------------------------------------------------------ checkpoints
    def _path(self, d: str) -> str:
        return os.path.join(d, CLEANER_OFFSET_CHECKPOINT)

    def _read(self, d: str) -> dict:
        try:
            return read_checkpoint(self._path(d))
        except (CheckpointError, OSError) as e:
            logger.error("ignoring %s (its partitions are cleaned from their log start): %s", self._path(d), e)
            return {}

    def _dir_of(self, log) -> str:
        return os.path.dirname(os.path.abspath(log.dir))

    def checkpoint_of(self, tp) -> int | None:
        for cps in self.checkpoints.values():
            if tp in cps:
                return cps[tp]
        return None

    def _update_checkpoint(self, log, offset: int) -> None:
        d = self._dir_of(log)
        tp = (log.topic, log.partition)
        logs = self.lm.hosted()
        cps = {k: v for k, v in self.checkpoints.get(d, {}).items() if k in logs}
        cps[tp] = offset
        self.checkpoints[d] = cps
        try:
            write_checkpoint(self._path(d), cps)
        except OSError as e:
            logger.error("could not write %s: %s", self._path(d), e)

    # ------------------------------------------------------------------ choosing
    def grab_filthiest(self) -> LogToClean | None:
        now = self.clock.time_ms()
        self.metrics.time_of_last_run_ms = now
        candidates = []
        max_delay = 0
        for tp, log in self.lm.loaded_logs().items():  # a partition still loading waits a tick
            if log.closed or not log.config.compact or tp in self.in_progress:
                continue
            if tp in self.uncleanable.get(self._dir_of(log), ()):
                continue
            try:
                ltc, force = log_to_clean(tp, log, self.checkpoint_of(tp), now)
            except Exception as exc:
                logger.exception("%s-%d: cannot compute what to clean; marking it uncleanable", *tp)
                self._mark_uncleanable(log, f"cleanable offsets failed: {exc}")
                continue
            if force:
                self._update_checkpoint(log, ltc.first_dirty)
            max_delay = max(max_delay, ltc.compaction_delay_ms)
            if ltc.total_bytes > 0:
                candidates.append(ltc)
        self.metrics.max_compaction_delay_ms = max_delay
        self.metrics.max_dirty_ratio = max((c.ratio for c in candidates), default=0.0)
        eligible = [c for c in candidates
                    if (c.need_now and c.cleanable_bytes > 0) or c.ratio > float(c.log.config.min_cleanable_dirty_ratio)]
        if not eligible:
            return None
        best = max(eligible, key=lambda c: c.ratio)
        self.in_progress[best.tp] = "cleaning"
        self.lm.busy.add(best.tp)
        return best

    def _mark_uncleanable(self, log, why: str) -> None:
        d = self._dir_of(log)
        self.uncleanable.setdefault(d, set()).add((log.topic, log.partition))
        logger.error("%s-%d is marked uncleanable until the broker restarts: %s", log.topic, log.partition, why)

    def uncleanable_partitions(self) -> dict[str, int]:
        logs = self.lm.hosted()
        return {d: sum(1 for tp in self.uncleanable.get(d, ()) if tp in logs) for d in self.lm.log_dirs}

    # ------------------------------------------------------------------ running
    def abort(self, topic: str, partition: int) -> None:
        """Stop the clean of a partition (its topic is being deleted): its result is
        dropped when it comes back."""
        tp = (topic, partition)
        if self.in_progress.get(tp) == "cleaning":
            self.in_progress[tp] = "aborted"
            for w in self._workers:
                if w.busy_with is not None and w.busy_with.tp == tp and w.abort is not None:
                    w.abort.value = 1
        for d, cps in self.checkpoints.items():
            cps.pop(tp, None)
        for s in self.uncleanable.values():
            s.discard(tp)

    def tick(self) -> int:
        """Collect finished cleans (swapping them in), then start new ones when due.
        Returns the number of cleans swapped in. Called from the broker's loop."""
        done = 0
        if self.lm.broker_config is not self.cfg:  # dynamic broker configs changed (log.cleaner.*)
            self.reconfigure(self.lm.broker_config)
        for w in list(self._workers):
            if w.busy_with is not None:
                answer = w.poll()
                if answer is not None:
                    ltc, w.busy_with = w.busy_with, None
                    done += self._finish(ltc, answer)
                    self._next_check_ms = 0  # look again at once, as Kafka's cleaner thread does
                    if w.args != self._per_worker or w.index >= self._threads:
                        w.stop()  # reconfigured while it cleaned: restarted with the new settings on demand
                        if w.index >= self._threads:
                            self._workers.remove(w)
        if not self.enabled:
            return done
        now = self.clock.monotonic_ms()
        if now < self._next_check_ms:
            return done
        started = False
        for w in self._workers:
            if w.busy_with is not None:
                continue
            ltc = self.grab_filthiest()
            if ltc is None:
                break
            task = build_task(ltc.log, ltc, self.clock.time_ms())
            logger.info("cleaning %s-%d: offsets [%d, %d), dirty ratio %.2f%s", ltc.tp[0], ltc.tp[1], ltc.first_dirty,
                        ltc.first_uncleanable, ltc.ratio,
                        f", {ltc.compaction_delay_ms} ms past max.compaction.lag.ms" if ltc.need_now else "")
            try:
                w.submit(task)
            except Exception as exc:
                logger.error("could not start the cleaner worker: %s", exc)
                self._release(ltc.tp)
                self.metrics.dead_workers += 1
                break
            w.busy_with = ltc
            started = True
        if not started:
            self._next_check_ms = now + self.backoff_ms
        return done

    def clean_once(self) -> CleanResult | None:
        """Choose a log and clean it in this thread (``inline`` mode and tests): the same
        choice, task, clean and swap as the workers make. None when nothing is due."""
        ltc = self.grab_filthiest()
        if ltc is None:
            return None
        return self.clean_log(ltc)

    def clean_log(self, ltc: LogToClean) -> CleanResult | None:
        """Clean a log chosen by :meth:`grab_filthiest` in this thread and swap it in."""
        task = build_task(ltc.log, ltc, self.clock.time_ms())
        try:
            result = run_task(task, self._inline_maps, self._per_worker[0], self.load_factor, self._per_worker[2],
                              self._inline_throttler, lambda: None, hook=self.hook, compiled=self.compiled)
        except Exception as exc:
            self._finish(ltc, ("error", f"{type(exc).__name__}: {exc}", traceback.format_exc()))
            return None
        self._finish(ltc, ("ok", result))
        return result

    def _release(self, tp) -> None:
        self.in_progress.pop(tp, None)
        self.lm.busy.discard(tp)

    def _finish(self, ltc: LogToClean, answer) -> int:
        tp, log = ltc.tp, ltc.log
        state = self.in_progress.get(tp)
        self._release(tp)
        kind = answer[0]
        current = self.lm.loaded_logs().get(tp)
        if kind == "ok":
            result: CleanResult = answer[1]
            if state == "aborted" or current is not log or log.closed:
                logger.info("%s-%d: dropping a clean of a deleted or replaced log", *tp)
                self._drop_cleaned(log, result.groups)
                return 0
            return self._swap_in(ltc, result)
        if kind == "aborted":
            logger.info("%s-%d: clean aborted", *tp)
            return 0
        if state == "aborted" or current is not log:
            return 0
        self.metrics.failures += 1
        if kind == "died":
            self.metrics.dead_workers += 1
        logger.error("%s-%d: cleaning failed: %s%s", tp[0], tp[1], answer[1],
                     f"\n{answer[2]}" if answer[2] and kind != "error" else "")
        if kind == "error" and answer[2]:
            logger.debug("%s", answer[2])
        self._mark_uncleanable(log, answer[1])
        return 0

    def _drop_cleaned(self, log, groups) -> None:
        for g in groups:
            for ext in (".log", ".index", ".timeindex", ".txnindex"):
                try:
                    os.unlink(os.path.join(log.dir, f"{g.new_base:020d}{ext}{CLEANED_SUFFIX}"))
                except OSError:
                    pass

    def _swap_in(self, ltc: LogToClean, result: CleanResult) -> int:
        log = ltc.log
        hook = self.hook
        swapped = 0
        for i, g in enumerate(result.groups):
            try:
                log.replace_segments(g.new_base, g.old_bases,
                                     hook=None if hook is None else (lambda step, b=g.new_base: hook(step, base=b)))
            except ValueError as exc:
                logger.warning("%s-%d: not swapping in the cleaned segments: %s", log.topic, log.partition, exc)
                self._drop_cleaned(log, result.groups[i:])
                return 0
            swapped += 1
        self._update_checkpoint(log, result.end_offset)
        st = result.stats
        m = self.metrics
        m.runs += 1
        m.bytes_read += st.bytes_read
        m.bytes_written += st.bytes_written
        m.messages_read += st.messages_read
        m.messages_written += st.messages_written
        m.last_clean_end_ms = self.clock.time_ms()
        m.last_clean_seconds = st.elapsed_s
        m.max_clean_seconds = max(m.max_clean_seconds, st.elapsed_s)
        m.clean_seconds_total += st.elapsed_s
        m.last_buffer_utilization = st.buffer_utilization
        m.last_recopy_ratio = st.bytes_written / st.bytes_read if st.bytes_read else 0.0
        m.peak_rss_bytes = max(m.peak_rss_bytes, st.peak_rss_bytes)
        mb = 1024 * 1024
        logger.info(
            "cleaned %s-%d (dirty section [%d, %d)): %.1f MB of log in %.2f s (%.1f MB/s); offset map %.2f s for "
            "%.1f MB, %.0f%% full; %.1f MB -> %.1f MB (%d -> %d records)%s", log.topic, log.partition,
            ltc.first_dirty, result.end_offset, st.bytes_read / mb, st.elapsed_s, st.bytes_read / mb / st.elapsed_s,
            st.elapsed_map_s, st.map_bytes_read / mb, 100 * st.buffer_utilization, st.bytes_read / mb,
            st.bytes_written / mb, st.messages_read, st.messages_written,
            f"; {st.invalid_messages} keyless record(s) dropped" if st.invalid_messages else "")
        return 1

    # ------------------------------------------------------------------ life cycle
    def busy(self) -> bool:
        return any(w.busy_with is not None for w in self._workers)

    def shutdown(self) -> None:
        """Stop the workers (a clean under way is dropped: its .cleaned files are removed
        at the next start) and write the checkpoints."""
        for w in self._workers:
            w.stop(kill=True)
            if w.busy_with is not None:
                self._release(w.busy_with.tp)
                w.busy_with = None
        logs = self.lm.hosted()
        for d, cps in self.checkpoints.items():
            try:
                write_checkpoint(self._path(d), {k: v for k, v in cps.items() if k in logs})
            except OSError as e:
                logger.error("could not write %s: %s", self._path(d), e)
