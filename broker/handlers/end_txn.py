"""EndTxn (key 26), v0-4: commit or abort the producer's transaction
(KafkaApis.handleEndTxnRequest). WRITE on the transactional id. The coordinator writes
PrepareCommit/PrepareAbort, the markers and Complete* before answering (every partition
is local). PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v2. v5 (transactions V2,
an epoch bump per transaction) is not offered: clients fall back to V1."""

from protocol.errors import ErrorCode as E
from protocol.messages import EndTxnResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id, "EndTxn"):
        return R(throttle_time_ms=0, error_code=int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                 producer_id=-1, producer_epoch=-1)
    coord = ctx.txn_coordinator
    if coord is None:
        return R(throttle_time_ms=0, error_code=int(E.COORDINATOR_NOT_AVAILABLE), producer_id=-1, producer_epoch=-1)
    code, pid, epoch = coord.end_txn(request.transactional_id, request.producer_id, request.producer_epoch,
                                     bool(request.committed))
    if header.api_version < 2 and code == E.PRODUCER_FENCED:
        code = E.INVALID_PRODUCER_EPOCH
    return R(throttle_time_ms=0, error_code=int(code), producer_id=pid, producer_epoch=epoch)
