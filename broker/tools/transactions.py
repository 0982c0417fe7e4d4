"""``chronolog transactions``: kafka-transactions.sh (TransactionsCommand).

Sub-commands, with Kafka's flags and its tab-separated tables:

* ``list`` (ListTransactions): TransactionalId, Coordinator, ProducerId, TransactionState;
* ``describe --transactional-id ID`` (FindCoordinator + DescribeTransactions);
* ``describe-producers --topic T --partition P`` (DescribeProducers);
* ``find-hanging --broker-id N [--topic T [--partition P]] [--max-transaction-timeout MIN]``:
  partitions whose open transaction is older than the maximum transaction timeout
  (default 15 minutes) and that the coordinator does not know as part of that
  producer's ongoing transaction;
* ``abort --topic T --partition P --start-offset N`` (DescribeProducers +
  WriteTxnMarkers ABORT for the producer whose transaction starts there).
"""

from __future__ import annotations

import time

from broker.tools import ToolError, UsageError, add_common_args, run_tool


def register(sub) -> None:
    p = sub.add_parser("transactions", help="list, describe and abort transactions",
                       description="Describe and manage transactions (kafka-transactions.sh).")
    add_common_args(p)
    cmds = p.add_subparsers(dest="txn_command", metavar="COMMAND")
    cmds.add_parser("list", help="list transactions the coordinator knows")
    d = cmds.add_parser("describe", help="describe one transactional id")
    d.add_argument("--transactional-id", required=True, metavar="ID")
    dp = cmds.add_parser("describe-producers", help="the active producers of a partition")
    dp.add_argument("--topic", required=True)
    dp.add_argument("--partition", required=True, type=int)
    fh = cmds.add_parser("find-hanging", help="open transactions the coordinator does not know")
    fh.add_argument("--broker-id", required=True, type=int)
    fh.add_argument("--topic")
    fh.add_argument("--partition", type=int)
    fh.add_argument("--max-transaction-timeout", type=int, default=15, metavar="MINUTES",
                    help="transactions open longer than this are candidates (default 15, "
                         "transaction.max.timeout.ms's default)")
    ab = cmds.add_parser("abort", help="abort the open transaction starting at an offset")
    ab.add_argument("--topic", required=True)
    ab.add_argument("--partition", required=True, type=int)
    ab.add_argument("--start-offset", required=True, type=int)
    p.set_defaults(func=lambda args: run_tool("transactions", lambda: _run(args, p)))


def _table(header: list[str], rows: list[list]) -> None:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    for row in [header, *rows]:
        print("\t".join(str(x).ljust(w) for x, w in zip(row, widths)).rstrip())


def _run(args, parser) -> int:
    from broker.tools.client import Client

    if args.txn_command is None:
        raise UsageError("a command is needed: list, describe, describe-producers, find-hanging or abort")
    with Client.from_args(args) as client:
        return {"list": _list, "describe": _describe, "describe-producers": _describe_producers,
                "find-hanging": _find_hanging, "abort": _abort}[args.txn_command](client, args)


def _check(code: int, what: str) -> None:
    from broker.tools.client import error_name

    if code:
        raise ToolError(f"{what}: {error_name(code)}")


def _list_all(client) -> list:
    from protocol.messages import ListTransactionsRequest

    client.metadata([])
    out = []
    for node in sorted(client.brokers):
        _, resp = client.node(node).request(ListTransactionsRequest(state_filters=[], producer_id_filters=[],
                                                                    duration_filter=-1))
        _check(resp.error_code, f"ListTransactions on broker {node}")
        out += [(node, s) for s in resp.transaction_states]
    return out


def _list(client, args) -> int:
    rows = [[s.transactional_id, node, s.producer_id, s.transaction_state] for node, s in _list_all(client)]
    _table(["TransactionalId", "Coordinator", "ProducerId", "TransactionState"], rows)
    return 0


def _coordinator(client, tid: str):
    from protocol.messages import FindCoordinatorRequest

    conn = client.any()
    v = conn.version_for(10)
    if v >= 4:
        _, r = conn.request(FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]), v)
        c = r.coordinators[0]
        code, node = c.error_code, c.node_id
    else:
        _, r = conn.request(FindCoordinatorRequest(key=tid, key_type=1), v)
        code, node = r.error_code, r.node_id
    _check(code, f"FindCoordinator for transactional id {tid}")
    return node


def _describe_ids(client, ids) -> list:
    from protocol.messages import DescribeTransactionsRequest

    out = []
    for tid in ids:
        node = _coordinator(client, tid)
        _, r = client.node(node).request(DescribeTransactionsRequest(transactional_ids=[tid]))
        out.append((node, r.transaction_states[0]))
    return out


def _describe(client, args) -> int:
    node, s = _describe_ids(client, [args.transactional_id])[0]
    _check(s.error_code, f"--transactional-id {args.transactional_id}")
    now = int(time.time() * 1000)
    start = s.transaction_start_time_ms
    parts = ",".join(f"{t.topic}-{p}" for t in s.topics for p in t.partitions)
    _table(["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch", "TransactionState",
            "TransactionTimeoutMs", "CurrentTransactionStartTimeMs", "TransactionDurationMs", "TopicPartitions"],
           [[node, s.transactional_id, s.producer_id, s.producer_epoch, s.transaction_state,
             s.transaction_timeout_ms, start if start >= 0 else "None", now - start if start >= 0 else "None",
             parts]])
    return 0


def _producers(client, topic: str, partitions) -> dict:
    """{partition: [ProducerState]} of ``topic``, asked of each partition's leader."""
    from protocol.messages import DescribeProducersRequest

    leaders = client.topic_partitions([topic])[topic]
    out = {}
    for part in partitions:
        if part not in leaders:
            raise ToolError(f"--partition {part}: {topic} has partitions 0-{len(leaders) - 1}")
        _, r = client.node(leaders[part]).request(DescribeProducersRequest(topics=[
            DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[part])]))
        pr = r.topics[0].partitions[0]
        _check(pr.error_code, f"{topic}-{part}")
        out[part] = (leaders[part], pr.active_producers)
    return out


def _describe_producers(client, args) -> int:
    _, active = _producers(client, args.topic, [args.partition])[args.partition]
    _table(["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence", "LastTimestamp",
            "CurrentTransactionStartOffset"],
           [[p.producer_id, p.producer_epoch, p.coordinator_epoch, p.last_sequence, p.last_timestamp,
             p.current_txn_start_offset if p.current_txn_start_offset >= 0 else "None"] for p in active])
    return 0


def _find_hanging(client, args) -> int:
    if args.partition is not None and args.topic is None:
        raise UsageError("--partition needs --topic")
    md = client.metadata(None if args.topic is None else [args.topic])
    candidates = []
    now = int(time.time() * 1000)
    limit_ms = args.max_transaction_timeout * 60_000
    for t in md.topics:
        if t.error_code:
            _check(t.error_code, f"--topic {t.name}")
        parts = [p.partition_index for p in t.partitions if p.leader_id == args.broker_id
                 and (args.partition is None or p.partition_index == args.partition)]
        for part, (_leader, active) in _producers(client, t.name, parts).items():
            for p in active:
                if p.current_txn_start_offset >= 0 and now - p.last_timestamp > limit_ms:
                    candidates.append((t.name, part, p))
    known = {s.producer_id: s for _node, s in _list_all(client)} if candidates else {}
    ids = [known[pid].transactional_id for pid in {c[2].producer_id for c in candidates} if pid in known]
    described = {s.producer_id: s for _n, s in _describe_ids(client, ids)}
    rows = []
    for topic, part, p in candidates:
        state = described.get(p.producer_id) if p.producer_id in known else None
        if state is not None and state.error_code == 0 and state.transaction_state == "Ongoing" and any(
                t.topic == topic and part in t.partitions for t in state.topics):
            continue  # the coordinator knows it: it will end (or time out) normally
        rows.append([topic, part, p.producer_id, p.producer_epoch, p.coordinator_epoch, p.current_txn_start_offset,
                     p.last_timestamp, (now - p.last_timestamp) // 60_000])
    _table(["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch", "StartOffset",
            "LastTimestamp", "Duration(min)"], rows)
    return 0


def _abort(client, args) -> int:
    from protocol.messages import WriteTxnMarkersRequest as W

    leader, active = _producers(client, args.topic, [args.partition])[args.partition]
    match = [p for p in active if p.current_txn_start_offset == args.start_offset]
    if not match:
        raise ToolError(f"no open transaction starts at offset {args.start_offset} of {args.topic}-{args.partition}")
    p = match[0]
    _, r = client.node(leader).request(W(markers=[W.WritableTxnMarker(
        producer_id=p.producer_id, producer_epoch=p.producer_epoch, transaction_result=False,
        coordinator_epoch=max(p.coordinator_epoch, 0),
        topics=[W.WritableTxnMarkerTopic(name=args.topic, partition_indexes=[args.partition])])]))
    _check(r.markers[0].topics[0].partitions[0].error_code, f"abort in {args.topic}-{args.partition}")
    print(f"Aborted the transaction of producer {p.producer_id} (epoch {p.producer_epoch}) starting at offset "
          f"{args.start_offset} of {args.topic}-{args.partition}")
    return 0
