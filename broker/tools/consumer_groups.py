"""``chronolog consumer-groups``: kafka-consumer-groups.sh for classic consumer groups.

* ``--list`` (ListGroups on every broker): one group id per line.
* ``--describe --group G`` (FindCoordinator, DescribeGroups, ConsumerGroupDescribe for a
  group of the consumer protocol, OffsetFetch, ListOffsets, Fetch): per partition GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG
  LAG-SECONDS CONSUMER-ID HOST CLIENT-ID. LAG-SECONDS is KIP-32's lag by time: now minus
  the timestamp of the next unconsumed record (the record at the committed offset, read
  with a Fetch), 0 when the group is caught up, ``-`` without a committed offset.
* ``--reset-offsets --group G (--to-datetime ISO | --by-duration PnDTnHnM | --to-earliest |
  --to-latest | --to-offset N | --shift-by N | --to-current) (--topic T[:p,...] ... |
  --all-topics) [--dry-run | --execute]``: prints the plan (GROUP TOPIC PARTITION
  NEW-OFFSET); ``--execute`` commits it with OffsetCommit (generation -1, member "").
  Only for an inactive group (state Empty or Dead), as in Kafka. By time, the new offset
  is the first whose timestamp is at or after the time, or the log end offset when no
  record is that recent (as in Kafka).
"""

from __future__ import annotations

import sys
import time

from broker.tools import ToolError, UsageError, add_common_args, run_tool

MISSING = "-"
SCENARIOS = ("to_datetime", "by_duration", "to_earliest", "to_latest", "to_offset", "shift_by", "to_current")


def register(sub) -> None:
    p = sub.add_parser("consumer-groups", help="list and describe consumer groups, reset their offsets",
                       description="List and describe consumer groups, reset their offsets "
                                   "(kafka-consumer-groups.sh).")
    add_common_args(p)
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--list", action="store_true", help="list all consumer groups")
    action.add_argument("--describe", action="store_true", help="offsets, lag and lag in seconds per partition")
    action.add_argument("--reset-offsets", action="store_true", help="reset the group's committed offsets")
    p.add_argument("--group", metavar="GROUP", help="the consumer group")
    p.add_argument("--topic", action="append", default=[], metavar="TOPIC[:P,P...]",
                   help="--reset-offsets: topic (all partitions) or topic:0,1 (repeatable)")
    p.add_argument("--all-topics", action="store_true", help="--reset-offsets: every topic the group has offsets for")
    p.add_argument("--to-datetime", metavar="ISO-8601", help="reset to the first offset at or after this time")
    p.add_argument("--by-duration", metavar="PnDTnHnM", help="reset to the first offset at or after now minus this")
    p.add_argument("--to-earliest", action="store_true", help="reset to the earliest offset")
    p.add_argument("--to-latest", action="store_true", help="reset to the log end offset")
    p.add_argument("--to-offset", type=int, metavar="N", help="reset to offset N (kept within the log)")
    p.add_argument("--shift-by", type=int, metavar="N", help="move the current offset by N (may be negative)")
    p.add_argument("--to-current", action="store_true", help="reset to the current committed offset")
    run = p.add_mutually_exclusive_group()
    run.add_argument("--dry-run", action="store_true", help="only print the plan (default)")
    run.add_argument("--execute", action="store_true", help="commit the new offsets")
    p.set_defaults(func=lambda args: run_tool("consumer-groups", lambda: _run(args)))


def parse_topic_spec(text: str) -> tuple[str, list[int] | None]:
    """``topic`` -> (topic, None); ``topic:0,2`` -> (topic, [0, 2])."""
    from broker.tools.get_offsets import parse_partitions

    topic, sep, parts = text.partition(":")
    if not topic:
        raise UsageError(f"--topic: invalid value {text!r} (expected TOPIC or TOPIC:P,P...)")
    if not sep:
        return topic, None
    if not parts:
        raise UsageError(f"--topic: no partition after ':' in {text!r}")
    try:
        return topic, parse_partitions(parts, "--topic")
    except UsageError:
        raise UsageError(f"--topic: invalid partitions in {text!r} (expected TOPIC:0,1 or TOPIC:0-3)") from None


def validate_args(args) -> None:
    """Flag combinations (UsageError: exit 2)."""
    chosen = [s for s in SCENARIOS if getattr(args, s) not in (None, False)]
    reset_only = chosen or args.topic or args.all_topics or args.execute or args.dry_run
    if args.list:
        if args.group or reset_only:
            raise UsageError("--list takes no --group, --topic or reset option")
        return
    if not args.group:
        raise UsageError(f"{'--describe' if args.describe else '--reset-offsets'} needs --group")
    if args.describe:
        if reset_only:
            raise UsageError("--describe takes no --topic or reset option")
        return
    validate_reset_args(args, chosen, SCENARIOS)


def validate_reset_args(args, chosen: list[str], scenarios) -> None:
    """--reset-offsets: one scenario of ``scenarios``, --topic or --all-topics, and
    parseable values (shared with share-groups)."""
    if len(chosen) != 1:
        names = ", ".join("--" + s.replace("_", "-") for s in scenarios)
        if not chosen:
            raise UsageError(f"--reset-offsets needs one of {names}")
        raise UsageError("--reset-offsets takes only one of " +
                         ", ".join("--" + s.replace("_", "-") for s in chosen))
    if bool(args.topic) == bool(args.all_topics):
        raise UsageError("--reset-offsets needs either --topic or --all-topics")
    if args.to_offset is not None and args.to_offset < 0:
        raise UsageError(f"--to-offset: invalid value {args.to_offset} (must be >= 0)")
    if args.to_datetime is not None:
        from broker.tools.timeparse import parse_datetime

        parse_datetime(args.to_datetime, "--to-datetime")
    if args.by_duration is not None:
        from broker.tools.timeparse import parse_duration

        parse_duration(args.by_duration, "--by-duration")
    for t in args.topic:
        parse_topic_spec(t)


def _run(args) -> int:
    from broker.tools.client import Client

    validate_args(args)
    with Client.from_args(args) as client:
        if args.list:
            return _list(client)
        if args.describe:
            return _describe(client, args.group)
        return _reset(client, args)


# -------------------------------------------------------------------------- list


def _list(client) -> int:
    from broker.tools.client import error_name
    from protocol.messages import ListGroupsRequest

    client.metadata([])
    groups: set[str] = set()
    for node_id in sorted(client.brokers):
        conn = client.node(node_id)
        v = conn.version_for(16)
        _, resp = conn.request(ListGroupsRequest(), v)
        if resp.error_code:
            raise ToolError(f"--list: broker {node_id}: {error_name(resp.error_code)}")
        groups.update(g.group_id for g in resp.groups if g.protocol_type in ("consumer", ""))
    for g in sorted(groups):
        print(g)
    return 0


# -------------------------------------------------------------------------- shared


def describe_group(coord, group: str):
    """(state, protocol_type, members) from DescribeGroups; state 'Dead' when unknown."""
    from broker.tools.client import error_name
    from protocol.messages import DescribeGroupsRequest

    v = coord.version_for(15)
    _, resp = coord.request(DescribeGroupsRequest(groups=[group]), v)
    g = resp.groups[0]
    if g.error_code not in (0, 69):
        raise ToolError(f"--group {group}: DescribeGroups failed: {error_name(g.error_code)}")
    if g.error_code == 69 or g.group_state == "Dead":  # not classic: GROUP_ID_NOT_FOUND from v6, Dead before
        if coord.supports(69):
            # a group of the consumer protocol (KIP-848) is described by ConsumerGroupDescribe
            found = _describe_consumer_group(coord, group)
            if found is not None:
                return found
        return "Dead", "", []
    return g.group_state, g.protocol_type, list(g.members)


class _ConsumerMember:
    """A ConsumerGroupDescribe member shaped like a DescribeGroups one for the table."""

    def __init__(self, m):
        self.member_id, self.client_id, self.client_host = m.member_id, m.client_id, m.client_host
        self.member_assignment = None
        self.pairs = [(tp.topic_name, p) for tp in m.assignment.topic_partitions for p in tp.partitions]


def _describe_consumer_group(coord, group: str):
    from broker.tools.client import error_name
    from protocol.messages import ConsumerGroupDescribeRequest

    _, resp = coord.request(ConsumerGroupDescribeRequest(group_ids=[group], include_authorized_operations=False),
                            coord.version_for(69))
    g = resp.groups[0]
    if g.error_code == 69:  # GROUP_ID_NOT_FOUND: unknown, or a classic group
        return None
    if g.error_code:
        raise ToolError(f"--group {group}: ConsumerGroupDescribe failed: {error_name(g.error_code)}")
    return g.group_state, "consumer", [_ConsumerMember(m) for m in g.members]


def fetch_committed(coord, group: str, partitions: list[tuple[str, int]] | None = None
                    ) -> dict[tuple[str, int], int]:
    """Committed offsets (OffsetFetch; None: every partition the group has offsets for)."""
    from broker.tools.client import error_name
    from protocol.messages import OffsetFetchRequest as Req

    v = coord.version_for(9)
    by_topic: dict[str, list[int]] = {}
    for t, p in partitions or []:
        by_topic.setdefault(t, []).append(p)
    if partitions is None and v < 2:
        raise ToolError("the coordinator's OffsetFetch is older than v2: cannot list all offsets")
    if v >= 8:  # KIP-709: batched groups
        topics8 = None if partitions is None else [
            Req.OffsetFetchRequestTopics(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        _, resp = coord.request(Req(groups=[Req.OffsetFetchRequestGroup(group_id=group, topics=topics8)],
                                    require_stable=False), v)
        resp = resp.groups[0] if resp.groups else resp
    else:
        topics = None if partitions is None else [
            Req.OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in by_topic.items()]
        _, resp = coord.request(Req(group_id=group, topics=topics), v)
    if getattr(resp, "error_code", 0):
        raise ToolError(f"--group {group}: OffsetFetch failed: {error_name(resp.error_code)}")
    out = {}
    for t in resp.topics:
        for p in t.partitions:
            if p.error_code:
                raise ToolError(f"--group {group}: OffsetFetch {t.name}-{p.partition_index}: "
                                f"{error_name(p.error_code)}")
            if p.committed_offset >= 0:
                out[(t.name, p.partition_index)] = p.committed_offset
    return out


def member_assignments(members) -> dict[tuple[str, int], object]:
    """(topic, partition) -> member, decoding ConsumerProtocolAssignment."""
    import struct

    from protocol import codec

    out = {}
    for m in members:
        if hasattr(m, "pairs"):  # a consumer-protocol member (ConsumerGroupDescribe)
            for tp in m.pairs:
                out[tp] = m
            continue
        data = bytes(m.member_assignment or b"")
        if len(data) < 2:
            continue
        (version,) = struct.unpack_from(">h", data, 0)
        try:
            a, _ = codec.decode_body("ConsumerProtocolAssignment", min(max(version, 0), 3), data, 2)
        except codec.CodecError:
            continue
        for tp in a.assigned_partitions:
            for p in tp.partitions:
                out[(tp.topic, p)] = m
    return out


def _offsets(client, parts, ts: int, leaders) -> dict[tuple[str, int], int]:
    from broker.tools.client import error_name

    ans = client.list_offsets({tp: ts for tp in parts}, leaders)
    out = {}
    for tp, (err, off, _) in ans.items():
        if err:
            raise ToolError(f"ListOffsets {tp[0]}-{tp[1]}: {error_name(err)}")
        out[tp] = off
    return out


def next_record_timestamps(client, positions: dict[tuple[str, int], int], leaders
                           ) -> dict[tuple[str, int], int]:
    """Timestamp of the first record at or after each offset (Fetch, isolation
    read_uncommitted; transaction markers skipped); partitions where no record is found
    are left out."""
    from protocol.errors import ErrorCode
    from protocol.messages import FetchRequest as Req
    from protocol.records import CorruptRecordError, InvalidRecordError, iter_batches, iter_records, magic_of

    out: dict[tuple[str, int], int] = {}
    by_leader: dict[int, dict[str, list]] = {}
    for (t, p), off in positions.items():
        by_leader.setdefault(leaders[t][p], {}).setdefault(t, []).append((p, off))
    for leader, topics in by_leader.items():
        conn = client.node(leader)
        v = conn.version_for(1)
        if v < 4:
            raise ToolError(f"broker {conn.host}:{conn.port} supports Fetch up to v{v}; LAG-SECONDS needs v4")
        todo = {(t, p): off for t, ps in topics.items() for p, off in ps}
        for _attempt in range(2):
            if not todo:
                break
            by_topic: dict[str, list] = {}
            for (t, p), off in todo.items():
                by_topic.setdefault(t, []).append(Req.FetchPartition(partition=p, fetch_offset=off,
                                                                     partition_max_bytes=256 * 1024))
            req = Req(replica_id=-1, max_wait_ms=500, min_bytes=1, max_bytes=8 * 1024 * 1024, isolation_level=0,
                      topics=[Req.FetchTopic(topic=t, partitions=ps) for t, ps in by_topic.items()])
            _, resp = conn.request(req, v)
            retry = {}
            for tr in resp.responses:
                for pr in tr.partitions:
                    tp = (tr.topic, pr.partition_index)
                    if tp not in todo:
                        continue
                    if pr.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and pr.log_start_offset > todo[tp]:
                        retry[tp] = pr.log_start_offset  # below the log start: the next record is there
                        continue
                    if pr.error_code or not pr.records:
                        continue
                    buf = pr.records
                    try:
                        if magic_of(buf, 0) != 2:
                            continue
                        for pos, h in iter_batches(buf):
                            if h.last_offset < todo[tp] or h.is_control:  # markers are not records
                                continue
                            for rec in iter_records(buf, pos, h):
                                if rec.offset >= todo[tp]:
                                    out[tp] = rec.timestamp
                                    break
                            if tp in out:
                                break
                    except (CorruptRecordError, InvalidRecordError):
                        continue
            todo = retry
    return out


def _leaders_for(client, topics) -> dict[str, dict[int, int]]:
    from protocol.errors import ErrorCode

    md = client.metadata(sorted(topics))
    out = {}
    for t in md.topics:
        if t.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            continue
        out[t.name] = {p.partition_index: p.leader_id for p in t.partitions}
    return out


# -------------------------------------------------------------------------- describe


def _describe(client, group: str) -> int:
    coord = client.coordinator(group)
    state, protocol_type, members = describe_group(coord, group)
    committed = fetch_committed(coord, group)
    if state == "Dead" and not committed:
        raise ToolError(f"--group {group}: consumer group '{group}' does not exist")
    if protocol_type not in ("", "consumer"):
        raise ToolError(f"--group {group}: not a consumer group (protocol type {protocol_type!r})")
    assigned = member_assignments(members)
    if state == "Empty":
        print(f"Consumer group '{group}' has no active members.", file=sys.stderr)
    elif state in ("PreparingRebalance", "CompletingRebalance", "Assigning", "Reconciling"):
        print(f"Warning: consumer group '{group}' is rebalancing.", file=sys.stderr)
    parts = set(committed) | set(assigned)
    leaders = _leaders_for(client, {t for t, _ in parts})
    known = [tp for tp in parts if tp[0] in leaders and tp[1] in leaders[tp[0]]]
    ends = _offsets(client, known, -1, leaders) if known else {}
    behind = {tp: committed[tp] for tp in known if tp in committed and committed[tp] < ends[tp]}
    stamps = next_record_timestamps(client, behind, leaders) if behind else {}
    now = int(time.time() * 1000)
    rows = []
    for tp in sorted(parts):
        cur = committed.get(tp)
        end = ends.get(tp)
        lag = end - cur if cur is not None and end is not None else None
        if cur is None or end is None:
            lag_s = MISSING
        elif lag <= 0:
            lag_s = "0"
        elif tp in stamps:
            lag_s = f"{(now - stamps[tp]) / 1000:.3f}"
        else:
            lag_s = MISSING
        m = assigned.get(tp)
        rows.append((group, tp[0], str(tp[1]), MISSING if cur is None else str(cur),
                     MISSING if end is None else str(end), MISSING if lag is None else str(lag), lag_s,
                     m.member_id if m else MISSING, m.client_host.lstrip("/") if m else MISSING,
                     m.client_id if m else MISSING))
    header = ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG", "LAG-SECONDS",
              "CONSUMER-ID", "HOST", "CLIENT-ID")
    widths = [max(len(r[i]) for r in rows + [header]) for i in range(len(header))]
    print()
    for r in [header] + rows:
        print(" ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
    return 0


# -------------------------------------------------------------------------- reset


def _reset(client, args) -> int:
    group = args.group
    coord = client.coordinator(group)
    state, _, _ = describe_group(coord, group)
    if state not in ("Empty", "Dead"):
        raise ToolError(f"--group {group}: assignments can only be reset if the group '{group}' is inactive, "
                        f"but the current state is {state}")
    if args.all_topics:
        committed = fetch_committed(coord, group)
        parts = sorted(committed)
        if not parts:
            raise ToolError(f"--all-topics: group '{group}' has no committed offsets (name topics with --topic)")
        leaders = _leaders_for(client, {t for t, _ in parts})
        parts = [tp for tp in parts if tp[0] in leaders and tp[1] in leaders[tp[0]]]
    else:
        parts, leaders = topic_partitions_of(client, args.topic)
        committed = fetch_committed(coord, group, parts) if (args.shift_by is not None or args.to_current) else {}
    if args.shift_by is not None or args.to_current:
        lo = _offsets(client, parts, -2, leaders)
        hi = _offsets(client, parts, -1, leaders)
        plan = {}
        for tp in parts:
            if tp not in committed:
                raise ToolError(f"--group {group}: no committed offset for {tp[0]}-{tp[1]} to "
                                f"{'shift' if args.shift_by is not None else 'keep'}")
            plan[tp] = min(max(committed[tp] + (args.shift_by or 0), lo[tp]), hi[tp])
    else:
        plan = plan_reset(client, args, parts, leaders)
    if not print_plan(args, group, plan, "NEW-OFFSET"):
        return 0
    _commit(coord, group, plan)
    return 0


def topic_partitions_of(client, specs: list[str]):
    """``--topic T`` / ``--topic T:0,1`` (repeatable) -> (sorted partitions, leaders)."""
    parsed = [parse_topic_spec(t) for t in specs]
    leaders = client.topic_partitions(sorted({t for t, _ in parsed}))
    parts = set()
    for t, ps in parsed:
        bad = [p for p in ps or () if p not in leaders[t]]
        if bad:
            raise ToolError(f"--topic {t}: no partition {','.join(map(str, bad))} (the topic has {len(leaders[t])})")
        parts.update((t, p) for p in (sorted(leaders[t]) if ps is None else ps))
    return sorted(parts), leaders


def plan_reset(client, args, parts, leaders) -> dict[tuple[str, int], int]:
    """The new offsets of --to-earliest, --to-latest, --to-offset (kept within the log),
    --to-datetime or --by-duration (the first offset at or after the time, else the log
    end offset), by ListOffsets."""
    from broker.tools.timeparse import parse_datetime, parse_duration

    if args.to_earliest:
        return _offsets(client, parts, -2, leaders)
    if args.to_latest:
        return _offsets(client, parts, -1, leaders)
    if args.to_offset is not None:
        lo, hi = _offsets(client, parts, -2, leaders), _offsets(client, parts, -1, leaders)
        return {tp: min(max(args.to_offset, lo[tp]), hi[tp]) for tp in parts}
    if args.to_datetime is not None:
        ts = parse_datetime(args.to_datetime, "--to-datetime")
    else:
        ts = int(time.time() * 1000) - parse_duration(args.by_duration, "--by-duration")
    if ts < 0:
        raise UsageError(f"--to-datetime/--by-duration: the time {ts} ms is before 1970")
    by_time = _offsets(client, parts, ts, leaders)
    missing = [tp for tp, off in by_time.items() if off < 0]
    latest = _offsets(client, missing, -1, leaders) if missing else {}
    return {tp: (off if off >= 0 else latest[tp]) for tp, off in by_time.items()}


def print_plan(args, group: str, plan: dict, column: str) -> bool:
    """Print GROUP TOPIC PARTITION <column>; True when --execute asks to apply it (else
    Kafka's warning unless --dry-run)."""
    fmt = "{:<30} {:<30} {:<10} {:<15}"
    print()
    print(fmt.format("GROUP", "TOPIC", "PARTITION", column).rstrip())
    for tp in sorted(plan):
        print(fmt.format(group, tp[0], tp[1], plan[tp]).rstrip())
    print()
    if not args.execute and not args.dry_run:
        print("WARN: No action will be performed as the --execute option is missing "
              "(add --dry-run to keep this behaviour without the warning).", file=sys.stderr)
    return bool(args.execute)


def _commit(coord, group: str, plan: dict[tuple[str, int], int]) -> None:
    from broker.tools.client import error_name
    from protocol.messages import OffsetCommitRequest as Req

    v = coord.version_for(8)
    by_topic: dict[str, list] = {}
    for (t, p), off in sorted(plan.items()):
        by_topic.setdefault(t, []).append(Req.OffsetCommitRequestPartition(
            partition_index=p, committed_offset=off, committed_metadata=""))
    req = Req(group_id=group, generation_id_or_member_epoch=-1, member_id="", group_instance_id=None,
              topics=[Req.OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()])
    _, resp = coord.request(req, v)
    errors = [f"{t.name}-{p.partition_index}: {error_name(p.error_code)}"
              for t in resp.topics for p in t.partitions if p.error_code]
    if errors:
        raise ToolError(f"--execute: OffsetCommit for group '{group}' failed: " + ", ".join(errors))
