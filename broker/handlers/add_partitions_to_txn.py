"""AddPartitionsToTxn (key 24), v0-5: a transactional producer names the partitions it
is about to write (KafkaApis.handleAddPartitionsToTxnRequest).

v0-3 come from clients: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition) and on each topic. A partition
refused (TOPIC_AUTHORIZATION_FAILED) or unknown (UNKNOWN_TOPIC_OR_PARTITION) fails the
whole request: the others answer OPERATION_NOT_ATTEMPTED and nothing is added. Otherwise
the coordinator's one answer goes to every partition (PRODUCER_FENCED is
INVALID_PRODUCER_EPOCH below v2). v4+ (KIP-890, batched, with ``verify_only``) is the
broker-to-broker form: CLUSTER_ACTION on the cluster is required; a verify-only
transaction answers per partition whether it is in the transaction
(TRANSACTION_ABORTABLE when not).
"""

from protocol.errors import ErrorCode as E
from protocol.messages import AddPartitionsToTxnResponse as R

from broker.security import authorizer as A

from storage.log_manager import INTERNAL_TOPICS as _INTERNAL


def _topic_results(errors: dict) -> list:
    by_topic: dict = {}
    for (t, p), code in errors.items():
        by_topic.setdefault(t, []).append(R.AddPartitionsToTxnPartitionResult(partition_index=p,
                                                                               partition_error_code=int(code)))
    return [R.AddPartitionsToTxnTopicResult(name=t, results_by_partition=parts) for t, parts in by_topic.items()]


def _one(ctx, session, version, tid, pid, epoch, topics, verify_only) -> dict:
    partitions = [(t.name, p) for t in topics for p in t.partitions]
    coord = ctx.txn_coordinator
    if version < 4 and not ctx.authorize(session, A.WRITE, A.TRANSACTIONAL_ID, tid, "AddPartitionsToTxn"):
        return {tp: E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED for tp in partitions}
    if coord is None:
        return {tp: E.COORDINATOR_NOT_AVAILABLE for tp in partitions}
    denied = set()
    if version < 4:
        denied = ctx.unauthorized(session, A.WRITE, A.TOPIC, {t for t, _ in partitions if t not in _INTERNAL},
                                  "AddPartitionsToTxn") | {t for t, _ in partitions if t in _INTERNAL}
    lm = ctx.log_manager
    errors, ok = {}, []
    for t, p in partitions:
        info = lm.get_topic(t)
        if t in denied:
            errors[(t, p)] = E.TOPIC_AUTHORIZATION_FAILED
        elif info is None or not 0 <= p < info.num_partitions:
            errors[(t, p)] = E.UNKNOWN_TOPIC_OR_PARTITION
        else:
            ok.append((t, p))
    if errors:
        errors.update({tp: E.OPERATION_NOT_ATTEMPTED for tp in ok})
        return errors
    if verify_only:
        return coord.verify_partitions(tid, pid, epoch, ok)
    code = coord.add_partitions(tid, pid, epoch, ok)
    if version < 2 and code == E.PRODUCER_FENCED:
        code = E.INVALID_PRODUCER_EPOCH
    return {tp: code for tp in ok}


def handle(ctx, header, request, session=None):
    version = header.api_version
    if version < 4:
        errors = _one(ctx, session, version, request.v3_and_below_transactional_id, request.v3_and_below_producer_id,
                      request.v3_and_below_producer_epoch, request.v3_and_below_topics, False)
        return R(throttle_time_ms=0, results_by_topic_v3_and_below=_topic_results(errors))
    if not ctx.authorize(session, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME, "AddPartitionsToTxn"):
        return R(throttle_time_ms=0, error_code=int(E.CLUSTER_AUTHORIZATION_FAILED), results_by_transaction=[])
    results = []
    for txn in request.transactions:
        errors = _one(ctx, session, version, txn.transactional_id, txn.producer_id, txn.producer_epoch, txn.topics,
                      txn.verify_only)
        results.append(R.AddPartitionsToTxnResult(transactional_id=txn.transactional_id,
                                                  topic_results=_topic_results(errors)))
    return R(throttle_time_ms=0, error_code=0, results_by_transaction=results)
