"""LogManager.create_partitions and dynamic broker configs (with the real config classes)."""

import json
import os

import pytest

from config import ConfigError, load_broker_config
from storage.clock import ManualClock
from storage.errors import InvalidPartitionsError, UnknownTopicOrPartitionError
from storage.log_manager import TOPICS_FILE, DYNAMIC_BROKER_CONFIGS_FILE, LogManager
from tests.unit.test_log_helpers import build_batch


def manager(tmp_path, *overrides):
    cfg = load_broker_config(None, [f"log.dirs={tmp_path}", *overrides], env={}, warn=False)
    m = LogManager(cfg, ManualClock(1_000_000))
    m.startup()
    return m


def test_create_partitions(tmp_path):
    m = manager(tmp_path)
    m.create_topic("t", 1, {"segment.bytes": "100000"})
    with pytest.raises(InvalidPartitionsError, match="Topic already has 1 partition"):
        m.create_partitions("t", 1)
    with pytest.raises(InvalidPartitionsError, match="would not be an increase"):
        m.create_partitions("t", 0)
    with pytest.raises(UnknownTopicOrPartitionError):
        m.create_partitions("nope", 3)
    info = m.create_partitions("t", 5, validate_only=True)
    assert info.num_partitions == 5 and m.get_topic("t").num_partitions == 1
    assert not os.path.exists(tmp_path / "t-1")
    m.create_partitions("t", 3)
    assert m.get_topic("t").num_partitions == 3
    for p in (1, 2):
        log = m.get_log("t", p)
        assert log.config.segment_bytes == 100000 and log.log_end_offset == 0
    assert json.loads((tmp_path / TOPICS_FILE).read_text())["topics"]["t"]["partitions"] == 3
    m.shutdown()
    m = manager(tmp_path)
    assert m.get_topic("t").num_partitions == 3 and m.get_log("t", 2).log_end_offset == 0


def test_dynamic_broker_configs_apply_persist_and_keep_overrides(tmp_path):
    m = manager(tmp_path, "log.retention.hours=5")
    m.create_topic("plain", 1)
    m.create_topic("pinned", 1, {"message.timestamp.type": "CreateTime", "retention.ms": "1000"})
    assert m.get_log("plain", 0).config.retention_ms == 5 * 3600 * 1000
    with pytest.raises(ConfigError):
        m.set_dynamic_broker_configs(per_broker={"log.retention.ms": "0"})
    m.set_dynamic_broker_configs(per_broker={"log.message.timestamp.type": "LogAppendTime"}, validate_only=True)
    assert not (tmp_path / DYNAMIC_BROKER_CONFIGS_FILE).exists()
    assert m.get_log("plain", 0).config.message_timestamp_type == "CreateTime"
    m.set_dynamic_broker_configs(per_broker={"log.message.timestamp.type": "LogAppendTime",
                                             "log.retention.ms": "60000"})
    assert m.get_log("plain", 0).config.message_timestamp_type == "LogAppendTime"
    assert m.get_log("plain", 0).config.retention_ms == 60000
    assert m.get_topic("plain").config.retention_ms == 60000
    assert m.get_log("pinned", 0).config.message_timestamp_type == "CreateTime"
    assert m.get_log("pinned", 0).config.retention_ms == 1000
    assert m.static_broker_config.log_retention_ms is None
    # an append right away is stamped by the broker
    info = m.get_log("plain", 0).append(build_batch([(5, b"v")]))
    assert info.log_append_time == 1_000_000
    m.create_topic("later", 1)
    assert m.get_log("later", 0).config.message_timestamp_type == "LogAppendTime"
    m.shutdown()
    m = manager(tmp_path, "log.retention.hours=5")
    assert m.dynamic_broker_configs() == ({"log.message.timestamp.type": "LogAppendTime", "log.retention.ms": "60000"}, {})
    assert m.get_log("plain", 0).config.message_timestamp_type == "LogAppendTime"
    assert m.get_log("plain", 0).config.retention_ms == 60000
    assert m.get_log("pinned", 0).config.message_timestamp_type == "CreateTime"
    m.set_dynamic_broker_configs(per_broker={}, default={"log.segment.bytes": "2000000"})
    assert m.get_log("plain", 0).config.message_timestamp_type == "CreateTime"
    assert m.get_log("plain", 0).config.segment_bytes == 2000000
    m.shutdown()
    m = manager(tmp_path, "log.retention.hours=5")
    assert m.dynamic_broker_configs() == ({}, {"log.segment.bytes": "2000000"})
    assert m.get_log("plain", 0).config.segment_bytes == 2000000
    m.shutdown()


def test_non_dynamic_or_invalid_entries_in_the_file_are_ignored(tmp_path):
    doc = {"version": 1, "generation": 3,
           "broker": {"log.retention.ms": "60000", "node.id": "7", "log.retention.hours": "1"}, "default": {}}
    (tmp_path / DYNAMIC_BROKER_CONFIGS_FILE).write_text(json.dumps(doc))
    m = manager(tmp_path)
    assert m.dynamic_broker_configs() == ({"log.retention.ms": "60000"}, {})
    assert m.broker_config.node_id == 0 and m.broker_config.log_retention_ms_effective == 60000
    m.shutdown()
    doc["broker"] = {"log.retention.ms": "0"}  # invalid: the static config applies
    (tmp_path / DYNAMIC_BROKER_CONFIGS_FILE).write_text(json.dumps(doc))
    m = manager(tmp_path)
    assert m.dynamic_broker_configs() == ({}, {})
    assert m.broker_config.log_retention_ms_effective == 7 * 24 * 3600 * 1000
    # the next change starts from a higher generation than the file's
    m.set_dynamic_broker_configs(per_broker={"log.segment.bytes": "2000000"})
    assert json.loads((tmp_path / DYNAMIC_BROKER_CONFIGS_FILE).read_text())["generation"] > 3
    m.shutdown()


def test_producer_id_expiration_is_the_brokers_and_dynamic(tmp_path):
    """producer.id.expiration.ms (a broker config, not a topic one) reaches every log, at
    start and when changed dynamically; an idle producer is forgotten after it."""
    from protocol import records as R

    def batch(seq):
        return R.build_batch([(1_000_000, None, b"v")], producer_id=7, producer_epoch=0, base_sequence=seq)

    m = manager(tmp_path, "producer.id.expiration.ms=5000")
    m.create_topic("t", 2)
    assert {m.get_log("t", p).producer_id_expiration_ms for p in (0, 1)} == {5000}
    log = m.get_log("t", 0)
    log.append(batch(0))
    m.set_dynamic_broker_configs(default={"producer.id.expiration.ms": "100000"})
    assert {m.get_log("t", p).producer_id_expiration_ms for p in (0, 1)} == {100000}
    m.clock.advance(50_000)
    assert log.remove_expired_producers() == 0  # 5000 would have forgotten it
    m.set_dynamic_broker_configs(default={"producer.id.expiration.ms": "10000"})
    assert log.remove_expired_producers() == 1
    m.shutdown()
    m = manager(tmp_path, "producer.id.expiration.ms=5000")
    assert m.get_log("t", 1).producer_id_expiration_ms == 10000
    m.shutdown()
