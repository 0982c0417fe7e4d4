"""A clean killed at each of its steps: the process running it is SIGKILLed after the
.cleaned files are written, after each rename to .swap, after the swap is committed,
after the old segments are renamed .deleted, after each rename into place, and at the
end. After a restart the log is consistent and holds exactly the records before the
clean (the swap had not reached .swap) or after it (it had): nothing that should survive
is lost, no temporary file is left, indexes pass their checks, and the next clean ends
in the same records."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys

import pytest

from storage.clock import ManualClock
from storage.log_cleaner import LogCleaner
from tests.unit.cleaner_helpers import START_MS, append, compact_topic, make_lm, read_all
from tests.integration.helpers import REPO_ROOT

BASE = "00000000000000000000"
# (step, what the restarted log must hold)
STEPS = [
    ("cleaned", "before"),
    (f"{BASE}.log.swap", "before"),
    (f"{BASE}.index.swap", "before"),
    (f"{BASE}.timeindex.swap", "before"),
    ("swap", "after"),
    ("deleted", "after"),
    (f"{BASE}.log", "after"),
    (f"{BASE}.timeindex", "after"),
    ("done", "after"),
]


def _prepare(path):
    """A compacted partition of several inactive segments that clean into one group,
    with a transaction aborted in it (so the .txnindex is part of the swap)."""
    lm, cfg, clock = make_lm(path)
    log = compact_topic(lm, segment_bytes=1_000_000, delete_retention_ms=60_000)
    log.producer_state.transactions_enabled = True
    for i in range(60):
        append(log, clock, [(b"k%d" % (i % 7), b"v%d" % i + b"." * 50), (b"t%d" % (i % 3), None if i % 5 else b"x")])
        if i % 10 == 9:
            log.roll()
    append(log, clock, [(b"k0", b"aborted")], producer_id=9, producer_epoch=0, base_sequence=0,
           is_transactional=True)
    log.append_end_txn_marker(9, 0, commit=False, coordinator_epoch=0)
    log.roll()
    append(log, clock, [(b"k1", b"in the active segment")])
    now = clock.time_ms() + 1_000
    lm.shutdown()
    return now


def _open(path, now):
    lm, cfg, clock = make_lm(path, ManualClock(now))
    return lm, cfg, clock, lm.get_log("t", 0)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("cleaner-crash")
    src = root / "src"
    now = _prepare(src)
    ref = root / "ref"
    shutil.copytree(src, ref)
    lm, _cfg, _clock, log = _open(src, now)
    before = read_all(log)
    lm.shutdown()
    lm, cfg, clock, log = _open(ref, now)
    assert LogCleaner(lm, cfg, clock, inline=True).clean_once() is not None
    after = read_all(log)
    lm.shutdown()
    assert len(after) < len(before)
    return src, now, before, after


@pytest.mark.parametrize("step,expect", STEPS, ids=[s for s, _ in STEPS])
def test_a_clean_killed_at_each_step_leaves_the_log_before_or_after_it(prepared, tmp_path, step, expect):
    src, now, before, after = prepared
    work = tmp_path / "logs"
    shutil.copytree(src, work)
    proc = subprocess.run([sys.executable, "-m", "tests.unit.cleaner_crash_child", str(work), str(now), step],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (proc.returncode, proc.stderr[-2000:])
    assert not os.path.exists(work / ".kafka_cleanshutdown")  # the child died: an unclean start follows
    lm, cfg, clock, log = _open(work, now)
    try:
        got = read_all(log)
        assert got == (before if expect == "before" else after)
        leftovers = [n for n in os.listdir(log.dir) if n.endswith((".cleaned", ".swap", ".deleted"))]
        assert leftovers == []
        for seg in log.segments[:-1]:
            seg.sanity_check(full=True)
        # reads by offset and by time still work, and the next clean ends where a clean one does
        assert log.read(0, 10**6).records is not None
        assert log.offset_for_timestamp(START_MS) is not None
        LogCleaner(lm, cfg, clock, inline=True).clean_once()
        assert read_all(log) == after
    finally:
        lm.shutdown()
