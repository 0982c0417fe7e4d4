"""Time the authorizer takes to decide, with many ACLs, for many resources: what a
Metadata request over every topic of a broker with an authorizer asks (DESCRIBE on
each topic), decided once afresh and once more (the second time from the decisions
the authorizer remembers).

The store holds ``--acls`` ACLs of other principals (a PREFIXED WRITE each, as
bench/throughput.py ``seed_acls`` writes them) and one letting the asking principal
do everything with topics.

    .venv/bin/python bench/authorizer.py [--acls 1000] [--topics 10000] [--root DIR]

``--root`` measures another checkout (a ``git worktree`` of an older commit).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--acls", type=int, default=1000)
    ap.add_argument("--topics", type=int, default=10_000)
    ap.add_argument("--root", default=str(REPO), help="the checkout to measure (default: this one)")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(args.root).resolve()))
    from broker.security import authorizer as A
    from storage.acl_store import AclBinding, AclStore

    with tempfile.TemporaryDirectory(prefix="bench-authorizer-") as d:
        store = AclStore(d)
        store.change(add=[AclBinding(A.TOPIC, f"team-{i}-", A.PREFIXED, f"User:team-{i}", "*", A.WRITE, A.ALLOW)
                          for i in range(args.acls)]
                     + [AclBinding(A.TOPIC, "*", A.LITERAL, "User:alice", "*", A.ALL, A.ALLOW)])
        z = A.Authorizer(store, "", False)
        session = SimpleNamespace(principal="User:alice", client_ip="127.0.0.1")
        names = [f"topic-{i}" for i in range(args.topics)]
        times = []
        for _ in range(2):
            t = time.perf_counter()
            allowed = sum(z.authorize(session, A.DESCRIBE, A.TOPIC, n) for n in names)
            times.append(time.perf_counter() - t)
            if allowed != len(names):
                raise SystemExit(f"{allowed} of {len(names)} topics allowed")
    print(f"DESCRIBE on {args.topics:,} topics with {args.acls + 1:,} ACLs ({args.root}): "
          f"{times[0] * 1000:.0f} ms, again {times[1] * 1000:.0f} ms")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
