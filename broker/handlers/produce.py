"""Produce (key 0), v0-12 (v10 differs only in leader hints for NOT_LEADER errors,
which a single broker never answers; v11 is below; v12 is v11 on the wire, KIP-890
part 2: with transactions V2 it would add a transactional batch's partition to the
transaction, but ``transaction.version`` is not finalized here (ApiVersions), so a
client adds partitions itself and its v12 batches are verified as v11's, as a Kafka
broker running transactions V1 does).

Each partition is validated and appended on its own: a failing partition does not
affect the others in the request. acks=0 gets no response; acks=1 and acks=-1 are the
same on a single node (the append is in the page cache before the answer, fsync by the
flush policy, as Kafka does).

Idempotent producers: a retried batch (a duplicate of one of the producer's last 5
batches in the partition) is not appended again and is answered with error NONE and the
offsets it got the first time (Kafka's UnifiedLog.append / ReplicaManager: the
DUPLICATE_SEQUENCE_NUMBER case never reaches the client).  Sequence gaps answer
OUT_OF_ORDER_SEQUENCE_NUMBER, old epochs INVALID_PRODUCER_EPOCH (storage exceptions
mapped by broker.errors).  Transactional batches: without a transactional id the whole
request answers TRANSACTIONAL_ID_AUTHORIZATION_FAILED (KafkaApis.handleProduceRequest);
with one, the transaction coordinator must have the partition in that producer's
ongoing transaction (KIP-890 verification, ``transaction.partition.verification.enable``):
a partition not added answers INVALID_TXN_STATE (v11+ TRANSACTION_ABORTABLE), a fenced epoch INVALID_PRODUCER_EPOCH,
a producer id the transactional id does not hold INVALID_PRODUCER_ID_MAPPING, a
transaction being completed CONCURRENT_TRANSACTIONS. Nothing is appended then.

Validation (``storage.validator``) walks every record; a compressed batch is walked as
it decompresses.  The first ``SYNC_DECOMPRESS_BUDGET`` bytes of decompressed output per
partition are walked here, on the event loop (every ordinary batch fits); past that the
rest of the walk runs in the broker's validation thread (``ctx.offload``) and this
request's handler waits for it, so a compression bomb never stalls other connections.
The connection processes no other request meanwhile (it keeps Kafka's order) and its
receive buffer is left alone (``broker.connection``), so the batch is still patched in
place.  Partitions are appended in request order either way.
"""

from __future__ import annotations

import logging

from protocol import record_walk, records as rec
from protocol.errors import ErrorCode
from protocol.messages import ProduceResponse

from broker.security import authorizer as A
from broker.errors import error_code_for
from broker.metrics import batch_max_timestamps
from storage import errors as se
from storage.log import compiled_append_produced
from storage.validator import NO_KEY_MESSAGE, analyze_records
from storage.log_manager import INTERNAL_TOPICS

try:  # the per-partition loop's common case, compiled (broker/_produce.c)
    from broker import _produce
except ImportError:  # not built: every partition takes the Python path
    _produce = None

log = logging.getLogger("chronolog.produce")

PartitionResponse = ProduceResponse.PartitionProduceResponse
TopicResponse = ProduceResponse.TopicProduceResponse
# the generated classes' _new: the same objects, without a class call's keyword dict
# (every produce request makes these three), called with their fields by position:
_new_partition_response = PartitionResponse._new
_new_topic_response = TopicResponse._new
_new_produce_response = ProduceResponse._new
# in this order (the schema's), which the calls below follow
assert PartitionResponse._fields[:8] == ("index", "error_code", "base_offset", "log_append_time_ms",
                                         "log_start_offset", "record_errors", "error_message", "current_leader")
assert TopicResponse._fields[:2] == ("name", "partition_responses")
assert ProduceResponse._fields[:2] == ("responses", "throttle_time_ms")
#: the current_leader of every success answer: the default (no leader hint, a tagged field
#: not written), one object for all instead of a LeaderIdAndEpoch made per partition;
#: nothing here changes it after the answer is made
_NO_LEADER_HINT = PartitionResponse.LeaderIdAndEpoch()


def _error(index, code, message=None, record_errors=()):
    return PartitionResponse(
        index=index,
        error_code=int(code),
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[
            PartitionResponse.BatchIndexAndErrorMessage(batch_index=i, batch_index_error_message=m)
            for i, m in record_errors
        ],
        error_message=message,
    )


def handle(ctx, header, request, session=None):
    version = header.api_version
    metrics = ctx.metrics
    now = ctx.clock.time_ms()  # one append time for the request's partitions
    # what the metrics count, gathered for one call at the end (None: metrics off): see _count
    tally = {} if metrics is not None else None
    if COMMON is not None and version >= 3:
        # a request without a transactional id, acks -1, 0 or 1 and no transactional
        # batch, in one call (broker/_produce.c handle): this function's steps below
        # and _respond's, for as long as the compiled loop takes its partitions. With an
        # authorizer, only when every topic is among those it allowed this session to
        # write before (else the steps below ask it, and it remembers those allowed)
        r = COMMON(request, ctx.log_manager.logs_by_key, now, tally,
                   ctx.notify_append if ctx.fetch_waiters else None, None if metrics is None else metrics.produced,
                   None if ctx.authorizer is None or session is None else ctx.writable_topics(session))
        if r is not _NOT_COMMON:
            if r.__class__ is not tuple:
                return r  # the answer (None for acks=0)
            return common_rest(ctx, version, request, r, now, tally)
    acks = request.acks
    responses = []
    if acks not in (-1, 0, 1):
        for t in request.topic_data:
            responses.append(
                TopicResponse(
                    name=t.name,
                    partition_responses=[
                        _error(p.index, ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not -1, 0 or 1")
                        for p in t.partition_data
                    ],
                )
            )
        return ProduceResponse(responses=responses, throttle_time_ms=0)

    txn_id = request.transactional_id
    # (topic, partition, records) of each partition in request order, and whether any
    # partition's first batch is transactional, in one pass
    items = []
    transactional = False
    for t in request.topic_data:
        name = t.name
        for p in t.partition_data:
            r = p.records
            items.append((name, p.index, r))
            # Kafka's RequestUtils.hasTransactionalRecords: the partition's first batch is a
            # v2 batch with the transactional attribute (see _TXN_MASK)
            if (not transactional and r is not None and len(r) >= _HEADER_SIZE and r[_MAGIC_OFFSET] == 2
                    and r[_TXN_ATTR_BYTE] & _TXN_MASK):
                transactional = True
    if txn_id is None and transactional:
        # KafkaApis.handleProduceRequest: every partition gets the error
        for t in request.topic_data:
            responses.append(
                TopicResponse(
                    name=t.name,
                    partition_responses=[
                        _error(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                               "transactional records need a transactional id")
                        for p in t.partition_data
                    ],
                )
            )
        return None if acks == 0 else ProduceResponse(responses=responses, throttle_time_ms=0)

    if txn_id is not None and not ctx.authorize(session, A.WRITE, A.TRANSACTIONAL_ID, txn_id, "Produce"):
        for t in request.topic_data:
            responses.append(TopicResponse(name=t.name, partition_responses=[
                _error(p.index, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED) for p in t.partition_data]))
        return None if acks == 0 else ProduceResponse(responses=responses, throttle_time_ms=0)
    # WRITE on each topic, before anything else about it (an unknown topic included)
    if ctx.authorizer is not None and session is not None:
        denied = ctx.unauthorized(session, A.WRITE, A.TOPIC, [t.name for t in request.topic_data], "Produce")
        if denied:
            items = [(t, p, _DENIED if t in denied else r) for t, p, r in items]
    if txn_id is not None and getattr(ctx.config, "transaction_partition_verification_enable", True):
        items = [(t, p, _verified(ctx, txn_id, t, p, r, version)) for t, p, r in items]
    return _append_from(ctx, version, request, acks, items, 0, [], now, tally)


def common_rest(ctx, version, request, stopped, now, tally):
    """The rest of a request broker/_produce.c's handle stopped in: ``stopped`` is what it
    returned, (position of the item it did not take, items, the answers before it, the
    exception that item's append raised or None)."""
    i, items, results, exc = stopped
    if exc is not None:
        results.append(_refused(items[i][0], items[i][1], exc))
        i += 1
    return _append_from(ctx, version, request, request.acks, items, i, results, now, tally)


def _append_from(ctx, version, request, acks, items, i, results, now, tally):
    """Each of ``items`` from the ``i``-th appended and answered (``results``: the
    answers of those before it), then the request's answer (_respond)."""
    lm = ctx.log_manager
    max_bytes = ctx.config.socket_request_max_bytes  # read once, not per partition
    # Produce v3+ (one v2 batch per partition): runs of partitions in the common case go
    # through the compiled loop (broker/_produce.c), each other one through _append_one
    run = RUN if version >= 3 else None
    if run is not None:
        logs = lm.logs_by_key
        notify = ctx.notify_append if ctx.fetch_waiters else None  # none is added meanwhile
    n = len(items)
    while i < n:
        if run is not None:
            i = run(logs, items, i, now, results, tally, notify)
            if i.__class__ is tuple:  # (position, the exception its append raised)
                i, exc = i
                results.append(_refused(items[i][0], items[i][1], exc))
                i += 1
                continue
            if i == n:
                break
        topic, partition, records = items[i]
        r = _append_one(ctx, lm, version, topic, partition, records, max_bytes, now, tally)
        if isinstance(r, _Deferred):
            return _append_rest_async(ctx, lm, version, request, acks, items, i, r, results, tally)
        results.append(r)
        i += 1
    return _respond(ctx, request, acks, results, tally)


#: decompressed bytes of one partition's batches walked on the event loop before the rest
#: of the walk moves to the validation thread
SYNC_DECOMPRESS_BUDGET = 2 * 1024 * 1024


class _Deferred:
    """A partition whose validation continues off the event loop."""

    __slots__ = ("plog", "analysis", "topic", "partition", "records")

    def __init__(self, plog, analysis, topic, partition, records):
        self.plog = plog
        self.analysis = analysis
        self.topic = topic
        self.partition = partition
        self.records = records


async def _append_rest_async(ctx, lm, version, request, acks, items, i, deferred, results, tally):
    while True:
        results.append(await _finish_deferred(ctx, deferred, tally))
        i += 1
        deferred = None
        while i < len(items):
            topic, partition, records = items[i]
            r = _append_one(ctx, lm, version, topic, partition, records, ctx.config.socket_request_max_bytes,
                            ctx.clock.time_ms(), tally)
            if isinstance(r, _Deferred):
                deferred = r
                break
            results.append(r)
            i += 1
        if deferred is None:
            return _respond(ctx, request, acks, results, tally)


async def _finish_deferred(ctx, d: _Deferred, tally):
    try:
        await ctx.offload(d.analysis.complete)
        plog = d.plog
        if plog.closed:  # reopened meanwhile in another log dir (AlterReplicaLogDirs)
            plog = ctx.log_manager.get_log(d.topic, d.partition)
    except se.StorageError as exc:
        return _refused(d.topic, d.partition, exc)
    return _append_analyzed(ctx, plog, d.analysis, d.topic, d.partition, d.records, tally)


def _respond(ctx, request, acks, results, tally):
    """The answer from each partition's result (in request order); the metrics told
    (``tally``: see _count)."""
    responses = []
    at = 0
    for t in request.topic_data:  # each topic's partitions' results, in request order
        parts = results[at:at + len(t.partition_data)]
        at += len(parts)
        responses.append(_new_topic_response(t.name, parts))  # name, partition_responses
    if tally is not None:  # metrics on: requests per topic, bytes and messages in, append delay
        ctx.metrics.produced(responses, tally)
    if acks == 0:
        return None
    return _new_produce_response(responses, 0)  # responses, throttle_time_ms


def _refused(topic, partition, exc):
    code = error_code_for(exc)
    if isinstance(exc, se.StorageError):
        log.info("rejected produce to %s-%d: %s (%s)", topic, partition, exc, ErrorCode(code).name)
        errs = [(i, f"{m} in topic partition {topic}-{partition}." if m == NO_KEY_MESSAGE else m)
                for i, m in (getattr(exc, "record_errors", ()) or ())]
        return _error(partition, code, str(exc), errs)
    return _error(partition, code, f"{type(exc).__name__}: {exc}")


#: stands for the records of a partition the principal may not write
_DENIED = object()

#: the coordinator's verification answers as a produce answers them (AddPartitionsToTxnManager)
_VERIFY_ERRORS = {ErrorCode.PRODUCER_FENCED: ErrorCode.INVALID_PRODUCER_EPOCH,
                  ErrorCode.TRANSACTION_ABORTABLE: ErrorCode.INVALID_TXN_STATE}


def _verified(ctx, txn_id, topic, partition, records, version=9):
    """``records``, or the error answer of a transactional batch whose partition is not
    in its producer's ongoing transaction (KIP-890 part 1): v11+ TRANSACTION_ABORTABLE,
    older versions INVALID_TXN_STATE, as Kafka's AddPartitionsToTxnManager answers."""
    if records is _DENIED or records is None or len(records) < rec.HEADER_SIZE or rec.magic_of(records, 0) != 2:
        return records
    try:
        h = rec.parse_batch_header(records, 0)
    except rec.RecordFormatError:
        return records  # the validator names the problem
    if not h.is_transactional or h.is_control:
        return records
    coord = ctx.txn_coordinator
    if coord is None:
        return _error(partition, ErrorCode.COORDINATOR_NOT_AVAILABLE, "the transaction coordinator is not loaded")
    code = coord.verify_partitions(txn_id, h.producer_id, h.producer_epoch, [(topic, partition)])[(topic, partition)]
    if not code:
        return records
    code = ErrorCode(code)
    if not (version >= 11 and code == ErrorCode.TRANSACTION_ABORTABLE):
        code = _VERIFY_ERRORS.get(code, code)
    log.info("refused transactional produce of producer %d (epoch %d, transactional id %r) to %s-%d: %s",
             h.producer_id, h.producer_epoch, txn_id, topic, partition, code.name)
    return _error(partition, code, f"partition {topic}-{partition} is not part of the ongoing transaction of "
                                   f"{txn_id!r} (producer {h.producer_id}, epoch {h.producer_epoch})"
                  if code in (ErrorCode.INVALID_TXN_STATE, ErrorCode.TRANSACTION_ABORTABLE) else None)


def _append_one(ctx, lm, version, topic, partition, records, max_records_bytes, now, tally):
    """One partition's answer, its records appended at ``now`` (the request's clock
    reading); a _Deferred when validation goes on off the event loop. ``tally``: see
    _count."""
    if isinstance(records, PartitionResponse):  # refused before the append (_verified)
        return records
    if records is _DENIED:
        return _error(partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if topic in INTERNAL_TOPICS:
        return _error(partition, ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic}")
    if records is None or len(records) == 0:
        return _error(partition, ErrorCode.INVALID_RECORD, "the partition's record set is empty")
    try:
        # an unknown partition is answered before its records are looked at, as Kafka's
        # handleProduceRequest answers it before ProduceRequest.validateRecords
        plog = lm.get_log(topic, partition)
        # the common case (plain v2 batches, every check passing; from v3 on exactly one,
        # which is all validateRecords asks of plain v2 batches) in one call; None: not
        # that case, nothing done, and the steps below take it and name any problem
        info = plog.append_produced(records, now, 1 if version >= 3 else 16)
    except Exception as exc:  # never crash the connection on one partition's failure
        return _refused(topic, partition, exc)
    if info is None:
        try:
            rec.check_produce_records(version, records)
        except rec.RecordFormatError as exc:
            code = (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE if isinstance(exc, rec.UnsupportedCompressionTypeError)
                    else ErrorCode.INVALID_RECORD)
            log.info("rejected produce v%d to %s-%d: %s", version, topic, partition, exc)
            return _error(partition, code, str(exc))
        try:
            analysis = analyze_records(records, config=plog.config, now_ms=now, in_place=True,
                                       max_records_bytes=max_records_bytes, budget=SYNC_DECOMPRESS_BUDGET)
            if analysis.pending:
                return _Deferred(plog, analysis, topic, partition, records)
            info = plog.append_analysis(analysis)
        except Exception as exc:
            return _refused(topic, partition, exc)
    return _appended(ctx, topic, partition, records, info, now, version >= 3, tally)


def _append_analyzed(ctx, plog, analysis, topic, partition, records, tally):
    try:
        info = plog.append_analysis(analysis)
    except Exception as exc:
        return _refused(topic, partition, exc)
    return _appended(ctx, topic, partition, records, info, ctx.clock.time_ms(), False, tally)


def _duplicate(topic, partition, base_offset) -> None:
    log.debug("duplicate produce to %s-%d answered with the original base offset %d", topic, partition, base_offset)


def _count(tally, topic, records, info, now_ms, one_batch) -> None:
    """A non-duplicate append's part of the request's metrics, told in one call by
    _respond (BrokerMetrics.produced): ``tally[topic]`` is [bytes, messages, delays],
    delays None until a CreateTime append, then the append delay (``now_ms`` minus the
    maxTimestamp) of each of its v2 batches, for a legacy set of the append's max
    timestamp. broker/_produce.c counts its appends the same way."""
    t = tally.get(topic)
    if t is None:
        t = tally[topic] = [0, 0, None]
    t[0] += len(records)
    t[1] += info.record_count
    if info.log_append_time < 0:  # a CreateTime topic's append has no log append time (-1)
        delays = t[2]
        if delays is None:
            delays = t[2] = []
        for max_ts in batch_max_timestamps(records, info, one_batch):
            if max_ts is not None and max_ts >= 0:
                delays.append(now_ms - max_ts)


def _appended(ctx, topic, partition, records, info, now_ms, one_batch, tally):
    """The answer for ``info`` (an AppendInfo, appended at ``now_ms``), the fetch
    waiters told and the append counted (``tally``, None when metrics are off: see
    _count). ``one_batch``: ``records`` is known to be one v2 batch (Produce v3+,
    ProduceRequest.validateRecords)."""
    base_offset, _last, log_append_time, log_start_offset, _count_, _max, duplicate = info
    if duplicate:
        _duplicate(topic, partition, base_offset)
    else:
        if tally is not None:
            _count(tally, topic, records, info, now_ms, one_batch)
        if ctx.fetch_waiters:  # a long poll waits somewhere (else no call per partition)
            ctx.notify_append(topic, partition)
    # index, error_code, base_offset, log_append_time_ms, log_start_offset, record_errors,
    # error_message, current_leader
    return _new_partition_response(partition, 0, base_offset, log_append_time, log_start_offset, [], None,
                                   _NO_LEADER_HINT)


#: where handle finds whether a partition's first batch is transactional: a v2 batch
#: (magic 2) whose attributes' low byte (big-endian int16) has the bit
_HEADER_SIZE, _MAGIC_OFFSET, _TXN_ATTR_BYTE, _TXN_MASK = (
    rec.HEADER_SIZE, rec.MAGIC_OFFSET, rec.ATTRIBUTES_OFFSET + 1, rec.TRANSACTIONAL_MASK)


#: what broker/_produce.c's handle answers for a request that is not its case
_NOT_COMMON = object()

#: broker/_produce.c's run and handle, set up with what they call; None when it is not
#: built, or when the steps it calls are not compiled either (then it would save little)
RUN = COMMON = None
if _produce is not None and compiled_append_produced is not None and record_walk.COMPILED:
    _produce.setup(compiled_append_produced, _new_partition_response, _NO_LEADER_HINT, frozenset(INTERNAL_TOPICS),
                   _duplicate, _new_topic_response, _new_produce_response, _NOT_COMMON)
    RUN = _produce.run
    COMMON = _produce.handle
