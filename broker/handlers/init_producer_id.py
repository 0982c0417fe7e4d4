"""InitProducerId (key 22), v0-4: producer ids for idempotent and transactional producers.

Without a transactional id (KafkaApis / TransactionCoordinator.handleInitProducerId for
null): the request is "blindly accepted" and always answered with a new producer id and
epoch 0, also when it names its current producer id and epoch (KIP-360, v3+; librdkafka
does so to bump its epoch, the Java client bumps idempotent epochs locally). Ids come
from ``ProducerIdManager`` (unique across restarts).

With a transactional id (WRITE on it): the transaction coordinator
(:mod:`broker.coordinator.transaction`) bumps the id's epoch, fencing older producers;
a transaction left open is aborted first (CONCURRENT_TRANSACTIONS: the client retries);
v3+ may name the producer id and epoch a recovering client had (KIP-360);
PRODUCER_FENCED is INVALID_PRODUCER_EPOCH below v4. A request naming only one of
producer id / epoch is INVALID_REQUEST (KafkaApis.handleInitProducerIdRequest).
"""

from __future__ import annotations

import logging
import os

from protocol.errors import ErrorCode
from protocol.messages import InitProducerIdResponse

from broker.security import authorizer as A

log = logging.getLogger("chronolog.producer_id")



class ProducerIdManager:
    """Allocates producer ids in blocks; the end of the current block is persisted
    before any id of it is handed out, so ids never repeat after a crash."""

    BLOCK = 1000

    def __init__(self, path: str) -> None:
        self.path = path
        self._next = 0
        self._limit = 0
        if os.path.exists(path):
            with open(path, encoding="ascii") as fh:
                text = fh.read().strip()
            try:
                self._next = self._limit = int(text)
            except ValueError:
                raise SystemExit(f"{path}: expected a producer id, found {text!r}")

    def allocate(self) -> int:
        if self._next >= self._limit:
            self._limit = self._next + self.BLOCK
            tmp = self.path + ".tmp"
            with open(tmp, "w", encoding="ascii") as fh:
                fh.write(f"{self._limit}\n")
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, self.path)
        pid = self._next
        self._next += 1
        return pid


def handle(ctx, header, request, session=None):
    if request.transactional_id is not None and not ctx.authorize(
            session, A.WRITE, A.TRANSACTIONAL_ID, request.transactional_id, "InitProducerId"):
        return InitProducerIdResponse(throttle_time_ms=0, error_code=int(ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
                                      producer_id=-1, producer_epoch=-1)
    if request.transactional_id is None and session is not None and ctx.authorizer is not None and not (
            ctx.authorize(session, A.IDEMPOTENT_WRITE, A.CLUSTER, A.CLUSTER_NAME, "InitProducerId")
            or ctx.authorizer.any_allowed(session, A.WRITE, A.TOPIC)):
        # KIP-679: IDEMPOTENT_WRITE on the cluster, or WRITE on some topic
        return InitProducerIdResponse(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                                      producer_id=-1, producer_epoch=-1)
    pid = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if (pid == -1) != (epoch == -1):
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST), producer_id=-1, producer_epoch=-1
        )
    if request.transactional_id is not None:
        coord = ctx.txn_coordinator
        if coord is None:
            return InitProducerIdResponse(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                          producer_id=-1, producer_epoch=-1)
        code, new_pid, new_epoch = coord.init_producer_id(request.transactional_id, request.transaction_timeout_ms,
                                                          None if pid == -1 else (pid, epoch))
        if header.api_version < 4 and code == ErrorCode.PRODUCER_FENCED:
            code = int(ErrorCode.INVALID_PRODUCER_EPOCH)
        return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=new_pid,
                                      producer_epoch=new_epoch)
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=0, producer_id=ctx.producer_ids.allocate(), producer_epoch=0
    )
