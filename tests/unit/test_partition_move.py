"""Moving a partition between log dirs (AlterReplicaLogDirs, storage.partition_move):
the copy that another filesystem needs, driven step by step as the broker's periodic
task drives it, with appends, rolls and retention running between the passes; what a
stop or crash in the middle leaves; cancellation."""

import os
import time

import pytest

from storage.errors import KafkaStorageError, LogDirNotFoundError
from storage.partition_move import FUTURE_DIR, PartitionMove
from tests.unit.test_log import read_all
from tests.unit.test_log_helpers import append, build_batch
from tests.unit.test_log_manager import manager


@pytest.fixture
def copying(monkeypatch):
    """Every move takes the copying path, as between two filesystems."""
    from storage.log_manager import LogManager

    monkeypatch.setattr(LogManager, "same_filesystem", staticmethod(lambda a, b: False))


def fill(log, n, start=0, size=300):
    for i in range(start, start + n):
        append(log, [build_batch([(1_000_000 + i, b"v%05d" % i)], value_size=size)])


def drive(m, timeout=30.0):
    """advance_moves until no move is left, waiting for each copy pass."""
    deadline = time.monotonic() + timeout
    while m.moves or m._dying_moves:
        assert time.monotonic() < deadline, "moves never finished"
        m.advance_moves()
        for move in list(m.moves.values()) + m._dying_moves:
            if move.pending is not None:
                move.pending.exception(timeout)  # a cancelled pass ends with MoveCancelled


def where(dirs, name):
    return [str(d) for d in dirs if os.path.isdir(os.path.join(d, name))]


def test_copy_then_switch_keeps_every_record_and_the_log_serving(tmp_path, copying, monkeypatch):
    import storage.log_manager

    monkeypatch.setattr(storage.log_manager, "FINAL_DELTA_BYTES", 0)  # every pass, up to MAX_PASSES
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.create_topic("t", 1, {"segment.bytes": "4000"})
    log = m.get_log("t", 0)
    src = os.path.dirname(log.dir)
    (dest,) = [str(d) for d in dirs if str(d) != src]
    fill(log, 40)  # several segments
    before = read_all(log)
    assert len(log.segments) > 2

    assert m.move_partition("t", 0, dest) is True
    assert m.move_partition("t", 0, dest) is True  # under way: the same answer
    move = m.moves[("t", 0)]
    assert where(dirs, "t-0") == [src]
    # first pass, then appends (a roll included) before the next: the copy catches up
    m.advance_moves()
    move.pending.result(10)
    assert os.path.isdir(move.future_dir) and FUTURE_DIR.match(os.path.basename(move.future_dir))
    fill(log, 20, start=40)
    m.advance_moves()  # the first pass (records 0-39) counted, the next one started
    # DescribeLogDirs lists the copy as a future replica in the destination
    from broker.handlers.describe_log_dirs import describe_log_dirs

    listed = {(r.log_dir, t.name, p.partition_index, p.is_future_key): (p.partition_size, p.offset_lag)
              for r in describe_log_dirs(m, None) for t in r.topics for p in t.partitions}
    assert set(listed) == {(src, "t", 0, False), (dest, "t", 0, True)}
    size, lag = listed[(dest, "t", 0, True)]
    assert lag == 20 and 0 < size
    drive(m)
    assert move.passes == storage.log_manager.MAX_PASSES + 1  # and the last one with the log closed
    moved = m.get_log("t", 0)
    assert moved is not log and log.closed
    assert where(dirs, "t-0") == [dest] and os.path.dirname(moved.dir) == dest
    assert not [n for n in os.listdir(dest) + os.listdir(src) if n.endswith(("-future", "-delete"))]
    after = read_all(moved)
    assert [b[3] for b in after[:len(before)]] == [b[3] for b in before]
    assert [b[0] for b in after] == list(range(60))
    # the moved log takes appends and comes back from a restart as it was
    fill(moved, 5, start=60)
    want = [b[3] for b in read_all(moved)]
    m.shutdown()
    m = manager(dirs)
    assert os.path.dirname(m.get_log("t", 0).dir) == dest
    assert [b[3] for b in read_all(m.get_log("t", 0))] == want
    m.shutdown()


def test_an_unfinished_copy_is_removed_at_start_and_the_source_kept(tmp_path, copying):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.create_topic("t", 1, {})
    log = m.get_log("t", 0)
    fill(log, 10)
    want = [b[3] for b in read_all(log)]
    src = os.path.dirname(log.dir)
    (dest,) = [str(d) for d in dirs if str(d) != src]
    m.move_partition("t", 0, dest)
    move = m.moves[("t", 0)]
    move.copy_pass()  # a pass done, then a crash (no shutdown)
    assert os.path.isdir(move.future_dir)
    for lg in m.logs().values():
        lg.close_handlers()
    m.unlock_dirs()
    m = manager(dirs)
    assert not os.path.exists(move.future_dir)
    assert where(dirs, "t-0") == [src]
    assert [b[3] for b in read_all(m.get_log("t", 0))] == want
    m.shutdown()


def test_cancelled_moves_leave_nothing(tmp_path, copying):
    dirs = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    m = manager(dirs)
    m.create_topic("t", 1, {})
    fill(m.get_log("t", 0), 10)
    src = os.path.dirname(m.get_log("t", 0).dir)
    others = [str(d) for d in dirs if str(d) != src]
    # another destination replaces the move; the current dir cancels it
    m.move_partition("t", 0, others[0])
    first = m.moves[("t", 0)]
    m.advance_moves()
    m.move_partition("t", 0, others[1])
    assert m.moves[("t", 0)].dest_root == others[1]
    assert m.move_partition("t", 0, src) is False and not m.moves
    drive(m)
    assert not os.path.exists(first.future_dir)
    assert not [n for d in dirs for n in os.listdir(d) if n.endswith("-future")]
    assert where(dirs, "t-0") == [src]
    # a topic deleted while its partition copies
    m.move_partition("t", 0, others[0])
    m.advance_moves()
    m.delete_topic("t")
    drive(m)
    assert not [n for d in dirs for n in os.listdir(d) if n.startswith("t-")]
    m.shutdown()


def test_refusals(tmp_path):
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.create_topic("t", 1, {})
    with pytest.raises(LogDirNotFoundError, match="not found in the config"):
        m.move_partition("t", 0, str(tmp_path / "elsewhere"))
    src = os.path.dirname(m.get_log("t", 0).dir)
    (dest,) = [str(d) for d in dirs if str(d) != src]
    m.busy.add(("t", 0))
    with pytest.raises(KafkaStorageError, match="being cleaned"):
        m.move_partition("t", 0, dest)
    m.busy.clear()
    # the same filesystem: one rename, done before the answer
    assert m.move_partition("t", 0, dest) is True and not m.moves
    assert where(dirs, "t-0") == [dest]
    m.shutdown()


def test_copy_pass_appends_the_tail_of_a_grown_log_and_recopies_replaced_files(tmp_path):
    src = tmp_path / "src" / "t-0"
    src.mkdir(parents=True)
    (tmp_path / "dst").mkdir()
    (src / "00.log").write_bytes(b"a" * 100)
    (src / "00.index").write_bytes(b"i" * 10)
    (src / "gone.snapshot").write_bytes(b"s")
    (src / "old.log.deleted").write_bytes(b"d")
    mv = PartitionMove("t", 0, str(src), str(tmp_path / "dst"))
    assert mv.copy_pass() == 111
    assert sorted(os.listdir(mv.future_dir)) == ["00.index", "00.log", "gone.snapshot"]
    with open(src / "00.log", "ab") as f:
        f.write(b"b" * 20)
    (src / "00.index").write_bytes(b"j" * 10)
    os.unlink(src / "gone.snapshot")
    assert mv.copy_pass() == 20 + 10  # the tail, the rewritten index
    assert (tmp_path / "dst" / os.path.basename(mv.future_dir) / "00.log").read_bytes() == b"a" * 100 + b"b" * 20
    assert sorted(os.listdir(mv.future_dir)) == ["00.index", "00.log"]
    # a log file replaced by another (a cleaned segment: another inode) is copied whole
    (src / "new.tmp").write_bytes(b"c" * 130)
    os.replace(src / "new.tmp", src / "00.log")
    assert mv.copy_pass() == 130
    assert (tmp_path / "dst" / os.path.basename(mv.future_dir) / "00.log").read_bytes() == b"c" * 130
    assert mv.copy_pass() == 0
    mv.discard()
    assert not os.path.exists(mv.future_dir)


def test_replica_alter_log_dirs_io_max_bytes_per_second_throttles_the_passes(tmp_path, copying):
    """The dynamic quota of Kafka's ReplicaAlterLogDirsThread: a pass sleeps to keep under
    it, the switch (on the event loop) never does, and a cancel wakes a long sleep."""
    dirs = [tmp_path / "a", tmp_path / "b"]
    m = manager(dirs)
    m.create_topic("t", 1, {})
    log = m.get_log("t", 0)
    fill(log, 6, size=300_000)  # ~1.8 MB
    src = os.path.dirname(log.dir)
    (dest,) = [str(d) for d in dirs if str(d) != src]
    m.broker_config.replica_alter_log_dirs_io_max_bytes_per_second = 3_000_000
    m.move_partition("t", 0, dest)
    move = m.moves[("t", 0)]
    m.advance_moves()
    assert move.throttle.rate == 3_000_000
    move.pending.result(30)
    assert move.throttle.slept_s > 0.1  # 1.8 MB at 3 MB/s: the first 1 MiB chunk is over the 0.3 s window
    drive(m)
    assert where(dirs, "t-0") == [dest] and move.throttle is None
    # a quota so low a pass would sleep for hours: cancelling the move ends it at once
    m.broker_config.replica_alter_log_dirs_io_max_bytes_per_second = 1
    m.move_partition("t", 0, src)
    slow = m.moves[("t", 0)]
    m.advance_moves()
    time.sleep(0.2)  # the pass is asleep after its first chunk
    started = time.monotonic()
    m.cancel_move(("t", 0), "test")
    assert slow.pending.exception(10) is not None and time.monotonic() - started < 5
    drive(m)
    assert not os.path.exists(slow.future_dir) and where(dirs, "t-0") == [dest]
    m.shutdown()
