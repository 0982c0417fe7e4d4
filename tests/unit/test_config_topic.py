"""TopicConfig: Kafka precedence, before/after/difference resolution, describe()."""

import pytest

from config import BrokerConfig, ConfigEntry, ConfigError, TopicConfig, load_broker_config
from config.topic_config import TOPIC_CONFIG_NAMES, TOPIC_KEYS

LONG_MAX = 2**63 - 1


def broker(*overrides, env=None):
    return load_broker_config(None, list(overrides), env=env or {}, warn=False)


def test_topic_names_are_kafkas_logconfig_names():
    expected = {
        "segment.bytes", "segment.ms", "segment.jitter.ms", "segment.index.bytes", "flush.messages", "flush.ms",
        "retention.bytes", "retention.ms", "max.message.bytes", "index.interval.bytes", "delete.retention.ms",
        "min.compaction.lag.ms", "max.compaction.lag.ms", "file.delete.delay.ms", "min.cleanable.dirty.ratio",
        "cleanup.policy", "unclean.leader.election.enable", "min.insync.replicas", "compression.type",
        "compression.gzip.level", "compression.lz4.level", "compression.zstd.level", "preallocate",
        "message.format.version", "message.timestamp.type", "message.timestamp.difference.max.ms",
        "message.timestamp.before.max.ms", "message.timestamp.after.max.ms",
        "leader.replication.throttled.replicas", "follower.replication.throttled.replicas",
        "message.downconversion.enable", "remote.storage.enable", "local.retention.ms", "local.retention.bytes",
        "remote.log.copy.disable", "remote.log.delete.on.disable",
    }  # fmt: skip
    # KIP-280 (accepted, never shipped in Kafka) adds two names of our own
    assert set(TOPIC_CONFIG_NAMES) == expected | {"compaction.strategy", "compaction.strategy.header"}
    for k in TOPIC_KEYS:
        assert k.attr in TopicConfig.model_fields


def test_defaults_from_default_broker_equal_kafka_defaults():
    t = TopicConfig.from_broker(broker(), {})
    d = TopicConfig()
    assert t.model_dump() == d.model_dump()
    assert t.segment_bytes == 1073741824
    assert t.segment_ms == 604800000
    assert t.segment_jitter_ms == 0
    assert t.segment_index_bytes == 10485760
    assert t.index_interval_bytes == 4096
    assert t.message_timestamp_type == "CreateTime"
    assert t.message_timestamp_before_max_ms == LONG_MAX
    assert t.message_timestamp_after_max_ms == LONG_MAX
    assert t.max_message_bytes == 1048588
    assert t.retention_ms == 604800000
    assert t.retention_bytes == -1
    assert t.file_delete_delay_ms == 60000
    assert t.flush_messages == LONG_MAX
    assert t.flush_ms == LONG_MAX
    assert t.cleanup_policy == ["delete"] and t.delete and not t.compact
    assert t.compression_type == "producer"
    assert t.min_insync_replicas == 1
    assert t.delete_retention_ms == 86400000
    assert t.min_compaction_lag_ms == 0
    assert t.preallocate is False
    assert t.message_downconversion_enable is True
    assert t.unclean_leader_election_enable is False


def test_broker_synonyms_flow_into_topic_defaults():
    b = broker(
        "log.segment.bytes=1000",
        "log.roll.hours=2",
        "log.roll.jitter.ms=7",
        "log.index.size.max.bytes=4096",
        "log.index.interval.bytes=100",
        "log.retention.minutes=3",
        "log.retention.bytes=5000",
        "message.max.bytes=2000",
        "log.flush.interval.messages=10",
        "log.flush.scheduler.interval.ms=250",
        "log.segment.delete.delay.ms=5",
        "log.cleanup.policy=compact,delete",
        "compression.type=lz4",
        "min.insync.replicas=2",
        "log.message.timestamp.type=LogAppendTime",
        "log.preallocate=true",
        "log.cleaner.delete.retention.ms=11",
        "log.message.downconversion.enable=false",
    )
    t = TopicConfig.from_broker(b, {})
    assert t.segment_bytes == 1000
    assert t.segment_ms == 2 * 3600 * 1000
    assert t.segment_jitter_ms == 7
    assert t.segment_index_bytes == 4096
    assert t.index_interval_bytes == 100
    assert t.retention_ms == 180000
    assert t.retention_bytes == 5000
    assert t.max_message_bytes == 2000
    assert t.flush_messages == 10
    assert t.flush_ms == 250
    assert t.file_delete_delay_ms == 5
    assert t.cleanup_policy == ["compact", "delete"] and t.compact and t.delete
    assert t.compression_type == "lz4"
    assert t.min_insync_replicas == 2
    assert t.message_timestamp_type == "LogAppendTime" and t.is_log_append_time
    assert t.preallocate is True
    assert t.delete_retention_ms == 11
    assert t.message_downconversion_enable is False
    assert b.topic_config().segment_bytes == 1000


def test_topic_override_wins():
    b = broker("log.segment.bytes=1000", "log.retention.ms=50", "log.flush.interval.ms=5")
    t = TopicConfig.from_broker(
        b, {"segment.bytes": "2000", "retention.ms": "-1", "flush.ms": "7", "message.timestamp.type": "LogAppendTime"}
    )
    assert t.segment_bytes == 2000
    assert t.retention_ms == -1
    assert t.flush_ms == 7
    assert t.message_timestamp_type == "LogAppendTime"
    assert t.overrides == {"segment.bytes": "2000", "retention.ms": "-1", "flush.ms": "7", "message.timestamp.type": "LogAppendTime"}


def test_flush_ms_prefers_flush_interval_ms():
    assert TopicConfig.from_broker(broker("log.flush.scheduler.interval.ms=9", "log.flush.interval.ms=3"), {}).flush_ms == 3


@pytest.mark.parametrize(
    "name, value, rule",
    [
        ("segment.bytes", "13", "Value must be at least 14"),
        ("segment.bytes", "big", "Not a number of type INT"),
        ("segment.ms", "0", "Value must be at least 1"),
        ("segment.jitter.ms", "-1", "Value must be at least 0"),
        ("segment.index.bytes", "3", "Value must be at least 4"),
        ("index.interval.bytes", "-1", "Value must be at least 0"),
        ("retention.ms", "-2", "Value must be at least -1"),
        ("message.timestamp.type", "Now", "String must be one of: CreateTime, LogAppendTime"),
        ("message.timestamp.difference.max.ms", "-1", "Value must be at least 0"),
        ("max.message.time.difference.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.before.max.ms", "-1", "Value must be at least 0"),
        ("message.timestamp.after.max.ms", "soon", "Not a number of type LONG"),
        ("max.message.bytes", "-1", "Value must be at least 0"),
        ("cleanup.policy", "keep", "String must be one of: compact, delete"),
        ("compression.type", "none", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("min.insync.replicas", "0", "Value must be at least 1"),
        ("preallocate", "maybe", "Expected value to be either true or false"),
        ("min.cleanable.dirty.ratio", "2", "Value must be no more than 1"),
        ("message.format.version", "banana", "Version banana is not a valid version"),
    ],
)
def test_invalid_topic_values(name, value, rule):
    with pytest.raises(ConfigError) as ei:
        TopicConfig.from_broker(broker(), {name: value})
    assert ei.value.rule == rule
    s = str(ei.value)
    assert "\n" not in s and value in s


def test_unknown_topic_property():
    with pytest.raises(ConfigError) as ei:
        TopicConfig.from_broker(broker(), {"segment.byte": "100"})
    assert ei.value.name == "segment.byte"
    assert "Unknown topic config name" in str(ei.value)
    with pytest.raises(ConfigError):  # broker names are not topic names
        TopicConfig.from_broker(broker(), {"log.segment.bytes": "100"})


def test_compaction_lag_conflict():
    with pytest.raises(ConfigError, match="min.compaction.lag.ms"):
        TopicConfig.from_broker(broker(), {"min.compaction.lag.ms": "10", "max.compaction.lag.ms": "5"})


# ---------------------------------------------------------------------- timestamps


def ts(t):
    return (t.message_timestamp_before_max_ms, t.message_timestamp_after_max_ms)


def test_ts_nothing_set():
    assert ts(TopicConfig.from_broker(broker(), {})) == (LONG_MAX, LONG_MAX)


def test_ts_topic_difference_fills_before_and_after():
    t = TopicConfig.from_broker(broker(), {"message.timestamp.difference.max.ms": "1000"})
    assert t.message_timestamp_difference_max_ms == 1000
    assert ts(t) == (1000, 1000)


def test_ts_explicit_before_wins_over_difference():
    t = TopicConfig.from_broker(
        broker(), {"message.timestamp.difference.max.ms": "1000", "message.timestamp.before.max.ms": "500"}
    )
    assert ts(t) == (500, 1000)
    t = TopicConfig.from_broker(broker(), {"message.timestamp.after.max.ms": "0"})
    assert ts(t) == (LONG_MAX, 0)


def test_ts_kip32_alias():
    t = TopicConfig.from_broker(broker(), {"max.message.time.difference.ms": "1000"})
    assert t.message_timestamp_difference_max_ms == 1000
    assert ts(t) == (1000, 1000)
    assert t.get("max.message.time.difference.ms") == 1000
    entries = {e.name: e for e in t.describe()}
    assert "max.message.time.difference.ms" not in entries
    assert entries["message.timestamp.difference.max.ms"].source == "TOPIC_CONFIG"
    # same value under both names is fine, different values conflict
    TopicConfig.from_broker(broker(), {"max.message.time.difference.ms": "5", "message.timestamp.difference.max.ms": "5"})
    with pytest.raises(ConfigError, match="conflicts"):
        TopicConfig.from_broker(broker(), {"max.message.time.difference.ms": "5", "message.timestamp.difference.max.ms": "6"})


def test_ts_broker_difference_resolved_at_broker_level():
    # KafkaConfig resolves log.message.timestamp.before/after against the broker's
    # difference before handing them to LogConfig, so a topic-level difference override
    # no longer reaches before/after (Kafka's behaviour, reproduced on purpose).
    b = broker("log.message.timestamp.difference.max.ms=2000")
    assert ts(TopicConfig.from_broker(b, {})) == (2000, 2000)
    t = TopicConfig.from_broker(b, {"message.timestamp.difference.max.ms": "5000"})
    assert t.message_timestamp_difference_max_ms == 5000
    assert ts(t) == (2000, 2000)
    t = TopicConfig.from_broker(b, {"message.timestamp.after.max.ms": "10"})
    assert ts(t) == (2000, 10)


def test_ts_broker_before_with_topic_difference():
    b = broker("log.message.timestamp.before.max.ms=100")
    t = TopicConfig.from_broker(b, {"message.timestamp.difference.max.ms": "5000"})
    assert ts(t) == (100, 5000)


def test_ts_describe_shows_configured_not_resolved():
    t = TopicConfig.from_broker(broker(), {"message.timestamp.difference.max.ms": "1000"})
    entries = {e.name: e for e in t.describe()}
    assert entries["message.timestamp.difference.max.ms"].value == "1000"
    assert entries["message.timestamp.before.max.ms"].value == str(LONG_MAX)
    assert entries["message.timestamp.before.max.ms"].source == "DEFAULT_CONFIG"


# ---------------------------------------------------------------------- describe


def test_describe_sources():
    b = broker("log.segment.bytes=1000", "log.roll.hours=3", "log.retention.minutes=5", env={"CHRONOLOG_MESSAGE_MAX_BYTES": "999"})
    overrides = {"retention.bytes": "12345", "segment.bytes": "4096"}
    t = TopicConfig.from_broker(b, overrides)
    entries = t.describe(overrides)
    assert all(isinstance(e, ConfigEntry) and len(e) == 5 for e in entries)
    assert [e.name for e in entries] == sorted(TOPIC_CONFIG_NAMES)
    by = {e.name: e for e in entries}
    assert by["segment.bytes"] == ("segment.bytes", "4096", "TOPIC_CONFIG", False, False)
    assert by["retention.bytes"][1:3] == ("12345", "TOPIC_CONFIG")
    assert by["segment.ms"][1:3] == (str(3 * 3600 * 1000), "STATIC_BROKER_CONFIG")
    assert by["retention.ms"][1:3] == ("300000", "STATIC_BROKER_CONFIG")
    assert by["max.message.bytes"][1:3] == ("999", "STATIC_BROKER_CONFIG")
    assert by["segment.index.bytes"][1:3] == ("10485760", "DEFAULT_CONFIG")
    assert by["remote.storage.enable"][1:3] == ("false", "DEFAULT_CONFIG")
    assert by["cleanup.policy"][1:3] == ("delete", "DEFAULT_CONFIG")
    assert by["min.cleanable.dirty.ratio"].value == "0.5"
    assert by["leader.replication.throttled.replicas"].value == ""
    assert all(e.is_sensitive is False and e.read_only is False for e in entries)
    # default argument: the overrides the config was built with
    assert t.describe() == entries
    # explicit overrides argument decides TOPIC_CONFIG
    assert {e.name: e.source for e in t.describe({})}["segment.bytes"] == "STATIC_BROKER_CONFIG"


def test_describe_without_broker():
    t = TopicConfig.from_broker(None, {"segment.ms": "100"})
    by = {e.name: e for e in t.describe()}
    assert by["segment.ms"].source == "TOPIC_CONFIG" and by["segment.ms"].value == "100"
    assert by["segment.bytes"].source == "DEFAULT_CONFIG"


def test_describe_directly_constructed():
    t = TopicConfig(segment_bytes=1024)
    by = {e.name: e for e in t.describe({})}
    assert by["segment.bytes"].value == "1024"


def test_direct_construction_validates():
    assert TopicConfig(**{"segment.bytes": "2048"}).segment_bytes == 2048
    with pytest.raises(ConfigError):
        TopicConfig(segment_bytes=3)
    with pytest.raises(ConfigError):
        TopicConfig(nonsense=1)


def test_validate_overrides():
    assert TopicConfig.validate_overrides({"max.message.time.difference.ms": "5", "retention.ms": 10}) == {
        "message.timestamp.difference.max.ms": "5",
        "retention.ms": "10",
    }
    with pytest.raises(ConfigError):
        TopicConfig.validate_overrides({"retention.ms": "x"})


def test_non_string_override_values():
    t = TopicConfig.from_broker(broker(), {"retention.ms": 10, "preallocate": True, "cleanup.policy": ["compact"]})
    assert t.retention_ms == 10 and t.preallocate is True and t.cleanup_policy == ["compact"]
    assert t.overrides == {"retention.ms": "10", "preallocate": "true", "cleanup.policy": "compact"}


def test_broker_config_object_is_not_required_to_be_loaded():
    b = BrokerConfig(log_segment_bytes=4096)
    t = TopicConfig.from_broker(b, {})
    assert t.segment_bytes == 4096
    assert {e.name: e.source for e in t.describe()}["segment.bytes"] == "STATIC_BROKER_CONFIG"


@pytest.mark.parametrize("version", ["0.10.0.0", "0.10.0", "0.10.0-IV1", "0.8.2.2", "2.8.1", "3.0-IV1", "3.0", "3.9",
                                     "4.0-IV3"])
def test_message_format_version_accepts_what_kafka_accepts(version):
    """Kafka's MetadataVersion.fromVersionString: three parts of a 0.x version, two of a
    later one, must name a known version."""
    assert TopicConfig.from_broker(None, {"message.format.version": version}).message_format_version == version
    assert broker(f"log.message.format.version={version}", f"inter.broker.protocol.version={version}")


@pytest.mark.parametrize("version", ["0.10.9", "0.10", "3.0-IV9", "5.0", "abc", ""])
def test_message_format_version_refuses_what_kafka_refuses(version):
    with pytest.raises(ConfigError, match="is not a valid version"):
        TopicConfig.from_broker(None, {"message.format.version": version})
