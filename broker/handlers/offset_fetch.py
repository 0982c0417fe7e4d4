"""OffsetFetch (key 9), v0-8: committed offsets of a group (v8: of several groups).

Partitions without a committed offset (and every partition of an unknown group) answer
offset -1 with no error, as Kafka does; ``topics`` null (v2+) asks for every committed
offset of the group. ``require_stable`` (v7+, KIP-447): a partition whose transactional
offset commit still waits for the transaction's end answers UNSTABLE_OFFSET_COMMIT
(retriable), so an exactly-once consumer does not start from an offset about to change.
"""

from protocol.errors import ErrorCode
from protocol.messages import OffsetFetchResponse as R

from broker.security import authorizer as A


def _fetch(coord, group_id, topics, stable=False):
    """topics: list of (name, [partitions]) or None. Returns (error, {topic: [(p, off, epoch, meta, err)]})."""
    if coord is None:
        return int(ErrorCode.COORDINATOR_NOT_AVAILABLE), {}
    wanted = None if topics is None else [(name, p) for name, parts in topics for p in parts]
    err, rows = coord.fetch_offsets(group_id, wanted, stable)
    out: dict = {}
    if topics is not None:
        for name, _ in topics:
            out.setdefault(name, [])
    for t, p, off, epoch, meta, perr in rows:
        out.setdefault(t, []).append((p, off, epoch, meta, perr))
    return err, out


def _fetch_authorized(ctx, session, coord, group_id, topics, stable=False):
    """_fetch with Kafka's checks: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED),
    DESCRIBE on each topic (a requested one answers TOPIC_AUTHORIZATION_FAILED per
    partition; "all topics" leaves the others out)."""
    if not ctx.authorize(session, A.DESCRIBE, A.GROUP, group_id, "OffsetFetch"):
        return int(ErrorCode.GROUP_AUTHORIZATION_FAILED), {}
    if topics is None:
        err, out = _fetch(coord, group_id, None, stable)
        return err, {name: rows for name, rows in out.items()
                     if ctx.authorize(session, A.DESCRIBE, A.TOPIC, name, "OffsetFetch")}
    denied = ctx.unauthorized(session, A.DESCRIBE, A.TOPIC, (name for name, _ in topics), "OffsetFetch")
    err, out = _fetch(coord, group_id, [(n, parts) for n, parts in topics if n not in denied], stable)
    if denied:
        code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
        merged = {}
        for name, parts in topics:
            merged[name] = [(p, -1, -1, "", code) for p in parts] if name in denied else out.get(name, [])
        out = merged
    return err, out


def _member_error(coord, g) -> int:
    """OffsetFetch v9: a member of a consumer-protocol group names itself and its epoch
    (Kafka's ConsumerGroup.validateOffsetFetch); classic groups ignore both."""
    from broker.coordinator.group import CoordinatorError

    group = coord.group(g.group_id) if coord is not None else None
    if group is None or group.kind != "consumer":
        return 0
    try:
        coord.consumer.validate_fetch(group, g.member_id, g.member_epoch)
    except CoordinatorError as exc:
        return exc.code
    return 0


def handle(ctx, header, request, session=None):
    version = header.api_version
    coord = getattr(ctx, "group_coordinator", None)
    stable = version >= 7 and bool(getattr(request, "require_stable", False))
    if version >= 8:
        groups = []
        for g in request.groups:
            topics = None if g.topics is None else [(t.name, list(t.partition_indexes)) for t in g.topics]
            err = _member_error(coord, g) if version >= 9 else 0
            if err:  # KIP-848: the member's epoch is checked (STALE_MEMBER_EPOCH, UNKNOWN_MEMBER_ID)
                groups.append(R.OffsetFetchResponseGroup(group_id=g.group_id, error_code=err, topics=[]))
                continue
            err, out = _fetch_authorized(ctx, session, coord, g.group_id, topics, stable)
            groups.append(R.OffsetFetchResponseGroup(
                group_id=g.group_id, error_code=err,
                topics=[R.OffsetFetchResponseTopics(name=name, partitions=[
                    R.OffsetFetchResponsePartitions(partition_index=p, committed_offset=off,
                                                    committed_leader_epoch=epoch, metadata=meta, error_code=perr)
                    for p, off, epoch, meta, perr in parts]) for name, parts in out.items()]))
        return R(throttle_time_ms=0, groups=groups)
    topics = None
    if request.topics is not None:
        topics = [(t.name, list(t.partition_indexes)) for t in request.topics]
    elif version < 2:
        topics = []
    err, out = _fetch_authorized(ctx, session, coord, request.group_id, topics, stable)
    if err and version < 2:
        # v0-1 have no top-level error: every partition carries it
        out = {name: [(p, -1, -1, "", err) for p in parts] for name, parts in (topics or [])}
    return R(
        throttle_time_ms=0,
        error_code=err,
        topics=[R.OffsetFetchResponseTopic(name=name, partitions=[
            R.OffsetFetchResponsePartition(partition_index=p, committed_offset=off, committed_leader_epoch=epoch,
                                           metadata=meta, error_code=perr)
            for p, off, epoch, meta, perr in parts]) for name, parts in out.items()],
    )
