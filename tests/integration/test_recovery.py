"""Recovery at startup (SPEC sections 1, 3, 4, 6): what a restarted broker makes of the
files a previous run left behind.

* repeated SIGKILLs under continuous acks=all load (CreateTime and LogAppendTime topics,
  mixed codecs, small segments so kills also hit rolls): every acknowledged record
  survives at its offset, the log stays contiguous, search by time stays exact;
* index files damaged between runs (zero-filled, truncated to a partial entry, deleted,
  a backwards time-index entry, stray index files without a ``.log``), on a rolled and on
  the active segment, after a clean stop and after a SIGKILL: the broker must not trust
  them; data, ListOffsets by time and MAX_TIMESTAMP answer as before the damage, and the
  index files are there again with sane, correct contents;
* the clean-shutdown marker ``.kafka_cleanshutdown`` and the checkpoint files
  (``recovery-point-offset-checkpoint``, ``log-start-offset-checkpoint``) over clean and
  unclean stops, for several topics and partitions;
* KIP-33 migration: a rolled segment of magic 0 data (no timestamps) that lost its
  ``.timeindex`` gets one entry (the ``.log`` mtime, an offset inside the segment);
* recovery after a SIGKILL is logged (names the partition), a clean restart recovers
  nothing.

The on-disk formats are parsed here independently of the broker's code (``struct`` on
the bytes SPEC section 1 describes).
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import struct
import threading
import time
from pathlib import Path

import pytest

from tests.integration.helpers import (
    assert_records_equal,
    beginning_offset,
    build_v2_batch,
    ck_admin,
    ck_consumer,
    ck_ignorable,
    ck_producer_config,
    compare_offsets_for_times,
    consume,
    CREATE_TIME,
    create_topic,
    end_offset,
    Got,
    kp_admin,
    LOG_APPEND_TIME,
    make_records,
    now_ms,
    offsets_for_times,
    oracle_max_timestamp,
    parse_produce_response_v3,
    produce,
    produce_request_v3,
    query_points,
    RawConn,
    Rec,
    special_offsets,
    start_broker,
    TimeOracle,
    unique_topic,
    wait_for,
)

pytestmark = [pytest.mark.timeout(150), pytest.mark.slow]

CLEAN_SHUTDOWN = ".kafka_cleanshutdown"
RECOVERY_CKPT = "recovery-point-offset-checkpoint"
LOG_START_CKPT = "log-start-offset-checkpoint"
TRACEBACK = "Traceback (most recent call last)"

_LOG_RE = re.compile(r"^(\d{20})\.log$")


# ---------------------------------------------------------------------------------------
# On-disk helpers (independent of the broker's code)
# ---------------------------------------------------------------------------------------


def seg_name(base: int, suffix: str) -> str:
    return f"{base:020d}{suffix}"


def segment_bases(pdir: Path) -> list[int]:
    return sorted(int(m.group(1)) for p in pdir.iterdir() if (m := _LOG_RE.match(p.name)))


def index_entries(path: Path, entry_size: int) -> list[tuple[int, int]]:
    """The used entries of an .index (8-byte: relative offset, position) or .timeindex
    (12-byte: timestamp, relative offset); the zero-filled preallocated tail of an active
    segment's index is not counted (an all-zero entry is never a real one here: offset
    index entries never point at position 0 and our timestamps are far from 0)."""
    data = path.read_bytes()
    whole = len(data) // entry_size * entry_size
    used = min(whole, -(-len(data[:whole].rstrip(b"\0")) // entry_size) * entry_size)
    fmt = ">ii" if entry_size == 8 else ">qi"
    return [struct.unpack_from(fmt, data, i) for i in range(0, used, entry_size)]


def log_batches(path: Path) -> dict[int, tuple[int, int]]:
    """{position: (base offset, last offset)} of the v2 batches of a .log file."""
    data = path.read_bytes()
    out = {}
    pos = 0
    while pos + 61 <= len(data):
        base, length = struct.unpack_from(">qi", data, pos)
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        if length <= 0 or pos + 12 + length > len(data):
            break
        out[pos] = (base, base + delta)
        pos += 12 + length
    return out


def index_problems(pdir: Path, base: int, next_base: int, stamps: list[int], final_entry: bool = True) -> list[str]:
    """What is wrong with one segment's .index / .timeindex, judged against its .log and
    the true record timestamps (``stamps[offset]``); [] when both are sane and correct.

    * .index: size a multiple of 8; each entry (rel, pos) points at the start of a batch
      whose last offset is base + rel; relative offsets and positions strictly increasing.
    * .timeindex: size a multiple of 12; timestamps strictly increasing; offsets inside
      the segment and non-decreasing; each entry (T, O) has T == the largest timestamp of
      the segment's records up to O (SPEC 1); the last entry carries the segment's largest
      timestamp (the final entry written at roll / close / recovery: SPEC 3 and 6, it is
      where a trusted segment's max timestamp is reloaded from; not required with
      ``final_entry=False``: a killed broker's active segment)."""
    problems = []
    name = seg_name(base, "")
    ix, tix, logf = pdir / (name + ".index"), pdir / (name + ".timeindex"), pdir / (name + ".log")
    for p, size in ((ix, 8), (tix, 12)):
        if not p.exists():
            problems.append(f"{p.name} missing")
        elif p.stat().st_size % size:
            problems.append(f"{p.name}: size {p.stat().st_size} is not a multiple of {size}")
    if problems:
        return problems
    batches = log_batches(logf)
    prev = (-1, -1)
    for rel, pos in index_entries(ix, 8):
        if pos not in batches:
            problems.append(f"{ix.name}: entry ({rel}, {pos}) does not point at a batch start")
        elif batches[pos][1] != base + rel:
            problems.append(f"{ix.name}: entry ({rel}, {pos}): the batch there ends at offset "
                            f"{batches[pos][1]}, not {base + rel}")
        if rel <= prev[0] or pos <= prev[1]:
            problems.append(f"{ix.name}: entry ({rel}, {pos}) does not follow {prev}")
        prev = (rel, pos)
    seg_stamps = stamps[base:next_base]
    tentries = index_entries(tix, 12)
    prev_t, prev_o = None, None
    for ts, rel in tentries:
        off = base + rel
        if not base <= off < next_base:
            problems.append(f"{tix.name}: entry ({ts}, {rel}) offset {off} outside [{base}, {next_base})")
            continue
        if prev_t is not None and (ts <= prev_t or off < prev_o):
            problems.append(f"{tix.name}: entry ({ts}, {rel}) goes backwards after ({prev_t}, {prev_o - base})")
        want = max(stamps[base:off + 1])
        if ts != want:
            problems.append(f"{tix.name}: entry ({ts}, {rel}): the largest timestamp up to offset {off} is {want}")
        prev_t, prev_o = ts, off
    if final_entry and seg_stamps and max(seg_stamps) >= 0:
        last = tentries[-1][0] if tentries else None
        if last != max(seg_stamps):
            problems.append(f"{tix.name}: last entry timestamp {last}, the segment's largest timestamp is "
                            f"{max(seg_stamps)} ({len(tentries)} entries)")
    return problems


def read_checkpoint(path: Path) -> dict[tuple[str, int], int]:
    """Kafka's OffsetCheckpointFile text: '0', a count, then 'topic partition offset'."""
    text = path.read_text()
    lines = [x for x in text.split("\n")]
    while lines and lines[-1] == "":
        lines.pop()
    assert len(lines) >= 2 and lines[0] == "0", f"{path.name}: bad header {lines[:2]!r}"
    entries = {}
    for line in lines[2:]:
        parts = line.split(" ")
        assert len(parts) == 3, f"{path.name}: line {line!r} is not 'topic partition offset'"
        entries[(parts[0], int(parts[1]))] = int(parts[2])
    assert int(lines[1]) == len(lines) - 2 == len(entries), \
        f"{path.name}: count line {lines[1]!r} but {len(lines) - 2} entry lines ({len(entries)} distinct)"
    return entries



def tracebacks_since(b, pos: int) -> str | None:
    text = b.log_text(since=pos)
    i = text.find(TRACEBACK)
    return None if i < 0 else text[max(0, i - 300):i + 2500]


def recovery_lines(b, since: int, topic: str) -> list[str]:
    return [ln for ln in b.log_text(since=since).splitlines() if topic in ln and "recover" in ln.lower()]


# ---------------------------------------------------------------------------------------
# Producing through the raw protocol (exact batch boundaries and timestamps)
# ---------------------------------------------------------------------------------------


def produce_raw(port: int, topic: str, batches: list[tuple[int, list[Rec]]], partition: int = 0,
                conn: RawConn | None = None) -> list[int]:
    """Produce each (codec, records) as one v2 batch, one request each (acks=-1); returns
    the base offsets and asserts they are contiguous from the first."""
    own = conn is None
    conn = conn or RawConn(port)
    bases = []
    try:
        for i, (codec, recs) in enumerate(batches):
            body = produce_request_v3(topic, partition, build_v2_batch(recs, compression=codec), acks=-1)
            resp = parse_produce_response_v3(conn.request(0, 3, body, correlation_id=i + 1))
            err, base, _lat = resp[(topic, partition)]
            assert err == 0, f"produce batch {i} to {topic}: error {err}"
            bases.append(base)
    finally:
        if own:
            conn.close()
    return bases


# ---------------------------------------------------------------------------------------
# 1. SIGKILL, several times, under continuous acks=all load
# ---------------------------------------------------------------------------------------


class Load(threading.Thread):
    """Continuous acks=all production to several topics through several confluent-kafka
    producers (one per codec), recording every acknowledged record per topic as
    {offset: (key, value, timestamp, timestamp type)}. Keeps at most ``window`` records
    unacknowledged; producers reconnect by themselves after a broker restart."""

    def __init__(self, bootstrap: str, topics: list[str], codecs: list[str], base_ts: int, window: int = 3000):
        super().__init__(daemon=True, name="recovery-load")
        from confluent_kafka import Producer

        self.topics = topics
        self.base_ts = base_ts
        self.window = window
        self.acked: dict[str, dict[int, tuple]] = {t: {} for t in topics}
        self.n_acked = 0
        self.n_failed = 0
        self.n_produced = 0
        self.errors: list[str] = []
        self.conflicts: list[tuple] = []  # the same offset acknowledged twice
        self.stop_evt = threading.Event()
        self.producers = [
            Producer(ck_producer_config(bootstrap, **{
                "acks": "all", "linger.ms": 2, "compression.type": c, "batch.num.messages": 500,
                "message.timeout.ms": 30_000, "retry.backoff.ms": 50, "retry.backoff.max.ms": 500,
                "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 300,
                "client.id": f"chronolog-it-load-{c}", "log_level": 2}))
            for c in codecs
        ]

    def _cb(self, err, msg):
        if err is not None:
            self.n_failed += 1
            if len(self.errors) < 20:
                self.errors.append(str(err))
            return
        tstype, ts = msg.timestamp()
        rec = (msg.key(), msg.value(), ts, tstype)
        prev = self.acked[msg.topic()].get(msg.offset())
        if prev is not None and len(self.conflicts) < 20:
            # a restart handed out an acknowledged offset again: the first record was lost
            self.conflicts.append((msg.topic(), msg.offset(), prev[0], rec[0]))
        self.acked[msg.topic()][msg.offset()] = rec
        self.n_acked += 1

    def run(self):
        i = 0
        n = len(self.producers)
        while not self.stop_evt.is_set():
            if self.n_produced - self.n_acked - self.n_failed > self.window:
                for p in self.producers:
                    p.poll(0.005)
                continue
            p = self.producers[i % n]
            topic = self.topics[(i // n) % len(self.topics)]
            key = b"%s-%d" % (topic.encode()[-6:], i)
            value = b"load-%d-" % i + hashlib.sha256(b"%d" % i).hexdigest().encode() * 2
            try:
                p.produce(topic, key=key, value=value, partition=0, timestamp=self.base_ts + i,
                          on_delivery=self._cb)
            except BufferError:
                p.poll(0.01)
                continue
            self.n_produced += 1
            i += 1
            if i % 64 == 0:
                for q in self.producers:
                    q.poll(0)
        for p in self.producers:
            p.poll(0)

    def finish(self, timeout: float = 40.0) -> int:
        """Stop producing, wait for every outstanding delivery report; returns the
        number of messages still undelivered."""
        self.stop_evt.set()
        self.join(timeout=10)
        deadline = time.monotonic() + timeout
        left = 0
        for p in self.producers:
            left += p.flush(max(0.1, deadline - time.monotonic()))
        return left


def check_topic_after_kills(bootstrap: str, topic: str, acked: dict[int, tuple], ts_type: int, who: str):
    from confluent_kafka import TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    leo = end_offset(bootstrap, topic)
    top = max(acked) + 1
    assert leo >= top, f"{who}: log end offset {leo} < last acknowledged offset + 1 ({top})"
    got = consume("ck", bootstrap, topic, leo, timeout=60)
    offs = [g.offset for g in got]
    if offs != list(range(leo)):
        missing = sorted(set(range(leo)) - set(offs))[:10]
        raise AssertionError(f"{who}: consumed offsets are not 0..{leo - 1}: {len(offs)} records, "
                             f"missing {missing}, first {offs[:5]}")
    want_type = {CREATE_TIME: TIMESTAMP_CREATE_TIME, LOG_APPEND_TIME: TIMESTAMP_LOG_APPEND_TIME}[ts_type]
    bad = []
    for off, (k, v, ts, tstype) in sorted(acked.items()):
        g = got[off]
        if tstype != want_type:
            bad.append((off, f"delivery report timestamp type {tstype}"))
        elif (g.key, g.value, g.timestamp, g.timestamp_type) != (k, v, ts, ts_type):
            bad.append((off, (k, v[:24], ts), (g.key, (g.value or b"")[:24], g.timestamp, g.timestamp_type)))
    assert not bad, f"{who}: {len(bad)} of {len(acked)} acknowledged records differ after the restarts, first {bad[:3]}"
    return got


def test_repeated_sigkill_under_continuous_load(broker_factory):
    """Three SIGKILLs at random points while a CreateTime and a LogAppendTime topic take
    continuous acks=all load in four codecs (100 kB segments: kills land on rolls too);
    the producers reconnect after each restart. Afterwards every acknowledged record is
    at its offset with its key, value and timestamp, offsets are contiguous, and search by
    time and MAX_TIMESTAMP agree with a scan of the consumed records."""
    seed = int(time.time() * 1000) % 1_000_000
    rng = random.Random(seed)
    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 100_000,
                        "log.index.interval.bytes": 4096})
    ct = create_topic(b.bootstrap, unique_topic("kills-ct"))
    lat = create_topic(b.bootstrap, unique_topic("kills-lat"), {"message.timestamp.type": "LogAppendTime"})
    load = Load(b.bootstrap, [ct, lat], ["none", "lz4", "zstd", "gzip"], base_ts=now_ms() - 3_600_000)
    load.start()
    kills = []
    try:
        for k in range(3):
            target = load.n_acked + rng.randint(800, 2500)
            wait_for(lambda: load.n_acked >= target or not load.is_alive(), 40,
                     f"(seed {seed}) {target} acknowledged records before kill #{k + 1} "
                     f"(have {load.n_acked}, failures {load.n_failed}: {load.errors[:3]})")
            assert load.is_alive(), f"the producing thread died before kill #{k + 1}"
            in_flight = load.n_produced - load.n_acked - load.n_failed
            b.kill()
            assert in_flight > 0, f"kill #{k + 1}: nothing was in flight (the load stalled?)"
            kills.append((load.n_acked, load.n_produced, len(segment_bases(b.partition_dir(ct))),
                          len(segment_bases(b.partition_dir(lat)))))
            b.restart()
            resumed_from = load.n_acked
            wait_for(lambda: load.n_acked >= resumed_from + 200, 40,
                     f"(seed {seed}) the producers to get acknowledgements again after restart #{k + 1} "
                     f"(acked {load.n_acked}, failures {load.n_failed}: {load.errors[:3]})")
    finally:
        left = load.finish()
    assert left == 0, f"{left} records without a delivery report 40 s after the load stopped"
    assert not load.conflicts, \
        f"(seed {seed}) offsets acknowledged twice, to different records (topic, offset, first key, second key): " \
        f"{load.conflicts[:5]}"
    who = f"seed {seed}, kills at (acked, produced, ct segments, lat segments) {kills}"
    assert len(load.acked[ct]) > 1000 and len(load.acked[lat]) > 1000, \
        f"{who}: too little acknowledged: ct {len(load.acked[ct])}, lat {len(load.acked[lat])}"
    assert len(segment_bases(b.partition_dir(ct))) >= 3, "expected rolled segments"

    got_ct = check_topic_after_kills(b.bootstrap, ct, load.acked[ct], CREATE_TIME, f"{who}, CreateTime topic")
    got_lat = check_topic_after_kills(b.bootstrap, lat, load.acked[lat], LOG_APPEND_TIME,
                                      f"{who}, LogAppendTime topic")
    lat_stamps = [g.timestamp for g in got_lat]
    back = [(i, lat_stamps[i - 1], lat_stamps[i]) for i in range(1, len(lat_stamps))
            if lat_stamps[i] < lat_stamps[i - 1]]
    assert not back, f"{who}: LogAppendTime went backwards across the restarts at {back[:5]}"

    for topic, got in ((ct, got_ct), (lat, got_lat)):
        stamps = [g.timestamp for g in got]
        targets = sorted(set(query_points(stamps[::151] + [stamps[-1]])))
        compare_offsets_for_times(f"kp ({who}, {topic})", offsets_for_times("kp", b.bootstrap, topic, targets),
                                  stamps)
        m_off, m_ts = special_offsets("ck-admin", b.bootstrap, topic)["max_timestamp"]
        if topic == ct:  # unique timestamps: exactly one right answer
            assert (m_off, m_ts) == oracle_max_timestamp(stamps), f"{who}: MAX_TIMESTAMP of {topic}"
        else:  # a whole LogAppendTime batch shares its timestamp
            assert m_ts == max(stamps) and 0 <= m_off < len(stamps) and stamps[m_off] == m_ts, \
                f"{who}: MAX_TIMESTAMP of {topic} is ({m_off}, {m_ts}), the largest timestamp is {max(stamps)}"


# ---------------------------------------------------------------------------------------
# 2. Index files damaged between runs
# ---------------------------------------------------------------------------------------

DAMAGES = ["zero_index", "zero_timeindex", "trunc_index", "trunc_timeindex", "del_index",
           "del_timeindex", "del_both", "backwards_timeindex", "stray"]
TARGETS = ["rolled", "active"]
IDX_BATCHES = 30
IDX_PER_BATCH = 4
CODECS = [0, 1, 2, 3]  # none, gzip, snappy, lz4 (zstd needs Produce v7; these go as v3)


def idx_records(case_no: int, base_ts: int) -> list[tuple[int, list[Rec]]]:
    """IDX_BATCHES batches of IDX_PER_BATCH records: timestamps mostly rising with jitter
    inside each batch, every 7th batch entirely older (so not every batch raises the
    running max); codecs rotate."""
    rng = random.Random(case_no)
    out = []
    for j in range(IDX_BATCHES):
        recs = []
        for r in range(IDX_PER_BATCH):
            i = j * IDX_PER_BATCH + r
            ts = base_ts + j * 1000 + rng.randint(-400, 400)
            if j % 7 == 6:
                ts -= 5000
            value = b"v%d-%d-" % (case_no, i) + hashlib.sha256(b"%d/%d" % (case_no, i)).hexdigest().encode()
            recs.append(Rec(b"k%d-%d" % (case_no, i), value, ts, [("i", b"%d" % i)]))
        out.append((CODECS[j % len(CODECS)], recs))
    return out


def ck_list_offsets(admin, specs: dict) -> dict:
    """{TopicPartition: OffsetSpec} in one request -> {(topic, partition): (offset, ts)}."""
    futs = admin.list_offsets(specs, request_timeout=15)
    return {(tp.topic, tp.partition): (r.offset, r.timestamp)
            for tp, f in futs.items() for r in [f.result(timeout=20)]}


def snapshot_offsets(bootstrap: str, cases: dict) -> dict:
    """Per topic: {'times': {T: (offset, ts)}, 'max': (offset, ts), 'earliest', 'latest'},
    with one ListOffsets request per query index for all topics together."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import OffsetSpec

    admin = ck_admin(bootstrap)
    out = {c["topic"]: {"times": {}} for c in cases.values()}
    longest = max(len(c["points"]) for c in cases.values())
    for j in range(longest):
        specs = {TopicPartition(c["topic"], 0): OffsetSpec.for_timestamp(c["points"][j])
                 for c in cases.values() if j < len(c["points"])}
        res = ck_list_offsets(admin, specs)
        for c in cases.values():
            if j < len(c["points"]):
                out[c["topic"]]["times"][c["points"][j]] = res[(c["topic"], 0)]
    for key, spec in (("max", OffsetSpec.max_timestamp()), ("earliest", OffsetSpec.earliest()),
                      ("latest", OffsetSpec.latest())):
        res = ck_list_offsets(admin, {TopicPartition(c["topic"], 0): spec for c in cases.values()})
        for c in cases.values():
            out[c["topic"]][key] = res[(c["topic"], 0)]
    return out


def consume_all(bootstrap: str, cases: dict, timeout: float = 30.0) -> dict:
    """One confluent consumer over every case's partition: {topic: [Got] or error str}."""
    from confluent_kafka import TopicPartition, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    want = {c["topic"]: len(c["stamps"]) for c in cases.values()}
    got: dict = {t: [] for t in want}
    c = ck_consumer(bootstrap)
    try:
        c.assign([TopicPartition(t, 0, 0) for t in want])
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and any(isinstance(got[t], list) and len(got[t]) < n
                                                  for t, n in want.items()):
            for m in c.consume(num_messages=10_000, timeout=0.3):
                if m.error():
                    if ck_ignorable(m):
                        continue
                    if m.topic() in got:
                        got[m.topic()] = f"consumer error {m.error()}"
                    continue
                if not isinstance(got[m.topic()], list):
                    continue
                tstype, ts = m.timestamp()
                norm = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}.get(tstype, -1)
                got[m.topic()].append(Got(m.offset(), m.key(), m.value(), ts, norm, list(m.headers() or []), tstype))
    finally:
        c.close()
    return got


def apply_damage(pdir: Path, damage: str, target: int, leo: int, active: bool) -> list[str]:
    """Damage the segment with base offset ``target``; returns the names of stray files
    created (which must be gone after the restart)."""
    ix = pdir / seg_name(target, ".index")
    tix = pdir / seg_name(target, ".timeindex")
    n_ix, n_tix = len(index_entries(ix, 8)), len(index_entries(tix, 12))
    if damage == "zero_index":
        ix.write_bytes(b"\0" * ix.stat().st_size)
    elif damage == "zero_timeindex":
        tix.write_bytes(b"\0" * tix.stat().st_size)
    elif damage == "trunc_index":
        os.truncate(ix, n_ix * 8 - 3)
    elif damage == "trunc_timeindex":
        os.truncate(tix, n_tix * 12 - 5)
    elif damage == "del_index":
        ix.unlink()
    elif damage == "del_timeindex":
        tix.unlink()
    elif damage == "del_both":
        ix.unlink()
        tix.unlink()
    elif damage == "backwards_timeindex":
        # a middle entry 1 ms below its predecessor (Kafka's first-vs-last check alone
        # would not see it; SPEC 6 says timestamps going backwards)
        k = n_tix // 2
        data = bytearray(tix.read_bytes())
        (prev_ts,) = struct.unpack_from(">q", data, (k - 1) * 12)
        struct.pack_into(">q", data, k * 12, prev_ts - 1)
        tix.write_bytes(bytes(data))
    elif damage == "stray":
        # index files for a base offset without a .log: inside the target segment's
        # range (rolled) or past the log end (active); plausible contents (copies)
        stray_base = leo + 1000 if active else target + 1
        names = []
        for src, suffix, size in ((ix, ".index", 8), (tix, ".timeindex", 12)):
            dst = pdir / seg_name(stray_base, suffix)
            n = len(index_entries(src, size))
            dst.write_bytes(src.read_bytes()[:n * size])
            names.append(dst.name)
        return names
    else:
        raise ValueError(damage)
    return []


@pytest.fixture(scope="module", params=["stop", "kill"])
def tampered(request, tmp_path_factory):
    """One broker per stop mode, one topic per (target, damage): produce, record the
    ListOffsets answers, stop (SIGTERM, or SIGKILL once the recovery-point checkpoint
    covers the rolled segments), damage every topic's files, restart once, record the
    answers and the consumed records again."""
    mode = request.param
    overrides = {"auto.create.topics.enable": "false", "log.segment.bytes": 2500,
                 "log.index.interval.bytes": 200}
    if mode == "kill":
        overrides.update({"log.flush.scheduler.interval.ms": 100,
                          "log.flush.offset.checkpoint.interval.ms": 200})
    b = start_broker(tmp_path_factory.mktemp(f"recovery-index-{mode}"), overrides, name=f"idx-{mode}")
    try:
        base_ts = now_ms() - 7_200_000
        cases = {}
        names = [unique_topic(f"idx-{mode}-{t}-{d}") for t in TARGETS for d in DAMAGES]
        from kafka.admin import NewTopic

        admin = kp_admin(b.bootstrap)
        try:
            admin.create_topics([NewTopic(n, 1, 1) for n in names], timeout_ms=15_000)
            admin.wait_for_topics(names, timeout_ms=15_000)
        finally:
            admin.close()
        with RawConn(b.port) as conn:
            for no, (target, damage) in enumerate((t, d) for t in TARGETS for d in DAMAGES):
                topic = names[no]
                batches = idx_records(no, base_ts)
                bases = produce_raw(b.port, topic, batches, conn=conn)
                assert bases == [j * IDX_PER_BATCH for j in range(IDX_BATCHES)], f"{topic}: base offsets {bases}"
                recs = [r for _c, rs in batches for r in rs]
                stamps = [r.timestamp for r in recs]
                pts = sorted({p for j in range(IDX_BATCHES) for s in (batches[j][1][0].timestamp,
                              max(r.timestamp for r in batches[j][1])) for p in (s - 1, s, s + 1)}
                             | {stamps[0] - 10_000, max(stamps), max(stamps) + 1})
                cases[(target, damage)] = {"topic": topic, "recs": recs, "stamps": stamps, "points": pts}
        before = snapshot_offsets(b.bootstrap, cases)

        if mode == "stop":
            rc = b.stop()
            assert rc == 0, f"SIGTERM: exit code {rc}"
        else:
            def covered():
                path = b.log_dir / RECOVERY_CKPT
                if not path.exists():
                    return False
                try:
                    ck = read_checkpoint(path)
                except (AssertionError, ValueError):
                    return False  # being rewritten
                return all(ck.get((c["topic"], 0), -1) >= segment_bases(b.partition_dir(c["topic"]))[-1]
                           for c in cases.values())

            wait_for(covered, 15, f"{RECOVERY_CKPT} to cover every rolled segment (it is written every 200 ms)")
            b.kill()

        for (target, damage), c in cases.items():
            pdir = b.partition_dir(c["topic"])
            bases = segment_bases(pdir)
            leo = len(c["stamps"])
            assert len(bases) >= 3, f"{c['topic']}: expected >= 3 segments, got {bases}"
            seg = bases[1] if target == "rolled" else bases[-1]
            nxt = bases[2] if target == "rolled" else leo
            c.update(segment=seg, bases=bases)
            # preconditions: the undamaged files are right, and big enough to damage
            pre = index_problems(pdir, seg, nxt, c["stamps"], final_entry=not (mode == "kill" and target == "active"))
            assert not pre, f"{c['topic']} segment {seg} before the damage: {pre}"
            n_tix = len(index_entries(pdir / seg_name(seg, ".timeindex"), 12))
            n_ix = len(index_entries(pdir / seg_name(seg, ".index"), 8))
            assert n_tix >= 3 and n_ix >= 2, f"{c['topic']} segment {seg}: only {n_ix}/{n_tix} index entries"
            c["entries_before"] = (index_entries(pdir / seg_name(seg, ".index"), 8),
                                   index_entries(pdir / seg_name(seg, ".timeindex"), 12))
            c["strays"] = apply_damage(pdir, damage, seg, leo, active=target == "active")

        restart_pos = b.log_size()
        b.restart()
        b.wait_loaded()
        after = snapshot_offsets(b.bootstrap, cases)
        got = consume_all(b.bootstrap, cases)
        yield {"mode": mode, "broker": b, "cases": cases, "before": before, "after": after, "got": got,
               "restart_pos": restart_pos}
    finally:
        if b.running:
            b.stop()


@pytest.mark.parametrize("damage", DAMAGES)
@pytest.mark.parametrize("target", TARGETS)
def test_damaged_index_files_are_not_trusted(tampered, target, damage):
    t = tampered
    b, c = t["broker"], t["cases"][(target, damage)]
    topic, stamps = c["topic"], c["stamps"]
    who = f"{t['mode']} + {damage} on the {target} segment {c['segment']} of {topic}"
    tb = tracebacks_since(b, 0)
    assert tb is None, f"the broker logged a traceback:\n{tb}"

    got = t["got"][topic]
    assert isinstance(got, list), f"{who}: {got}"
    assert_records_equal(got, c["recs"], who=who)

    before, after = t["before"][topic], t["after"][topic]
    oracle = TimeOracle(stamps)
    wrong_before = [(p, a, oracle.lookup(p)) for p, a in before["times"].items()
                    if a != (oracle.lookup(p) or (-1, -1))]
    assert not wrong_before, f"{who}: answers were already wrong before the damage: {wrong_before[:5]}"
    assert before["max"] == oracle_max_timestamp(stamps), f"{who}: MAX_TIMESTAMP before: {before['max']}"
    changed = [(p, before["times"][p], after["times"][p]) for p in sorted(before["times"])
               if before["times"][p] != after["times"][p]]
    assert not changed, (f"{who}: {len(changed)} of {len(before['times'])} ListOffsets-by-time answers "
                         f"changed over the restart (T, before, after): {changed[:8]}")
    assert after["max"] == before["max"], f"{who}: MAX_TIMESTAMP {after['max']}, before {before['max']}"
    assert (after["earliest"][0], after["latest"][0]) == (0, len(stamps)), \
        f"{who}: earliest/latest {after['earliest']}/{after['latest']}"

    pdir = b.partition_dir(topic)
    bases = segment_bases(pdir)
    assert bases == c["bases"], f"{who}: segments {bases}, before the restart {c['bases']}"
    for s in c["strays"]:
        assert not (pdir / s).exists(), f"{who}: stray index file {s} (no .log for it) still there"
    problems = []
    for i, base in enumerate(bases):
        nxt = bases[i + 1] if i + 1 < len(bases) else len(stamps)
        problems += index_problems(pdir, base, nxt, stamps)
    assert not problems, f"{who}: index files after the restart: {problems[:8]}"
    # rebuilt with the same interval rule (SPEC 6), the damaged segment's indexes hold the
    # entries they held before the damage (an index trusted as empty or left short fails
    # here); after a SIGKILL the recovered active segment may gain its final time entry
    ix_before, tix_before = c["entries_before"]
    seg = c["segment"]
    ix_after = index_entries(pdir / seg_name(seg, ".index"), 8)
    tix_after = index_entries(pdir / seg_name(seg, ".timeindex"), 12)
    assert ix_after == ix_before, f"{who}: .index entries {ix_after}, before the damage {ix_before}"
    extra_ok = t["mode"] == "kill" and target == "active" and len(tix_after) == len(tix_before) + 1
    assert tix_after == tix_before or (extra_ok and tix_after[:-1] == tix_before), \
        f"{who}: .timeindex entries {tix_after}, before the damage {tix_before}"


# ---------------------------------------------------------------------------------------
# 3. Clean-shutdown marker and checkpoint files
# ---------------------------------------------------------------------------------------


def test_clean_shutdown_marker_and_checkpoints(broker_factory):
    """SIGTERM writes .kafka_cleanshutdown and checkpoints whose recovery point is each
    partition's log end (two topics, five partitions, one empty, one with a log start
    offset moved by DeleteRecords); startup removes the marker; a SIGKILL leaves none."""
    from confluent_kafka import TopicPartition

    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 20_000})
    t1 = create_topic(b.bootstrap, unique_topic("ckpt-a"), partitions=3)
    t2 = create_topic(b.bootstrap, unique_topic("ckpt-b"), {"message.timestamp.type": "LogAppendTime"}, partitions=2)
    counts = {(t1, 0): 150, (t1, 1): 0, (t1, 2): 400, (t2, 0): 90, (t2, 1): 260}
    base = now_ms() - 600_000
    recs = {}
    for (topic, p), n in counts.items():
        recs[(topic, p)] = make_records(n, base, prefix=f"p{p}", headers=False)
        if n:
            acks = produce("ck", b.bootstrap, topic, recs[(topic, p)], partition=p, compression="lz4")
            assert [a.offset for a in acks] == list(range(n)), f"{topic}-{p}: offsets"
    admin = ck_admin(b.bootstrap)
    (fut,) = admin.delete_records([TopicPartition(t2, 1, 100)], request_timeout=15).values()
    assert fut.result(timeout=20).low_watermark == 100
    start_offsets = {tp: (100 if tp == (t2, 1) else 0) for tp in counts}

    def check_data(who: str):
        for (topic, p), n in counts.items():
            assert end_offset(b.bootstrap, topic, p) == n, f"{who}: log end of {topic}-{p}"
            assert beginning_offset(b.bootstrap, topic, p) == start_offsets[(topic, p)], \
                f"{who}: log start of {topic}-{p}"
            s = start_offsets[(topic, p)]
            if n - s:
                got = consume("ck", b.bootstrap, topic, n - s, partition=p, start=s)
                assert_records_equal(got, recs[(topic, p)][s:], start=s, headers=False,
                                     ts_type=LOG_APPEND_TIME if topic == t2 else CREATE_TIME,
                                     who=f"{who}, {topic}-{p}")

    marker = b.log_dir / CLEAN_SHUTDOWN
    assert not marker.exists(), "clean-shutdown marker present while the broker runs"
    assert b.stop() == 0, "SIGTERM did not give a clean exit"
    assert marker.exists(), f"no {CLEAN_SHUTDOWN} in {b.log_dir} after a clean stop: {sorted(os.listdir(b.log_dir))}"
    rp = read_checkpoint(b.log_dir / RECOVERY_CKPT)
    ours = {tp: v for tp, v in rp.items() if tp[0] in (t1, t2)}
    assert ours == counts, f"{RECOVERY_CKPT}: {ours}, expected the log end offsets {counts}"
    ls = read_checkpoint(b.log_dir / LOG_START_CKPT)
    for tp, want in start_offsets.items():
        if want == 0:  # Kafka writes only partitions whose start moved past the first segment
            assert ls.get(tp, 0) == 0, f"{LOG_START_CKPT}: {tp} -> {ls.get(tp)}, expected 0 or absent"
        else:
            assert ls.get(tp) == want, f"{LOG_START_CKPT}: {tp} -> {ls.get(tp)}, expected {want}"

    pos = b.log_size()
    b.restart()
    assert not marker.exists(), f"{CLEAN_SHUTDOWN} still there after startup read it"
    lines = recovery_lines(b, pos, t1) + recovery_lines(b, pos, t2)
    assert not lines, f"after a clean shutdown nothing should be recovered, but the log says: {lines[:4]}"
    check_data("after clean stop + restart")

    b.kill()
    assert not marker.exists(), f"{CLEAN_SHUTDOWN} exists after a SIGKILL (it must only be written on a clean stop)"
    b.restart()
    assert not marker.exists(), f"{CLEAN_SHUTDOWN} exists after SIGKILL + restart"
    check_data("after SIGKILL + restart")


# ---------------------------------------------------------------------------------------
# 4. KIP-33 migration of a legacy segment without a time index
# ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("stop_mode", ["stop", "kill"])
def test_kip33_migration_of_a_legacy_segment(broker_factory, stop_mode):
    """Magic 0 data (Produce v0 via kafka-python api_version=(0, 9): no timestamps) in
    rolled segments; a clean stop (or a SIGKILL: then the segment is also recovered, no
    checkpoint covers it); one rolled segment loses its .timeindex and gets an old mtime
    M. After the restart that .timeindex holds exactly one entry (M, an offset inside the
    segment) (SPEC 6, KIP-33; the brief makes no exception for an unclean restart).

    Search by time (SPEC 5 = Kafka): the first segment whose largest timestamp >= T is
    searched, records without a timestamp (-1) never match. So for T <= M the migrated
    segment (largest timestamp M) or an earlier legacy one is the one searched, and Kafka
    answers -1 (none) even though later records have timestamps >= T. We accept -1 or the
    exact first record with a timestamp >= T, and reject any offset inside the legacy
    data (e.g. the migrated entry's own offset: that record has no timestamp). For T past
    every legacy segment's mtime the answer must be exact."""
    from kafka import KafkaProducer

    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 20_000})
    topic = create_topic(b.bootstrap, unique_topic("kip33"))
    n_legacy = 500
    p = KafkaProducer(bootstrap_servers=b.bootstrap, api_version=(0, 9), request_timeout_ms=15_000,
                      client_id="chronolog-it-kp09")
    try:
        futs = [p.send(topic, key=b"old-%d" % i, value=b"legacy-%d-" % i + b"x" * 100, partition=0)
                for i in range(n_legacy)]
        p.flush(timeout=30)
        mds = [f.get(timeout=30) for f in futs]
    finally:
        p.close(timeout=10)
    assert [m.offset for m in mds] == list(range(n_legacy)), "magic 0 produce: offsets"
    assert all(m.timestamp == -1 for m in mds), "Produce v0 acknowledgements should carry no timestamp"
    future = now_ms() + 600_000
    new = make_records(20, future, step=7, prefix="new")
    acks = produce("ck", b.bootstrap, topic, new)
    assert [a.offset for a in acks] == list(range(n_legacy, n_legacy + 20))
    if stop_mode == "stop":
        assert b.stop() == 0
    else:
        b.kill()
    stopped_ms = now_ms() + 1000

    pdir = b.partition_dir(topic)
    bases = segment_bases(pdir)
    assert len(bases) >= 4 and bases[2] <= n_legacy, f"expected >= 3 rolled legacy segments: {bases}"
    seg, nxt = bases[1], bases[2]
    tix = pdir / seg_name(seg, ".timeindex")
    assert tix.exists() and not index_entries(tix, 12), \
        f"a segment without timestamps should have an empty time index: {index_entries(tix, 12)}"
    tix.unlink()
    m_ms = (now_ms() - 7_200_000) // 1000 * 1000
    os.utime(pdir / seg_name(seg, ".log"), ns=(m_ms * 1_000_000, m_ms * 1_000_000))
    l0 = m_ms - 3_600_000
    os.utime(pdir / seg_name(bases[0], ".log"), ns=(l0 * 1_000_000, l0 * 1_000_000))

    b.restart()
    b.wait_loaded()
    assert tix.exists(), f"{tix.name} was not recreated"
    data = tix.read_bytes()
    entries = index_entries(tix, 12)
    assert len(data) == 12 and len(entries) == 1, \
        f"{tix.name}: {len(data)} bytes, entries {entries[:5]}; expected exactly one 12-byte entry"
    ts, rel = entries[0]
    assert ts == m_ms, f"{tix.name}: entry timestamp {ts}, the .log mtime is {m_ms}"
    assert seg <= seg + rel < nxt, f"{tix.name}: entry offset {seg + rel} outside the segment [{seg}, {nxt})"

    got = consume("kp", b.bootstrap, topic, n_legacy + 20)
    assert [g.offset for g in got] == list(range(n_legacy + 20))
    assert [(g.key, g.value, g.timestamp) for g in got[:n_legacy]] == \
        [(b"old-%d" % i, b"legacy-%d-" % i + b"x" * 100, -1) for i in range(n_legacy)], "legacy records changed"
    assert_records_equal(got[n_legacy:], new, start=n_legacy, who="timestamped records after the legacy ones")

    stamps = [-1] * n_legacy + [r.timestamp for r in new]
    oracle = TimeOracle(stamps)
    early = [l0 - 1, l0, m_ms - 1_800_000, m_ms - 1, m_ms]
    answers = offsets_for_times("kp", b.bootstrap, topic, early)
    for t in early:
        a = answers[t]
        assert a is None or a == oracle.lookup(t), (
            f"offsets_for_times({t}) (before the migrated segment's mtime {m_ms}) = {a}: expected none "
            f"(Kafka: the migrated segment is searched and has no timestamps) or {oracle.lookup(t)}; "
            f"an offset below {n_legacy} would point at a record without a timestamp")
    # past every legacy segment's mtime (all were written before the stop): exact answers
    late = sorted(t for t in set(query_points([r.timestamp for r in new])) | {future - 60_000} if t > stopped_ms)
    compare_offsets_for_times("kp", offsets_for_times("kp", b.bootstrap, topic, late), stamps)
    m = special_offsets("ck-admin", b.bootstrap, topic)["max_timestamp"]
    assert m == oracle_max_timestamp(stamps), f"MAX_TIMESTAMP {m}"


# ---------------------------------------------------------------------------------------
# 5. Recovery is logged
# ---------------------------------------------------------------------------------------


def test_recovery_after_kill_is_logged(broker_factory):
    """A SIGKILL with a few MB unflushed in several segments: the restart logs the
    recovery of the partition (we only look for the topic name and "recover"; the
    wording is the broker's). The recovered data is all there. A later clean stop and
    restart recovers nothing (no such line)."""
    b = broker_factory({"auto.create.topics.enable": "false", "log.segment.bytes": 1_000_000,
                        "log.flush.offset.checkpoint.interval.ms": 3_600_000})
    topic = create_topic(b.bootstrap, unique_topic("recover-log"))
    n = 4000
    recs = [Rec(b"k%d" % i, hashlib.sha256(b"%d" % i).digest() * 32, now_ms() - 60_000 + i) for i in range(n)]
    acks = produce("ck", b.bootstrap, topic, recs, **{"linger.ms": 20, "acks": "all"})
    assert [a.offset for a in acks] == list(range(n))
    bases = segment_bases(b.partition_dir(topic))
    assert len(bases) >= 4, f"expected several 1 MB segments for {n} x 1 kB: {bases}"
    b.kill()
    pos = b.log_size()
    b.restart()
    lines = recovery_lines(b, pos, topic)
    assert lines, (f"no log line names {topic} and mentions recovery after a SIGKILL with "
                   f"{len(bases)} unflushed segments; log since restart:\n{b.log_tail(30, since=pos)}")
    assert end_offset(b.bootstrap, topic) == n
    got = consume("ck", b.bootstrap, topic, n)
    assert [(g.offset, g.key, g.value) for g in got] == [(i, r.key, r.value) for i, r in enumerate(recs)]

    assert b.stop() == 0
    pos = b.log_size()
    b.restart()
    lines = recovery_lines(b, pos, topic)
    assert not lines, f"a clean restart should trust the log, but the broker says: {lines[:4]}"
    assert end_offset(b.bootstrap, topic) == n
