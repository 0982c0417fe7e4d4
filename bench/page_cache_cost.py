"""What writing new data into the page cache costs on this machine (context for the
produce CPU figures of bench/throughput.py).

Writes ``--mb`` MB with ``pwrite`` in ``--chunk`` byte pieces into a new file, ``--rounds``
times (each round a new file, all deleted at the end), and prints the CPU seconds
(user+sys) of each round and per MB. On a KVM guest whose free memory the hypervisor
backs on demand, the first rounds may reuse page-cache pages freed shortly before (cheap)
and later rounds get never-touched guest pages (expensive: the host faults them in
inside the write). A broker that keeps every record on disk pays this per byte stored;
one that keeps records in its heap pays its own allocator's version of it.

    .venv/bin/python bench/page_cache_cost.py [--mb 30] [--rounds 8] [--chunk 32768]
"""

from __future__ import annotations

import argparse
import os
import tempfile


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=30, help="MB per round (30: one throughput run's records)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--chunk", type=int, default=32 * 1024, help="bytes per pwrite")
    ap.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)),
                    help="where the scratch files go (default: the repository's filesystem)")
    args = ap.parse_args()
    buf = os.urandom(args.chunk)
    total = args.mb * 1024 * 1024
    work = tempfile.mkdtemp(prefix="page-cache-cost-", dir=args.dir)
    paths = []
    print(f"| round | MB | CPU s | CPU ms/MB |\n|---:|---:|---:|---:|")
    try:
        for r in range(1, args.rounds + 1):
            path = os.path.join(work, f"round{r}.bin")
            paths.append(path)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            t0 = os.times()
            for pos in range(0, total, args.chunk):
                os.pwrite(fd, buf, pos)
            t1 = os.times()
            os.close(fd)
            cpu = (t1.user + t1.system) - (t0.user + t0.system)
            print(f"| {r} | {args.mb} | {cpu:.3f} | {cpu * 1000 / args.mb:.2f} |")
    finally:
        for p in paths:
            os.unlink(p)
        os.rmdir(work)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
