"""WriteTxnMarkers (key 27), v0-2: COMMIT/ABORT markers written on request
(KafkaApis.handleWriteTxnMarkersRequest). In a cluster the transaction coordinator sends
it to partition leaders; here the coordinator writes its markers itself, and this API
serves the admin client's abortTransaction (``chronolog transactions abort``, Kafka's
``kafka-transactions.sh abort``) for a hanging transaction. ALTER or CLUSTER_ACTION on
the cluster is required (else CLUSTER_AUTHORIZATION_FAILED on every partition). Each
partition answers on its own: UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH for an
epoch older than the producer's, TRANSACTION_COORDINATOR_FENCED for an older coordinator
epoch. v2 (KIP-1228) names each marker's transaction version; every transaction here is
V1 (``transaction.version`` is not finalized), so the marker is written the same way
whatever it says."""

import logging

from protocol.errors import ErrorCode as E
from protocol.messages import WriteTxnMarkersResponse as R

from broker.coordinator.txn_service import write_marker
from broker.errors import error_code_for
from broker.security import authorizer as A
from storage import errors as se

log = logging.getLogger("chronolog.write_txn_markers")


def handle(ctx, header, request, session=None):
    allowed = (ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "WriteTxnMarkers")
               or ctx.authorize(session, A.CLUSTER_ACTION, A.CLUSTER, A.CLUSTER_NAME, "WriteTxnMarkers"))
    results = []
    for m in request.markers:
        topics = []
        for t in m.topics:
            parts = []
            for p in t.partition_indexes:
                if not allowed:
                    code = E.CLUSTER_AUTHORIZATION_FAILED
                else:
                    try:
                        write_marker(ctx, t.name, p, m.producer_id, m.producer_epoch, bool(m.transaction_result),
                                     m.coordinator_epoch)
                        code = 0
                        log.info("wrote a %s marker for producer %d (epoch %d) to %s-%d on request",
                                 "COMMIT" if m.transaction_result else "ABORT", m.producer_id, m.producer_epoch,
                                 t.name, p)
                    except se.StorageError as exc:
                        code = error_code_for(exc)
                parts.append(R.WritableTxnMarkerPartitionResult(partition_index=p, error_code=int(code)))
            topics.append(R.WritableTxnMarkerTopicResult(name=t.name, partitions=parts))
        results.append(R.WritableTxnMarkerResult(producer_id=m.producer_id, topics=topics))
    return R(markers=results)
