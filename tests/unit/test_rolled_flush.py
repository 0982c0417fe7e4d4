"""Kafka's flush on roll, off the event loop: Log.start_rolled_flush opens descriptors
of the rolled segments' files (and of the producer-state snapshots written at their
rolls), storage.log.fsync_flushes fsyncs and closes them on any thread, and
Log.finish_flush moves the recovery point, unless the fsync failed or the log
was truncated meanwhile. broker.server.flush_off_the_loop takes these steps with the
fsyncs on a worker thread while the loop serves."""

from __future__ import annotations

import asyncio
import os
import threading

import uvloop

from broker.server import flush_off_the_loop
from storage import log as log_mod
from storage.log import fsync_flushes
from tests.unit.test_checkpoint_and_recovery import NOW, fill, manager


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _rolled(tmp_path):
    """A log manager and its one log, rolled a few times (segments of 2,000 bytes)."""
    m = manager(tmp_path)
    m.create_topic("t", 1)
    log = m.get_log("t", 0)
    fill(log, 30, t0=NOW)
    return m, log


def test_a_rolled_flush_moves_the_recovery_point_after_the_fsyncs(tmp_path):
    m, log = _rolled(tmp_path)
    assert len(log.segments) > 2 and log.recovery_point == 0
    before = _open_fds()
    flush = log.start_rolled_flush()
    target = log.segments[-1].base_offset
    assert flush.offset == target and len(flush.files) >= 3 * (len(log.segments) - 1)
    assert {path for _fd, path in flush.files} >= {s.log_path for s in log.segments[:-1]}
    assert log.recovery_point == 0  # nothing moves before the fsyncs
    fsync_flushes([flush])
    assert flush.error is None and flush.files == [] and _open_fds() == before  # each one closed
    assert log.finish_flush(flush) and log.recovery_point == target
    assert log.start_rolled_flush() is None  # nothing left to flush
    m.shutdown()


def test_a_truncation_during_the_fsyncs_voids_the_flush(tmp_path):
    m, log = _rolled(tmp_path)
    flush = log.start_rolled_flush()
    fsync_flushes([flush])
    log.truncate_to(log.segments[1].base_offset + 1)  # (as a leader epoch change does)
    assert not log.finish_flush(flush)
    assert log.recovery_point <= log.segments[1].base_offset + 1  # not moved past what was cut
    again = log.start_rolled_flush()  # the next pass flushes what is rolled now
    fsync_flushes([again])
    assert log.finish_flush(again) and log.recovery_point == log.segments[-1].base_offset
    m.shutdown()


def test_a_failed_fsync_names_the_file_moves_nothing_and_closes_every_descriptor(tmp_path, caplog):
    m, log = _rolled(tmp_path)
    before = _open_fds()
    flushes = m.start_flushes()
    assert [f.log for f in flushes] == [log]
    fd, path = flushes[0].files[1]
    r, w = os.pipe()  # fsync of a pipe fails (EINVAL): a disk that cannot sync
    os.close(w)
    os.close(fd)
    flushes[0].files[1] = (r, path)
    fsync_flushes(flushes)
    assert _open_fds() == before
    with caplog.at_level("ERROR"):
        assert m.finish_flushes(flushes) == set()
    assert f"fsync of {path} failed" in caplog.text and "t-0: not flushed (the next pass tries again)" in caplog.text
    assert log.recovery_point == 0
    assert m.flush_due() == 1 and log.recovery_point == log.segments[-1].base_offset  # the next pass
    m.shutdown()


def test_the_broker_fsyncs_rolled_segments_on_a_worker_thread_while_the_loop_serves(tmp_path, monkeypatch):
    m, log = _rolled(tmp_path)
    target = log.segments[-1].base_offset
    loop_thread = threading.get_ident()
    in_fsync, served = threading.Event(), threading.Event()
    threads = set()
    real_fsync = os.fsync

    def slow_fsync(fd):  # an fsync that lasts until the loop has served something
        threads.add(threading.get_ident())
        in_fsync.set()
        assert served.wait(10), "the loop served nothing while an fsync ran: the fsync held it"
        real_fsync(fd)

    monkeypatch.setattr(log_mod.os, "fsync", slow_fsync)

    async def main():
        task = asyncio.ensure_future(flush_off_the_loop(m))
        while not in_fsync.is_set():
            await asyncio.sleep(0.001)
        assert log.recovery_point == 0  # the fsyncs are under way, the point not moved yet
        served.set()  # (a request served by the loop meanwhile)
        return await task

    assert uvloop.run(main()) == 1
    monkeypatch.setattr(log_mod.os, "fsync", real_fsync)
    assert threads and loop_thread not in threads
    assert log.recovery_point == target
    m.shutdown()


def test_a_log_past_its_flush_ms_is_flushed_to_its_end_the_same_way(tmp_path):
    """flush.ms (Kafka's log flusher thread): the periodic pass's flush of such a log
    takes the active segment too, up to the log end when it began; appends meanwhile
    stay unflushed for the next pass."""
    from storage.clock import ManualClock
    from tests.unit.test_log_helpers import topic_config

    clock = ManualClock(NOW)
    m = manager(tmp_path, clock)
    m.create_topic("timed", 1)
    log = m.get_log("timed", 0)
    log.update_config(topic_config(segment_bytes=2000, flush_ms=1000))
    fill(log, 30, t0=NOW)
    end = log.log_end_offset
    assert log.segments[-1].base_offset < end  # records in the active segment
    clock.advance(1000)
    flushes = m.start_flushes()
    assert [(f.log, f.offset) for f in flushes] == [(log, end)]
    assert log.segments[-1].log_path in {path for _fd, path in flushes[0].files}
    fill(log, 1, t0=NOW)  # an append while the fsyncs run
    fsync_flushes(flushes)
    assert m.finish_flushes(flushes) == {log}
    assert log.recovery_point == end and log.unflushed_messages == log.log_end_offset - end > 0
    m.shutdown()


def test_a_roll_at_the_recovery_point_has_its_snapshot_fsynced_by_the_next_pass(tmp_path):
    """A flush up to the log end (flush.messages, a shutdown of a moved partition), then a
    roll there: no segment is left to flush, but the roll's producer-state snapshot was
    written without an fsync. Kafka fsyncs it in the flush the roll schedules; here the
    next periodic pass takes it, though the recovery point is already there."""
    m, log = _rolled(tmp_path)
    log.flush()
    end = log.log_end_offset
    assert log.recovery_point == end
    log.roll()
    snapshot = os.path.join(log.dir, f"{end:020d}.snapshot")
    assert os.path.exists(snapshot) and log.recovery_point == log.segments[-1].base_offset == end
    assert log.has_background_work()  # the unsynced snapshot keeps it in the periodic passes
    flushes = m.start_flushes()
    assert [(f.log, [path for _fd, path in f.files]) for f in flushes] == [(log, [snapshot])]
    fsync_flushes(flushes)
    assert m.finish_flushes(flushes) == {log}
    assert not log.has_background_work() and m.start_flushes() == []
    m.shutdown()


def test_a_synchronous_flush_takes_the_same_steps_and_names_a_failed_fsync(tmp_path, monkeypatch):
    """Log.flush (flush.messages, a shutdown) fsyncs what start_flush names, the roll's
    snapshots included; a failed fsync raises naming the file, leaves the recovery point
    and every snapshot unsynced for the next flush, and closes every descriptor."""
    m, log = _rolled(tmp_path)
    end = log.log_end_offset
    synced = []
    real_fsync = os.fsync

    def failing(fd):
        raise OSError(5, "Input/output error")

    before = _open_fds()
    monkeypatch.setattr(log_mod.os, "fsync", failing)
    try:
        log.flush()
        raise AssertionError("the failed fsync was not raised")
    except OSError as e:
        assert "fsync of " in str(e) and log.dir in str(e) and "Input/output error" in str(e)
    monkeypatch.setattr(log_mod.os, "fsync", lambda fd: synced.append(os.readlink(f"/proc/self/fd/{fd}"))
                        or real_fsync(fd))
    assert log.recovery_point == 0 and _open_fds() == before
    assert log.has_background_work()
    log.flush()
    assert log.recovery_point == end
    assert set(synced) >= {s.log_path for s in log.segments} | {
        os.path.join(log.dir, f"{s.base_offset:020d}.snapshot") for s in log.segments[1:]}
    m.shutdown()
