"""Machine description shared by the benchmarks (throughput.py, lifecycle.py).

``base_info()`` collects CPU, RAM, kernel, OS and Python; ``chronolog_info(repo)`` the
installed package version and ``git describe`` of the checkout; ``markdown_lines(m)``
renders the common bullet lines of the report's "Machine" section; ``cpu_stalls()``
measures how much time the machine itself takes from busy CPUs (what no broker can
answer faster than).

    python bench/_machine.py --stalls 10     # the stall probe alone, 10 s
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any


def base_info() -> dict[str, Any]:
    """cpu_model, logical_cpus, physical_cores, usable_cpus, mem_total_gb,
    virtualization, kernel, os, python (in this order)."""
    info: dict[str, Any] = {}
    cpu_model = None
    cores: set[tuple[str, str]] = set()
    phys = core = None
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, val = line.partition(":")
                key, val = key.strip(), val.strip()
                if key == "model name" and cpu_model is None:
                    cpu_model = val
                elif key == "physical id":
                    phys = val
                elif key == "core id":
                    core = val
                elif not key and phys is not None and core is not None:
                    cores.add((phys, core))
                    phys = core = None
        if phys is not None and core is not None:
            cores.add((phys, core))
    except OSError:
        pass
    info["cpu_model"] = cpu_model
    info["logical_cpus"] = os.cpu_count()
    info["physical_cores"] = len(cores) or None
    try:
        info["usable_cpus"] = len(os.sched_getaffinity(0))
    except AttributeError:
        info["usable_cpus"] = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["mem_total_gb"] = round(int(line.split()[1]) * 1024 / 1e9, 1)
    except OSError:
        pass
    try:
        info["virtualization"] = "hypervisor" if "hypervisor" in Path("/proc/cpuinfo").read_text() else "none detected"
    except OSError:
        pass
    info["kernel"] = platform.release()
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                info["os"] = line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    info["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    return info


def chronolog_info(repo: Path) -> dict[str, Any]:
    """chronolog (installed package version) and chronolog_git (``git describe``)."""
    info: dict[str, Any] = {}
    try:
        from importlib.metadata import version
        info["chronolog"] = version("chronolog")
    except Exception:
        info["chronolog"] = "package not installed in this interpreter (run from the checkout)"
    try:
        rev = subprocess.run(["git", "-C", str(repo), "describe", "--always", "--dirty"],
                             capture_output=True, text=True, timeout=10)
        if rev.returncode == 0:
            info["chronolog_git"] = rev.stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return info


def markdown_lines(m: dict[str, Any], python_extra: str = "",
                   extra_keys: tuple[str, ...] = ("chronolog", "chronolog_git")) -> list[str]:
    """The bullet lines of a report's "Machine" section (CPU, RAM, kernel, Python, then
    ``- key: value`` for each of ``extra_keys`` present in ``m``)."""
    out = [
        f"- CPU: {m.get('cpu_model')}, {m.get('logical_cpus')} logical CPUs "
        f"({m.get('physical_cores')} cores, {m.get('usable_cpus')} usable), "
        f"{m.get('virtualization', '?')}",
        f"- RAM: {m.get('mem_total_gb')} GB",
        f"- Kernel: Linux {m.get('kernel')} ({m.get('os', 'unknown OS')})",
        f"- Python: {m.get('python')}{python_extra}",
    ]
    for k in extra_keys:
        if k in m:
            out.append(f"- {k}: {m[k]}")
    return out


# one per usable CPU, pinned to it: spins on the monotonic clock and prints, as JSON,
# every gap between two consecutive readings longer than the threshold (time the CPU
# ran something else: an interrupt, a kernel thread, or the hypervisor running another
# guest or its own work on that physical CPU)
_SPINNER = r"""
import json, os, sys, time
cpu, seconds, threshold = int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]) / 1000
os.sched_setaffinity(0, {cpu})
clock = time.perf_counter
start = last = clock()
end = start + seconds
gaps = []
while last < end:
    now = clock()
    if now - last > threshold:
        gaps.append((last, now - last))  # (perf_counter is the system's monotonic clock: one for all)
    last = now
print(json.dumps(gaps))
"""


def cpu_stalls(seconds: float = 5.0, threshold_ms: float = 0.5, started=None) -> dict[str, Any]:
    """Time the machine takes from its CPUs while every usable one is busy: a process
    per CPU spins for ``seconds`` and records each gap over ``threshold_ms`` between two
    readings of the clock. On the 2 vCPU guests these benchmarks run on, one vCPU loses
    about 2.5 ms about once a second when both are busy (and none when one is idle);
    the latency shapes' p99.9 cannot be below that when the stall lands on the broker's
    or a client's CPU. Returns per_cpu [{cpu, stalls, lost_ms, max_ms}], stalls_over_1ms,
    per_second (stalls over 1 ms), max_ms, median_ms (of those over 1 ms) and
    median_interval_s (between stalls over 1 ms on any CPU). ``started``: called with the
    spinners' processes once they run (a test stops one for a while)."""
    cpus = sorted(os.sched_getaffinity(0))
    procs = [subprocess.Popen([sys.executable, "-c", _SPINNER, str(c), str(seconds), str(threshold_ms)],
                              stdout=subprocess.PIPE, text=True) for c in cpus]
    if started is not None:
        started(procs)
    per_cpu, big = [], []
    for c, proc in zip(cpus, procs):
        out, _ = proc.communicate(timeout=seconds + 60)
        if proc.returncode != 0:
            raise RuntimeError(f"the stall probe's spinner on cpu {c} failed (exit {proc.returncode})")
        gaps = json.loads(out)
        per_cpu.append({"cpu": c, "stalls": len(gaps), "lost_ms": round(sum(g for _, g in gaps) * 1000, 2),
                        "max_ms": round(max((g for _, g in gaps), default=0) * 1000, 2)})
        big += [(t, g) for t, g in gaps if g > 0.001]
    big.sort()
    intervals = [b[0] - a[0] for a, b in zip(big, big[1:])]
    return {"seconds": seconds, "threshold_ms": threshold_ms, "per_cpu": per_cpu, "stalls_over_1ms": len(big),
            "per_second": round(len(big) / seconds, 2),
            "max_ms": max(p["max_ms"] for p in per_cpu),
            "median_ms": round(statistics.median(g for _, g in big) * 1000, 2) if big else None,
            "median_interval_s": round(statistics.median(intervals), 3) if intervals else None}


def stalls_line(st: dict[str, Any]) -> str:
    """One line for a report: what :func:`cpu_stalls` found."""
    if not st["stalls_over_1ms"]:
        return (f"- Machine stalls (every CPU busy for {st['seconds']:g} s): none over 1 ms "
                f"(largest {st['max_ms']} ms)")
    return (f"- Machine stalls (every CPU busy for {st['seconds']:g} s): {st['stalls_over_1ms']} over 1 ms "
            f"({st['per_second']}/s, median {st['median_ms']} ms, largest {st['max_ms']} ms, "
            f"median interval {st['median_interval_s']} s); per CPU lost "
            + ", ".join(f"cpu{c['cpu']} {c['lost_ms']} ms" for c in st["per_cpu"]))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description="the machine description, or its stall probe")
    ap.add_argument("--stalls", type=float, metavar="SECONDS", help="run the stall probe this long")
    ap.add_argument("--threshold-ms", type=float, default=0.5)
    a = ap.parse_args()
    if a.stalls:
        st = cpu_stalls(a.stalls, a.threshold_ms)
        print(stalls_line(st))
        print(json.dumps(st, indent=2))
    else:
        print(json.dumps(base_info(), indent=2))
