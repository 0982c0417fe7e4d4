"""The exactly-once checker: a consume-transform-produce application
(tests/integration/eos_app.py, confluent-kafka transactions) copies an input topic to an
output topic while the broker is SIGKILLed and restarted several times and the
application itself is SIGKILLed and restarted; at the end a read_committed consumer
finds every input record exactly once in the output, and the group's committed offsets
are the input's end."""

from __future__ import annotations

import collections
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from tests.integration.helpers import REPO_ROOT, create_topic, unique_topic

APP = Path(__file__).with_name("eos_app.py")
RECORDS = 3000
PARTITIONS = 2


class App:
    def __init__(self, bootstrap, src, dst, group, tid, log_path: Path):
        self.args = [sys.executable, str(APP), bootstrap, src, dst, group, tid, "25", "0.05"]
        self.log_path = log_path
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def ensure_running(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            with open(self.log_path, "a") as log:
                log.write(f"===== start {self.starts + 1}\n")
                log.flush()
                self.proc = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, cwd=REPO_ROOT)
            self.starts += 1

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.kill()


def _committed(bootstrap, group, topic) -> int:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], 10)
        return sum(max(tp.offset, 0) for tp in got)
    finally:
        c.close()


def _read_committed(bootstrap, topic) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("eos-check"), "enable.auto.commit": False,
                  "isolation.level": "read_committed", "auto.offset.reset": "earliest"})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    out, last = [], time.monotonic()
    try:
        while time.monotonic() - last < 5:
            m = c.poll(0.3)
            if m is not None and m.error() is None:
                out.append(m.value())
                last = time.monotonic()
    finally:
        c.close()
    return out


def test_exactly_once_across_broker_and_application_kills(broker_factory, tmp_path):
    rnd = random.Random(1234)
    b = broker_factory({"group.initial.rebalance.delay.ms": 0, "group.min.session.timeout.ms": 1000,
                        "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000})
    src = create_topic(b.bootstrap, unique_topic("eos-in"), partitions=PARTITIONS)
    dst = create_topic(b.bootstrap, unique_topic("eos-out"), partitions=PARTITIONS)
    group, tid = unique_topic("eos-group"), unique_topic("eos-app")
    p = Producer({"bootstrap.servers": b.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        p.produce(src, key=b"%d" % (i % 17), value=b"%05d" % i, partition=i % PARTITIONS)
        if i % 1000 == 999:
            p.flush(30)
    assert p.flush(30) == 0
    app = App(b.bootstrap, src, dst, group, tid, tmp_path / "app.log")
    app.ensure_running()
    kills = {"broker": 0, "app": 0}
    deadline = time.monotonic() + 240
    # three broker SIGKILLs and two application SIGKILLs while it copies
    for action in ("broker", "app", "broker", "app", "broker"):
        time.sleep(rnd.uniform(1.0, 2.5))
        if action == "broker":
            b.kill()
            time.sleep(rnd.uniform(0.2, 1.0))
            b.restart(graceful=False)
        else:
            app.kill()
            app.ensure_running()
        kills[action] += 1
    while time.monotonic() < deadline:
        app.ensure_running()  # a fatal error (fenced) ends it; a supervisor restarts it
        try:
            if _committed(b.bootstrap, group, src) == RECORDS:
                break
        except Exception:
            pass
        time.sleep(1)
    app.stop()
    log = (tmp_path / "app.log").read_text()
    assert _committed(b.bootstrap, group, src) == RECORDS, f"the group did not catch up; app log tail:\n{log[-3000:]}"
    out = _read_committed(b.bootstrap, dst)
    counts = collections.Counter(out)
    dups = {v: n for v, n in counts.items() if n > 1}
    missing = {b"out-%05d" % i for i in range(RECORDS)} - set(counts)
    assert not dups and not missing and len(out) == RECORDS, (
        f"{len(out)} records, {len(dups)} duplicated (e.g. {list(dups.items())[:3]}), {len(missing)} missing "
        f"(e.g. {sorted(missing)[:3]}); app started {app.starts} times; log tail:\n{log[-3000:]}")
    assert kills == {"broker": 3, "app": 2} and b.starts == 4
