"""Retention on message time (SPEC 4), with an injected clock: no sleeping."""

import logging
import os

import pytest

from storage.clock import ManualClock
from storage.errors import OffsetOutOfRangeError
from storage.log import Log
from tests.unit.test_log_helpers import append, build_batch, parse_batches, topic_config

NOW = 1_700_000_000_000
MIN = 60_000


def new_log(tmp_path, clock, **cfg):
    cfg.setdefault("index_interval_bytes", 100)
    cfg.setdefault("segment_index_bytes", 1200)
    cfg.setdefault("file_delete_delay_ms", 5_000)
    return Log(str(tmp_path / "t-0"), topic_config(**cfg), clock)


def segment_with(log, stamps):
    """Append one batch with these timestamps in a segment of its own; returns its base."""
    if log.active_segment.size:
        log.roll()
    base = log.log_end_offset
    append(log, [build_batch([(t, b"v%d" % i) for i, t in enumerate(stamps)])])
    return base


def files(log, suffix=None):
    names = sorted(os.listdir(log.dir))
    return [n for n in names if suffix is None or n.endswith(suffix)]


def test_time_retention_oldest_first_and_delayed_file_removal(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=10 * MIN)
    b0 = segment_with(log, [NOW - 60 * MIN, NOW - 50 * MIN])
    b1 = segment_with(log, [NOW - 40 * MIN])
    b2 = segment_with(log, [NOW - 5 * MIN])  # kept: 5 min old
    b3 = segment_with(log, [NOW - 30 * MIN])  # expired, but behind a kept segment
    assert (b0, b1, b2, b3) == (0, 2, 3, 4)

    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [3, 4]
    assert log.log_start_offset == 3 and log.log_end_offset == 5
    # renamed at once, removed after file.delete.delay.ms
    deleted = files(log, ".deleted")
    assert deleted == sorted(f"{b:020d}.{ext}.deleted" for b in (0, 2) for ext in ("index", "log", "timeindex"))
    assert log.delete_due_files() == 0
    clock.advance(4_999)
    assert log.delete_due_files() == 0 and files(log, ".deleted") == deleted
    clock.advance(1)
    assert log.delete_due_files() == 2
    assert files(log, ".deleted") == [] and files(log, ".log") == [f"{3:020d}.log", f"{4:020d}.log"]

    # reads and searches never go below the log start offset
    with pytest.raises(OffsetOutOfRangeError):
        log.read(2, 10_000)
    assert parse_batches(log.read(3, 10_000).records.read())[0][0] == 3
    assert log.offset_for_timestamp(0) == (3, NOW - 5 * MIN)
    # appends continue
    va = append(log, [build_batch([(NOW, b"x")])])
    assert va.base_offset == 5


def test_time_retention_is_strict(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=MIN)
    segment_with(log, [NOW - MIN])
    segment_with(log, [NOW])
    assert log.delete_old_segments() == 0, "now - largest == retention.ms must not expire"
    clock.advance(1)
    assert log.delete_old_segments() == 1
    assert log.log_start_offset == 1


def test_largest_timestamp_not_last_timestamp_decides(tmp_path):
    """Out-of-order timestamps: the segment's max timestamp counts, not its last record's."""
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=10 * MIN)
    segment_with(log, [NOW - 5 * MIN, NOW - 60 * MIN])  # max is recent
    segment_with(log, [NOW])
    assert log.delete_old_segments() == 0
    clock.advance(6 * MIN)
    assert log.delete_old_segments() == 1


def test_everything_expired_rolls_an_empty_active_segment(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=MIN)
    segment_with(log, [NOW - 30 * MIN])
    segment_with(log, [NOW - 20 * MIN, NOW - 19 * MIN])
    assert log.log_end_offset == 3
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [3]
    assert log.active_segment.size == 0
    assert log.log_start_offset == 3 and log.log_end_offset == 3
    assert log.read(3, 1000).records is None
    # an empty active segment is never deleted, however old
    clock.advance(100 * MIN)
    assert log.delete_old_segments() == 0
    va = append(log, [build_batch([(NOW, b"new")])])
    assert va.base_offset == 3 and log.log_end_offset == 4


def test_size_retention_keeps_log_at_or_above_limit(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=-1)
    for i in range(5):
        segment_with(log, [NOW + i])
    sizes = [s.size for s in log.segments]
    assert len(set(sizes)) == 1
    one = sizes[0]
    # limit = 2.5 segments: delete while the rest stays >= the limit -> 2 go, 3 stay
    log.update_config(topic_config(**{**vars(log.config), "retention_bytes": int(2.5 * one)}))
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [2, 3, 4]
    # exactly at the limit: one more may go only if the rest stays >= limit
    log.update_config(topic_config(**{**vars(log.config), "retention_bytes": 2 * one}))
    assert log.delete_old_segments() == 1
    assert log.size_in_bytes == 2 * one
    assert log.delete_old_segments() == 0


def test_retention_disabled_and_compact_policy(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=-1, retention_bytes=-1)
    segment_with(log, [0])
    segment_with(log, [1])
    assert log.delete_old_segments() == 0
    log.update_config(topic_config(**{**vars(log.config), "retention_ms": 1, "cleanup_policy": ["compact"]}))
    assert log.delete_old_segments() == 0, "cleanup.policy=compact must not delete by time"


def test_log_start_offset_breach_deletes_whole_segments_below(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=-1, cleanup_policy=["compact"])
    for i in range(4):
        segment_with(log, [NOW + i, NOW + i])  # segments at 0, 2, 4, 6
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(9)
    with pytest.raises(OffsetOutOfRangeError):
        log.maybe_increment_log_start_offset(-1)
    assert log.maybe_increment_log_start_offset(5) is True
    assert log.maybe_increment_log_start_offset(3) is False
    assert log.log_start_offset == 5
    # segment 4 holds offset 5: it stays; 0 and 2 are entirely below
    assert log.delete_old_segments() == 2
    assert [s.base_offset for s in log.segments] == [4, 6]
    assert log.log_start_offset == 5
    with pytest.raises(OffsetOutOfRangeError):
        log.read(4, 1000)
    assert log.offset_for_timestamp(0) == (5, NOW + 2)
    # up to the log end: the active segment is not deleted for it
    log.maybe_increment_log_start_offset(8)
    assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments] == [6]
    assert log.log_start_offset == 8 and log.read(8, 100).records is None


def test_future_timestamp_blocks_retention_with_a_warning(tmp_path, caplog):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=10 * MIN)
    segment_with(log, [NOW - 60 * MIN])
    future = NOW + 24 * 60 * MIN
    b1 = segment_with(log, [NOW - 60 * MIN, future])
    segment_with(log, [NOW - 60 * MIN])
    segment_with(log, [NOW])
    with caplog.at_level(logging.WARNING, logger="storage.log"):
        assert log.delete_old_segments() == 1
    assert [s.base_offset for s in log.segments][0] == b1
    msgs = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert any(f"{b1:020d}.log" in m and str(future) in m and "future" in m for m in msgs), msgs


def test_segment_without_timestamps_uses_file_mtime(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=10 * MIN)
    segment_with(log, [-1, -1])  # no timestamps (data up-converted from magic 0)
    segment_with(log, [NOW])
    seg0 = log.segments[0]
    assert seg0.max_timestamp_so_far == -1
    recent = (NOW - 5 * MIN) / 1000
    os.utime(seg0.log_path, (recent, recent))
    assert log.delete_old_segments() == 0
    old = (NOW - 11 * MIN) / 1000
    os.utime(seg0.log_path, (old, old))
    assert log.delete_old_segments() == 1


def test_pending_files_removed_on_close_and_at_next_open(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock, retention_ms=MIN)
    segment_with(log, [NOW - 10 * MIN])
    segment_with(log, [NOW])
    assert log.delete_old_segments() == 1
    assert files(log, ".deleted")
    log.close_handlers()  # a crash before the delay passed
    assert files(log, ".deleted")
    log2 = Log(log.dir, log.config, clock)
    assert files(log2, ".deleted") == []
    assert log2.log_start_offset == 1 and log2.log_end_offset == 2
    assert log2.delete_old_segments() == 0
    log2.roll()
    clock.advance(2 * MIN)
    assert log2.delete_old_segments() == 1
    log2.close()
    assert files(log2, ".deleted") == []
