"""storage.transaction_index: Kafka's .txnindex byte format, the overlap search of a
read_committed fetch, truncation and torn appends."""

import struct

import pytest

from storage.index import CorruptIndexError
from storage.transaction_index import ENTRY_SIZE, AbortedTxn, TransactionIndex


def test_byte_format_is_kafkas(tmp_path):
    path = str(tmp_path / "00000000000000000000.txnindex")
    idx = TransactionIndex(path, 0)
    assert not (tmp_path / "00000000000000000000.txnindex").exists()  # created with the first entry
    idx.append(AbortedTxn(producer_id=7, first_offset=3, last_offset=9, last_stable_offset=3))
    data = open(path, "rb").read()
    assert ENTRY_SIZE == 34 and data == struct.pack(">hqqqq", 0, 7, 3, 9, 3)
    assert TransactionIndex(path, 0).entries == [AbortedTxn(7, 3, 9, 3)]


def test_collect_overlaps_and_stops_at_the_lso(tmp_path):
    idx = TransactionIndex(str(tmp_path / "t.txnindex"), 0)
    idx.append(AbortedTxn(1, 0, 10, 0))
    idx.append(AbortedTxn(2, 5, 20, 11))
    idx.append(AbortedTxn(3, 30, 40, 21))
    idx.append(AbortedTxn(4, 45, 50, 41))
    got, complete = idx.collect(12, 25)
    # (3, 30..40) begins after the range; its LSO 21 < 25 so the search goes on, (4) has LSO 41 >= 25: done
    assert got == [AbortedTxn(2, 5, 20, 11)] and complete
    got, complete = idx.collect(0, 100)
    assert [t.producer_id for t in got] == [1, 2, 3, 4] and not complete
    # (3) was aborted with the LSO at 21 >= 12: everything later began after the range
    assert idx.collect(11, 12) == ([AbortedTxn(2, 5, 20, 11)], True)


def test_append_must_increase(tmp_path):
    idx = TransactionIndex(str(tmp_path / "t.txnindex"), 0)
    idx.append(AbortedTxn(1, 0, 10, 0))
    with pytest.raises(ValueError, match="must increase"):
        idx.append(AbortedTxn(2, 0, 10, 0))


def test_truncate_reset_and_torn_append(tmp_path):
    path = str(tmp_path / "t.txnindex")
    idx = TransactionIndex(path, 0)
    for i in range(4):
        idx.append(AbortedTxn(i, i * 10, i * 10 + 5, i * 10))
    idx.truncate_to(25)  # the markers at 25 and 35 go
    assert [t.last_offset for t in TransactionIndex(path, 0).entries] == [5, 15]
    with open(path, "ab") as fh:
        fh.write(b"\x00" * 20)  # a crash in the middle of an append
    again = TransactionIndex(path, 0)
    assert [t.last_offset for t in again.entries] == [5, 15]
    assert len(open(path, "rb").read()) == 2 * ENTRY_SIZE
    again.reset()
    assert TransactionIndex(path, 0).entries == [] and open(path, "rb").read() == b""


def test_corrupt_files_are_reported(tmp_path):
    path = tmp_path / "t.txnindex"
    path.write_bytes(struct.pack(">hqqqq", 1, 1, 0, 5, 0))
    with pytest.raises(CorruptIndexError, match="version 1"):
        TransactionIndex(str(path), 0)
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 5, 0) + struct.pack(">hqqqq", 0, 2, 0, 5, 0))
    with pytest.raises(CorruptIndexError, match="does not follow"):
        TransactionIndex(str(path), 0)
    path.write_bytes(struct.pack(">hqqqq", 0, 1, 0, 5, 0))
    with pytest.raises(CorruptIndexError, match="before the segment's base offset"):
        TransactionIndex(str(path), 10).sanity_check()


def test_end_txn_markers_round_trip_through_the_record_parsers_and_dump_log():
    """protocol.records: the COMMIT/ABORT control batch in Kafka's format (what
    kafka-python's parser, the oracle, reads as a control batch)."""
    from kafka.record.default_records import DefaultRecordBatch

    from protocol import records as R

    data = R.build_end_txn_marker(producer_id=42, producer_epoch=3, commit=True, coordinator_epoch=7,
                                  timestamp=1_700_000_000_000, base_offset=10)
    h = R.parse_batch_header(data)
    assert h.is_control and h.is_transactional and h.base_offset == 10 and R.verify_crc(data, 0, h)
    oracle = DefaultRecordBatch(bytearray(data))
    assert oracle.is_control_batch and oracle.is_transactional
    assert (oracle.producer_id, oracle.producer_epoch, oracle.base_sequence) == (42, 3, -1)
    assert oracle.validate_crc()
    (rec,) = list(oracle)
    assert R.parse_control_record(rec.key, rec.value) == (R.CONTROL_COMMIT, 7)
    abort = R.build_end_txn_marker(42, 3, False, 0, 1)
    (rec,) = list(DefaultRecordBatch(bytearray(abort)))
    assert R.parse_control_record(rec.key, rec.value) == (R.CONTROL_ABORT, 0)
    with pytest.raises(R.CorruptRecordError):
        R.parse_control_record(b"\x00", None)
