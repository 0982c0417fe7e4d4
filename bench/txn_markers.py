"""Time the group coordinator takes to apply one transaction's marker to the offsets it
committed (TxnOffsetCommit), on a broker holding many groups: what every EndTxn of an
exactly-once application (a consume-transform-produce loop committing its offsets in
its transaction) costs the event loop.

``--groups`` (10,000) groups each hold a committed offset; ``--markers`` (2,000)
producers each commit a transactional offset in one of them, then each one's COMMIT
marker is applied (``GroupCoordinator.complete_txn``, as the marker written to
``__consumer_offsets`` calls it).

    .venv/bin/python bench/txn_markers.py [--groups 10000] [--markers 2000] [--root DIR]

``--root`` measures another checkout (a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=10_000)
    ap.add_argument("--markers", type=int, default=2000)
    ap.add_argument("--root", default=str(REPO), help="the checkout to measure (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.root).resolve()))
    from broker.coordinator.group import GroupCoordinator
    from broker.coordinator.records import OffsetValue
    from storage.clock import ManualClock

    c = GroupCoordinator(clock=ManualClock(1_000_000))
    for i in range(args.groups):
        c.load_offset(f"group-{i}", "t", 0, OffsetValue(5, -1, "", 1), i)
    for k in range(args.markers):
        c.load_offset(f"group-{k % args.groups}", "t", 0, OffsetValue(100 + k, -1, "", 1), args.groups + k,
                      producer_id=1000 + k)
    t = time.perf_counter()
    applied = sum(c.complete_txn(1000 + k, True) for k in range(args.markers))
    seconds = time.perf_counter() - t
    if applied != args.markers:
        raise SystemExit(f"{applied} of {args.markers} markers applied their offset")
    print(f"{args.groups:,} groups: {seconds / args.markers * 1e6:,.1f} µs per marker ({args.root})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
