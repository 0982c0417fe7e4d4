"""Stopping a benchmark's child process and everything it started.

Children are started with ``start_new_session=True``, so each leads its own process
group and a signal to the group reaches whatever it spawned too.
"""

from __future__ import annotations

import os
import signal
import subprocess


def killpg_quiet(pgid: int, sig: int) -> None:
    """Signal a process group; one that is already gone is not an error."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def stop_group(proc: subprocess.Popen, grace: float) -> int | None:
    """SIGTERM the child's process group, SIGKILL it after ``grace`` seconds, then
    SIGKILL any stragglers left in the group; returns the child's exit code."""
    if proc.poll() is None:
        killpg_quiet(proc.pid, signal.SIGTERM)
        try:
            proc.wait(grace)
        except subprocess.TimeoutExpired:
            killpg_quiet(proc.pid, signal.SIGKILL)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass
    killpg_quiet(proc.pid, signal.SIGKILL)
    return proc.returncode
