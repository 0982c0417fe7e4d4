"""Fetch (key 1), v0-17.

Reads go from the offset-index floor to the first batch that reaches the fetch offset
and are sent as file slices (sendfile) for v4+. Fetch v0-v3 predate magic 2, so their
data is down-converted: magic 1 for v2/v3 (KIP-32 timestamps kept), magic 0 for v0/v1.

Byte limits follow Kafka's ReplicaManager: v0-v2 have a hard per-partition limit (a
batch larger than it is cut, the client sees a partial batch); v3+ return at least one
whole batch for the first partition that has data, then respect ``max_bytes``.

Transactions (v4+): every answer carries the partition's last stable offset (the first
offset of its oldest ongoing transaction, else the high watermark). A read_committed
fetch (``isolation_level`` 1) reads nothing at or past it and gets the aborted
transactions overlapping what it may read, from the ``.txnindex`` files, so the client
drops their records; read_uncommitted gets null there, as from Kafka.

Long polling: when fewer than ``min_bytes`` are available and nothing failed, the
request is parked until an append to one of its partitions or ``max_wait_ms``.
Fetch sessions (KIP-227) are not kept: every response says session id 0, which tells
clients to send full requests.

Topic ids (v13+, KIP-516): topics are named by id; an id no topic has (never created, or
a topic deleted or re-created since the client learnt it) answers UNKNOWN_TOPIC_ID for
each of its partitions. v14 and v16 differ only in errors and leader hints a single
broker never sends; v15 moves a follower's id into ReplicaState; v17 adds its directory.
"""

from __future__ import annotations

import asyncio
import logging

from protocol import records as rec
from protocol.errors import ErrorCode
from protocol.messages import FetchResponse

from broker.errors import error_code_for, leader_epoch_error
from broker.quotas import FETCH, user_of
from broker.security import authorizer as A
from storage import errors as se
from storage.segment import READ_MAX_DECOMPRESSED

log = logging.getLogger("chronolog.fetch")

PartitionData = FetchResponse.PartitionData
TopicResponse = FetchResponse.FetchableTopicResponse
AbortedTransaction = FetchResponse.AbortedTransaction
_INT_MAX = 2**31 - 1
# a partition's answer with data, by the generated _new (no class call's keyword dict),
# its fields by position in the schema's order; the three tagged defaults (no diverging
# epoch, no leader hint, no snapshot) are one object each for every answer, which
# nothing changes after the answer is made (a PartitionData() made three per partition)
_new_partition_data = PartitionData._new
_new_topic_response = TopicResponse._new
_new_fetch_response = FetchResponse._new
assert PartitionData._fields == ("partition_index", "error_code", "high_watermark", "last_stable_offset",
                                 "log_start_offset", "diverging_epoch", "current_leader", "snapshot_id",
                                 "aborted_transactions", "preferred_read_replica", "records")
assert TopicResponse._fields == ("topic", "topic_id", "partitions")
assert FetchResponse._fields == ("throttle_time_ms", "error_code", "session_id", "responses", "node_endpoints")
_NO_DIVERGING_EPOCH = PartitionData.EpochEndOffset()
_NO_LEADER_HINT = PartitionData.LeaderIdAndEpoch()
_NO_SNAPSHOT = PartitionData.SnapshotId()


def _partition_error(index, code, hw=-1, lso=-1, log_start=-1):
    return PartitionData(
        partition_index=index,
        error_code=int(code),
        high_watermark=hw,
        last_stable_offset=lso,
        log_start_offset=log_start,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=b"",
    )


def _diverging_epoch(plog, last_fetched_epoch, fetch_offset):
    """Kafka's Partition.readRecords for a fetch naming its last fetched epoch (v12+,
    KIP-595): the partition's answer when it is not to be read, else None. An epoch whose
    end is unknown or a fetch offset before the log start is OFFSET_OUT_OF_RANGE; an epoch
    that ended before the fetch offset (or only a lower one is known) is answered with
    the diverging epoch and its end offset, and no records."""
    found = plog.end_offset_for_epoch(last_fetched_epoch)
    hw, lso, start = plog.high_watermark, plog.last_stable_offset, plog.log_start_offset
    if found is None or fetch_offset < start:
        return _partition_error(plog.partition, ErrorCode.OFFSET_OUT_OF_RANGE, hw, lso, start)
    epoch, end = found
    if epoch < last_fetched_epoch or end < fetch_offset:
        return PartitionData(partition_index=plog.partition, error_code=0, high_watermark=hw,
                             last_stable_offset=lso, log_start_offset=start, aborted_transactions=None,
                             preferred_read_replica=-1, records=b"",
                             diverging_epoch=PartitionData.EpochEndOffset(epoch=epoch, end_offset=end))
    return None


def replica_id_of(version: int, request) -> int:
    """The fetching replica's id (v15+ in ReplicaState), -1 for a consumer."""
    if version >= 15:
        return request.replica_state.replica_id
    return getattr(request, "replica_id", -1)


def _resolve_topic_ids(ctx, request):
    """v13+: each requested topic's name from its id, None for an id no topic has."""
    name_of = ctx.log_manager.topic_name
    for t in request.topics:
        t.topic = name_of(t.topic_id)


def _read_all(ctx, version, request, denied=frozenset()):
    """One pass over the requested partitions (those of ``denied`` topics answer
    TOPIC_AUTHORIZATION_FAILED, those of an unknown topic id UNKNOWN_TOPIC_ID).
    Returns (response, bytes, had_error)."""
    lm = ctx.log_manager
    hard_limit = version <= 2
    # (conditional expressions, not min and max: those builtins cost about 700 instructions a call)
    limit_bytes = _INT_MAX if version < 3 else (request.max_bytes if request.max_bytes > 0 else 0)
    min_one = not hard_limit
    total = 0
    had_error = False
    down_magic = 0 if version <= 1 else (1 if version <= 3 else None)
    committed = version >= 4 and getattr(request, "isolation_level", 0) == 1
    topics_out = []
    for t in request.topics:
        parts = []
        if t.topic is None:  # v13+: an unknown topic id
            topics_out.append(TopicResponse(topic="", topic_id=t.topic_id, partitions=[
                _partition_error(p.partition, ErrorCode.UNKNOWN_TOPIC_ID) for p in t.partitions]))
            had_error = True
            continue
        for p in t.partitions:
            index = p.partition
            if t.topic in denied:
                parts.append(_partition_error(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            try:
                plog = lm.get_log(t.topic, index)
            except se.StorageError as exc:
                parts.append(_partition_error(index, error_code_for(exc)))
                had_error = True
                continue
            if version >= 9:
                code = leader_epoch_error(p.current_leader_epoch, plog.leader_epoch)
                if code:
                    parts.append(_partition_error(index, code))
                    had_error = True
                    continue
            if version >= 12 and p.last_fetched_epoch >= 0:
                diverged = _diverging_epoch(plog, p.last_fetched_epoch, p.fetch_offset)
                if diverged is not None:
                    parts.append(diverged)
                    had_error = had_error or diverged.error_code != 0
                    continue
            max_bytes = p.partition_max_bytes
            if not hard_limit and limit_bytes < max_bytes:
                max_bytes = limit_bytes
            stable = plog.last_stable_offset
            try:
                data = plog.read(p.fetch_offset, max_bytes if max_bytes > 0 else 0, min_one_message=min_one,
                                 max_offset=stable if committed else None)
            except se.StorageError as exc:
                code = error_code_for(exc)
                hw = plog.high_watermark
                parts.append(_partition_error(index, code, hw, hw, plog.log_start_offset))
                had_error = True
                continue
            records = data.records
            if records is None:
                records = b""  # Kafka sends an empty record set, never null
            size = len(records)
            if down_magic is not None and size:
                try:
                    records = rec.down_convert(records.read(), down_magic, first_offset=p.fetch_offset,
                                               max_decompressed=READ_MAX_DECOMPRESSED)
                except rec.UnsupportedCompressionTypeError as exc:
                    log.info("fetch v%d of %s-%d: %s", version, t.topic, index, exc)
                    parts.append(
                        _partition_error(
                            index,
                            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                            data.high_watermark,
                            data.high_watermark,
                            data.log_start_offset,
                        )
                    )
                    had_error = True
                    continue
                except rec.RecordFormatError as exc:
                    # a malformed batch already stored (before the produce path walked every
                    # record, or damaged behind a valid CRC): CORRUPT_MESSAGE, as Kafka's
                    # down-conversion failure, and one line naming the segment and offset
                    seg = plog.segment_for(p.fetch_offset)
                    log.warning("fetch v%d of %s-%d at offset %d: cannot down-convert a batch of segment %s: %s",
                                version, t.topic, index, p.fetch_offset,
                                seg.log_path if seg is not None else plog.dir, exc)
                    parts.append(
                        _partition_error(
                            index,
                            ErrorCode.CORRUPT_MESSAGE,
                            data.high_watermark,
                            data.high_watermark,
                            data.log_start_offset,
                        )
                    )
                    had_error = True
                    continue
            if size:
                min_one = False
                limit_bytes = limit_bytes - size if limit_bytes > size else 0
                total += size
            aborted = None
            if committed:
                aborted = [] if not size else [
                    AbortedTransaction(producer_id=a.producer_id, first_offset=a.first_offset)
                    for a in plog.collect_aborted_txns(p.fetch_offset, stable)]
            parts.append(_new_partition_data(index, 0, data.high_watermark,
                                             stable if version >= 4 else data.high_watermark,
                                             data.log_start_offset, _NO_DIVERGING_EPOCH, _NO_LEADER_HINT,
                                             _NO_SNAPSHOT, aborted, -1, records))
        topics_out.append(_new_topic_response(t.topic, t.topic_id, parts))
    response = _new_fetch_response(0, 0, 0, topics_out, [])
    return response, total, had_error


def handle(ctx, header, request, session=None):
    version = header.api_version
    if version >= 13:
        _resolve_topic_ids(ctx, request)
    replica_id = replica_id_of(version, request)
    if replica_id >= 0 and not ctx.authorize(
            session, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME, "Fetch"):
        # a follower's fetch (KafkaApis: CLUSTER_ACTION on the cluster, every partition)
        denied = frozenset(t.topic for t in request.topics if t.topic is not None)
    else:
        denied = ctx.unauthorized(session, A.READ, A.TOPIC,
                                  (t.topic for t in request.topics if t.topic is not None), "Fetch")
    if replica_id < 0 and version >= 3:
        _cap_to_quota(ctx, header, request, session)
    if (request.max_wait_ms > 0 and request.min_bytes > 0 and not getattr(ctx, "shutting_down", False)
            and _at_the_end(ctx, version, request, denied)):
        # a consumer waiting at the log's end: parked without making its empty answer
        return _ParkedFetch(ctx, version, request, request.topics, denied).future
    response, total, had_error = _read_all(ctx, version, request, denied)
    allowed = [t for t in request.topics if t.topic is not None and t.topic not in denied]
    if (request.max_wait_ms <= 0 or total >= request.min_bytes or had_error or not allowed
            or getattr(ctx, "shutting_down", False)):
        if ctx.metrics is not None:  # bytes out and fetch requests per topic
            ctx.metrics.fetched(response)
        return response
    return _ParkedFetch(ctx, version, request, allowed, denied).future


def _at_the_end(ctx, version, request, denied) -> bool:
    """Whether ``_read_all`` would answer every partition of the request with no records
    and no error, each a partition of a readable topic fetched at its log end offset: a
    consumer at the end, whose fetch parks at once. False when in doubt (the read then
    decides)."""
    if not request.topics:
        return False
    get_log = ctx.log_manager.get_log
    for t in request.topics:
        if t.topic is None or t.topic in denied:
            return False
        for p in t.partitions:
            try:
                plog = get_log(t.topic, p.partition)
            except se.StorageError:
                return False
            if p.fetch_offset != plog.log_end_offset or plog.closed:
                return False
            if version >= 9 and leader_epoch_error(p.current_leader_epoch, plog.leader_epoch):
                return False
            if version >= 12 and p.last_fetched_epoch >= 0:
                return False
    return True


def _cap_to_quota(ctx, header, request, session) -> None:
    """A consumer under a consumer_byte_rate quota fetches at most what the quota allows
    in its window (Kafka's getMaxValueInQuotaWindow cap), so a fetch is never throttled
    just for being large; the dispatcher throttles what it sends (broker.quotas)."""
    quotas = ctx.client_quotas
    if quotas is None or not quotas.active(FETCH):
        return
    cap = quotas.max_value_in_window(FETCH, user_of(session), header.client_id or "")
    if cap is not None and cap < request.max_bytes:
        request.max_bytes = max(0, int(cap))
        request.min_bytes = min(request.min_bytes, request.max_bytes)


class _ParkedFetch:
    """A fetch parked in the long poll, without a task or coroutine (one per request of a
    consumer at the log's end, so its cost is on every record it waits for).

    Its ``future`` is what the handler returns: the response when an append to a
    partition of ``topics`` (the request's topics not denied), told by
    ``BrokerContext.notify_append`` (which sees it as a waiter: ``done``, ``set_result``),
    brings ``min_bytes``, or a read fails, or the broker shuts down, or ``max_wait_ms``
    runs out. An exception of a read is the future's exception (answered
    UNKNOWN_SERVER_ERROR by the dispatcher, as any handler's)."""

    __slots__ = ("ctx", "version", "request", "keys", "denied", "loop", "deadline", "future", "timer", "woken")

    def __init__(self, ctx, version, request, topics, denied):
        self.ctx, self.version, self.request, self.denied = ctx, version, request, denied
        self.keys = [(t.topic, p.partition) for t in topics for p in t.partitions]
        loop = self.loop = asyncio.get_running_loop()
        self.deadline = loop.time() + request.max_wait_ms / 1000.0
        self.future = loop.create_future()
        self.woken = False
        self.timer = loop.call_at(self.deadline, self._read, True)
        ctx.wait_for_append(self.keys, self)

    # -- a waiter of BrokerContext.notify_append
    def done(self) -> bool:
        return self.woken

    def set_result(self, _value) -> None:
        """Woken: read once the handler that appended is done (its other partitions too)."""
        if not self.woken:
            self.woken = True
            self.loop.call_soon(self._read)

    def _read(self, expired: bool = False) -> None:
        self.timer.cancel()
        self.ctx.forget_waiter(self.keys, self)
        future = self.future
        if future.done():  # cancelled (the connection's request dropped)
            return
        ctx = self.ctx
        try:
            response, total, had_error = _read_all(ctx, self.version, self.request, self.denied)
            if (total < self.request.min_bytes and not had_error and not getattr(ctx, "shutting_down", False)
                    and not expired and self.loop.time() < self.deadline):
                self.woken = False  # not enough yet: park again until the same deadline
                self.timer = self.loop.call_at(self.deadline, self._read, True)
                ctx.wait_for_append(self.keys, self)
                return
            if ctx.metrics is not None:  # bytes out and fetch requests per topic
                ctx.metrics.fetched(response)
        except Exception as exc:
            future.set_exception(exc)
            return
        future.set_result(response)
