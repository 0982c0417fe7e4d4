"""Many records across segment rolls: Kafka's on-disk layout (20-digit base offsets,
.log/.index/.timeindex per segment), everything consumable in order, and search by time
still exact across segment boundaries."""

from __future__ import annotations

import random
import re
import struct

import pytest

from tests.integration.helpers import (
    TimeOracle,
    compare_offsets_for_times,
    consume,
    create_topic,
    ck_producer_config,
    now_ms,
    offsets_for_times,
    special_offsets,
    unique_topic,
)

pytestmark = [pytest.mark.timeout(180), pytest.mark.slow]

N = 20_000
SEGMENT_BYTES = 100_000
SEGMENT_FILE = re.compile(r"^(\d{20})\.(log|index|timeindex)$")


def produce_many(bootstrap: str, topic: str, n: int, base_ts: int) -> list[int]:
    from confluent_kafka import Producer

    # Locally out-of-order timestamps: +-200 ms jitter around a 50 ms step.
    stamps = [base_ts + 50 * i + ((i * 7919) % 401) - 200 for i in range(n)]
    p = Producer(ck_producer_config(bootstrap, **{"linger.ms": 20, "batch.size": 16_384,
                                                  "acks": "all"}))
    failures: list = []
    delivered = [0]

    def cb(err, msg):
        if err is not None:
            failures.append(err)
        else:
            delivered[0] += 1

    for i, ts in enumerate(stamps):
        while True:
            try:
                p.produce(topic, key=b"key-%06d" % i, value=b"value-%06d-" % i + b"x" * 60,
                          partition=0, timestamp=ts, on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    assert p.flush(90) == 0, "not all records delivered within 90 s"
    assert not failures, f"{len(failures)} delivery failures, first {failures[0]}"
    assert delivered[0] == n
    return stamps


def read_entries(path, size: int, fmt: str) -> list[tuple]:
    data = path.read_bytes()
    assert len(data) % size == 0, f"{path.name}: size {len(data)} not a multiple of {size}"
    return [struct.unpack_from(fmt, data, i) for i in range(0, len(data), size)]


def batch_base_offset_at(log_path, pos: int) -> int:
    with open(log_path, "rb") as f:
        f.seek(pos)
        head = f.read(17)
    assert len(head) == 17 and head[16] == 2, f"{log_path.name}@{pos}: not a v2 batch header"
    return struct.unpack_from(">q", head, 0)[0]


def test_many_records_across_segments(broker_factory):
    b = broker_factory({"log.segment.bytes": SEGMENT_BYTES, "log.index.interval.bytes": 1024,
                        "auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("segments"))
    stamps = produce_many(b.bootstrap, topic, N, now_ms() - 3_600_000)

    # --- the files ------------------------------------------------------------------------
    pdir = b.partition_dir(topic)
    assert pdir.is_dir(), f"no partition directory {pdir}"
    files: dict[int, set[str]] = {}
    for f in pdir.iterdir():
        m = SEGMENT_FILE.match(f.name)
        if m:
            files.setdefault(int(m.group(1)), set()).add(m.group(2))
    bases = sorted(files)
    assert len(bases) >= 5, f"expected several segments for {N} records with segment.bytes={SEGMENT_BYTES}: {bases}"
    assert bases[0] == 0
    for base in bases:
        assert files[base] == {"log", "index", "timeindex"}, f"segment {base}: files {files[base]}"
    assert bases == sorted(set(bases)) and bases[-1] < N

    oracle_stamps = stamps
    for k, base in enumerate(bases[:-1]):  # rolled segments: closed and trimmed
        nxt = bases[k + 1]
        log_path = pdir / f"{base:020d}.log"
        log_size = log_path.stat().st_size
        assert 0 < log_size <= SEGMENT_BYTES, f"segment {base}: .log has {log_size} bytes"
        seg_stamps = oracle_stamps[base:nxt]
        # .timeindex: 12-byte (timestamp, relative offset) entries, timestamps strictly
        # increasing; entry (T, O): T is the largest timestamp up to offset base+O; the
        # last entry holds the segment's max timestamp.
        tentries = read_entries(pdir / f"{base:020d}.timeindex", 12, ">qi")
        assert tentries, f"segment {base}: empty .timeindex after roll"
        ts_list = [t for t, _ in tentries]
        assert ts_list == sorted(set(ts_list)), f"segment {base}: time index not strictly increasing"
        for t, rel in tentries:
            assert 0 <= rel < nxt - base, f"segment {base}: time index offset {rel} outside the segment"
            assert t == max(seg_stamps[: rel + 1]), (
                f"segment {base}: time index entry ({t}, {rel}) but max timestamp up to that offset "
                f"is {max(seg_stamps[: rel + 1])}")
        assert tentries[-1][0] == max(seg_stamps), (
            f"segment {base}: last time index entry {tentries[-1]} != segment max {max(seg_stamps)}")
        # .index: 8-byte (relative offset, position) entries, both increasing, each
        # position the start of a batch at or below the indexed offset.
        oentries = read_entries(pdir / f"{base:020d}.index", 8, ">ii")
        assert oentries, f"segment {base}: empty .index with index.interval.bytes=1024"
        rels = [r for r, _ in oentries]
        poss = [p for _, p in oentries]
        assert rels == sorted(set(rels)) and poss == sorted(set(poss))
        for rel, pos in oentries:
            assert 0 <= rel < nxt - base and 0 <= pos < log_size
            assert base <= batch_base_offset_at(log_path, pos) <= base + rel

    # --- everything comes back in order ---------------------------------------------------
    got = consume("ck", b.bootstrap, topic, N, timeout=90)
    assert [g.offset for g in got] == list(range(N)), "offsets not contiguous across segments"
    for g in got:
        assert g.key == b"key-%06d" % g.offset, f"offset {g.offset}: key {g.key!r}"
        assert g.timestamp == stamps[g.offset], f"offset {g.offset}: ts {g.timestamp} != {stamps[g.offset]}"
    # a second client, started from the middle of a segment
    mid = bases[len(bases) // 2] + 3
    got = consume("kp", b.bootstrap, topic, 2000, start=mid)
    assert [g.offset for g in got[:2000]] == list(range(mid, mid + 2000))

    # --- search by time across segments ---------------------------------------------------
    oracle = TimeOracle(stamps)
    rnd = random.Random(6)
    targets = {stamps[0] - 1, max(stamps), max(stamps) + 1}
    for base in bases:  # around every segment boundary
        for off in (base - 1, base, base + 1):
            if 0 <= off < N:
                targets.update((stamps[off] - 1, stamps[off], stamps[off] + 1))
    for _ in range(150):
        t = stamps[rnd.randrange(N)] + rnd.randint(-3, 3)
        targets.add(t)
    targets = sorted(targets)
    assert oracle.lookup(max(stamps) + 1) is None
    for client in ("kp", "ck-admin"):
        compare_offsets_for_times(client, offsets_for_times(client, b.bootstrap, topic, targets), stamps)
    so = special_offsets("ck-admin", b.bootstrap, topic)
    assert so["earliest"] == 0 and so["latest"] == N
    assert so["max_timestamp"] == (stamps.index(max(stamps)), max(stamps))


def segment_bases(pdir) -> list[int]:
    return sorted(int(m.group(1)) for f in pdir.iterdir()
                  if (m := SEGMENT_FILE.match(f.name)) and m.group(2) == "log")


def test_time_based_roll(broker, new_topic):
    """segment.ms rolls on record timestamps (KIP-32): a new segment starts when an
    append's max timestamp exceeds the segment's first batch max timestamp by more than
    segment.ms (strictly); older timestamps never roll; search by time stays exact."""
    from tests.integration.helpers import produce_batches

    topic = new_topic({"segment.ms": 60_000})
    base = now_ms() - 3_600_000
    offsets_ts = [
        base,              # 0  segment 0 starts (rolling timestamp = base)
        base + 30_000,     # 1
        base + 61_000,     # 2  61 s > 60 s: roll, segment 2 (rolling ts base+61 s)
        base + 90_000,     # 3
        base + 200_000,    # 4  139 s: roll, segment 4 (rolling ts base+200 s)
        base + 100,        # 5  older: no roll
        base + 260_000,    # 6  exactly 60 s: no roll (strict)
        base + 260_001,    # 7  roll, segment 7
    ]
    stamps = produce_batches(broker.bootstrap, topic, [(None, [ts]) for ts in offsets_ts])
    assert segment_bases(broker.partition_dir(topic)) == [0, 2, 4, 7]
    compare_offsets_for_times("kp", offsets_for_times("kp", broker.bootstrap, topic,
                                                      sorted(set(t + d for t in stamps for d in (-1, 0, 1)))),
                              stamps)
    got = consume("ck", broker.bootstrap, topic, len(stamps))
    assert [(g.offset, g.timestamp) for g in got] == list(enumerate(stamps))
