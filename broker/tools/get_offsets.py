"""``chronolog get-offsets``: kafka-get-offsets.sh (GetOffsetShell) over ListOffsets.

Prints ``topic:partition:offset`` per partition, sorted by topic then partition number.
``--time`` takes -1/latest (default), -2/earliest, -3/max-timestamp, -4/earliest-local,
-5/latest-tiered, a timestamp in ms or an ISO-8601 date-time: the first offset whose
timestamp is at or after it. As in Kafka, a partition without such an offset (the time is
after every record) prints no line.
"""

from __future__ import annotations

import re
import sys

from broker.tools import ToolError, UsageError, add_common_args, run_tool
from broker.tools.timeparse import parse_time_spec

_REGEX_CHARS = set(".*+?[](){}|^$\\")


def parse_partitions(text: str, flag: str = "--partitions") -> list[int]:
    """``0,1,5-7`` -> [0, 1, 5, 6, 7]."""
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", item)
        if not m:
            raise UsageError(f"{flag}: invalid partition {item!r} in {text!r} (expected e.g. 0,1,3-5)")
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) else lo
        if hi < lo:
            raise UsageError(f"{flag}: invalid range {item!r}")
        out.extend(range(lo, hi + 1))
    return sorted(set(out))


def register(sub) -> None:
    p = sub.add_parser(
        "get-offsets",
        help="print partition offsets (latest, earliest, max-timestamp, or for a point in time)",
        description="An interactive shell for getting topic-partition offsets (kafka-get-offsets.sh).",
    )
    add_common_args(p)
    p.add_argument("--topic", metavar="TOPIC", help="topic name or regular expression (default: all topics)")
    p.add_argument("--partitions", metavar="P[,P...]", help="comma separated partition ids (default: all)")
    p.add_argument("--time", default="latest", metavar="TIME",
                   help="-1/latest (default), -2/earliest, -3/max-timestamp, -4/earliest-local, "
                        "-5/latest-tiered, a timestamp in ms or an ISO-8601 date-time "
                        "(e.g. 2026-11-21T10:00:00Z)")
    p.add_argument("--exclude-internal-topics", action="store_true", help="leave out internal topics")
    p.set_defaults(func=lambda args: run_tool("get-offsets", lambda: _run(args)))


def _run(args) -> int:
    from broker.tools.client import Client, error_name

    ts = parse_time_spec(args.time)
    parts = parse_partitions(args.partitions) if args.partitions is not None else None
    with Client.from_args(args) as client:
        topic = args.topic
        if topic is not None and not (set(topic) & _REGEX_CHARS):
            leaders = client.topic_partitions([topic])
        else:
            md = client.metadata(None)
            pattern = re.compile(topic) if topic is not None else None
            leaders = {}
            for t in md.topics:
                if t.error_code or (args.exclude_internal_topics and t.is_internal):
                    continue
                if pattern is None or pattern.fullmatch(t.name):
                    leaders[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
            if not leaders and topic is not None:
                raise ToolError(f"--topic {topic}: no topic matches")
        requests = {}
        for t, ps in leaders.items():
            for part in ps:
                if parts is None or part in parts:
                    requests[(t, part)] = ts
        if parts is not None:
            missing = [p for p in parts if all((t, p) not in requests for t in leaders)]
            if missing:
                raise ToolError(f"--partitions: no partition {','.join(map(str, missing))} in "
                                f"{', '.join(sorted(leaders))}")
        if not requests:
            raise ToolError("could not match any topic-partitions with the specified filters")
        answers = client.list_offsets(requests, leaders)
    failed = 0
    for (t, part) in sorted(answers):
        err, offset, _ = answers[(t, part)]
        if err:
            print(f"Skip getting offsets for topic-partition {t}-{part} due to error: {error_name(err)}",
                  file=sys.stderr)
            failed += 1
            continue
        if offset >= 0:
            print(f"{t}:{part}:{offset}")
    return 1 if failed else 0
