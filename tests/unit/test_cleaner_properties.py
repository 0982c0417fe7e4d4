"""The log cleaner against an oracle: random sequences of keyed records, tombstones,
timestamps and header versions, with cleans at random points and clock moves between
them. After every clean:

* each key's surviving record is the one the compaction strategy picks (offset,
  timestamp or header), computed by a model written from the rules alone;
* offsets, timestamps, keys, values and headers of the survivors are unchanged;
* a tombstone stays until the first clean at or after its batch's delete horizon
  (``delete.retention.ms`` after the clean that first kept it), then goes;
* search by time answers every lookup as a full scan of the surviving records would,
  and ListOffsets max-timestamp names the first record with the largest timestamp;
* the compiled loops and the pure-Python reference write byte-identical segments.

Offset maps from four keys up force cleans in passes (the map fills mid-way)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, event, given, settings, strategies as st

from storage.log_cleaner import LogCleaner
from tests.unit.cleaner_helpers import START_MS, append, compact_topic, full_scan_offset_for_time, make_lm, read_all

ABSENT = -(1 << 63)
KEYS = [b"a", b"b", b"c", b"d", b"e", b"f"]


class Rec:
    __slots__ = ("offset", "key", "value", "ts", "version", "alive")

    def __init__(self, offset, key, value, ts, version):
        self.offset, self.key, self.value, self.ts, self.version = offset, key, value, ts, version
        self.alive = True


class Model:
    """What the cleaner must leave, from Kafka's rules and KIP-280's."""

    def __init__(self, strategy: str, retention_ms: int):
        self.strategy = strategy
        self.retention_ms = retention_ms
        self.batches: list[dict] = []  # {"base": int, "recs": [Rec], "horizon": int | None}

    def add(self, base, recs):
        self.batches.append({"base": base, "recs": recs, "horizon": None})

    def version(self, r: Rec):
        if self.strategy == "timestamp":
            return r.ts
        if self.strategy == "header":
            return r.version
        return 0

    def clean(self, first_dirty: int, end: int, now: int, segment_bases: list[int]) -> None:
        winner: dict[bytes, tuple] = {}
        for b in self.batches:
            for r in b["recs"]:
                if r.alive and first_dirty <= r.offset < end:
                    v = self.version(r)
                    w = winner.get(r.key)
                    if w is None or self.strategy == "offset" or v >= w[1]:
                        winner[r.key] = (r.offset, v)
        latest = end - 1

        def seg_of(off):
            return max(x for x in segment_bases if x <= off)

        for b in self.batches:
            if seg_of(b["base"]) >= end:
                continue  # not in a cleaned segment
            for r in b["recs"]:
                if not r.alive or r.offset > latest:
                    continue
                w = winner.get(r.key)
                if w is None:
                    latest_for_key = True
                elif self.strategy == "offset":
                    latest_for_key = r.offset >= w[0]
                else:
                    v = self.version(r)
                    latest_for_key = v > w[1] or (v == w[1] and r.offset >= w[0])
                    if v > w[1] or (v == w[1] and r.offset > w[0]):
                        winner[r.key] = (r.offset, v)  # a cleaned record still winning keeps the key
                keep_delete = b["horizon"] is None or now < b["horizon"]
                r.alive = latest_for_key and (r.value is not None or keep_delete)
            if b["horizon"] is None and any(r.alive and r.value is None for r in b["recs"]):
                b["horizon"] = now + self.retention_ms

    def survivors(self):
        return [r for b in self.batches for r in b["recs"] if r.alive]


record = st.tuples(
    st.sampled_from(KEYS),
    st.one_of(st.none(), st.binary(min_size=0, max_size=40)),  # None: a tombstone
    st.integers(min_value=-5_000, max_value=5_000),  # timestamp around the clock
    st.one_of(st.none(), st.integers(min_value=-3, max_value=3)),  # header version (None: no header)
)
op = st.one_of(
    st.tuples(st.just("append"), st.lists(record, min_size=1, max_size=4), st.sampled_from([0, 0, 3, 4])),
    st.tuples(st.just("append"), st.lists(record, min_size=1, max_size=4), st.sampled_from([0, 0, 3, 4])),
    st.tuples(st.just("roll")),
    # clock moves of exactly delete.retention.ms test the horizon's boundary
    st.tuples(st.just("clean"), st.one_of(st.sampled_from([0, 1_000, 4_000]), st.integers(0, 5_000))),
)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    strategy=st.sampled_from(["offset", "timestamp", "header"]),
    retention_ms=st.sampled_from([0, 1_000, 4_000]),
    tiny_map=st.booleans(),
    segment_bytes=st.integers(min_value=200, max_value=1_200),
    ops=st.lists(op, min_size=5, max_size=80),
)
def test_cleaning_matches_the_model(strategy, retention_ms, tiny_map, segment_bytes, ops):
    props = {"log_cleaner_dedupe_buffer_size": 1_100_000}
    if tiny_map:
        props["log_cleaner_io_buffer_load_factor"] = 0.0001  # 4 keys a pass
    with tempfile.TemporaryDirectory() as d1, tempfile.TemporaryDirectory() as d2:
        topic_cfg = dict(segment_bytes=segment_bytes, delete_retention_ms=retention_ms,
                         compaction_strategy=strategy, compaction_strategy_header="v", index_interval_bytes=100)
        logs, cleaners, clocks, lms = [], [], [], []
        for d, compiled in ((d1, True), (d2, False)):
            lm, cfg, clock = make_lm(Path(d), **props)
            logs.append(compact_topic(lm, **topic_cfg))
            cleaners.append(LogCleaner(lm, cfg, clock, inline=True, compiled=compiled))
            clocks.append(clock)
            lms.append(lm)
        model = Model(strategy, retention_ms)
        cleans = 0
        try:
            for o in ops + [("roll",), ("clean", 0), ("roll",), ("clean", 5_000)]:
                if o[0] == "append":
                    _kind, recs, codec = o
                    items = []
                    for key, value, dts, version in recs:
                        headers = [] if version is None else [("v", version.to_bytes(8, "big", signed=True))]
                        items.append((key, value, clocks[0].time_ms() + dts, headers))
                    infos = [append(log, clock, items, compression=codec, step_ms=0)
                             for log, clock in zip(logs, clocks)]
                    base = infos[0].base_offset
                    model.add(base, [Rec(base + i, k, v, ts, ABSENT if not h else int.from_bytes(h[0][1], "big",
                                                                                                 signed=True))
                                     for i, (k, v, ts, h) in enumerate(items)])
                    for clock in clocks:
                        clock.advance(7)
                    continue
                if o[0] == "roll":
                    for log in logs:
                        log.roll()
                    continue
                _kind, advance = o
                for clock in clocks:
                    clock.advance(advance)
                chosen = [c.grab_filthiest() for c in cleaners]
                assert (chosen[0] is None) == (chosen[1] is None)
                if chosen[0] is None:
                    continue
                ltc = chosen[0]
                bases = [s.base_offset for s in logs[0].segments]
                results = [c.clean_log(x) for c, x in zip(cleaners, chosen)]
                end = results[0].end_offset
                assert end == results[1].end_offset
                assert ltc.first_dirty < end <= ltc.first_uncleanable
                if not tiny_map:
                    assert end == ltc.first_uncleanable
                model.clean(ltc.first_dirty, end, clocks[0].time_ms(), bases)
                check(logs, model)
                cleans += 1
            event(f"cleans: {min(cleans, 3)}{'+' if cleans >= 3 else ''}")
        finally:
            for lm in lms:
                lm.shutdown()


def check(logs, model):
    want = [(r.offset, r.ts, r.key, r.value) for r in model.survivors()]
    got = [r[:4] for r in read_all(logs[0])]
    assert got == want
    # the compiled loops and the reference wrote the same bytes
    for s0, s1 in zip(logs[0].segments, logs[1].segments):
        assert s0.base_offset == s1.base_offset
        assert s0.read_bytes(0, s0.size) == s1.read_bytes(0, s1.size)
        for ext in (".index", ".timeindex"):
            p0 = os.path.join(logs[0].dir, f"{s0.base_offset:020d}{ext}")
            p1 = os.path.join(logs[1].dir, f"{s1.base_offset:020d}{ext}")
            if s0 is not logs[0].active_segment:
                assert Path(p0).read_bytes() == Path(p1).read_bytes()
    assert len(logs[0].segments) == len(logs[1].segments)
    records = read_all(logs[0])
    targets = {r[1] for r in records} | {r[1] + 1 for r in records} | {START_MS - 10_000, 0}
    for t in sorted(targets):
        got = logs[0].offset_for_timestamp(t)
        assert (None if got is None else tuple(got)) == full_scan_offset_for_time(records, t), t
    if records:
        best = max(r[1] for r in records)
        assert tuple(logs[0].offset_of_max_timestamp()) == next((r[0], r[1]) for r in records if r[1] == best)
