import os
import random
import shutil

import pytest

from storage.clock import ManualClock
from storage.errors import OffsetOutOfRangeError, RecordListTooLargeError
from storage.log import Log, parse_topic_partition_dir
from tests.unit.test_log_helpers import (
    GZIP,
    Oracle,
    append,
    batch_records,
    build_batch,
    parse_batches,
    topic_config,
    unopened_descriptor,
)


def new_log(tmp_path, name="t-0", clock=None, **cfg):
    cfg.setdefault("index_interval_bytes", 100)
    cfg.setdefault("segment_index_bytes", 1200)
    return Log(str(tmp_path / name), topic_config(**cfg), clock or ManualClock(1_700_000_000_000))


def produce(log, rng, n, oracle, ts_mode="monotonic", t0=10_000, compress_every=0):
    t = t0
    for i in range(n):
        recs = []
        for _ in range(rng.randint(1, 4)):
            if ts_mode == "monotonic":
                t += rng.randint(0, 30)
                recs.append((t, b"x" * rng.randint(0, 40)))
            else:
                recs.append((rng.randint(0, 9000), b"x" * rng.randint(0, 40)))
        comp = GZIP if compress_every and i % compress_every == 0 else 0
        va = append(log, [build_batch(recs, compression=comp)])
        oracle.add(va)
    return t


def log_files(path):
    return sorted(os.listdir(path))


def sizes(path, suffix):
    return {f: os.path.getsize(os.path.join(path, f)) for f in log_files(path) if f.endswith(suffix)}


def read_all(log, start=None):
    """Every batch from start to the end, crossing segments."""
    off = log.log_start_offset if start is None else start
    out = []
    while off < log.log_end_offset:
        info = log.read(off, 10**7)
        batches = parse_batches(info.records.read())
        out.extend(batches)
        off = batches[-1][1] + 1
    return out


def test_parse_topic_partition_dir():
    assert parse_topic_partition_dir("my-topic-12") == ("my-topic", 12)
    assert parse_topic_partition_dir("a.b_c-0") == ("a.b_c", 0)
    assert parse_topic_partition_dir("nope") is None
    assert parse_topic_partition_dir("x-01") is None
    assert parse_topic_partition_dir("-3") is None


def test_empty_log(tmp_path):
    log = new_log(tmp_path)
    assert (log.log_start_offset, log.log_end_offset, log.high_watermark) == (0, 0, 0)
    assert log.read(0, 100).records is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(1, 100)
    assert log.offset_for_timestamp(0) is None
    assert log.offset_of_max_timestamp() is None
    assert log_files(tmp_path / "t-0") == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    log.close()


def test_append_read_offsets_hw(tmp_path):
    log = new_log(tmp_path)
    va = append(log, [build_batch([(100, b"a"), (200, b"b")])])
    assert (va.base_offset, va.last_offset) == (0, 1)
    assert log.log_end_offset == 2 and log.high_watermark == 2
    res = log.read(0, 1000)
    assert res.high_watermark == 2 and res.log_start_offset == 0
    assert res.records.read() == va.buffer
    assert log.read(1, 1000).records.read() == va.buffer  # the batch holding offset 1
    assert log.read(2, 1000).records is None
    with pytest.raises(OffsetOutOfRangeError):
        log.read(3, 1000)
    log.close()


def test_roll_on_segment_bytes_exact_fit_does_not_roll(tmp_path):
    b = build_batch([(1000, b"x" * 50)])
    log = new_log(tmp_path, segment_bytes=3 * len(b))
    for i in range(3):
        append(log, [b])
    assert len(log.segments) == 1  # exactly full
    append(log, [b])
    assert [s.base_offset for s in log.segments] == [0, 3]
    d = tmp_path / "t-0"
    assert os.path.getsize(d / "00000000000000000000.log") == 3 * len(b)
    log.close()


def test_record_list_too_large(tmp_path):
    b = build_batch([(1000, b"x" * 50)])
    log = new_log(tmp_path, segment_bytes=len(b) - 1)
    with pytest.raises(RecordListTooLargeError):
        append(log, [b])
    assert log.log_end_offset == 0
    log.close()


def test_roll_trims_old_indexes_and_close_trims_active(tmp_path):
    rng = random.Random(2)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=2000, index_interval_bytes=100, segment_index_bytes=1200)
    produce(log, rng, 120, oracle)
    segs = log.segments
    assert len(segs) > 3
    for seg in segs[:-1]:
        assert os.path.getsize(seg.offset_index_path) == 8 * seg.offset_index.entries
        assert os.path.getsize(seg.time_index_path) == 12 * seg.time_index.entries
        # the final time-index entry carries the segment's max timestamp
        assert seg.time_index.last_entry().timestamp == seg.max_timestamp_so_far
    active = segs[-1]
    assert os.path.getsize(active.offset_index_path) == 1200 // 8 * 8
    assert os.path.getsize(active.time_index_path) == 1200 // 12 * 12
    log.close()
    assert os.path.getsize(active.offset_index_path) == 8 * active.offset_index.entries
    assert os.path.getsize(active.time_index_path) == 12 * active.time_index.entries
    # reopen: everything back, active indexes re-expanded
    log2 = new_log(tmp_path, segment_bytes=2000)
    assert [s.base_offset for s in log2.segments] == [s.base_offset for s in segs]
    assert log2.log_end_offset == oracle.records[-1][0] + 1
    assert os.path.getsize(log2.active_segment.offset_index_path) == 1200 // 8 * 8
    assert [b[3] for b in read_all(log2)] == [raw for _, _, raw in oracle.batches]
    log2.close()


def test_roll_on_index_full(tmp_path):
    # index.interval.bytes=0: an entry per batch after the first; time index 3 slots -> full at 2
    log = new_log(tmp_path, index_interval_bytes=0, segment_index_bytes=36)
    for i in range(10):
        append(log, [build_batch([(1000 + i, b"x")])])
    bases = [s.base_offset for s in log.segments]
    assert bases == [0, 3, 6, 9]
    for seg in log.segments[:-1]:
        assert seg.time_index.entries == 2  # full; the final entry equals the last one
        assert seg.time_index.last_entry() == (seg.max_timestamp_so_far, seg.base_offset + 2)
    log.close()


def test_time_roll_with_manual_clock(tmp_path):
    clock = ManualClock(1_000_000)
    log = new_log(tmp_path, clock=clock, segment_ms=1000)
    append(log, [build_batch([(5000, b"a")])])
    append(log, [build_batch([(6000, b"b")])])  # 1000 after the first: not > segment.ms
    assert len(log.segments) == 1
    append(log, [build_batch([(6001, b"c")])])
    assert [s.base_offset for s in log.segments] == [0, 2]
    # an idle partition does not roll on time alone; an empty segment never rolls on time
    clock.advance(10**9)
    assert len(log.segments) == 2
    log.close()
    # batches without timestamps: wall clock since the segment was created
    log = new_log(tmp_path, name="u-0", clock=clock, segment_ms=1000)
    append(log, [build_batch([(-1, b"a")])])
    clock.advance(1000)
    append(log, [build_batch([(-1, b"b")])])
    assert len(log.segments) == 1
    clock.advance(1)
    append(log, [build_batch([(-1, b"c")])])
    assert [s.base_offset for s in log.segments] == [0, 2]
    log.close()


def test_time_roll_jitter_is_bounded(tmp_path):
    log = Log(str(tmp_path / "j-0"), topic_config(segment_ms=1000, segment_jitter_ms=400),
              ManualClock(0), rng=random.Random(1))
    jitter = log.active_segment.roll_jitter_ms
    assert 0 <= jitter < 400
    append(log, [build_batch([(0, b"a")])])
    append(log, [build_batch([(1000 - jitter, b"a")])])
    assert len(log.segments) == 1
    append(log, [build_batch([(1001 - jitter, b"a")])])
    assert len(log.segments) == 2
    log.close()


@pytest.mark.parametrize("ts_mode", ["monotonic", "random"])
def test_offset_for_timestamp_across_segments(tmp_path, ts_mode):
    rng = random.Random(13)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=1500, index_interval_bytes=90)
    produce(log, rng, 150, oracle, ts_mode=ts_mode, compress_every=4)
    assert len(log.segments) > 4
    stamps = sorted({t for _, t in oracle.records})
    for ts in stamps[::3] + [0, stamps[-1], stamps[-1] + 1]:
        got = log.offset_for_timestamp(ts)
        if ts_mode == "monotonic":
            exp = oracle.offset_for_timestamp(ts)
            assert got == exp
        if got is not None:
            # the guarantee of ListOffsets: nothing with ts >= target before the offset
            assert all(o >= got[0] for o, t in oracle.records if t >= ts)
            assert dict(oracle.records)[got[0]] == got[1] and got[1] >= ts
        else:
            assert all(t < ts for _, t in oracle.records)
    assert log.offset_of_max_timestamp() == oracle.max_timestamp()
    log.close()


def test_offset_of_max_timestamp_lists_first_record(tmp_path):
    log = new_log(tmp_path, segment_bytes=200)
    append(log, [build_batch([(50, b"a"), (90, b"b")])])
    append(log, [build_batch([(90, b"c"), (10, b"d")], compression=GZIP)])
    append(log, [build_batch([(70, b"e")])])
    assert len(log.segments) >= 2
    assert log.offset_of_max_timestamp() == (1, 90)
    log.close()
    log = new_log(tmp_path, segment_bytes=200)
    assert log.offset_of_max_timestamp() == (1, 90)
    log.close()


def test_reopen_after_close_preserves_everything(tmp_path):
    rng = random.Random(21)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=1800, index_interval_bytes=70)
    produce(log, rng, 90, oracle, ts_mode="random", compress_every=5)
    leo, mx = log.log_end_offset, log.offset_of_max_timestamp()
    answers = {ts: log.offset_for_timestamp(ts) for ts in range(0, 9001, 250)}
    index_state = [(s.base_offset, s.offset_index.entries, s.time_index.entries,
                    s.max_timestamp_so_far) for s in log.segments]
    log.close()
    log = new_log(tmp_path, segment_bytes=1800, index_interval_bytes=70)
    assert log.log_end_offset == leo and log.high_watermark == leo
    assert [(s.base_offset, s.offset_index.entries, s.time_index.entries, s.max_timestamp_so_far)
            for s in log.segments] == index_state
    assert {ts: log.offset_for_timestamp(ts) for ts in answers} == answers
    assert log.offset_of_max_timestamp() == mx
    assert [b[3] for b in read_all(log)] == [raw for _, _, raw in oracle.batches]
    # appends continue where they stopped
    va = append(log, [build_batch([(1, b"z")])])
    assert va.base_offset == leo
    log.close()


def _copy_dir(src, dst):
    shutil.copytree(src, dst)


def test_reopen_after_kill_keeps_every_batch(tmp_path):
    rng = random.Random(5)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=2500, index_interval_bytes=80)
    produce(log, rng, 100, oracle, compress_every=3)
    assert len(log.segments) > 2
    # simulated kill: copy the files while the log is open (nothing trimmed, nothing fsynced)
    _copy_dir(tmp_path / "t-0", tmp_path / "k-0")
    assert os.path.getsize(log.active_segment.offset_index_path) == 1200 // 8 * 8
    answers = {ts: log.offset_for_timestamp(ts) for ts in range(10_000, 14_000, 100)}
    log.close()
    killed = new_log(tmp_path, name="k-0", segment_bytes=2500, index_interval_bytes=80)
    assert killed.log_end_offset == oracle.records[-1][0] + 1
    assert [b[3] for b in read_all(killed)] == [raw for _, _, raw in oracle.batches]
    assert {ts: killed.offset_for_timestamp(ts) for ts in answers} == answers
    assert killed.offset_of_max_timestamp() == oracle.max_timestamp()
    act = killed.active_segment
    act.sanity_check(full=True)
    va = append(killed, [build_batch([(99_999, b"after")])])
    assert va.base_offset == oracle.records[-1][0] + 1
    killed.close()


def test_reopen_after_kill_with_torn_batch(tmp_path):
    rng = random.Random(6)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=2500, index_interval_bytes=80)
    produce(log, rng, 60, oracle)
    _copy_dir(tmp_path / "t-0", tmp_path / "k-0")
    active_name = os.path.basename(log.active_segment.log_path)
    log.close()
    torn = build_batch([(1, b"y" * 100)])
    with open(tmp_path / "k-0" / active_name, "ab") as f:
        f.write(torn[:70])
    killed = new_log(tmp_path, name="k-0", segment_bytes=2500, index_interval_bytes=80)
    assert killed.log_end_offset == oracle.records[-1][0] + 1
    assert [b[3] for b in read_all(killed)] == [raw for _, _, raw in oracle.batches]
    assert os.path.getsize(tmp_path / "k-0" / active_name) == killed.active_segment.size
    killed.close()


def test_reopen_after_kill_with_corrupt_crc_tail(tmp_path):
    log = new_log(tmp_path)
    append(log, [build_batch([(1, b"a")])])
    good = log.log_end_offset
    append(log, [build_batch([(2, b"b" * 20)])])
    path = log.active_segment.log_path
    log.close_handlers()
    data = bytearray(open(path, "rb").read())
    data[-3] ^= 0xFF  # flip a byte of the last batch's records
    open(path, "wb").write(bytes(data))
    log = new_log(tmp_path)
    assert log.log_end_offset == good
    log.close()


def test_index_files_without_log_and_temp_files_removed(tmp_path):
    d = tmp_path / "t-0"
    log = new_log(tmp_path)
    append(log, [build_batch([(1, b"a")])])
    log.close()
    (d / "00000000000000000077.index").write_bytes(b"")
    (d / "00000000000000000077.timeindex").write_bytes(b"")
    (d / "00000000000000000033.log.deleted").write_bytes(b"junk")
    log = new_log(tmp_path)
    assert [f for f in log_files(d) if not f.endswith(".snapshot")] == [
        "00000000000000000000.index", "00000000000000000000.log", "00000000000000000000.timeindex"]
    assert log.log_end_offset == 1
    log.close()


def test_missing_index_is_rebuilt(tmp_path):
    rng = random.Random(3)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=1500)
    produce(log, rng, 60, oracle)
    first = log.segments[0]
    entries = [first.offset_index.entry(i) for i in range(first.offset_index.entries)]
    log.close()
    os.unlink(first.offset_index_path)
    os.unlink(first.time_index_path)
    log = new_log(tmp_path, segment_bytes=1500)
    seg = log.segments[0]
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == entries
    assert seg.time_index.entries > 0
    assert [b[3] for b in read_all(log)] == [raw for _, _, raw in oracle.batches]
    log.close()


def test_read_max_bytes_and_min_one_message(tmp_path):
    log = new_log(tmp_path)
    b1 = build_batch([(1, b"a" * 100)])
    b2 = build_batch([(2, b"b" * 100)])
    append(log, [b1])
    append(log, [b2])
    assert len(log.read(0, 10, min_one_message=True).records) == len(b1)
    assert len(log.read(0, 10, min_one_message=False).records) == 10
    assert log.read(0, 0, min_one_message=False).records is None
    assert len(log.read(0, len(b1) + 5).records) == len(b1) + 5
    assert log.read(1, 10**6).records.read() == b2[:0] + log.read(1, 10**6).records.read()
    assert parse_batches(log.read(1, 10**6).records.read())[0][0] == 1
    log.close()


def test_read_serves_one_segment(tmp_path):
    b = build_batch([(1, b"x" * 50)])
    log = new_log(tmp_path, segment_bytes=2 * len(b))
    for _ in range(5):
        append(log, [b])
    res = log.read(0, 10**6)
    assert len(res.records) == 2 * len(b)
    res = log.read(2, 10**6)
    assert res.records.position == 0 and len(res.records) == 2 * len(b)
    log.close()


def test_flush_messages_policy(tmp_path):
    log = new_log(tmp_path, flush_messages=3)
    append(log, [build_batch([(1, b"a")])])
    append(log, [build_batch([(1, b"a")])])
    assert log.recovery_point == 0 and log.unflushed_messages == 2
    append(log, [build_batch([(1, b"a")])])
    assert log.recovery_point == 3 and log.unflushed_messages == 0
    log.close()


def test_default_flush_policy_never_fsyncs(tmp_path, monkeypatch):
    calls = []
    real = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    log = new_log(tmp_path)
    for _ in range(50):
        append(log, [build_batch([(1, b"a")])])
    assert calls == []
    log.flush()
    assert calls and log.recovery_point == 50
    log.close()


def test_rolled_segments_flushed_by_the_rolled_flush(tmp_path):
    from storage.log import fsync_flushes

    b = build_batch([(1, b"x" * 50)])
    log = new_log(tmp_path, segment_bytes=len(b))
    for _ in range(3):
        append(log, [b])
    assert len(log.segments) == 3 and log.recovery_point == 0
    flush = log.start_rolled_flush()
    fsync_flushes([flush])
    assert log.finish_flush(flush)
    assert log.recovery_point == 2
    assert log.start_rolled_flush() is None
    log.close()


def test_truncate_to(tmp_path):
    rng = random.Random(17)
    oracle = Oracle()
    log = new_log(tmp_path, segment_bytes=1500)
    produce(log, rng, 80, oracle)
    target = oracle.batches[len(oracle.batches) // 3][0]
    log.truncate_to(target)
    assert log.log_end_offset == target and log.high_watermark == target
    assert all(s.base_offset <= target for s in log.segments)
    kept = [raw for base, last, raw in oracle.batches if base < target]
    assert [b[3] for b in read_all(log)] == kept
    mx = max(t for raw in kept for _, t in batch_records(raw))
    assert log.offset_for_timestamp(mx + 1) is None
    va = append(log, [build_batch([(1, b"a")])])
    assert va.base_offset == target
    log.close()


def test_log_append_time_tracking(tmp_path):
    from tests.unit.test_log_helpers import make_append

    log = new_log(tmp_path)
    append(log, [build_batch([(1, b"a")])])
    assert log.last_append_time_ms == -1
    va = make_append([build_batch([(5000, b"b")])], 1)._replace(log_append_time=5000)
    info = log.append_validated(va)
    assert info.log_append_time == 5000 and log.last_append_time_ms == 5000


def test_append_through_validator(tmp_path):
    pytest.importorskip("storage.validator")
    log = new_log(tmp_path)
    info = log.append(build_batch([(1000, b"a"), (1001, b"b")]), magic_hint=2)
    assert (info.base_offset, info.last_offset, info.record_count) == (0, 1, 2)
    assert log.log_end_offset == 2
    info = log.append(build_batch([(1002, b"c")]), magic_hint=2)
    assert info.base_offset == 2
    assert log.offset_for_timestamp(1001) == (1, 1001)
    log.close()


def test_last_append_time_reloaded_after_restart(tmp_path):
    from protocol import records as R
    from tests.unit.test_log_helpers import make_append

    log = new_log(tmp_path)
    raw = R.build_batch([(1, None, b"a")], timestamp_type=1, log_append_time=777_000)
    log.append_validated(make_append([raw], 0)._replace(log_append_time=777_000))
    assert log.last_append_time_ms == 777_000
    log.close()
    log = new_log(tmp_path)
    assert log.last_append_time_ms == 777_000
    log.close()


def _segment_state(log):
    """Every file of the log's directory (bytes) and each segment's in-memory state."""
    files = {}
    for f in log_files(log.dir):
        with open(os.path.join(log.dir, f), "rb") as fh:
            files[f] = fh.read()
    segs = [(s.base_offset, s.size, s.max_timestamp_so_far, s.offset_of_max_timestamp_so_far,
             s.offset_index.entries, s.time_index.entries, s.time_index.last_entry(),
             s._bytes_since_last_index_entry) for s in log.segments]
    return files, segs, log.log_end_offset, log.high_watermark


#: (segment.bytes, segment.ms, segment.index.bytes, timestamp steps) making each kind of roll
_ROLLS = {
    "size": (3000, 10**9, 1200, [0, 5, 40, -3000, 7000]),
    "time": (10**6, 60_000, 1200, [0, 5, 40, -3000, 7000, 30_000]),
    "time-index-full": (10**6, 10**9, 96, [5, 40]),  # 8 time-index entries, 12 offset-index ones
    "offset-index-full": (10**6, 10**9, 96, [0]),  # one time-index entry per segment
}


def _random_appends(rng, clock, steps, n=400, producers=False):
    """``n`` appends' batches, the clock advanced before each: one plain batch of 1-3
    records of random sizes mostly, every tenth two batches, every tenth an idempotent
    producer's (id 7) batch; timestamps moved by one of ``steps`` each time.
    ``producers``: idempotent batches are a third, of two producers (7 and 8), and among
    them retries of the last batch, sequence gaps, a new epoch from sequence 0, a
    sequence that wraps past Int32.MAX and a transactional batch (refused here: no
    coordinator)."""
    from protocol import records as R

    t = 1_700_000_000_000
    state = {7: [0, 0, None], 8: [2**31 - 20, 0, None]}  # pid: [next sequence, epoch, last batch]
    for _ in range(n):
        t += rng.choice(steps)
        clock.advance(rng.choice([0, 0, 10, 20_000]))
        recs = [(t, b"v" * rng.choice([0, 10, 60, 200])) for j in range(rng.randint(1, 3))]
        kind = rng.random()
        if kind < 0.1:  # two batches in one append
            yield [build_batch(recs), build_batch(recs[:1])]
        elif kind < (0.43 if producers else 0.2):  # an idempotent producer's batch
            pid = rng.choice([7, 8]) if producers else 7
            seq, epoch, last = state[pid]
            what = rng.random() if producers else 1.0
            if what < 0.1 and last is not None:
                yield [last]  # a retry: the first append's offsets again
                continue
            if what < 0.15:
                seq += 3  # a gap: OutOfOrderSequenceError
            elif what < 0.2:
                epoch, seq = epoch + 1, 0  # a new epoch starts at sequence 0
            txn = 0.2 <= what < 0.23
            batch = R.build_batch([(ts, None, v) for ts, v in recs], producer_id=pid, producer_epoch=epoch,
                                  base_sequence=seq, is_transactional=txn)
            if not (0.1 <= what < 0.15 or txn):  # appended: the producer's next sequence moves
                state[pid] = [(seq + len(recs)) % 2**31, epoch, batch]
            yield [batch]
        else:
            yield [build_batch(recs)]


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("rolls", sorted(_ROLLS))
def test_one_call_append_matches_the_general_path(tmp_path, monkeypatch, seed, rolls):
    """LogSegment.append_unindexed (one batch, no roll, no index entry due; the first
    batch of a segment too) leaves the same files and state as should_roll + roll +
    append do for the same appends: random
    sizes crossing index.interval.bytes, timestamps going back and forward (time index
    entries, max timestamps), rolls by segment.bytes, by segment.ms and by full indexes,
    multi-batch appends and batches with a producer id in between."""
    from storage.segment import LogSegment

    segment_bytes, segment_ms, index_bytes, steps = _ROLLS[rolls]

    def run(name, one_call):
        rng = random.Random(seed)
        clock = ManualClock(1_700_000_000_000)
        log = new_log(tmp_path, name, clock=clock, segment_bytes=segment_bytes, segment_ms=segment_ms,
                      segment_index_bytes=index_bytes, index_interval_bytes=300)
        if not one_call:  # the general path only
            monkeypatch.setattr(LogSegment, "append_unindexed", lambda self, *a: False)
        used = first = 0
        for batches in _random_appends(rng, clock, steps):
            before = (log.active_segment, log.active_segment.size)
            append(log, batches)
            if one_call and len(batches) == 1 and before == (log.active_segment, 0):
                first += 1  # the first batch of a segment (that it did not roll)
            elif one_call and len(batches) == 1 and before[0] is log.active_segment:
                used += 1
        state = _segment_state(log)
        monkeypatch.undo()
        log.close()
        return state, len(log.segments), used, first

    fast, n_fast, used, first = run("fast-0", True)
    slow, n_slow, _, _ = run("slow-0", False)
    assert fast == slow
    assert n_fast == n_slow > 5  # rolls happened
    assert used > 150 and first >= 1


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("timestamp_type", ["CreateTime", "LogAppendTime"])
@pytest.mark.parametrize("rolls", sorted(_ROLLS))
def test_compiled_append_matches_the_python_path(tmp_path, monkeypatch, seed, timestamp_type, rolls):
    """storage/_append.c (Log.append_produced's one batch without a producer id into a
    segment needing no roll and no index entry) leaves the same files, segments, log and
    producer state and answers the same AppendInfo as Log._append does for the same
    produced appends: random sizes crossing index.interval.bytes, timestamps going back
    and forward, rolls by segment.bytes, segment.ms (with segment.jitter.ms) and full
    indexes, flushes by flush.messages, multi-batch appends, idempotent producers' batches
    (written by it once Log._append has checked them, the producer state compared too)
    and a released segment file descriptor (the open-files LRU's eviction) in between.
    And storage/_append.c's append_produced (Log.append_produced in one call, which the
    produce handler's compiled loop calls too) leaves the same as Python's."""
    from storage import log as log_mod

    assert log_mod._compiled_append is not None, "storage/_append.c is not built (make venv builds it)"
    compiled = log_mod._append_one
    segment_bytes, segment_ms, index_bytes, steps = _ROLLS[rolls]

    def run(name, use_compiled, whole=False):
        rng = random.Random(seed)
        clock = ManualClock(1_700_000_000_000)
        # segment.jitter.ms: each segment's roll jitter drawn from the same seeded rng in both runs
        log = Log(str(tmp_path / name), topic_config(
            segment_bytes=segment_bytes, segment_ms=segment_ms, segment_jitter_ms=segment_ms // 3,
            segment_index_bytes=index_bytes, index_interval_bytes=300, flush_messages=25,
            message_timestamp_type=timestamp_type), clock, rng=random.Random(seed))
        taken = []
        if whole:  # storage/_append.c's append_produced, all of it
            assert log_mod._append_produced is log_mod._compiled_append.append_produced
        else:  # append_produced's Python body, which calls _append_one, switched here
            monkeypatch.setattr(log_mod, "_append_produced", log_mod._append_produced_not_compiled)
            if use_compiled:
                def counting(lg, va, now_ms, producer_checked=False):
                    info = compiled(lg, va, now_ms, producer_checked)
                    taken.append((info is not None, producer_checked))
                    return info
                monkeypatch.setattr(log_mod, "_append_one", counting)
            else:
                monkeypatch.setattr(log_mod, "_append_one", log_mod._append_one_not_compiled)
        answers = []
        for batches in _random_appends(rng, clock, steps, producers=True):
            if rng.random() < 0.05:
                log.active_segment.file._release()  # as OPEN_FILES releases the least recently used
            try:
                info = log.append_produced(memoryview(bytearray(b"".join(batches))), clock.time_ms(), 16)
                answers.append(tuple(info))
            except Exception as exc:  # noqa: BLE001 - compared below
                answers.append((type(exc).__name__, str(exc).replace(name, "<log>")))  # names its log
        producers = {pid: (e.producer_epoch, list(e.batches), e.last_timestamp, e.coordinator_epoch,
                           e.current_txn_first_offset) for pid, e in log.producer_state.producers.items()}
        state = (_segment_state(log), answers, log._last_append_time_ms, log.recovery_point,
                 log.producer_state.map_end_offset, producers, dict(log.producer_state.ongoing))
        monkeypatch.undo()
        log.close()
        return state, len(log.segments), taken

    from storage.producer_state import ProducerStateManager

    from storage.segment import LogSegment

    checked = {"slow-0": 0, "whole-0": 0}  # one idempotent batch checked in Python (prepare_one)
    indexed = {"slow-0": 0, "whole-0": 0}  # index entries storage/_append.c's append_one had made
    prepare_one, index_entry, segment_append = (ProducerStateManager.prepare_one, LogSegment._index_entry,
                                                LogSegment.append)
    in_append = []  # set while LogSegment.append (the Python path) runs

    def counted(name, *args, **kwargs):
        def count(self, b):
            checked[name] += 1
            return prepare_one(self, b)

        def count_entry(self, *a):
            if not in_append:  # made by storage/_append.c's append_one, not by LogSegment.append
                indexed[name] += 1
            return index_entry(self, *a)

        def python_append(self, *a):
            in_append.append(True)
            try:
                return segment_append(self, *a)
            finally:
                in_append.pop()
        ProducerStateManager.prepare_one, LogSegment._index_entry, LogSegment.append = (
            count, count_entry, python_append)
        try:
            return run(name, *args, **kwargs)
        finally:
            ProducerStateManager.prepare_one, LogSegment._index_entry, LogSegment.append = (
                prepare_one, index_entry, segment_append)

    fast, n_fast, taken = run("fast-0", True)
    slow, n_slow, _ = counted("slow-0", False)
    whole, n_whole, _ = counted("whole-0", True, whole=True)
    assert fast == slow == whole and n_whole == n_slow
    assert sum(1 for a in whole[1] if a[0] == "OutOfOrderSequenceError") >= 3  # the mix has its cases
    assert sum(1 for a in whole[1] if a[0] == "InvalidTxnStateError") >= 1
    assert sum(1 for a in whole[1] if len(a) == 7 and a[6]) >= 3  # duplicates
    # storage/_append.c's append_idempotent took most idempotent batches, Log._append the rest
    # (index.interval.bytes=300 here: most appends are due an index entry, which only
    # Log._append writes; the rest of the idempotent batches the compiled case takes)
    assert checked["slow-0"] > 100 and checked["whole-0"] < checked["slow-0"] - 15, checked
    assert indexed["slow-0"] == 0 and indexed["whole-0"] > 20, indexed  # batches past index.interval.bytes
    assert n_fast == n_slow > 5  # rolls happened
    # the compiled path took most, idempotent batches (checked first) too, the Python path the rest
    assert sum(t for t, _ in taken) > 100 and not all(t for t, _ in taken)
    assert sum(1 for t, checked in taken if t and checked) > 10


def test_a_failed_compiled_write_changes_nothing(tmp_path):
    """A write the compiled append cannot make (here: a descriptor that is not open) is
    left to the Python path, which raises the storage error; nothing is appended, and the
    next append after the file is back goes on from the same log end."""
    from storage.errors import KafkaStorageError

    clock = ManualClock(1_700_000_000_000)
    log = new_log(tmp_path, clock=clock)
    now = clock.time_ms()
    assert log.append_produced(memoryview(bytearray(build_batch([(now, b"a")]))), now, 1).base_offset == 0
    seg = log.active_segment
    size = seg.size
    with unopened_descriptor(seg, tmp_path), pytest.raises(KafkaStorageError, match="I/O error appending"):
        log.append_produced(memoryview(bytearray(build_batch([(now, b"b")]))), now, 1)
    assert (log.log_end_offset, seg.size) == (1, size)
    info = log.append_produced(memoryview(bytearray(build_batch([(now, b"c")]))), now, 1)
    assert (info.base_offset, log.log_end_offset) == (1, 2)
    from protocol import records as R

    assert [bytes(r.value) for *_, raw in read_all(log) for r in R.iter_records(bytes(raw), 0)] == [b"a", b"c"]
