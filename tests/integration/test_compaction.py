"""Compacted topics with real clients against a live broker: confluent-kafka,
kafka-python and kafkajs produce keyed records and tombstones to a
``cleanup.policy=compact`` topic and, once the cleaner has run, read back one record per
key (the last one written) at its original offset; a tombstone stays until
``delete.retention.ms`` after the clean that kept it and goes with the next clean;
``__consumer_offsets`` is compacted (a deleted group's records disappear, a live
group's offsets survive restart); a broker SIGKILLed in the middle of a clean loses
nothing; the cleaner's metrics count what it did."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from protocol import records as R
from storage.checkpoint import read_checkpoint
from tests.integration.helpers import REPO_ROOT, create_topic, free_port, unique_topic

COMPACT = {"cleanup.policy": "compact", "segment.bytes": "200000", "segment.ms": "1000",
           "min.cleanable.dirty.ratio": "0.01", "delete.retention.ms": "2000"}


@pytest.fixture(scope="module")
def cbroker(tmp_path_factory):
    from tests.integration.helpers import Broker

    port = free_port()
    b = Broker(tmp_path_factory.mktemp("compaction-broker"),
               {"log.cleaner.backoff.ms": "100", "metrics.port": str(port), "auto.create.topics.enable": "false",
                "group.initial.rebalance.delay.ms": "0"}).start()
    b.metrics_port = port
    yield b
    b.stop()


def checkpoint(b, topic: str, partition: int = 0) -> int:
    try:
        return read_checkpoint(str(b.log_dir / "cleaner-offset-checkpoint")).get((topic, partition), -1)
    except Exception:  # written while we read it: try again
        return -1


def wait_cleaned(b, topic: str, offset: int, timeout: float = 60.0, partition: int = 0) -> None:
    deadline = time.monotonic() + timeout
    while checkpoint(b, topic, partition) < offset:
        assert time.monotonic() < deadline, f"{topic} not cleaned up to {offset}: {checkpoint(b, topic, partition)}"
        time.sleep(0.1)


def roll(b, topic: str) -> int:
    """Make the segment holding what was produced inactive (segment.ms=1000 on record
    time): a record a bit more than a second later lands in a new segment. Returns its
    offset, the first the cleaner will not clean."""
    time.sleep(1.2)
    p = Producer({"bootstrap.servers": b.bootstrap})
    offsets = []
    p.produce(topic, key=b"roll", value=b"x", on_delivery=lambda err, m: offsets.append(m.offset()))
    assert p.flush(10) == 0
    return offsets[0]


def read_back(bootstrap: str, topic: str, end: int) -> list[tuple[int, bytes, bytes | None]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("read"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, 0)])
    out = []
    deadline = time.monotonic() + 30
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None or m.error():
                continue
            if m.offset() < end:
                out.append((m.offset(), m.key(), m.value()))
            if m.offset() >= end - 1:
                break
    finally:
        c.close()
    return out


def expected_after_clean(written: list[tuple[int, bytes, bytes | None]], end: int):
    last = {}
    for off, key, value in written:
        if off < end:
            last[key] = (off, key, value)
    return sorted(last.values())


def produce_ck(bootstrap, topic, items):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "batch.size": 16384})
    written = []
    for key, value in items:
        p.produce(topic, key=key, value=value,
                  on_delivery=lambda err, m: written.append((m.offset(), m.key(), m.value())))
        p.poll(0)
    assert p.flush(30) == 0
    return sorted(written)


def produce_kp(bootstrap, topic, items):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, batch_size=16384, linger_ms=5)
    futs = [(key, value, p.send(topic, key=key, value=value)) for key, value in items]
    p.flush(30)
    out = sorted((f.get(30).offset, key, value) for key, value, f in futs)
    p.close()
    return out


@pytest.mark.parametrize("client", ["ck", "kp"])
def test_clients_read_one_record_per_key_after_cleaning(cbroker, client):
    b = cbroker
    topic = create_topic(b.bootstrap, unique_topic(f"compact-{client}"), COMPACT)
    items = [(b"k%d" % (i % 40), b"v%d" % i) for i in range(3000)] + [(b"k1", None), (b"k2", None)]
    written = (produce_ck if client == "ck" else produce_kp)(b.bootstrap, topic, items)
    end = roll(b, topic)
    wait_cleaned(b, topic, end)
    got = read_back(b.bootstrap, topic, end)
    assert got == expected_after_clean(written, end)
    assert [(k, v) for _o, k, v in got if k in (b"k1", b"k2")] == [(b"k1", None), (b"k2", None)]
    # the tombstones go with the first clean after delete.retention.ms (2 s)
    time.sleep(2.2)
    more = produce_ck(b.bootstrap, topic, [(b"k3", b"after")])
    end2 = roll(b, topic)
    wait_cleaned(b, topic, end2)
    got2 = read_back(b.bootstrap, topic, end2)
    keys = {k for _o, k, _v in got2}
    assert b"k1" not in keys and b"k2" not in keys
    assert (more[0][0], b"k3", b"after") in got2
    assert len(got2) == 40 - 2 + 1  # k0..k39 but k1, k2; plus the first roll record


def test_kafkajs_reads_one_record_per_key_after_cleaning(cbroker):
    b = cbroker
    node = shutil.which("node")
    assert node, "node is needed (make tools installs npm and kafkajs)"
    topic = create_topic(b.bootstrap, unique_topic("compact-js"), COMPACT)
    env = {**os.environ, "BROKER": b.bootstrap, "TOPIC": topic, "COUNT": "2000", "KEYS": "25", "MODE": "produce"}
    out = subprocess.run([node, str(REPO_ROOT / "tests" / "js" / "compaction.js")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    first, tomb = json.loads(out.stdout.strip().splitlines()[-1])["offsets"]
    end = roll(b, topic)
    wait_cleaned(b, topic, end)
    env.update(MODE="consume", END=str(end), GROUP=unique_topic("js-read"))
    out = subprocess.run([node, str(REPO_ROOT / "tests" / "js" / "compaction.js")], env=env, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    got = [tuple(r) for r in json.loads(out.stdout.strip().splitlines()[-1])["records"]]
    written = [(first + i, f"k{i % 25}", f"v{i}") for i in range(2000)] + [(tomb, "k0", None)]
    assert got == [tuple(x) for x in expected_after_clean(written, end)]
    assert got[-1] == (tomb, "k0", None)


def test_keyless_records_are_refused_naming_the_record(cbroker):
    b = cbroker
    topic = create_topic(b.bootstrap, unique_topic("compact-keyless"), COMPACT)
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 0})
    errors = []
    p.produce(topic, value=b"no key", on_delivery=lambda err, m: errors.append(err))
    p.flush(10)
    assert errors and errors[0] is not None and errors[0].code() == 87  # INVALID_RECORD
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("read")})
    try:  # nothing was stored: the log is empty (not: nothing read within a deadline)
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 0)
    finally:
        c.close()


def scrape(b) -> dict:
    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("chronolog_log_cleaner_") and " " in line:
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_the_cleaner_metrics_count_its_work(cbroker):
    b = cbroker
    before = scrape(b)
    topic = create_topic(b.bootstrap, unique_topic("compact-metrics"), COMPACT)
    produce_ck(b.bootstrap, topic, [(b"k%d" % (i % 3), b"v" * 100) for i in range(2000)])
    end = roll(b, topic)
    wait_cleaned(b, topic, end)
    time.sleep(0.3)
    m = scrape(b)
    assert m["chronolog_log_cleaner_runs_total"] > before.get("chronolog_log_cleaner_runs_total", 0)
    assert m["chronolog_log_cleaner_bytes_read_total"] - before.get("chronolog_log_cleaner_bytes_read_total", 0) > 200_000
    assert 0 < m["chronolog_log_cleaner_bytes_written_total"] < m["chronolog_log_cleaner_bytes_read_total"]
    assert m["chronolog_log_cleaner_last_clean_timestamp_seconds"] > time.time() - 60
    assert m["chronolog_log_cleaner_worker_peak_rss_bytes"] > 0
    assert m[f'chronolog_log_cleaner_uncleanable_partitions{{log_dir="{b.log_dir}"}}'] == 0
    assert m["chronolog_log_cleaner_dead_workers"] == 0


def _offsets_records(b, partition=0, end: bool = False):
    """(records, tombstones) in __consumer_offsets-<partition>, read from its files; with
    ``end``, (records, tombstones, next offset): the records ever written, which
    cleaning does not change (it never empties the active segment)."""
    d = b.log_dir / f"__consumer_offsets-{partition}"
    n = tombs = next_offset = 0
    for name in sorted(os.listdir(d)):
        if not name.endswith(".log"):
            continue
        data = (d / name).read_bytes()
        for pos, h in R.iter_batches(data):
            next_offset = max(next_offset, h.base_offset + h.last_offset_delta + 1)
            if h.is_control:
                continue
            for r in R.iter_records(data, pos, h):
                n += 1
                tombs += r.value is None
    return (n, tombs, next_offset) if end else (n, tombs)


def test_consumer_offsets_is_compacted_and_groups_survive_restart(broker_factory):
    b = broker_factory({"offsets.topic.num.partitions": "1", "offsets.topic.segment.bytes": "20000",
                        "log.cleaner.backoff.ms": "100", "log.cleaner.delete.retention.ms": "1000",
                        "log.roll.ms": "1000", "log.cleaner.min.cleanable.ratio": "0.01",
                        "group.initial.rebalance.delay.ms": "0"})
    topic = create_topic(b.bootstrap, unique_topic("offsets-src"), {})
    keep, gone = unique_topic("g-keep"), unique_topic("g-gone")
    for group, commits in ((keep, 600), (gone, 5)):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "enable.auto.commit": False})
        for i in range(commits):
            c.commit(offsets=[TopicPartition(topic, 0, i + 1)], asynchronous=False)
        c.close()
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    admin.delete_consumer_groups([gone], request_timeout=15)[gone].result()
    # the cleaner may already be at work (the partition rolls every second): count what
    # was written, not what is left
    records_before, _, written = _offsets_records(b, end=True)
    assert written > 600, (records_before, written)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": keep, "enable.auto.commit": False})

    def commit_later(offset):
        """Commits a second apart roll the partition (log.roll.ms on record time)."""
        for o in (offset, offset + 1):
            time.sleep(1.2)
            c.commit(offsets=[TopicPartition(topic, 0, o)], asynchronous=False)

    commit_later(601)  # the cleaner then compacts what came before
    deadline = time.monotonic() + 60
    while _offsets_records(b)[0] > 20 and time.monotonic() < deadline:
        time.sleep(0.2)
    records_after, _ = _offsets_records(b)
    assert records_after <= 20, (records_before, records_after)
    commit_later(603)  # the deleted group's tombstones go with a clean after delete.retention.ms
    deadline = time.monotonic() + 60
    while _offsets_records(b)[1] > 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _offsets_records(b)[1] == 0
    c.close()
    b.restart(graceful=False)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": keep, "enable.auto.commit": False})
    assert c.committed([TopicPartition(topic, 0)], 15)[0].offset == 604
    c.close()
    groups = {g.group_id for g in admin_list_groups(b.bootstrap)}
    assert keep in groups and gone not in groups
    assert "loaded 1 group(s)" in b.log_text()


def admin_list_groups(bootstrap):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return admin.list_consumer_groups(request_timeout=15).result().valid


@pytest.mark.slow
def test_a_broker_killed_while_cleaning_keeps_every_latest_value(broker_factory):
    # a slow cleaner (throttled reads and writes) so the kill lands in the middle of it
    b = broker_factory({"log.cleaner.backoff.ms": "100", "log.cleaner.io.max.bytes.per.second": "400000"})
    topic = create_topic(b.bootstrap, unique_topic("compact-kill"), dict(COMPACT, **{"segment.bytes": "100000"}))
    written = produce_ck(b.bootstrap, topic, [(b"k%03d" % (i % 300), b"v%d-" % i + b"." * 100) for i in range(15000)])
    end = roll(b, topic)
    part = b.log_dir / f"{topic}-0"
    deadline = time.monotonic() + 30
    while not any(n.endswith(".cleaned") for n in os.listdir(part)):
        assert time.monotonic() < deadline, "no clean started"
        time.sleep(0.05)
    b.kill()
    b.restart(graceful=False)
    want = expected_after_clean(written, end)
    latest = {k: (o, v) for o, k, v in want}
    got = read_back(b.bootstrap, topic, end)
    seen = {}
    for o, k, v in got:
        seen[k] = (o, v)
    assert seen == latest  # every key's last value is there (older ones may be too)
    assert [o for o, _k, _v in got] == sorted(o for o, _k, _v in got)
    wait_cleaned(b, topic, end, timeout=120)
    assert read_back(b.bootstrap, topic, end) == want
    assert not [n for n in os.listdir(part) if n.endswith((".cleaned", ".swap"))]


def test_a_broker_with_a_cleaner_worker_stops_cleanly_on_sigterm(broker_factory):
    """Starting a worker process must not unblock the broker's stop signals (Python's
    multiprocessing unblocks SIGTERM while it starts its resource tracker)."""
    b = broker_factory({"log.cleaner.backoff.ms": "100"})
    topic = create_topic(b.bootstrap, unique_topic("compact-stop"), COMPACT)
    produce_ck(b.bootstrap, topic, [(b"k", b"v%d" % i) for i in range(500)])
    end = roll(b, topic)
    wait_cleaned(b, topic, end)
    assert "started log cleaner worker 0" in b.log_text()
    assert b.stop() == 0
    assert (b.log_dir / ".kafka_cleanshutdown").exists()


def test_transaction_state_is_compacted_and_producers_resume_after_restart(broker_factory):
    b = broker_factory({"transaction.state.log.num.partitions": "1", "transaction.state.log.segment.bytes": "20000",
                        "log.cleaner.backoff.ms": "100", "log.roll.ms": "1000",
                        "log.cleaner.min.cleanable.ratio": "0.01"})
    topic = create_topic(b.bootstrap, unique_topic("txn-out"), {})
    tid = unique_topic("compacted-tid")
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p.init_transactions(30)
    for i in range(60):
        p.begin_transaction()
        p.produce(topic, value=b"%d" % i)
        p.commit_transaction(30)
        if i % 20 == 19:
            time.sleep(1.1)  # record time moves on: the state partition rolls
    part = b.log_dir / "__transaction_state-0"

    def state_records():
        n = 0
        for name in os.listdir(part):
            if name.endswith(".log"):
                data = (part / name).read_bytes()
                n += sum(h.records_count for _pos, h in R.iter_batches(data))
        return n

    # 181 records were written (Ongoing, PrepareCommit, CompleteCommit per transaction);
    # the cleaner keeps the last of them plus what the active segment holds
    deadline = time.monotonic() + 60
    while state_records() > 90 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state_records() <= 90 and "cleaned __transaction_state-0" in b.log_text()
    b.restart(graceful=False)
    p2 = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": tid})
    p2.init_transactions(30)  # fences the first instance: the id's state was replayed
    p2.begin_transaction()
    p2.produce(topic, value=b"after restart")
    p2.commit_transaction(30)
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": unique_topic("txn-read"),
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, 0, 0)])
    got, deadline = [], time.monotonic() + 20
    while len(got) < 61 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    assert got == [b"%d" % i for i in range(60)] + [b"after restart"]
