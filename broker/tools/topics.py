"""``chronolog topics``: kafka-topics.sh for the common cases.

* ``--create --topic T [--partitions N] [--replication-factor R] [--config k=v ...]
  [--if-not-exists]`` (CreateTopics) prints ``Created topic T.``
* ``--list [--topic REGEX] [--exclude-internal]`` (Metadata) prints one name per line.
* ``--describe [--topic T|REGEX]`` (DescribeTopicPartitions, else Metadata; DescribeConfigs)
  prints Kafka's format:
  ``Topic: T<TAB>TopicId: ...<TAB>PartitionCount: N<TAB>ReplicationFactor: R<TAB>Configs: k=v,...``
  (the non-default configs), then one ``<TAB>Topic: T<TAB>Partition: p<TAB>Leader: ...``
  line per partition, its ``Elr`` and ``LastKnownElr`` from DescribeTopicPartitions (as
  Kafka's admin client reads them from a 3.7+ broker; ``N/A`` from Metadata, an older one's).
* ``--delete --topic T`` (DeleteTopics) prints nothing, as kafka-topics.sh.
* ``--alter --topic T --partitions N`` (CreatePartitions).
"""

from __future__ import annotations

import re

from broker.tools import ToolError, UsageError, add_common_args, run_tool
from protocol import kafka_uuid

_REGEX_CHARS = set(".*+?[](){}|^$\\")
_SOURCE_DEFAULT = 5


def parse_config_pairs(values: list[str], flag: str = "--config") -> dict[str, str]:
    out: dict[str, str] = {}
    for item in values or []:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"{flag}: invalid entry {item!r} (expected name=value)")
        out[name.strip()] = value
    return out


def register(sub) -> None:
    p = sub.add_parser("topics", help="create, list, describe, alter and delete topics",
                       description="Create, list, describe, alter or delete topics (kafka-topics.sh).")
    add_common_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--create", action="store_true", help="create a topic")
    action.add_argument("--list", action="store_true", help="list topic names")
    action.add_argument("--describe", action="store_true", help="describe topics")
    action.add_argument("--delete", action="store_true", help="delete a topic")
    action.add_argument("--alter", action="store_true", help="raise the partition count of a topic")
    p.add_argument("--topic", metavar="TOPIC", help="topic name (a regular expression for --list/--describe)")
    p.add_argument("--partitions", type=int, metavar="N", help="partition count (broker default on --create)")
    p.add_argument("--replication-factor", type=int, metavar="R", help="replication factor (broker default)")
    p.add_argument("--config", action="append", default=[], metavar="NAME=VALUE",
                   help="topic config override for --create (repeatable)")
    p.add_argument("--if-not-exists", action="store_true", help="--create: no error if the topic exists")
    p.add_argument("--if-exists", action="store_true", help="--delete/--alter/--describe: no error if absent")
    p.add_argument("--exclude-internal", action="store_true", help="--list/--describe: leave out internal topics")
    p.set_defaults(func=lambda args: run_tool("topics", lambda: _run(args)))


def _run(args) -> int:
    from broker.tools.client import Client

    if args.create or args.delete or args.alter:
        if not args.topic:
            what = "--create" if args.create else "--delete" if args.delete else "--alter"
            raise UsageError(f"{what} needs --topic")
    if args.config and not args.create:
        raise UsageError("--config applies to --create only (use `chronolog configs --alter` for an existing topic)")
    if args.partitions is not None and not (args.create or args.alter):
        raise UsageError("--partitions applies to --create and --alter only")
    if args.partitions is not None and args.partitions < 1:
        raise UsageError(f"--partitions: invalid value {args.partitions} (must be at least 1)")
    if args.alter and args.partitions is None:
        raise UsageError("--alter needs --partitions")
    if args.replication_factor is not None and args.replication_factor < 1:
        raise UsageError(f"--replication-factor: invalid value {args.replication_factor}")
    configs = parse_config_pairs(args.config)
    with Client.from_args(args) as client:
        if args.create:
            return _create(client, args, configs)
        if args.delete:
            return _delete(client, args)
        if args.alter:
            return _alter(client, args)
        names = _matching(client, args)
        if args.list:
            for n in names:
                print(n)
            return 0
        return _describe(client, names)


def _matching(client, args) -> list[str]:
    topic = args.topic
    if topic is not None and not (set(topic) & _REGEX_CHARS):
        md = client.metadata([topic])
        ok = [t.name for t in md.topics if t.error_code == 0]
        if not ok and not args.if_exists:
            raise ToolError(f"--topic {topic}: topic does not exist")
        return ok
    md = client.metadata(None)
    pattern = re.compile(topic) if topic is not None else None
    names = sorted(t.name for t in md.topics
                   if t.error_code == 0 and not (args.exclude_internal and t.is_internal)
                   and (pattern is None or pattern.fullmatch(t.name)))
    if topic is not None and not names and not args.if_exists:
        raise ToolError(f"--topic {topic}: no topic matches")
    return names


def _controller(client):
    client.metadata([])
    if client.controller_id >= 0 and client.controller_id in client.brokers:
        return client.node(client.controller_id)
    return client.any()


def _create(client, args, configs: dict[str, str]) -> int:
    from broker.tools.client import error_name
    from protocol.errors import ErrorCode
    from protocol.messages import CreateTopicsRequest

    conn = _controller(client)
    v = conn.version_for(19)
    parts = args.partitions if args.partitions is not None else -1
    rf = args.replication_factor if args.replication_factor is not None else -1
    if v < 4 and (parts == -1 or rf == -1):
        # before KIP-464 the broker needs both: ask for its defaults is not possible
        parts = 1 if parts == -1 else parts
        rf = 1 if rf == -1 else rf
    req = CreateTopicsRequest(
        topics=[CreateTopicsRequest.CreatableTopic(
            name=args.topic, num_partitions=parts, replication_factor=rf,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=val) for k, val in configs.items()])],
        timeout_ms=args.request_timeout_ms)
    _, resp = conn.request(req, v)
    for t in resp.topics:
        if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and args.if_not_exists:
            return 0
        if t.error_code:
            detail = f": {t.error_message}" if getattr(t, "error_message", None) else ""
            raise ToolError(f"--create --topic {t.name}: {error_name(t.error_code)}{detail}")
    print(f"Created topic {args.topic}.")
    return 0


def _delete(client, args) -> int:
    from broker.tools.client import error_name
    from protocol.errors import ErrorCode
    from protocol.messages import DeleteTopicsRequest

    conn = _controller(client)
    v = conn.version_for(20)
    _, resp = conn.request(DeleteTopicsRequest(topic_names=[args.topic], timeout_ms=args.request_timeout_ms), v)
    for r in resp.responses:
        if r.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if args.if_exists:
                return 0
            raise ToolError(f"--topic {args.topic}: topic does not exist")
        if r.error_code:
            detail = f": {r.error_message}" if getattr(r, "error_message", None) else ""
            raise ToolError(f"--delete --topic {args.topic}: {error_name(r.error_code)}{detail}")
    return 0


def _alter(client, args) -> int:
    from broker.tools.client import error_name
    from protocol.messages import CreatePartitionsRequest

    if not _matching(client, args):
        return 0
    conn = _controller(client)
    v = conn.version_for(37)
    req = CreatePartitionsRequest(
        topics=[CreatePartitionsRequest.CreatePartitionsTopic(name=args.topic, count=args.partitions,
                                                              assignments=None)],
        timeout_ms=args.request_timeout_ms, validate_only=False)
    _, resp = conn.request(req, v)
    for r in resp.results:
        if r.error_code:
            detail = f": {r.error_message}" if r.error_message else ""
            raise ToolError(f"--alter --topic {args.topic} --partitions {args.partitions}: "
                            f"{error_name(r.error_code)}{detail}")
    return 0


def describe_configs(client, resource_type: int, names: list[str], synonyms: bool = False) -> dict:
    """``{name: DescribeConfigsResult}`` via DescribeConfigs (ToolError if unsupported)."""
    from protocol.messages import DescribeConfigsRequest

    conn = client.any()
    v = conn.version_for(32)
    req = DescribeConfigsRequest(
        resources=[DescribeConfigsRequest.DescribeConfigsResource(resource_type=resource_type, resource_name=n,
                                                                  configuration_keys=None) for n in names],
        include_synonyms=synonyms)
    _, resp = conn.request(req, v)
    return {r.resource_name: (r, v) for r in resp.results}


def is_default(entry, version: int) -> bool:
    if version == 0:
        return bool(entry.is_default)
    return entry.config_source == _SOURCE_DEFAULT


def _describe_topics(client, names: list[str], limit: int = 2000) -> dict:
    """``{name: (error code, topic id, partitions)}`` as Kafka's admin client describes
    topics by name: DescribeTopicPartitions page by page (its cursor), whose partitions
    carry the eligible leader replicas; Metadata from a broker without it."""
    from protocol.messages import DescribeTopicPartitionsRequest as Req

    conn = client.any()
    if not conn.supports(75):
        return {t.name: (t.error_code, getattr(t, "topic_id", None), list(t.partitions))
                for t in client.metadata(names).topics}
    out: dict = {}
    cursor = None
    while True:
        req = Req(topics=[Req.TopicRequest(name=n) for n in names], response_partition_limit=limit, cursor=cursor)
        _, resp = conn.request(req, conn.version_for(75))
        for t in resp.topics:  # a topic's partitions may run over several pages
            out.setdefault(t.name, (t.error_code, t.topic_id, []))[2].extend(t.partitions)
        nxt = resp.next_cursor
        if nxt is None:
            return out
        cursor = Req.Cursor(topic_name=nxt.topic_name, partition_index=nxt.partition_index)


def _describe(client, names: list[str]) -> int:
    import uuid

    if not names:
        return 0
    topics = _describe_topics(client, names)
    configs: dict = {}
    if client.any().supports(32):
        configs = describe_configs(client, 2, names)
    for name in names:
        if name not in topics or topics[name][0]:
            continue
        _error, tid, parts = topics[name]
        parts = sorted(parts, key=lambda p: p.partition_index)
        rf = len(parts[0].replica_nodes) if parts else 0
        cfg = ""
        if name in configs:
            res, v = configs[name]
            if res.error_code == 0:
                cfg = ",".join(f"{e.name}={'' if e.value is None else e.value}"
                               for e in res.configs if not is_default(e, v) and not e.is_sensitive)
        line = f"Topic: {name}"
        if tid is not None and tid != uuid.UUID(int=0):
            line += f"\tTopicId: {kafka_uuid.to_string(tid)}"
        line += f"\tPartitionCount: {len(parts)}\tReplicationFactor: {rf}\tConfigs: {cfg}"
        print(line)
        for p in parts:
            leader = p.leader_id if p.leader_id >= 0 else "none"
            # Kafka's TopicCommand: N/A when the lists are unknown (a Metadata answer)
            elrs = tuple("N/A" if x is None else ",".join(map(str, x))
                         for x in (getattr(p, "eligible_leader_replicas", None), getattr(p, "last_known_elr", None)))
            print(f"\tTopic: {name}\tPartition: {p.partition_index}\tLeader: {leader}"
                  f"\tReplicas: {','.join(map(str, p.replica_nodes))}\tIsr: {','.join(map(str, p.isr_nodes))}"
                  f"\tElr: {elrs[0]}\tLastKnownElr: {elrs[1]}")
    return 0
