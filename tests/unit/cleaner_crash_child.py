"""Run by tests/unit/test_cleaner_crash.py in a child process: open the broker's storage
in a log dir, clean its compacted partition, and SIGKILL this process at one step of the
clean or of its swap (the cleaner's and Log.replace_segments' test hooks).

    python -m tests.unit.cleaner_crash_child LOG_DIR NOW_MS STEP

Exits 3 if the clean finished without reaching STEP."""

import os
import signal
import sys

from storage.clock import ManualClock
from storage.log_cleaner import LogCleaner
from storage.log_manager import LogManager
from tests.unit.cleaner_helpers import broker_config


def main() -> int:
    log_dir, now_ms, step = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    clock = ManualClock(now_ms)
    cfg = broker_config(log_dir)
    lm = LogManager(cfg, clock)
    lm.startup()

    def hook(name, **_info):
        if name == step:
            os.kill(os.getpid(), signal.SIGKILL)

    LogCleaner(lm, cfg, clock, inline=True, hook=hook).clean_once()
    return 3


if __name__ == "__main__":
    sys.exit(main())
