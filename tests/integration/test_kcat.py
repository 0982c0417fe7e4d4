"""kcat (Debian's build, librdkafka 2.0): metadata, produce and consume round trips.

librdkafka before 2.2 fails to parse ApiVersions v3 responses that carry tagged fields,
so these tests guard the broker's ApiVersions answer as much as the data path. `make test`
installs kcat (apt-get install kcat); a missing kcat fails these tests."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest

from tests.integration.helpers import (
    Rec,
    make_records,
    now_ms,
    produce,
)

pytestmark = [pytest.mark.timeout(120), pytest.mark.kcat]

KCAT = shutil.which("kcat") or shutil.which("kafkacat")
COMMON = ["-X", "socket.timeout.ms=10000", "-X", "api.version.request.timeout.ms=10000",
          "-X", "topic.metadata.refresh.interval.ms=2000"]


@pytest.fixture(autouse=True)
def need_kcat():
    if KCAT is None:
        pytest.fail("kcat is not installed (make test installs it: apt-get install kcat)")


def kcat(args: list[str], bootstrap: str, stdin: bytes | None = None, timeout: float = 60) -> subprocess.CompletedProcess:
    cmd = [KCAT, "-b", bootstrap, *COMMON, *args]
    proc = subprocess.run(cmd, input=stdin, capture_output=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} exited {proc.returncode}\nstdout: {proc.stdout[-2000:]!r}\n"
            f"stderr: {proc.stderr[-4000:].decode('utf-8', 'replace')}")
    return proc


def kcat_consume(bootstrap: str, topic: str, fmt: str = "%o|%T|%k|%s|%h\\n", extra=()) -> list[list[str]]:
    out = kcat(["-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", fmt, *extra], bootstrap)
    lines = out.stdout.decode().splitlines()
    return [line.split("|") for line in lines if line]


def test_kcat_metadata(broker, new_topic):
    topic = new_topic(partitions=3)
    out = kcat(["-L", "-J", "-t", topic], broker.bootstrap)
    md = json.loads(out.stdout)
    assert md["brokers"] == [{"id": md["controllerid"], "name": f"127.0.0.1:{broker.port}"}], md["brokers"]
    (t,) = md["topics"]
    assert t["topic"] == topic and "error" not in t, t
    assert sorted(p["partition"] for p in t["partitions"]) == [0, 1, 2]
    for p in t["partitions"]:
        assert p["leader"] == md["brokers"][0]["id"], p
        assert "error" not in p, p
    # the full listing (no -t) knows the topic too
    out = kcat(["-L", "-J"], broker.bootstrap)
    assert topic in [t["topic"] for t in json.loads(out.stdout)["topics"]]


CODEC_IDS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


@pytest.mark.parametrize("codec", list(CODEC_IDS))
def test_kcat_produce_consume(broker, new_topic, codec):
    topic = new_topic()
    n = 50
    lines = b"".join(b"key%d:value %d %s\n" % (i, i, codec.encode()) for i in range(n))
    before = now_ms()
    kcat(["-P", "-t", topic, "-p", "0", "-K", ":", "-z", codec, "-H", "src=kcat",
          "-X", "linger.ms=50"], broker.bootstrap, stdin=lines)
    after = now_ms()
    # the batch is stored as sent: librdkafka really compressed it (it silently sends
    # uncompressed batches when the broker's ApiVersions suggest it cannot take the codec)
    with open(broker.partition_dir(topic) / ("0" * 20 + ".log"), "rb") as f:
        head = f.read(23)
    assert head[16] == 2 and (head[21] << 8 | head[22]) & 7 == CODEC_IDS[codec], (
        f"first stored batch has codec {(head[21] << 8 | head[22]) & 7}, kcat was run with -z {codec}")
    rows = kcat_consume(broker.bootstrap, topic)
    assert len(rows) == n, f"kcat consumed {len(rows)} records: {rows[:3]}"
    for i, (off, ts, key, value, headers) in enumerate(rows):
        assert int(off) == i
        assert before <= int(ts) <= after, f"offset {i}: CreateTime {ts} outside {before}..{after}"
        assert key == f"key{i}" and value == f"value {i} {codec}"
        assert headers == "src=kcat", headers


def test_kcat_reads_client_timestamps(broker, new_topic):
    """Records produced by another client with explicit CreateTime timestamps and headers
    are shown by kcat with exactly those timestamps; -o s@T starts at the first record
    with timestamp >= T (ListOffsets by time through librdkafka 2.0)."""
    topic = new_topic()
    base = now_ms() - 60_000
    recs = make_records(20, base, step=1000, prefix="kp")
    recs[5].timestamp = base + 14_500  # out of order
    produce("kp", broker.bootstrap, topic, recs)
    rows = kcat_consume(broker.bootstrap, topic)
    assert [int(r[0]) for r in rows] == list(range(20))
    assert [int(r[1]) for r in rows] == [r.timestamp for r in recs]
    assert [r[2] for r in rows] == [r.key.decode() for r in recs]

    t = base + 14_200  # first record with ts >= t is offset 5 (14_500), not 15
    out = kcat(["-C", "-t", topic, "-p", "0", "-o", f"s@{t}", "-e", "-f", "%o\\n"], broker.bootstrap)
    offs = [int(x) for x in out.stdout.decode().split()]
    assert offs and offs[0] == 5, f"kcat -o s@{t} started at {offs[:3]}"


def test_kcat_log_append_time(broker, new_topic):
    topic = new_topic({"message.timestamp.type": "LogAppendTime"})
    produce("kp", broker.bootstrap, topic, [Rec(b"a", b"1", 1_000), Rec(b"b", b"2", 2_000)])
    before = now_ms()
    kcat(["-P", "-t", topic, "-p", "0", "-K", ":"], broker.bootstrap, stdin=b"c:3\n")
    after = now_ms()
    rows = kcat_consume(broker.bootstrap, topic, fmt="%o|%T|%k|%s\\n")
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert all(int(r[1]) > 2_000 for r in rows), rows
    assert before <= int(rows[2][1]) <= after
