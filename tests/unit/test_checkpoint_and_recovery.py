"""Checkpoint files, the clean-shutdown marker, and what startup scans (SPEC 1, 6)."""

import logging
import os
import struct
from types import SimpleNamespace

import pytest

from storage import segment as segment_mod
from storage.checkpoint import (
    CLEAN_SHUTDOWN_FILE,
    LOG_START_OFFSET_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
    CheckpointError,
    read_checkpoint,
    write_checkpoint,
)
from storage.clock import ManualClock
from storage.log import Log
from storage.log_manager import LogManager
from tests.unit.test_log_helpers import append, build_batch, topic_config

NOW = 1_700_000_000_000


# --------------------------------------------------------------------------- file format
def test_checkpoint_round_trip_and_format(tmp_path):
    p = str(tmp_path / "cp")
    assert read_checkpoint(p) == {}
    write_checkpoint(p, {("b", 1): 7, ("a", 0): 15, ("a.b-c_d", 10): 0})
    assert open(p).read() == "0\n3\na 0 15\na.b-c_d 10 0\nb 1 7\n"
    assert read_checkpoint(p) == {("a", 0): 15, ("b", 1): 7, ("a.b-c_d", 10): 0}
    assert not os.path.exists(p + ".tmp")
    write_checkpoint(p, {})
    assert open(p).read() == "0\n0\n" and read_checkpoint(p) == {}


@pytest.mark.parametrize("text, words", [
    ("1\n0\n", "version"),
    ("0\n", "truncated"),
    ("0\nx\n", "count"),
    ("0\n2\na 0 1\n", "2 entries"),
    ("0\n1\na 0\n", "topic partition offset"),
    ("0\n1\na zero 1\n", "non-integer"),
    ("0\n1\na 0 -5\n", "negative"),
])
def test_malformed_checkpoint_names_file_and_problem(tmp_path, text, words):
    p = tmp_path / RECOVERY_POINT_CHECKPOINT
    p.write_text(text)
    with pytest.raises(CheckpointError) as e:
        read_checkpoint(str(p))
    assert str(p) in str(e.value) and words in str(e.value)


# --------------------------------------------------------------------------- LogManager
def factory(broker, overrides):
    return topic_config(segment_bytes=int(overrides.get("segment.bytes", 2000)),
                        index_interval_bytes=100, segment_index_bytes=1200)


def manager(d, clock=None):
    m = LogManager(SimpleNamespace(log_dirs=[str(d)]), clock or ManualClock(NOW), topic_config_factory=factory)
    m.startup()
    return m


def fill(log, n_batches, t0=NOW - 100_000):
    for i in range(n_batches):
        append(log, [build_batch([(t0 + 10 * i + j, b"r%03d-%d" % (i, j) * 5) for j in range(3)])])


class ScanSpy:
    """Counts the segments whose batches are walked (recovered) during loading."""

    def __init__(self, monkeypatch):
        self.recovered = []
        self.scanned = []
        spy = self
        orig_recover = segment_mod.LogSegment.recover
        orig_scan = segment_mod.LogSegment._scan_and_index

        def recover(seg, *a, **kw):
            spy.recovered.append(seg.base_offset)
            return orig_recover(seg, *a, **kw)

        def scan(seg, *a, **kw):
            spy.scanned.append(seg.base_offset)
            return orig_scan(seg, *a, **kw)

        monkeypatch.setattr(segment_mod.LogSegment, "recover", recover)
        monkeypatch.setattr(segment_mod.LogSegment, "_scan_and_index", scan)


def test_clean_shutdown_writes_marker_and_checkpoints_and_startup_scans_nothing(tmp_path, monkeypatch):
    m = manager(tmp_path)
    m.create_topic("a", 2)
    m.create_topic("b", 1)
    fill(m.get_log("a", 0), 40)
    fill(m.get_log("a", 1), 5)
    log_a0 = m.get_log("a", 0)
    assert len(log_a0.segments) >= 3
    log_a0.maybe_increment_log_start_offset(10)
    ends = {tp: log.log_end_offset for tp, log in m.logs().items()}
    m.shutdown()

    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    assert read_checkpoint(str(tmp_path / RECOVERY_POINT_CHECKPOINT)) == ends
    # only the partitions whose start is above their first segment's base
    assert read_checkpoint(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)) == {("a", 0): 10}

    spy = ScanSpy(monkeypatch)
    m2 = manager(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists(), "the marker must go as soon as it is read"
    assert spy.recovered == [] and spy.scanned == [], "a clean startup must not walk the logs"
    assert {tp: log.log_end_offset for tp, log in m2.logs().items()} == ends
    a0 = m2.get_log("a", 0)
    assert a0.log_start_offset == 10 and a0.recovery_point == ends[("a", 0)]
    # max timestamps come back from the time indexes
    for old, new in zip(log_a0.segments, a0.segments):
        assert new.max_timestamp_so_far == old.max_timestamp_so_far
        assert new.offset_of_max_timestamp_so_far == old.offset_of_max_timestamp_so_far
    assert a0.offset_for_timestamp(NOW - 100_000 + 151) == (46, NOW - 100_000 + 151)
    assert a0.offset_for_timestamp(NOW - 100_000 + 155) == (48, NOW - 100_000 + 160)
    fill(a0, 1)
    m2.shutdown()


def test_unclean_startup_recovers_from_the_recovery_point_only(tmp_path, monkeypatch, caplog):
    m = manager(tmp_path)
    m.create_topic("a", 1)
    log = m.get_log("a", 0)
    fill(log, 30)
    m.flush_due()  # what the broker does in the background: rp = active base
    rp = log.recovery_point
    bases = [s.base_offset for s in log.segments]
    assert rp == bases[-1] and len(bases) >= 3
    fill(log, 30)  # more segments, not flushed
    later = [s.base_offset for s in log.segments if s.base_offset >= rp]
    assert len(later) >= 3
    m.checkpoint_recovery_points()
    end = log.log_end_offset
    for lg in m.logs().values():
        lg.close_handlers()  # crash: no marker, active indexes untrimmed

    spy = ScanSpy(monkeypatch)
    with caplog.at_level(logging.INFO):
        m2 = manager(tmp_path)
    assert spy.recovered == later, "exactly the segments from the recovery point on are recovered"
    log2 = m2.get_log("a", 0)
    assert log2.log_end_offset == end and log2.recovery_point == rp
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "a-0: recovering" in text and "recovered %d segment(s)" % len(later) in text


def test_crash_during_load_counts_as_unclean(tmp_path, monkeypatch):
    m = manager(tmp_path)
    m.create_topic("a", 1)
    fill(m.get_log("a", 0), 10)
    m.shutdown()
    assert (tmp_path / CLEAN_SHUTDOWN_FILE).exists()

    def boom(*a, **kw):
        raise RuntimeError("simulated crash while loading")

    with monkeypatch.context() as mp:
        mp.setattr(Log, "__init__", boom)
        with pytest.raises(RuntimeError):
            manager(tmp_path)
    assert not (tmp_path / CLEAN_SHUTDOWN_FILE).exists()
    spy = ScanSpy(monkeypatch)
    m3 = manager(tmp_path)
    assert spy.recovered, "after a crash during loading the next startup must recover"
    assert m3.get_log("a", 0).log_end_offset == 30


def test_corrupt_checkpoint_means_full_recovery(tmp_path, monkeypatch, caplog):
    m = manager(tmp_path)
    m.create_topic("a", 1)
    fill(m.get_log("a", 0), 20)
    n_segments = len(m.get_log("a", 0).segments)
    m.shutdown()
    (tmp_path / CLEAN_SHUTDOWN_FILE).unlink()
    (tmp_path / RECOVERY_POINT_CHECKPOINT).write_text("0\n5\ngarbage\n")
    spy = ScanSpy(monkeypatch)
    with caplog.at_level(logging.ERROR):
        m2 = manager(tmp_path)
    assert len(spy.recovered) == n_segments
    assert any(RECOVERY_POINT_CHECKPOINT in r.getMessage() for r in caplog.records)
    assert m2.get_log("a", 0).log_end_offset == 60


def test_retention_pass_checkpoints_the_new_log_start_offset(tmp_path):
    clock = ManualClock(NOW)
    m = manager(tmp_path, clock)
    m.create_topic("a", 1)
    log = m.get_log("a", 0)
    fill(log, 30, t0=NOW - 10 * 24 * 3600 * 1000)  # older than the 7-day default
    fill(log, 1, t0=NOW)
    n = len(log.segments)
    assert m.cleanup_logs() == n - 1
    assert log.log_start_offset == log.segments[0].base_offset
    # as Kafka: the start equals the first segment's base, so there is nothing to write
    assert read_checkpoint(str(tmp_path / LOG_START_OFFSET_CHECKPOINT)) == {}
    clock.advance(log.config.file_delete_delay_ms)
    assert m.delete_due_files() == n - 1
    assert not [f for f in os.listdir(log.dir) if f.endswith(".deleted")]


def _spy_visits(monkeypatch, name):
    """The logs whose ``name`` (a property or method of Log) the periodic passes read."""
    visited = []
    real = getattr(Log, name)
    if isinstance(real, property):
        monkeypatch.setattr(Log, name, property(lambda self: visited.append(self) or real.fget(self)))
    else:
        monkeypatch.setattr(Log, name, lambda self, *a: visited.append(self) or real(self, *a))
    return visited


def test_the_periodic_passes_visit_only_logs_with_background_work(tmp_path, monkeypatch):
    """delete_due_files (every 200 ms) and flush_due (every second) visit the logs that
    rolled, set segments aside or have a flush.ms, not each of the broker's partitions,
    and forget a log once it has nothing left for them."""
    clock = ManualClock(NOW)
    m = manager(tmp_path, clock)
    m.create_topic("a", 1)
    m.create_topic("idle", 50)
    m.create_topic("timed", 1)
    log, timed = m.get_log("a", 0), m.get_log("timed", 0)
    fill(log, 30, t0=NOW - 10 * 24 * 3600 * 1000)  # rolls: segments to fsync
    fill(log, 1, t0=NOW)
    flushes = _spy_visits(monkeypatch, "start_rolled_flush")
    m.flush_due()  # the first pass looks at every log once
    flushes.clear()
    m.flush_due()
    assert flushes == []  # the rolled segments were fsync'd: nothing left to flush
    timed.update_config(topic_config(segment_bytes=2000, flush_ms=1000))  # a flush.ms: visited from now on
    fill(timed, 1, t0=NOW)
    m.flush_due()
    assert set(flushes) == {timed}
    deleted = m.cleanup_logs()
    assert deleted > 0
    deletes = _spy_visits(monkeypatch, "pending_deletes")
    m.delete_due_files()
    deletes.clear()
    # the log that set segments aside (not due yet), and the one with a flush.ms
    assert m.delete_due_files() == 0 and set(deletes) == {log, timed}
    clock.advance(log.config.file_delete_delay_ms)
    deletes.clear()
    assert m.delete_due_files() == deleted and set(deletes) == {log, timed}
    deletes.clear()
    assert m.delete_due_files() == 0 and set(deletes) == {timed}  # forgotten: nothing left
    assert not [f for f in os.listdir(log.dir) if f.endswith(".deleted")]


# --------------------------------------------------------------------------- KIP-33 migration
@pytest.mark.parametrize("clean", [True, False])
def test_missing_time_index_of_a_segment_without_timestamps_is_migrated(tmp_path, clean):
    clock = ManualClock(NOW)
    cfg = topic_config(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=1200)
    log = Log(str(tmp_path / "old-0"), cfg, clock)
    for i in range(12):
        append(log, [build_batch([(-1, b"legacy%d" % i * 8), (-1, b"x")])])  # no timestamps
    segs = log.segments
    assert len(segs) >= 3
    victim = segs[1]
    last_offset = segs[2].base_offset - 1
    log.close()
    os.unlink(victim.time_index_path)
    mtime_ms = (NOW - 3_600_000)
    os.utime(victim.log_path, (mtime_ms / 1000, mtime_ms / 1000))

    log2 = Log(log.dir, cfg, clock, had_clean_shutdown=clean)  # unclean: every segment recovered
    raw = open(victim.time_index_path, "rb").read()
    assert len(raw) == 12
    assert struct.unpack(">qi", raw) == (mtime_ms, last_offset - victim.base_offset)
    seg = log2.segments[1]
    assert seg.largest_timestamp == mtime_ms
    log2.close()


def test_missing_time_index_of_a_segment_with_timestamps_is_rebuilt(tmp_path):
    clock = ManualClock(NOW)
    cfg = topic_config(segment_bytes=600, index_interval_bytes=100, segment_index_bytes=1200)
    log = Log(str(tmp_path / "new-0"), cfg, clock)
    for i in range(30):
        append(log, [build_batch([(NOW - 1000 + 3 * i, b"v%d" % i * 8), (NOW - 2000, b"y")])])
    assert len(log.segments) >= 3
    victim = log.segments[1]
    log.close()
    before = open(victim.time_index_path, "rb").read()
    assert len(before) >= 24
    os.unlink(victim.time_index_path)
    log2 = Log(log.dir, cfg, clock, had_clean_shutdown=True)
    assert open(victim.time_index_path, "rb").read() == before
    log2.close()
