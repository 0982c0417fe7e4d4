"""storage.leader_epoch_cache and the Log's leader epochs: Kafka's leader-epoch-checkpoint
text format, endOffsetFor's answers, the truncations that follow the log, and every
batch the log appends (produce, transaction markers) stamped with the current epoch."""

import os

from protocol import records as R
from storage.clock import ManualClock
from storage.leader_epoch_cache import FILE_NAME, UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET, LeaderEpochCache
from storage.log import Log
from tests.unit.test_log_helpers import topic_config

NOW = 1_700_000_000_000
UNDEF = (UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET)


def cache_with(tmp_path, *entries):
    c = LeaderEpochCache(str(tmp_path))
    for epoch, start in entries:
        c.assign(epoch, start)
    return c


def test_checkpoint_file_is_kafkas_text_format(tmp_path):
    c = cache_with(tmp_path, (0, 0), (3, 10), (5, 42))
    with open(tmp_path / FILE_NAME, "rb") as fh:
        assert fh.read() == b"0\n3\n0 0\n3 10\n5 42\n"
    assert LeaderEpochCache(str(tmp_path)).entries == [(0, 0), (3, 10), (5, 42)]
    assert c.latest_epoch == 5


def test_assign_keeps_the_latest_and_supersedes_later_entries(tmp_path):
    c = cache_with(tmp_path, (0, 0), (2, 5))
    c.assign(2, 9)  # already the latest epoch with an earlier start: nothing changes
    assert c.entries == [(0, 0), (2, 5)]
    c.assign(1, 3)  # a lower epoch removes the higher ones after it
    assert c.entries == [(0, 0), (1, 3)]
    c.assign(4, 0)  # a start at or before an entry's start removes that entry
    assert c.entries == [(4, 0)]


def test_end_offset_for_follows_kafkas_cases(tmp_path):
    c = cache_with(tmp_path, (1, 0), (3, 10), (6, 20))
    leo = 25
    assert c.end_offset_for(6, leo) == (6, 25)       # the current epoch ends at the log end
    assert c.end_offset_for(3, leo) == (3, 20)       # a known epoch ends where the next begins
    assert c.end_offset_for(4, leo) == (3, 20)       # an unknown one between: the floor's epoch
    assert c.end_offset_for(0, leo) == (0, 0)        # before the first: the first one's start
    assert c.end_offset_for(7, leo) == UNDEF         # after the latest: unknown
    assert c.end_offset_for(-1, leo) == UNDEF
    assert LeaderEpochCache(str(tmp_path / "none")).end_offset_for(0, 5) == UNDEF


def test_epoch_for_offset(tmp_path):
    c = cache_with(tmp_path, (2, 5), (4, 9))
    assert c.epoch_for_offset(4) is None
    assert [c.epoch_for_offset(o) for o in (5, 8, 9, 100)] == [2, 2, 4, 4]


def test_truncations(tmp_path):
    c = cache_with(tmp_path, (0, 0), (1, 10), (2, 20))
    c.truncate_from_end(20)
    assert c.entries == [(0, 0), (1, 10)]
    c.truncate_from_start(15)
    assert c.entries == [(1, 15)]
    c.truncate_from_start(15)
    assert c.entries == [(1, 15)]
    c.truncate_from_start(3)  # below the first entry: nothing to do
    assert c.entries == [(1, 15)]
    assert LeaderEpochCache(str(tmp_path)).entries == [(1, 15)]
    c.clear()
    assert LeaderEpochCache(str(tmp_path)).entries == []


def test_malformed_file_is_ignored_with_a_warning(tmp_path, caplog):
    for body in (b"1\n1\n0 0\n", b"0\n2\n0 0\n", b"0\nx\n", b"0\n2\n3 0\n1 5\n", b"\xff\xfe"):
        (tmp_path / FILE_NAME).write_bytes(body)
        caplog.clear()
        assert LeaderEpochCache(str(tmp_path)).entries == []
        assert FILE_NAME in caplog.text


def _log(tmp_path, epoch=0, **kw):
    return Log(str(tmp_path / "t-0"), topic_config(), ManualClock(NOW), leader_epoch=epoch, **kw)


def _epochs_in(log):
    return [(h.base_offset, h.partition_leader_epoch) for seg in log.segments for _pos, h in seg.iter_batch_headers(0)]


def test_log_stamps_every_batch_with_the_current_epoch(tmp_path):
    log = _log(tmp_path, epoch=0)
    # a client sends -1 (producers never know the epoch); the log writes its own
    log.append(R.build_batch([(NOW, b"k", b"v"), (NOW, b"k2", b"v2")]))
    log.producer_state.transactions_enabled = True
    log.append(R.build_batch([(NOW, None, b"t")], producer_id=7, producer_epoch=0, base_sequence=0,
                             is_transactional=True))
    log.append_end_txn_marker(7, 0, commit=True, coordinator_epoch=1)
    assert _epochs_in(log) == [(0, 0), (2, 0), (3, 0)]
    assert log.leader_epoch == 0 and log.end_offset_for_epoch(0) == (0, 4)
    log.close()
    # a later epoch (as after a leader change) begins at the log end and is stamped from then on
    log = _log(tmp_path, epoch=2)
    log.append(R.build_batch([(NOW, b"k", b"v")]))
    assert _epochs_in(log)[-1] == (4, 2)
    assert log.end_offset_for_epoch(0) == (0, 4)
    assert log.end_offset_for_epoch(1) == (0, 4)
    assert log.end_offset_for_epoch(2) == (2, 5)
    assert log.end_offset_for_epoch(3) is None
    assert [log.epoch_for_offset(o) for o in (0, 3, 4)] == [0, 0, 2]
    with open(os.path.join(log.dir, FILE_NAME)) as fh:
        assert fh.read() == "0\n2\n0 0\n2 4\n"
    log.close()


def test_log_start_moves_and_truncation_follow_the_log(tmp_path):
    log = _log(tmp_path, epoch=0)
    for i in range(4):
        log.append(R.build_batch([(NOW, b"k%d" % i, b"v")]))
    log.close()
    log = _log(tmp_path, epoch=1)
    for i in range(2):
        log.append(R.build_batch([(NOW, b"k%d" % i, b"v")]))
    assert log.end_offset_for_epoch(0) == (0, 4)
    assert log.maybe_increment_log_start_offset(5)  # DeleteRecords into epoch 1
    # epoch 0 is gone: Kafka answers the asked epoch ending where the first known one starts
    assert log.end_offset_for_epoch(0) == (0, 5)
    assert [log.epoch_for_offset(o) for o in (5, 6)] == [1, 1]
    log.truncate_to(5)  # truncation keeps the partition's current epoch from the new end
    assert log.leader_epoch == 1 and log.end_offset_for_epoch(1) == (1, 5)
    log.close()


def test_recovered_log_drops_epochs_past_its_end(tmp_path):
    log = _log(tmp_path, epoch=0)
    log.append(R.build_batch([(NOW, b"k", b"v")]))
    log.close()
    # an epoch recorded past the data (the data was lost in a crash) goes at load
    c = LeaderEpochCache(os.path.join(str(tmp_path), "t-0"))
    c.assign(3, 7)
    log = _log(tmp_path, epoch=0)
    assert LeaderEpochCache(log.dir).entries == [(0, 0)]
    log.close()


def test_current_leader_epoch_check_is_kafkas():
    from broker.errors import leader_epoch_error
    from protocol.errors import ErrorCode

    assert leader_epoch_error(-1, 3) == 0              # not given: not checked
    assert leader_epoch_error(3, None) == 0            # a log without epochs: nothing to check
    assert leader_epoch_error(3, 3) == 0
    assert leader_epoch_error(2, 3) == ErrorCode.FENCED_LEADER_EPOCH   # the client is behind
    assert leader_epoch_error(4, 3) == ErrorCode.UNKNOWN_LEADER_EPOCH  # the client is ahead
