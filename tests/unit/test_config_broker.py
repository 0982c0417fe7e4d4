"""BrokerConfig: defaults, load order, coercion/validation, sources, helpers."""

import logging

import pytest

from config import BrokerConfig, ConfigError, env_var_name, load_broker_config
from config.broker_config import BROKER_KEYS, IGNORED_KAFKA_PROPERTIES

LONG_MAX = 2**63 - 1


def load(overrides=(), env=None, file=None, **kw):
    return load_broker_config(file, list(overrides), env=env or {}, **kw)


def test_chronolog_defaults():
    cfg = load()
    assert cfg.listeners == "PLAINTEXT://127.0.0.1:9092"
    assert cfg.listener() == ("127.0.0.1", 9092)
    assert cfg.advertised_listener() == ("127.0.0.1", 9092)
    assert cfg.log_dirs == ["./data"]
    assert cfg.node_id == 0
    assert cfg.num_partitions == 1
    assert cfg.auto_create_topics_enable is True
    assert cfg.default_replication_factor == 1
    assert cfg.metrics_port == 9404


def test_kafka_defaults():
    cfg = BrokerConfig()
    assert cfg.socket_request_max_bytes == 104857600
    assert cfg.message_max_bytes == 1048588
    assert cfg.log_segment_bytes == 1073741824
    assert cfg.log_roll_ms is None and cfg.log_roll_hours == 168
    assert cfg.log_roll_ms_effective == 7 * 24 * 3600 * 1000
    assert cfg.log_roll_jitter_ms is None and cfg.log_roll_jitter_hours == 0
    assert cfg.log_index_size_max_bytes == 10485760
    assert cfg.log_index_interval_bytes == 4096
    assert cfg.log_message_timestamp_type == "CreateTime"
    assert cfg.log_message_timestamp_difference_max_ms == LONG_MAX
    assert cfg.log_message_timestamp_before_max_ms == LONG_MAX
    assert cfg.log_message_timestamp_after_max_ms == LONG_MAX
    assert cfg.log_retention_ms is None and cfg.log_retention_minutes is None and cfg.log_retention_hours == 168
    assert cfg.log_retention_ms_effective == 604800000
    assert cfg.log_retention_bytes == -1
    assert cfg.log_retention_check_interval_ms == 300000
    assert cfg.log_segment_delete_delay_ms == 60000
    assert cfg.log_flush_interval_messages == LONG_MAX
    assert cfg.log_flush_interval_ms is None
    assert cfg.log_flush_scheduler_interval_ms == LONG_MAX
    assert cfg.log_cleanup_policy == ["delete"]
    assert cfg.compression_type == "producer"
    assert cfg.offsets_retention_minutes == 7 * 24 * 60
    assert cfg.group_initial_rebalance_delay_ms == 3000
    assert cfg.group_min_session_timeout_ms == 6000
    assert cfg.group_max_session_timeout_ms == 1800000
    assert cfg.advertised_listeners is None


def test_every_key_has_a_field():
    fields = BrokerConfig.model_fields
    for k in BROKER_KEYS:
        assert k.attr in fields
        assert fields[k.attr].alias == k.name
    assert len(fields) == len(BROKER_KEYS) + 1  # + listener_props (listener.name.<l>.<property>)


PROPS = r"""
# Chronolog test server.properties
! bang comment
node.id = 7
listeners=PLAINTEXT://localhost:0
log.dirs : /tmp/a,\
           /tmp/b
log.segment.bytes 1048576
log.retention.hours=24
compression.type=gzip
log.message.timestamp.type=LogAppendTime
zookeeper.connect=localhost:2181
some.unknown.prop=x\u0041
"""


def test_load_from_file(tmp_path, caplog):
    f = tmp_path / "server.properties"
    f.write_text(PROPS)
    with caplog.at_level(logging.INFO, logger="chronolog.config"):
        cfg = load(file=str(f))
    assert cfg.node_id == 7
    assert cfg.listener() == ("localhost", 0)
    assert cfg.log_dirs == ["/tmp/a", "/tmp/b"]
    assert cfg.log_segment_bytes == 1048576
    assert cfg.log_retention_ms_effective == 24 * 3600 * 1000
    assert cfg.compression_type == "gzip"
    assert cfg.log_message_timestamp_type == "LogAppendTime"
    assert cfg.source_of("log.segment.bytes") == "file"
    assert cfg.source_of("num.partitions") == "default"
    assert cfg.unknown_properties == {"some.unknown.prop": ("xA", "file")}
    assert cfg.ignored_properties == {"zookeeper.connect": ("localhost:2181", "file")}
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "some.unknown.prop" in warnings[0].getMessage()
    assert any("zookeeper.connect" in r.getMessage() for r in caplog.records if r.levelno == logging.INFO)


def test_precedence_file_env_override(tmp_path):
    f = tmp_path / "s.properties"
    f.write_text("log.segment.bytes=1000\nnum.partitions=2\nlog.index.interval.bytes=10\nmessage.max.bytes=5\n")
    env = {
        "CHRONOLOG_LOG_SEGMENT_BYTES": "2000",
        "CHRONOLOG_NUM_PARTITIONS": "3",
        "CHRONOLOG_AUTO_CREATE_TOPICS_ENABLE": "false",
        "PATH": "/usr/bin",
        "LOG_SEGMENT_BYTES": "1",  # no prefix: ignored
    }
    cfg = load(["log.segment.bytes=3000", "message.max.bytes=6"], env=env, file=str(f))
    assert cfg.log_segment_bytes == 3000
    assert cfg.num_partitions == 3
    assert cfg.log_index_interval_bytes == 10
    assert cfg.message_max_bytes == 6
    assert cfg.auto_create_topics_enable is False
    assert cfg.source_of("log.segment.bytes") == "override"
    assert cfg.source_of("num.partitions") == "env"
    assert cfg.source_of("log.index.interval.bytes") == "file"
    assert cfg.source_of("message.max.bytes") == "override"
    assert cfg.source_of("auto.create.topics.enable") == "env"
    assert cfg.source_of("log.retention.hours") == "default"
    assert cfg.explicit_properties() == {
        "log.segment.bytes",
        "num.partitions",
        "log.index.interval.bytes",
        "message.max.bytes",
        "auto.create.topics.enable",
    }
    assert cfg.unknown_properties == {}


def test_env_var_names_and_unknown_env():
    assert env_var_name("log.segment.bytes") == "CHRONOLOG_LOG_SEGMENT_BYTES"
    assert env_var_name("log.message.timestamp.before.max.ms") == "CHRONOLOG_LOG_MESSAGE_TIMESTAMP_BEFORE_MAX_MS"
    cfg = load(env={"CHRONOLOG_NOT_A_THING": "1", "CHRONOLOG_METRICS_PORT": "0"})
    assert cfg.metrics_port == 0
    assert cfg.unknown_properties == {"CHRONOLOG_NOT_A_THING": ("1", "env")}


def test_env_default_is_os_environ(monkeypatch):
    monkeypatch.setenv("CHRONOLOG_NUM_PARTITIONS", "4")
    assert load_broker_config(None, []).num_partitions == 4


def test_override_value_may_contain_equals():
    cfg = load(["advertised.listeners=PLAINTEXT://h:1", "listeners = PLAINTEXT://:0"])
    assert cfg.advertised_listener() == ("h", 1)
    assert cfg.listeners == "PLAINTEXT://:0"


@pytest.mark.parametrize("bad", ["log.segment.bytes", "=5", ""])
def test_malformed_override(bad):
    with pytest.raises(ConfigError) as ei:
        load([bad])
    assert "key=value" in str(ei.value)


def test_missing_file():
    with pytest.raises(ConfigError) as ei:
        load(file="/nonexistent/server.properties")
    assert "/nonexistent/server.properties" in str(ei.value)


@pytest.mark.parametrize(
    "prop, value, rule",
    [
        ("log.segment.bytes", "abc", "Not a number of type INT"),
        ("log.segment.bytes", "13", "Value must be at least 14"),
        ("log.segment.bytes", "4294967296", "Not a number of type INT"),
        ("log.index.interval.bytes", "-1", "Value must be at least 0"),
        ("log.index.size.max.bytes", "3", "Value must be at least 4"),
        ("log.message.timestamp.type", "NoTime", "String must be one of: CreateTime, LogAppendTime"),
        ("log.message.timestamp.type", "createtime", "String must be one of: CreateTime, LogAppendTime"),
        ("log.message.timestamp.difference.max.ms", "-1", "Value must be at least 0"),
        ("log.message.timestamp.before.max.ms", "-5", "Value must be at least 0"),
        ("log.message.timestamp.after.max.ms", "x", "Not a number of type LONG"),
        ("log.cleanup.policy", "delete,shred", "String must be one of: compact, delete"),
        ("compression.type", "brotli", "String must be one of: uncompressed, zstd, lz4, snappy, gzip, producer"),
        ("compression.gzip.level", "0", "Value must be between 1 and 9 or equal to -1"),
        ("compression.lz4.level", "18", "Value must be no more than 17"),
        ("num.partitions", "0", "Value must be at least 1"),
        ("auto.create.topics.enable", "yes", "Expected value to be either true or false"),
        ("log.roll.hours", "0", "Value must be at least 1"),
        ("log.retention.check.interval.ms", "0", "Value must be at least 1"),
        ("log.flush.interval.messages", "0", "Value must be at least 1"),
        ("socket.request.max.bytes", "0", "Value must be at least 1"),
        ("message.max.bytes", "-1", "Value must be at least 0"),
        ("log.cleaner.min.cleanable.ratio", "1.5", "Value must be no more than 1"),
        ("offsets.retention.minutes", "0", "Value must be at least 1"),
        ("metrics.port", "70000", "Value must be no more than 65535"),
        ("node.id", "-1", "Value must be at least 0"),
        ("log.dirs", " , ", "At least one log directory must be defined via log.dirs or log.dir."),
    ],
)
def test_invalid_values(prop, value, rule):
    with pytest.raises(ConfigError) as ei:
        load([f"{prop}={value}"])
    e = ei.value
    assert e.name == prop and e.rule == rule
    msg = str(e)
    assert "\n" not in msg
    assert prop in msg and rule in msg


def test_invalid_value_from_env_and_file(tmp_path):
    with pytest.raises(ConfigError, match="CHRONOLOG|log.segment.bytes"):
        load(env={"CHRONOLOG_LOG_SEGMENT_BYTES": "lots"})
    f = tmp_path / "s.properties"
    f.write_text("log.index.size.max.bytes=1\n")
    with pytest.raises(ConfigError, match="log.index.size.max.bytes"):
        load(file=str(f))


def test_boundaries_accepted_and_trimmed():
    cfg = load(
        [
            "log.segment.bytes= 14 ",
            "log.index.interval.bytes=0",
            "log.index.size.max.bytes=4",
            "log.message.timestamp.before.max.ms=0",
            "auto.create.topics.enable=FALSE",
            "log.cleanup.policy=compact , delete",
            "compression.gzip.level=-1",
        ]
    )
    assert cfg.log_segment_bytes == 14
    assert cfg.log_index_interval_bytes == 0
    assert cfg.log_index_size_max_bytes == 4
    assert cfg.log_message_timestamp_before_max_ms == 0
    assert cfg.auto_create_topics_enable is False
    assert cfg.log_cleanup_policy == ["compact", "delete"]


def test_retention_precedence():
    assert load(["log.retention.hours=1"]).log_retention_ms_effective == 3600000
    assert load(["log.retention.hours=1", "log.retention.minutes=2"]).log_retention_ms_effective == 120000
    cfg = load(["log.retention.hours=1", "log.retention.minutes=2", "log.retention.ms=5"])
    assert cfg.log_retention_ms_effective == 5
    assert load(["log.retention.ms=-1"]).log_retention_ms_effective == -1
    assert load(["log.retention.hours=-1"]).log_retention_ms_effective == -1
    assert load(["log.retention.minutes=-7"]).log_retention_ms_effective == -1
    with pytest.raises(ConfigError, match="log.retention.ms must be unlimited"):
        load(["log.retention.ms=0"])
    with pytest.raises(ConfigError, match="log.retention.ms must be unlimited"):
        load(["log.retention.hours=0"])


def test_roll_precedence():
    assert load(["log.roll.hours=2"]).log_roll_ms_effective == 7200000
    assert load(["log.roll.hours=2", "log.roll.ms=1000"]).log_roll_ms_effective == 1000
    assert load(["log.roll.jitter.hours=1"]).log_roll_jitter_ms_effective == 3600000
    assert load(["log.roll.jitter.hours=1", "log.roll.jitter.ms=5"]).log_roll_jitter_ms_effective == 5
    with pytest.raises(ConfigError, match="log.roll.ms must be greater than or equal to 1"):
        load(["log.roll.ms=0"])
    with pytest.raises(ConfigError, match="log.roll.jitter.ms must be greater than or equal to 0"):
        load(["log.roll.jitter.ms=-1"])


def test_flush_ms_effective():
    assert load().log_flush_interval_ms_effective == LONG_MAX
    assert load(["log.flush.scheduler.interval.ms=500"]).log_flush_interval_ms_effective == 500
    assert load(["log.flush.scheduler.interval.ms=500", "log.flush.interval.ms=9"]).log_flush_interval_ms_effective == 9


def test_timestamp_effective_broker_level():
    cfg = load(["log.message.timestamp.difference.max.ms=1000"])
    assert cfg.log_message_timestamp_before_max_ms_effective == 1000
    assert cfg.log_message_timestamp_after_max_ms_effective == 1000
    cfg = load(["log.message.timestamp.difference.max.ms=1000", "log.message.timestamp.after.max.ms=10"])
    assert cfg.log_message_timestamp_before_max_ms_effective == 1000
    assert cfg.log_message_timestamp_after_max_ms_effective == 10


def test_log_dir_fallback():
    cfg = load(["log.dir=/x"])
    assert cfg.log_dirs == ["/x"]
    assert cfg.source_of("log.dirs") == "override"
    assert load(["log.dir=/x", "log.dirs=/y,/z"]).log_dirs == ["/y", "/z"]
    assert load(["log.dirs=/y,,/z,"]).log_dirs == ["/y", "/z"]


def test_broker_id_and_node_id():
    assert load(["broker.id=5"]).node_id == 5
    assert load(["broker.id=5", "node.id=5"]).node_id == 5
    with pytest.raises(ConfigError, match="node.id"):
        load(["broker.id=5", "node.id=6"])


@pytest.mark.parametrize(
    "listeners, expected",
    [
        ("PLAINTEXT://127.0.0.1:0", ("127.0.0.1", 0)),
        ("PLAINTEXT://localhost:19092", ("localhost", 19092)),
        ("PLAINTEXT://:9092", ("0.0.0.0", 9092)),
        ("PLAINTEXT://0.0.0.0:9092", ("0.0.0.0", 9092)),
        ("PLAINTEXT://[::1]:9093", ("::1", 9093)),
        ("plaintext://h:1", ("h", 1)),
        ("SSL://h:1,PLAINTEXT://p:2", ("h", 1)),  # the first listener
    ],
)
def test_listener_parsing(listeners, expected):
    assert load([f"listeners={listeners}"]).listener() == expected


@pytest.mark.parametrize("bad", ["localhost:9092", "PLAINTEXT://h", "PLAINTEXT://h:99999", "PLAINTEXT://a:1,PLAINTEXT://b:2",
                                 "PLAINTEXT://a:1,SSL://b:1", ""])
def test_listener_errors(bad):
    with pytest.raises(ConfigError) as ei:
        load([f"listeners={bad}"])
    assert ei.value.name == "listeners"


def test_listener_needs_a_security_protocol():
    with pytest.raises(ConfigError, match="No security protocol defined for listener EXTERNAL") as ei:
        load(["listeners=EXTERNAL://h:1"])
    assert ei.value.name == "listener.security.protocol.map"
    with pytest.raises(ConfigError, match="LISTENER_NAME:PROTOCOL"):
        load(["listener.security.protocol.map=A:TLS"])
    with pytest.raises(ConfigError, match="subset") as ei:
        load(["listeners=PLAINTEXT://h:1", "advertised.listeners=SSL://h:2"])
    assert ei.value.name == "advertised.listeners"


def test_listener_specs_and_per_listener_values():
    cfg = load([
        "listeners=INTERNAL://127.0.0.1:0,EXTERNAL://:9093",
        "listener.security.protocol.map=INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL",
        "advertised.listeners=EXTERNAL://kafka.example:19093",
        "sasl.enabled.mechanisms=PLAIN",
        "listener.name.external.sasl.enabled.mechanisms=SCRAM-SHA-512",
        "listener.name.external.plain.sasl.jaas.config=x required;",
        "listener.name.external.ssl.key.password=secret",
    ])
    internal, external = cfg.listener_specs()
    assert (internal.name, internal.protocol, internal.host, internal.port) == ("INTERNAL", "PLAINTEXT", "127.0.0.1", 0)
    assert (internal.advertised_host, internal.advertised_port) == ("127.0.0.1", None)
    assert (external.name, external.protocol, external.host, external.port) == ("EXTERNAL", "SASL_SSL", "0.0.0.0", 9093)
    assert (external.advertised_host, external.advertised_port) == ("kafka.example", 19093)
    assert cfg.listener_value("EXTERNAL", "sasl.enabled.mechanisms") == ["SCRAM-SHA-512"]
    assert cfg.listener_value("INTERNAL", "sasl.enabled.mechanisms") == ["PLAIN"]
    assert cfg.listener_value("external", "plain.sasl.jaas.config") == "x required;"
    assert cfg.listener_value("INTERNAL", "plain.sasl.jaas.config") is None
    assert "listener.name.external.ssl.key.password" not in cfg.unknown_properties
    with pytest.raises(ConfigError, match="not supported"):
        load(["listener.name.external.sasl.enabled.mechanisms=GSSAPI"])


def test_password_values_are_never_shown():
    from config.describe import BrokerLayers, broker_entries

    cfg = load(["ssl.key.password=hunter2"])
    entry = next(e for e in broker_entries(cfg, BrokerLayers(cfg), True, include_synonyms=True)
                 if e.name == "ssl.key.password")
    assert entry.is_sensitive and entry.value is None
    assert all(s.value is None for s in entry.synonyms)


def test_advertised_listener():
    cfg = load(["listeners=PLAINTEXT://127.0.0.1:0", "advertised.listeners=PLAINTEXT://broker.example:9092"])
    assert cfg.listener() == ("127.0.0.1", 0)
    assert cfg.advertised_listener() == ("broker.example", 9092)
    # port 0 is kept: the server advertises the port it actually bound
    assert load(["listeners=PLAINTEXT://127.0.0.1:0"]).advertised_listener() == ("127.0.0.1", 0)
    host, port = load(["listeners=PLAINTEXT://0.0.0.0:9092"]).advertised_listener()
    assert host not in ("", "0.0.0.0") and port == 9092
    with pytest.raises(ConfigError, match="0.0.0.0"):
        load(["advertised.listeners=PLAINTEXT://0.0.0.0:9092"])


def test_topic_synonym():
    s = BrokerConfig.topic_synonym
    assert s("segment.bytes") == "log.segment.bytes"
    assert s("segment.ms") == "log.roll.ms"
    assert s("segment.jitter.ms") == "log.roll.jitter.ms"
    assert s("segment.index.bytes") == "log.index.size.max.bytes"
    assert s("index.interval.bytes") == "log.index.interval.bytes"
    assert s("retention.ms") == "log.retention.ms"
    assert s("retention.bytes") == "log.retention.bytes"
    assert s("message.timestamp.type") == "log.message.timestamp.type"
    assert s("message.timestamp.difference.max.ms") == "log.message.timestamp.difference.max.ms"
    assert s("max.message.time.difference.ms") == "log.message.timestamp.difference.max.ms"
    assert s("message.timestamp.before.max.ms") == "log.message.timestamp.before.max.ms"
    assert s("max.message.bytes") == "message.max.bytes"
    assert s("flush.messages") == "log.flush.interval.messages"
    assert s("flush.ms") == "log.flush.interval.ms"
    assert s("file.delete.delay.ms") == "log.segment.delete.delay.ms"
    assert s("cleanup.policy") == "log.cleanup.policy"
    assert s("compression.type") == "compression.type"
    assert s("min.insync.replicas") == "min.insync.replicas"
    assert s("delete.retention.ms") == "log.cleaner.delete.retention.ms"
    assert s("preallocate") == "log.preallocate"
    assert s("remote.storage.enable") is None
    assert s("no.such") is None
    # every synonym is a property BrokerConfig knows
    from config.topic_config import ALL_TOPIC_CONFIG_SYNONYMS

    names = {k.name for k in BROKER_KEYS}
    for syns in ALL_TOPIC_CONFIG_SYNONYMS.values():
        assert set(syns) <= names


def test_direct_construction():
    cfg = BrokerConfig(log_dirs=["/d"], listeners="PLAINTEXT://127.0.0.1:0", log_segment_bytes=1024)
    assert cfg.log_dirs == ["/d"] and cfg.listener() == ("127.0.0.1", 0)
    assert cfg.source_of("log.segment.bytes") == "override"
    assert cfg.source_of("num.partitions") == "default"
    cfg = BrokerConfig(**{"log.dirs": "/a,/b", "log.segment.bytes": "2048"})
    assert cfg.log_dirs == ["/a", "/b"] and cfg.log_segment_bytes == 2048
    with pytest.raises(ConfigError):
        BrokerConfig(log_segment_bytes=1)
    with pytest.raises(ConfigError):
        BrokerConfig(no_such_thing=1)
    copy = cfg.model_copy(update={"num_partitions": 3})
    assert copy.num_partitions == 3 and copy.log_segment_bytes == 2048


def test_describe_lists_every_property_with_source():
    cfg = load(["log.segment.bytes=100"], env={"CHRONOLOG_NUM_PARTITIONS": "2"})
    rows = {name: (value, source) for name, value, source in cfg.describe()}
    assert set(rows) == {k.name for k in BROKER_KEYS}
    assert rows["log.segment.bytes"] == ("100", "override")
    assert rows["num.partitions"] == ("2", "env")
    assert rows["log.dirs"] == ("./data", "default")
    assert rows["log.roll.ms"] == (None, "default")
    assert rows["auto.create.topics.enable"] == ("true", "default")
    assert rows["log.cleaner.min.cleanable.ratio"] == ("0.5", "default")
    assert [r[0] for r in cfg.describe()] == sorted(rows)


def test_ignored_and_unknown_do_not_collide():
    assert not IGNORED_KAFKA_PROPERTIES & {k.name for k in BROKER_KEYS}
    cfg = load(["process.roles=broker,controller", "foo.bar=1"])
    assert "process.roles" in cfg.ignored_properties
    assert cfg.unknown_properties == {"foo.bar": ("1", "override")}
