"""TxnOffsetCommit (key 28), v0-4: offsets committed as part of a transaction
(``send_offsets_to_transaction``; KafkaApis.handleTxnOffsetCommitRequest).

WRITE on the transactional id, READ on the group, READ on each topic (refused topics
answer TOPIC_AUTHORIZATION_FAILED, unknown ones UNKNOWN_TOPIC_OR_PARTITION). The
group's ``__consumer_offsets`` partition must be in the producer's transaction
(AddOffsetsToTxn first; KIP-890 verification: INVALID_TXN_STATE otherwise, a fenced
epoch INVALID_PRODUCER_EPOCH). v3+ carry the consumer's generation and member id, which
fence a zombie (KIP-447: ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID). The
offsets become visible to OffsetFetch when the transaction commits.
"""

from protocol.errors import ErrorCode as E
from protocol.messages import TxnOffsetCommitResponse as R

from broker.security import authorizer as A


def _response(results: dict):
    by_topic: dict = {}
    for (t, p), code in results.items():
        by_topic.setdefault(t, []).append(R.TxnOffsetCommitResponsePartition(partition_index=p, error_code=int(code)))
    return R(throttle_time_ms=0, topics=[R.TxnOffsetCommitResponseTopic(name=t, partitions=parts)
                                         for t, parts in by_topic.items()])


def handle(ctx, header, request, session=None):
    version = header.api_version
    keys = [(t.name, p.partition_index) for t in request.topics for p in t.partitions]

    def all_(code):
        return _response({k: code for k in keys})

    if not ctx.authorize(session, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id, "TxnOffsetCommit"):
        return all_(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "TxnOffsetCommit"):
        return all_(E.GROUP_AUTHORIZATION_FAILED)
    groups, txns = ctx.group_coordinator, ctx.txn_coordinator
    if groups is None or txns is None:
        return all_(E.COORDINATOR_NOT_AVAILABLE)
    denied = ctx.unauthorized(session, A.READ, A.TOPIC, (t.name for t in request.topics), "TxnOffsetCommit")
    results: dict = {}
    offsets = []
    for t in request.topics:
        for p in t.partitions:
            if t.name in denied:
                results[(t.name, p.partition_index)] = E.TOPIC_AUTHORIZATION_FAILED
                continue
            offsets.append((t.name, p.partition_index, p.committed_offset,
                            getattr(p, "committed_leader_epoch", -1), p.committed_metadata, None))
    if offsets:
        if getattr(ctx.config, "transaction_partition_verification_enable", True):
            part = ("__consumer_offsets", groups.store.partition_for(request.group_id))
            code = txns.verify_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                          [part])[part]
            if code:
                code = {E.PRODUCER_FENCED: E.INVALID_PRODUCER_EPOCH,
                        E.TRANSACTION_ABORTABLE: E.INVALID_TXN_STATE}.get(E(code), code)
                results.update({(t, p): code for t, p, *_ in offsets})
                return _response(results)
        results.update(groups.txn_commit_offsets(
            group_id=request.group_id, producer_id=request.producer_id, producer_epoch=request.producer_epoch,
            generation_id=request.generation_id if version >= 3 else -1,
            member_id=request.member_id if version >= 3 else "",
            group_instance_id=request.group_instance_id if version >= 3 else None, offsets=offsets))
    if version < 2:
        results = {k: (E.COORDINATOR_NOT_AVAILABLE if c == E.COORDINATOR_LOAD_IN_PROGRESS else c)
                   for k, c in results.items()}
    return _response(results)
