"""DescribeTransactions (key 65), v0: the coordinator's view of transactional ids
(KafkaApis.handleDescribeTransactionsRequest). DESCRIBE on each id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED); an unknown id is TRANSACTIONAL_ID_NOT_FOUND; the
partitions listed are those of topics the principal may DESCRIBE."""

from protocol.errors import ErrorCode as E
from protocol.messages import DescribeTransactionsResponse as R

from broker.security import authorizer as A


def _state(ctx, session, tid):
    if not ctx.authorize(session, A.DESCRIBE, A.TRANSACTIONAL_ID, tid, "DescribeTransactions"):
        return R.TransactionState(error_code=int(E.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), transactional_id=tid,
                                  transaction_state="", transaction_timeout_ms=0, transaction_start_time_ms=-1,
                                  producer_id=-1, producer_epoch=-1, topics=[])
    coord = ctx.txn_coordinator
    code, m = (int(E.COORDINATOR_NOT_AVAILABLE), None) if coord is None else coord.describe(tid)
    if m is None:
        return R.TransactionState(error_code=code, transactional_id=tid, transaction_state="",
                                  transaction_timeout_ms=0, transaction_start_time_ms=-1, producer_id=-1,
                                  producer_epoch=-1, topics=[])
    by_topic: dict = {}
    for t, p in sorted(m.partitions):
        by_topic.setdefault(t, []).append(p)
    topics = [R.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()
              if ctx.authorize(session, A.DESCRIBE, A.TOPIC, t, "DescribeTransactions")]
    return R.TransactionState(error_code=0, transactional_id=tid, transaction_state=m.state_name,
                              transaction_timeout_ms=m.timeout_ms, transaction_start_time_ms=m.start_ms,
                              producer_id=m.producer_id, producer_epoch=m.producer_epoch, topics=topics)


def handle(ctx, header, request, session=None):
    return R(throttle_time_ms=0, transaction_states=[_state(ctx, session, tid) for tid in request.transactional_ids])
