"""`chronolog dump-log` on producer-state snapshots (``<offset>.snapshot``): Kafka's
DumpLogSegments.dumpProducerIdSnapshot lines, Kafka's messages for a corrupt file, and
nothing written.  Files come from the broker's own writer (storage.producer_state) and
from a storage.log.Log fed by an idempotent producer."""

from __future__ import annotations

import io
import os
import re
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from crc32c import crc32c

from protocol import records as R
from storage import dump_log as D
from storage.clock import ManualClock
from storage.log import Log
from storage.producer_state import BatchMetadata, ProducerStateEntry, snapshot_file_name, write_snapshot
from tests.unit.test_log_helpers import topic_config

ROOT = Path(__file__).resolve().parents[2]
NOW = 1_700_000_000_000
INT32_MAX = 2**31 - 1
_FIELD = re.compile(r"(\w+): (\S+)")


def run(paths, **opts):
    out, err = io.StringIO(), io.StringIO()
    rc = D.dump_files([str(p) for p in paths], out, err, D.DumpOptions(**opts))
    return rc, out.getvalue(), err.getvalue()


def entry_lines(text):
    return [l for l in text.splitlines() if l.startswith("producerId: ")]


def fields(line):
    return dict(_FIELD.findall(line))


def empty(pid, epoch, ts):
    return (f"producerId: {pid} producerEpoch: {epoch} coordinatorEpoch: -1 "
            f"currentTxnFirstOffset: OptionalLong.empty lastTimestamp: {ts}")


def with_batch(pid, epoch, first_seq, last_seq, last_offset, delta, ts):
    return (empty(pid, epoch, ts) + f" firstSequence: {first_seq} lastSequence: {last_seq} "
            f"lastOffset: {last_offset} offsetDelta: {delta} timestamp: {ts}")


def raw_snapshot(entries, version=1, count=None, crc=None) -> bytes:
    """A ProducerSnapshot v1 file built by hand: entries are 8-tuples in file order."""
    body = b"".join(struct.pack(">qhiqiqiq", *e) for e in entries)
    tail = struct.pack(">i", len(entries) if count is None else count) + body
    return struct.pack(">hI", version, crc32c(tail) if crc is None else crc) + tail


@pytest.fixture
def written(tmp_path):
    """A snapshot from the broker's writer: 2 producers with batches, one without."""
    (tmp_path / "w-0").mkdir()
    path = tmp_path / "w-0" / snapshot_file_name(12)
    write_snapshot(str(path), [
        ProducerStateEntry(1000, 0, NOW + 9, [BatchMetadata(1, 1, 1, NOW + 1), BatchMetadata(3, 5, 1, NOW + 9)]),
        ProducerStateEntry(2**40, 3, NOW, [BatchMetadata(1, 7, 3, NOW)]),  # sequence wrapped in the batch
        ProducerStateEntry(5, 1, NOW + 2, []),
    ], sync=False)
    return path


def test_snapshot_entries_decoded_like_kafka(written):
    rc, out, err = run([written])
    assert (rc, err) == (0, "")
    assert out.splitlines() == [
        f"Dumping {written}",
        # one line per stored entry (Chronolog stores every cached batch, oldest first)
        with_batch(1000, 0, 0, 1, 1, 1, NOW + 1),
        with_batch(1000, 0, 2, 3, 5, 1, NOW + 9),
        # firstSequence = lastSequence - offsetDelta, wrapping past 0 like decrementSequence
        with_batch(2**40, 3, INT32_MAX - 1, 1, 7, 3, NOW),
        # no batch (lastOffset -1): the line ends after lastTimestamp, no trailing space
        empty(5, 1, NOW + 2),
    ]


def test_transaction_fields_and_java_int_wrap(tmp_path):
    path = tmp_path / snapshot_file_name(0)
    path.write_bytes(raw_snapshot([
        (7, 2, 10, 100, 4, NOW, 5, 96),  # coordinatorEpoch 5, an ongoing transaction from 96
        (8, -1, -1, 3, 0, NOW, -1, -1),  # lastSequence -1, offsetDelta 0: Kafka prints Int.MaxValue
        (9, 0, 5, 4, -2**31, NOW, -1, -1),  # int overflow in Kafka's arithmetic
        (10, 0, 5, -1, 2, NOW + 1, -1, -1),  # lastOffset < 0: no batch metadata
    ]))
    rc, out, err = run([path])
    assert (rc, err) == (0, "")
    lines = entry_lines(out)
    assert lines[0] == ("producerId: 7 producerEpoch: 2 coordinatorEpoch: 5 currentTxnFirstOffset: "
                        f"OptionalLong[96] lastTimestamp: {NOW} firstSequence: 6 lastSequence: 10 "
                        f"lastOffset: 100 offsetDelta: 4 timestamp: {NOW}")
    assert fields(lines[1])["firstSequence"] == str(INT32_MAX)
    assert fields(lines[2])["firstSequence"] == str(5 + 2**31 - 2**32)  # 5 - MIN_VALUE wraps in Java
    assert lines[3] == empty(10, 0, NOW + 1)


def test_empty_snapshot_prints_only_the_header_line(tmp_path):
    path = tmp_path / snapshot_file_name(3)
    write_snapshot(str(path), [])
    assert run([path]) == (0, f"Dumping {path}\n", "")


def test_name_without_base_offset_is_dumped(written, tmp_path):
    # Kafka does not parse the offset of a snapshot's name
    other = tmp_path / "copy.snapshot"
    other.write_bytes(written.read_bytes())
    rc, out, err = run([other])
    assert (rc, err) == (0, "")
    assert len(entry_lines(out)) == 4


CORRUPT = {
    "crc": None,  # computed below
    "empty": "Snapshot failed schema validation: the file ends after 0 byte(s), inside the version (int16)",
    "version": "Snapshot failed schema validation: Snapshot contained an unknown file version 2",
    "header": ("Snapshot failed schema validation: the file ends after 8 bytes, inside the header "
               "(version, crc, entry count: 10 bytes)"),
    "entries": ("Snapshot failed schema validation: the file ends after 149 bytes, inside producer entry 4 "
                "of 4 (46 bytes each: 194 bytes needed)"),
    "negative-count": "Snapshot failed schema validation: non-nullable field producerEntries was serialized as null",
    "huge-count": ("Snapshot failed schema validation: Tried to allocate a collection of size 1000, but there "
                   "are only 184 bytes remaining."),
}


def damage(data: bytes, how: str) -> bytes:
    b = bytearray(data)
    if how == "crc":
        b[-3] ^= 0xFF
    elif how == "empty":
        b = b""
    elif how == "version":
        b[1] = 2
    elif how == "header":
        b = b[:8]
    elif how == "entries":
        b = b[:-45]
    elif how == "negative-count":
        struct.pack_into(">i", b, 6, -1)
    elif how == "huge-count":
        struct.pack_into(">i", b, 6, 1000)
    return bytes(b)


@pytest.mark.parametrize("how", sorted(CORRUPT))
def test_corrupt_snapshot_reported_with_kafkas_message(written, tmp_path, how):
    good = written.read_bytes()
    bad = tmp_path / snapshot_file_name(20)
    bad.write_bytes(damage(good, how))
    rc, out, err = run([bad, written])
    message = CORRUPT[how]
    if how == "crc":
        stored = struct.unpack_from(">I", good, 2)[0]
        computed = crc32c(damage(good, how)[6:])
        assert stored != computed
        message = f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {stored}. Computed crc: {computed}"
    # Kafka: the message on stderr, nothing printed for the file, not fatal, the next file is dumped
    assert rc == 0
    assert err.splitlines() == [f"{bad}: {message}"]
    assert out.splitlines()[:2] == [f"Dumping {bad}", f"Dumping {written}"]
    assert len(entry_lines(out)) == 4


def test_bytes_after_the_last_entry(written, tmp_path):
    # Kafka ignores them when the CRC (which covers them) holds; Chronolog's reader would not
    data = raw_snapshot([(1, 0, 1, 1, 1, NOW, -1, -1)])
    tail = data[6:] + b"\x00" * 5
    path = tmp_path / snapshot_file_name(1)
    path.write_bytes(data[:2] + struct.pack(">I", crc32c(tail)) + tail)
    rc, out, err = run([path])
    assert rc == 0
    assert entry_lines(out) == [with_batch(1, 0, 0, 1, 1, 1, NOW)]
    assert err.splitlines() == [f"Found 5 bytes after the last producer entry of {path} "
                                f"(Chronolog's broker would not load this snapshot)"]


def test_unreadable_snapshot_is_a_failure(tmp_path):
    """A .snapshot that cannot be read (here a directory, unreadable even for root)."""
    path = str(tmp_path / "00000000000000000003.snapshot")
    os.mkdir(path)
    rc, out, err = run([path])
    assert rc == 1
    assert err.startswith(f"chronolog dump-log: {path}: ")


# ---------------------------------------------------------------------- a real log


def pbatch(pid, epoch, seq, ts, n=2):
    return R.build_batch([(ts + i, None, b"x" * 40) for i in range(n)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq)


def new_log(d):
    return Log(str(d), topic_config(segment_bytes=500, index_interval_bytes=100, segment_index_bytes=1200),
               ManualClock(NOW))


@pytest.fixture
def idempotent_log(tmp_path):
    """A multi-segment log written by two idempotent producers (and one plain one), closed
    cleanly: snapshots at every rolled segment's base and at the log end."""
    d = tmp_path / "events-0"
    log = new_log(d)
    seq = {1000: 0, 2000: 0}
    for i in range(12):
        pid = 1000 if i % 3 else 2000
        log.append(pbatch(pid, 0 if pid == 1000 else 4, seq[pid], NOW + 10 * i))
        seq[pid] += 2
        if i == 6:
            log.append(R.build_batch([(NOW, None, b"plain")]))
    leo = log.log_end_offset
    bases = [s.base_offset for s in log.segments]
    log.close()
    return d, bases, leo


def _cli(*args, cwd=ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "broker", "dump-log", *args], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=60)


def test_cli_snapshots_of_a_log_agree_with_its_batches(idempotent_log):
    d, bases, leo = idempotent_log
    assert len(bases) > 2
    snaps = sorted(p for p in d.iterdir() if p.suffix == ".snapshot")
    assert [p.name for p in snaps] == [snapshot_file_name(o) for o in bases[1:] + [leo]]
    logs = sorted(p for p in d.iterdir() if p.suffix == ".log")
    p = _cli("--files", ",".join(str(x) for x in logs + snaps))
    assert p.returncode == 0, p.stderr
    assert p.stderr == ""
    # the batches of each idempotent producer, from the .log lines of the same dump
    batches: dict[int, list[dict]] = {}
    for line in p.stdout.splitlines():
        if line.startswith("baseOffset: ") and fields(line)["producerId"] != "-1":
            f = fields(line)
            batches.setdefault(int(f["producerId"]), []).append(f)
    assert sorted(batches) == [1000, 2000]
    # split the output per snapshot file
    per_file: dict[str, list[str]] = {}
    current = None
    for line in p.stdout.splitlines():
        if line.startswith("Dumping "):
            current = line[len("Dumping "):]
            per_file[current] = []
        elif current is not None and current.endswith(".snapshot"):
            per_file[current].append(line)
    for snap in snaps:
        upto = int(snap.name.split(".")[0])  # the state of the log below this offset
        expected = []
        for pid, bs in batches.items():
            for b in [b for b in bs if int(b["lastOffset"]) < upto][-5:]:
                ts = int(b["CreateTime"])
                expected.append(with_batch(pid, int(b["producerEpoch"]), int(b["baseSequence"]),
                                           int(b["lastSequence"]), int(b["lastOffset"]),
                                           int(b["lastOffset"]) - int(b["baseOffset"]), ts))
        got = per_file[str(snap)]
        assert sorted(got, key=lambda l: (int(fields(l)["producerId"]), int(fields(l)["lastOffset"]))) == \
            sorted(expected, key=lambda l: (int(fields(l)["producerId"]), int(fields(l)["lastOffset"]))), snap.name


def test_cli_corrupt_snapshot_exit_status_and_message(idempotent_log, tmp_path):
    d, _bases, leo = idempotent_log
    bad = tmp_path / snapshot_file_name(leo)
    bad.write_bytes(damage((d / snapshot_file_name(leo)).read_bytes(), "crc"))
    p = _cli("--files", f"{bad},{d / snapshot_file_name(leo)}")
    assert p.returncode == 0  # Kafka catches CorruptSnapshotException: reported, not fatal
    [line] = p.stderr.splitlines()
    assert line.startswith(f"{bad}: Snapshot is corrupt (CRC is no longer valid). Stored crc: ")
    assert p.stdout.splitlines()[:2] == [f"Dumping {bad}", f"Dumping {d / snapshot_file_name(leo)}"]
    assert len(entry_lines(p.stdout)) > 0


def _state(d):
    return {p.name: (p.read_bytes(), p.stat().st_mtime_ns, p.stat().st_size) for p in sorted(d.iterdir())}


def test_dump_never_modifies_snapshots(idempotent_log, written):
    d, _bases, leo = idempotent_log
    bad = d / snapshot_file_name(leo + 100)
    bad.write_bytes(damage((d / snapshot_file_name(leo)).read_bytes(), "entries"))
    os.utime(bad, ns=(NOW * 1_000_000, NOW * 1_000_000))
    c = written.parent
    before, before_c = _state(d), _state(c)
    files = sorted(p for p in d.iterdir() if p.suffix == ".snapshot") + [written]
    for opts in ({}, {"print_data_log": True}, {"verify_index_only": True}, {"index_sanity_check": True},
                 {"max_bytes": 10}):
        rc, out, err = run(files, **opts)
        assert rc == 0
        assert f"{bad}: Snapshot failed schema validation" in err
    p = _cli("--files", ",".join(str(f) for f in files))
    assert p.returncode == 0
    assert _state(d) == before and _state(c) == before_c  # no byte, size or mtime changed, no file added
    # and the broker still loads the state from them (nothing was consumed or renamed)
    log = new_log(d)
    assert {pid for pid in (1000, 2000) if log.producer_state.last_entry(pid) is not None} == {1000, 2000}
    log.close()
