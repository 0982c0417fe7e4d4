"""`chronolog dump-log` (storage.dump_log + the CLI), checked against segments written by
storage.log.Log and against hand-made files (legacy, control, non-consecutive)."""

from __future__ import annotations

import io
import os
import re
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from protocol import records as R
from storage import dump_log as D
from storage.clock import ManualClock
from storage.log import Log
from tests.unit.test_log_helpers import topic_config

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_700_000_000_000
NAME = "00000000000000000000"
NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4

_FIELD = re.compile(r"(\w+): (\S+)")


def fields(line: str) -> dict[str, str]:
    return dict(_FIELD.findall(line))


def run(paths, **opts):
    out, err = io.StringIO(), io.StringIO()
    rc = D.dump_files([str(p) for p in paths], out, err, D.DumpOptions(**opts))
    return rc, out.getvalue(), err.getvalue()


def batch_lines(text):
    return [fields(l) for l in text.splitlines() if l.startswith(("baseOffset: ", "offset: ")) and " size: " in l]


def record_lines(text):
    return [l for l in text.splitlines() if l.startswith("| ")]


def new_log(path, ts_type="CreateTime", clock=None, **cfg):
    cfg.setdefault("index_interval_bytes", 1)  # an index entry before every append but the first
    cfg.setdefault("segment_index_bytes", 1200)
    return Log(str(path), topic_config(message_timestamp_type=ts_type, **cfg), clock or ManualClock(T0))


def file_batches(path):
    """[(position, header)] of the whole batches of a .log, read independently of dump_log."""
    data = Path(path).read_bytes()
    return list(R.iter_batches(data))


# codec, list of (timestamp, key, value, headers) per batch
WRITTEN = [
    (NONE, [(T0 + 5, b"k0", b"v-0", [("h1", b"a")]), (T0 + 9, None, b"v-1", []), (T0 + 7, b"k2", None, [])]),
    (GZIP, [(T0 + 20, b"k3", b"gz-3", [("a", b"1"), ("b", None)]), (T0 + 22, b"k4", b"gz-4", [])]),
    (LZ4, [(T0 + 31, b"k5", b"lz-5", []), (T0 + 30, b"k6", b"lz-6", [])]),
    (ZSTD, [(T0 + 45, b"k7", b"zs-7", []), (T0 + 40, b"k8", b"zs-8", []), (T0 + 44, b"k9", b"zs-9", [])]),
    (SNAPPY, [(T0 + 50, b"k10", b"sn-10", [])]),
]


@pytest.fixture
def segment(tmp_path):
    """A cleanly closed one-segment log with a batch per codec; returns (dir, expected)."""
    d = tmp_path / "t-0"
    log = new_log(d)
    expected = []
    for codec, recs in WRITTEN:
        info = log.append(R.build_batch([(ts, k, v, h) for ts, k, v, h in recs], compression=codec))
        expected.append((info.base_offset, info.last_offset, codec, recs))
    log.close()
    return d, expected


def test_log_batches_match_what_was_written(segment):
    d, expected = segment
    rc, out, err = run([d / f"{NAME}.log"])
    assert rc == 0 and err == ""
    lines = out.splitlines()
    assert lines[0] == f"Dumping {d / NAME}.log"
    assert lines[1] == "Log starting offset: 0"
    got = batch_lines(out)
    on_disk = file_batches(d / f"{NAME}.log")
    assert len(got) == len(expected) == len(on_disk)
    codec_names = ["none", "gzip", "snappy", "lz4", "zstd"]
    for g, (base, last, codec, recs), (pos, h) in zip(got, expected, on_disk):
        assert int(g["baseOffset"]) == base and int(g["lastOffset"]) == last
        assert int(g["count"]) == len(recs)
        assert int(g["position"]) == pos
        assert int(g["size"]) == h.size
        assert int(g["CreateTime"]) == max(ts for ts, *_ in recs)
        assert g["compresscodec"] == codec_names[codec]
        assert int(g["crc"]) == h.crc
        assert g["isvalid"] == "true" and g["magic"] == "2"
        assert g["isTransactional"] == "false" and g["isControl"] == "false"
        assert g["producerId"] == "-1" and g["baseSequence"] == "-1" and g["lastSequence"] == "-1"
        assert g["deleteHorizonMs"] == "OptionalLong.empty"
    # shallow by default: no record lines, no trailing-bytes report
    assert record_lines(out) == []
    assert "invalid bytes" not in out


def test_print_data_log_decompresses_every_record(segment):
    d, expected = segment
    rc, out, err = run([d / f"{NAME}.log"], print_data_log=True)
    assert rc == 0 and err == ""
    recs = record_lines(out)
    want = [(base + i, ts, k, v, h) for base, _l, _c, rs in expected for i, (ts, k, v, h) in enumerate(rs)]
    assert len(recs) == len(want) == 11
    for line, (offset, ts, key, value, headers) in zip(recs, want):
        f = fields(line)
        assert int(f["offset"]) == offset
        assert int(f["CreateTime"]) == ts
        assert int(f["keySize"]) == (-1 if key is None else len(key))
        assert int(f["valueSize"]) == (-1 if value is None else len(value))
        assert f["sequence"] == "-1"
        assert f"headerKeys: [{','.join(k for k, _ in headers)}]" in line
        if key is None:
            assert " key:" not in line
        else:
            assert f["key"] == key.decode()
        if value is None:
            assert "payload:" not in line
        else:
            assert line.endswith(f" payload: {value.decode()}")


def test_deep_iteration_without_data(segment):
    d, _ = segment
    rc, out, _err = run([d / f"{NAME}.log"], deep_iteration=True)
    assert rc == 0
    recs = record_lines(out)
    assert [int(fields(l)["offset"]) for l in recs] == list(range(11))
    assert not any("payload:" in l or " key:" in l for l in recs)


def test_log_append_time_batches(tmp_path):
    clock = ManualClock(T0 + 777)
    log = new_log(tmp_path / "lat-0", ts_type="LogAppendTime", clock=clock)
    log.append(R.build_batch([(1000, b"a", b"x"), (2000, b"b", b"y")], compression=GZIP))
    clock.advance(1000)
    log.append(R.build_batch([(3000, None, b"z")], producer_id=42, producer_epoch=3, base_sequence=5))
    log.close()
    rc, out, _ = run([tmp_path / "lat-0" / f"{NAME}.log"], deep_iteration=True)
    assert rc == 0
    b = batch_lines(out)
    assert [int(x["LogAppendTime"]) for x in b] == [T0 + 777, T0 + 1777]
    assert "CreateTime" not in out
    assert (b[1]["producerId"], b[1]["producerEpoch"], b[1]["baseSequence"], b[1]["lastSequence"]) == ("42", "3", "5", "5")
    recs = [fields(l) for l in record_lines(out)]
    assert [(int(r["offset"]), int(r["LogAppendTime"])) for r in recs] == [(0, T0 + 777), (1, T0 + 777), (2, T0 + 1777)]
    assert [r["sequence"] for r in recs] == ["-1", "-1", "5"]


def test_sequence_numbers_wrap_like_kafka(tmp_path):
    d = tmp_path / "seq-0"
    d.mkdir()
    (d / f"{NAME}.log").write_bytes(R.build_batch([(1, None, b"a"), (2, None, b"b"), (3, None, b"c")],
                                                  producer_id=1, producer_epoch=0, base_sequence=2**31 - 2))
    rc, out, _ = run([d / f"{NAME}.log"], deep_iteration=True)
    assert rc == 0
    assert batch_lines(out)[0]["lastSequence"] == "0"
    assert [fields(l)["sequence"] for l in record_lines(out)] == [str(2**31 - 2), str(2**31 - 1), "0"]


def test_torn_tail_is_reported_not_fatal(segment, tmp_path):
    d, expected = segment
    torn = tmp_path / "torn-0"
    torn.mkdir()
    data = (d / f"{NAME}.log").read_bytes()
    last_pos, last_h = file_batches(d / f"{NAME}.log")[-1]
    cut = 7
    (torn / f"{NAME}.log").write_bytes(data[:len(data) - cut])
    rc, out, err = run([torn / f"{NAME}.log"], print_data_log=True)
    assert rc == 0
    assert [int(b["baseOffset"]) for b in batch_lines(out)] == [e[0] for e in expected[:-1]]
    assert out.splitlines()[-1] == f"Found {last_h.size - cut} invalid bytes at the end of {NAME}.log"
    assert err == ""  # a torn tail is not a corruption


def test_garbage_tail_reported_with_reason(segment, tmp_path):
    d, expected = segment
    g = tmp_path / "garbage-0"
    g.mkdir()
    data = (d / f"{NAME}.log").read_bytes()
    (g / f"{NAME}.log").write_bytes(data + bytes(40))  # zero-filled, e.g. after a crash
    rc, out, err = run([g / f"{NAME}.log"])
    assert rc == 0
    assert len(batch_lines(out)) == len(expected)
    assert f"Found 40 invalid bytes at the end of {NAME}.log" in out
    assert f"at position {len(data)}" in err and "record size 0" in err


def test_max_bytes_limits_reading(segment):
    d, expected = segment
    on_disk = file_batches(d / f"{NAME}.log")
    limit = on_disk[2][0] + 5  # two whole batches plus a few bytes of the third
    rc, out, _ = run([d / f"{NAME}.log"], max_bytes=limit)
    assert rc == 0
    assert [int(b["baseOffset"]) for b in batch_lines(out)] == [expected[0][0], expected[1][0]]
    assert "invalid bytes" not in out  # the limit cut the read, the file is fine


def test_corrupt_crc_is_flagged(segment, tmp_path):
    d, expected = segment
    c = tmp_path / "crc-0"
    shutil.copytree(d, c)
    pos, h = file_batches(c / f"{NAME}.log")[0]  # uncompressed: records stay decodable
    data = bytearray((c / f"{NAME}.log").read_bytes())
    i = data.index(b"v-1", pos)
    data[i:i + 3] = b"X-1"
    (c / f"{NAME}.log").write_bytes(bytes(data))
    rc, out, err = run([c / f"{NAME}.log"], print_data_log=True)
    assert rc == 0
    valid = [b["isvalid"] for b in batch_lines(out)]
    assert valid == ["false"] + ["true"] * (len(expected) - 1)
    assert int(batch_lines(out)[0]["crc"]) == h.crc  # the stored CRC is printed
    assert any(l.endswith("payload: X-1") for l in record_lines(out))


def test_undecodable_compressed_batch_does_not_stop_the_dump(segment, tmp_path):
    d, expected = segment
    c = tmp_path / "bad-0"
    shutil.copytree(d, c)
    pos, h = file_batches(c / f"{NAME}.log")[1]  # gzip
    data = bytearray((c / f"{NAME}.log").read_bytes())
    for j in range(pos + R.HEADER_SIZE, pos + h.size):
        data[j] ^= 0x5A
    (c / f"{NAME}.log").write_bytes(bytes(data))
    rc, out, err = run([c / f"{NAME}.log"], deep_iteration=True)
    assert rc == 0
    assert len(batch_lines(out)) == len(expected)
    assert batch_lines(out)[1]["isvalid"] == "false"
    assert f"batch at position {pos}" in err
    offsets = [int(fields(l)["offset"]) for l in record_lines(out)]
    assert expected[1][0] not in offsets and expected[2][0] in offsets


def test_index_and_timeindex_dump_and_verify_clean(segment):
    d, expected = segment
    rc, out, err = run([d / f"{NAME}.index", d / f"{NAME}.timeindex"])
    assert rc == 0 and err == ""
    on_disk = file_batches(d / f"{NAME}.log")
    idx = [fields(l) for l in out.splitlines() if l.startswith("offset: ")]
    # index.interval.bytes=1: an entry for every append but the first, keyed by its last offset
    assert [(int(e["offset"]), int(e["position"])) for e in idx] == [(h.last_offset, p) for p, h in on_disk[1:]]
    tix = [fields(l) for l in out.splitlines() if l.startswith("timestamp: ")]
    assert tix, out
    # each entry: the running max timestamp and the last offset of the batch carrying it
    want = []
    max_so_far = max(ts for ts, *_ in expected[0][3])
    for base, last, _c, recs in expected[1:]:
        m = max(ts for ts, *_ in recs)
        if m > max_so_far:
            max_so_far = m
            want.append((m, last))
    assert [(int(e["timestamp"]), int(e["offset"])) for e in tix] == want
    # verify-only: nothing printed but the Dumping lines
    rc, out, err = run([d / f"{NAME}.index", d / f"{NAME}.timeindex"], verify_index_only=True)
    assert rc == 0 and err == ""
    assert out.splitlines() == [f"Dumping {d / NAME}.index", f"Dumping {d / NAME}.timeindex"]


def test_corrupted_index_entry_is_a_mismatch(segment, tmp_path):
    d, _ = segment
    c = tmp_path / "idx-0"
    shutil.copytree(d, c)
    path = c / f"{NAME}.index"
    raw = bytearray(path.read_bytes())
    rel, pos = struct.unpack_from(">ii", raw, 8)  # entry 1
    struct.pack_into(">ii", raw, 8, rel + 1, pos)
    path.write_bytes(bytes(raw))
    true_last = next(h.last_offset for p, h in file_batches(c / f"{NAME}.log") if p == pos)
    assert true_last == rel  # base offset 0
    rc, out, err = run([path], verify_index_only=True)
    assert rc == 0
    assert out.splitlines() == [f"Dumping {path}"]
    assert err.splitlines() == [f"Mismatches in :{os.path.abspath(path)}",
                                f"  Index offset: {rel + 1}, log offset: {true_last}"]
    # the plain dump still lists the entry as stored
    rc, out, err = run([path])
    assert f"offset: {rel + 1} position: {pos}" in out.splitlines()
    assert f"  Index offset: {rel + 1}, log offset: {true_last}" in err.splitlines()


def test_index_entry_beyond_the_log(segment, tmp_path):
    d, _ = segment
    c = tmp_path / "far-0"
    shutil.copytree(d, c)
    path = c / f"{NAME}.index"
    raw = bytearray(path.read_bytes())
    rel, _pos = struct.unpack_from(">ii", raw, 0)
    struct.pack_into(">ii", raw, 0, rel, 10**6)
    path.write_bytes(bytes(raw))
    rc, _out, err = run([path], verify_index_only=True)
    assert rc == 0
    assert f"  Index offset: {rel}, log offset: -1" in err.splitlines()


def test_out_of_order_timeindex_entry_is_flagged(tmp_path):
    d = tmp_path / "ts-0"
    log = new_log(d)
    for i in range(4):  # strictly increasing max timestamps: one time-index entry per append but the first
        log.append(R.build_batch([(T0 + 100 * i, b"k", b"v%d" % i), (T0 + 100 * i + 1, b"k", b"w")]))
    log.close()
    path = d / f"{NAME}.timeindex"
    raw = bytearray(path.read_bytes())
    entries = [struct.unpack_from(">qi", raw, 12 * i) for i in range(len(raw) // 12)]
    assert [e[1] for e in entries] == [3, 5, 7]
    # entry 1 gets a timestamp below entry 0's
    bad_ts = entries[0][0] - 50
    struct.pack_into(">qi", raw, 12, bad_ts, entries[1][1])
    path.write_bytes(bytes(raw))
    rc, out, err = run([path])
    assert rc == 0
    assert [(int(f["timestamp"]), int(f["offset"])) for f in map(fields, out.splitlines()[1:])] == \
        [entries[0], (bad_ts, entries[1][1]), entries[2]]
    e = err.splitlines()
    assert e[e.index(f"Found timestamp mismatch in :{os.path.abspath(path)}") + 1] == \
        f"  Index timestamp: {bad_ts}, log timestamp: {entries[1][0]}"
    assert e[e.index(f"Found out of order timestamp in :{os.path.abspath(path)}") + 1] == \
        f"  Index timestamp: {bad_ts}, Previously indexed timestamp: {entries[0][0]}"
    assert "not found in the log" not in err


def test_timeindex_offset_not_at_a_batch_end(tmp_path):
    d = tmp_path / "nf-0"
    log = new_log(d)
    for i in range(3):
        log.append(R.build_batch([(T0 + 100 * i, b"k", b"v"), (T0 + 100 * i + 1, b"k", b"w")]))
    log.close()
    path = d / f"{NAME}.timeindex"
    raw = bytearray(path.read_bytes())
    ts, rel = struct.unpack_from(">qi", raw, 0)
    assert rel == 3
    struct.pack_into(">qi", raw, 0, ts, rel - 1)  # offset 2: inside the batch 2..3
    path.write_bytes(bytes(raw))
    rc, _out, err = run([path], verify_index_only=True)
    assert rc == 0
    e = err.splitlines()
    assert "The following indexed offsets are not found in the log." in e
    assert f"Indexed offset: {rel - 1}, found log offset: {rel}" in e


def test_crashed_segment_stops_at_the_zero_tail_and_fails_sanity(tmp_path):
    d = tmp_path / "crash-0"
    log = new_log(d)
    for i in range(3):
        log.append(R.build_batch([(T0 + i, None, b"x" * 20)]))
    log.close_handlers()  # simulated kill: indexes stay preallocated and zero-filled
    assert os.path.getsize(d / f"{NAME}.index") == 1200
    rc, out, err = run([d / f"{NAME}.index", d / f"{NAME}.timeindex"])
    assert rc == 0 and err == ""
    on_disk = file_batches(d / f"{NAME}.log")
    assert [l for l in out.splitlines() if l.startswith("offset:")] == \
        [f"offset: {h.last_offset} position: {p}" for p, h in on_disk[1:]]
    assert [l for l in out.splitlines() if l.startswith("timestamp:")] == \
        [f"timestamp: {h.max_timestamp} offset: {h.last_offset}" for _p, h in on_disk[1:]]
    rc, out, err = run([d / f"{NAME}.index", d / f"{NAME}.timeindex"], index_sanity_check=True)
    assert rc == 1
    assert "passed sanity check" not in out
    assert err.count("failed sanity check") == 2
    assert f"{d / NAME}.index failed sanity check: " in err and "zero-filled" in err


def test_sanity_check_passes_on_clean_segment(segment):
    d, _ = segment
    rc, out, err = run([d / f"{NAME}.index", d / f"{NAME}.timeindex"], index_sanity_check=True)
    assert (rc, err) == (0, "")
    assert out.splitlines() == [f"Dumping {d / NAME}.index", f"{d / NAME}.index passed sanity check.",
                                f"Dumping {d / NAME}.timeindex", f"{d / NAME}.timeindex passed sanity check."]


def test_sanity_check_catches_entries_going_backwards(segment, tmp_path):
    d, _ = segment
    c = tmp_path / "back-0"
    shutil.copytree(d, c)
    path = c / f"{NAME}.index"
    raw = bytearray(path.read_bytes())
    n = len(raw) // 8
    assert n >= 3
    struct.pack_into(">ii", raw, 8, 10**5, 1)  # slot 1 is larger than slot 2
    path.write_bytes(bytes(raw))
    rc, out, err = run([path], index_sanity_check=True)
    assert rc == 1 and "does not follow" in err and "passed" not in out


def test_empty_index(tmp_path):
    d = tmp_path / "e-0"
    log = new_log(d)
    log.close()  # trimmed to 0 entries
    rc, out, _ = run([d / f"{NAME}.index", d / f"{NAME}.log"])
    assert rc == 0
    assert f"{d / NAME}.index is empty." in out.splitlines()
    assert "Log starting offset: 0" in out and batch_lines(out) == []


def test_multi_segment_base_offsets(tmp_path):
    d = tmp_path / "multi-0"
    log = new_log(d, segment_bytes=300)
    for i in range(8):
        log.append(R.build_batch([(T0 + i, None, b"y" * 60)]))
    log.close()
    logs = sorted(p for p in d.iterdir() if p.suffix == ".log")
    assert len(logs) >= 2
    rc, out, err = run(logs + sorted(p for p in d.iterdir() if p.suffix in (".index", ".timeindex")),
                       deep_iteration=True)
    assert rc == 0 and err == ""
    starts = [int(l.split(": ")[1]) for l in out.splitlines() if l.startswith("Log starting offset:")]
    assert starts == [int(p.stem) for p in logs]
    assert [int(b["baseOffset"]) for b in batch_lines(out)] == list(range(8))


def test_legacy_message_sets(tmp_path):
    d = tmp_path / "legacy-0"
    d.mkdir()
    v0 = R.build_legacy([(0, -1, b"a", b"x0"), (1, -1, None, b"x1")], magic=0)
    v1 = R.build_legacy([(2, T0 + 2, b"c", b"y2"), (3, T0 + 3, b"d", b"y3"), (4, T0 + 1, None, b"y4")],
                        magic=1, compression=GZIP)
    v1_lat = R.build_legacy([(5, T0, b"e", b"z5")], magic=1, timestamp_type=1, log_append_time=T0 + 99)
    (d / f"{NAME}.log").write_bytes(v0 + v1 + v1_lat)
    rc, out, err = run([d / f"{NAME}.log"], print_data_log=True)
    assert rc == 0 and err == ""
    b = batch_lines(out)
    assert [int(x["offset"]) for x in b] == [0, 1, 4, 5]
    assert [x["magic"] for x in b] == ["0", "0", "1", "1"]
    assert [x["compresscodec"] for x in b] == ["none", "none", "gzip", "none"]
    assert b[0]["NoTimestampType"] == "-1"
    assert int(b[2]["CreateTime"]) == T0 + 3 and int(b[3]["LogAppendTime"]) == T0 + 99
    assert all(x["isvalid"] == "true" for x in b)
    v0_second = [e.position for e in R.iter_legacy_entries(v0)][1]
    assert v0_second == 12 + 14 + 1 + 2  # the first v0 message: overhead + key "a" + value "x0"
    assert [int(x["position"]) for x in b] == [0, v0_second, len(v0), len(v0) + len(v1)]
    assert [int(x["size"]) for x in b] == [v0_second, len(v0) - v0_second, len(v1), len(v1_lat)]
    recs = [fields(l) for l in record_lines(out)]
    assert [int(r["offset"]) for r in recs] == [0, 1, 2, 3, 4, 5]
    assert [r.get("payload") for r in recs] == ["x0", "x1", "y2", "y3", "y4", "z5"]
    assert [int(r["CreateTime"]) for r in recs[2:5]] == [T0 + 2, T0 + 3, T0 + 1]
    assert int(recs[5]["LogAppendTime"]) == T0 + 99
    assert all(r["isValid"] == "true" for r in recs)


def test_control_batch_and_non_consecutive_offsets(tmp_path):
    d = tmp_path / "ctl-0"
    d.mkdir()
    data = R.build_batch([(T0, b"k", b"a"), (T0 + 1, b"k", b"b")], base_offset=0,
                         producer_id=9, producer_epoch=1, base_sequence=0, is_transactional=True)
    marker = R.build_batch([(T0 + 2, struct.pack(">hh", 0, 1), struct.pack(">hi", 0, 17))], base_offset=10,
                           producer_id=9, producer_epoch=1, is_transactional=True, is_control=True)
    (d / f"{NAME}.log").write_bytes(data + marker)
    rc, out, err = run([d / f"{NAME}.log"], print_data_log=True)
    assert rc == 0
    b = batch_lines(out)
    assert [(x["isTransactional"], x["isControl"]) for x in b] == [("true", "false"), ("true", "true")]
    recs = record_lines(out)
    assert recs[-1].endswith("endTxnMarker: COMMIT coordinatorEpoch: 17")
    assert "payload" not in recs[-1]
    assert err.splitlines() == [f"Non-consecutive offsets in {os.path.abspath(d / NAME)}.log",
                                "  1 is followed by 10"]


def test_unknown_and_missing_files(segment, tmp_path):
    d, _ = segment
    other = tmp_path / "notes.txt"
    other.write_text("hello")
    rc, out, err = run([other, d / f"{NAME}.log"])
    assert rc == 0
    assert out.splitlines()[0] == f"Dumping {other}"
    assert err.splitlines() == [f"Ignoring unknown file {other}"]
    assert len(batch_lines(out)) == len(WRITTEN)
    missing = tmp_path / f"{NAME}.log"
    rc, out, err = run([missing, d / f"{NAME}.index"])
    assert rc == 1
    assert f"{missing}: no such file" in err
    assert f"Dumping {d / NAME}.index" in out  # the other files are still dumped


def test_index_without_its_log(segment, tmp_path):
    d, _ = segment
    c = tmp_path / "nolog-0"
    c.mkdir()
    shutil.copy(d / f"{NAME}.index", c)
    rc, out, err = run([c / f"{NAME}.index"])
    assert rc == 1
    assert "does not exist" in err and f"{c / NAME}.log" in err
    assert sum(l.startswith("offset: ") for l in out.splitlines()) == os.path.getsize(c / f"{NAME}.index") // 8


def _snapshot(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(d.iterdir())}


def test_dump_never_modifies_files(tmp_path):
    d = tmp_path / "ro-0"
    log = new_log(d)
    for codec, recs in WRITTEN:
        log.append(R.build_batch([(ts, k, v, h) for ts, k, v, h in recs], compression=codec))
    log.close_handlers()  # preallocated indexes: the case where an mmap class would trim
    with open(d / f"{NAME}.log", "ab") as f:
        f.write(b"\x00\x01torn")
    before = _snapshot(d)
    files = [d / f"{NAME}.log", d / f"{NAME}.index", d / f"{NAME}.timeindex"]
    for opts in ({}, {"print_data_log": True}, {"verify_index_only": True}, {"index_sanity_check": True},
                 {"max_bytes": 100}):
        run(files, **opts)
    assert _snapshot(d) == before
    assert sorted(os.listdir(d)) == sorted(before)
    # an index whose log is gone must not make a .log appear
    c = tmp_path / "lonely-0"
    c.mkdir()
    shutil.copy(d / f"{NAME}.timeindex", c)
    run([c / f"{NAME}.timeindex"])
    run([c / f"{NAME}.timeindex"], index_sanity_check=True)
    assert os.listdir(c) == [f"{NAME}.timeindex"]


# ---------------------------------------------------------------------- the CLI


def _cli(*args, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "broker", "dump-log", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_dumps_log_and_indexes(segment):
    d, expected = segment
    files = ",".join(str(d / f"{NAME}{s}") for s in (".log", ".index", ".timeindex"))
    p = _cli("--files", files, "--print-data-log")
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    assert [int(b["baseOffset"]) for b in batch_lines(p.stdout)] == [e[0] for e in expected]
    assert len(record_lines(p.stdout)) == sum(len(e[3]) for e in expected)
    assert p.stdout.count("Dumping ") == 3
    assert any(l.startswith("timestamp: ") for l in p.stdout.splitlines())


def test_cli_relative_paths_and_mismatch_exit_code(segment, tmp_path):
    d, _ = segment
    c = tmp_path / "cli-0"
    shutil.copytree(d, c)
    raw = bytearray((c / f"{NAME}.index").read_bytes())
    rel, pos = struct.unpack_from(">ii", raw, 0)
    struct.pack_into(">ii", raw, 0, rel + 100, pos)
    (c / f"{NAME}.index").write_bytes(bytes(raw))
    p = _cli("--files", f"{NAME}.index", "--verify-index-only", cwd=c)
    assert p.returncode == 0  # like Kafka: mismatches are reported, not an error
    assert p.stdout.splitlines() == [f"Dumping {NAME}.index"]
    assert p.stderr.splitlines()[:2] == [f"Mismatches in :{c / NAME}.index",
                                         f"  Index offset: {rel + 100}, log offset: {rel}"]


def test_cli_missing_file_and_sanity_failure_exit_nonzero(tmp_path):
    missing = tmp_path / "nope" / f"{NAME}.log"
    p = _cli("--files", str(missing))
    assert p.returncode == 1
    assert p.stderr.strip() == f"chronolog dump-log: {missing}: no such file"
    d = tmp_path / "crash-0"
    log = new_log(d)
    log.append(R.build_batch([(T0, None, b"x")]))
    log.append(R.build_batch([(T0 + 1, None, b"y")]))
    log.close_handlers()
    p = _cli("--files", str(d / f"{NAME}.index"), "--index-sanity-check")
    assert p.returncode == 1
    assert f"{d / NAME}.index failed sanity check:" in p.stderr
    # and a clean close makes it pass
    new_log(d).close()
    p = _cli("--files", f"{d / NAME}.index,{d / NAME}.timeindex", "--index-sanity-check")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("passed sanity check.") == 2


def test_cli_usage_errors():
    p = _cli()
    assert p.returncode == 2 and "--files" in p.stderr
    p = _cli("--files", ",")
    assert p.returncode == 2


def test_txnindex_is_printed_as_kafka_prints_it_and_left_untouched(tmp_path):
    from storage.transaction_index import AbortedTxn, TransactionIndex

    path = tmp_path / "00000000000000000010.txnindex"
    idx = TransactionIndex(str(path), 10)
    idx.append(AbortedTxn(7, 10, 14, 10))
    idx.append(AbortedTxn(9, 12, 20, 15))
    with open(path, "ab") as fh:
        fh.write(b"\x00\x00\x01")  # a torn third entry
    size = path.stat().st_size
    out, err = io.StringIO(), io.StringIO()
    assert D.dump_files([str(path)], out, err) == 0
    assert out.getvalue().splitlines()[1:] == [
        "version: 0 producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 10",
        "version: 0 producerId: 9 firstOffset: 12 lastOffset: 20 lastStableOffset: 15"]
    assert "Found 3 bytes after the last aborted transaction" in err.getvalue()
    assert path.stat().st_size == size
