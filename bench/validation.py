#!/usr/bin/env python3
"""Produce-validation cost per record, in process (no network, no disk).

Builds batches shaped like librdkafka's under bulk load (``--records`` records of
``--size`` random bytes, no key, per batch) for each codec, then times
``storage.validator.validate_records`` on them, in place as the broker does, and
prints µs per record (median of ``--repeats`` timings).  Run it against another checkout
to compare two versions of the validator on the same machine::

    .venv/bin/python bench/validation.py                               # this checkout
    PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/validation.py

The end-to-end broker CPU per record is bench/throughput.py's job; this isolates the
validator's share of it (the record walk this checkout adds to every batch).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from types import SimpleNamespace

# the installed checkout (make bench installs it), or the one PYTHONPATH names first
sys.path.append(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from protocol import records as R  # noqa: E402
from storage.validator import validate_records  # noqa: E402

CODECS = {"none": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=8_900, help="records per batch (8900: librdkafka's 1 MB batches of 100 B)")
    ap.add_argument("--size", type=int, default=100, help="value size in bytes (100)")
    ap.add_argument("--codecs", default="none,lz4,zstd,gzip,snappy")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args(argv)
    now = int(time.time() * 1000)
    config = SimpleNamespace(message_timestamp_type="CreateTime", message_timestamp_before_max_ms=2**63 - 1,
                             message_timestamp_after_max_ms=2**63 - 1, max_message_bytes=64 << 20,
                             segment_bytes=1 << 30, compact=False)
    print(f"validator: {_where()}")
    print(f"| codec | batch bytes | µs/record (median of {args.repeats}) |")
    print("|---|---:|---:|")
    for name in args.codecs.split(","):
        codec = CODECS[name]
        recs = [(now + i // 100, None, os.urandom(args.size)) for i in range(args.records)]
        batch = bytes(R.build_batch(recs, compression=codec))
        times = []
        for _ in range(args.repeats):
            buf = bytearray(batch)
            t = time.perf_counter()
            validate_records(buf, config=config, next_offset=1000, now_ms=now, in_place=True)
            times.append(time.perf_counter() - t)
        print(f"| {name} | {len(batch):,} | {statistics.median(times) / args.records * 1e6:.3f} |")
    return 0


def _where() -> str:
    """Which validator was imported, so a comparison run shows its checkout."""
    import storage.validator as v

    walk = "walks every record" if hasattr(v, "analyze_records") else "trusts headers when the window is unbounded"
    return f"{v.__file__} ({walk})"


if __name__ == "__main__":
    sys.exit(main())
