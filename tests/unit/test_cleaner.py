"""The log cleaner on real logs and a manual clock: which records a clean keeps (offset,
timestamp and header strategies), tombstones and their delete horizon, transactions,
producers' last batches, compressed and LogAppendTime batches, the offset map filling
up (cleaning in passes), the compaction lags on record timestamps, the time index after
cleaning, and the checkpoint file. Every behaviour test runs twice: with the compiled
loops (storage/_cleaner.c) and with the pure-Python reference."""

from __future__ import annotations

import os

import pytest

from protocol import records as R
from storage import cleaner as C
from storage.checkpoint import read_checkpoint
from storage.transaction_index import AbortedTxn
from tests.unit.cleaner_helpers import (START_MS, append, batches, cleaner, compact_topic, full_scan_offset_for_time,
                                        make_lm, read_all)

IMPLS = [pytest.param(True, id="c"), pytest.param(False, id="py")]


def roll(log, clock, key=b"pad"):
    """Append filler records until a new segment starts, then one more (so what came
    before is in inactive, cleanable segments)."""
    n = len(log.segments)
    while len(log.segments) == n:
        append(log, clock, [(key, b"." * 600)])
    append(log, clock, [(key, b".")])


def latest_per_key(records):
    last = {}
    for rec in records:
        last[rec[2]] = rec
    return sorted(last.values())


# --------------------------------------------------------------------------- the map


@pytest.mark.parametrize("versioned", [False, True])
def test_offset_maps_agree(versioned):
    assert C.COMPILED, "the compiled cleaner loops must be built in the test environment"
    maps = [C.new_offset_map(8, versioned, compiled=True), C.new_offset_map(8, versioned, compiled=False)]
    for m in maps:
        m.put(b"a", 1, 50)
        m.put(b"b", 2, 10)
        m.put(b"a", 3, 40)  # an older version: kept only by the offset map
        assert m.get(b"zz") is None and m.size == 2 and m.latest_offset == 3
    assert maps[0].get(b"a") == maps[1].get(b"a") == ((1, 50) if versioned else (3, 0))
    for m in maps:
        for i in range(6):
            m.put(b"k%d" % i, 10 + i)
        assert m.size == 8
        with pytest.raises(OverflowError):
            m.put(b"one more", 99)
        m.clear()
        assert m.size == 0 and m.latest_offset == -1 and m.get(b"a") is None


def test_map_slots_follow_kafkas_entry_size():
    assert C.map_slots(24 * 1000, versioned=False) == 1000
    assert C.map_slots(32 * 1000, versioned=True) == 1000


# --------------------------------------------------------------------------- offset strategy


@pytest.mark.parametrize("compiled", IMPLS)
def test_keeps_the_latest_record_of_each_key_and_never_moves_offsets(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    written = []
    for i in range(120):
        recs = [(b"k%d" % ((i * 7 + j) % 13), b"value-%d-%d" % (i, j)) for j in range(1 + i % 3)]
        info = append(log, clock, recs)
        written += [(info.base_offset + j, None, k, v) for j, (k, v) in enumerate(recs)]
    assert len(log.segments) >= 4
    active_base = log.active_segment.base_offset
    before = read_all(log)
    result = cleaner(lm, cfg, clock, compiled).clean_once()
    assert result is not None and result.end_offset == active_base
    after = read_all(log)
    cleaned = [r for r in before if r[0] < active_base]
    expected = latest_per_key(cleaned) + [r for r in before if r[0] >= active_base]
    assert after == expected  # same offsets, timestamps, keys, values and headers
    assert log.log_end_offset == len(written) and log.log_start_offset == 0
    # nothing left to clean: the next look finds nothing eligible
    assert cleaner(lm, cfg, clock, compiled).clean_once() is None
    lm.shutdown()


@pytest.mark.parametrize("compiled", IMPLS)
def test_tombstones_get_a_delete_horizon_and_go_after_it(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, delete_retention_ms=60_000)
    append(log, clock, [(b"a", b"1"), (b"b", b"1")])
    append(log, clock, [(b"a", None)])  # the tombstone of a
    while len(log.segments) < 3:
        append(log, clock, [(b"c", b"x" * 500)])
    c = cleaner(lm, cfg, clock, compiled)
    now = clock.time_ms()
    c.clean_once()
    recs = read_all(log)
    assert [r[2] for r in recs if r[2] == b"a"] == [b"a"] and (recs[1][3] is None)
    tomb_batch = next(h for h in batches(log) if h.base_offset == 2)
    assert tomb_batch.delete_horizon_ms == now + 60_000  # KIP-534: in baseTimestamp, bit 6 set
    assert tomb_batch.attributes & R.DELETE_HORIZON_MASK
    # the record's own timestamp is unchanged under the new base timestamp
    assert [r[1] for r in recs if r[0] == 2] == [START_MS + 2]
    # before the horizon a clean keeps it; after it the tombstone goes
    roll(log, clock, b"c")
    clock.advance(30_000)
    assert c.clean_once() is not None
    assert any(r[0] == 2 for r in read_all(log))
    clock.advance(31_000)
    roll(log, clock, b"c")
    assert c.clean_once() is not None
    keys = {r[2] for r in read_all(log)}
    assert b"a" not in keys and b"b" in keys
    lm.shutdown()


@pytest.mark.parametrize("compiled", IMPLS)
def test_keyless_records_left_from_before_compaction_are_dropped(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    lm.create_topic("t", 1, {"cleanup.policy": "delete", "segment.bytes": "2000", "file.delete.delay.ms": "0"})
    log = lm.get_log("t", 0)
    for i in range(40):
        append(log, clock, [(None if i % 2 else b"k", b"v%d" % i + b"." * 100)])
    lm.set_topic_config("t", {"cleanup.policy": "compact", "segment.bytes": "2000", "min.cleanable.dirty.ratio": "0.01"})
    active = log.active_segment.base_offset
    result = cleaner(lm, cfg, clock, compiled).clean_once()
    assert result.stats.invalid_messages == len([i for i in range(active) if i % 2])
    assert [r[2] for r in read_all(log) if r[0] < active] == [b"k"]
    lm.shutdown()


# --------------------------------------------------------------------------- KIP-280


@pytest.mark.parametrize("compiled", IMPLS)
def test_timestamp_strategy_keeps_the_newest_record_not_the_last_written(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, compaction_strategy="timestamp")
    t = START_MS
    append(log, clock, [(b"a", b"new", t + 100), (b"b", b"b-old", t + 10)])
    append(log, clock, [(b"a", b"late-old", t + 50)])  # written later, older timestamp: loses
    append(log, clock, [(b"b", b"b-same-ts-later", t + 10)])  # same timestamp, higher offset: wins
    while len(log.segments) < 3:
        append(log, clock, [(b"pad", b"." * 600, t + 1)])
    c = cleaner(lm, cfg, clock, compiled)
    c.clean_once()
    got = {r[2]: r[3] for r in read_all(log) if r[2] != b"pad"}
    assert got == {b"a": b"new", b"b": b"b-same-ts-later"}
    # a later clean keeps the winner even when the newest write has an older timestamp
    append(log, clock, [(b"a", b"later-still-older", t + 60)])
    while log.active_segment.size == 0 or len(log.segments) < 5:
        append(log, clock, [(b"pad", b"." * 600, t + 1)])
    c.clean_once()
    got = {r[2]: r[3] for r in read_all(log) if r[2] == b"a"}
    assert got == {b"a": b"new"}
    lm.shutdown()


@pytest.mark.parametrize("compiled", IMPLS)
def test_header_strategy_orders_by_the_headers_long_value(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, compaction_strategy="header", compaction_strategy_header="version")

    def v(n):
        return [("version", n.to_bytes(8, "big", signed=True))]

    append(log, clock, [(b"a", b"v5", None, v(5)), (b"b", b"b-with", None, v(-3)), (b"c", b"c-none")])
    append(log, clock, [(b"a", b"v2", None, v(2)), (b"b", b"b-without"), (b"c", b"c-none-later")])
    append(log, clock, [(b"a", b"v5-again", None, v(5)), (b"d", b"short", None, [("version", b"\x01")])])
    append(log, clock, [(b"d", b"d-with", None, v(0)),
                        (b"e", b"e-twice", None, v(9) + [("version", b"\x00" * 8)])])  # the last one counts: 0
    append(log, clock, [(b"e", b"e-one", None, v(1))])
    while len(log.segments) < 3:
        append(log, clock, [(b"pad", b"." * 600)])
    cleaner(lm, cfg, clock, compiled).clean_once()
    got = {r[2]: r[3] for r in read_all(log) if r[2] != b"pad"}
    assert got == {b"a": b"v5-again", b"b": b"b-with", b"c": b"c-none-later", b"d": b"d-with", b"e": b"e-one"}
    lm.shutdown()


def test_header_strategy_without_a_header_name_is_offset_order(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, compaction_strategy="header")
    append(log, clock, [(b"a", b"first", None, [("version", (9).to_bytes(8, "big"))])])
    append(log, clock, [(b"a", b"second")])
    while len(log.segments) < 2:
        append(log, clock, [(b"pad", b"." * 600)])
    cleaner(lm, cfg, clock).clean_once()
    assert [r[3] for r in read_all(log) if r[2] == b"a"] == [b"second"]
    lm.shutdown()


# --------------------------------------------------------------------------- batch kinds


@pytest.mark.parametrize("compiled", IMPLS)
@pytest.mark.parametrize("codec", [1, 2, 3, 4], ids=["gzip", "snappy", "lz4", "zstd"])
def test_compressed_batches_are_filtered_and_recompressed(tmp_path, compiled, codec):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    for i in range(30):
        append(log, clock, [(b"k%d" % (j % 4), b"v%d-%d" % (i, j) + b"=" * 80) for j in range(6)], compression=codec)
    before = read_all(log)
    active = log.active_segment.base_offset
    cleaner(lm, cfg, clock, compiled).clean_once()
    assert read_all(log) == latest_per_key([r for r in before if r[0] < active]) + [r for r in before if r[0] >= active]
    for h in batches(log):
        assert h.compression == codec
    lm.shutdown()


@pytest.mark.parametrize("compiled", IMPLS)
def test_log_append_time_batches_keep_their_append_time(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, message_timestamp_type="LogAppendTime")
    for i in range(40):
        append(log, clock, [(b"k%d" % (i % 3), b"v%d" % i + b"." * 200), (b"z", b"z%d" % i)])
    before = read_all(log)
    active = log.active_segment.base_offset
    cleaner(lm, cfg, clock, compiled).clean_once()
    after = read_all(log)
    assert after == latest_per_key([r for r in before if r[0] < active]) + [r for r in before if r[0] >= active]
    assert all(h.timestamp_type == 1 for h in batches(log))
    lm.shutdown()


# --------------------------------------------------------------------------- producers and transactions


def _enable_txn(log):
    log.producer_state.transactions_enabled = True


@pytest.mark.parametrize("compiled", IMPLS)
def test_a_producers_last_batch_stays_empty_so_its_sequence_survives(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    seq = 0
    for i in range(10):
        append(log, clock, [(b"k", b"idem-%d" % i + b"." * 300)], producer_id=7, producer_epoch=2, base_sequence=seq)
        seq += 1
    last_idem = log.log_end_offset - 1
    for i in range(10):
        append(log, clock, [(b"k", b"plain-%d" % i + b"." * 300)])
    roll(log, clock, b"other")
    cleaner(lm, cfg, clock, compiled).clean_once()
    kept = [h for h in batches(log) if h.producer_id == 7]
    assert [(h.last_offset, h.records_count, h.base_sequence, h.producer_epoch) for h in kept] == [
        (last_idem, 0, 9, 2)]
    # rebuilt from the log alone (no snapshot, no clean shutdown, no recovery point),
    # the producer continues at sequence 10
    lm.shutdown()
    for name in os.listdir(log.dir):
        if name.endswith(".snapshot"):
            os.unlink(os.path.join(log.dir, name))
    for name in (".kafka_cleanshutdown", "recovery-point-offset-checkpoint"):
        os.unlink(os.path.join(str(tmp_path), name))
    lm2, _cfg2, _clock2 = make_lm(tmp_path, clock)
    entry = lm2.get_log("t", 0).producer_state.last_entry(7)
    assert entry is not None and entry.last_seq == 9 and entry.producer_epoch == 2
    lm2.shutdown()


@pytest.mark.parametrize("compiled", IMPLS)
def test_aborted_transactions_are_removed_and_markers_follow_their_data(tmp_path, compiled):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, delete_retention_ms=10_000)
    _enable_txn(log)
    append(log, clock, [(b"a", b"committed-a"), (b"b", b"committed-b")], producer_id=1, producer_epoch=0,
           base_sequence=0, is_transactional=True)
    log.append_end_txn_marker(1, 0, commit=True, coordinator_epoch=0)
    append(log, clock, [(b"a", b"aborted-a"), (b"c", b"aborted-c")], producer_id=2, producer_epoch=0,
           base_sequence=0, is_transactional=True)
    abort_offset = log.append_end_txn_marker(2, 0, commit=False, coordinator_epoch=0).base_offset
    while len(log.segments) < 3:
        append(log, clock, [(b"pad", b"." * 700)])
    assert log.collect_aborted_txns(0, log.log_end_offset) == [AbortedTxn(2, 3, abort_offset, 6)]
    c = cleaner(lm, cfg, clock, compiled)
    c.clean_once()
    recs = {r[2]: r[3] for r in read_all(log)}
    assert recs[b"a"] == b"committed-a" and b"c" not in recs
    # the aborted batch is gone (but for an empty header keeping producer 2's sequence);
    # its ABORT marker stays while this clean removed its data, indexed again in the
    # cleaned segment; the COMMIT marker of a transaction whose batch is still there stays
    assert [(h.base_offset, h.records_count) for h in batches(log) if h.producer_id == 2] == [(3, 0), (5, 1)]
    assert log.collect_aborted_txns(0, log.log_end_offset) == [AbortedTxn(2, 3, abort_offset, 6)]
    # newer values of a and b empty the committed batch; while the producers are alive
    # their last batches stay (emptied) and so do the markers of their transactions
    for k in (b"a", b"b"):
        append(log, clock, [(k, b"newer")])
    roll(log, clock)
    c.clean_once()
    assert [h.base_offset for h in batches(log) if h.is_control] == [2, abort_offset]
    # once the producers expired (producer.id.expiration.ms, 1 day), round after round,
    # each marker with nothing left of its transaction gets a delete horizon and goes after it
    clock.advance(86_400_001)
    assert log.remove_expired_producers() >= 2
    rounds = []
    for _ in range(6):
        roll(log, clock)
        c.clean_once()
        markers = [(h.base_offset, h.delete_horizon_ms is not None) for h in batches(log)
                   if h.is_control and h.records_count]
        rounds.append(markers)
        if not markers:
            break
        clock.advance(11_000)
    assert rounds[-1] == [] and 2 <= len(rounds) <= 4, rounds
    assert any(horizon for markers in rounds for _off, horizon in markers)
    assert log.collect_aborted_txns(0, log.log_end_offset) == []
    assert [h for h in batches(log) if h.producer_id in (1, 2)] == []
    lm.shutdown()


# --------------------------------------------------------------------------- passes and lags


def test_a_map_too_small_for_the_keys_cleans_in_passes(tmp_path):
    # 1.5 MB of map at load factor 0.002: 131 keys per pass
    lm, cfg, clock = make_lm(tmp_path, log_cleaner_dedupe_buffer_size=1_500_000,
                             log_cleaner_io_buffer_load_factor=0.002)
    log = compact_topic(lm, segment_bytes=20_000)
    keys = 600
    for i in range(keys * 2):
        append(log, clock, [(b"key-%05d" % (i % keys), b"v%d" % i)])
    active = log.active_segment.base_offset
    c = cleaner(lm, cfg, clock)
    ends = []
    while (res := c.clean_once()) is not None:
        ends.append(res.end_offset)
        assert res.stats.buffer_utilization <= 0.002 + 1e-9
    assert len(ends) > 3 and ends == sorted(ends) and ends[-1] == active
    before_active = [r for r in read_all(log) if r[0] < active]
    assert len({r[2] for r in before_active}) == len(before_active)  # one record per key left
    assert read_checkpoint(os.path.join(str(tmp_path), "cleaner-offset-checkpoint")) == {("t", 0): active}
    lm.shutdown()


def test_min_compaction_lag_holds_back_segments_by_record_time_not_file_time(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, min_compaction_lag_ms=60_000)
    old = START_MS - 3_600_000
    for i in range(20):
        append(log, clock, [(b"k", b"old-%d" % i + b"." * 300, old + i)])
    first_young = log.log_end_offset
    for i in range(20):
        append(log, clock, [(b"k", b"young-%d" % i + b"." * 300)])
    append(log, clock, [(b"k", b"active")])
    for seg in log.segments:  # file times say everything is ancient: they must not count
        os.utime(seg.log_path, (0, 0))
    young_base = max(s.base_offset for s in log.segments if s.base_offset <= first_young)
    c = cleaner(lm, cfg, clock)
    res = c.clean_once()
    # the clean stops at the segment holding the first young record
    assert res.end_offset == young_base < log.active_segment.base_offset
    young = [r for r in read_all(log) if r[3].startswith(b"young")]
    assert len(young) == 20  # the young records are all still there
    # once the lag has passed they are cleaned too (the "active" record, written last,
    # is in the same segment: the clean is by segment)
    clock.advance(120_000)
    roll(log, clock)
    c.clean_once()
    assert [r[3] for r in read_all(log) if r[2] == b"k"] == [b"active"]
    lm.shutdown()


def test_max_compaction_lag_forces_a_clean_below_the_dirty_ratio(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, min_cleanable_dirty_ratio=1, max_compaction_lag_ms=60_000)
    for i in range(30):
        append(log, clock, [(b"k%d" % (i % 2), b"v%d" % i + b"." * 300)])
    c = cleaner(lm, cfg, clock)
    assert c.clean_once() is None  # no ratio is > 1, and nothing is overdue yet
    clock.advance(61_000)
    res = c.clean_once()
    assert res is not None and c.metrics.max_compaction_delay_ms > 0
    lm.shutdown()


def test_a_compacted_topic_rolls_within_max_compaction_lag(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, segment_bytes=10**6, max_compaction_lag_ms=60_000)
    append(log, clock, [(b"k", b"1")])
    clock.advance(61_000)
    append(log, clock, [(b"k", b"2")])
    assert len(log.segments) == 2  # rolled by record time at max.compaction.lag.ms, not segment.ms (7 days)
    lm.shutdown()


# --------------------------------------------------------------------------- the time index


@pytest.mark.parametrize("compiled", IMPLS)
def test_search_by_time_after_cleaning_answers_as_a_full_scan(tmp_path, compiled):
    import random

    rnd = random.Random(5)
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, index_interval_bytes=200)
    for i in range(200):
        ts = START_MS + rnd.randrange(0, 100_000)
        append(log, clock, [(b"k%d" % rnd.randrange(15), b"v%d" % i + b"." * rnd.randrange(10, 200), ts)],
               producer_id=3 if i % 5 == 0 else -1, producer_epoch=0 if i % 5 == 0 else -1,
               base_sequence=i // 5 if i % 5 == 0 else -1)
    cleaner(lm, cfg, clock, compiled).clean_once()
    recs = read_all(log)
    for target in sorted({START_MS + rnd.randrange(-1000, 101_000) for _ in range(300)} | {r[1] for r in recs}):
        got = log.offset_for_timestamp(target)
        assert (None if got is None else tuple(got)) == full_scan_offset_for_time(recs, target), target
    best = max(r[1] for r in recs)
    assert tuple(log.offset_of_max_timestamp()) == next((r[0], r[1]) for r in recs if r[1] == best)
    # each segment's index entries point at batches that hold their timestamps
    for seg in log.segments[:-1]:
        seg.sanity_check(full=True)
        seg.time_index.sanity_check(max_offset=seg.read_next_offset() - 1)
    lm.shutdown()


# --------------------------------------------------------------------------- grouping and I/O


def test_segments_are_grouped_by_size_as_kafka_groups_them():
    S = C.SegmentInfo
    segs = [S(0, 300, 100, 16, 24), S(100, 300, 200, 16, 24), S(200, 500, 300, 16, 24), S(300, 100, 400, 16, 24)]
    groups = C.group_segments_by_size(segs, max_size=700, max_index_size=1000, first_uncleanable=400)
    assert [[s.base_offset for s in g] for g in groups] == [[0, 100], [200, 300]]
    groups = C.group_segments_by_size(segs, max_size=10**6, max_index_size=40, first_uncleanable=400)
    assert [[s.base_offset for s in g] for g in groups] == [[0], [100], [200], [300]]
    big = [S(0, 10, 1 << 31, 8, 12), S(1 << 31, 10, (1 << 31) + 5, 8, 12)]
    assert len(C.group_segments_by_size(big, 10**6, 10**6, (1 << 31) + 5)) == 2  # offsets must fit int32


def test_the_throttler_keeps_the_io_rate_without_sleeping_for_real():
    now = [0.0]
    slept = []

    def sleep(s):
        slept.append(s)
        now[0] += s

    t = C.Throttler(1000.0, clock=lambda: now[0], sleep=sleep)
    for _ in range(10):
        t.maybe_throttle(200)  # 2000 bytes at once: 2 s needed at 1000 B/s
    assert sum(slept) == pytest.approx(2.0, rel=0.05)
    C.Throttler(float("inf"), clock=lambda: 0.0, sleep=lambda s: pytest.fail("slept")).maybe_throttle(10**9)


# --------------------------------------------------------------------------- the manager


def test_the_checkpoint_is_reset_when_the_log_moved_under_it(tmp_path, caplog):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    for i in range(30):
        append(log, clock, [(b"k", b"v%d" % i + b"." * 300)])
    c = cleaner(lm, cfg, clock)
    c.checkpoints[str(tmp_path)] = {("t", 0): 10**6}  # past the log end: data was lost
    res = c.clean_once()
    assert res is not None and "past the log end offset" in caplog.text
    assert read_checkpoint(os.path.join(str(tmp_path), "cleaner-offset-checkpoint"))[("t", 0)] == res.end_offset
    lm.shutdown()


def test_a_partition_that_fails_to_clean_is_marked_uncleanable(tmp_path, caplog):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    for i in range(30):
        append(log, clock, [(b"k%d" % i, b"v" * 300)])
    # damage a record behind a valid CRC: its length runs past the batch
    seg = log.segments[0]
    data = bytearray(seg.read_bytes(0, seg.size))
    h = R.parse_batch_header(data, 0)
    data[R.HEADER_SIZE:R.HEADER_SIZE + 2] = b"\xfe\x7f"  # record length varint: 8191
    R._rewrite_crc(data, 0)
    os.pwrite(seg.file.fileno(), bytes(data[:h.size]), 0)
    c = cleaner(lm, cfg, clock)
    assert c.clean_once() is None
    assert c.uncleanable_partitions() == {str(tmp_path): 1} and c.metrics.failures == 1
    assert "marked uncleanable" in caplog.text and "00000000000000000000.log" in caplog.text
    assert c.clean_once() is None  # not tried again until a restart
    assert not [n for n in os.listdir(log.dir) if n.endswith(".cleaned")]
    lm.shutdown()


def test_retention_waits_while_a_clean_reads_the_log(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    lm.create_topic("t", 1, {"cleanup.policy": "compact,delete", "segment.bytes": "2000", "retention.ms": "1000",
                             "file.delete.delay.ms": "0"})
    log = lm.get_log("t", 0)
    for i in range(30):
        append(log, clock, [(b"k%d" % i, b"v" * 300)])
    clock.advance(10_000)
    lm.busy.add(("t", 0))
    assert lm.cleanup_logs() == 0
    lm.busy.discard(("t", 0))
    assert lm.cleanup_logs() > 0
    lm.shutdown()


def test_deleting_a_topic_drops_its_checkpoint_and_a_clean_under_way(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm)
    for i in range(30):
        append(log, clock, [(b"k", b"v%d" % i + b"." * 300)])
    c = cleaner(lm, cfg, clock)
    ltc = c.grab_filthiest()
    assert ltc is not None and ("t", 0) in lm.busy
    lm.delete_topic("t")
    assert c.in_progress[("t", 0)] == "aborted"
    # the worker's answer arrives after the deletion: dropped, nothing swapped
    assert c._finish(ltc, ("aborted", None)) == 0
    assert ("t", 0) not in lm.busy and ("t", 0) not in c.in_progress
    lm.shutdown()


def test_worker_processes_clean_and_the_loop_swaps_it_in(tmp_path):
    """The real path: spawned worker processes (log.cleaner.threads=2, two partitions
    cleaned at once), polled by tick() as the broker does."""
    import time

    from storage.log_cleaner import LogCleaner

    lm, cfg, clock = make_lm(tmp_path, log_cleaner_backoff_ms=0, log_cleaner_threads=2,
                             log_cleaner_dedupe_buffer_size=4 * 1024 * 1024)
    logs = []
    for name in ("t1", "t2"):
        compact_topic(lm, name)
        logs.append(lm.get_log(name, 0))
    for i in range(200):
        for log in logs:
            append(log, clock, [(b"k%d" % (i % 5), b"v%d" % i + b"." * 100)])
    actives = [log.active_segment.base_offset for log in logs]
    c = LogCleaner(lm, cfg, clock)
    try:
        c.tick()
        assert sum(1 for w in c._workers if w.busy_with is not None) == 2  # both at once
        deadline = time.monotonic() + 60
        while c.metrics.runs < 2 and time.monotonic() < deadline:
            c.tick()
            time.sleep(0.02)
        assert c.metrics.runs == 2, c.metrics
        for log, active in zip(logs, actives):
            assert len([r for r in read_all(log) if r[0] < active]) == 5
        assert c.metrics.peak_rss_bytes > 0 and c.metrics.bytes_read > 0
        assert len({w.proc.pid for w in c._workers}) == 2
    finally:
        c.shutdown()
        lm.shutdown()


def test_log_cleaner_settings_change_at_run_time(tmp_path):
    """log.cleaner.* are dynamic broker configs, as Kafka's LogCleaner.ReconfigurableConfigs."""
    from config.describe import is_dynamic

    lm, cfg, clock = make_lm(tmp_path)
    c = cleaner(lm, cfg, clock)
    assert c.backoff_ms == 15000 and len(c._workers) == 1
    for name in ("log.cleaner.threads", "log.cleaner.backoff.ms", "log.cleaner.io.max.bytes.per.second",
                 "log.cleaner.dedupe.buffer.size", "log.cleaner.compaction.strategy"):
        assert is_dynamic(name), name
    lm.set_dynamic_broker_configs(default={"log.cleaner.backoff.ms": "250", "log.cleaner.threads": "2",
                                           "log.cleaner.dedupe.buffer.size": str(64 * 1024 * 1024)})
    c.tick()
    assert c.backoff_ms == 250 and [w.index for w in c._workers] == [0, 1]
    assert all(w.args[0] == 32 * 1024 * 1024 for w in c._workers)
    lm.shutdown()


def test_retention_by_time_on_compact_delete_uses_the_cleaned_segments_record_times(tmp_path):
    lm, cfg, clock = make_lm(tmp_path)
    log = compact_topic(lm, cleanup_policy="compact,delete", retention_ms=3_600_000)
    old = START_MS - 2 * 3_600_000
    for i in range(30):
        append(log, clock, [(b"old%d" % (i % 4), b"v" * 300, old + i)])
    log.roll()
    for i in range(30):
        append(log, clock, [(b"new%d" % (i % 4), b"v" * 300)])
    log.roll()
    append(log, clock, [(b"tail", b"x")])
    cleaner(lm, cfg, clock).clean_once()
    for seg in log.segments:  # file times say "just written": they must not count
        os.utime(seg.log_path)
    assert lm.cleanup_logs() >= 1
    keys = {r[2] for r in read_all(log)}
    assert not any(k.startswith(b"old") for k in keys) and {b"new0", b"new3", b"tail"} <= keys
    lm.shutdown()
