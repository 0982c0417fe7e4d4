import json
import os
import uuid
from types import SimpleNamespace

import pytest

from storage.clock import ManualClock
from storage.errors import InvalidPartitionsError, InvalidTopicError, TopicExistsError, UnknownTopicOrPartitionError
from storage.log_manager import TOPICS_FILE, LogManager, validate_topic_name
from tests.unit.test_log_helpers import append, build_batch, topic_config


def factory(broker, overrides):
    kw = {}
    if "segment.bytes" in overrides:
        kw["segment_bytes"] = int(overrides["segment.bytes"])
    if "flush.ms" in overrides:
        kw["flush_ms"] = int(overrides["flush.ms"])
    if "bogus" in overrides:
        raise ValueError("unknown config bogus")
    kw.setdefault("segment_index_bytes", 1200)
    return topic_config(**kw)


def manager(dirs, clock=None):
    broker = SimpleNamespace(log_dirs=[str(d) for d in dirs])
    m = LogManager(broker, clock or ManualClock(1_000_000), topic_config_factory=factory)
    m.startup()
    return m


def test_create_topic_and_get_log(tmp_path):
    m = manager([tmp_path])
    info = m.create_topic("events", 3, {"segment.bytes": "5000"})
    assert info.name == "events" and info.num_partitions == 3
    assert isinstance(info.topic_id, uuid.UUID) and info.topic_id.version == 4
    assert info.config.segment_bytes == 5000 and info.overrides == {"segment.bytes": "5000"}
    # the checkpoint files exist from startup on (as Kafka creates them)
    assert sorted(os.listdir(tmp_path)) == sorted([TOPICS_FILE, "events-0", "events-1", "events-2", ".lock",
                                                   "log-start-offset-checkpoint",
                                                   "recovery-point-offset-checkpoint"])
    log = m.get_log("events", 2)
    assert log.topic == "events" and log.partition == 2
    with pytest.raises(UnknownTopicOrPartitionError):
        m.get_log("events", 3)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.get_log("nope", 0)
    assert m.get_topic("events") is info and m.get_topic("nope") is None
    assert list(m.topics()) == ["events"]
    m.shutdown()


def test_topic_name_validation(tmp_path):
    m = manager([tmp_path])
    for bad in ["", ".", "..", "a" * 250, "bad name", "bad/name", "ünï"]:
        with pytest.raises(InvalidTopicError):
            m.create_topic(bad, 1)
    validate_topic_name("a" * 249)
    validate_topic_name("Ok.name_with-all.0")
    m.create_topic("a.b", 1)
    with pytest.raises(TopicExistsError):
        m.create_topic("a.b", 1)
    with pytest.raises(InvalidTopicError, match="collides"):
        m.create_topic("a_b", 1)
    with pytest.raises(ValueError):
        m.create_topic("bad-config", 1, {"bogus": "1"})
    with pytest.raises(InvalidPartitionsError):
        m.create_topic("no-partitions", 0)
    info = m.validate_new_topic("only-validated", 3, {"segment.bytes": "2000"})
    assert info.num_partitions == 3 and info.config.segment_bytes == 2000
    assert m.get_topic("only-validated") is None and not os.path.exists(tmp_path / "only-validated-0")
    assert m.get_topic("bad-config") is None and not os.path.exists(tmp_path / "bad-config-0")
    m.shutdown()


def test_topics_persist_across_restarts(tmp_path):
    m = manager([tmp_path])
    info = m.create_topic("t1", 2, {"segment.bytes": "4000"})
    m.create_topic("t2", 1)
    for i in range(5):
        append(m.get_log("t1", 1), [build_batch([(1000 + i, b"v")])])
    m.shutdown()
    doc = json.loads((tmp_path / TOPICS_FILE).read_text())
    assert doc["topics"]["t1"] == {"topic_id": str(info.topic_id), "partitions": 2,
                                   "configs": {"segment.bytes": "4000"}}
    m = manager([tmp_path])
    assert sorted(m.topics()) == ["t1", "t2"]
    t1 = m.get_topic("t1")
    assert t1.topic_id == info.topic_id and t1.num_partitions == 2
    assert t1.config.segment_bytes == 4000
    log = m.get_log("t1", 1)
    assert log.log_end_offset == 5
    assert log.offset_for_timestamp(1003) == (3, 1003)
    assert m.get_log("t1", 0).log_end_offset == 0
    m.shutdown()


def test_delete_topic(tmp_path):
    m = manager([tmp_path])
    m.create_topic("gone", 2)
    m.create_topic("kept", 1)
    append(m.get_log("gone", 0), [build_batch([(1, b"v")])])
    m.delete_topic("gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        m.delete_topic("gone")
    with pytest.raises(UnknownTopicOrPartitionError):
        m.get_log("gone", 0)
    assert sorted(n for n in os.listdir(tmp_path) if "checkpoint" not in n and n != ".lock") == [TOPICS_FILE, "kept-0"]
    m.shutdown()
    m = manager([tmp_path])
    assert list(m.topics()) == ["kept"]
    # a topic of the same name can be created again, empty
    m.create_topic("gone", 1)
    assert m.get_log("gone", 0).log_end_offset == 0
    m.shutdown()



def test_topic_names_by_id_follow_creation_growth_deletion_and_restart(tmp_path):
    """Fetch v13+ and Metadata v10+ name topics by id through topic_name, a lookup kept
    beside the topics: it must agree with a pass over them after every change."""
    m = manager([tmp_path])

    view = m.topic_names_view()  # live: taken once, it follows every change below

    def agrees():
        want = {info.topic_id: name for name, info in m.topics().items()}
        assert dict(view) == want
        for tid, name in want.items():
            assert m.topic_name(tid) == name
        return want

    versions = [m.topics_version()]
    a = m.create_topic("a", 1).topic_id
    b = m.create_topic("b", 2).topic_id
    versions.append(m.topics_version())
    agrees()
    m.create_partitions("b", 4)  # a new TopicInfo, the same id
    versions.append(m.topics_version())
    assert m.topic_name(b) == "b" and m.get_topic("b").num_partitions == 4
    m.delete_topic("a")
    versions.append(m.topics_version())
    assert len(set(versions)) == len(versions)  # each change a new number
    assert m.topics_version() == versions[-1]  # and none without one
    assert m.topic_name(a) is None
    again = m.create_topic("a", 1).topic_id  # the same name, a new id
    assert again != a and m.topic_name(again) == "a" and m.topic_name(a) is None
    assert view.get(again) == "a" and a not in view
    with pytest.raises(TypeError):
        view[a] = "a"  # read-only
    m.set_topic_config("a", {"segment.bytes": "5000"})
    assert agrees() == {again: "a", b: "b"}
    m.shutdown()
    m = manager([tmp_path])
    view = m.topic_names_view()
    assert agrees() == {again: "a", b: "b"}
    assert m.topic_name(uuid.uuid4()) is None
    with pytest.raises(TypeError):
        m._topics.update({})
    m.shutdown()

def test_interrupted_delete_dirs_removed_and_orphans_ignored(tmp_path):
    m = manager([tmp_path])
    m.create_topic("k", 1)
    m.shutdown()
    (tmp_path / f"x-0.{uuid.uuid4().hex}-delete").mkdir()
    (tmp_path / "orphan-0").mkdir()
    m = manager([tmp_path])
    assert not any(n.endswith("-delete") for n in os.listdir(tmp_path))
    assert (tmp_path / "orphan-0").exists()
    assert list(m.topics()) == ["k"]
    m.shutdown()


def test_multiple_log_dirs_fewest_partitions(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    m.create_topic("a", 3)
    m.create_topic("b", 1)
    in1 = sorted(n for n in os.listdir(d1) if n not in (TOPICS_FILE, ".lock") and "checkpoint" not in n)
    in2 = sorted(n for n in os.listdir(d2) if n not in (TOPICS_FILE, ".lock") and "checkpoint" not in n)
    assert in1 == ["a-0", "a-2"] and in2 == ["a-1", "b-0"]
    assert (d1 / TOPICS_FILE).exists() and (d2 / TOPICS_FILE).exists()
    append(m.get_log("a", 1), [build_batch([(7, b"v")])])
    m.shutdown()
    m = manager([d1, d2])
    assert m.get_log("a", 1).log_end_offset == 1
    assert os.path.dirname(m.get_log("a", 1).dir) == str(d2)
    m.shutdown()


def test_metadata_highest_generation_wins(tmp_path):
    d1, d2 = tmp_path / "d1", tmp_path / "d2"
    m = manager([d1, d2])
    m.create_topic("a", 1)
    m.shutdown()
    stale = (d1 / TOPICS_FILE).read_text()
    m = manager([d1, d2])
    m.create_topic("b", 1)
    m.shutdown()
    (d1 / TOPICS_FILE).write_text(stale)  # d1 missed the last write
    m = manager([d1, d2])
    assert sorted(m.topics()) == ["a", "b"]
    m.shutdown()


def test_set_topic_config_persists_and_applies(tmp_path):
    m = manager([tmp_path])
    m.create_topic("c", 2)
    info = m.set_topic_config("c", {"segment.bytes": "3000"})
    assert info.config.segment_bytes == 3000
    assert m.get_log("c", 1).config.segment_bytes == 3000
    with pytest.raises(ValueError):
        m.set_topic_config("c", {"bogus": "x"})
    assert m.get_topic("c").overrides == {"segment.bytes": "3000"}
    with pytest.raises(UnknownTopicOrPartitionError):
        m.set_topic_config("nope", {})
    m.shutdown()
    m = manager([tmp_path])
    assert m.get_topic("c").overrides == {"segment.bytes": "3000"}
    assert m.get_log("c", 0).config.segment_bytes == 3000
    m.shutdown()


def test_flush_due_flush_ms(tmp_path):
    clock = ManualClock(0)
    m = manager([tmp_path], clock)
    m.create_topic("f", 1, {"flush.ms": "1000"})
    m.create_topic("g", 1)
    lf, lg = m.get_log("f", 0), m.get_log("g", 0)
    append(lf, [build_batch([(1, b"v")])])
    append(lg, [build_batch([(1, b"v")])])
    assert m.flush_due() == 0
    clock.advance(999)
    assert m.flush_due() == 0
    clock.advance(1)
    assert m.flush_due() == 1
    assert lf.recovery_point == 1 and lg.recovery_point == 0
    m.shutdown()


def test_shutdown_trims_indexes_and_restart_after_kill(tmp_path):
    m = manager([tmp_path])
    m.create_topic("s", 1)
    log = m.get_log("s", 0)
    for i in range(20):
        append(log, [build_batch([(100 + i, b"v" * 300)])])
    idx = log.active_segment.offset_index_path
    assert os.path.getsize(idx) == 1200
    # kill: no shutdown; a new manager on the same directory sees every batch
    m2 = manager([tmp_path])
    log2 = m2.get_log("s", 0)
    assert log2.log_end_offset == 20
    assert os.path.getsize(idx) == 1200  # active again: preallocated
    m2.shutdown()
    entries = log2.active_segment.offset_index.entries
    assert entries > 0 and os.path.getsize(idx) == 8 * entries
    log.close_handlers()


def test_creating_a_topic_does_not_flush_the_filesystem(tmp_path, monkeypatch):
    """A small topic's partitions are made without a syncfs of the log dir, which would
    wait, on the event loop, for every dirty page of the filesystem (a second for a few
    GB that producers or other programs wrote); topics.json is still written durably."""
    import storage.log_manager as log_manager

    m = manager([tmp_path])
    flushed = []
    monkeypatch.setattr(log_manager, "sync_filesystem", flushed.append)
    m.create_topic("quick", 3)
    assert flushed == []
    assert "quick" in json.loads((tmp_path / TOPICS_FILE).read_text())["topics"]
    m.shutdown()
    assert flushed == [str(tmp_path)]  # the clean stop still syncs the log dir once


def test_a_new_partition_lost_in_a_crash_is_made_again(tmp_path, caplog):
    """What a crash right after CreateTopics can leave of partitions made without an
    fsync (their topic listed in topics.json, which was): a partition directory gone,
    a partition.metadata empty. The next start makes the one and rewrites the other;
    every partition takes records."""
    m = manager([tmp_path])
    info = m.create_topic("fresh", 3)
    for p in range(3):
        m.get_log("fresh", p).close_handlers()  # the crash: nothing closed, nothing synced
    import shutil

    shutil.rmtree(tmp_path / "fresh-1")
    (tmp_path / "fresh-2" / "partition.metadata").write_bytes(b"")
    with caplog.at_level("WARNING", logger="chronolog.storage"):
        m2 = manager([tmp_path])
    assert "partition directory of fresh-1 is missing; creating" in caplog.text
    assert "rewriting it with topic id" in caplog.text
    from storage import partition_metadata

    for p in range(3):
        log = m2.get_log("fresh", p)
        append(log, [build_batch([(100 + p, b"v")])])
        assert log.log_end_offset == 1
        assert partition_metadata.read(str(tmp_path / f"fresh-{p}")) == info.topic_id
    m2.shutdown()


def test_real_config_classes(tmp_path):
    config = pytest.importorskip("config")
    broker = config.load_broker_config(None, [f"log.dirs={tmp_path}", "log.segment.bytes=2000"], env={})
    m = LogManager(broker, ManualClock(0))
    m.startup()
    info = m.create_topic("real", 1, {"segment.index.bytes": "4096"})
    assert info.config.segment_bytes == 2000 and info.config.segment_index_bytes == 4096
    log = m.get_log("real", 0)
    for i in range(30):
        append(log, [build_batch([(i, b"v" * 100)])])
    assert len(log.segments) > 1
    m.shutdown()
    m = LogManager(broker, ManualClock(0))
    m.startup()
    assert m.get_log("real", 0).log_end_offset == 30
    m.shutdown()


# ---------------------------------------------------------------------- deferred loading
def deferred_manager(dirs, clock=None):
    broker = SimpleNamespace(log_dirs=[str(d) for d in dirs])
    m = LogManager(broker, clock or ManualClock(1_000_000), topic_config_factory=factory)
    m.startup(defer=True)
    return m


def _fill(m, topic, partitions, per):
    ends = {}
    for p in range(partitions):
        for i in range(per):
            va = append(m.get_log(topic, p), [build_batch([(10_000 + i, b"%d-%d" % (p, i))])])
        ends[p] = va.last_offset + 1
    return ends


def test_clean_partitions_load_on_first_use_or_in_the_background(tmp_path):
    from storage.checkpoint import read_checkpoint

    m = manager([tmp_path])
    m.create_topic("a", 6)
    m.create_topic("b", 4)
    ends = _fill(m, "a", 6, 3)
    m.shutdown()
    rp_before = read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint"))

    m = deferred_manager([tmp_path])
    assert m.loaded_logs() == {} and len(m.hosted()) == 10  # nothing opened yet
    # the checkpoints rewritten at start keep every deferred partition's values
    assert read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == rp_before
    assert m.get_log("a", 4).log_end_offset == ends[4]  # loaded on first use
    assert set(m.loaded_logs()) == {("a", 4)}
    with pytest.raises(UnknownTopicOrPartitionError):
        m.get_log("a", 6)
    assert m.load_pending(3) == 6
    assert len(m.loaded_logs()) == 4
    m.shutdown()  # with 6 partitions never loaded: still clean, their checkpoints kept
    assert read_checkpoint(str(tmp_path / "recovery-point-offset-checkpoint")) == rp_before

    m = manager([tmp_path])  # eager: everything, clean, with every record
    assert {p: m.get_log("a", p).log_end_offset for p in range(6)} == ends
    assert all(m.get_log("b", p).log_end_offset == 0 for p in range(4))
    m.shutdown()

    m = deferred_manager([tmp_path])
    assert len(m.logs()) == 10 and m.loaded_logs().keys() == m.logs().keys()  # logs(): all of them
    assert m.load_pending(100) == 0
    m.shutdown()


def test_deferred_partitions_of_a_deleted_topic_go_with_it(tmp_path):
    m = manager([tmp_path])
    m.create_topic("gone", 3)
    _fill(m, "gone", 3, 2)
    m.shutdown()
    m = deferred_manager([tmp_path])
    m.delete_topic("gone")
    assert m.hosted() == set() and not any(n.startswith("gone-") for n in os.listdir(tmp_path))
    m.shutdown()


def test_nothing_is_deferred_after_an_unclean_stop(tmp_path):
    m = manager([tmp_path])
    m.create_topic("t", 2)
    ends = _fill(m, "t", 2, 2)
    for log in m.logs().values():
        log.close_handlers()  # a kill: no clean-shutdown marker
    m.unlock_dirs()
    m = deferred_manager([tmp_path])
    assert len(m.loaded_logs()) == 2  # recovered before serving
    assert {p: m.get_log("t", p).log_end_offset for p in range(2)} == ends
    m.shutdown()


def test_a_deferred_topic_exists_at_once_and_its_partitions_are_made_as_they_load(tmp_path, caplog):
    import logging

    m = deferred_manager([tmp_path])
    info = m.create_topic("big", 40, defer=True)
    assert info.num_partitions == 40 and m.get_topic("big") is info
    assert not any(n.startswith("big-") for n in os.listdir(tmp_path))  # nothing made yet
    assert json.loads((tmp_path / TOPICS_FILE).read_text())["topics"]["big"]["partitions"] == 40
    log = m.get_log("big", 7)  # made on first use, with the topic id
    append(log, [build_batch([(10_000, b"x")])])
    assert (tmp_path / "big-7" / "partition.metadata").exists()
    assert m.load_pending(10) == 29
    assert len([n for n in os.listdir(tmp_path) if n.startswith("big-")]) == 11
    m.shutdown()  # 29 never made
    with caplog.at_level(logging.INFO, logger="storage.log_manager"):
        m = deferred_manager([tmp_path])
    assert not [r for r in caplog.records if "is missing" in r.getMessage()]  # not a loss: never made
    assert any("were not made yet" in r.getMessage() for r in caplog.records)
    assert m.get_log("big", 7).log_end_offset == 1
    assert m.load_pending(100) == 0
    assert len([n for n in os.listdir(tmp_path) if n.startswith("big-")]) == 40
    m.shutdown()


def test_deleting_a_deferred_topic_before_its_partitions_are_made(tmp_path):
    m = deferred_manager([tmp_path, tmp_path / "second"])
    m.create_topic("big", 10, defer=True)
    m.get_log("big", 3)
    m.delete_topic("big")
    assert m.hosted() == set() and m.get_topic("big") is None
    assert not any(n.startswith("big-") for d in (tmp_path, tmp_path / "second") for n in os.listdir(d))
    m.create_topic("big", 4, defer=True)  # the name is free again
    assert m.load_pending(100) == 0
    dirs = [d for d in (tmp_path, tmp_path / "second") for n in os.listdir(d) if n.startswith("big-")]
    assert len(dirs) == 4 and len(set(dirs)) == 2  # spread over both log dirs
    m.shutdown()


def test_a_deleted_topics_logs_are_freed_without_the_cycle_collector(tmp_path):
    """The broker freezes its heap once loaded (broker.server.settle_heap): a frozen
    object in a reference cycle would never be freed. A deleted topic's logs, segments
    and indexes form no cycle: reference counting alone frees them."""
    import gc
    import weakref

    m = manager([tmp_path])
    m.create_topic("gone", 2, {"index.interval.bytes": "1"})
    objects = []
    for p in range(2):
        log = m.get_log("gone", p)
        append(log, [build_batch([(1000 + i, b"v")]) for i in range(3)])  # index entries too
        seg = log.active_segment
        objects += [log, seg, seg.offset_index, seg.time_index]
    refs = [weakref.ref(o) for o in objects]
    del objects, log, seg
    enabled = gc.isenabled()
    gc.disable()
    try:
        m.delete_topic("gone")
        m.flush_due()  # its next periodic pass drops what it no longer manages
        assert [r() for r in refs] == [None] * len(refs)
    finally:
        if enabled:
            gc.enable()
