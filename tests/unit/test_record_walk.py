"""The record walker (protocol/record_walk.py): the compiled walker against the pure-Python
reference on generated and mutated record bytes, fed whole and in arbitrary pieces, and
the rules of the walk on hand-made malformed records."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import records as R
from protocol import record_walk as W
from protocol.record_walk import PyRecordWalker, PyWalkError

from tests.forge import raw_record as record, zz

NOW = 1_700_000_000_000


def test_the_compiled_walker_is_built_by_the_install():
    # make test / pip install builds protocol/_recwalk.c; without it the broker would
    # fall back to the reference, ~250x slower
    assert W.COMPILED
    assert W.RecordWalker is not PyRecordWalker


def run(walker_cls, data: bytes, count: int, pieces=None, **kw):
    """-> ("ok", result) or ("err", None)."""
    args = dict(count=count, base_timestamp=kw.pop("base", NOW), **kw)
    try:
        w = walker_cls(**args)
        if pieces is None:
            w.feed(data)
        else:
            at = 0
            for cut in pieces:
                w.feed(data[at:cut])
                at = cut
            w.feed(data[at:])
        return ("ok", w.finish())
    except (PyWalkError, *W.WALK_ERRORS):
        return ("err", None)


def both(data: bytes, count: int, **kw):
    py = run(PyRecordWalker, data, count, **dict(kw))
    c = run(W.RecordWalker, data, count, **dict(kw))
    assert py == c, f"reference {py} != compiled {c} for {data.hex()} count={count} {kw}"
    return c


# ------------------------------------------------------------------ rules, by hand

def test_good_batch_results():
    data = (record(5, 0, key=None) + record(-3, 1, headers=[(b"h", b"x"), (b"g", None)])
            + record(9, 2, key=b""))
    ok, (max_ts, idx, deltas_ok, bad, nulls) = both(data, 3, collect_null_keys=True)
    assert ok == "ok"
    assert (max_ts, idx, deltas_ok, bad, nulls) == (NOW + 9, 2, True, None, [0])


def test_max_timestamp_is_strictly_greater_and_first_wins():
    data = record(7, 0) + record(7, 1) + record(1, 2)
    assert both(data, 3)[1][:2] == (NOW + 7, 0)
    # timestamps below -1 never become the max (Kafka starts from -1)
    assert both(record(0, 0), 1, base=-50)[1][:2] == (-1, -1)


@pytest.mark.parametrize("count", [0, 1, 3, 2**31 - 1])
def test_count_must_match_the_records(count):
    data = record(0, 0) + record(1, 1)
    assert both(data, count)[0] == "err"


def test_offset_deltas_reported():
    assert both(record(0, 0) + record(0, 5), 2)[1][2] is False
    assert both(record(0, 1) + record(0, 0), 2)[1][2] is False
    assert both(record(0, 0) + record(0, 1), 2)[1][2] is True


@pytest.mark.parametrize("data", [
    zz(-5) + b"\x00" * 8,                                   # negative length
    zz(0),                                                  # no room for attributes
    record(value=b"abc")[:-1],                              # cut short
    record() + b"\x00",                                     # trailing byte
    zz(3) + b"\x00" + b"\xff" * 10,                         # varlong longer than 10 bytes
    zz(8) + b"\x00\x00" + b"\xff\xff\xff\xff\x0f" + b"\x00",  # 5-byte varint ok, but record short
    zz(9) + b"\x00\x00" + b"\x80\x80\x80\x80\x80\x01" + b"\x00\x00",  # 6-byte varint
    zz(5) + b"\x00\x00\x00" + zz(40) + b"\x00",             # key runs past the record
    zz(6) + b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(-1),     # negative header count
    zz(6) + b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(50),     # header count > bytes left
    zz(8) + b"\x00\x00\x00" + zz(-1) + zz(-1) + zz(1) + zz(-2) + b"\x00",  # negative header key
    zz(10) + b"\x00\x00\x00" + zz(-1) + zz(0) + b"\x00\x00\x00\x00\x00",   # record longer than its fields
])
def test_malformed_records_are_refused(data):
    assert both(data, 1)[0] == "err"
    for cut in range(1, len(data)):  # the same, fed in two pieces
        assert run(W.RecordWalker, data, 1, pieces=[cut])[0] == "err"


def test_window_reports_index_and_timestamp():
    data = record(0, 0) + record(-10_000, 1) + record(10_000, 2) + record(0, 3)
    ok, res = both(data, 4, base=NOW, now=NOW, before=5_000, after=5_000, check_window=True)
    assert res[3] == [(1, NOW - 10_000), (2, NOW + 10_000)]
    # -1 is never range-checked
    ok, res = both(record(0, 0), 1, base=-1, now=NOW, before=5, after=5, check_window=True)
    assert res[3] is None


def test_java_long_wraparound():
    # baseTimestamp + delta wraps as a Java long; now - ts wraps too (Kafka's arithmetic)
    data = record(2**62, 0) + record(2**62, 1)
    ok, res = both(data, 2, base=2**62, now=NOW, before=2**63 - 1, after=1000, check_window=True)
    # 2**62 + 2**62 wraps to Long.MIN_VALUE: below -1 (not the max), and now - ts wraps
    # negative, so "before" passes and "after" refuses it
    assert res[0] == -1 and res[3] == [(0, -(2**63)), (1, -(2**63))]


def test_log_append_time_batches_skip_timestamps():
    data = record(5, 0) + record(-5, 1)
    ok, res = both(data, 2, log_append_time=True, now=NOW, before=0, after=0, check_window=True)
    assert res[:2] == (-1, -1) and res[3] is None


# ------------------------------------------------------------------ generated and mutated

headers_st = st.lists(st.tuples(st.binary(max_size=6), st.one_of(st.none(), st.binary(max_size=6))), max_size=3)
rec_st = st.builds(
    record,
    ts_delta=st.one_of(st.integers(-1000, 1000), st.integers(-(2**63), 2**63 - 1)),
    off_delta=st.integers(-3, 40),
    key=st.one_of(st.none(), st.binary(max_size=20)),
    value=st.one_of(st.none(), st.binary(max_size=300)),
    headers=headers_st,
)


@st.composite
def walks(draw):
    recs = draw(st.lists(rec_st, max_size=12))
    data = bytearray(b"".join(recs))
    count = len(recs) + draw(st.sampled_from([0, 0, 0, -1, 1, 2**31 - 1 - len(recs)]))
    for _ in range(draw(st.integers(0, 3))):  # mutations: flip, insert, delete
        if not data:
            break
        kind = draw(st.sampled_from(["flip", "insert", "delete"]))
        at = draw(st.integers(0, len(data) - 1))
        if kind == "flip":
            data[at] = draw(st.integers(0, 255))
        elif kind == "insert":
            data[at:at] = bytes([draw(st.integers(0, 255))])
        else:
            del data[at]
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=6)))
    window = draw(st.sampled_from([None, (5_000, 5_000), (0, 2**63 - 1)]))
    return bytes(data), max(count, 0), cuts, window


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(walks(), st.booleans())
def test_compiled_matches_reference_whole_and_in_pieces(case, nulls):
    data, count, cuts, window = case
    kw = dict(collect_null_keys=nulls)
    if window:
        kw.update(now=NOW, before=window[0], after=window[1], check_window=True)
    whole = both(data, count, **kw)
    assert run(W.RecordWalker, data, count, pieces=cuts, **kw) == whole
    assert run(PyRecordWalker, data, count, pieces=cuts, **kw) == whole


@settings(max_examples=200, deadline=None)
@given(st.lists(rec_st, min_size=1, max_size=8))
def test_walk_agrees_with_the_full_decoder(recs):
    """Accepted by the walker <=> decoded by records.iter_records, with the same max."""
    data = b"".join(recs)
    batch = bytearray(R.build_batch([(NOW, b"k", b"v")]))  # a header to put the records under
    batch = batch[:R.HEADER_SIZE] + data
    import struct
    struct.pack_into(">i", batch, 8, len(batch) - R.LOG_OVERHEAD)
    struct.pack_into(">i", batch, 57, len(recs))
    h = R.parse_batch_header(batch, 0)
    got = both(data, len(recs), base=h.base_timestamp)
    try:
        decoded = list(R.iter_records(batch, 0, h))
    except R.RecordFormatError:
        decoded = None
    if decoded is None:
        assert got[0] == "err"
    else:
        assert got[0] == "ok"
        real_max = max([r.timestamp for r in decoded if r.timestamp > -1], default=-1)
        if all(-(2**63) <= h.base_timestamp + d <= 2**63 - 1 for d in (r.timestamp - h.base_timestamp for r in decoded)):
            assert got[1][0] == real_max


# ----------------------------------------------------------------------------- find_batch
def _headers(rng, n, base=0):
    """n v2 batch headers with bodies of random size (the search reads headers only)."""
    out = bytearray()
    off = base
    for _ in range(n):
        lod = rng.randint(0, 5)
        body = rng.randint(0, 90)
        out += off.to_bytes(8, "big", signed=True) + (49 + body).to_bytes(4, "big")
        out += bytes(4) + b"\x02" + bytes(6) + lod.to_bytes(4, "big") + bytes(34) + bytes(body)
        off += lod + 1
    return bytes(out), off


@pytest.mark.parametrize("seed", range(40))
def test_find_batch_compiled_matches_reference(seed):
    import random

    rng = random.Random(seed)
    data, end_offset = _headers(rng, rng.randint(0, 30), base=rng.choice([0, 7, (1 << 63) - 200]))
    data = bytearray(data)
    for _ in range(rng.randint(0, 3)):  # a stray byte: magic, length, offset or body
        if data:
            data[rng.randrange(len(data))] = rng.randrange(256)
    for _ in range(60):
        lo = rng.randint(0, len(data))
        hi = rng.randint(lo, len(data))
        position = rng.randint(0, 1000)
        end = position + rng.choice([hi - lo, len(data) - lo, rng.randint(0, len(data) + 100)])
        offset = rng.randint(-5, end_offset + 5) if rng.random() < 0.9 else rng.choice([(1 << 63) - 1, -(1 << 63)])
        offset = min(offset, (1 << 63) - 1)  # an int64, as on the wire
        chunk = bytes(data[lo:hi])
        assert W.find_batch(chunk, position, end, offset) == W.py_find_batch(chunk, position, end, offset)


def test_find_batch_rules():
    import random

    data, _ = _headers(random.Random(1), 3)
    sizes, at = [], 0
    while at < len(data):
        sizes.append(int.from_bytes(data[at + 8:at + 12], "big") + 12)
        at += sizes[-1]
    last0 = int.from_bytes(data[23:27], "big")
    for find in (W.find_batch, W.py_find_batch):
        assert find(data, 100, 100 + len(data), 0) == (last0, 100, sizes[0])
        assert find(data, 100, 100 + len(data), last0 + 1) == (last0 + 1 + int.from_bytes(
            data[sizes[0] + 23:sizes[0] + 27], "big"), 100 + sizes[0], sizes[1])
        assert find(data, 0, len(data), 10**6) is None                 # past the last batch
        assert find(data[:sizes[0] + 30], 0, len(data), 10**6) == sizes[0]  # next header not whole: read on
        assert find(data, 0, len(data) - 1, 10**6) is None              # the last batch passes the end
        bad = bytearray(data)
        bad[16] = 1
        assert find(bytes(bad), 0, len(data), 0) is None                 # magic 1
        bad = bytearray(data)
        bad[8:12] = (48).to_bytes(4, "big")
        assert find(bytes(bad), 0, len(data), 0) is None                 # batchLength below 49
    # a last offset past the int64 range (a corrupt header) is added exactly, as Python adds
    top = ((1 << 63) - 1).to_bytes(8, "big") + data[8:23] + (5).to_bytes(4, "big") + data[27:sizes[0]]
    for find in (W.find_batch, W.py_find_batch):
        assert find(top, 0, len(top), (1 << 63) - 1) == ((1 << 63) + 4, 0, sizes[0])
    with pytest.raises(TypeError):
        W.find_batch(data, 0, 1)
