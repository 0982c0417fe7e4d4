"""config.describe: DescribeConfigs sources and synonyms as Kafka's ConfigHelper computes
them, dynamic broker configs, incremental operations."""

import pytest

from config import ConfigError, load_broker_config
from config.describe import (
    APPEND,
    DEFAULT_CONFIG,
    DELETE,
    DYNAMIC_BROKER_CONFIG,
    DYNAMIC_BROKER_CONFIGS,
    DYNAMIC_DEFAULT_BROKER_CONFIG,
    SET,
    STATIC_BROKER_CONFIG,
    SUBTRACT,
    TOPIC_CONFIG,
    BrokerLayers,
    DynamicConfigError,
    apply_incremental,
    broker_entries,
    effective_broker_config,
    topic_entries,
    validate_dynamic_update,
)
from config.properties import ConfigType as T
from config.topic_config import TOPIC_CONFIG_NAMES, TopicConfig


def broker(*overrides):
    return load_broker_config(None, list(overrides), env={}, warn=False)


def entries(static, overrides=None, dyn_default=None, dyn_broker=None, synonyms=True):
    eff = effective_broker_config(static, dyn_default, dyn_broker)
    layers = BrokerLayers(static, dyn_default, dyn_broker)
    cfg = TopicConfig.from_broker(eff, overrides or {})
    return {e.name: e for e in topic_entries(cfg, overrides or {}, layers, include_synonyms=synonyms,
                                             include_documentation=True)}


def syn(e):
    return [(s.name, s.value, s.source) for s in e.synonyms]


def test_every_topic_property_with_defaults():
    es = entries(broker())
    assert sorted(es) == sorted(TOPIC_CONFIG_NAMES)
    e = es["segment.bytes"]
    assert (e.value, e.source, e.read_only, e.is_sensitive, e.config_type) == ("1073741824", DEFAULT_CONFIG, False, False, 3)
    assert syn(e) == [("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]
    # Kafka's dropWhile: log.retention.ms has no default, so the hours default is dropped
    assert es["retention.ms"].value == "604800000" and syn(es["retention.ms"]) == []
    assert es["cleanup.policy"].config_type == 7 and es["message.timestamp.type"].config_type == 2
    assert es["retention.ms"].documentation


def test_topic_override_first_then_static_then_default():
    es = entries(broker("log.message.timestamp.type=LogAppendTime", "log.retention.ms=1000"),
                 {"message.timestamp.type": "CreateTime"})
    e = es["message.timestamp.type"]
    assert e.value == "CreateTime" and e.source == TOPIC_CONFIG
    assert syn(e) == [("message.timestamp.type", "CreateTime", TOPIC_CONFIG),
                      ("log.message.timestamp.type", "LogAppendTime", STATIC_BROKER_CONFIG),
                      ("log.message.timestamp.type", "CreateTime", DEFAULT_CONFIG)]
    r = es["retention.ms"]
    assert r.value == "1000" and r.source == STATIC_BROKER_CONFIG
    assert syn(r) == [("log.retention.ms", "1000", STATIC_BROKER_CONFIG), ("log.retention.hours", "168", DEFAULT_CONFIG)]


def test_static_hours_alone_shows_default_as_kafka_does():
    es = entries(broker("log.retention.hours=5"))
    assert es["retention.ms"].value == str(5 * 3600 * 1000)
    assert es["retention.ms"].source == DEFAULT_CONFIG and syn(es["retention.ms"]) == []


def test_dynamic_layers_precedence():
    static = broker("log.segment.bytes=5000000")
    es = entries(static, dyn_default={"log.segment.bytes": "2000000"})
    assert es["segment.bytes"].value == "2000000" and es["segment.bytes"].source == DYNAMIC_DEFAULT_BROKER_CONFIG
    es = entries(static, dyn_default={"log.segment.bytes": "2000000"}, dyn_broker={"log.segment.bytes": "3000000"})
    e = es["segment.bytes"]
    assert e.value == "3000000" and e.source == DYNAMIC_BROKER_CONFIG
    assert syn(e) == [("log.segment.bytes", "3000000", DYNAMIC_BROKER_CONFIG),
                      ("log.segment.bytes", "2000000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                      ("log.segment.bytes", "5000000", STATIC_BROKER_CONFIG),
                      ("log.segment.bytes", "1073741824", DEFAULT_CONFIG)]
    # topic override still wins
    es = entries(static, {"segment.bytes": "100000"}, dyn_broker={"log.segment.bytes": "3000000"})
    assert es["segment.bytes"].value == "100000" and es["segment.bytes"].source == TOPIC_CONFIG


def test_dynamic_retention_ms_over_static_hours():
    static = broker("log.retention.hours=5")
    eff = effective_broker_config(static, None, {"log.retention.ms": "60000"})
    assert eff.log_retention_ms_effective == 60000
    assert TopicConfig.from_broker(eff, {}).retention_ms == 60000
    assert static.log_retention_ms_effective == 5 * 3600 * 1000  # static config untouched


def test_broker_entries_per_broker_and_cluster_default():
    static = broker("log.segment.bytes=5000000")
    layers = BrokerLayers(static, {"log.roll.ms": "60000"}, {"log.segment.bytes": "3000000"})
    eff = effective_broker_config(static, {"log.roll.ms": "60000"}, {"log.segment.bytes": "3000000"})
    es = {e.name: e for e in broker_entries(eff, layers, True, include_synonyms=True)}
    assert es["log.segment.bytes"].value == "3000000" and es["log.segment.bytes"].source == DYNAMIC_BROKER_CONFIG
    assert es["log.segment.bytes"].read_only is False
    assert es["node.id"].read_only is True and es["log.dirs"].read_only is True
    assert es["log.retention.hours"].read_only is True
    assert es["log.roll.ms"].source == DYNAMIC_DEFAULT_BROKER_CONFIG
    assert syn(es["log.roll.ms"]) == [("log.roll.ms", "60000", DYNAMIC_DEFAULT_BROKER_CONFIG),
                                      ("log.roll.hours", "168", DEFAULT_CONFIG)]
    cluster = broker_entries(eff, layers, False, include_synonyms=True)
    assert [(e.name, e.value, e.source, syn(e)) for e in cluster] == [
        ("log.roll.ms", "60000", DYNAMIC_DEFAULT_BROKER_CONFIG, [("log.roll.ms", "60000", DYNAMIC_DEFAULT_BROKER_CONFIG)])]
    only = broker_entries(eff, layers, True, keys=["log.segment.bytes"])
    assert [e.name for e in only] == ["log.segment.bytes"] and only[0].synonyms == []


def test_dynamic_names_are_kafkas_reconfigurable_log_configs():
    for n in ("log.retention.ms", "log.retention.bytes", "log.segment.bytes", "log.roll.ms",
              "log.message.timestamp.type", "log.message.timestamp.before.max.ms",
              "log.message.timestamp.after.max.ms", "log.message.timestamp.difference.max.ms",
              "log.cleanup.policy", "message.max.bytes", "max.connections",
              "max.connections.per.ip", "sasl.enabled.mechanisms", "ssl.client.auth", "producer.id.expiration.ms",
              "log.cleaner.threads", "num.io.threads", "sasl.kerberos.min.time.before.relogin"):
        assert n in DYNAMIC_BROKER_CONFIGS, n
    # Kafka's dynamic too, but Chronolog binds its listeners at start only; and
    # advertised.listeners, read-only since Kafka 4.0
    for n in ("listeners", "listener.security.protocol.map", "advertised.listeners"):
        assert n not in DYNAMIC_BROKER_CONFIGS, n
    for n in ("log.retention.hours", "log.retention.minutes", "log.roll.hours", "log.message.format.version",
              "node.id", "log.dirs", "listeners"):
        assert n not in DYNAMIC_BROKER_CONFIGS, n


def test_validate_dynamic_update():
    validate_dynamic_update({"log.retention.ms": "1000"})
    with pytest.raises(DynamicConfigError, match=r"Cannot update these configs dynamically: Set\(log.retention.hours\)"):
        validate_dynamic_update({"log.retention.hours": "1", "log.retention.ms": "5"})
    with pytest.raises(ConfigError, match="log.message.timestamp.type"):
        validate_dynamic_update({"log.message.timestamp.type": "Sometimes"})
    with pytest.raises(ConfigError):
        effective_broker_config(broker(), None, {"log.retention.ms": "0"})


def _types(name):
    return {"cleanup.policy": T.LIST, "retention.ms": T.LONG}.get(name)


def test_apply_incremental():
    cur = {"retention.ms": "5", "segment.ms": "7"}
    out = apply_incremental(cur, [("retention.ms", SET, "9"), ("segment.ms", DELETE, None),
                                  ("cleanup.policy", APPEND, "compact")], _types, lambda n: "delete")
    assert out == {"retention.ms": "9", "cleanup.policy": "delete,compact"}
    assert cur == {"retention.ms": "5", "segment.ms": "7"}  # input untouched
    out = apply_incremental(out, [("cleanup.policy", SUBTRACT, "delete"), ("cleanup.policy", APPEND, "compact")],
                            _types, lambda n: "x")
    assert out["cleanup.policy"] == "compact"
    with pytest.raises(ConfigError, match="append is not allowed for config key: retention.ms"):
        apply_incremental({}, [("retention.ms", APPEND, "1")], _types, lambda n: "1")
    with pytest.raises(ConfigError, match="subtract is not allowed"):
        apply_incremental({}, [("retention.ms", SUBTRACT, "1")], _types, lambda n: "1")
    with pytest.raises(ConfigError, match="Unknown config name"):
        apply_incremental({}, [("nope", APPEND, "1")], _types, lambda n: None)
    with pytest.raises(DynamicConfigError):
        apply_incremental({}, [("retention.ms", 7, "1")], _types, lambda n: None)


def test_listener_tls_material_is_dynamic_per_broker_only():
    """DynamicBrokerConfig.validateConfigs for SslConfigs.RECONFIGURABLE_CONFIGS."""
    name = "listener.name.ssl.ssl.keystore.location"
    validate_dynamic_update({name: "/k.pem", "listener.name.ssl.ssl.key.password": "pw"})
    with pytest.raises(DynamicConfigError, match=r"only per-listener using the listener prefix: Set\(ssl.keystore.location\)"):
        validate_dynamic_update({"ssl.keystore.location": "/k.pem"})
    with pytest.raises(DynamicConfigError, match=r"broker id must be specified: Set\(" + name):
        validate_dynamic_update({name: "/k.pem"}, per_broker=False)
    # the other listener configs (DynamicListenerConfig) are per broker, with or without
    # the prefix: refused as cluster defaults
    for n in ("listener.name.ssl.ssl.client.auth", "ssl.client.auth", "sasl.kerberos.min.time.before.relogin"):
        value = {"sasl.kerberos.min.time.before.relogin": "58000"}.get(
            n, "required")
        validate_dynamic_update({n: value})
        with pytest.raises(DynamicConfigError, match="broker id must be specified"):
            validate_dynamic_update({n: value}, per_broker=False)
    # but for the three cluster-level ones
    validate_dynamic_update({"max.connections": "100", "listener.name.ssl.max.connections": "5"}, per_broker=False)
    # what Kafka never changes at run time is refused
    for n, v in (("node.id", "3"), ("log.dirs", "/x"), ("socket.request.max.bytes", "100"),
                 ("advertised.listeners", "PLAINTEXT://h:1")):
        with pytest.raises(DynamicConfigError, match="Cannot update these configs dynamically"):
            validate_dynamic_update({n: v})


def test_listener_prefixed_values_keep_through_dynamic_layers_and_are_described():
    """The static per-listener values survive the effective config being rebuilt with
    dynamic layers; DescribeConfigs lists the set ones with the broker-wide synonym and
    never a password's value."""
    static = broker("listeners=SSL://127.0.0.1:0", "listener.name.ssl.ssl.keystore.location=/a.pem",
                    "listener.name.ssl.ssl.key.password=secret")
    dyn = {"listener.name.ssl.ssl.keystore.location": "/b.pem", "log.retention.ms": "5000"}
    eff = effective_broker_config(static, {}, dyn)
    assert eff.listener_value("SSL", "ssl.keystore.location") == "/b.pem"
    assert eff.listener_value("SSL", "ssl.key.password") == "secret"
    layers = BrokerLayers(static, {}, dyn)
    got = {e.name: e for e in broker_entries(eff, layers, True, include_synonyms=True)}
    e = got["listener.name.ssl.ssl.keystore.location"]
    assert (e.value, e.source, e.read_only) == ("/b.pem", DYNAMIC_BROKER_CONFIG, False)
    assert [(s.name, s.value, s.source) for s in e.synonyms] == [
        ("listener.name.ssl.ssl.keystore.location", "/b.pem", DYNAMIC_BROKER_CONFIG),
        ("listener.name.ssl.ssl.keystore.location", "/a.pem", STATIC_BROKER_CONFIG)]
    pw = got["listener.name.ssl.ssl.key.password"]
    assert pw.value is None and pw.is_sensitive and pw.source == STATIC_BROKER_CONFIG


def test_elr_safety_configs_as_kafkas_activation():
    from config.describe import elr_safety_configs

    # nothing stored: the cluster level gets the static value
    assert elr_safety_configs(2, {}, {}) == ({}, {"min.insync.replicas": "2"})
    # a stored cluster value is kept; a per-broker one is removed, other configs stay
    assert elr_safety_configs(2, {"min.insync.replicas": "3", "log.retention.ms": "5"},
                              {"min.insync.replicas": "1"}) == \
        ({"log.retention.ms": "5"}, {"min.insync.replicas": "1"})
    # already safe: nothing to write
    assert elr_safety_configs(2, {"log.retention.ms": "5"}, {"min.insync.replicas": "1"}) is None


def test_elr_alter_error_rules():
    from config.describe import elr_alter_error

    cur = {"min.insync.replicas": "1"}
    assert "Broker-level" in elr_alter_error(True, ["min.insync.replicas"], {}, {"min.insync.replicas": "2"})
    assert "Broker-level" in elr_alter_error(True, ["min.insync.replicas"], {}, {})  # a DELETE too
    assert elr_alter_error(True, ["log.retention.ms"], {}, {"log.retention.ms": "5"}) is None
    assert "Cluster-level" in elr_alter_error(False, ["min.insync.replicas"], cur, {})  # DELETE
    assert "Cluster-level" in elr_alter_error(False, ["log.retention.ms"], cur, {"log.retention.ms": "5"})  # left out
    assert elr_alter_error(False, ["min.insync.replicas"], cur, {"min.insync.replicas": "2"}) is None
    assert elr_alter_error(False, ["log.retention.ms"], cur, {**cur, "log.retention.ms": "5"}) is None
