"""bench/_machine.py's stall probe: a spinner per usable CPU reports the time its CPU
was taken from it. A spinner stopped for a while (as the machine stops a vCPU) is
reported with that gap, on its CPU."""

from __future__ import annotations

import os
import signal
import time

from bench import _machine


def test_a_spinner_stopped_for_40_ms_is_reported_as_a_stall_of_its_cpu():
    cpus = sorted(os.sched_getaffinity(0))

    def stop_the_first(procs):
        time.sleep(0.4)  # the interpreter has started and spins
        os.kill(procs[0].pid, signal.SIGSTOP)
        time.sleep(0.04)
        os.kill(procs[0].pid, signal.SIGCONT)

    st = _machine.cpu_stalls(1.5, started=stop_the_first)
    assert [c["cpu"] for c in st["per_cpu"]] == cpus
    first = st["per_cpu"][0]
    assert first["stalls"] >= 1 and 35 <= first["max_ms"] < 1000
    assert st["stalls_over_1ms"] >= 1 and st["max_ms"] >= first["max_ms"]
    assert "over 1 ms" in _machine.stalls_line(st) and f"cpu{cpus[0]} " in _machine.stalls_line(st)
