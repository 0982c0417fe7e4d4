"""``chronolog share-groups``: kafka-share-groups.sh for share groups (KIP-932).

* ``--list`` (ListGroups v5 with type ``share`` on every broker): one group id per line.
* ``--describe --group G`` (ShareGroupDescribe, DescribeShareGroupOffsets, ListOffsets):
  per share-partition GROUP TOPIC PARTITION START-OFFSET LOG-END-OFFSET LAG (records from
  the share-partition start offset to the log end, those in flight included);
  ``--members``: GROUP CONSUMER-ID HOST CLIENT-ID #PARTITIONS ASSIGNMENT instead;
  ``--state``: GROUP STATE GROUP-EPOCH ASSIGNMENT-EPOCH #MEMBERS.
* ``--reset-offsets --group G (--to-datetime ISO | --by-duration PnDTnHnM | --to-earliest |
  --to-latest | --to-offset N) (--topic T[:p,...] ... | --all-topics) [--dry-run |
  --execute]``: prints the plan (GROUP TOPIC PARTITION NEW-START-OFFSET); ``--execute``
  applies it with AlterShareGroupOffsets. Only for a group without members. By time, the
  new offset is the first whose timestamp is at or after the time, else the log end.
* ``--delete --group G``: DeleteGroups (the group and all its share state; no members).
* ``--delete-offsets --group G --topic T ...``: DeleteShareGroupOffsets (the state of
  those topics only; their partitions start again at ``share.auto.offset.reset``).
"""

from __future__ import annotations

import sys

from broker.tools import ToolError, UsageError, add_common_args, run_tool

SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "to_offset")
ACTIONS = ("list", "describe", "reset_offsets", "delete", "delete_offsets")


def register(sub) -> None:
    p = sub.add_parser("share-groups", help="list, describe, reset and delete share groups",
                       description="List, describe, reset and delete share groups (kafka-share-groups.sh).")
    add_common_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all share groups")
    action.add_argument("--describe", action="store_true", help="start offsets and lag per share-partition")
    action.add_argument("--reset-offsets", action="store_true", help="reset the share-partition start offsets")
    action.add_argument("--delete", action="store_true", help="delete the group and its share state")
    action.add_argument("--delete-offsets", action="store_true", help="delete the group's state for some topics")
    p.add_argument("--group", metavar="GROUP", help="the share group")
    p.add_argument("--members", action="store_true", help="--describe: the members and their assignments")
    p.add_argument("--state", action="store_true", help="--describe: the group's state and epochs")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                   help="--reset-offsets / --delete-offsets: topic (all partitions) or topic:0,1 (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group has state for")
    p.add_argument("--to-datetime", metavar="ISO-8601", help="start at the first offset at or after this time")
    p.add_argument("--by-duration", metavar="PnDTnHnM", help="start at the first offset at or after now minus this")
    p.add_argument("--to-earliest", action="store_true", help="start at the log start offset")
    p.add_argument("--to-latest", action="store_true", help="start at the log end offset")
    p.add_argument("--to-offset", type=int, metavar="N", help="start at offset N (kept within the log)")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only print the plan (default)")
    run.add_argument("--execute", action="store_true", help="apply the new start offsets")
    p.set_defaults(func=lambda args: run_tool("share-groups", lambda: _run(args)))


def validate_args(args) -> None:
    """Flag combinations (UsageError: exit 2)."""
    from broker.tools.consumer_groups import validate_reset_args

    chosen = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    reset_opts = chosen or args.all_topics or args.execute or args.dry_run
    if args.list:
        if args.group or reset_opts or args.topic or args.members or args.state:
            raise UsageError("--list takes no other option")
        return
    action = next(a for a in ACTIONS if getattr(args, a))
    flag = "--" + action.replace("_", "-")
    if not args.group:
        raise UsageError(f"{flag} needs --group")
    if (args.members or args.state) and not args.describe:
        raise UsageError("--members and --state go with --describe")
    if args.members and args.state:
        raise UsageError("--describe takes only one of --members, --state")
    if action in ("describe", "delete"):
        if reset_opts or args.topic:
            raise UsageError(f"{flag} takes no --topic or reset option")
        return
    if action == "delete_offsets":
        if reset_opts:
            raise UsageError("--delete-offsets takes no reset option")
        if not args.topic:
            raise UsageError("--delete-offsets needs --topic")
        for t in args.topic:
            if ":" in t:
                raise UsageError(f"--delete-offsets: --topic {t!r}: whole topics only")
        return
    validate_reset_args(args, chosen, SCENARIOS)


def _run(args) -> int:
    from broker.tools.client import Client

    validate_args(args)
    with Client.from_args(args) as client:
        if args.list:
            return _list(client)
        coord = client.coordinator(args.group)
        if args.describe:
            return _describe(client, coord, args)
        if args.delete:
            return _delete(coord, args.group)
        if args.delete_offsets:
            return _delete_offsets(coord, args.group, args.topic)
        return _reset(client, coord, args)


def _table(rows, header) -> None:
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(len(header))]
    print()
    for r in [header] + rows:
        print(" ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip())


def _list(client) -> int:
    from broker.tools.client import error_name
    from protocol.messages import ListGroupsRequest

    client.metadata([])
    groups: set[str] = set()
    for node_id in sorted(client.brokers):
        conn = client.node(node_id)
        hi = conn.versions.get(16, (0, -1))[1]
        if hi < 5:  # the types filter (KIP-848) came with v5
            raise ToolError(f"--list: broker {node_id} supports ListGroups up to v{hi}; share groups need v5")
        _, resp = conn.request(ListGroupsRequest(states_filter=[], types_filter=["share"]), 5)
        if resp.error_code:
            raise ToolError(f"--list: broker {node_id}: {error_name(resp.error_code)}")
        groups.update(g.group_id for g in resp.groups)
    for g in sorted(groups):
        print(g)
    return 0


def _need(coord, api_key: int, what: str) -> int:
    if not coord.supports(api_key):
        raise ToolError(f"the group coordinator {coord.host}:{coord.port} does not support {what} (share groups, "
                        f"Kafka 4.1+)")
    return coord.version_for(api_key)


def describe_share_group(coord, group: str):
    """The ShareGroupDescribe entry of the group (ToolError when it is not a share group)."""
    from broker.tools.client import error_name
    from protocol.messages import ShareGroupDescribeRequest

    _, resp = coord.request(ShareGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
                            _need(coord, 77, "ShareGroupDescribe"))
    g = resp.groups[0]
    if g.error_code:
        raise ToolError(f"--group {group}: {g.error_message or error_name(g.error_code)}")
    return g


def share_start_offsets(coord, group: str) -> dict[tuple[str, int], int]:
    """{(topic, partition): share-partition start offset} (DescribeShareGroupOffsets)."""
    from broker.tools.client import error_name
    from protocol.messages import DescribeShareGroupOffsetsRequest as Req

    _, resp = coord.request(Req(groups=[Req.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]),
                            _need(coord, 90, "DescribeShareGroupOffsets"))
    g = resp.groups[0]
    if g.error_code:
        raise ToolError(f"--group {group}: {g.error_message or error_name(g.error_code)}")
    return {(t.topic_name, p.partition_index): p.start_offset for t in g.topics for p in t.partitions
            if not p.error_code and p.start_offset >= 0}


def _describe(client, coord, args) -> int:
    from broker.tools.consumer_groups import _leaders_for, _offsets

    group = args.group
    g = describe_share_group(coord, group)
    if args.state:
        _table([(group, g.group_state, g.group_epoch, g.assignment_epoch, len(g.members))],
               ("GROUP", "STATE", "GROUP-EPOCH", "ASSIGNMENT-EPOCH", "#MEMBERS"))
        return 0
    if args.members:
        rows = []
        for m in g.members:
            parts = [f"{tp.topic_name}:{','.join(map(str, tp.partitions))}" for tp in m.assignment.topic_partitions]
            rows.append((group, m.member_id, m.client_host.lstrip("/"), m.client_id,
                         sum(len(tp.partitions) for tp in m.assignment.topic_partitions), ";".join(parts) or "-"))
        if not rows:
            print(f"Share group '{group}' has no active members.", file=sys.stderr)
        _table(rows, ("GROUP", "CONSUMER-ID", "HOST", "CLIENT-ID", "#PARTITIONS", "ASSIGNMENT"))
        return 0
    starts = share_start_offsets(coord, group)
    if not g.members:
        print(f"Share group '{group}' has no active members.", file=sys.stderr)
    leaders = _leaders_for(client, {t for t, _ in starts})
    known = [tp for tp in starts if tp[0] in leaders and tp[1] in leaders[tp[0]]]
    ends = _offsets(client, known, -1, leaders) if known else {}
    rows = []
    for tp in sorted(starts):
        end = ends.get(tp)
        rows.append((group, tp[0], tp[1], starts[tp], "-" if end is None else end,
                     "-" if end is None else max(0, end - starts[tp])))
    _table(rows, ("GROUP", "TOPIC", "PARTITION", "START-OFFSET", "LOG-END-OFFSET", "LAG"))
    return 0


def _reset(client, coord, args) -> int:
    from broker.tools.client import error_name
    from broker.tools.consumer_groups import _leaders_for, plan_reset, print_plan, topic_partitions_of
    from protocol.messages import AlterShareGroupOffsetsRequest as Req

    group = args.group
    try:
        g = describe_share_group(coord, group)
    except ToolError:
        g = None  # a group not yet made: the new offsets make it
    if g is not None and g.members:
        raise ToolError(f"--group {group}: share group '{group}' has {len(g.members)} active member(s); stop them "
                        f"before resetting its offsets")
    if args.all_topics:
        parts = sorted(share_start_offsets(coord, group) if g is not None else [])
        if not parts:
            raise ToolError(f"--all-topics: share group '{group}' has no share-partitions (name topics with --topic)")
        leaders = _leaders_for(client, {t for t, _ in parts})
        parts = [tp for tp in parts if tp[0] in leaders and tp[1] in leaders[tp[0]]]
    else:
        parts, leaders = topic_partitions_of(client, args.topic)
    plan = plan_reset(client, args, parts, leaders)
    if not print_plan(args, group, plan, "NEW-START-OFFSET"):
        return 0
    by_topic: dict[str, list] = {}
    for (t, p), off in sorted(plan.items()):
        by_topic.setdefault(t, []).append(Req.AlterShareGroupOffsetsRequestPartition(partition_index=p,
                                                                                      start_offset=off))
    _, resp = coord.request(Req(group_id=group, topics=[Req.AlterShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                                                        for t, ps in by_topic.items()]),
                            _need(coord, 91, "AlterShareGroupOffsets"))
    errors = [f"{t.topic_name}-{p.partition_index}: {p.error_message or error_name(p.error_code)}"
              for t in resp.responses for p in t.partitions if p.error_code]
    if errors:
        raise ToolError(f"--execute: AlterShareGroupOffsets for share group '{group}' failed: " + ", ".join(errors))
    return 0


def _delete(coord, group: str) -> int:
    from broker.tools.client import error_name
    from protocol.messages import DeleteGroupsRequest

    describe_share_group(coord, group)  # a share group, or a clear error
    _, resp = coord.request(DeleteGroupsRequest(groups_names=[group]), coord.version_for(42))
    r = resp.results[0]
    if r.error_code:
        raise ToolError(f"--delete: share group '{group}': {error_name(r.error_code)}")
    print(f"Deletion of requested share groups ('{group}') was successful.")
    return 0


def _delete_offsets(coord, group: str, topics: list[str]) -> int:
    from broker.tools.client import error_name
    from protocol.messages import DeleteShareGroupOffsetsRequest as Req

    _, resp = coord.request(Req(group_id=group, topics=[Req.DeleteShareGroupOffsetsRequestTopic(topic_name=t)
                                                        for t in topics]),
                            _need(coord, 92, "DeleteShareGroupOffsets"))
    if resp.error_code:
        raise ToolError(f"--delete-offsets: share group '{group}': {resp.error_message or error_name(resp.error_code)}")
    rows = []
    for t in resp.responses:
        for p in t.partitions:
            rows.append((t.topic_name, "-" if p.partition_index < 0 else p.partition_index,
                         f"Error: {p.error_message or error_name(p.error_code)}" if p.error_code else "Successful"))
    _table(rows, ("TOPIC", "PARTITION", "STATUS"))
    return 0
