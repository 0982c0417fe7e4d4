"""``chronolog log-dirs``: kafka-log-dirs.sh.

``--describe [--topic-list t1,t2] [--broker-list 0,1]`` asks each broker for its log dirs
(DescribeLogDirs, every partition) and prints what Kafka's LogDirsCommand prints::

    Querying brokers for log directories information
    Received log directory information from brokers 0
    {"brokers":[{"broker":0,"logDirs":[{"partitions":[{"partition":"events-0","size":1234,"offsetLag":0,"isFuture":false}],"error":null,"logDir":"/data"}]}],"version":1}

``--topic-list`` keeps the named topics' partitions; a broker in ``--broker-list`` that is
not in the cluster is an error naming it and the brokers that exist.
"""

from __future__ import annotations

import json

from broker.tools import ToolError, UsageError, add_common_args, run_tool

# Kafka's exception class names for the errors DescribeLogDirs can give a log dir
_ERROR_CLASSES = {56: "org.apache.kafka.common.errors.KafkaStorageException",
                  -1: "org.apache.kafka.common.errors.UnknownServerException"}


def register(sub) -> None:
    p = sub.add_parser("log-dirs", help="describe the log directories of brokers",
                       description="Query log directory usage on brokers (kafka-log-dirs.sh).")
    add_common_args(p)
    p.add_argument("--describe", action="store_true", required=True,
                   help="describe the log directories on the brokers")
    p.add_argument("--topic-list", default="", metavar="T1,T2", help="topics to show (default: every topic)")
    p.add_argument("--broker-list", default="", metavar="0,1", help="brokers to query (default: every broker)")
    p.set_defaults(func=lambda args: run_tool("log-dirs", lambda: _run(args)))


def _ids(text: str) -> list[int]:
    out = []
    for part in (x.strip() for x in text.split(",")):
        if not part:
            continue
        try:
            out.append(int(part))
        except ValueError:
            raise UsageError(f"--broker-list: {part!r} is not a broker id") from None
    return out


def _run(args) -> int:
    from broker.tools.client import Client, error_name
    from protocol.messages import DescribeLogDirsRequest

    topics = {t.strip() for t in args.topic_list.split(",") if t.strip()}
    asked = _ids(args.broker_list)
    with Client.from_args(args) as client:
        client.metadata([])
        existing = sorted(client.brokers)
        missing = sorted(set(asked) - set(existing))
        if missing:
            raise ToolError("ERROR: The given brokers do not exist from --broker-list: "
                            f"{','.join(map(str, missing))}. Current existent brokers: {','.join(map(str, existing))}")
        brokers = sorted(set(asked)) if asked else existing
        print("Querying brokers for log directories information")
        out = []
        for node in brokers:
            conn = client.node(node)
            _, resp = conn.request(DescribeLogDirsRequest(topics=None), conn.version_for(35))
            if getattr(resp, "error_code", 0):
                raise ToolError(f"broker {node}: {error_name(resp.error_code)}")
            dirs = []
            for r in resp.results:
                parts = [{"partition": f"{t.name}-{p.partition_index}", "size": p.partition_size,
                          "offsetLag": p.offset_lag, "isFuture": bool(p.is_future_key)}
                         for t in r.topics if not topics or t.name in topics for p in t.partitions]
                error = None if not r.error_code else _ERROR_CLASSES.get(r.error_code, error_name(r.error_code))
                dirs.append({"partitions": parts, "error": error, "logDir": r.log_dir})
            out.append({"broker": node, "logDirs": dirs})
        print(f"Received log directory information from brokers {','.join(map(str, brokers))}")
        print(json.dumps({"brokers": out, "version": 1}, separators=(",", ":")))
    return 0
