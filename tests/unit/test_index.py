import os
import struct

import pytest
from hypothesis import given, settings, strategies as st, HealthCheck

from storage.index import CorruptIndexError, IndexOffsetOverflowError, InvalidIndexOffsetError
from storage.offset_index import OffsetIndex, OffsetPosition
from storage.time_index import TimeIndex, TimestampOffset


# ---------------------------------------------------------------- offset index
def test_offset_index_preallocated_rounded_down(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 100, max_index_size=100)
    assert os.path.getsize(tmp_path / "a.index") == 96
    assert idx.entries == 0 and idx.max_entries == 12
    assert idx.lookup(150) == OffsetPosition(100, 0)
    idx.close()
    assert os.path.getsize(tmp_path / "a.index") == 0



def test_offset_index_lookup_at_the_end_follows_every_change(tmp_path):
    """lookup answers a target at or past the last entry from the kept last entry: it must
    follow appends, truncation, resize, reset and a reopen, as the search over the file does."""
    import random

    rng = random.Random(5)
    path = str(tmp_path / "a.index")
    idx = OffsetIndex(path, 500, max_index_size=400)

    def searched(target):
        best = OffsetPosition(500, 0)
        for i in range(idx.entries):
            e = idx._entry(i)
            if e.offset <= target:
                best = e
        return best

    nxt, pos = 500, 0
    for step in range(300):
        op = rng.random()
        if op < 0.6 and not idx.is_full():
            nxt += rng.randint(1, 9)
            pos += rng.randint(1, 300)
            idx.append(nxt, pos)
        elif op < 0.75:
            idx.truncate_to(rng.randint(490, nxt + 5))
            nxt = idx.last_offset
        elif op < 0.85:
            idx.resize(rng.choice([80, 200, 400]))
            nxt = idx.last_offset
        elif op < 0.9:
            idx.reset()
            nxt = idx.last_offset
        else:
            idx.close()
            idx = OffsetIndex(path, 500, max_index_size=400)
            nxt = idx.last_offset
        pos = idx.last_entry().position
        for target in (nxt - 3, nxt, nxt + 1, nxt + 1000, 499, 500):
            assert idx.lookup(target) == searched(target), (step, target)
    idx.close()

def test_offset_index_too_small(tmp_path):
    with pytest.raises(ValueError):
        OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=7)


def test_offset_index_append_lookup_floor(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 1000, max_index_size=1024)
    for i in range(10):
        idx.append(1000 + i * 10 + 5, i * 100 + 1)
    assert idx.entries == 10
    assert idx.last_offset == 1095
    assert idx.lookup(999) == (1000, 0)
    assert idx.lookup(1004) == (1000, 0)
    assert idx.lookup(1005) == (1005, 1)
    assert idx.lookup(1014) == (1005, 1)
    assert idx.lookup(1015) == (1015, 101)
    assert idx.lookup(10**9) == (1095, 901)
    assert idx.entry(3) == (1035, 301)
    with pytest.raises(InvalidIndexOffsetError):
        idx.append(1095, 2000)
    with pytest.raises(IndexOffsetOverflowError):
        idx.append(1000 + 2**31, 2000)
    # raw bytes: big-endian relative offset + position
    idx.flush()
    raw = open(tmp_path / "a.index", "rb").read(16)
    assert struct.unpack(">iiii", raw) == (5, 1, 15, 101)


def test_offset_index_full(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=24)
    for i in range(3):
        assert not idx.is_full()
        idx.append(i, i * 10)
    assert idx.is_full()
    with pytest.raises(InvalidIndexOffsetError):
        idx.append(10, 100)


def test_offset_index_truncate_to(tmp_path):
    idx = OffsetIndex(str(tmp_path / "a.index"), 0, max_index_size=1024)
    for i in range(1, 6):
        idx.append(i * 10, i * 100)
    idx.truncate_to(40)  # exact entry goes
    assert idx.entries == 3 and idx.last_offset == 30
    idx.truncate_to(35)  # larger entries go
    assert idx.entries == 3
    idx.truncate_to(25)
    assert idx.entries == 2 and idx.last_offset == 20
    idx.truncate_to(5)
    assert idx.entries == 0 and idx.last_offset == 0
    idx.append(7, 1)
    assert idx.lookup(100) == (7, 1)


def test_offset_index_trim_reopen_resize(tmp_path):
    p = str(tmp_path / "a.index")
    idx = OffsetIndex(p, 50, max_index_size=800)
    for i in range(5):
        idx.append(50 + i, i * 7)
    idx.trim_to_valid_size()
    assert os.path.getsize(p) == 40 and idx.is_full()
    idx.resize(800)
    assert os.path.getsize(p) == 800 and idx.entries == 5 and not idx.is_full()
    idx.close()
    assert os.path.getsize(p) == 40
    idx2 = OffsetIndex(p, 50, max_index_size=800)
    assert idx2.entries == 5 and idx2.last_offset == 54
    assert idx2.lookup(53) == (53, 21)
    idx2.sanity_check(log_size=1000, full=True)
    idx2.resize(800)
    idx2.append(60, 100)
    assert idx2.lookup(70) == (60, 100)
    idx2.close()


def test_offset_index_sanity_zero_tail_after_kill(tmp_path):
    p = str(tmp_path / "a.index")
    idx = OffsetIndex(p, 0, max_index_size=800)
    idx.append(3, 100)
    idx.append(9, 300)
    idx.close_handler()  # killed: never trimmed
    reopened = OffsetIndex(p, 0, max_index_size=800)
    assert reopened.entries == 100  # Kafka's way: length / entry size
    with pytest.raises(CorruptIndexError, match="zero"):
        reopened.sanity_check()


def test_offset_index_sanity_checks(tmp_path):
    p = tmp_path / "bad.index"
    p.write_bytes(b"\x00" * 10)
    idx = OffsetIndex(str(p), 0, max_index_size=800)
    with pytest.raises(CorruptIndexError, match="multiple"):
        idx.sanity_check()
    p2 = tmp_path / "back.index"
    p2.write_bytes(struct.pack(">iiii", 10, 100, 5, 200))
    with pytest.raises(CorruptIndexError, match="backwards"):
        OffsetIndex(str(p2), 0).sanity_check()
    p3 = tmp_path / "beyond.index"
    p3.write_bytes(struct.pack(">iiii", 1, 0, 5, 200))
    idx3 = OffsetIndex(str(p3), 0)
    idx3.sanity_check(log_size=201)
    with pytest.raises(CorruptIndexError, match="beyond"):
        idx3.sanity_check(log_size=200)
    p4 = tmp_path / "mid.index"
    p4.write_bytes(struct.pack(">iiiiii", 1, 0, 9, 50, 5, 200))
    OffsetIndex(str(p4), 0).sanity_check()  # O(1) checks pass
    with pytest.raises(CorruptIndexError):
        OffsetIndex(str(p4), 0).sanity_check(full=True)


# ---------------------------------------------------------------- time index
def test_time_index_preallocation_and_full_one_slot_early(tmp_path):
    p = str(tmp_path / "a.timeindex")
    idx = TimeIndex(p, 0, max_index_size=50)
    assert os.path.getsize(p) == 48 and idx.max_entries == 4
    assert idx.lookup(5) == TimestampOffset(-1, 0)
    for i in range(3):
        assert not idx.is_full()
        assert idx.maybe_append(100 + i, i)
    assert idx.is_full()  # one slot kept for the final entry
    with pytest.raises(InvalidIndexOffsetError):
        idx.maybe_append(200, 10)
    assert idx.maybe_append(200, 10, skip_full_check=True)
    assert idx.entries == 4
    idx.close()
    assert os.path.getsize(p) == 48


def test_time_index_appends_only_strictly_greater(tmp_path):
    idx = TimeIndex(str(tmp_path / "a.timeindex"), 100, max_index_size=1200)
    assert idx.maybe_append(10, 100)
    assert not idx.maybe_append(10, 105)
    assert idx.maybe_append(11, 105)
    with pytest.raises(InvalidIndexOffsetError):
        idx.maybe_append(5, 110)  # timestamp backwards
    with pytest.raises(InvalidIndexOffsetError):
        idx.maybe_append(50, 101)  # offset backwards
    assert idx.last_entry() == (11, 105)
    assert idx.lookup(9) == (-1, 100)
    assert idx.lookup(10) == (10, 100)
    assert idx.lookup(10**12) == (11, 105)
    idx.flush()
    raw = open(tmp_path / "a.timeindex", "rb").read(24)
    assert struct.unpack(">qiqi", raw) == (10, 0, 11, 5)


def test_time_index_negative_timestamp_never_indexed(tmp_path):
    idx = TimeIndex(str(tmp_path / "a.timeindex"), 0, max_index_size=120)
    assert not idx.maybe_append(-1, 0)
    assert idx.entries == 0


def test_time_index_truncate_to(tmp_path):
    idx = TimeIndex(str(tmp_path / "a.timeindex"), 0, max_index_size=1200)
    for i in range(1, 6):
        idx.maybe_append(i * 1000, i * 10)
    idx.truncate_to(40)
    assert idx.entries == 3 and idx.last_entry() == (3000, 30)
    idx.truncate_to(25)
    assert idx.entries == 2 and idx.last_entry() == (2000, 20)
    idx.truncate_to(0)
    assert idx.entries == 0 and idx.last_entry() == (-1, 0)
    assert idx.maybe_append(5, 1)


def test_time_index_reopen_and_sanity(tmp_path):
    p = str(tmp_path / "a.timeindex")
    idx = TimeIndex(p, 10, max_index_size=1200)
    idx.maybe_append(500, 12)
    idx.maybe_append(700, 20)
    idx.close()
    assert os.path.getsize(p) == 24
    idx = TimeIndex(p, 10, max_index_size=1200)
    assert idx.entries == 2 and idx.last_entry() == (700, 20)
    idx.sanity_check(max_offset=20, full=True)
    with pytest.raises(CorruptIndexError, match="beyond"):
        idx.sanity_check(max_offset=19)
    idx.resize(1200)
    idx.close_handler()  # kill with the preallocated tail
    idx = TimeIndex(p, 10, max_index_size=1200)
    assert idx.entries == 100
    with pytest.raises(CorruptIndexError):
        idx.sanity_check()
    bad = tmp_path / "b.timeindex"
    bad.write_bytes(struct.pack(">qiqi", 700, 1, 500, 2))
    with pytest.raises(CorruptIndexError, match="backwards"):
        TimeIndex(str(bad), 0).sanity_check()
    bad.write_bytes(b"\x01" * 13)
    with pytest.raises(CorruptIndexError, match="multiple"):
        TimeIndex(str(bad), 0).sanity_check()


# ---------------------------------------------------------------- properties
_settings = settings(max_examples=60, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture])


@_settings
@given(keys=st.lists(st.integers(0, 10_000), unique=True, max_size=300),
       targets=st.lists(st.integers(-50, 10_100), min_size=1, max_size=40))
def test_offset_index_lookup_matches_model(tmp_path_factory, keys, targets):
    keys.sort()
    base = 1000
    d = tmp_path_factory.mktemp("oi")
    idx = OffsetIndex(str(d / "x.index"), base, max_index_size=8 * 400)
    entries = [(base + k, k * 3 + 1) for k in keys]
    for o, p in entries:
        idx.append(o, p)
    for t in targets:
        t += base
        below = [e for e in entries if e[0] <= t]
        expected = below[-1] if below else (base, 0)
        assert idx.lookup(t) == expected
    cut = targets[0] + base
    idx.truncate_to(cut)
    assert [idx.entry(i) for i in range(idx.entries)] == [e for e in entries if e[0] < cut]
    idx.close()


@_settings
@given(stamps=st.lists(st.integers(0, 10**13), unique=True, max_size=300),
       targets=st.lists(st.integers(-5, 10**13 + 5), min_size=1, max_size=40))
def test_time_index_lookup_matches_model(tmp_path_factory, stamps, targets):
    stamps.sort()
    d = tmp_path_factory.mktemp("ti")
    idx = TimeIndex(str(d / "x.timeindex"), 7, max_index_size=12 * 400)
    entries = [(ts, 7 + i * 2) for i, ts in enumerate(stamps)]
    for ts, o in entries:
        assert idx.maybe_append(ts, o)
    for t in targets + stamps[:5]:
        below = [e for e in entries if e[0] <= t]
        expected = below[-1] if below else (-1, 7)
        assert idx.lookup(t) == expected
    idx.close()
    reopened = TimeIndex(str(d / "x.timeindex"), 7, max_index_size=12 * 400)
    assert reopened.entries == len(entries)
    reopened.sanity_check(full=True)
    reopened.close()
