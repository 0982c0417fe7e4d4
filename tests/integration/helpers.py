"""Helpers for the integration tests: a real broker process and real clients.

Nothing here imports the broker's own packages (protocol/, storage/, broker/): the tests
talk to the broker only over TCP, like any stock Kafka client would, so a bug in the
broker's codec cannot hide behind the same bug in the tests.

Client names used throughout the suite:

* ``kp``    kafka-python, api_version auto-negotiated (Produce/Fetch with record batches v2)
* ``kp010`` kafka-python with api_version=(0, 10, 0): Produce v2 / Fetch v2, magic 1
            message sets (KIP-32's timestamps, no headers)
* ``ck``    confluent-kafka (librdkafka)
* ``aio``   aiokafka
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

REPO_ROOT = Path(__file__).resolve().parents[2]

LISTENING_RE = re.compile(r"Chronolog listening on 127\.0\.0\.1:(\d+)")

#: Request timeout given to every client: a broken broker must fail a test, not hang it.
REQUEST_TIMEOUT_MS = 15_000
#: Upper bound for any "wait until N records arrived" loop.
CONSUME_TIMEOUT_S = 20.0

CLIENTS = ("kp", "kp010", "ck", "aio")
#: Clients whose message format carries headers (magic 2).
HEADER_CLIENTS = ("kp", "ck", "aio")

CREATE_TIME = 0
LOG_APPEND_TIME = 1


def now_ms() -> int:
    return int(time.time() * 1000)


# ---------------------------------------------------------------------------------------
# The broker process
# ---------------------------------------------------------------------------------------


class BrokerStartError(RuntimeError):
    pass


class Broker:
    """One broker process started with ``python -m broker serve``.

    Its stdout and stderr go to ``self.log_path`` (appended across restarts)."""

    def __init__(self, workdir: Path, overrides: dict | None = None, start_timeout: float = 30.0):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_dir = self.workdir / "data"
        self.log_dir.mkdir(exist_ok=True)
        self.log_path = self.workdir / "broker.log"
        self.overrides = {str(k): str(v) for k, v in (overrides or {}).items()}
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.port: int | None = None
        self.starts = 0
        self.exit_codes: list[int] = []

    # -- lifecycle ------------------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.port is not None, "broker not started"
        return f"127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def command(self, port: int = 0) -> list[str]:
        cmd = [
            sys.executable,
            "-m",
            "broker",
            "serve",
            "--override",
            f"listeners=PLAINTEXT://127.0.0.1:{port}",
            "--override",
            f"log.dirs={self.log_dir}",
        ]
        if "metrics.port" not in self.overrides:
            # test brokers run side by side: no shared default metrics port (9404)
            cmd += ["--override", "metrics.port=0"]
        for k, v in self.overrides.items():
            cmd += ["--override", f"{k}={v}"]
        return cmd

    def start(self, port: int = 0) -> "Broker":
        assert not self.running, "broker already running"
        with open(self.log_path, "ab") as f:
            f.write(f"\n===== start #{self.starts + 1}: {' '.join(self.command(port))}\n".encode())
            start_pos = f.tell()
        log_file = open(self.log_path, "ab")
        # CHRONOLOG_* variables are a config source: keep the developer's out of it.
        env = {k: v for k, v in os.environ.items() if not k.upper().startswith("CHRONOLOG_")}
        env["PYTHONUNBUFFERED"] = "1"
        env.pop("PYTHONPATH", None)
        env["PYTHONPATH"] = str(REPO_ROOT)
        try:
            self.proc = subprocess.Popen(
                self.command(port),
                cwd=str(REPO_ROOT),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        finally:
            log_file.close()
        self.starts += 1
        self._start_pos = start_pos
        deadline = time.monotonic() + self.start_timeout
        while True:
            text = self._read_from(start_pos)
            m = LISTENING_RE.search(text)
            if m:
                self.port = int(m.group(1))
                break
            rc = self.proc.poll()
            if rc is not None:
                self.exit_codes.append(rc)
                self.proc = None
                raise BrokerStartError(
                    f"broker exited with code {rc} before listening; log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                self.kill()
                raise BrokerStartError(
                    f"broker did not print 'Chronolog listening on' within "
                    f"{self.start_timeout:.0f}s; log:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        # The line is printed once the listener accepts; check it really does.
        wait_for_port(self.port, timeout=10)
        return self

    def listener_ports(self) -> dict[str, int]:
        """``{listener name: bound port}`` from the last "Chronolog listening on" line
        (``127.0.0.1:40001 [SASL_SSL/SASL_SSL], ...``)."""
        lines = [ln for ln in self._read_from(0).splitlines() if "Chronolog listening on" in ln]
        assert lines, "broker has not printed its listeners"
        return {name: int(port) for port, name in re.findall(r":(\d+) \[([A-Z0-9_\-]+)/", lines[-1])}

    def stop(self, timeout: float = 20.0) -> int | None:
        """SIGTERM and wait; SIGKILL if it does not exit in time. Returns the exit code
        (negative signal number if it had to be killed: check ``exit_codes``)."""
        if self.proc is None:
            return None
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self._append_log(f"===== did not stop within {timeout}s of SIGTERM: SIGKILL\n")
                proc.kill()
                proc.wait(timeout=10)
                rc = "timeout"
        else:
            rc = proc.returncode
        self.exit_codes.append(rc)
        self._append_log(f"===== stopped, exit code {rc}\n")
        return rc

    def kill(self) -> None:
        """SIGKILL: no chance to flush or write a clean-shutdown marker."""
        if self.proc is None:
            return
        proc, self.proc = self.proc, None
        if proc.poll() is None:
            proc.kill()
        rc = proc.wait(timeout=10)
        self.exit_codes.append(rc)
        self._append_log(f"===== killed (SIGKILL), exit code {rc}\n")

    def wait_loaded(self, timeout: float = 60) -> None:
        """Wait until this start has loaded every partition: a log dir that was shut down
        cleanly is loaded after the broker listens (in the background, or a partition at
        its first use), so files rebuilt then (a missing index) are complete only after."""
        deadline = time.monotonic() + timeout
        while True:
            text = self._read_from(self._start_pos)
            if "load in the background" not in text or "partition log(s) loaded" in text:
                return
            assert time.monotonic() < deadline, "the background load of the partitions did not finish"
            time.sleep(0.05)

    def restart(self, graceful: bool = True, same_port: bool = True) -> "Broker":
        """Stop (SIGTERM, or SIGKILL when graceful=False) if running and start again on
        the same log dir; on the same port when it can be bound again, else a new one."""
        old_port = self.port
        if self.running:
            if graceful:
                self.stop()
            else:
                self.kill()
        if same_port and old_port:
            try:
                return self.start(port=old_port)
            except BrokerStartError:
                if self.running:
                    self.kill()
        return self.start(port=0)

    # -- logs -----------------------------------------------------------------------------

    def _append_log(self, text: str) -> None:
        with open(self.log_path, "a") as f:
            f.write(text)

    def _read_from(self, pos: int) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(pos)
                return f.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_text(self, since: int = 0) -> str:
        return self._read_from(since)

    def log_tail(self, lines: int = 80, since: int = 0) -> str:
        return "\n".join(self._read_from(since).splitlines()[-lines:])

    def partition_dir(self, topic: str, partition: int = 0) -> Path:
        return self.log_dir / f"{topic}-{partition}"

    def __repr__(self) -> str:
        return f"Broker(port={self.port}, dir={self.workdir}, running={self.running})"


#: Every broker started through start_broker (conftest prints their logs on failure).
ALL_BROKERS: list[Broker] = []


def _kill_leftover_brokers() -> None:
    """Never leave a broker process behind (e.g. after a pytest-timeout abort)."""
    for b in ALL_BROKERS:
        if b.running:
            with contextlib.suppress(Exception):
                b.kill()


atexit.register(_kill_leftover_brokers)


def start_broker(tmp_path: Path, overrides: dict | None = None, name: str = "broker") -> Broker:
    workdir = Path(tmp_path) / name
    b = Broker(workdir, overrides)
    ALL_BROKERS.append(b)
    return b.start()


def wait_for_bootstrap(bootstrap: str, timeout: float = 60.0) -> None:
    """Wait until ``host:port`` accepts TCP connections (an external broker starting)."""
    host, _, port = bootstrap.rpartition(":")
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection((host or "127.0.0.1", int(port)), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def free_port() -> int:
    """A port free on 127.0.0.1 now (for a broker's metrics.port)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


# ---------------------------------------------------------------------------------------
# Topics
# ---------------------------------------------------------------------------------------

_topic_counter = itertools.count()


def unique_topic(prefix: str) -> str:
    safe = re.sub(r"[^a-zA-Z0-9._-]", "-", prefix)[:150].strip("-.") or "t"
    return f"{safe}-{next(_topic_counter)}-{uuid.uuid4().hex[:6]}"


def kp_admin(bootstrap: str):
    from kafka.admin import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        client_id="chronolog-it-admin",
    )


def create_topic(bootstrap: str, name: str, configs: dict | None = None, partitions: int = 1) -> str:
    """CreateTopics through kafka-python's admin client; waits until Metadata shows it."""
    admin = kp_admin(bootstrap)
    try:
        admin.create_topics(
            {
                name: {
                    "num_partitions": partitions,
                    "replication_factor": 1,
                    "configs": {k: str(v) for k, v in (configs or {}).items()},
                }
            },
            timeout_ms=REQUEST_TIMEOUT_MS,
        )
        admin.wait_for_topics([name], timeout_ms=REQUEST_TIMEOUT_MS)
    finally:
        admin.close()
    return name


# ---------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------


@dataclass
class Rec:
    """A record to produce. timestamp None = let the client stamp it."""

    key: bytes | None
    value: bytes | None
    timestamp: int | None = None
    headers: list[tuple[str, bytes]] = field(default_factory=list)


@dataclass
class Produced:
    """What the producer's acknowledgement said about one record."""

    offset: int
    timestamp: int | None  # kafka-python/aiokafka/confluent: CreateTime ts or log append time
    timestamp_type: int | None  # 0 CreateTime, 1 LogAppendTime (None: client doesn't say)
    raw: object = None


@dataclass
class Got:
    """A consumed record, normalised across clients (timestamp_type 0 = CreateTime,
    1 = LogAppendTime; confluent's 1/2 are mapped, the raw value kept in raw_ts_type)."""

    offset: int
    key: bytes | None
    value: bytes | None
    timestamp: int
    timestamp_type: int
    headers: list[tuple[str, bytes]]
    raw_ts_type: object = None


def make_records(n: int, base_ts: int | None, step: int = 1, headers: bool = True,
                 prefix: str = "r", value_size: int = 0) -> list[Rec]:
    out = []
    for i in range(n):
        value = f"{prefix}-value-{i}".encode()
        if value_size:
            value = (value * (value_size // len(value) + 1))[:value_size]
        out.append(
            Rec(
                key=f"{prefix}-key-{i}".encode(),
                value=value,
                timestamp=None if base_ts is None else base_ts + i * step,
                headers=[("h-idx", str(i).encode()), ("h-const", b"\x00\xffbin")] if headers else [],
            )
        )
    return out


# ---------------------------------------------------------------------------------------
# Producers
# ---------------------------------------------------------------------------------------


def kp_producer(bootstrap: str, legacy: bool = False, **kw):
    from kafka import KafkaProducer

    cfg = dict(
        bootstrap_servers=bootstrap,
        request_timeout_ms=REQUEST_TIMEOUT_MS,
        max_block_ms=REQUEST_TIMEOUT_MS,
        delivery_timeout_ms=30_000,
        client_id="chronolog-it-kp010" if legacy else "chronolog-it-kp",
    )
    if legacy:
        cfg["api_version"] = (0, 10, 0)
        # Idempotence needs Produce v3+ (0.11); (0, 10, 0) cannot have it.
        cfg["enable_idempotence"] = False
    cfg.update(kw)
    return KafkaProducer(**cfg)


def produce_kp(bootstrap: str, topic: str, recs: list[Rec], legacy: bool = False,
               partition: int = 0, raise_on_error: bool = True, **kw) -> list:
    """Per record a Produced, or (raise_on_error=False) the exception its future raised."""
    p = kp_producer(bootstrap, legacy=legacy, **kw)
    try:
        futs = []
        for r in recs:
            futs.append(
                p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    partition=partition,
                    timestamp_ms=r.timestamp,
                    headers=(list(r.headers) or None) if not legacy else None,
                )
            )
        p.flush(timeout=30)
        out = []
        for f in futs:
            try:
                md = f.get(timeout=30)
            except Exception as e:  # noqa: BLE001
                if raise_on_error:
                    raise
                out.append(e)
                continue
            out.append(Produced(md.offset, md.timestamp, None, md))
        return out
    finally:
        p.close(timeout=10)


def ck_producer_config(bootstrap: str, **kw) -> dict:
    cfg = {
        "bootstrap.servers": bootstrap,
        "client.id": "chronolog-it-ck",
        "socket.timeout.ms": 10_000,
        "request.timeout.ms": REQUEST_TIMEOUT_MS,
        "message.timeout.ms": 30_000,
        "linger.ms": 5,
    }
    cfg.update(kw)
    return cfg


class DeliveryError(Exception):
    def __init__(self, errors):
        super().__init__(f"{len(errors)} delivery failures, first: {errors[0][1]!r}")
        self.errors = errors  # list of (index, KafkaError)


def produce_ck(bootstrap: str, topic: str, recs: list[Rec], partition: int = 0,
               raise_on_error: bool = True, **kw) -> list:
    """Returns, per record, a Produced or (when raise_on_error=False and it failed) the
    KafkaError of its delivery report."""
    from confluent_kafka import Producer, TIMESTAMP_LOG_APPEND_TIME, TIMESTAMP_CREATE_TIME

    p = Producer(ck_producer_config(bootstrap, **kw))
    if "linger.ms" in kw:
        # a test that relies on records sharing one batch: connect first, so a slow start
        # (a loaded CI machine) cannot outlast the linger and send the first record alone
        p.list_topics(topic, timeout=20)
    results: list = [None] * len(recs)

    def cb_for(i):
        def cb(err, msg):
            if err is not None:
                results[i] = err
            else:
                tstype, ts = msg.timestamp()
                norm = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}.get(tstype)
                results[i] = Produced(msg.offset(), ts, norm, (tstype, ts))

        return cb

    for i, r in enumerate(recs):
        kwargs = dict(key=r.key, value=r.value, partition=partition, on_delivery=cb_for(i))
        if r.timestamp is not None:
            kwargs["timestamp"] = r.timestamp
        if r.headers:
            kwargs["headers"] = list(r.headers)
        while True:
            try:
                p.produce(topic, **kwargs)
                break
            except BufferError:
                p.poll(0.1)
        p.poll(0)
    remaining = p.flush(40)
    assert remaining == 0, f"confluent-kafka: {remaining} messages not delivered within 40 s"
    missing = [i for i, r in enumerate(results) if r is None]
    assert not missing, f"no delivery report for records {missing[:10]}"
    errors = [(i, r) for i, r in enumerate(results) if not isinstance(r, Produced)]
    if errors and raise_on_error:
        raise DeliveryError(errors)
    return results


def produce_batches(bootstrap: str, topic: str, batches: list[tuple[str | None, list[int]]]) -> list[int]:
    """Produce each (codec, [timestamps]) as one batch with confluent-kafka (flush after
    each), returning the timestamp of every offset in order."""
    from confluent_kafka import Producer

    producers = {}
    timestamps: list[int] = []
    results: list = []
    try:
        for codec, stamps in batches:
            p = producers.get(codec)
            if p is None:
                p = producers[codec] = Producer(ck_producer_config(
                    bootstrap, **{"linger.ms": 1000, "compression.type": codec or "none"}))
            for ts in stamps:
                i = len(timestamps)

                def cb(err, msg, i=i):
                    results.append((i, err, None if err else msg.offset()))

                p.produce(topic, key=b"k%d" % i, value=b"v%d-%d" % (i, ts), partition=0,
                          timestamp=ts, on_delivery=cb)
                timestamps.append(ts)
            assert p.flush(30) == 0, "batch not delivered"
    finally:
        for p in producers.values():
            p.flush(5)
    errors = [r for r in results if r[1] is not None]
    assert not errors, f"delivery errors: {errors[:5]}"
    offsets = dict((i, off) for i, _, off in results)
    assert [offsets[i] for i in range(len(timestamps))] == list(range(len(timestamps))), \
        "records did not land at offsets in produce order"
    return timestamps


async def _produce_aio(bootstrap: str, topic: str, recs: list[Rec], partition: int, kw) -> list[Produced]:
    from aiokafka import AIOKafkaProducer

    cfg = dict(bootstrap_servers=bootstrap, request_timeout_ms=REQUEST_TIMEOUT_MS,
               client_id="chronolog-it-aio")
    cfg.update(kw)
    p = AIOKafkaProducer(**cfg)
    await asyncio.wait_for(p.start(), 20)
    try:
        futs = []
        for r in recs:
            futs.append(
                await p.send(
                    topic,
                    key=r.key,
                    value=r.value,
                    partition=partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers) or None,
                )
            )
        out = []
        for f in futs:
            md = await asyncio.wait_for(f, 40)
            out.append(Produced(md.offset, md.timestamp, md.timestamp_type, md))
        return out
    finally:
        await asyncio.wait_for(p.stop(), 20)


def produce_aio(bootstrap: str, topic: str, recs: list[Rec], partition: int = 0, **kw) -> list[Produced]:
    return asyncio.run(_produce_aio(bootstrap, topic, recs, partition, kw))


def produce(client: str, bootstrap: str, topic: str, recs: list[Rec], compression: str | None = None,
            **kw) -> list[Produced]:
    """Produce with one of CLIENTS. ``compression`` is the codec name (or None)."""
    if client in ("kp", "kp010"):
        if compression:
            kw.setdefault("compression_type", compression)
        return produce_kp(bootstrap, topic, recs, legacy=(client == "kp010"), **kw)
    if client == "ck":
        if compression:
            kw.setdefault("compression.type", compression)
        return produce_ck(bootstrap, topic, recs, **kw)
    if client == "aio":
        if compression:
            kw.setdefault("compression_type", compression)
        return produce_aio(bootstrap, topic, recs, **kw)
    raise ValueError(client)


# ---------------------------------------------------------------------------------------
# Consumers
# ---------------------------------------------------------------------------------------


def kp_consumer(bootstrap: str, legacy: bool = False, **kw):
    from kafka import KafkaConsumer

    cfg = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=20_000,
        fetch_max_wait_ms=100,
        client_id="chronolog-it-kp010" if legacy else "chronolog-it-kp",
    )
    if legacy:
        cfg["api_version"] = (0, 10, 0)
    cfg.update(kw)
    return KafkaConsumer(**cfg)


def consume_kp(bootstrap: str, topic: str, n: int, partition: int = 0, start: int = 0,
               legacy: bool = False, timeout: float = CONSUME_TIMEOUT_S, **kw) -> list[Got]:
    from kafka import TopicPartition

    c = kp_consumer(bootstrap, legacy=legacy, **kw)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            batch = c.poll(timeout_ms=500)
            for recs in batch.values():
                for m in recs:
                    out.append(
                        Got(m.offset, m.key, m.value, m.timestamp, m.timestamp_type,
                            [(k, bytes(v) if v is not None else None) for k, v in (m.headers or [])],
                            m.timestamp_type)
                    )
        return out
    finally:
        c.close()


def ck_consumer_config(bootstrap: str, **kw) -> dict:
    cfg = {
        "bootstrap.servers": bootstrap,
        # librdkafka insists on a group.id; the tests only assign() (no group protocol).
        "group.id": "chronolog-it-" + uuid.uuid4().hex[:8],
        "client.id": "chronolog-it-ck",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "enable.partition.eof": False,
        "socket.timeout.ms": 10_000,
        "fetch.wait.max.ms": 100,
        "api.version.request.timeout.ms": 10_000,
    }
    cfg.update(kw)
    return cfg


def ck_ignorable(m) -> bool:
    """Consumer error events that do not concern the fetched partition (librdkafka
    reports client-wide events such as group-coordinator lookups through poll())."""
    from confluent_kafka import KafkaError

    err = m.error()
    if err.code() == KafkaError._PARTITION_EOF:
        return True
    return m.topic() is None and not err.fatal()


def ck_poll(c, timeout: float = 20.0):
    """The next real message (errors about our partitions raise), or None on timeout."""
    from confluent_kafka import KafkaException

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if ck_ignorable(m):
                continue
            raise KafkaException(m.error())
        return m
    return None


def ck_consumer(bootstrap: str, **kw):
    from confluent_kafka import Consumer

    return Consumer(ck_consumer_config(bootstrap, **kw))


def consume_ck(bootstrap: str, topic: str, n: int, partition: int = 0, start: int = 0,
               timeout: float = CONSUME_TIMEOUT_S, **kw) -> list[Got]:
    from confluent_kafka import TopicPartition, KafkaException, TIMESTAMP_CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME

    c = ck_consumer(bootstrap, **kw)
    try:
        c.assign([TopicPartition(topic, partition, start)])
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            msgs = c.consume(num_messages=min(10_000, n - len(out)), timeout=0.5)
            for m in msgs:
                if m.error():
                    if ck_ignorable(m):
                        continue
                    raise KafkaException(m.error())
                tstype, ts = m.timestamp()
                norm = {TIMESTAMP_CREATE_TIME: CREATE_TIME, TIMESTAMP_LOG_APPEND_TIME: LOG_APPEND_TIME}.get(tstype, -1)
                out.append(Got(m.offset(), m.key(), m.value(), ts, norm, list(m.headers() or []), tstype))
        return out
    finally:
        c.close()


async def _consume_aio(bootstrap: str, topic: str, n: int, partition: int, start: int,
                       timeout: float, kw) -> list[Got]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    cfg = dict(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
               auto_offset_reset="earliest", request_timeout_ms=REQUEST_TIMEOUT_MS,
               fetch_max_wait_ms=100, client_id="chronolog-it-aio")
    cfg.update(kw)
    c = AIOKafkaConsumer(**cfg)
    await asyncio.wait_for(c.start(), 20)
    try:
        tp = TopicPartition(topic, partition)
        c.assign([tp])
        c.seek(tp, start)
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        while len(out) < n and time.monotonic() < deadline:
            batch = await c.getmany(tp, timeout_ms=500)
            for m in batch.get(tp, []):
                out.append(Got(m.offset, m.key, m.value, m.timestamp, m.timestamp_type,
                               [(k, bytes(v) if v is not None else None) for k, v in (m.headers or ())],
                               m.timestamp_type))
        return out
    finally:
        await asyncio.wait_for(c.stop(), 20)


def consume_aio(bootstrap: str, topic: str, n: int, partition: int = 0, start: int = 0,
                timeout: float = CONSUME_TIMEOUT_S, **kw) -> list[Got]:
    return asyncio.run(_consume_aio(bootstrap, topic, n, partition, start, timeout, kw))


def consume(client: str, bootstrap: str, topic: str, n: int, **kw) -> list[Got]:
    if client == "kp":
        return consume_kp(bootstrap, topic, n, **kw)
    if client == "kp010":
        return consume_kp(bootstrap, topic, n, legacy=True, **kw)
    if client == "ck":
        return consume_ck(bootstrap, topic, n, **kw)
    if client == "aio":
        return consume_aio(bootstrap, topic, n, **kw)
    raise ValueError(client)


# ---------------------------------------------------------------------------------------
# Offsets
# ---------------------------------------------------------------------------------------


def _edge_offset(which: str, bootstrap: str, topic: str, partition: int) -> int:
    from kafka import TopicPartition

    c = kp_consumer(bootstrap)
    try:
        tp = TopicPartition(topic, partition)
        return getattr(c, which)([tp], timeout_ms=REQUEST_TIMEOUT_MS)[tp]
    finally:
        c.close()


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    return _edge_offset("end_offsets", bootstrap, topic, partition)


def beginning_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    return _edge_offset("beginning_offsets", bootstrap, topic, partition)


class TimeOracle:
    """Kafka's answer for ListOffsets(T): the first offset (in offset order) whose record
    timestamp is >= T, with that record's timestamp; None when no record has a timestamp
    >= T. ``timestamps[i]`` is the timestamp of offset i. (The first such offset is where
    the running maximum first reaches T, so a bisect over the running maxima finds it.)"""

    def __init__(self, timestamps: list[int]):
        self.timestamps = list(timestamps)
        self.running_max = []
        m = None
        for ts in self.timestamps:
            m = ts if m is None or ts > m else m
            self.running_max.append(m)

    def lookup(self, target: int) -> tuple[int, int] | None:
        import bisect

        i = bisect.bisect_left(self.running_max, target)
        if i >= len(self.timestamps):
            return None
        return i, self.timestamps[i]


def oracle_offset_for_time(timestamps: list[int], target: int) -> tuple[int, int] | None:
    """The plain definition (used to cross-check TimeOracle in small cases)."""
    for off, ts in enumerate(timestamps):
        if ts >= target:
            return off, ts
    return None


def query_points(timestamps: Iterable[int]) -> list[int]:
    """Interesting query timestamps: each record timestamp, +-1 around it, below the
    minimum and above the maximum."""
    ts = sorted(set(timestamps))
    pts = {0, ts[0] - 1000, ts[-1] + 1, ts[-1] + 10_000}
    for t in ts:
        pts.update((t - 1, t, t + 1))
    return sorted(p for p in pts if p >= 0)


# ---------------------------------------------------------------------------------------
# Raw protocol (hand-packed, independent of the broker's codec)
# ---------------------------------------------------------------------------------------


def _kstring(s: str | None) -> bytes:
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _kbytes(b: bytes | None) -> bytes:
    if b is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(b)) + b


def request_header_v1(api_key: int, api_version: int, correlation_id: int,
                      client_id: str = "chronolog-it-raw") -> bytes:
    return struct.pack(">hhi", api_key, api_version, correlation_id) + _kstring(client_id)


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


class RawConn:
    """A blocking socket speaking size-prefixed frames."""

    def __init__(self, port: int, timeout: float = 10.0):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=timeout)
        self.sock.settimeout(timeout)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError(f"connection closed after {len(buf)} of {n} bytes")
            buf += chunk
        return bytes(buf)

    def recv_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self.recv_exact(4))
        assert 0 <= size < 100 * 1024 * 1024, f"absurd response size {size}"
        return self.recv_exact(size)

    def request(self, api_key: int, api_version: int, body: bytes, correlation_id: int) -> bytes:
        """Send a request with header v1; return the response after the correlation id
        (asserting it matches)."""
        self.send(frame(request_header_v1(api_key, api_version, correlation_id) + body))
        resp = self.recv_frame()
        (cid,) = struct.unpack_from(">i", resp, 0)
        assert cid == correlation_id, f"correlation id {cid} != {correlation_id}"
        return resp[4:]

    def wait_closed(self, timeout: float = 10.0) -> bool:
        """True when the peer closes (EOF or reset) within timeout; any bytes that arrive
        first are discarded. False on timeout."""
        self.sock.settimeout(timeout)
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                data = self.sock.recv(65536)
                if not data:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False
        return False

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()



def raw_request(port: int, api_key: int, version: int, body, client_id: str = "raw-admin"):
    """One request through our codec on a fresh connection; the decoded response
    (the correlation id checked)."""
    from protocol import codec
    from protocol.messages import RequestHeader

    hdr = RequestHeader(api_key=api_key, api_version=version, correlation_id=4242, client_id=client_id)
    with RawConn(port) as c:
        c.send(codec.encode_request(hdr, body))
        frame = c.recv_frame()
    cid, resp = codec.decode_response(api_key, version, frame)
    assert cid == 4242
    return resp

def parse_api_versions_v0(body: bytes) -> tuple[int, dict[int, tuple[int, int]]]:
    """ApiVersionsResponse v0 body (after the correlation id): error_code, api_keys."""
    error_code, n = struct.unpack_from(">hi", body, 0)
    pos = 6
    keys = {}
    for _ in range(max(n, 0)):
        k, lo, hi = struct.unpack_from(">hhh", body, pos)
        pos += 6
        keys[k] = (lo, hi)
    return error_code, keys


def build_v2_batch(records: list[Rec], compression: int = 0) -> bytearray:
    """A magic-2 record batch built with kafka-python's record builder (not ours)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 20)
    for i, r in enumerate(records):
        b.append(i, timestamp=r.timestamp, key=r.key, value=r.value, headers=list(r.headers))
    return bytearray(b.build())


def produce_request_v3(topic: str, partition: int, records: bytes, acks: int = 1,
                       timeout_ms: int = 10_000) -> bytes:
    body = _kstring(None)  # transactional_id
    body += struct.pack(">hi", acks, timeout_ms)
    body += struct.pack(">i", 1) + _kstring(topic)
    body += struct.pack(">i", 1) + struct.pack(">i", partition) + _kbytes(bytes(records))
    return body


def parse_produce_response_v3(body: bytes) -> dict[tuple[str, int], tuple[int, int, int]]:
    """-> {(topic, partition): (error_code, base_offset, log_append_time)}."""
    pos = 0
    (nt,) = struct.unpack_from(">i", body, pos)
    pos += 4
    out = {}
    for _ in range(nt):
        (ln,) = struct.unpack_from(">h", body, pos)
        pos += 2
        name = body[pos:pos + ln].decode()
        pos += ln
        (np_,) = struct.unpack_from(">i", body, pos)
        pos += 4
        for _ in range(np_):
            p, err, base, lat = struct.unpack_from(">ihqq", body, pos)
            pos += 22
            out[(name, p)] = (err, base, lat)
    return out


def metadata_request_v1(topics: list[str] | None) -> bytes:
    if topics is None:
        return struct.pack(">i", -1)
    return struct.pack(">i", len(topics)) + b"".join(_kstring(t) for t in topics)


# ---------------------------------------------------------------------------------------
# Assertions
# ---------------------------------------------------------------------------------------


def assert_offsets_contiguous(got: list[Got], n: int, start: int = 0, who: str = "") -> None:
    offs = [g.offset for g in got]
    expected = list(range(start, start + n))
    if offs != expected:
        missing = sorted(set(expected) - set(offs))[:10]
        extra = sorted(set(offs) - set(expected))[:10]
        raise AssertionError(
            f"{who}: consumed {len(offs)} records, expected offsets {start}..{start + n - 1}; "
            f"missing {missing}, unexpected {extra}, first offsets {offs[:10]}"
        )


def assert_records_equal(got: list[Got], recs: list[Rec], *, start: int = 0,
                         ts_type: int | None = CREATE_TIME, headers: bool = True,
                         who: str = "") -> None:
    """Offsets contiguous from ``start``; key, value equal; for CreateTime the exact
    producer timestamp; the timestamp type; headers equal (or none when the consumer's
    format has none)."""
    assert_offsets_contiguous(got, len(recs), start, who)
    for i, (g, r) in enumerate(zip(got, recs)):
        ctx = f"{who}: offset {g.offset}"
        assert g.key == r.key, f"{ctx}: key {g.key!r} != produced {r.key!r}"
        assert g.value == r.value, f"{ctx}: value {g.value!r:.80} != produced {r.value!r:.80}"
        if ts_type is not None:
            assert g.timestamp_type == ts_type, (
                f"{ctx}: timestamp type {g.timestamp_type} (raw {g.raw_ts_type!r}) != {ts_type}")
        if ts_type == CREATE_TIME and r.timestamp is not None:
            assert g.timestamp == r.timestamp, f"{ctx}: timestamp {g.timestamp} != produced {r.timestamp}"
        expected_headers = list(r.headers) if headers else []
        assert list(g.headers) == expected_headers, f"{ctx}: headers {g.headers!r} != {expected_headers!r}"


# ---------------------------------------------------------------------------------------
# ListOffsets through the clients
# ---------------------------------------------------------------------------------------

#: Clients that can search by timestamp: consumers and admin clients.
TIME_CLIENTS = ("kp", "kp-admin", "ck", "ck-admin", "aio")


def ck_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000,
                        "client.id": "chronolog-it-ck-admin"})


async def _aio_offsets_for_times(bootstrap: str, topic: str, partition: int, targets: list[int]):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                         request_timeout_ms=REQUEST_TIMEOUT_MS, client_id="chronolog-it-aio")
    await asyncio.wait_for(c.start(), 20)
    try:
        tp = TopicPartition(topic, partition)
        out = {}
        for t in targets:
            r = (await asyncio.wait_for(c.offsets_for_times({tp: t}), 20))[tp]
            out[t] = None if r is None else (r.offset, r.timestamp)
        return out
    finally:
        await asyncio.wait_for(c.stop(), 20)


def offsets_for_times(client: str, bootstrap: str, topic: str, targets: list[int],
                      partition: int = 0) -> dict[int, tuple[int, int | None] | None]:
    """{target: (offset, timestamp) or None}. timestamp is None where the client does not
    return it (confluent's Consumer.offsets_for_times)."""
    out: dict[int, tuple[int, int | None] | None] = {}
    if client == "kp":
        from kafka import TopicPartition

        c = kp_consumer(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            for t in targets:
                r = c.offsets_for_times({tp: t}, timeout_ms=REQUEST_TIMEOUT_MS)[tp]
                out[t] = None if r is None else (r.offset, r.timestamp)
        finally:
            c.close()
    elif client == "kp-admin":
        from kafka import TopicPartition

        a = kp_admin(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            for t in targets:
                r = a.list_partition_offsets({tp: t})[tp]
                out[t] = None if r.offset == -1 else (r.offset, r.timestamp)
        finally:
            a.close()
    elif client == "ck":
        from confluent_kafka import TopicPartition

        c = ck_consumer(bootstrap)
        try:
            for t in targets:
                (r,) = c.offsets_for_times([TopicPartition(topic, partition, t)], timeout=15)
                assert r.error is None, f"offsets_for_times({t}): {r.error}"
                out[t] = None if r.offset < 0 else (r.offset, None)
        finally:
            c.close()
    elif client == "ck-admin":
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        a = ck_admin(bootstrap)
        tp = TopicPartition(topic, partition)
        for t in targets:
            r = a.list_offsets({tp: OffsetSpec.for_timestamp(t)}, request_timeout=15)[tp].result(timeout=20)
            out[t] = None if r.offset < 0 else (r.offset, r.timestamp)
    elif client == "aio":
        out = asyncio.run(_aio_offsets_for_times(bootstrap, topic, partition, targets))
    else:
        raise ValueError(client)
    return out


def special_offsets(client: str, bootstrap: str, topic: str, partition: int = 0) -> dict:
    """{'earliest': int, 'latest': int, and where the client exposes ListOffsets -3:
    'max_timestamp': (offset, timestamp)}."""
    if client in ("kp", "aio"):
        if client == "kp":
            return {"earliest": beginning_offset(bootstrap, topic, partition),
                    "latest": end_offset(bootstrap, topic, partition)}

        async def run():
            from aiokafka import AIOKafkaConsumer, TopicPartition

            c = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False,
                                 request_timeout_ms=REQUEST_TIMEOUT_MS)
            await asyncio.wait_for(c.start(), 20)
            try:
                tp = TopicPartition(topic, partition)
                b = await asyncio.wait_for(c.beginning_offsets([tp]), 20)
                e = await asyncio.wait_for(c.end_offsets([tp]), 20)
                return {"earliest": b[tp], "latest": e[tp]}
            finally:
                await asyncio.wait_for(c.stop(), 20)

        return asyncio.run(run())
    if client == "kp-admin":
        from kafka import TopicPartition
        from kafka.admin import OffsetSpec

        a = kp_admin(bootstrap)
        try:
            tp = TopicPartition(topic, partition)
            e = a.list_partition_offsets({tp: OffsetSpec.EARLIEST})[tp]
            l_ = a.list_partition_offsets({tp: OffsetSpec.LATEST})[tp]
            m = a.list_partition_offsets({tp: OffsetSpec.MAX_TIMESTAMP})[tp]
            return {"earliest": e.offset, "latest": l_.offset, "max_timestamp": (m.offset, m.timestamp)}
        finally:
            a.close()
    if client == "ck":
        from confluent_kafka import TopicPartition

        c = ck_consumer(bootstrap)
        try:
            low, high = c.get_watermark_offsets(TopicPartition(topic, partition), timeout=15, cached=False)
            return {"earliest": low, "latest": high}
        finally:
            c.close()
    if client == "ck-admin":
        from confluent_kafka import TopicPartition
        from confluent_kafka.admin import OffsetSpec

        a = ck_admin(bootstrap)
        tp = TopicPartition(topic, partition)

        def q(spec):
            return a.list_offsets({tp: spec}, request_timeout=15)[tp].result(timeout=20)

        e, l_, m = q(OffsetSpec.earliest()), q(OffsetSpec.latest()), q(OffsetSpec.max_timestamp())
        return {"earliest": e.offset, "latest": l_.offset, "max_timestamp": (m.offset, m.timestamp)}
    raise ValueError(client)


def oracle_max_timestamp(timestamps: list[int]) -> tuple[int, int]:
    if not timestamps:
        return (-1, -1)
    m = max(timestamps)
    return timestamps.index(m), m


def compare_offsets_for_times(client: str, answers: dict, timestamps: list[int]) -> None:
    wrong = []
    oracle = TimeOracle(timestamps)
    for t, got in sorted(answers.items()):
        want = oracle.lookup(t)
        if len(timestamps) <= 200:
            assert want == oracle_offset_for_time(timestamps, t)
        if want is None:
            ok = got is None
        elif got is None:
            ok = False
        else:
            ok = got[0] == want[0] and (got[1] is None or got[1] == want[1])
        if not ok:
            wrong.append((t, got, want))
    if wrong:
        base = min(timestamps) if timestamps else 0
        lines = [f"  T={t} (min+{t - base}): got {g}, expected {w}" for t, g, w in wrong[:15]]
        raise AssertionError(
            f"{client}: {len(wrong)} of {len(answers)} offsets_for_times answers differ from the "
            f"oracle (first offset with timestamp >= T):\n" + "\n".join(lines))


def wait_for(pred, timeout: float, what: str, interval: float = 0.2):
    """Poll ``pred`` until it returns something truthy (returned) or ``timeout`` seconds
    pass (AssertionError naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)


def produce_to_partitions(bootstrap: str, topic: str, items, **config) -> None:
    """confluent-kafka, acks=all: ``items`` are (partition, value, timestamp or None);
    fails unless every record is acknowledged."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "acks": "all", **config})
    errors = []
    for partition, value, ts in items:
        kw = {} if ts is None else {"timestamp": ts}
        p.produce(topic, value=value, partition=partition, on_delivery=lambda err, msg: err and errors.append(err),
                  **kw)
        p.poll(0)
    assert p.flush(60) == 0 and not errors, errors[:3]


def consume_partitions(bootstrap: str, topic: str, partitions: int, expect: int,
                       timeout: float = 60) -> dict[int, list[bytes]]:
    """confluent-kafka assigned every partition from offset 0: the values read, by
    partition, once ``expect`` records have come (or ``timeout``)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": unique_topic("g"), "enable.auto.commit": False})
    c.assign([TopicPartition(topic, part, 0) for part in range(partitions)])
    got: dict[int, list[bytes]] = {}
    deadline = time.monotonic() + timeout
    while sum(map(len, got.values())) < expect and time.monotonic() < deadline:
        for m in c.consume(1000, 0.5):
            if m.error() is None:
                got.setdefault(m.partition(), []).append(m.value())
    c.close()
    return got
