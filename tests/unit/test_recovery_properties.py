"""Property tests of crash recovery, index rebuilding and truncation (SPEC 1, 5, 6, 7).

Every expectation comes from a naive model of what was written (the list of batches and
their records, offsets assigned in order), never from the code under test.  The only
thing read back from the log under test to build an expectation is where its segments
start (the ``.log`` file names), which the SPEC 5 search oracle needs because Kafka
picks "the first segment whose largest timestamp >= T".

A crash is ``Log.close_handlers()`` (files closed without writing: the active segment's
indexes keep their zero-filled preallocated tail, as after a kill); a reopen with no
keyword arguments means "no recovery checkpoint, no clean-shutdown marker: recover
everything".
"""

from __future__ import annotations

import os
import random
import shutil
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, assume, event, given, settings, strategies as st, target

from protocol import records as R
from storage.clock import ManualClock
from storage.errors import RecordListTooLargeError
from storage.log import Log
from tests.unit.test_log_helpers import LONG_MAX, topic_config

TOPIC, PARTITION = "t", 0
START_MS = 1_700_000_000_000
HUGE = LONG_MAX // 4
SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# --------------------------------------------------------------------------- strategies
config_st = st.fixed_dictionaries(dict(
    segment_bytes=st.integers(700, 2500),
    index_interval_bytes=st.sampled_from([0, 60, 200, 4096]),
    segment_index_bytes=st.sampled_from([48, 120, 4096]),
    segment_ms=st.sampled_from([HUGE, 3_000]),
    message_timestamp_type=st.sampled_from(["CreateTime", "LogAppendTime"]),
    ts_mode=st.sampled_from(["random", "monotonic"]),
))


def _random_batch(rng):
    """(records [(timestamp, key, value)], codec none/gzip/lz4/zstd, ms the clock advances)."""
    recs = []
    for _ in range(rng.randint(1, 6)):
        key = None if rng.random() < 0.3 else rng.randbytes(rng.randint(0, 6))
        r = rng.random()
        value = None if r < 0.1 else b"v" * 60 if r < 0.25 else rng.randbytes(rng.randint(0, 40))
        recs.append((rng.randint(0, 10_000), key, value))
    return recs, rng.choice([0, 0, 1, 3, 4]), rng.randint(0, 40)


@st.composite
def _workload(draw, min_batches=1, max_batches=60):
    """(config, batches): the batches come from a seeded PRNG so that every example has
    a realistic number of segments and index entries (hypothesis still shrinks the
    count and the config)."""
    conf = draw(config_st)
    n = draw(st.integers(min_batches, max_batches), label="batches")
    rng = random.Random(draw(st.integers(0, 2**32 - 1), label="seed"))
    return conf, [_random_batch(rng) for _ in range(n)]


# --------------------------------------------------------------------------- model
class Batch:
    """One written batch as the model knows it."""

    __slots__ = ("base", "last", "size", "records", "max_ts", "seg", "pos")

    def __init__(self, base, size, records):
        self.base = base
        self.last = base + len(records) - 1
        self.size = size
        self.records = records  # [(offset, timestamp, key, value)]
        self.max_ts = max(r[1] for r in records)
        self.seg = None  # base offset of the segment holding it
        self.pos = None  # byte position in that segment's .log

    @property
    def end(self):
        return self.pos + self.size


def _cfg(conf):
    c = {k: v for k, v in conf.items() if k != "ts_mode"}
    return topic_config(**c)


def _new_dir():
    root = tempfile.mkdtemp(prefix="recprop-")
    return root, os.path.join(root, f"{TOPIC}-{PARTITION}")


def _open(path, conf, clock, **kw):
    return Log(path, _cfg(conf), clock, topic=TOPIC, partition=PARTITION, **kw)


def _write(log, clock, conf, batches, model):
    """Append each batch through Log.append (validator included); extend ``model``."""
    lat = conf["message_timestamp_type"] == "LogAppendTime"
    mono = 0
    for recs, codec, advance in batches:
        clock.advance(advance)
        if conf["ts_mode"] == "monotonic":
            stamped = []
            for ts, k, v in recs:
                mono += ts % 37
                stamped.append((mono, k, v))
            recs = stamped
        raw = R.build_batch(recs, compression=codec)
        expected_base = model[-1].last + 1 if model else 0
        try:
            info = log.append(raw)
        except RecordListTooLargeError:
            assert len(raw) > conf["segment_bytes"]
            continue
        assert info.base_offset == expected_base
        assert info.last_offset == expected_base + len(recs) - 1
        if lat:
            assert info.log_append_time == clock.time_ms()
            stored = [(expected_base + i, info.log_append_time, k, v) for i, (_t, k, v) in enumerate(recs)]
        else:
            stored = [(expected_base + i, t, k, v) for i, (t, k, v) in enumerate(recs)]
        model.append(Batch(expected_base, len(raw), stored))


def _segment_bases(path):
    return sorted(int(n[:20]) for n in os.listdir(path) if n.endswith(".log") and len(n) == 24)


def _place(model, path):
    """Give every model batch its segment and byte position (from the segment bases on
    disk and the batch sizes); check that the .log sizes agree with the model."""
    bases = _segment_bases(path)
    sizes = {b: 0 for b in bases}
    for b in model:
        seg = max(x for x in bases if x <= b.base)
        b.seg, b.pos = seg, sizes[seg]
        sizes[seg] += b.size
    for base, size in sizes.items():
        assert os.path.getsize(os.path.join(path, f"{base:020d}.log")) == size, "harness: .log size != model"
    event(f"segments: {min(len(bases), 10)}{'+' if len(bases) >= 10 else ''}")
    target(float(len(bases)), label="segments")
    return bases


def _records(model, lso=0):
    return [r for b in model for r in b.records if r[0] >= lso]


def _leo(model):
    return model[-1].last + 1 if model else 0


# --------------------------------------------------------------------------- oracles
def oracle_offset_for_timestamp(model, seg_bases, target, lso=0, hw=None, seg_dir=None):
    """SPEC 5, step by step: the first segment whose largest timestamp >= T; in it the
    batches in order, skipping those with maxTimestamp < T (or entirely below the log
    start offset); the first record with ts >= T and offset >= lso.  Nothing there, or an
    offset at or past the high watermark: None."""
    if hw is None:
        hw = _leo(model)
    by_seg = {s: [] for s in seg_bases}
    for b in model:
        seg = max(x for x in seg_bases if x <= b.base)
        by_seg[seg].append(b)
    for s in seg_bases:
        batches = by_seg[s]
        if batches:
            largest = max(b.max_ts for b in batches)
        else:
            # Kafka's LogSegment.largestTimestamp: no timestamp -> the .log file's mtime
            # (only a segment emptied by a crash while later ones survived gets here)
            path = os.path.join(seg_dir, f"{s:020d}.log")
            largest = os.stat(path).st_mtime_ns // 1_000_000 if seg_dir else LONG_MAX
        if largest < target:
            continue
        for b in batches:
            if b.max_ts < target or b.last < lso:
                continue
            for off, ts, _k, _v in b.records:
                if ts >= target and off >= lso:
                    return None if off >= hw else (off, ts)
        return None
    return None


def oracle_max_timestamp(model, lso=0):
    recs = _records(model, lso)
    if not recs:
        return None
    mx = max(r[1] for r in recs)
    return next((r[0], r[1]) for r in recs if r[1] == mx)


def read_all(log):
    """Every record from the log start offset to the end via Log.read (crossing
    segments), decoded with protocol.records; every batch's CRC checked."""
    out = []
    off = log.log_start_offset
    while off < log.log_end_offset:
        info = log.read(off, 1 << 20)
        assert info.records is not None, f"no data at offset {off} < LEO {log.log_end_offset}"
        data = info.records.read()
        progressed = False
        for pos, hdr in R.iter_batches(data):
            assert R.verify_crc(data, pos, hdr)
            for rec in R.iter_records(data, pos, hdr):
                if rec.offset >= off:
                    out.append((rec.offset, rec.timestamp,
                                None if rec.key is None else bytes(rec.key),
                                None if rec.value is None else bytes(rec.value)))
            off = hdr.base_offset + hdr.last_offset_delta + 1
            progressed = True
        assert progressed, f"read at {off} returned no whole batch"
    return out


def targets_for(model, data):
    stamps = sorted({r[1] for b in model for r in b.records})
    extra = [0, 1, stamps[-1], stamps[-1] + 1, stamps[0], max(0, stamps[0] - 1)] if stamps else [0, 1]
    picks = data.draw(st.lists(st.sampled_from(stamps), max_size=12)) if stamps else []
    near = [max(0, t + d) for t in picks for d in (-1, 1)]
    rand = data.draw(st.lists(st.integers(0, 12_000), max_size=6))
    return sorted(set(extra + picks + near + rand))


def answers(log, targets):
    return ({t: log.offset_for_timestamp(t) for t in targets}, log.offset_of_max_timestamp())


def check_log(log, model, targets, lso=0):
    """The log holds exactly the model's records, and lookups equal the oracles."""
    leo = _leo(model)
    assert log.log_end_offset == leo
    assert log.high_watermark == leo
    assert log.log_start_offset == lso
    assert read_all(log) == _records(model, lso)
    bases = _segment_bases(log.dir)
    all_recs = _records(model, lso)
    used = {max(x for x in bases if x <= b.base) for b in model}
    empty_middle = any(x not in used for x in bases[:-1])
    for t in targets:
        got = log.offset_for_timestamp(t)
        assert got == oracle_offset_for_timestamp(model, bases, t, lso, seg_dir=log.dir), \
            f"offset_for_timestamp({t})"
        if got is not None:
            # the guarantee: every record with ts >= T is at or after the returned offset
            assert all(r[0] >= got[0] for r in all_recs if r[1] >= t), f"guarantee broken for T={t}"
        elif lso == 0 and not empty_middle:
            assert all(r[1] < t for r in all_recs), f"T={t}: None although a record has ts >= T"
    if lso == 0 or log.offset_of_max_timestamp() is not None:
        assert log.offset_of_max_timestamp() == oracle_max_timestamp(model, lso)


def append_one_more(log, clock, conf, model):
    """Appending continues at the model's LEO, and the new batch reads back."""
    more = [([(5_000, b"k", b"after-recovery")], 0, 1)]
    before = len(model)
    _write(log, clock, conf, more, model)
    assert len(model) == before + 1
    assert read_all(log) == _records(model, log.log_start_offset)


def index_entries(log):
    """{segment base: (offset index entries, time index entries)}."""
    out = {}
    for seg in log.segments:
        oi = [tuple(seg.offset_index.entry(i)) for i in range(seg.offset_index.entries)]
        ti = [tuple(seg.time_index.entry(i)) for i in range(seg.time_index.entries)]
        out[seg.base_offset] = (oi, ti)
    return out


def fresh_rebuild_entries(path, conf):
    """Index entries of a copy of the .log files only (every index rebuilt from scratch)."""
    root = tempfile.mkdtemp(prefix="recprop-fresh-")
    try:
        copy = os.path.join(root, f"{TOPIC}-{PARTITION}")
        os.makedirs(copy)
        for n in os.listdir(path):
            if n.endswith(".log"):
                shutil.copyfile(os.path.join(path, n), os.path.join(copy, n))
        log = _open(copy, conf, ManualClock(START_MS))
        try:
            return index_entries(log)
        finally:
            log.close_handlers()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _build(conf, batches):
    root, path = _new_dir()
    clock = ManualClock(START_MS)
    log = _open(path, conf, clock)
    model: list[Batch] = []
    _write(log, clock, conf, batches, model)
    n = sum(seg.offset_index.entries for seg in log.segments)
    event(f"offset index entries: {'0' if n == 0 else '1-9' if n < 10 else '10+'}")
    event(f"timestamp type: {conf['message_timestamp_type']}")
    return root, path, clock, log, model


def _truncate(path, size):
    with open(path, "r+b") as f:
        f.truncate(size)


def _flip(path, pos, xor):
    with open(path, "r+b") as f:
        f.seek(pos)
        b = f.read(1)
        f.seek(pos)
        f.write(bytes([b[0] ^ xor]))


def _append_bytes(path, data):
    with open(path, "ab") as f:
        f.write(data)


def damage_log_file(data, seg_path, seg_batches, next_offset, kinds):
    """Damage one segment's .log; returns the number of its model batches that survive
    (the longest valid prefix) and whether bytes must be cut (so later segments go)."""
    size = sum(b.size for b in seg_batches)
    kind = data.draw(st.sampled_from(kinds), label="damage")
    event(f"damage: {kind}")
    if kind == "cut":
        p = data.draw(st.integers(0, size), label="cut at")
        _truncate(seg_path, p)
        keep = sum(1 for b in seg_batches if b.end <= p)
        # a cut exactly at a batch boundary leaves nothing for recovery to cut (Kafka's
        # recoverSegment returns 0 truncated bytes and later segments stay)
        return keep, p != (seg_batches[keep - 1].end if keep else 0)
    if kind == "flip":
        assume(seg_batches)
        i = data.draw(st.integers(0, len(seg_batches) - 1), label="batch")
        b = seg_batches[i]
        # magic .. end: magic, CRC and the CRC-covered part (baseOffset and leader epoch are
        # not covered by the CRC; batchLength changes are caught as CRC or size errors)
        p = data.draw(st.one_of(st.integers(b.pos + 16, b.end - 1), st.integers(b.pos + 8, b.pos + 11)),
                      label="flip at")
        _flip(seg_path, p, data.draw(st.integers(1, 255), label="xor"))
        return i, True
    if kind == "garbage":
        junk = data.draw(st.binary(min_size=1, max_size=200), label="garbage")
        _append_bytes(seg_path, junk)
        return len(seg_batches), True
    assert kind == "torn"
    whole = bytearray(R.build_batch([(7, b"t", b"torn" * 10)]))
    struct.pack_into(">q", whole, 0, next_offset)
    n = data.draw(st.integers(1, len(whole) - 1), label="torn bytes")
    _append_bytes(seg_path, bytes(whole[:n]))
    return len(seg_batches), True


# --------------------------------------------------------------------------- 1. last segment damage
@settings(max_examples=250, **SETTINGS)
@given(work=_workload(), data=st.data())
def test_damage_in_last_segment_recovers_longest_valid_prefix(work, data):
    """Crash, then cut the last segment at any byte, flip a byte of one of its batches
    (CRC, magic or length), append garbage or a torn batch: the reopened log holds exactly
    the batches wholly before the damage, the .log is cut to them, lookups equal the
    oracles, and appends continue at the right offset."""
    conf, batches = work
    root, path, clock, log, model = _build(conf, batches)
    try:
        targets = targets_for(model, data)
        bases = _place(model, path)
        log.close_handlers()  # crash
        last = bases[-1]
        seg_batches = [b for b in model if b.seg == last]
        keep, _cut = damage_log_file(data, os.path.join(path, f"{last:020d}.log"), seg_batches,
                                     _leo(model), ["cut", "flip", "garbage", "torn"])
        expected = [b for b in model if b.seg != last] + seg_batches[:keep]
        log = _open(path, conf, clock)
        check_log(log, expected, targets)
        assert _segment_bases(path) == bases
        assert os.path.getsize(os.path.join(path, f"{last:020d}.log")) == sum(b.size for b in seg_batches[:keep])
        log = _sane_append_then_crash_again(log, path, conf, clock, expected, targets)
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


def _sane_append_then_crash_again(log, path, conf, clock, expected, targets):
    """After a recovery: every segment passes the full sanity check, one more append
    works, and a second crash right after it changes nothing. Returns the reopened log."""
    for seg in log.segments:
        seg.sanity_check(full=True)
    append_one_more(log, clock, conf, expected)
    log.close_handlers()
    log = _open(path, conf, clock)
    check_log(log, expected, targets)
    return log


# --------------------------------------------------------------------------- 2. earlier segment damage
@settings(max_examples=200, **SETTINGS)
@given(work=_workload(min_batches=8), data=st.data())
def test_damage_in_earlier_segment_drops_everything_after_it(work, data):
    """SPEC 6: with no recovery point every segment is recovered; when recovery cuts
    bytes off a segment the later segments are deleted (Kafka's LogLoader does the same)."""
    conf, batches = work
    conf = dict(conf, segment_bytes=min(conf["segment_bytes"], 1200))
    root, path, clock, log, model = _build(conf, batches)
    try:
        bases = _place(model, path)
        assume(len(bases) >= 2)
        targets = targets_for(model, data)
        log.close_handlers()  # crash
        k = data.draw(st.integers(0, len(bases) - 2), label="segment")
        seg_base = bases[k]
        seg_batches = [b for b in model if b.seg == seg_base]
        keep, cut = damage_log_file(data, os.path.join(path, f"{seg_base:020d}.log"), seg_batches,
                                    bases[k + 1], ["cut", "flip", "garbage", "torn"])
        if cut:
            # SPEC 6 / Kafka's LogLoader: bytes cut off an unflushed segment delete every
            # later segment, even when the cut only removed garbage
            expected = [b for b in model if b.seg < seg_base] + seg_batches[:keep]
            expected_bases = bases[:k + 1]
        else:
            # nothing cut by recovery (a cut at a batch boundary): later segments stay, and
            # the batches removed from this one leave a gap in the offsets, as in Kafka
            lost = {id(b) for b in seg_batches[keep:]}
            expected = [b for b in model if id(b) not in lost]
            expected_bases = bases
        log = _open(path, conf, clock)
        assert _segment_bases(path) == expected_bases
        check_log(log, expected, targets)
        log = _sane_append_then_crash_again(log, path, conf, clock, expected, targets)
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- 3. lookups
@settings(max_examples=150, **SETTINGS)
@given(work=_workload(), data=st.data())
def test_lookups_equal_oracle_before_crash_after_recovery_and_after_clean_reopen(work, data):
    """SPEC 5 lookups (offset for a timestamp, offset of the max timestamp) equal the
    oracle before a crash, after full recovery and after a clean close + trusted reopen,
    with and without a log start offset moved by DeleteRecords."""
    conf, batches = work
    root, path, clock, log, model = _build(conf, batches)
    try:
        _place(model, path)
        targets = targets_for(model, data)
        lso = 0
        if model and data.draw(st.booleans(), label="move log start offset"):
            lso = data.draw(st.integers(0, _leo(model)), label="log start offset")
            log.maybe_increment_log_start_offset(lso)
        check_log(log, model, targets, lso)
        before = answers(log, targets)
        log.close_handlers()  # crash
        log = _open(path, conf, clock, **({"log_start_offset": lso} if lso else {}))
        check_log(log, model, targets, lso)
        assert answers(log, targets) == before
        log.close()  # clean close, then reopen trusting the indexes
        log = _open(path, conf, clock, had_clean_shutdown=True, **({"log_start_offset": lso} if lso else {}))
        check_log(log, model, targets, lso)
        assert answers(log, targets) == before
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- 4. index damage
INDEX_DAMAGE = ["delete", "short", "zero", "backwards-last", "backwards-append", "repeat-middle", "beyond-log"]


def damage_index(data, path, bases, kind, suffix):
    """Damage one ``suffix`` file of a cleanly closed log; returns a description."""
    entry = 8 if suffix == ".index" else 12
    files = list(bases)
    need = {"zero": 2, "backwards-last": 2, "backwards-append": 2, "repeat-middle": 3}.get(kind, 0)
    if need:
        # an all-zero single entry is a valid index ((base, 0) / (0, base)); going
        # backwards needs two entries; a repeated middle entry three
        files = [b for b in bases if os.path.getsize(os.path.join(path, f"{b:020d}{suffix}")) >= need * entry]
        assume(files)
    base = data.draw(st.sampled_from(files), label="segment")
    f = os.path.join(path, f"{base:020d}{suffix}")
    length = os.path.getsize(f)
    if kind == "delete":
        os.unlink(f)
    elif kind == "short":
        if length == 0:
            _append_bytes(f, bytes(data.draw(st.integers(1, entry - 1), label="junk bytes")))
        else:
            whole = data.draw(st.integers(0, length // entry - 1), label="whole entries kept")
            _truncate(f, whole * entry + data.draw(st.integers(1, entry - 1), label="partial entry bytes"))
    elif kind == "beyond-log":
        # one more increasing entry, pointing past the end of the .log / the last offset
        with open(f, "rb") as fh:
            raw = fh.read()
        raw = raw[:len(raw) // entry * entry]
        log_size = os.path.getsize(os.path.join(path, f"{base:020d}.log"))
        if entry == 8:
            rel, _pos = struct.unpack_from(">ii", raw, len(raw) - 8) if raw else (0, 0)
            bad = struct.pack(">ii", rel + 1000, log_size + 10)
        else:
            ts, rel = struct.unpack_from(">qi", raw, len(raw) - 12) if raw else (0, 0)
            bad = struct.pack(">qi", ts + 1, rel + 1000)
        with open(f, "wb") as fh:
            fh.write(raw + bad)
    elif kind == "repeat-middle":
        # entry 1 becomes a copy of entry 0: not increasing, and only a full check sees it
        with open(f, "r+b") as fh:
            first = fh.read(entry)
            fh.seek(entry)
            fh.write(first)
    elif kind == "zero":
        with open(f, "r+b") as fh:
            fh.write(bytes(length))
    else:
        with open(f, "rb") as fh:
            raw = fh.read()
        fmt = ">ii" if entry == 8 else ">qi"
        first = struct.unpack_from(fmt, raw, 0)
        if entry == 8:  # (relative offset, position): go back in both
            bad = struct.pack(fmt, max(0, first[0] - 1), max(0, first[1] - 1))
        else:  # (timestamp, relative offset): an older timestamp
            bad = struct.pack(fmt, first[0] - 1, first[1])
        if kind == "backwards-last":
            raw = raw[:-entry] + bad
        else:
            raw = raw + bad
        with open(f, "wb") as fh:
            fh.write(raw)
    event(f"index damage: {kind} {suffix}")
    return f"{kind} {os.path.basename(f)}"


@settings(max_examples=25, **SETTINGS)
@pytest.mark.parametrize("suffix", [".index", ".timeindex"])
@pytest.mark.parametrize("kind", INDEX_DAMAGE)
@given(work=_workload(min_batches=3), data=st.data(), clean=st.booleans())
def test_index_damage_is_detected_and_rebuilt(kind, suffix, work, data, clean):
    """SPEC 6: an index file that is missing, of a bad length, zero-filled, going
    backwards or pointing past the log is rebuilt (also when the shutdown was clean and
    the indexes would otherwise be trusted): reads and lookups are unchanged and the
    entries equal a rebuild from the .log files alone."""
    conf, batches = work
    root, path, clock, log, model = _build(conf, batches)
    try:
        targets = targets_for(model, data)
        before = answers(log, targets)
        bases = _place(model, path)
        log.close()
        undamaged = fresh_rebuild_entries(path, conf)
        what = damage_index(data, path, bases, kind, suffix)
        log = _open(path, conf, clock, **({"had_clean_shutdown": True} if clean else {}))
        check_log(log, model, targets)
        assert answers(log, targets) == before, what
        for seg in log.segments:
            seg.sanity_check(full=True)
        assert index_entries(log) == undamaged, what
        append_one_more(log, clock, conf, model)
        log.close()
        log = _open(path, conf, clock, had_clean_shutdown=True)
        check_log(log, model, targets)
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- 5. truncation
@settings(max_examples=150, **SETTINGS)
@given(work=_workload(), data=st.data(), more=st.integers(0, 4))
def test_truncate_to_batch_boundary(work, data, more):
    """SPEC 7: truncate_to(k) at a batch boundary keeps exactly the records < k, drops
    index entries >= k, recomputes the last segment's max timestamp; a crash afterwards,
    appends and a clean reopen keep that state."""
    conf, batches = work
    more = batches[:more]
    root, path, clock, log, model = _build(conf, batches)
    try:
        assume(model)
        _place(model, path)
        targets = targets_for(model, data)
        boundaries = sorted({b.base for b in model} | {_leo(model)})
        k = data.draw(st.sampled_from(boundaries), label="truncate to")
        log.truncate_to(k)
        kept = [b for b in model if b.last < k]
        assert _leo(kept) == k
        check_log(log, kept, targets)
        for seg in log.segments:
            assert all(o < k for o, _p in (seg.offset_index.entry(i) for i in range(seg.offset_index.entries)))
            assert all(o < k for _t, o in (seg.time_index.entry(i) for i in range(seg.time_index.entries)))
        last = log.active_segment
        in_last = [r[1] for b in kept if b.base >= last.base_offset for r in b.records]
        assert last.max_timestamp_so_far == (max(in_last) if in_last else -1)
        after = answers(log, targets)
        # crash right after the truncation: same state
        log.close_handlers()
        log = _open(path, conf, clock)
        check_log(log, kept, targets)
        assert answers(log, targets) == after
        # appends continue at k; a crash and a clean reopen keep them
        _write(log, clock, conf, more, kept)
        check_log(log, kept, targets)
        log.close_handlers()
        log = _open(path, conf, clock)
        check_log(log, kept, targets)
        log.close()
        log = _open(path, conf, clock, had_clean_shutdown=True)
        check_log(log, kept, targets)
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)


# --------------------------------------------------------------------------- 6. LogAppendTime after a restart
@settings(max_examples=60, **SETTINGS)
@given(work=_workload(), data=st.data())
def test_log_append_time_never_goes_back_after_a_restart(work, data):
    """SPEC 2: a LogAppendTime batch gets maxTimestamp = now, never less than the
    previous append time of the partition.  Across a restart "previous" is the largest
    append time among the records that survived (the log reloads it), so a wall clock
    stepped back after the restart must not produce an older append time."""
    conf, batches = work
    conf = dict(conf, message_timestamp_type="LogAppendTime")
    root, path, clock, log, model = _build(conf, batches)
    try:
        bases = _place(model, path)
        how = data.draw(st.sampled_from(["crash", "crash after roll", "cut last segment", "clean close",
                                         "clean close after roll"]), label="restart")
        event(f"restart: {how}")
        if how.endswith("after roll"):
            log.roll()  # an empty active segment, as right after a roll triggered by an append
        if how.startswith("clean"):
            log.close()
        else:
            log.close_handlers()
        expected = model
        if how == "cut last segment":
            seg_batches = [b for b in model if b.seg == bases[-1]]
            keep, _cut = damage_log_file(data, os.path.join(path, f"{bases[-1]:020d}.log"), seg_batches,
                                         _leo(model), ["cut"])
            expected = [b for b in model if b.seg != bases[-1]] + seg_batches[:keep]
        log = _open(path, conf, clock, **({"had_clean_shutdown": True} if how.startswith("clean") else {}))
        assert log.log_end_offset == _leo(expected)
        previous = max((b.max_ts for b in expected), default=-1)
        reloaded = log.last_append_time_ms
        clock.set(START_MS - 1_000)  # the wall clock steps back (NTP) while the broker was down
        info = log.append(R.build_batch([(1, b"k", b"v")]))
        assert info.log_append_time >= previous, (
            f"append time {info.log_append_time} < {previous}, the previous append time of the "
            f"partition (last_append_time_ms after the reload: {reloaded}; segments {log.segments})")
    finally:
        log.close_handlers()
        shutil.rmtree(root, ignore_errors=True)
