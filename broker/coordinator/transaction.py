"""The transaction coordinator: Kafka's TransactionCoordinator state machine on the
injected clock, for transactions V1 clients (EndTxn below v5: the client keeps its epoch
from one transaction to the next).

It owns the :class:`TxnMetadata` of every transactional id, keeps it in
``__transaction_state`` (through ``store``: :mod:`broker.coordinator.txn_store`) before
any answer depends on it, and drives the partitions through two callables the broker
wiring (:mod:`broker.coordinator.txn_service`) supplies:

* ``allocate_producer_id()``: a new producer id (never repeated, across restarts);
* ``write_marker(topic, partition, producer_id, producer_epoch, commit, coordinator_epoch)``:
  append a COMMIT/ABORT control batch to one partition (and, for ``__consumer_offsets``,
  make the group coordinator commit or drop the transactional offsets it holds).

There is one broker and every partition is local, so a transaction completes inside
the EndTxn request: PrepareCommit/PrepareAbort is written, then the markers, then
CompleteCommit/CompleteAbort. A crash between the two writes leaves Prepare* in the log;
:meth:`TransactionCoordinator.complete_loaded` finishes those at start-up (markers are
written again; a marker for a producer with nothing ongoing in a partition is harmless).

States (Kafka's TransactionState): Empty, Ongoing, PrepareCommit, PrepareAbort,
CompleteCommit, CompleteAbort, Dead, PrepareEpochFence. A fence (InitProducerId during a
transaction, or a transaction older than its timeout) bumps the producer epoch and
aborts with it, so the old producer's next request is fenced.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.errors import ErrorCode as E

from broker.coordinator import txn_records as R
from broker.coordinator.txn_records import (COMPLETE_ABORT, COMPLETE_COMMIT, DEAD, EMPTY, ONGOING, PREPARE_ABORT,
                                            PREPARE_COMMIT, PREPARE_EPOCH_FENCE, STATE_NAMES, TxnLogValue)

log = logging.getLogger("chronolog.coordinator.txn")

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
SHORT_MAX = 32767

#: TransactionState.isExpirationAllowed
_EXPIRABLE = frozenset({EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT})


def epoch_exhausted(epoch: int) -> bool:
    """TransactionMetadata.isEpochExhausted: Short.MaxValue is kept for fencing."""
    return epoch >= SHORT_MAX - 1


class TxnError(Exception):
    def __init__(self, code: int, message: str = ""):
        super().__init__(message or E(code).name)
        self.code = int(code)


@dataclass
class TxnMetadata:
    transactional_id: str
    producer_id: int
    previous_producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    timeout_ms: int = 60000
    state: int = EMPTY
    partitions: set = field(default_factory=set)  # {(topic, partition)}
    start_ms: int = -1
    last_update_ms: int = -1
    # a fence whose write failed: the next fence does not bump again (Kafka's hasFailedEpochFence)
    failed_epoch_fence: bool = False

    @property
    def state_name(self) -> str:
        return STATE_NAMES[self.state]

    def to_value(self, state: int | None = None) -> TxnLogValue:
        parts: dict[str, list[int]] = {}
        for t, p in self.partitions:
            parts.setdefault(t, []).append(p)
        return TxnLogValue(self.producer_id, self.producer_epoch, self.timeout_ms,
                           self.state if state is None else state, parts, self.last_update_ms, self.start_ms)

    def copy(self) -> "TxnMetadata":
        return TxnMetadata(self.transactional_id, self.producer_id, self.previous_producer_id, self.producer_epoch,
                           self.last_producer_epoch, self.timeout_ms, self.state, set(self.partitions),
                           self.start_ms, self.last_update_ms, self.failed_epoch_fence)


class TransactionCoordinator:
    def __init__(self, *, clock, store, allocate_producer_id, write_marker,
                 max_timeout_ms: int = 900000, id_expiration_ms: int = 604800000,
                 coordinator_epoch: int = 0):
        self.clock = clock
        self.store = store
        self.allocate_producer_id = allocate_producer_id
        self.write_marker = write_marker
        self.max_timeout_ms = max_timeout_ms
        self.id_expiration_ms = id_expiration_ms
        self.coordinator_epoch = coordinator_epoch
        self.txns: dict[str, TxnMetadata] = {}
        self.active = False  # set once __transaction_state is loaded and Prepare* finished

    def _now(self) -> int:
        return int(self.clock.time_ms())

    # ------------------------------------------------------------------ persistence
    def _persist(self, new: TxnMetadata) -> None:
        """Write ``new`` to ``__transaction_state`` and install it; a failed write leaves
        the metadata as it was and raises TxnError(COORDINATOR_NOT_AVAILABLE)."""
        try:
            self.store.write(new.transactional_id, new.to_value())
        except Exception as exc:
            log.error("could not write the state of transactional id %r to __transaction_state: %s",
                      new.transactional_id, exc)
            raise TxnError(E.COORDINATOR_NOT_AVAILABLE, f"__transaction_state write failed: {exc}") from None
        self.txns[new.transactional_id] = new

    def load(self, transactional_id: str, value: TxnLogValue | None) -> None:
        """Replay one ``__transaction_state`` record (the last one of a key wins)."""
        if value is None:
            self.txns.pop(transactional_id, None)
            return
        parts = {(t, p) for t, ps in (value.partitions or {}).items() for p in ps}
        state = value.state if 0 <= value.state < len(STATE_NAMES) else EMPTY
        if state == PREPARE_EPOCH_FENCE:  # never written by Kafka; treat as an abort under way
            state = PREPARE_ABORT
        self.txns[transactional_id] = TxnMetadata(
            transactional_id, value.producer_id, value.previous_producer_id, value.producer_epoch, NO_PRODUCER_EPOCH,
            value.timeout_ms, state, parts, value.start_ms, value.last_update_ms)

    def complete_loaded(self) -> int:
        """Finish the transactions found in PrepareCommit/PrepareAbort (a crash after the
        decision was written): write their markers and the Complete* state. Returns how
        many were finished."""
        done = 0
        for m in list(self.txns.values()):
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                commit = m.state == PREPARE_COMMIT
                log.info("completing %s of transactional id %r (producer %d, epoch %d) found in __transaction_state",
                         "commit" if commit else "abort", m.transactional_id, m.producer_id, m.producer_epoch)
                try:
                    self._write_markers_and_complete(m, commit)
                    done += 1
                except TxnError as exc:
                    log.error("could not complete the transaction of %r: %s", m.transactional_id, exc)
            elif m.state == DEAD:
                self.txns.pop(m.transactional_id, None)
        self.active = True
        return done

    # ------------------------------------------------------------------ InitProducerId
    def init_producer_id(self, transactional_id: str, timeout_ms: int,
                         expected: tuple[int, int] | None = None) -> tuple[int, int, int]:
        """TransactionCoordinator.handleInitProducerId for a transactional id. ``expected``
        is (producer id, epoch) of a KIP-360 client recovering, or None. Returns
        (error code, producer id, epoch)."""
        try:
            m = self._init(transactional_id, timeout_ms, expected)
        except TxnError as exc:
            return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH
        log.info("initialized transactional id %r with producer id %d and epoch %d",
                 transactional_id, m.producer_id, m.producer_epoch)
        return 0, m.producer_id, m.producer_epoch

    def _init(self, tid: str, timeout_ms: int, expected) -> TxnMetadata:
        if not self.active:
            raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
        if not tid:
            raise TxnError(E.INVALID_REQUEST, "empty transactional id")
        if not 0 < timeout_ms <= self.max_timeout_ms:
            raise TxnError(E.INVALID_TRANSACTION_TIMEOUT,
                           f"transaction timeout {timeout_ms} ms is not in 1..transaction.max.timeout.ms="
                           f"{self.max_timeout_ms}")
        now = self._now()
        m = self.txns.get(tid)
        if m is None:
            m = TxnMetadata(tid, self.allocate_producer_id(), timeout_ms=timeout_ms, last_update_ms=now)
            self.txns[tid] = m
        if expected is not None:
            exp_pid, exp_epoch = expected
            if not (m.producer_epoch == NO_PRODUCER_EPOCH or exp_pid == m.producer_id
                    or (exp_pid == m.previous_producer_id and epoch_exhausted(exp_epoch))):
                raise TxnError(E.PRODUCER_FENCED)
        if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
            raise TxnError(E.CONCURRENT_TRANSACTIONS)
        if m.state == ONGOING:
            # fence the open transaction: abort it under a bumped epoch, then let the
            # client retry (the retry bumps the epoch again and returns it)
            self._fence_and_abort(m)
            raise TxnError(E.CONCURRENT_TRANSACTIONS)
        if m.state not in (EMPTY, COMPLETE_COMMIT, COMPLETE_ABORT):
            raise TxnError(E.CONCURRENT_TRANSACTIONS)
        new = m.copy()
        new.previous_producer_id = m.producer_id
        if epoch_exhausted(m.producer_epoch) and (expected is None or expected[1] == m.producer_epoch):
            new.producer_id = self.allocate_producer_id()
            new.producer_epoch = 0
            new.last_producer_epoch = m.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
        elif expected is None:
            new.producer_epoch, new.last_producer_epoch = m.producer_epoch + 1, NO_PRODUCER_EPOCH
        elif m.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == m.producer_epoch:
            new.producer_epoch, new.last_producer_epoch = m.producer_epoch + 1, m.producer_epoch
        elif expected[1] == m.last_producer_epoch:
            pass  # a retry of a bump that succeeded: the same epoch again
        else:
            raise TxnError(E.PRODUCER_FENCED)
        new.state, new.partitions, new.start_ms = EMPTY, set(), -1
        new.timeout_ms, new.last_update_ms = timeout_ms, now
        self._persist(new)
        return new

    def _fence_and_abort(self, m: TxnMetadata) -> None:
        """prepareFenceProducerEpoch + endTransaction(ABORT, isFromClient=false)."""
        if m.producer_epoch >= SHORT_MAX:
            raise TxnError(E.UNKNOWN_SERVER_ERROR, f"cannot fence producer {m.producer_id} at epoch {m.producer_epoch}")
        new = m.copy()
        if not m.failed_epoch_fence:
            new.producer_epoch = m.producer_epoch + 1
        new.last_producer_epoch = NO_PRODUCER_EPOCH
        new.state = PREPARE_ABORT
        new.last_update_ms = self._now()
        try:
            self._persist(new)
        except TxnError:
            m.failed_epoch_fence = True
            m.producer_epoch = new.producer_epoch
            raise
        log.info("fenced producer %d of transactional id %r: epoch %d, aborting its transaction",
                 new.producer_id, new.transactional_id, new.producer_epoch)
        self._write_markers_and_complete(new, commit=False)

    # ------------------------------------------------------------------ AddPartitions / AddOffsets
    def _check_producer(self, tid: str, pid: int, epoch: int) -> TxnMetadata:
        if not self.active:
            raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
        if not tid:
            raise TxnError(E.INVALID_REQUEST, "empty transactional id")
        m = self.txns.get(tid)
        if m is None or m.producer_id != pid:
            raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
        if m.producer_epoch != epoch:
            raise TxnError(E.PRODUCER_FENCED)
        return m

    def add_partitions(self, tid: str, pid: int, epoch: int, partitions) -> int:
        """handleAddPartitionsToTransaction: one error code for all the partitions."""
        try:
            m = self._check_producer(tid, pid, epoch)
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
            wanted = set(partitions)
            if m.state == ONGOING and wanted <= m.partitions:
                return 0
            if m.state not in (EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT):
                raise TxnError(E.INVALID_TXN_STATE)
            now = self._now()
            new = m.copy()
            if m.state != ONGOING:
                new.start_ms = now
            new.state = ONGOING
            new.partitions |= wanted
            new.last_update_ms = now
            self._persist(new)
            return 0
        except TxnError as exc:
            return exc.code

    def verify_partitions(self, tid: str, pid: int, epoch: int, partitions) -> dict:
        """handleVerifyPartitionsInTransaction (AddPartitionsToTxn v4+ verify-only, and
        the produce path's check): {(topic, partition): error code}."""
        try:
            m = self._check_producer(tid, pid, epoch)
            if m.state in (PREPARE_COMMIT, PREPARE_ABORT):
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
        except TxnError as exc:
            return {tp: exc.code for tp in partitions}
        ongoing = m.state == ONGOING
        return {tp: 0 if ongoing and tp in m.partitions else int(E.TRANSACTION_ABORTABLE) for tp in partitions}

    # ------------------------------------------------------------------ EndTxn
    def end_txn(self, tid: str, pid: int, epoch: int, commit: bool) -> tuple[int, int, int]:
        """handleEndTransaction (transactions V1). Returns (error, producer id, epoch)."""
        try:
            if not self.active:
                raise TxnError(E.COORDINATOR_LOAD_IN_PROGRESS)
            if not tid:
                raise TxnError(E.INVALID_REQUEST, "empty transactional id")
            m = self.txns.get(tid)
            if m is None or m.producer_id != pid:
                raise TxnError(E.INVALID_PRODUCER_ID_MAPPING)
            if epoch != m.producer_epoch:
                raise TxnError(E.PRODUCER_FENCED)
            if m.state == ONGOING:
                new = m.copy()
                new.state = PREPARE_COMMIT if commit else PREPARE_ABORT
                new.last_update_ms = self._now()
                self._persist(new)
                self._write_markers_and_complete(new, commit)
                return 0, m.producer_id, m.producer_epoch
            if m.state == COMPLETE_COMMIT and commit or m.state == COMPLETE_ABORT and not commit:
                return 0, m.producer_id, m.producer_epoch  # a retry of what already completed
            if m.state == PREPARE_COMMIT and commit or m.state == PREPARE_ABORT and not commit:
                raise TxnError(E.CONCURRENT_TRANSACTIONS)
            log.debug("transactional id %r is %s: EndTxn(%s) refused", tid, m.state_name,
                      "COMMIT" if commit else "ABORT")
            raise TxnError(E.INVALID_TXN_STATE)
        except TxnError as exc:
            return exc.code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH

    def _write_markers_and_complete(self, m: TxnMetadata, commit: bool) -> None:
        """TransactionMarkerChannelManager, locally: a marker in every partition of the
        transaction, then Complete* (the partitions cleared)."""
        for topic, partition in sorted(m.partitions):
            try:
                self.write_marker(topic, partition, m.producer_id, m.producer_epoch, commit, self.coordinator_epoch)
            except Exception as exc:  # a deleted topic, a fenced (stale) marker: Kafka drops it too
                log.warning("%s marker of producer %d (transactional id %r) not written to %s-%d: %s",
                            "COMMIT" if commit else "ABORT", m.producer_id, m.transactional_id, topic, partition, exc)
        new = m.copy()
        new.state = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        new.partitions = set()
        new.last_update_ms = self._now()
        new.failed_epoch_fence = False
        self._persist(new)

    # ------------------------------------------------------------------ timers
    def abort_timed_out(self) -> int:
        """transaction.abort.timed.out.transaction.cleanup.interval.ms: abort (with the
        epoch bumped, so the producer is fenced) every Ongoing transaction older than its
        timeout. Returns how many were aborted."""
        now = self._now()
        aborted = 0
        for m in list(self.txns.values()):
            if m.state == ONGOING and m.start_ms + m.timeout_ms < now:
                log.info("aborting the transaction of transactional id %r (producer %d, epoch %d): open for "
                         "%d ms, longer than its timeout of %d ms", m.transactional_id, m.producer_id,
                         m.producer_epoch, now - m.start_ms, m.timeout_ms)
                try:
                    self._fence_and_abort(m)
                    aborted += 1
                except TxnError as exc:
                    log.error("could not abort the timed-out transaction of %r: %s", m.transactional_id, exc)
        return aborted

    def expire_transactional_ids(self) -> int:
        """transactional.id.expiration.ms: forget ids with no transaction under way whose
        state has not changed for that long (a tombstone in __transaction_state)."""
        now = self._now()
        expired = 0
        for m in list(self.txns.values()):
            if m.state in _EXPIRABLE and m.last_update_ms <= now - self.id_expiration_ms:
                try:
                    self.store.write(m.transactional_id, None)
                except Exception as exc:
                    log.error("could not expire transactional id %r: %s", m.transactional_id, exc)
                    continue
                del self.txns[m.transactional_id]
                expired += 1
                log.info("expired transactional id %r (producer %d): unused for %d ms", m.transactional_id,
                         m.producer_id, now - m.last_update_ms)
        return expired

    # ------------------------------------------------------------------ admin
    def describe(self, tid: str):
        """(error, TxnMetadata | None) as handleDescribeTransactions."""
        if not self.active:
            return int(E.COORDINATOR_LOAD_IN_PROGRESS), None
        if not tid:
            return int(E.INVALID_REQUEST), None
        m = self.txns.get(tid)
        if m is None or m.state == DEAD:
            return int(E.TRANSACTIONAL_ID_NOT_FOUND), None
        return 0, m

    def list(self, states=(), producer_ids=(), min_duration_ms: int = -1, id_pattern=None):
        """listTransactionStates: (unknown state names, [TxnMetadata]) filtered by state
        names, producer ids, (v1) ``now - start > min_duration_ms`` and (v2) a compiled
        ``id_pattern`` the whole transactional id matches, as Kafka filters."""
        now = self._now()
        unknown = [s for s in states if s not in STATE_NAMES]
        wanted = {STATE_NAMES.index(s) for s in states if s in STATE_NAMES}
        pids = set(producer_ids)
        out = []
        for m in sorted(self.txns.values(), key=lambda m: m.transactional_id):
            if m.state == DEAD:
                continue
            if pids and m.producer_id not in pids:
                continue
            if states and m.state not in wanted:
                continue
            if min_duration_ms >= 0 and now - m.start_ms <= min_duration_ms:
                continue
            if id_pattern is not None and not id_pattern.fullmatch(m.transactional_id):
                continue
            out.append(m)
        return unknown, out


__all__ = ["TransactionCoordinator", "TxnMetadata", "TxnError", "R"]
