import os
import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from storage.clock import ManualClock
from storage.segment import LogSegment
from tests.unit.test_log_helpers import (
    GZIP,
    Oracle,
    batch_records,
    build_batch,
    make_append,
    parse_batches,
)


def open_segment(d, base=0, interval=100, index_bytes=4096, clock=None, jitter=0):
    return LogSegment(str(d), base, index_interval_bytes=interval, max_index_size=index_bytes,
                      roll_jitter_ms=jitter, clock=clock or ManualClock(1_000_000))


def fill(seg, rng, n_appends, base=None, ts_mode="monotonic", compression_every=0):
    oracle = Oracle()
    nxt = seg.base_offset if base is None else base
    t = 10_000
    for i in range(n_appends):
        batches = []
        for _ in range(rng.randint(1, 3)):
            recs = []
            for _ in range(rng.randint(1, 6)):
                if ts_mode == "monotonic":
                    t += rng.randint(0, 20)
                    recs.append((t, b"v" * rng.randint(0, 60)))
                else:
                    recs.append((rng.randint(0, 5000), b"v" * rng.randint(0, 60)))
            comp = GZIP if compression_every and i % compression_every == 0 else 0
            batches.append(build_batch(recs, compression=comp))
        va = make_append(batches, nxt)
        seg.append(va)
        oracle.add(va)
        nxt = va.last_offset + 1
    return oracle, nxt


def test_files_named_by_20_digit_base_offset(tmp_path):
    seg = open_segment(tmp_path, base=42, index_bytes=1000)
    assert sorted(os.listdir(tmp_path)) == [
        "00000000000000000042.index", "00000000000000000042.log", "00000000000000000042.timeindex"]
    assert os.path.getsize(tmp_path / "00000000000000000042.index") == 1000 // 8 * 8
    assert os.path.getsize(tmp_path / "00000000000000000042.timeindex") == 1000 // 12 * 12
    seg.close()


def test_append_writes_bytes_and_indexes_per_interval(tmp_path):
    seg = open_segment(tmp_path, interval=100)
    rng = random.Random(1)
    oracle, nxt = fill(seg, rng, 40)
    data = open(seg.log_path, "rb").read()
    assert data == b"".join(raw for _, _, raw in oracle.batches)
    assert seg.size == len(data)
    # the index rule, recomputed by hand, per batch
    since, pos, expected = 0, 0, []
    for base, last, raw in oracle.batches:
        if since > 100:
            expected.append((last, pos))
            since = 0
        since += len(raw)
        pos += len(raw)
    got = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    assert got == expected
    assert seg.offset_index.entries > 5
    # time index strictly increasing in timestamp, offsets non-decreasing
    tis = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert all(a.timestamp < b.timestamp and a.offset <= b.offset for a, b in zip(tis, tis[1:]))
    mx = max(t for _, t in oracle.records)
    assert seg.max_timestamp_so_far == mx
    first_batch_with_max = next(last for base, last, raw in oracle.batches
                                if any(t == mx for _, t in batch_records(raw)))
    assert seg.offset_of_max_timestamp_so_far == first_batch_with_max
    seg.close()


@pytest.mark.parametrize("ts_mode", ["monotonic", "random"])
def test_read_against_oracle(tmp_path, ts_mode):
    seg = open_segment(tmp_path, interval=150)
    oracle, nxt = fill(seg, random.Random(7), 60, ts_mode=ts_mode, compression_every=3)
    data = open(seg.log_path, "rb").read()
    for off in range(0, nxt):
        sl = seg.read(off, 10**6)
        base, last, raw = oracle.batch_for(off)
        pos = data.index(raw)
        assert sl.position == pos and len(sl) == len(data) - pos
        assert sl.read() == data[pos:]
    assert seg.read(nxt, 1000) is None
    # max_size cuts; min_one_message returns the whole first batch
    base, last, raw = oracle.batch_for(5)
    assert len(seg.read(5, 3)) == 3
    assert len(seg.read(5, 3, min_one_message=True)) == len(raw)
    assert len(seg.read(5, 0)) == 0
    # max_position bounds
    sl = seg.read(0, 10**6, max_position=100)
    assert sl.position == 0 and len(sl) == 100
    seg.close()


@pytest.mark.parametrize("ts_mode", ["monotonic", "random"])
def test_find_offset_by_timestamp_against_oracle(tmp_path, ts_mode):
    seg = open_segment(tmp_path, interval=120)
    oracle, nxt = fill(seg, random.Random(11), 80, ts_mode=ts_mode, compression_every=2)
    stamps = sorted({t for _, t in oracle.records})
    targets = stamps + [s + 1 for s in stamps] + [0, -5 + stamps[0], stamps[-1] + 1]
    for ts in targets:
        got = seg.find_offset_by_timestamp(ts, 0)
        exp = oracle.offset_for_timestamp(ts, 0)
        assert (tuple(got) if got else None) == exp, ts
        if exp is not None:
            # guarantee: every record with ts >= target is at or after the offset
            assert all(o >= exp[0] for o, t in oracle.records if t >= ts)
    # starting offset is respected
    for start in (0, 7, nxt // 2, nxt - 1):
        for ts in stamps[::7]:
            got = seg.find_offset_by_timestamp(ts, start)
            exp = oracle.offset_for_timestamp(ts, start)
            assert (tuple(got) if got else None) == exp
    seg.close()


def test_find_inside_compressed_batch_out_of_order(tmp_path):
    seg = open_segment(tmp_path, interval=0)
    b1 = build_batch([(100, b"a"), (300, b"b"), (200, b"c")], compression=GZIP)
    b2 = build_batch([(250, b"d"), (400, b"e")], compression=GZIP)
    seg.append(make_append([b1], 0))
    seg.append(make_append([b2], 3))
    assert seg.find_offset_by_timestamp(150) == (1, 300)
    assert seg.find_offset_by_timestamp(300) == (1, 300)
    assert seg.find_offset_by_timestamp(301) == (4, 400)
    assert seg.find_offset_by_timestamp(50) == (0, 100)
    assert seg.find_offset_by_timestamp(401) is None
    assert seg.find_offset_by_timestamp(150, starting_offset=2) == (2, 200)
    assert seg.find_max_timestamp_record() == (4, 400)
    seg.close()


def test_find_max_timestamp_record_first_of_equals(tmp_path):
    seg = open_segment(tmp_path, interval=0)
    seg.append(make_append([build_batch([(5, b"a"), (9, b"b"), (9, b"c")])], 0))
    seg.append(make_append([build_batch([(9, b"d")])], 3))
    assert seg.max_timestamp_so_far == 9 and seg.offset_of_max_timestamp_so_far == 2
    assert seg.find_max_timestamp_record() == (1, 9)
    seg.close()
    seg = open_segment(tmp_path, interval=0)
    assert seg.max_timestamp_so_far == 9 and seg.offset_of_max_timestamp_so_far == 2
    assert seg.find_max_timestamp_record() == (1, 9)
    seg.close()


def test_should_roll_on_size_exact_fit_does_not_roll(tmp_path):
    seg = open_segment(tmp_path)
    va = make_append([build_batch([(1, b"x" * 100)])], 0)
    seg.append(va)
    size = seg.size
    kw = dict(max_timestamp=1, max_offset=1, now_ms=0, segment_ms=10**12)
    assert not seg.should_roll(size=100, segment_bytes=size + 100, **kw)
    assert seg.should_roll(size=101, segment_bytes=size + 100, **kw)
    seg.close()


def test_should_roll_on_index_full_and_offset_overflow(tmp_path):
    seg = open_segment(tmp_path, interval=0, index_bytes=36)  # time index: 3 slots, full at 2
    kw = dict(max_timestamp=1, size=10, now_ms=0, segment_bytes=10**9, segment_ms=10**12)
    nxt = 0
    rolls = []
    for i in range(4):
        rolls.append(seg.should_roll(max_offset=nxt, **kw))
        va = make_append([build_batch([(1000 + i, b"x")])], nxt)
        seg.append(va)
        nxt = va.last_offset + 1
    assert rolls == [False, False, False, True]
    assert seg.time_index.entries == 2 and seg.time_index.is_full()
    assert seg.should_roll(max_offset=2**31 + 5, **kw)
    seg.close()


def test_one_call_append_refuses_an_offset_the_index_cannot_hold(tmp_path):
    seg = open_segment(tmp_path)
    seg.append(make_append([build_batch([(1, b"x")])], 0))
    size = seg.size
    args = (1, 0, 10**9, 10**12)  # max timestamp, now, segment.bytes, segment.ms
    far = make_append([build_batch([(1, b"x")])], 2**31)  # its last offset is base + 2**31
    assert not seg.append_unindexed(far.buffer, far.last_offset, *args)
    assert seg.size == size  # nothing written
    near = make_append([build_batch([(1, b"x")])], 2**31 - 1)
    assert seg.append_unindexed(near.buffer, near.last_offset, *args)
    assert seg.size == size + len(near.buffer)
    seg.close()


def test_should_roll_on_time(tmp_path):
    clock = ManualClock(1_000_000)
    seg = open_segment(tmp_path, clock=clock, jitter=100)
    kw = dict(size=10, max_offset=5, segment_bytes=10**9, segment_ms=1000)
    # empty segments never roll on time
    assert not seg.should_roll(max_timestamp=10**9, now_ms=10**9, **kw)
    seg.append(make_append([build_batch([(5000, b"a")])], 0))
    assert not seg.should_roll(max_timestamp=5000 + 900, now_ms=0, **kw)
    assert seg.should_roll(max_timestamp=5000 + 901, now_ms=0, **kw)
    seg.close()
    # first batch without a timestamp: wall clock - creation time
    d2 = tmp_path / "b"
    d2.mkdir()
    seg = open_segment(d2, clock=clock, jitter=0)
    seg.append(make_append([build_batch([(-1, b"a")])], 0))
    assert not seg.should_roll(max_timestamp=-1, now_ms=clock.time_ms() + 1000, **kw)
    assert seg.should_roll(max_timestamp=-1, now_ms=clock.time_ms() + 1001, **kw)
    seg.close()


def test_reopened_segment_rolls_on_time_from_first_batch(tmp_path):
    seg = open_segment(tmp_path)
    seg.append(make_append([build_batch([(5000, b"a")])], 0))
    seg.append(make_append([build_batch([(9000, b"a")])], 1))
    seg.close()
    seg = open_segment(tmp_path)
    kw = dict(size=10, max_offset=5, segment_bytes=10**9, segment_ms=1000, now_ms=0)
    assert seg.should_roll(max_timestamp=10, **kw)  # trimmed indexes are full until resized
    seg.resize_indexes(4096)
    assert seg.should_roll(max_timestamp=6001, **kw)
    assert not seg.should_roll(max_timestamp=6000, **kw)
    seg.close()


def test_on_become_inactive_final_entry_and_trim(tmp_path):
    seg = open_segment(tmp_path, interval=50, index_bytes=4096)
    oracle, nxt = fill(seg, random.Random(3), 20)
    n_oi, n_ti = seg.offset_index.entries, seg.time_index.entries
    seg.on_become_inactive()
    assert os.path.getsize(seg.offset_index_path) == 8 * n_oi
    assert seg.time_index.last_entry().timestamp == seg.max_timestamp_so_far
    assert os.path.getsize(seg.time_index_path) == 12 * seg.time_index.entries
    assert seg.time_index.entries in (n_ti, n_ti + 1)
    seg.close()
    assert os.path.getsize(seg.offset_index_path) == 8 * n_oi


def test_close_trims_and_reopen_preserves(tmp_path):
    seg = open_segment(tmp_path, interval=80)
    oracle, nxt = fill(seg, random.Random(5), 30, ts_mode="random")
    oi = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    mx = (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far)
    seg.close()
    assert os.path.getsize(seg.offset_index_path) == 8 * len(oi)
    seg = open_segment(tmp_path, interval=80)
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == oi
    assert (seg.max_timestamp_so_far, seg.offset_of_max_timestamp_so_far) == mx
    assert seg.time_index.last_entry() == mx
    seg.sanity_check(full=True)
    assert seg.read_next_offset() == nxt
    for ts in (0, 100, 2500, 4999):
        got = seg.find_offset_by_timestamp(ts)
        assert (tuple(got) if got else None) == oracle.offset_for_timestamp(ts)
    seg.close()


def test_recover_rebuilds_identical_indexes_and_cuts_torn_tail(tmp_path):
    seg = open_segment(tmp_path, interval=90, index_bytes=4096)
    oracle, nxt = fill(seg, random.Random(9), 25)
    oi = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    ti = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    size = seg.size
    seg.close_handlers()  # killed
    with open(tmp_path / "00000000000000000000.log", "ab") as f:
        f.write(oracle.batches[0][2][:40])  # a torn batch
    seg = open_segment(tmp_path, interval=90, index_bytes=4096)
    with pytest.raises(Exception):
        seg.sanity_check()
    assert seg.recover() == 40
    assert seg.size == size
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == oi
    rebuilt = [seg.time_index.entry(i) for i in range(seg.time_index.entries)]
    assert rebuilt[:len(ti)] == ti
    assert rebuilt[-1].timestamp == max(t for _, t in oracle.records)
    assert seg.read_next_offset() == nxt
    seg.close()


def test_recover_tail_indexes_batches_missing_from_index(tmp_path):
    seg = open_segment(tmp_path, interval=60, index_bytes=4096)
    oracle, nxt = fill(seg, random.Random(4), 30)
    oi = [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)]
    # lose the last index entries (as if killed between the .log write and the index write)
    seg.offset_index.truncate_to(oi[-3].offset)
    seg.time_index.truncate_to(oi[-3].offset)
    seg.close()
    with open(tmp_path / "00000000000000000000.log", "ab") as f:
        f.write(b"\x00" * 30)
    seg = open_segment(tmp_path, interval=60, index_bytes=4096)
    seg.resize_indexes(4096)
    assert seg.recover_tail() == 30
    assert [seg.offset_index.entry(i) for i in range(seg.offset_index.entries)] == oi
    assert seg.max_timestamp_so_far == max(t for _, t in oracle.records)
    seg.close()


def test_truncate_to(tmp_path):
    seg = open_segment(tmp_path, interval=60)
    oracle, nxt = fill(seg, random.Random(8), 30, ts_mode="random")
    cut_batch = oracle.batches[17]
    removed = seg.truncate_to(cut_batch[1])  # inside batch 17: the whole batch goes
    kept = oracle.batches[:17]
    assert seg.size == sum(len(r) for _, _, r in kept)
    assert removed > 0
    assert seg.read_next_offset() == cut_batch[0]
    assert all(seg.offset_index.entry(i).offset < cut_batch[0] for i in range(seg.offset_index.entries))
    kept_records = [rt for b in kept for rt in batch_records(b[2])]
    mx = max(t for _, t in kept_records)
    assert seg.max_timestamp_so_far == mx
    assert seg.find_offset_by_timestamp(mx + 1) is None
    seg.truncate_to(0)
    assert seg.size == 0 and seg.offset_index.entries == 0 and seg.time_index.entries == 0
    assert seg.max_timestamp_so_far == -1
    seg.close()


def test_delete(tmp_path):
    seg = open_segment(tmp_path)
    seg.append(make_append([build_batch([(1, b"a")])], 0))
    seg.delete()
    assert os.listdir(tmp_path) == []


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_property_segment_search_and_read(tmp_path_factory, data):
    d = tmp_path_factory.mktemp("seg")
    interval = data.draw(st.sampled_from([0, 64, 300, 4096]))
    seg = open_segment(d, base=100, interval=interval)
    appends = data.draw(st.lists(
        st.lists(st.tuples(st.lists(st.integers(-1, 1000), min_size=1, max_size=5),
                           st.booleans()), min_size=1, max_size=3),
        min_size=1, max_size=25))
    oracle = Oracle()
    nxt = 100
    for batches in appends:
        raws = [build_batch([(t, b"v%d" % t) for t in stamps], compression=GZIP if comp else 0)
                for stamps, comp in batches]
        va = make_append(raws, nxt)
        seg.append(va)
        oracle.add(va)
        nxt = va.last_offset + 1
    for ts in data.draw(st.lists(st.integers(0, 1001), min_size=1, max_size=15)):
        got = seg.find_offset_by_timestamp(ts, 100)
        exp = oracle.offset_for_timestamp(ts, 100)
        assert (tuple(got) if got else None) == exp
    off = data.draw(st.integers(100, nxt))
    sl = seg.read(off, 10**6)
    if off == nxt:
        assert sl is None
    else:
        got = parse_batches(sl.read())
        assert got[0][0] <= off <= got[0][1]
    seg.close()


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_find_inside_batches_of_every_codec_and_log_append_time(tmp_path, codec):
    from protocol import records as R

    seg = open_segment(tmp_path, interval=0)
    b1 = R.build_batch([(100, None, b"a"), (300, None, b"b"), (200, None, b"c")], compression=codec)
    b2 = R.build_batch([(50, None, b"d"), (60, None, b"e")], compression=codec,
                       timestamp_type=1, log_append_time=500)
    b3 = R.build_batch([(450, None, b"f"), (700, None, b"g")], compression=codec)
    seg.append(make_append([b1, b2], 0))
    seg.append(make_append([b3], 5))
    assert seg.find_offset_by_timestamp(250) == (1, 300)
    assert seg.find_offset_by_timestamp(301) == (3, 500)  # LogAppendTime: every record reads 500
    assert seg.find_offset_by_timestamp(500) == (3, 500)
    assert seg.find_offset_by_timestamp(501) == (6, 700)
    assert seg.find_offset_by_timestamp(701) is None
    assert seg.find_max_timestamp_record() == (6, 700)
    sl = seg.read(4, 10**6)
    got = parse_batches(sl.read())
    assert got[0][:2] == (3, 4)
    seg.close()


@pytest.mark.parametrize("chunk", [61, 100, 333, 64 * 1024])
def test_translate_offset_across_read_chunks(tmp_path, monkeypatch, chunk):
    """translate_offset reads the file a chunk at a time (record_walk.find_batch): a batch
    larger than the chunk, a header cut by a chunk's end and a torn tail answer as the
    batch headers say."""
    import storage.segment as S

    monkeypatch.setattr(S, "_SCAN_CHUNK", chunk)
    seg = open_segment(tmp_path, interval=10**6)  # one index entry: every search walks from 0
    oracle, nxt = fill(seg, random.Random(3), 25)
    headers = list(seg.iter_batch_headers(0))
    for off in range(-1, nxt + 2):
        want = next(((h.last_offset, pos, h.size) for pos, h in headers if h.last_offset >= off), None)
        assert seg.translate_offset(off) == want, off
        if want is not None:
            assert seg.translate_offset(off, starting_position=want[1]) == want
    # a torn tail: the last batch's header survives, its body does not
    last_pos = headers[-1][0]
    with open(seg.log_path, "r+b") as fh:
        fh.truncate(last_pos + 70)
    seg._size = last_pos + 70
    assert seg.translate_offset(headers[-1][1].base_offset) is None
    assert seg.translate_offset(headers[-2][1].last_offset) == (headers[-2][1].last_offset, headers[-2][0],
                                                                headers[-2][1].size)
    seg.close()
