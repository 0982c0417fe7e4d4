"""Machine description shared by the benchmarks (throughput.py, lifecycle.py).

``base_info()`` collects CPU, RAM, kernel, OS and Python; ``chronolog_info(repo)`` the
installed package version and ``git describe`` of the checkout; ``markdown_lines(m)``
renders the common bullet lines of the report's "Machine" section.
"""

from __future__ import annotations

import os
import platform
import subprocess
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
