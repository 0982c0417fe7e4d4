"""ListTransactions (key 66), v0-2: the transactional ids the coordinator knows,
filtered by state names, producer ids, (v1) the time since the transaction started and
(v2, KIP-1152) a regular expression the whole transactional id matches, null or empty
for every id; one that does not compile is INVALID_REGULAR_EXPRESSION
(KafkaApis.handleListTransactionsRequest). Only ids the principal may DESCRIBE are
listed; state names Kafka does not know come back in ``unknown_state_filters``."""

from protocol.errors import ErrorCode as E
from protocol.messages import ListTransactionsResponse as R

from broker.coordinator.regex import ClientRegexError, compile_client_regex
from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    coord = ctx.txn_coordinator
    if coord is None:
        return R(throttle_time_ms=0, error_code=int(E.COORDINATOR_NOT_AVAILABLE), unknown_state_filters=[],
                 transaction_states=[])
    duration = getattr(request, "duration_filter", -1) if header.api_version >= 1 else -1
    text = getattr(request, "transactional_id_pattern", None) if header.api_version >= 2 else None
    try:
        pattern = compile_client_regex(text) if text else None  # null or empty: every id
    except ClientRegexError:
        return R(throttle_time_ms=0, error_code=int(E.INVALID_REGULAR_EXPRESSION), unknown_state_filters=[],
                 transaction_states=[])
    unknown, found = coord.list(request.state_filters or (), request.producer_id_filters or (), duration, pattern)
    states = [R.TransactionState(transactional_id=m.transactional_id, producer_id=m.producer_id,
                                 transaction_state=m.state_name)
              for m in found if ctx.authorize(session, A.DESCRIBE, A.TRANSACTIONAL_ID, m.transactional_id,
                                              "ListTransactions")]
    return R(throttle_time_ms=0, error_code=0, unknown_state_filters=unknown, transaction_states=states)
