#!/usr/bin/env python3
"""Log-lifecycle benchmark: clean restart, unclean recovery, ListOffsets-by-time lookups.

Targets it reports against:

* clean restart < 1 s, whatever the size of the log;
* unclean recovery >= 200 MB/s of .log data rescanned;
* ListOffsets by timestamp p99 < 1 ms on a partition of 10M records.

Logs are built in-process, fast, by appending pre-built v2 batches (100-byte records,
increasing timestamps with jitter) to a ``storage.log_manager.LogManager`` with the
default topic config (segment.bytes 1 GiB, index.interval.bytes 4096), then shut down
cleanly. Every startup is timed in a *fresh* Python process (nothing cached in Python
objects; the OS page cache stays warm unless the run is marked "cold", where the log
dir's files were evicted with posix_fadvise(DONTNEED) first).

    .venv/bin/python bench/lifecycle.py                         # 2 GB log, 10k..10M lookups
    .venv/bin/python bench/lifecycle.py --size-gb 0.1 --lookup-sizes 10000,100000
    .venv/bin/python bench/lifecycle.py --only lookup --json-out /tmp/lookup.json

See bench/README.md.
"""

from __future__ import annotations

import argparse
import bisect
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:  # storage/, protocol/, config/ of this checkout
    sys.path.insert(0, str(REPO))

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.lifecycle
    from bench import _machine, _proc
except ImportError:
    import _machine
    import _proc

HOST = "127.0.0.1"
TOPIC = "lifecycle"
MEASUREMENTS = ("restart", "recovery", "lookup")
CLEAN_SHUTDOWN_FILE = ".kafka_cleanshutdown"  # Kafka's names (storage/checkpoint.py)
RECOVERY_POINT_CHECKPOINT = "recovery-point-offset-checkpoint"
API_LIST_OFFSETS, API_METADATA = 2, 3
LIST_OFFSETS_VERSION = 7
LATEST_TIMESTAMP = -1
RECORD_OVERHEAD = 10  # approx. bytes per 100-byte record beyond its value (varints etc.)
V2_HEADER = 61


class BenchError(Exception):
    """A measurement failed; the message says which and why."""


class VerificationError(BenchError):
    """An answer differed from the scan oracle."""


def log(msg: str) -> None:
    print(f"[lifecycle {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------
# Child processes (killed by the watchdog whatever happens)

_CHILDREN: list[subprocess.Popen] = []
_CLEANUP_DIRS: list[Path] = []
_LOCK = threading.Lock()


def python_exe() -> str:
    venv = REPO / ".venv" / "bin" / "python"
    return str(venv) if venv.exists() else sys.executable


def child_env() -> dict[str, str]:
    """The environment of every child: this checkout first on the path, and no
    CHRONOLOG_* variables (the in-process builder ignores them too)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env


def spawn(cmd: list[str], **kw) -> subprocess.Popen:
    proc = subprocess.Popen(cmd, env=child_env(), cwd=REPO, start_new_session=True,
                            stdin=subprocess.DEVNULL, **kw)
    with _LOCK:
        _CHILDREN.append(proc)
    return proc


def finish(proc: subprocess.Popen, grace: float = 30.0) -> int | None:
    """SIGTERM the child's process group, SIGKILL after `grace` s; returns its exit code."""
    _proc.stop_group(proc, grace)
    with _LOCK:
        if proc in _CHILDREN:
            _CHILDREN.remove(proc)
    return proc.returncode


def _watchdog(limit: float) -> threading.Timer:
    """Last resort: if the run is still going after `limit` s, kill every child, remove
    the work dir and exit 124."""

    def fire() -> None:
        log(f"watchdog: the whole run exceeded {limit:.0f} s; killing children and exiting")
        with _LOCK:
            procs, dirs = list(_CHILDREN), list(_CLEANUP_DIRS)
        for p in procs:
            _proc.killpg_quiet(p.pid, signal.SIGKILL)
        for d in dirs:
            shutil.rmtree(d, ignore_errors=True)
        os._exit(124)

    t = threading.Timer(limit, fire)
    t.daemon = True
    t.start()
    return t


# --------------------------------------------------------------------------------------
# Building logs in-process


def broker_config(data_dir: Path):
    from config import load_broker_config
    return load_broker_config(None, [f"log.dirs={data_dir}"], env={}, warn=False)


class BatchTemplate:
    """One pre-built v2 batch of `n` records; `patch` re-stamps it for the next append.

    Record j of a batch whose first record is nominally at `start_ts` has the timestamp
    ``start_ts + j * step_ms + jitter_j`` (jitter_j uniform in [-jitter_ms, jitter_ms],
    fixed per template), so timestamps go backwards inside a batch and across batch
    boundaries while increasing on average. Patching changes baseTimestamp and
    maxTimestamp (the record deltas are relative to baseTimestamp), resets baseOffset to
    0 (the broker assigns offsets, in place) and recomputes the CRC.
    """

    def __init__(self, n: int, value_size: int, step_ms: int, jitter_ms: int, rng: random.Random):
        from protocol.records import build_batch

        self.n = n
        self.ts = [j * step_ms + rng.randint(-jitter_ms, jitter_ms) for j in range(n)]
        base = 10 ** 12  # any positive timestamp: patched per append
        self.buf = bytearray(build_batch(
            [(base + t, None, rng.randbytes(value_size)) for t in self.ts]))
        self.first = self.ts[0]
        self.max = max(self.ts)
        self._view = memoryview(self.buf)

    def patch(self, start_ts: int) -> bytearray:
        import crc32c

        buf = self.buf
        struct.pack_into(">q", buf, 0, 0)
        struct.pack_into(">qq", buf, 27, start_ts + self.first, start_ts + self.max)
        struct.pack_into(">I", buf, 17, crc32c.crc32c(self._view[21:]))
        return buf


def records_per_batch(batch_bytes: int, value_size: int) -> int:
    return max(1, (batch_bytes - V2_HEADER) // (value_size + RECORD_OVERHEAD))


def partition_dir(data_dir: Path) -> Path:
    return data_dir / f"{TOPIC}-0"


def log_files(data_dir: Path) -> list[Path]:
    return sorted(partition_dir(data_dir).glob("*.log"))


def dir_files(data_dir: Path) -> list[Path]:
    return [p for p in data_dir.rglob("*") if p.is_file()]


def build_log(data_dir: Path, args: argparse.Namespace, *, target_bytes: int | None = None,
              records: int | None = None, seed: int = 1) -> dict[str, Any]:
    """Create topic TOPIC (1 partition) and append until `target_bytes` of .log data or
    `records` records; clean shutdown. Returns what was built (sizes from the files)."""
    from storage.clock import SystemClock
    from storage.log_manager import LogManager

    rng = random.Random(seed)
    n = records_per_batch(args.batch_kb * 1024, args.value_size)
    tmpl = BatchTemplate(n, args.value_size, args.step_ms, args.jitter_ms, rng)
    batch_bytes = len(tmpl.buf)
    # timestamps start a day ago: well inside retention.ms (7 days) and far from
    # segment.ms (7 days) for any log this benchmark builds at 1 ms per record
    t0 = (int(time.time() * 1000) - 86_400_000) // 1000 * 1000
    lm = LogManager(broker_config(data_dir), SystemClock())
    lm.startup()
    lm.create_topic(TOPIC, 1, {})
    lg = lm.get_log(TOPIC, 0)
    appended = batches = written = 0
    started = last_report = time.monotonic()
    try:
        while True:
            if records is not None:
                left = records - appended
                if left <= 0:
                    break
                if left < tmpl.n:
                    tmpl = BatchTemplate(left, args.value_size, args.step_ms, args.jitter_ms, rng)
            elif written >= target_bytes:
                break
            buf = tmpl.patch(t0 + appended * args.step_ms)
            lg.append(buf, in_place=True)
            appended += tmpl.n
            batches += 1
            written += len(buf)
            now = time.monotonic()
            if now - last_report >= 5:
                last_report = now
                goal = (f"{appended:,}/{records:,} records" if records is not None
                        else f"{written / 1e9:.2f}/{target_bytes / 1e9:.2f} GB")
                log(f"  building: {goal} ({written / (now - started) / 1e6:.0f} MB/s)")
        leo = lg.log_end_offset
    finally:
        lm.shutdown()
    secs = time.monotonic() - started
    if leo != appended:
        raise BenchError(f"built {appended} records but the log end offset is {leo}")
    files = log_files(data_dir)
    size = sum(p.stat().st_size for p in files)
    t_last = t0 + (appended - tmpl.n) * args.step_ms + tmpl.max if appended else t0
    return {
        "records": appended, "batches": batches, "records_per_batch": n,
        "batch_bytes": batch_bytes,
        "log_bytes": size, "segments": len(files), "build_seconds": secs,
        "build_mb_per_s": size / secs / 1e6 if secs > 0 else None,
        "first_nominal_ts": t0, "last_nominal_ts": t_last,
    }


# --------------------------------------------------------------------------------------
# Page cache


def resident_bytes(paths: list[Path]) -> int | None:
    """Bytes of these files in the page cache (util-linux fincore), or None."""
    exe = shutil.which("fincore")
    if not exe or not paths:
        return None
    total = 0
    for i in range(0, len(paths), 200):
        try:
            out = subprocess.run([exe, "--bytes", "--noheadings", "--raw", "--output", "RES",
                                  *map(str, paths[i:i + 200])],
                                 capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        if out.returncode != 0:
            return None
        total += sum(int(x) for x in out.stdout.split())
    return total


def evict(paths: list[Path]) -> None:
    """Drop these files' pages from the page cache: fsync (dirty pages are not dropped),
    then posix_fadvise(POSIX_FADV_DONTNEED). Touches nothing else on the machine (unlike
    /proc/sys/vm/drop_caches)."""
    for p in paths:
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def warm_cache(paths: list[Path]) -> None:
    """Read these files once so that their pages are in the page cache."""
    buf = bytearray(8 << 20)
    for p in paths:
        with open(p, "rb", buffering=0) as f:
            while f.readinto(buf):
                pass


def resident_fraction(paths: list[Path]) -> float | None:
    res = resident_bytes(paths)
    total = sum(p.stat().st_size for p in paths)
    return None if res is None or not total else res / total


# --------------------------------------------------------------------------------------
# LogManager startup in a fresh process


def _read_proc_io() -> dict[str, int]:
    out = {}
    try:
        with open("/proc/self/io") as f:
            for line in f:
                k, _, v = line.partition(":")
                out[k.strip()] = int(v)
    except (OSError, ValueError):
        pass
    return out


def child_startup(data_dir: str) -> int:
    """Child mode: time LogManager(...).startup() on `data_dir`, then shut down cleanly
    (restoring the clean-shutdown marker); print one JSON line on stdout."""
    t_enter = time.perf_counter()
    import logging

    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    from storage.clock import SystemClock
    from storage.log_manager import LogManager

    cfg = broker_config(Path(data_dir))
    t_imported = time.perf_counter()
    io0, cpu0 = _read_proc_io(), os.times()
    t0 = time.perf_counter()
    lm = LogManager(cfg, SystemClock())
    lm.startup()
    t1 = time.perf_counter()
    io1, cpu1 = _read_proc_io(), os.times()
    logs = {f"{t}-{p}": {"log_start_offset": lg.log_start_offset,
                         "log_end_offset": lg.log_end_offset,
                         "segments": len(lg.segments), "size": lg.size_in_bytes}
            for (t, p), lg in lm.logs().items()}
    t2 = time.perf_counter()
    lm.shutdown()
    t3 = time.perf_counter()
    print(json.dumps({
        "import_s": t_imported - t_enter,
        "startup_s": t1 - t0,
        "startup_cpu_s": (cpu1.user + cpu1.system) - (cpu0.user + cpu0.system),
        "startup_rchar": io1.get("rchar", 0) - io0.get("rchar", 0),
        "startup_read_bytes": io1.get("read_bytes", 0) - io0.get("read_bytes", 0),
        "shutdown_s": t3 - t2,
        "logs": logs,
    }), flush=True)
    return 0


_RECOVERED_RE = re.compile(r"recovered (\d+) segment\(s\), (\d+) bytes in ([\d.]+) s")
_LOADED_RE = re.compile(r"loaded (\d+) partition log\(s\) from (\d+) log dir\(s\) in ([\d.]+) s \((.*)\)")


def run_child_startup(data_dir: Path, timeout: float) -> dict[str, Any]:
    cmd = [python_exe(), str(Path(__file__).resolve()), "--child-startup", str(data_dir)]
    t0 = time.perf_counter()
    proc = spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        finish(proc, grace=1)
        raise BenchError(f"LogManager startup on {data_dir} did not finish within {timeout:g} s")
    wall = time.perf_counter() - t0
    finish(proc)
    err_text = err.decode(errors="replace")
    if proc.returncode != 0:
        raise BenchError(f"startup child exited with {proc.returncode}:\n{err_text[-3000:]}")
    try:
        res = json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as e:
        raise BenchError(f"startup child printed no result ({e}):\n{err_text[-3000:]}") from e
    res["process_wall_s"] = wall
    rec = _RECOVERED_RE.findall(err_text)
    res["reported_recovered_segments"] = sum(int(r[0]) for r in rec)
    res["reported_recovered_bytes"] = sum(int(r[1]) for r in rec)
    m = _LOADED_RE.search(err_text)
    res["reported_load"] = m.group(4) if m else None
    res["warnings"] = [l for l in err_text.splitlines() if " WARNING " in l or " ERROR " in l][:10]
    return res


# --------------------------------------------------------------------------------------
# Raw Kafka protocol client (Chronolog's codec)


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


class RawClient:
    def __init__(self, port: int, timeout: float = 30.0):
        self.sock = socket.create_connection((HOST, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._size = bytearray(4)

    def close(self) -> None:
        self.sock.close()

    def _recv_exact(self, buf) -> None:
        view = memoryview(buf)
        while len(view):
            n = self.sock.recv_into(view)
            if n == 0:
                raise BenchError("the broker closed the connection")
            view = view[n:]

    def roundtrip(self, request: bytes) -> bytes:
        """Send one framed request, return the response frame (without its size)."""
        self.sock.sendall(request)
        self._recv_exact(self._size)
        (n,) = struct.unpack(">i", self._size)
        frame = bytearray(n)
        self._recv_exact(frame)
        return bytes(frame)


def encode(api_key: int, version: int, correlation_id: int, body) -> bytes:
    from protocol import codec
    from protocol.messages import RequestHeader

    return codec.encode_request(RequestHeader(api_key=api_key, api_version=version,
                                              correlation_id=correlation_id,
                                              client_id="lifecycle-bench"), body)


def list_offsets_request(correlation_id: int, timestamp: int) -> bytes:
    from protocol.messages import ListOffsetsRequest as L

    body = L(replica_id=-1, isolation_level=0, topics=[L.ListOffsetsTopic(
        name=TOPIC, partitions=[L.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1,
                                                       timestamp=timestamp)])])
    return encode(API_LIST_OFFSETS, LIST_OFFSETS_VERSION, correlation_id, body)


def decode_list_offsets(frame: bytes, correlation_id: int) -> tuple[int, int, int]:
    """(error_code, offset, timestamp) of the single partition in the answer."""
    from protocol import codec

    cid, resp = codec.decode_response(API_LIST_OFFSETS, LIST_OFFSETS_VERSION, frame)
    if cid != correlation_id:
        raise BenchError(f"ListOffsets answer has correlation id {cid}, expected {correlation_id}")
    (t,) = resp.topics
    (p,) = t.partitions
    return p.error_code, p.offset, p.timestamp


def metadata_ready(port: int, expect_topic: bool) -> bool:
    """True once the broker answers Metadata v1 (all topics) with itself as a broker and,
    if `expect_topic`, TOPIC with 1 partition and no error."""
    from protocol import codec
    from protocol.messages import MetadataRequest

    try:
        c = RawClient(port, timeout=10)
    except OSError:
        return False
    try:
        frame = c.roundtrip(encode(API_METADATA, 1, 1, MetadataRequest(topics=None)))
        _, resp = codec.decode_response(API_METADATA, 1, frame)
    except (OSError, BenchError):
        return False
    finally:
        c.close()
    if not resp.brokers:
        return False
    if not expect_topic:
        return True
    return any(t.name == TOPIC and t.error_code == 0 and len(t.partitions) == 1
               for t in resp.topics)


class Broker:
    """`python -m broker serve` on a log dir and a free port, in its own process group."""

    def __init__(self, data_dir: Path, log_path: Path):
        self.port = free_port()
        self.data_dir = data_dir
        self.log_path = log_path
        self.cmd = [python_exe(), "-m", "broker", "serve",
                    "--override", f"listeners=PLAINTEXT://{HOST}:{self.port}",
                    "--override", f"log.dirs={data_dir}"]
        self.proc: subprocess.Popen | None = None

    def log_tail(self, n: int = 30) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return "(no log)"

    def start_and_wait(self, timeout: float, expect_topic: bool) -> float:
        """Start, return seconds from just before spawning to the first good Metadata answer."""
        with open(self.log_path, "wb") as out:
            t0 = time.perf_counter()
            self.proc = spawn(self.cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = t0 + timeout
        while True:
            if self.proc.poll() is not None:
                raise BenchError(f"broker exited with {self.proc.returncode} during start-up\n"
                                 f"--- log tail ---\n{self.log_tail()}")
            if metadata_ready(self.port, expect_topic):
                return time.perf_counter() - t0
            if time.perf_counter() > deadline:
                raise BenchError(f"broker did not answer Metadata within {timeout:g} s\n"
                                 f"--- log tail ---\n{self.log_tail()}")
            time.sleep(0.005)

    def loaded_line(self) -> dict[str, Any] | None:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return None
        m = _LOADED_RE.search(text)
        return {"seconds": float(m.group(3)), "how": m.group(4)} if m else None

    def stop(self) -> int | None:
        """SIGTERM (orderly shutdown: the broker writes its clean-shutdown marker)."""
        if self.proc is None:
            return None
        return finish(self.proc, grace=60)


def time_broker_start(data_dir: Path, workdir: Path, timeout: float, expect_topic: bool,
                      name: str) -> dict[str, Any]:
    b = Broker(data_dir, workdir / f"broker-{name}.log")
    try:
        secs = b.start_and_wait(timeout, expect_topic)
        loaded = b.loaded_line()
    finally:
        rc = b.stop()
    if rc != 0:
        raise BenchError(f"broker exited with {rc} on SIGTERM (expected 0)\n{b.log_tail()}")
    return {"time_to_first_metadata_s": secs,
            "logmanager_startup_s_logged": loaded["seconds"] if loaded else None,
            "load_mode_logged": loaded["how"] if loaded else None,
            "command": " ".join(b.cmd)}


# --------------------------------------------------------------------------------------
# Scan oracle for ListOffsets by time (reads the .log files with protocol.records only)


class ScanOracle:
    def __init__(self, data_dir: Path):
        from protocol.records import parse_batch_header

        self.prefix_max: list[int] = []
        self.where: list[tuple[Path, int, int]] = []
        best = -1
        self.records = 0
        self.last_offset = -1
        for path in log_files(data_dir):
            size = path.stat().st_size
            with open(path, "rb") as f:
                fd = f.fileno()
                pos = 0
                while pos + V2_HEADER <= size:
                    hdr = parse_batch_header(os.pread(fd, V2_HEADER, pos), 0)
                    if pos + hdr.size > size:
                        break
                    best = max(best, hdr.max_timestamp)
                    self.prefix_max.append(best)
                    self.where.append((path, pos, hdr.size))
                    self.records += hdr.records_count
                    self.last_offset = hdr.last_offset
                    pos += hdr.size
        self._cache: dict[int, tuple[int, int] | None] = {}

    def answer(self, ts: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record (in offset order) with timestamp >= ts."""
        if ts in self._cache:
            return self._cache[ts]
        from protocol.records import iter_records, parse_batch_header

        i = bisect.bisect_left(self.prefix_max, ts)
        found = None
        if i < len(self.prefix_max):
            path, pos, size = self.where[i]
            with open(path, "rb") as f:
                buf = os.pread(f.fileno(), size, pos)
            hdr = parse_batch_header(buf, 0)
            for rec in iter_records(buf, 0, hdr):
                if rec.timestamp >= ts:
                    found = (rec.offset, rec.timestamp)
                    break
            if found is None:
                raise BenchError(f"oracle: batch at {path}:{pos} has maxTimestamp "
                                 f"{hdr.max_timestamp} >= {ts} but no record reaches it")
        self._cache[ts] = found
        return found


# --------------------------------------------------------------------------------------
# Statistics


def pct(sorted_vals: list[float], p: float) -> float:
    """Nearest-rank percentile of an ascending list."""
    k = max(0, min(len(sorted_vals) - 1, math.ceil(p / 100 * len(sorted_vals)) - 1))
    return sorted_vals[k]


def latency_summary(ns: list[int]) -> dict[str, Any]:
    s = sorted(ns)
    return {"n": len(s), "p50_us": pct(s, 50) / 1e3, "p99_us": pct(s, 99) / 1e3,
            "max_us": s[-1] / 1e3, "mean_us": statistics.fmean(s) / 1e3}


def spread(vals: list[float]) -> dict[str, float]:
    return {"median": statistics.median(vals), "min": min(vals), "max": max(vals)}


# --------------------------------------------------------------------------------------
# Measurements


def clean_marker(data_dir: Path) -> Path:
    return data_dir / CLEAN_SHUTDOWN_FILE


def measure_restart(data_dir: Path, built: dict[str, Any], args, workdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    expect_leo = built["records"]
    if not clean_marker(data_dir).exists():
        log(f"  note: no {CLEAN_SHUTDOWN_FILE} after the clean shutdown (startup will treat the "
            "log as unclean)")
    res["marker_present_after_build"] = clean_marker(data_dir).exists()

    def check(r: dict[str, Any]) -> None:
        got = r["logs"].get(f"{TOPIC}-0", {}).get("log_end_offset")
        if got != expect_leo:
            raise BenchError(f"after startup the log end offset is {got}, expected {expect_leo}")

    warm_cache(dir_files(data_dir))
    res["warm_resident_fraction"] = resident_fraction(log_files(data_dir))
    runs = []
    for i in range(args.runs):
        r = run_child_startup(data_dir, args.step_timeout)
        check(r)
        runs.append(r)
        log(f"  clean LogManager.startup() run {i + 1}: {r['startup_s'] * 1e3:.1f} ms "
            f"(read {r['startup_rchar'] / 1e6:.1f} MB via read/pread; recovered "
            f"{r['reported_recovered_bytes']:,} bytes)")
    res["warm_runs"] = runs
    res["warm_startup_s"] = spread([r["startup_s"] for r in runs])
    res["warm_process_wall_s"] = spread([r["process_wall_s"] for r in runs])
    empty = workdir / "empty-data"
    empty.mkdir(exist_ok=True)
    b_empty = [time_broker_start(empty, workdir, args.step_timeout, False, "empty")
               for _ in range(args.runs)]
    res["broker_empty_runs"] = b_empty
    res["broker_empty_s"] = spread([b["time_to_first_metadata_s"] for b in b_empty])
    log(f"  broker start -> first Metadata, empty log dir: "
        f"{res['broker_empty_s']['median'] * 1e3:.0f} ms (median of {args.runs})")
    b_full = []
    for _ in range(args.runs):
        b = time_broker_start(data_dir, workdir, args.step_timeout, True, "restart")
        b_full.append(b)
    res["broker_runs"] = b_full
    res["broker_s"] = spread([b["time_to_first_metadata_s"] for b in b_full])
    log(f"  broker start -> first Metadata, {built['log_bytes'] / 1e9:.2f} GB log: "
        f"{res['broker_s']['median'] * 1e3:.0f} ms (median of {args.runs}; "
        f"LogManager logged {b_full[-1]['logmanager_startup_s_logged']} s, "
        f"{b_full[-1]['load_mode_logged']})")
    if args.cold:  # last: evicting would make the next "warm" run cold
        files = dir_files(data_dir)
        evict(files)
        res["cold_resident_before"] = resident_bytes(files)
        r = run_child_startup(data_dir, args.step_timeout)
        check(r)
        res["cold_run"] = r
        log(f"  clean LogManager.startup() cold: {r['startup_s'] * 1e3:.1f} ms "
            f"({r['startup_read_bytes'] / 1e6:.1f} MB read from disk)")
    res["loadavg_after"] = os.getloadavg()
    return res


def crash(data_dir: Path) -> list[str]:
    """Simulate a crash: remove the clean-shutdown marker and the recovery-point
    checkpoint (so every segment is recovered from offset 0)."""
    removed = []
    for name in (CLEAN_SHUTDOWN_FILE, RECOVERY_POINT_CHECKPOINT):
        p = data_dir / name
        if p.exists():
            p.unlink()
            removed.append(name)
    return removed


def measure_recovery(data_dir: Path, built: dict[str, Any], args, workdir: Path) -> dict[str, Any]:
    res: dict[str, Any] = {"loadavg_before": os.getloadavg()}
    expect_leo = built["records"]

    def one(cold: bool) -> dict[str, Any]:
        removed = crash(data_dir)
        files = log_files(data_dir)
        sizes_before = {p.name: p.stat().st_size for p in files}
        rescan = sum(sizes_before.values())  # no recovery point: every segment, from byte 0
        if cold:
            evict(dir_files(data_dir))
        resident = resident_bytes(files)
        r = run_child_startup(data_dir, args.step_timeout)
        got = r["logs"].get(f"{TOPIC}-0", {}).get("log_end_offset")
        if got != expect_leo:
            raise BenchError(f"after recovery the log end offset is {got}, expected {expect_leo}")
        sizes_after = {p.name: p.stat().st_size for p in log_files(data_dir)}
        if sizes_after != sizes_before:
            raise BenchError(f"recovery changed the .log files: {sizes_before} -> {sizes_after}")
        r.update({"removed": removed, "rescanned_bytes": rescan, "resident_before": resident,
                  "mb_per_s": rescan / r["startup_s"] / 1e6})
        if r["reported_recovered_bytes"] != rescan:
            log(f"  note: the log manager reports {r['reported_recovered_bytes']:,} bytes "
                f"recovered, the files hold {rescan:,}")
        log(f"  unclean LogManager.startup(){' cold' if cold else ''}: {r['startup_s']:.2f} s for "
            f"{rescan / 1e6:,.0f} MB = {r['mb_per_s']:.0f} MB/s (removed {', '.join(removed) or 'nothing'})")
        return r

    warm_cache(dir_files(data_dir))
    runs = [one(False) for _ in range(args.runs)]
    res["warm_runs"] = runs
    res["rescanned_bytes"] = runs[0]["rescanned_bytes"]
    res["warm_startup_s"] = spread([r["startup_s"] for r in runs])
    res["warm_mb_per_s"] = spread([r["mb_per_s"] for r in runs])
    crash(data_dir)
    b = time_broker_start(data_dir, workdir, args.step_timeout, True, "recovery")
    b["mb_per_s"] = res["rescanned_bytes"] / b["time_to_first_metadata_s"] / 1e6
    res["broker_run"] = b
    log(f"  broker start after a crash -> first Metadata: {b['time_to_first_metadata_s']:.2f} s "
        f"(LogManager logged {b['logmanager_startup_s_logged']} s, {b['load_mode_logged']})")
    if args.cold:  # last, see measure_restart
        res["cold_run"] = one(True)
    res["loadavg_after"] = os.getloadavg()
    return res


def measure_lookup(n_records: int, args, workdir: Path) -> dict[str, Any]:
    from storage.clock import SystemClock
    from storage.log_manager import LogManager

    res: dict[str, Any] = {"records": n_records, "loadavg_before": os.getloadavg()}
    data_dir = workdir / f"lookup-{n_records}"
    try:
        log(f"lookup {n_records:,}: building")
        built = build_log(data_dir, args, records=n_records, seed=n_records)
        res["built"] = built
        log(f"lookup {n_records:,}: {built['log_bytes'] / 1e6:,.0f} MB in {built['segments']} "
            f"segment(s), built in {built['build_seconds']:.1f} s; scanning the oracle")
        oracle = ScanOracle(data_dir)
        if oracle.records != n_records or oracle.last_offset != n_records - 1:
            raise BenchError(f"oracle scan found {oracle.records} records up to offset "
                             f"{oracle.last_offset}, expected {n_records}")
        rng = random.Random(42 + n_records)
        lo = built["first_nominal_ts"] - 10 * args.jitter_ms
        hi = built["last_nominal_ts"] + 10 * args.jitter_ms
        warm_ts = [rng.randint(lo, hi) for _ in range(args.warmup)]
        test_ts = [rng.randint(lo, hi) for _ in range(args.lookups)]

        # (a) in-process, on a freshly loaded LogManager (clean startup)
        lm = LogManager(broker_config(data_dir), SystemClock())
        lm.startup()
        try:
            lg = lm.get_log(TOPIC, 0)
            for t in warm_ts:
                lg.offset_for_timestamp(t)
            ns, answers = [], []
            clock = time.perf_counter_ns
            for t in test_ts:
                t0 = clock()
                a = lg.offset_for_timestamp(t)
                ns.append(clock() - t0)
                answers.append(a)
        finally:
            lm.shutdown()
        res["in_process"] = latency_summary(ns)
        bad = []
        for t, a in zip(test_ts, answers):
            want = oracle.answer(t)
            got = None if a is None else (a[0], a[1])
            if got != want:
                bad.append(f"T={t}: got {got}, oracle {want}")
        res["in_process"]["verified"] = len(test_ts)
        if bad:
            raise VerificationError(f"Log.offset_for_timestamp wrong for {len(bad)} of "
                                    f"{len(test_ts)} timestamps; first: {bad[:3]}")
        log(f"lookup {n_records:,}: in-process p50 {res['in_process']['p50_us']:.1f} µs, "
            f"p99 {res['in_process']['p99_us']:.1f} µs (all {len(test_ts)} answers verified)")

        # (b) over the wire, one connection, the real broker process on that log dir
        b = Broker(data_dir, workdir / f"broker-lookup-{n_records}.log")
        try:
            res["broker_time_to_first_metadata_s"] = b.start_and_wait(args.step_timeout, True)
            c = RawClient(b.port)
            try:
                cid = 100
                for t in warm_ts:
                    cid += 1
                    decode_list_offsets(c.roundtrip(list_offsets_request(cid, t)), cid)
                reqs = []
                for t in test_ts:
                    cid += 1
                    reqs.append((cid, list_offsets_request(cid, t)))
                ns, frames = [], []
                for _cid, req in reqs:
                    t0 = clock()
                    frame = c.roundtrip(req)
                    ns.append(clock() - t0)
                    frames.append(frame)
                latest_reqs = []
                for _ in range(args.baseline_lookups):
                    cid += 1
                    latest_reqs.append((cid, list_offsets_request(cid, LATEST_TIMESTAMP)))
                ns_latest = []
                for lcid, req in latest_reqs:
                    t0 = clock()
                    frame = c.roundtrip(req)
                    ns_latest.append(clock() - t0)
                    err, off, _ts = decode_list_offsets(frame, lcid)
                    if err != 0 or off != n_records:
                        raise VerificationError(f"ListOffsets LATEST answered error {err}, "
                                                f"offset {off}; expected 0, {n_records}")
            finally:
                c.close()
        finally:
            rc = b.stop()
        if rc != 0:
            raise BenchError(f"broker exited with {rc} on SIGTERM\n{b.log_tail()}")
        res["wire"] = latency_summary(ns)
        res["wire_latest"] = latency_summary(ns_latest)
        bad = []
        for (rcid, _req), t, frame in zip(reqs, test_ts, frames):
            err, off, ts = decode_list_offsets(frame, rcid)
            want = oracle.answer(t)
            got = (off, ts) if (off, ts) != (-1, -1) else None
            if err != 0 or got != want:
                bad.append(f"T={t}: error {err}, got {got}, oracle {want}")
        res["wire"]["verified"] = len(test_ts)
        if bad:
            raise VerificationError(f"ListOffsets v{LIST_OFFSETS_VERSION} wrong for {len(bad)} of "
                                    f"{len(test_ts)} timestamps; first: {bad[:3]}")
        log(f"lookup {n_records:,}: wire p50 {res['wire']['p50_us']:.0f} µs, p99 "
            f"{res['wire']['p99_us']:.0f} µs (LATEST p50 {res['wire_latest']['p50_us']:.0f} µs; "
            f"all {len(test_ts)} answers verified)")
    finally:
        shutil.rmtree(data_dir, ignore_errors=True)
        res["loadavg_after"] = os.getloadavg()
    return res


# --------------------------------------------------------------------------------------
# Report


def _ok(cond: bool | None) -> str:
    return "—" if cond is None else ("met" if cond else "**missed**")


def _ms(s: float) -> str:
    return f"{s * 1e3:,.0f} ms" if s >= 0.1 else f"{s * 1e3:,.1f} ms"


def _res(frac: float | None) -> str:
    return "" if frac is None else f" ({frac * 100:.0f}% of .log resident)"


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:,.1f} MB"


def render_markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    out: list[str] = []
    built = result.get("restart_log")
    if built:
        out.append(f"Log for restart/recovery: {built['log_bytes'] / 1e9:.2f} GB of .log data "
                   f"(GB = 10^9 bytes) in {built['segments']} segment(s), {built['records']:,} "
                   f"records of {cfg['value_size']} B in {built['batches']:,} batches of "
                   f"{built['records_per_batch']} records ({built['batch_bytes']:,} B), "
                   f"built in-process at {built['build_mb_per_s']:.0f} MB/s; default topic "
                   "config (segment.bytes 1 GiB, index.interval.bytes 4096).")
        out.append("")
    r = result.get("restart")
    if r:
        out.append(f"### Clean restart (target < 1 s regardless of log size)")
        out.append("")
        out.append("| what | page cache | runs | median | min | max | read by startup | target < 1 s |")
        out.append("|---|---|---:|---:|---:|---:|---:|---|")
        w = r["warm_startup_s"]
        rchar = statistics.median(x["startup_rchar"] for x in r["warm_runs"])
        out.append(f"| `LogManager(...).startup()`, fresh process | warm{_res(r.get('warm_resident_fraction'))} "
                   f"| {len(r['warm_runs'])} | {_ms(w['median'])} | {_ms(w['min'])} | {_ms(w['max'])} | {_mb(rchar)} "
                   f"| {_ok(w['median'] < 1.0)} |")
        if "cold_run" in r:
            c = r["cold_run"]
            out.append(f"| `LogManager(...).startup()`, fresh process | cold (evicted; "
                       f"{_mb(r.get('cold_resident_before'))} resident) | 1 | {_ms(c['startup_s'])} "
                       f"| | | {_mb(c['startup_rchar'])} ({_mb(c['startup_read_bytes'])} from disk) "
                       f"| {_ok(c['startup_s'] < 1.0)} |")
        pw = r["warm_process_wall_s"]
        out.append(f"| whole fresh process (interpreter, imports, startup, clean shutdown) | warm "
                   f"| {len(r['warm_runs'])} | {_ms(pw['median'])} | {_ms(pw['min'])} "
                   f"| {_ms(pw['max'])} | | |")
        be = r["broker_empty_s"]
        out.append(f"| broker process start → first Metadata answer, **empty** log dir (baseline) "
                   f"| — | {len(r['broker_empty_runs'])} | {_ms(be['median'])} | {_ms(be['min'])} "
                   f"| {_ms(be['max'])} | | |")
        bf = r["broker_s"]
        logged = [b["logmanager_startup_s_logged"] for b in r["broker_runs"]
                  if b["logmanager_startup_s_logged"] is not None]
        out.append(f"| broker process start → first Metadata answer, this log | warm "
                   f"| {len(r['broker_runs'])} | {_ms(bf['median'])} | {_ms(bf['min'])} "
                   f"| {_ms(bf['max'])} | | {_ok(bf['median'] < 1.0)} |")
        if logged:
            out.append(f"| … of which LogManager startup (broker's own log line) | warm "
                       f"| {len(logged)} | {_ms(statistics.median(logged))} | {_ms(min(logged))} "
                       f"| {_ms(max(logged))} | | |")
        out.append("")
        out.append(f"Load average (1 min): {r['loadavg_before'][0]:.2f} before, "
                   f"{r['loadavg_after'][0]:.2f} after.")
        out.append("")
    r = result.get("recovery")
    if r:
        out.append("### Unclean recovery (target >= 200 MB/s)")
        out.append("")
        out.append(f"Crash simulated by deleting `{CLEAN_SHUTDOWN_FILE}` and "
                   f"`{RECOVERY_POINT_CHECKPOINT}`: every segment is recovered from byte 0. "
                   f"Bytes rescanned = the sizes of the partition's .log files: "
                   f"{r['rescanned_bytes']:,} ({r['rescanned_bytes'] / 1e6:,.1f} MB).")
        out.append("")
        out.append("| what | page cache | runs | seconds (median) | MB/s (median) | MB/s min–max | target >= 200 MB/s |")
        out.append("|---|---|---:|---:|---:|---:|---|")
        w, m = r["warm_startup_s"], r["warm_mb_per_s"]
        wres = [x["resident_before"] / x["rescanned_bytes"] for x in r["warm_runs"]
                if x.get("resident_before") is not None and x["rescanned_bytes"]]
        out.append(f"| `LogManager(...).startup()`, fresh process "
                   f"| warm{_res(min(wres) if wres else None)} | {len(r['warm_runs'])} "
                   f"| {w['median']:.2f} | {m['median']:,.0f} | {m['min']:,.0f}–{m['max']:,.0f} "
                   f"| {_ok(m['median'] >= 200)} |")
        if "cold_run" in r:
            c = r["cold_run"]
            out.append(f"| `LogManager(...).startup()`, fresh process | cold (evicted; "
                       f"{_mb(c.get('resident_before'))} resident; {_mb(c['startup_read_bytes'])} "
                       f"read from disk) | 1 | {c['startup_s']:.2f} | {c['mb_per_s']:,.0f} | "
                       f"| {_ok(c['mb_per_s'] >= 200)} |")
        b = r["broker_run"]
        out.append(f"| broker process start → first Metadata answer (includes interpreter start) "
                   f"| warm | 1 | {b['time_to_first_metadata_s']:.2f} | {b['mb_per_s']:,.0f} | | |")
        rep = r["warm_runs"][0]["reported_recovered_bytes"]
        out.append("")
        out.append(f"The log manager itself reported {rep:,} bytes recovered per run. "
                   f"Load average (1 min): {r['loadavg_before'][0]:.2f} before, "
                   f"{r['loadavg_after'][0]:.2f} after.")
        out.append("")
    lk = result.get("lookup")
    if lk:
        out.append(f"### ListOffsets by timestamp (target p99 < 1 ms at 10M records)")
        out.append("")
        out.append(f"{cfg['lookups']} random timestamps per size after {cfg['warmup']} warm-up "
                   f"lookups; every answer checked against a scan of the .log files. Wire: "
                   f"ListOffsets v{LIST_OFFSETS_VERSION}, one partition per request, one "
                   f"connection, one request in flight, time from send to the whole response "
                   f"received; LATEST = {cfg['baseline_lookups']} ListOffsets(-1) requests on the "
                   f"same connection as a baseline for the broker's fixed per-request cost.")
        out.append("")
        out.append("| records | .log MB | segments | in-process p50 µs | p99 µs | max µs "
                   "| wire p50 µs | wire p99 µs | wire max µs | LATEST p50 / p99 µs | target p99 < 1 ms |")
        out.append("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for n, x in lk.items():
            if "error" in x:
                out.append(f"| {int(n):,} | failed: {x['error'].splitlines()[0]} | | | | | | | | | |")
                continue
            ip, wi, la, bu = x["in_process"], x["wire"], x["wire_latest"], x["built"]
            target = None
            if int(n) >= 10_000_000:
                target = ip["p99_us"] < 1000 and wi["p99_us"] < 1000
            out.append(f"| {int(n):,} | {bu['log_bytes'] / 1e6:,.1f} | {bu['segments']} "
                       f"| {ip['p50_us']:.1f} | {ip['p99_us']:.1f} | {ip['max_us']:,.0f} "
                       f"| {wi['p50_us']:.0f} | {wi['p99_us']:.0f} | {wi['max_us']:,.0f} "
                       f"| {la['p50_us']:.0f} / {la['p99_us']:.0f} | {_ok(target)} |")
        loads = [x["loadavg_before"][0] for x in lk.values() if "loadavg_before" in x]
        loads += [x["loadavg_after"][0] for x in lk.values() if "loadavg_after" in x]
        if loads:
            out.append("")
            out.append(f"Load average (1 min) during the lookups: {min(loads):.2f}–{max(loads):.2f}.")
        out.append("")
    for name, err in result.get("errors", {}).items():
        out.append(f"**{name} failed**: {err}")
        out.append("")
    out.append("Notes: every startup runs in a fresh Python process, so nothing is cached in "
               "Python objects, but the OS page cache is warm (the log was just written) unless "
               "the row says cold: then the log dir's files were fsync'd and evicted with "
               "posix_fadvise(POSIX_FADV_DONTNEED) (only those files; the interpreter and its "
               "modules stay cached). \"read by startup\" is the rchar delta of /proc/self/io "
               "(read/pread bytes, page cache hits included; mmap'd index reads do not count).")
    m = result["machine"]
    out.append("")
    out.append("### Machine")
    out.append("")
    out.extend(_machine.markdown_lines(m))
    out.append(f"- Filesystem of the work dir: {m.get('workdir_fs', '?')}")
    return "\n".join(out)


# --------------------------------------------------------------------------------------
# Main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description="Log-lifecycle benchmark: clean restart, unclean recovery and "
                    "ListOffsets-by-time latency of Chronolog.")
    ap.add_argument("--size-gb", type=float, default=2.0,
                    help="GB (10^9 bytes) of .log data for restart/recovery (2)")
    ap.add_argument("--lookup-sizes", default="10000,100000,1000000,10000000",
                    help="comma list of record counts for the lookup measurement")
    ap.add_argument("--only", default=",".join(MEASUREMENTS),
                    help="comma list out of restart, recovery, lookup (all)")
    ap.add_argument("--dir", type=Path,
                    help="parent directory for the work dir (default: the system temp dir if it "
                         "is on the repository's filesystem, else the repository); the work dir "
                         "is deleted afterwards")
    ap.add_argument("--keep", action="store_true", help="do not delete the work dir")
    ap.add_argument("--json-out", type=Path, help="also write all numbers to this JSON file")
    ap.add_argument("--runs", type=int, default=3,
                    help="repetitions of each warm restart/recovery timing (3)")
    ap.add_argument("--no-cold", dest="cold", action="store_false",
                    help="skip the cold-page-cache runs")
    ap.add_argument("--batch-kb", type=int, default=16,
                    help="approximate size of each appended batch in KiB (16)")
    ap.add_argument("--value-size", type=int, default=100, help="record value bytes (100)")
    ap.add_argument("--step-ms", type=int, default=1, help="mean timestamp step per record (1)")
    ap.add_argument("--jitter-ms", type=int, default=20,
                    help="record timestamps jitter by +- this much (20): out of order within "
                         "and across batches")
    ap.add_argument("--lookups", type=int, default=2000, help="timed lookups per size (2000)")
    ap.add_argument("--warmup", type=int, default=200, help="untimed warm-up lookups (200)")
    ap.add_argument("--baseline-lookups", type=int, default=500,
                    help="ListOffsets LATEST requests timed as the wire baseline (500)")
    ap.add_argument("--step-timeout", type=float, default=600.0,
                    help="seconds for one startup / broker start before it fails (600)")
    ap.add_argument("--timeout", type=float,
                    help="watchdog for the whole run in seconds (default: from the sizes)")
    ap.add_argument("--child-startup", metavar="DIR", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child_startup:
        return args
    args.only = [x.strip() for x in args.only.split(",") if x.strip()]
    bad = [x for x in args.only if x not in MEASUREMENTS]
    if bad or not args.only:
        ap.error(f"--only: unknown {bad}; choose from {', '.join(MEASUREMENTS)}")
    try:
        args.lookup_sizes = [int(x.replace("_", "")) for x in args.lookup_sizes.split(",") if x.strip()]
    except ValueError:
        ap.error("--lookup-sizes must be a comma list of integers")
    if "lookup" in args.only and (not args.lookup_sizes or min(args.lookup_sizes) < 1):
        ap.error("--lookup-sizes must be >= 1")
    if args.size_gb <= 0 or args.runs < 1 or args.batch_kb < 1 or args.lookups < 1:
        ap.error("--size-gb, --runs, --batch-kb and --lookups must be positive")
    if args.step_ms < 1 or args.jitter_ms < 0 or args.warmup < 0 or args.baseline_lookups < 1:
        ap.error("--step-ms >= 1, --jitter-ms >= 0, --warmup >= 0, --baseline-lookups >= 1")
    return args


def default_parent() -> Path:
    tmp = Path(tempfile.gettempdir())
    try:
        if tmp.stat().st_dev == REPO.stat().st_dev:
            return tmp
    except OSError:
        pass
    return REPO


def needed_bytes(args) -> int:
    """2.5x the largest log alive at any time."""
    biggest = 0
    if "restart" in args.only or "recovery" in args.only:
        biggest = int(args.size_gb * 1e9)
    if "lookup" in args.only:
        per_rec = args.value_size + RECORD_OVERHEAD + V2_HEADER / records_per_batch(
            args.batch_kb * 1024, args.value_size)
        biggest = max(biggest, int(max(args.lookup_sizes) * per_rec))
    return int(2.5 * biggest)


def default_budget(args) -> float:
    """Generous: assumes building at 20 MB/s and recovering at 10 MB/s on a busy machine."""
    t = 300.0
    if "restart" in args.only or "recovery" in args.only:
        mb = args.size_gb * 1e3
        t += mb / 20 + 6 * args.runs * 10
        if "recovery" in args.only:
            t += (args.runs + 3) * mb / 10
        if args.cold:
            t += 2 * mb / 20
    if "lookup" in args.only:
        for n in args.lookup_sizes:
            t += n * 110 / 1e6 / 20 + 60 + (args.lookups + args.warmup) * 0.02
    return t


def fs_description(path: Path) -> str:
    try:
        out = subprocess.run(["df", "-T", "-h", str(path)], capture_output=True, text=True, timeout=10)
        line = out.stdout.strip().splitlines()[-1].split()
        return f"{line[1]} on {line[0]} ({line[4]} free)"
    except (OSError, subprocess.TimeoutExpired, IndexError):
        return "?"


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.child_startup:
        return child_startup(args.child_startup)

    def on_signal(signum, frame):
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGHUP, on_signal)

    parent = args.dir if args.dir is not None else default_parent()
    parent.mkdir(parents=True, exist_ok=True)
    need = needed_bytes(args)
    free = shutil.disk_usage(parent).free
    if free < need:
        print(f"lifecycle: refusing to run: {parent} has {free / 1e9:.1f} GB free, this run needs "
              f"{need / 1e9:.1f} GB (2.5x its largest log). Use --dir on a bigger filesystem or "
              f"smaller --size-gb / --lookup-sizes.", file=sys.stderr)
        return 2
    budget = args.timeout or default_budget(args)
    watchdog = _watchdog(budget)
    workdir = Path(tempfile.mkdtemp(prefix="chronolog-lifecycle-", dir=parent))
    if not args.keep:
        with _LOCK:
            _CLEANUP_DIRS.append(workdir)
    log(f"work dir {workdir} ({free / 1e9:.0f} GB free); watchdog {budget:.0f} s")

    machine = _machine.base_info()
    machine.update(_machine.chronolog_info(REPO))
    machine["workdir_fs"] = fs_description(parent)
    result: dict[str, Any] = {
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()
                   if k not in ("child_startup",)},
        "machine": machine,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "errors": {},
    }
    failed = False
    try:
        if "restart" in args.only or "recovery" in args.only:
            data = workdir / "restart-data"
            try:
                log(f"building a {args.size_gb:g} GB log")
                built = build_log(data, args, target_bytes=int(args.size_gb * 1e9))
                result["restart_log"] = built
                log(f"built {built['log_bytes'] / 1e9:.2f} GB, {built['records']:,} records in "
                    f"{built['segments']} segment(s) in {built['build_seconds']:.1f} s "
                    f"({built['build_mb_per_s']:.0f} MB/s)")
                if "restart" in args.only:
                    log("clean restart")
                    try:
                        result["restart"] = measure_restart(data, built, args, workdir)
                    except BenchError as e:
                        result["errors"]["restart"] = str(e)
                        log(f"restart FAILED: {e}")
                        failed = True
                if "recovery" in args.only:
                    log("unclean recovery")
                    try:
                        result["recovery"] = measure_recovery(data, built, args, workdir)
                    except BenchError as e:
                        result["errors"]["recovery"] = str(e)
                        log(f"recovery FAILED: {e}")
                        failed = True
            finally:
                if not args.keep:
                    shutil.rmtree(data, ignore_errors=True)
        if "lookup" in args.only:
            result["lookup"] = {}
            for n in args.lookup_sizes:
                try:
                    result["lookup"][str(n)] = measure_lookup(n, args, workdir)
                except BenchError as e:
                    result["lookup"][str(n)] = {"error": str(e)}
                    log(f"lookup {n:,} FAILED: {e}")
                    failed = True
    finally:
        with _LOCK:
            leftovers = list(_CHILDREN)
        for p in leftovers:
            finish(p, grace=3)
        if not args.keep:
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            log(f"kept {workdir}")
        watchdog.cancel()
    result["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(render_markdown(result))
    if args.json_out:
        args.json_out.parent.mkdir(parents=True, exist_ok=True)
        args.json_out.write_text(json.dumps(result, indent=2, default=str) + "\n")
        log(f"wrote {args.json_out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
