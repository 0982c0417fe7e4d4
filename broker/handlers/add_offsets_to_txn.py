"""AddOffsetsToTxn (key 25), v0-4: adds the group's ``__consumer_offsets`` partition to
the transaction, so TxnOffsetCommit may follow and the marker commits those offsets
(KafkaApis.handleAddOffsetsToTxnRequest). WRITE on the transactional id, then READ on
the group; PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2."""

from protocol.errors import ErrorCode as E
from protocol.messages import AddOffsetsToTxnResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id, "AddOffsetsToTxn"):
        return R(throttle_time_ms=0, error_code=int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "AddOffsetsToTxn"):
        return R(throttle_time_ms=0, error_code=int(E.GROUP_AUTHORIZATION_FAILED))
    coord, groups = ctx.txn_coordinator, ctx.group_coordinator
    if coord is None or groups is None:
        return R(throttle_time_ms=0, error_code=int(E.COORDINATOR_NOT_AVAILABLE))
    partition = groups.store.partition_for(request.group_id)
    code = coord.add_partitions(request.transactional_id, request.producer_id, request.producer_epoch,
                                [("__consumer_offsets", partition)])
    if header.api_version < 2 and code == E.PRODUCER_FENCED:
        code = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=int(code))
