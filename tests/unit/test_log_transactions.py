"""storage.log with transactions: markers written by the coordinator path, the last
stable offset, aborted transactions in .txnindex and their search, and the state and
.txnindex rebuilt from the log after a crash."""

import os

import pytest

from protocol import records as R
from storage import errors as E
from storage.clock import ManualClock
from storage.log import Log
from storage.transaction_index import AbortedTxn
from tests.unit.test_log_helpers import topic_config

NOW = 1_700_000_000_000


def new_log(tmp_path, clean=False, **cfg):
    cfg.setdefault("index_interval_bytes", 100)
    cfg.setdefault("segment_index_bytes", 1200)
    log = Log(str(tmp_path / "t-0"), topic_config(**cfg), ManualClock(NOW), had_clean_shutdown=clean)
    log.producer_state.transactions_enabled = True
    return log


def txn_batch(pid, seq, n=2, epoch=0, txn=True):
    return R.build_batch([(NOW + i, None, b"v%d" % (seq + i)) for i in range(n)], producer_id=pid,
                         producer_epoch=epoch, base_sequence=seq, is_transactional=txn)


def control_batches(log):
    out = []
    for seg in log.segments:
        for pos, h in seg.iter_batch_headers(0):
            if h.is_control:
                data = seg.read_bytes(pos, h.batch_length + R.LOG_OVERHEAD)
                (rec,) = list(R.iter_records(data, 0, h))
                out.append((h.base_offset, h.producer_id, R.parse_control_record(rec.key, rec.value)))
    return out


def test_markers_move_the_lso_and_index_aborts(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_batch(1, 0))          # 0-1  producer 1
    log.append(txn_batch(2, 0))          # 2-3  producer 2
    assert log.last_stable_offset == 0 and log.high_watermark == 4
    info = log.append_end_txn_marker(1, 0, commit=False, coordinator_epoch=3)  # 4: abort of producer 1
    assert info.base_offset == 4
    assert log.last_stable_offset == 2  # producer 2 is still open
    log.append_end_txn_marker(2, 0, commit=True, coordinator_epoch=3)  # 5
    assert log.last_stable_offset == log.high_watermark == 6
    assert control_batches(log) == [(4, 1, (R.CONTROL_ABORT, 3)), (5, 2, (R.CONTROL_COMMIT, 3))]
    seg = log.segments[0]
    assert seg.txn_index.entries == [AbortedTxn(1, 0, 4, 2)]
    assert os.path.getsize(seg.txn_index_path) == 34
    assert log.collect_aborted_txns(0, 6) == [AbortedTxn(1, 0, 4, 2)]
    assert log.collect_aborted_txns(5, 6) == []
    # a non-transactional producer's records and a plain consumer are unaffected
    log.append(R.build_batch([(NOW, None, b"plain")]))
    assert log.last_stable_offset == 7


def test_markers_are_fenced(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_batch(1, 0, epoch=2))
    log.append_end_txn_marker(1, 2, commit=True, coordinator_epoch=5)
    leo = log.log_end_offset
    with pytest.raises(E.InvalidProducerEpochError):
        log.append_end_txn_marker(1, 1, commit=True, coordinator_epoch=5)
    with pytest.raises(E.TransactionCoordinatorFencedError):
        log.append_end_txn_marker(1, 2, commit=True, coordinator_epoch=4)
    assert log.log_end_offset == leo  # nothing written


def test_non_transactional_write_during_a_transaction_is_refused(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_batch(1, 0))
    with pytest.raises(E.InvalidTxnStateError):
        log.append(txn_batch(1, 2, txn=False))


def test_crash_rebuilds_ongoing_transactions_and_the_txnindex(tmp_path):
    log = new_log(tmp_path, segment_bytes=300)
    for i in range(4):  # several segments: snapshots at the rolls
        log.append(txn_batch(1, 2 * i))
        log.append_end_txn_marker(1, 0, commit=(i % 2 == 1), coordinator_epoch=0)
    log.append(txn_batch(2, 0))  # producer 2's transaction stays open
    lso, leo = log.last_stable_offset, log.log_end_offset
    aborted = log.collect_aborted_txns(0, leo)
    assert [t.producer_id for t in aborted] == [1, 1] and len(log.segments) > 2
    # the kill: no clean snapshot; the .txnindex of the last abort is lost too
    last_abort_seg = next(s for s in reversed(log.segments) if s.txn_index.entries)
    log.close_handlers()
    os.remove(last_abort_seg.txn_index_path)
    again = new_log(tmp_path, segment_bytes=300)
    assert (again.log_end_offset, again.last_stable_offset) == (leo, lso)
    assert again.producer_state.ongoing == {2: lso}
    assert again.collect_aborted_txns(0, leo) == aborted
    # and the transaction can still be ended
    again.append_end_txn_marker(2, 0, commit=False, coordinator_epoch=0)
    assert again.last_stable_offset == again.log_end_offset


def test_truncation_drops_index_entries_past_the_new_end(tmp_path):
    log = new_log(tmp_path)
    log.append(txn_batch(1, 0))
    log.append_end_txn_marker(1, 0, commit=False, coordinator_epoch=0)  # 2
    log.append(txn_batch(1, 2))
    log.append_end_txn_marker(1, 0, commit=False, coordinator_epoch=0)  # 5
    assert [t.last_offset for t in log.segments[0].txn_index.entries] == [2, 5]
    log.truncate_to(4)
    assert [t.last_offset for t in log.segments[0].txn_index.entries] == [2]


def test_markers_of_a_log_append_time_topic_are_stamped(tmp_path):
    log = new_log(tmp_path, message_timestamp_type="LogAppendTime")
    log.append(txn_batch(1, 0))
    info = log.append_end_txn_marker(1, 0, commit=True, coordinator_epoch=0, now_ms=NOW + 5)
    assert info.log_append_time == NOW + 5
    (pos, h), = [(p, h) for p, h in log.segments[0].iter_batch_headers(0) if h.is_control]
    assert h.timestamp_type == 1 and h.max_timestamp == NOW + 5
    assert R.verify_crc(log.segments[0].read_bytes(pos, h.batch_length + R.LOG_OVERHEAD), 0, h)


def test_the_lso_never_falls_below_the_log_start(tmp_path):
    """Kafka keeps an open transaction open when the log start passes its first offset
    (DeleteRecords, retention): the last stable offset is then the log start."""
    log = new_log(tmp_path)
    log.append(txn_batch(1, 0))                       # 0-1 producer 1, open
    log.append(R.build_batch([(NOW, None, b"x")] * 3))  # 2-4
    assert log.last_stable_offset == 0
    assert log.maybe_increment_log_start_offset(3)
    assert log.last_stable_offset == 3
    log.append_end_txn_marker(1, 0, True, 0)          # 5
    assert log.last_stable_offset == 6 == log.log_end_offset
