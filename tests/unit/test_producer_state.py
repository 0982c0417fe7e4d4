"""Idempotent producer state (storage.producer_state) and its integration in storage.log."""

import os
import struct

import pytest
from crc32c import crc32c

from protocol import records as R
from storage import errors as E
from storage.clock import ManualClock
from storage.log import Log
from storage.producer_state import (
    INT32_MAX,
    BatchMetadata,
    ProducerBatch,
    ProducerStateEntry,
    ProducerStateManager,
    read_snapshot,
    snapshot_file_name,
    write_snapshot,
)
from tests.unit.test_log_helpers import topic_config, unopened_descriptor

NOW = 1_700_000_000_000
PID = 1000


def new_log(tmp_path, clock=None, clean=False, **cfg):
    cfg.setdefault("index_interval_bytes", 100)
    cfg.setdefault("segment_index_bytes", 1200)
    return Log(str(tmp_path / "t-0"), topic_config(**cfg), clock or ManualClock(NOW), had_clean_shutdown=clean)


def pbatch(seq, n=2, pid=PID, epoch=0, ts=NOW, txn=False, value=b"v"):
    return R.build_batch([(ts + i, None, value + b"%d" % (seq + i)) for i in range(n)],
                         producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def stored_batches(log):
    """[(base_offset, producer_id, epoch, base_sequence)] of every batch in the log."""
    out = []
    for seg in log.segments:
        for _pos, h in seg.iter_batch_headers(0):
            out.append((h.base_offset, h.producer_id, h.producer_epoch, h.base_sequence))
    return out


def snapshots(log):
    return sorted(f for f in os.listdir(log.dir) if f.endswith(".snapshot"))


# ----------------------------------------------------------------------------- state machine


def test_duplicate_of_each_of_the_last_five_batches(tmp_path):
    log = new_log(tmp_path)
    infos = [log.append(pbatch(2 * i)) for i in range(6)]  # seq 0-1, 2-3, ..., 10-11
    assert [i.base_offset for i in infos] == [0, 2, 4, 6, 8, 10]
    assert not any(i.duplicate for i in infos)
    for i in range(1, 6):
        dup = log.append(pbatch(2 * i))
        assert dup.duplicate
        assert (dup.base_offset, dup.last_offset) == (infos[i].base_offset, infos[i].last_offset)
        assert dup.log_start_offset == 0
        assert log.log_end_offset == 12
    # the oldest batch fell out of the cache of 5: its retry is out of sequence
    with pytest.raises(E.OutOfOrderSequenceError):
        log.append(pbatch(0))
    assert log.log_end_offset == 12
    assert [b[3] for b in stored_batches(log)] == [0, 2, 4, 6, 8, 10]
    # and the sequence continues
    assert log.append(pbatch(12)).base_offset == 12


def test_a_batch_overlapping_a_cached_one_is_not_a_duplicate(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0, n=3))
    with pytest.raises(E.OutOfOrderSequenceError):
        log.append(pbatch(0, n=2))  # same first sequence, other last sequence
    assert log.log_end_offset == 3


def test_sequence_gap_is_rejected_and_nothing_written(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0))
    with pytest.raises(E.OutOfOrderSequenceError, match="out of order sequence"):
        log.append(pbatch(3))
    assert log.log_end_offset == 2
    assert log.producer_state.last_entry(PID).last_seq == 1
    assert log.append(pbatch(2)).base_offset == 2


def test_gap_inside_one_append_rejects_the_whole_append(tmp_path):
    log = new_log(tmp_path)
    from storage.validator import validate_records

    ok = pbatch(0) + pbatch(2)
    log.append(ok)
    assert log.log_end_offset == 4
    bad = pbatch(4) + pbatch(7)
    with pytest.raises(E.OutOfOrderSequenceError):
        log.append(bad)
    assert log.log_end_offset == 4
    assert log.producer_state.last_entry(PID).last_seq == 3
    assert validate_records  # the validator itself accepts both (producer checks are the log's)


def test_older_epoch_is_fenced_and_new_epoch_must_start_at_zero(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0, epoch=3))
    with pytest.raises(E.OutOfOrderSequenceError, match="new epoch"):
        log.append(pbatch(5, epoch=4))
    assert log.append(pbatch(0, epoch=4)).base_offset == 2
    with pytest.raises(E.InvalidProducerEpochError, match="smaller than the last seen epoch 4"):
        log.append(pbatch(2, epoch=3))
    # the old epoch's batch is no duplicate any more: fenced too
    with pytest.raises(E.InvalidProducerEpochError):
        log.append(pbatch(0, epoch=3))
    assert log.log_end_offset == 4
    entry = log.producer_state.last_entry(PID)
    assert entry.producer_epoch == 4
    assert [b.first_offset for b in entry.batches] == [2]  # the epoch bump cleared the cache


def test_unknown_producer_is_accepted_at_any_sequence(tmp_path):
    # current Kafka (ProducerAppendInfo.checkSequence): no epoch known -> any sequence
    log = new_log(tmp_path)
    assert log.append(pbatch(41, pid=7, epoch=2)).base_offset == 0
    with pytest.raises(E.OutOfOrderSequenceError):
        log.append(pbatch(41 + 5, pid=7, epoch=2))
    assert log.append(pbatch(43, pid=7, epoch=2)).base_offset == 2


def test_producers_are_independent(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0, pid=1))
    log.append(pbatch(0, pid=2))
    assert log.append(pbatch(0, pid=1)).duplicate
    assert log.append(pbatch(2, pid=2)).base_offset == 4
    assert not log.append(R.build_batch([(NOW, None, b"plain")])).duplicate
    assert log.append(R.build_batch([(NOW, None, b"plain")])).base_offset == 7  # no pid: never a duplicate


def test_sequence_wraps_around_at_int32_max(tmp_path):
    log = new_log(tmp_path)
    first = log.append(pbatch(INT32_MAX - 1, n=3))  # sequences MAX-1, MAX, 0
    assert log.producer_state.last_entry(PID).last_seq == 0
    assert log.append(pbatch(INT32_MAX - 1, n=3)).duplicate
    assert log.append(pbatch(INT32_MAX - 1, n=3)).base_offset == first.base_offset
    assert log.append(pbatch(1, n=1)).base_offset == 3
    log2 = new_log(tmp_path / "b")
    log2.append(pbatch(INT32_MAX - 1, n=2))  # ends exactly at MAX
    with pytest.raises(E.OutOfOrderSequenceError):
        log2.append(pbatch(INT32_MAX, n=1))  # MAX + 1 does not exist: 0 follows
    assert log2.append(pbatch(0, n=1)).base_offset == 2


def test_transactional_batches_are_refused_without_a_coordinator(tmp_path):
    log = new_log(tmp_path)
    log.producer_state.transactions_enabled = False
    with pytest.raises(E.InvalidTxnStateError):
        log.append(pbatch(0, txn=True))
    assert log.log_end_offset == 0
    assert log.producer_state.is_empty()


def test_log_append_time_topic_duplicate_answers_the_original_append_time(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock=clock, message_timestamp_type="LogAppendTime")
    first = log.append(pbatch(0))
    assert first.log_append_time == NOW
    clock.advance(5000)
    dup = log.append(pbatch(0))
    assert dup.duplicate and dup.log_append_time == NOW and dup.base_offset == 0


def test_create_time_duplicate_answers_like_kafka(tmp_path):
    # UnifiedLog.append sets logAppendTime to the duplicate's max timestamp
    log = new_log(tmp_path)
    log.append(pbatch(0, ts=NOW - 50))
    dup = log.append(pbatch(0, ts=NOW - 50))
    assert dup.duplicate and dup.log_append_time == NOW - 49 and dup.max_timestamp == NOW - 49


def test_rejected_append_leaves_the_state_untouched(tmp_path):
    log = new_log(tmp_path, message_timestamp_before_max_ms=1000)
    log.append(pbatch(0))
    with pytest.raises(E.InvalidTimestampError):
        log.append(pbatch(2, ts=NOW - 10_000))
    assert log.producer_state.last_entry(PID).last_seq == 1
    assert log.append(pbatch(2)).base_offset == 2


def test_failed_write_does_not_update_the_state(tmp_path, monkeypatch):
    log = new_log(tmp_path)
    log.append(pbatch(0))
    seg = log.active_segment
    seg_size = seg.size

    def broken(fd, buf, position):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "pwrite", broken)  # the write of every Python append path
    # and a descriptor nothing has open for storage/_append.c's own pwrite, which then
    # leaves the append to the Python path
    with unopened_descriptor(seg, tmp_path), pytest.raises(E.KafkaStorageError):
        log.append(pbatch(2))
    monkeypatch.undo()
    assert log.producer_state.last_entry(PID).last_seq == 1
    assert log.log_end_offset == 2 and seg.size == seg_size
    info = log.append(pbatch(2))  # the retry is appended, not taken for a duplicate
    assert not info.duplicate and info.base_offset == 2


def test_producer_id_expiration(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock=clock, producer_id_expiration_ms=60_000)
    log.append(pbatch(0))
    clock.advance(59_999)
    assert log.remove_expired_producers() == 0
    assert log.append(pbatch(0)).duplicate
    clock.advance(2)
    log.delete_old_segments()  # the retention pass expires producers too
    assert log.producer_state.last_entry(PID) is None
    # forgotten: the retry is appended again, any sequence is accepted
    assert log.append(pbatch(0)).base_offset == 2


def test_default_expiration_is_one_day(tmp_path):
    clock = ManualClock(NOW)
    log = new_log(tmp_path, clock=clock)
    log.append(pbatch(0))  # max timestamp NOW + 1
    clock.advance(86_400_000)
    assert log.remove_expired_producers() == 0
    clock.advance(1)
    assert log.remove_expired_producers() == 1


# ----------------------------------------------------------------------------- snapshot files


def test_snapshot_round_trip_and_byte_format(tmp_path):
    e1 = ProducerStateEntry(7, 2, NOW + 3, [BatchMetadata(4, 10, 1, NOW + 1), BatchMetadata(9, 20, 4, NOW + 3)])
    e2 = ProducerStateEntry(2**40, 0, NOW, [BatchMetadata(0, 30, 0, NOW)])
    path = str(tmp_path / snapshot_file_name(31))
    write_snapshot(path, [e1, e2])
    assert os.path.basename(path) == "00000000000000000031.snapshot"
    data = open(path, "rb").read()
    assert len(data) == 2 + 4 + 4 + 3 * 46
    version, crc, count = struct.unpack_from(">hIi", data, 0)
    assert (version, count) == (1, 3)
    assert crc == crc32c(data[6:])
    # the last entry of producer 7 is its newest batch (what Kafka's reader keeps)
    assert struct.unpack_from(">qhiqiqiq", data, 10 + 46) == (7, 2, 9, 20, 4, NOW + 3, -1, -1)
    got = {e.producer_id: e for e in read_snapshot(path)}
    assert got == {7: e1, 2**40: e2}
    assert got[7].batches[0].first_seq == 3 and got[7].batches[1].first_offset == 16


@pytest.mark.parametrize("damage", ["crc", "truncated", "version", "empty"])
def test_corrupt_snapshot_file_is_detected(tmp_path, damage):
    path = str(tmp_path / snapshot_file_name(5))
    write_snapshot(path, [ProducerStateEntry(1, 0, NOW, [BatchMetadata(1, 4, 1, NOW)])])
    data = bytearray(open(path, "rb").read())
    if damage == "crc":
        data[-3] ^= 0xFF
    elif damage == "truncated":
        data = data[:-5]
    elif damage == "version":
        data[1] = 9
    else:
        data = b""
    open(path, "wb").write(data)
    with pytest.raises(Exception) as ei:
        read_snapshot(path)
    assert type(ei.value).__name__ == "CorruptSnapshotError"


def test_roll_takes_a_snapshot_at_the_new_segment_base(tmp_path):
    log = new_log(tmp_path, segment_bytes=400)
    for i in range(8):
        log.append(pbatch(2 * i, value=b"x" * 40))
    bases = [s.base_offset for s in log.segments]
    assert len(bases) > 2
    assert snapshots(log) == [snapshot_file_name(b) for b in bases[1:]]
    # the snapshot at a base offset holds the state of the log before it
    entries = read_snapshot(os.path.join(log.dir, snapshot_file_name(bases[1])))
    assert len(entries) == 1 and entries[0].batches[-1].last_offset == bases[1] - 1


def test_clean_restart_reads_the_snapshot_and_scans_nothing(tmp_path, monkeypatch):
    log = new_log(tmp_path, segment_bytes=400)
    infos = [log.append(pbatch(2 * i, value=b"x" * 40)) for i in range(8)]
    leo = log.log_end_offset
    log.close()
    assert snapshot_file_name(leo) in snapshots(log)

    def no_replay(*a, **kw):
        raise AssertionError("a clean restart must not replay batches")

    monkeypatch.setattr(ProducerStateManager, "load_batch", no_replay)
    log = new_log(tmp_path, segment_bytes=400, clean=True)
    monkeypatch.undo()
    # all 5 cached batches survive, not only the last one
    for i in range(3, 8):
        dup = log.append(pbatch(2 * i, value=b"x" * 40))
        assert dup.duplicate and dup.base_offset == infos[i].base_offset
    assert log.log_end_offset == leo


def test_a_one_segment_log_without_producers_stops_and_starts_without_a_snapshot(tmp_path, monkeypatch):
    """No producer state, one segment, no snapshot yet: the clean stop writes no snapshot
    and the clean start after it creates none and scans nothing (Kafka's rule for a
    cleanly stopped log without snapshots); the state is the same empty one."""
    log = new_log(tmp_path)
    for _ in range(3):
        log.append(R.build_batch([(NOW, None, b"plain")]))
    leo = log.log_end_offset
    log.close()
    assert snapshots(log) == []

    def no_scan(*a, **kw):
        raise AssertionError("a clean start of a log with nothing to rebuild must not read batches")

    monkeypatch.setattr(ProducerStateManager, "load_batch", no_scan)
    monkeypatch.setattr(ProducerStateManager, "truncate_and_reload", no_scan)
    log = new_log(tmp_path, clean=True)
    monkeypatch.undo()
    assert snapshots(log) == [] and log.producer_state.is_empty() and log.log_end_offset == leo
    # an idempotent producer arrives: from now on the log keeps its snapshot at the end
    info = log.append(pbatch(0))
    log.close()
    assert snapshots(log) == [snapshot_file_name(info.last_offset + 1)]
    log = new_log(tmp_path, clean=True)
    assert log.append(pbatch(0)).duplicate


def test_a_crash_after_a_snapshotless_stop_rebuilds_the_state_from_the_segment(tmp_path):
    """The log that went without a snapshot is recovered after a kill like any other:
    the producer that came after the clean start is found by scanning the segment."""
    log = new_log(tmp_path)
    log.append(R.build_batch([(NOW, None, b"plain")]))
    log.close()
    log = new_log(tmp_path, clean=True)
    info = log.append(pbatch(0))
    log.close_handlers()  # simulated kill: no snapshot at the end
    assert snapshots(log) == []
    log = new_log(tmp_path)
    dup = log.append(pbatch(0))
    assert dup.duplicate and dup.base_offset == info.base_offset


def test_a_log_of_more_segments_keeps_kafkas_snapshots(tmp_path):
    """Rolled logs have snapshots (one per roll) and keep writing one at the clean stop,
    even with no producer state."""
    log = new_log(tmp_path, segment_bytes=200)
    while len(log.segments) < 3:
        log.append(R.build_batch([(NOW, None, b"plain")]))
    leo = log.log_end_offset
    log.close()
    assert snapshot_file_name(leo) in snapshots(log)


def test_crash_recovery_rebuilds_the_state_from_snapshot_and_log(tmp_path):
    log = new_log(tmp_path, segment_bytes=400)
    infos = [log.append(pbatch(2 * i, value=b"x" * 40)) for i in range(10)]
    leo = log.log_end_offset
    last_snap = max(int(f[:20]) for f in snapshots(log))
    assert last_snap < infos[-1].base_offset  # the last batches are only in the log
    log.close_handlers()  # simulated kill: no snapshot at the end
    assert snapshot_file_name(leo) not in snapshots(log)
    log = new_log(tmp_path, segment_bytes=400)
    assert log.log_end_offset == leo
    for i in range(5, 10):
        dup = log.append(pbatch(2 * i, value=b"x" * 40))
        assert dup.duplicate and dup.base_offset == infos[i].base_offset
    assert log.append(pbatch(20)).base_offset == leo
    assert snapshot_file_name(leo) in snapshots(log)  # taken after loading


def test_crash_with_a_torn_tail_forgets_the_lost_batch(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0))
    log.append(pbatch(2))
    seg_path = log.active_segment.log_path
    log.close_handlers()
    size = os.path.getsize(seg_path)
    os.truncate(seg_path, size - 7)  # the second batch is torn
    log = new_log(tmp_path)
    assert log.log_end_offset == 2
    assert log.producer_state.last_entry(PID).last_seq == 1
    info = log.append(pbatch(2))  # re-sent: written again, not a duplicate of lost data
    assert not info.duplicate and info.base_offset == 2


def test_snapshots_above_the_log_end_are_dropped_on_load(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0))
    log.close_handlers()
    # a snapshot claiming state up to offset 50 (the data behind it is gone)
    write_snapshot(os.path.join(log.dir, snapshot_file_name(50)),
                   [ProducerStateEntry(PID, 0, NOW, [BatchMetadata(49, 49, 0, NOW)])])
    log = new_log(tmp_path)
    assert snapshot_file_name(50) not in snapshots(log)
    assert log.producer_state.last_entry(PID).last_seq == 1


def test_corrupt_snapshot_is_deleted_and_the_state_rebuilt_from_the_log(tmp_path, caplog):
    log = new_log(tmp_path)
    infos = [log.append(pbatch(2 * i)) for i in range(3)]
    log.close()
    path = os.path.join(log.dir, snapshot_file_name(6))
    data = bytearray(open(path, "rb").read())
    data[12] ^= 0x55
    open(path, "wb").write(data)
    log = new_log(tmp_path, clean=True)
    assert "failed to load producer snapshot" in caplog.text
    assert log.append(pbatch(2)).base_offset == infos[1].base_offset
    assert log.append(pbatch(6)).base_offset == 6
    read_snapshot(path)  # rewritten, valid again


def test_stray_snapshots_are_removed_on_load(tmp_path):
    log = new_log(tmp_path)
    log.append(pbatch(0))
    log.close_handlers()
    for off in (1, 2):
        write_snapshot(os.path.join(log.dir, snapshot_file_name(off)), [])
    open(os.path.join(log.dir, snapshot_file_name(3) + ".tmp"), "wb").write(b"x")
    log = new_log(tmp_path)
    # 1 is a stray below the latest stray 2 (kept: the newest clean-close snapshot is of
    # this kind); the torn temp file is gone
    names = os.listdir(log.dir)
    assert snapshot_file_name(1) not in names and snapshot_file_name(3) + ".tmp" not in names


def test_truncation_rebuilds_the_state(tmp_path):
    log = new_log(tmp_path, segment_bytes=400)
    infos = [log.append(pbatch(2 * i, value=b"x" * 40)) for i in range(8)]
    cut = infos[5].base_offset
    log.truncate_to(cut)
    assert log.log_end_offset == cut
    assert all(int(f[:20]) <= cut for f in snapshots(log))
    entry = log.producer_state.last_entry(PID)
    assert entry.last_seq == 9 and entry.batches[-1].last_offset == cut - 1
    assert log.append(pbatch(6, value=b"x" * 40)).duplicate  # batch 3 still cached
    info = log.append(pbatch(10, value=b"x" * 40))  # batch 5 was cut: appended again
    assert not info.duplicate and info.base_offset == cut


def test_truncation_below_every_segment_clears_the_state(tmp_path):
    log = new_log(tmp_path, segment_bytes=400)
    for i in range(8):
        log.append(pbatch(2 * i, value=b"x" * 40))
    log.delete_old_segments(log.clock.time_ms())  # nothing expires
    first = log.first_base_offset
    log.maybe_increment_log_start_offset(4)
    log.delete_old_segments()
    assert log.first_base_offset > first
    log.truncate_to(0)
    assert log.producer_state.is_empty() and snapshots(log) == []
    assert log.append(pbatch(99)).base_offset == 0


def test_retention_deletes_the_snapshots_of_deleted_segments(tmp_path):
    log = new_log(tmp_path, segment_bytes=400)
    for i in range(8):
        log.append(pbatch(2 * i, value=b"x" * 40))
    bases = [s.base_offset for s in log.segments]
    before = snapshots(log)
    assert snapshot_file_name(bases[1]) in before
    log.maybe_increment_log_start_offset(bases[2])
    assert log.delete_old_segments() == 2
    after = snapshots(log)
    assert snapshot_file_name(bases[1]) not in after
    assert snapshot_file_name(bases[2]) in after
    # the producer stays known (its last batches are in the remaining segments)
    assert log.append(pbatch(14, value=b"x" * 40)).duplicate


def test_manager_prepare_is_pure(tmp_path):
    from storage.producer_state import ProducerBatch

    psm = ProducerStateManager(str(tmp_path))
    psm.load_batch(ProducerBatch(1, 0, 0, 0, 1, NOW))
    before = repr(psm.last_entry(1))
    updates, dup = psm.prepare([ProducerBatch(1, 0, 2, 2, 3, NOW), ProducerBatch(1, 0, 4, 4, 4, NOW)])
    assert dup is None and repr(psm.last_entry(1)) == before
    assert updates[1].last_seq == 4
    psm.apply(updates, 5)
    assert [b.last_seq for b in psm.last_entry(1).batches] == [1, 3, 4]
    assert psm.map_end_offset == 5


@pytest.mark.parametrize("seed", range(6))
def test_one_batch_path_matches_prepare_and_apply(tmp_path, seed):
    """ProducerStateManager.prepare_one/apply_one (an idempotent producer's one batch,
    the produce path) answers and changes the state exactly as prepare/apply do for a
    list of that one batch: the same duplicates, the same errors (type and message), the
    same entries and ongoing transactions after each batch. Generated batches: in order,
    retries of the last five, gaps, older and newer epochs (from sequence 0 or not),
    sequences wrapping at Int32.MAX, transactional ones with and without a coordinator."""
    import random

    rng = random.Random(seed)
    for d in ("a-0", "b-0"):
        os.makedirs(tmp_path / d)
    general = ProducerStateManager(str(tmp_path / "a-0"), topic_partition="t-0")
    one = ProducerStateManager(str(tmp_path / "b-0"), topic_partition="t-0")
    offset = 0
    outcomes = {"dup": 0, "ok": 0, "error": 0}
    for _ in range(600):
        enabled = rng.random() < 0.9
        general.transactions_enabled = one.transactions_enabled = enabled
        pid = rng.choice([1, 2, 3])
        e = general.last_entry(pid)
        epoch = e.producer_epoch if e is not None and e.producer_epoch >= 0 else 0
        last = e.last_seq if e is not None else -1
        kind = rng.random()
        if kind < 0.55:
            seq = 0 if last == INT32_MAX else last + 1
        elif kind < 0.7 and e is not None and e.batches:  # a retry of a recent batch
            meta = rng.choice(list(e.batches))
            seq, n = meta.first_seq, meta.offset_delta + 1
        elif kind < 0.8:
            seq = max(0, last + rng.choice([2, 5, -3]))
        elif kind < 0.9:
            epoch += rng.choice([1, -1, 2])
            seq = rng.choice([0, 0, 7])
        else:
            seq = rng.choice([INT32_MAX - 1, INT32_MAX, 0])
        n = rng.randint(1, 4) if not (0.55 <= kind < 0.7 and e is not None and e.batches) else n
        b = ProducerBatch(pid, epoch, seq, offset, offset + n - 1, NOW + offset, rng.random() < 0.15)

        def run(m, single):
            try:
                update, dup = m.prepare_one(b) if single else m.prepare([b])
            except E.StorageError as exc:
                return ("error", type(exc).__name__, str(exc))
            if dup is not None:
                return ("dup", dup)
            (m.apply_one if single else m.apply)(update)
            return ("ok",)

        got, want = run(one, True), run(general, False)
        assert got == want, b
        assert one.producers == general.producers and one.ongoing == general.ongoing, b
        outcomes[want[0]] += 1
        if want[0] == "ok":
            offset += n
        if rng.random() < 0.05:  # a transaction ends
            for m in (general, one):
                m.ongoing.clear()
                for entry in m.producers.values():
                    entry.current_txn_first_offset = -1
    assert all(v > 20 for v in outcomes.values()), outcomes
