"""storage.producer_state with transactions: ongoing transactions and the first unstable
offset, markers completing them (with Kafka's fencing), snapshots that keep them, and
producers with an ongoing transaction never expiring."""

import pytest

from storage.errors import InvalidProducerEpochError, InvalidTxnStateError, TransactionCoordinatorFencedError
from storage.producer_state import CompletedTxn, ProducerBatch, ProducerStateManager


def psm(tmp_path, enabled=True):
    m = ProducerStateManager(str(tmp_path), topic_partition="t-0")
    m.transactions_enabled = enabled
    return m


def append(m, pid, epoch, seq, first, last, txn=True, ts=1000):
    updates, dup = m.prepare([ProducerBatch(pid, epoch, seq, first, last, ts, txn)])
    assert dup is None
    m.apply(updates, end_offset=last + 1)


def test_transactional_batches_are_refused_without_a_coordinator(tmp_path):
    m = psm(tmp_path, enabled=False)
    with pytest.raises(InvalidTxnStateError, match="no transaction coordinator"):
        m.prepare([ProducerBatch(1, 0, 0, 0, 0, 1000, True)])


def test_ongoing_transactions_and_the_first_unstable_offset(tmp_path):
    m = psm(tmp_path)
    append(m, 1, 0, 0, 0, 4)
    append(m, 2, 0, 0, 5, 9)
    append(m, 1, 0, 5, 10, 12)  # still the same transaction
    assert m.ongoing == {1: 0, 2: 5} and m.first_unstable_offset() == 0
    # a non-transactional write of producer 1 in the middle of its transaction
    with pytest.raises(InvalidTxnStateError, match="still ongoing"):
        m.prepare([ProducerBatch(1, 0, 8, 13, 13, 1000, False)])
    # producer 1 aborts: the LSO moves to producer 2's first offset
    entry, done = m.prepare_marker(1, 0, 13, True, coordinator_epoch=0, timestamp=2000)
    assert done == CompletedTxn(1, 0, 13, True)
    assert m.last_stable_offset_after(done) == 5
    m.apply_marker(entry, end_offset=14)
    assert m.ongoing == {2: 5} and m.first_unstable_offset() == 5
    # producer 2 commits: nothing ongoing, the LSO after it is the offset past the marker
    entry, done = m.prepare_marker(2, 0, 14, False, 0, 2000)
    assert done == CompletedTxn(2, 5, 14, False) and m.last_stable_offset_after(done) == 15
    m.apply_marker(entry, end_offset=15)
    assert m.first_unstable_offset() is None
    # a marker for a producer with nothing in this partition completes nothing
    entry, done = m.prepare_marker(3, 0, 15, False, 0, 2000)
    assert done is None
    # producer 1 starts a new transaction after its abort
    append(m, 1, 0, 8, 16, 16)
    assert m.ongoing == {1: 16}


def test_markers_are_fenced_by_producer_and_coordinator_epochs(tmp_path):
    m = psm(tmp_path)
    append(m, 1, 3, 0, 0, 0)
    with pytest.raises(InvalidProducerEpochError, match="smaller than the last seen epoch 3"):
        m.prepare_marker(1, 2, 1, True, 5, 2000)
    entry, _ = m.prepare_marker(1, 3, 1, False, 5, 2000)
    m.apply_marker(entry)
    append(m, 1, 3, 1, 2, 2)
    with pytest.raises(TransactionCoordinatorFencedError, match="4 \\(zombie\\), 5 \\(current\\)"):
        m.prepare_marker(1, 3, 3, False, 4, 2000)
    # a bumped epoch (the coordinator fencing the producer) completes the transaction too
    entry, done = m.prepare_marker(1, 4, 3, True, 5, 2000)
    assert done == CompletedTxn(1, 2, 3, True) and entry.producer_epoch == 4 and not entry.batches


def test_snapshots_keep_ongoing_transactions_and_coordinator_epochs(tmp_path):
    m = psm(tmp_path)
    append(m, 1, 0, 0, 0, 4)
    entry, _ = m.prepare_marker(1, 0, 5, False, 7, 2000)
    m.apply_marker(entry, end_offset=6)
    append(m, 1, 0, 5, 6, 6)
    append(m, 2, 0, 0, 7, 9)
    m.take_snapshot()
    again = ProducerStateManager(str(tmp_path), topic_partition="t-0")
    again.truncate_and_reload(0, m.map_end_offset, now_ms=1500)
    assert again.ongoing == {1: 6, 2: 7}
    assert again.producers[1].coordinator_epoch == 7 and again.producers[1].current_txn_first_offset == 6
    assert again.producers == m.producers


def test_producers_in_a_transaction_do_not_expire(tmp_path):
    m = psm(tmp_path)
    append(m, 1, 0, 0, 0, 0, txn=True, ts=1000)
    append(m, 2, 0, 0, 1, 1, txn=False, ts=1000)
    m.expiration_ms = 10
    assert m.remove_expired(now_ms=10_000) == 1
    assert set(m.producers) == {1}


def test_replayed_markers_give_the_txnindex_entry(tmp_path):
    m = psm(tmp_path, enabled=False)  # replay does not check
    m.load_batch(ProducerBatch(1, 0, 0, 0, 2, 1000, True))
    m.load_batch(ProducerBatch(2, 0, 0, 3, 3, 1000, True))
    done, lso = m.load_marker(1, 0, 4, True, 0, 1000)
    assert done == CompletedTxn(1, 0, 4, True) and lso == 3
    assert m.ongoing == {2: 3}
    assert m.load_marker(9, 0, 5, False, 0, 1000) == (None, None)
