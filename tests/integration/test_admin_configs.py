"""The admin APIs stock admin clients use: DescribeConfigs, AlterConfigs,
IncrementalAlterConfigs, CreatePartitions and DescribeCluster, answered as Kafka answers
them, with config changes taking effect at once and surviving restarts."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import (
    beginning_offset,
    ck_admin,
    consume,
    CREATE_TIME,
    create_topic,
    end_offset,
    kp_admin,
    LOG_APPEND_TIME,
    make_records,
    now_ms,
    produce,
    produce_batches,
    RawConn,
    raw_request,
    Rec,
    unique_topic,
    wait_for,
)

pytestmark = pytest.mark.timeout(180)

MIN = 60_000
TOPIC_CONFIG_COUNT = 38  # Kafka's LogConfig properties that Chronolog knows, and KIP-280's two (config.topic_config.TOPIC_KEYS)


# ---------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------

def ck_describe(bootstrap, rtype, name, **kw):
    from confluent_kafka.admin import ConfigResource

    a = ck_admin(bootstrap)
    r = ConfigResource(rtype, name)
    return a.describe_configs([r], request_timeout=15, **kw)[r].result(timeout=20)


def ck_topic_configs(bootstrap, topic, **kw):
    from confluent_kafka.admin import ResourceType

    return ck_describe(bootstrap, ResourceType.TOPIC, topic, **kw)


def ck_incremental(bootstrap, rtype, name, ops, validate_only=False):
    """ops: [(name, op name, value)] -> None, or raises KafkaException."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource

    entries = [ConfigEntry(n, v, incremental_operation=getattr(AlterConfigOpType, op)) for n, op, v in ops]
    r = ConfigResource(rtype, name, incremental_configs=entries)
    a = ck_admin(bootstrap)
    return a.incremental_alter_configs([r], validate_only=validate_only, request_timeout=15)[r].result(timeout=20)


def ck_error(exc_info):
    err = exc_info.value.args[0]
    return err.code(), err.str()


def raw_describe_topic(port, version, topic, keys=None, synonyms=False, docs=False):
    from protocol.messages import DescribeConfigsRequest

    body = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=2, resource_name=topic, configuration_keys=keys)],
        include_synonyms=synonyms, include_documentation=docs)
    (res,) = raw_request(port, 32, version, body).results
    return res


def raw_incremental(port, rtype, name, ops, validate_only=False, version=1):
    """IncrementalAlterConfigs v1 over a raw connection -> (error_code, error_message).
    ops: [(name, op id 0 SET 1 DELETE 2 APPEND 3 SUBTRACT, value)]."""
    from protocol.messages import IncrementalAlterConfigsRequest as Req

    body = Req(resources=[Req.AlterConfigsResource(resource_type=rtype, resource_name=name, configs=[
        Req.AlterableConfig(name=n, config_operation=op, value=v) for n, op, v in ops])], validate_only=validate_only)
    (r,) = raw_request(port, 44, version, body).responses
    assert r.resource_name == name and r.resource_type == rtype
    return r.error_code, r.error_message


def raw_describe(port, rtype, name, version=4):
    from protocol.messages import DescribeConfigsRequest

    body = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=rtype, resource_name=name, configuration_keys=None)], include_synonyms=True)
    (res,) = raw_request(port, 32, version, body).results
    return res



# ---------------------------------------------------------------------------------------
# DescribeConfigs
# ---------------------------------------------------------------------------------------

def test_describe_topic_configs_confluent(broker, new_topic):
    from confluent_kafka.admin import ConfigSource

    topic = new_topic({"retention.ms": "3600000", "message.timestamp.type": "LogAppendTime"})
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert len(cfg) == TOPIC_CONFIG_COUNT, sorted(cfg)
    e = cfg["retention.ms"]
    assert e.value == "3600000" and e.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    assert not e.is_read_only and not e.is_sensitive
    assert cfg["message.timestamp.type"].value == "LogAppendTime"
    assert cfg["message.timestamp.type"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
    # not overridden: the broker default (the session broker sets none of these)
    assert cfg["segment.bytes"].value == "1073741824"
    assert cfg["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert cfg["cleanup.policy"].value == "delete"
    assert cfg["message.timestamp.after.max.ms"].value == str(2**63 - 1)


def test_describe_topic_configs_kafka_python_filter_and_unknown(broker, new_topic):
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = new_topic({"segment.ms": "600000"})
    admin = kp_admin(broker.bootstrap)
    try:
        out = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                     configs={"segment.ms": None, "retention.bytes": None})],
                                     config_filter="all")
        got = out["topic"][topic]
        assert sorted(got) == ["retention.bytes", "segment.ms"], got
        assert got["segment.ms"]["value"] == "600000"
        assert got["retention.bytes"]["value"] == "-1"
        missing = unique_topic("missing")
        # kafka-python 3 drops per-resource errors: an unknown topic comes back empty
        out = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, missing)], config_filter="all")
        assert out["topic"][missing] == {}
    finally:
        admin.close()
    res = raw_describe_topic(broker.port, 2, missing)
    assert res.error_code == 3 and res.configs == []  # UNKNOWN_TOPIC_OR_PARTITION
    res = raw_describe_topic(broker.port, 2, "bad/name")
    assert res.error_code == 17  # INVALID_TOPIC_EXCEPTION


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_describe_configs_every_version_raw(broker, new_topic, version):
    topic = new_topic({"retention.ms": "7200000"})
    res = raw_describe_topic(broker.port, version, topic, keys=["retention.ms", "segment.bytes"],
                             synonyms=True, docs=True)
    assert res.error_code == 0 and res.resource_name == topic and res.resource_type == 2
    by = {c.name: c for c in res.configs}
    assert sorted(by) == ["retention.ms", "segment.bytes"]
    assert by["retention.ms"].value == "7200000"
    if version == 0:
        assert by["retention.ms"].is_default is False
        assert by["segment.bytes"].is_default is True
    else:
        assert by["retention.ms"].config_source == 1  # TOPIC_CONFIG
        assert by["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
        # synonyms: the override first, then the broker layers (log.retention.ms has no
        # default, and Kafka drops synonyms before the first one named log.retention.ms)
        assert [(s.name, s.value, s.source) for s in by["retention.ms"].synonyms] == [("retention.ms", "7200000", 1)]
        assert [(s.name, s.value, s.source) for s in by["segment.bytes"].synonyms] == [
            ("log.segment.bytes", "1073741824", 5)]
    if version >= 3:
        assert by["retention.ms"].config_type == 5  # LONG
        assert by["segment.bytes"].config_type == 3  # INT
        assert by["retention.ms"].documentation and "retention" in by["retention.ms"].documentation.lower()
    # without include_synonyms no synonyms are sent
    if version >= 1:
        res = raw_describe_topic(broker.port, version, topic, keys=["retention.ms"])
        assert res.configs[0].synonyms == []
        if version >= 3:
            assert res.configs[0].documentation is None


def test_describe_static_broker_config_sources(broker_factory):
    """A topic property whose broker default was set at start shows STATIC_BROKER_CONFIG
    with its synonym chain; the broker resource lists every broker property."""
    from confluent_kafka.admin import ConfigSource, ResourceType

    b = broker_factory({"log.message.timestamp.type": "LogAppendTime", "log.retention.ms": "86400000"})
    topic = create_topic(b.bootstrap, unique_topic("static"))
    cfg = ck_topic_configs(b.bootstrap, topic)
    e = cfg["message.timestamp.type"]
    assert e.value == "LogAppendTime" and e.source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert cfg["retention.ms"].value == "86400000"
    assert cfg["retention.ms"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    res = raw_describe_topic(b.port, 4, topic, keys=["retention.ms", "message.timestamp.type"], synonyms=True)
    by = {c.name: c for c in res.configs}
    assert [(s.name, s.value, s.source) for s in by["retention.ms"].synonyms] == [
        ("log.retention.ms", "86400000", 4), ("log.retention.hours", "168", 5)]
    assert [(s.name, s.value, s.source) for s in by["message.timestamp.type"].synonyms] == [
        ("log.message.timestamp.type", "LogAppendTime", 4), ("log.message.timestamp.type", "CreateTime", 5)]

    bcfg = ck_describe(b.bootstrap, ResourceType.BROKER, "0")
    assert bcfg["log.message.timestamp.type"].value == "LogAppendTime"
    assert bcfg["log.message.timestamp.type"].source == ConfigSource.STATIC_BROKER_CONFIG.value
    assert bcfg["log.message.timestamp.type"].is_read_only is False  # dynamically updatable
    assert bcfg["log.segment.bytes"].source == ConfigSource.DEFAULT_CONFIG.value
    assert bcfg["node.id"].is_read_only is True and bcfg["node.id"].value == "0"
    assert bcfg["log.retention.hours"].is_read_only is True  # not dynamic in Kafka either
    # the cluster-default resource ("") holds only dynamic defaults: the one every Kafka
    # 4.1+ cluster has (eligible leader replicas, KIP-966), from the static value
    d = raw_describe(b.port, 4, "")
    assert d.error_code == 0
    assert [(c.name, c.value, c.config_source) for c in d.configs] == [("min.insync.replicas", "1", 3)]


def test_describe_other_broker_id_is_invalid_request(broker):
    # (librdkafka sends a BROKER resource to that broker id itself, so raw requests here)
    res = raw_describe(broker.port, 4, "7")
    assert res.error_code == 42 and "Unexpected broker id" in res.error_message  # INVALID_REQUEST
    res = raw_describe(broker.port, 4, "zero")
    assert res.error_code == 42 and "must be an integer" in res.error_message
    res = raw_describe(broker.port, 4, "0")
    assert res.error_code == 0 and len(res.configs) > 50


# ---------------------------------------------------------------------------------------
# AlterConfigs / IncrementalAlterConfigs on topics
# ---------------------------------------------------------------------------------------

def test_alter_configs_replaces_override_set_kafka_python(broker, new_topic):
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = new_topic({"retention.ms": "3600000", "segment.ms": "600000"})
    admin = kp_admin(broker.bootstrap)
    try:
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"message.timestamp.type": "LogAppendTime"})],
                                  incremental=False, raise_on_unknown=False)
        assert out == {"topic": {topic: "OK"}}, out
    finally:
        admin.close()
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert cfg["message.timestamp.type"].value == "LogAppendTime" and cfg["message.timestamp.type"].source == 1
    # kafka-python re-sends the other overrides it found with DescribeConfigs, because
    # legacy AlterConfigs replaces the whole set: they stay
    assert cfg["retention.ms"].value == "3600000" and cfg["retention.ms"].source == 1
    assert cfg["segment.ms"].value == "600000" and cfg["segment.ms"].source == 1


def test_alter_configs_raw_replaces_whole_set(broker, new_topic):
    from protocol.messages import AlterConfigsRequest as Req

    topic = new_topic({"retention.ms": "3600000", "segment.ms": "600000"})
    for version in (0, 1, 2):
        body = Req(resources=[Req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
            Req.AlterableConfig(name="segment.bytes", value=str(1048576 + version))])], validate_only=False)
        (r,) = raw_request(broker.port, 33, version, body).responses
        assert r.error_code == 0 and r.resource_name == topic, r
        cfg = ck_topic_configs(broker.bootstrap, topic)
        assert cfg["segment.bytes"].value == str(1048576 + version) and cfg["segment.bytes"].source == 1
        assert cfg["retention.ms"].source == 5 and cfg["segment.ms"].source == 5
    # a null value and a duplicate key are INVALID_REQUEST, as Kafka answers
    body = Req(resources=[Req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        Req.AlterableConfig(name="segment.bytes", value=None)])])
    (r,) = raw_request(broker.port, 33, 1, body).responses
    assert r.error_code == 42 and "Null value not supported" in r.error_message
    body = Req(resources=[Req.AlterConfigsResource(resource_type=2, resource_name=topic, configs=[
        Req.AlterableConfig(name="segment.bytes", value="2000000"), Req.AlterableConfig(name="segment.bytes", value="3000000")])])
    (r,) = raw_request(broker.port, 33, 1, body).responses
    assert r.error_code == 42 and "duplicate" in r.error_message
    assert ck_topic_configs(broker.bootstrap, topic)["segment.bytes"].value == "1048578"


def test_alter_configs_confluent_legacy(broker, new_topic):
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = new_topic({"retention.ms": "3600000"})
    a = ck_admin(broker.bootstrap)
    r = ConfigResource(ResourceType.TOPIC, topic, set_config={"segment.bytes": "1048576"})
    with pytest.warns(DeprecationWarning):
        fut = a.alter_configs([r], request_timeout=15)[r]
    fut.result(timeout=20)
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert cfg["segment.bytes"].value == "1048576" and cfg["segment.bytes"].source == 1
    assert cfg["retention.ms"].source == 5


def test_incremental_alter_configs_operations(broker, new_topic):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ResourceType

    topic = new_topic({"retention.ms": "3600000", "segment.ms": "600000"})
    T = ResourceType.TOPIC
    ck_incremental(broker.bootstrap, T, topic, [("retention.ms", "SET", "7200000"), ("segment.ms", "DELETE", None),
                                                ("cleanup.policy", "APPEND", "compact")])
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert cfg["retention.ms"].value == "7200000" and cfg["retention.ms"].source == 1
    assert cfg["segment.ms"].value == "604800000" and cfg["segment.ms"].source == 5
    assert cfg["cleanup.policy"].value == "delete,compact" and cfg["cleanup.policy"].source == 1
    ck_incremental(broker.bootstrap, T, topic, [("cleanup.policy", "SUBTRACT", "delete")])
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].value == "7200000"  # untouched by an incremental change
    # APPEND on a non-list property: INVALID_CONFIG
    with pytest.raises(KafkaException) as ei:
        ck_incremental(broker.bootstrap, T, topic, [("retention.ms", "APPEND", "5")])
    code, msg = ck_error(ei)
    assert code == 40 and "retention.ms" in msg
    # validate_only changes nothing
    ck_incremental(broker.bootstrap, T, topic, [("retention.ms", "SET", "1000")], validate_only=True)
    assert ck_topic_configs(broker.bootstrap, topic)["retention.ms"].value == "7200000"


@pytest.mark.parametrize("name,value,rule", [
    ("retention.ms", "-5", "at least -1"),
    ("message.timestamp.type", "WallClockTime", "CreateTime"),
    ("segment.bytes", "ten", "int"),
    ("no.such.property", "1", "Unknown"),
])
def test_invalid_topic_config_is_invalid_config(broker, new_topic, name, value, rule):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigResource, ResourceType

    topic = new_topic({"retention.ms": "3600000"})
    for validate_only in (False, True):
        with pytest.raises(KafkaException) as ei:
            ck_incremental(broker.bootstrap, ResourceType.TOPIC, topic, [(name, "SET", value)], validate_only=validate_only)
        code, msg = ck_error(ei)
        assert code == 40, msg  # INVALID_CONFIG
        assert name in msg and value in msg and rule.lower() in msg.lower(), msg
    a = ck_admin(broker.bootstrap)
    r = ConfigResource(ResourceType.TOPIC, topic, set_config={name: value})
    with pytest.warns(DeprecationWarning):
        fut = a.alter_configs([r], request_timeout=15)[r]
    with pytest.raises(KafkaException) as ei:
        fut.result(timeout=20)
    code, msg = ck_error(ei)
    assert code == 40 and name in msg, msg
    # nothing changed
    cfg = ck_topic_configs(broker.bootstrap, topic)
    assert cfg["retention.ms"].value == "3600000" and cfg["retention.ms"].source == 1


def test_alter_unknown_topic(broker):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ResourceType

    with pytest.raises(KafkaException) as ei:
        ck_incremental(broker.bootstrap, ResourceType.TOPIC, unique_topic("nope"), [("retention.ms", "SET", "1000")])
    assert ck_error(ei)[0] == 3  # UNKNOWN_TOPIC_OR_PARTITION


def test_alter_timestamp_type_applies_at_once_and_after_restart(broker_factory):
    from confluent_kafka.admin import ResourceType

    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("lat"), {"message.timestamp.type": "CreateTime"})
    old = now_ms() - 3 * MIN
    acks = produce("ck", b.bootstrap, topic, [Rec(b"k0", b"v0", old)])
    assert acks[0].timestamp_type == CREATE_TIME and acks[0].timestamp == old
    ck_incremental(b.bootstrap, ResourceType.TOPIC, topic, [("message.timestamp.type", "SET", "LogAppendTime")])
    before = now_ms()
    acks = produce("ck", b.bootstrap, topic, [Rec(b"k1", b"v1", old)])
    after = now_ms()
    assert acks[0].offset == 1 and acks[0].timestamp_type == LOG_APPEND_TIME
    assert before <= acks[0].timestamp <= after
    b.restart()
    cfg = ck_topic_configs(b.bootstrap, topic)
    assert cfg["message.timestamp.type"].value == "LogAppendTime" and cfg["message.timestamp.type"].source == 1
    before = now_ms()
    acks = produce("ck", b.bootstrap, topic, [Rec(b"k2", b"v2", old)])
    after = now_ms()
    assert acks[0].offset == 2 and acks[0].timestamp_type == LOG_APPEND_TIME
    assert before <= acks[0].timestamp <= after
    got = consume("ck", b.bootstrap, topic, 3)
    assert [g.timestamp_type for g in got] == [CREATE_TIME, LOG_APPEND_TIME, LOG_APPEND_TIME]
    assert got[0].timestamp == old and got[1].timestamp != old and got[2].timestamp != old


@pytest.mark.slow
def test_retention_ms_altered_down_deletes_in_next_pass(broker_factory):
    from confluent_kafka.admin import ResourceType

    b = broker_factory({"auto.create.topics.enable": "false", "log.retention.check.interval.ms": 300,
                        "log.segment.delete.delay.ms": 200})
    topic = create_topic(b.bootstrap, unique_topic("ret"), {"segment.ms": MIN})
    now = now_ms()
    produce_batches(b.bootstrap, topic, [
        (None, [now - 60 * MIN, now - 59 * MIN]),  # segment 0
        (None, [now - 30 * MIN]),                  # segment 2 (rolled: 30 min later)
        (None, [now - 1 * MIN]),                   # segment 3
    ])
    time.sleep(1.5)  # several retention passes: with the default 7 days nothing goes
    assert beginning_offset(b.bootstrap, topic) == 0
    ck_incremental(b.bootstrap, ResourceType.TOPIC, topic, [("retention.ms", "SET", str(10 * MIN))])
    wait_for(lambda: beginning_offset(b.bootstrap, topic) == 3, 15, "segments older than 10 min to be deleted")
    assert end_offset(b.bootstrap, topic) == 4
    got = consume("kp", b.bootstrap, topic, 1, start=3)
    assert got[0].offset == 3 and got[0].timestamp == now - MIN


# ---------------------------------------------------------------------------------------
# dynamic broker configs
# ---------------------------------------------------------------------------------------

def test_dynamic_broker_config_applies_to_topics_without_override_and_survives_restart(broker_factory):
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigSource, ResourceType

    b = broker_factory({"auto.create.topics.enable": "false"})
    plain = create_topic(b.bootstrap, unique_topic("plain"))
    pinned = create_topic(b.bootstrap, unique_topic("pinned"), {"message.timestamp.type": "CreateTime"})
    old = now_ms() - 5 * MIN
    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("log.message.timestamp.type", "SET", "LogAppendTime"),
                                                           ("log.retention.ms", "SET", "3600000")])

    def check(tag):
        before = now_ms()
        a_plain = produce("ck", b.bootstrap, plain, [Rec(b"k", b"v", old)])[0]
        a_pinned = produce("ck", b.bootstrap, pinned, [Rec(b"k", b"v", old)])[0]
        after = now_ms()
        assert a_plain.timestamp_type == LOG_APPEND_TIME and before <= a_plain.timestamp <= after, tag
        assert a_pinned.timestamp_type == CREATE_TIME and a_pinned.timestamp == old, tag
        cfg = ck_topic_configs(b.bootstrap, plain)
        assert cfg["message.timestamp.type"].value == "LogAppendTime", tag
        assert cfg["message.timestamp.type"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, tag
        assert cfg["retention.ms"].value == "3600000", tag
        assert cfg["retention.ms"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, tag
        pcfg = ck_topic_configs(b.bootstrap, pinned)
        assert pcfg["message.timestamp.type"].value == "CreateTime", tag
        assert pcfg["message.timestamp.type"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, tag
        bcfg = ck_describe(b.bootstrap, ResourceType.BROKER, "0")
        assert bcfg["log.message.timestamp.type"].value == "LogAppendTime", tag
        assert bcfg["log.message.timestamp.type"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, tag

    check("right after the change")
    b.restart()
    check("after a restart")
    from kafka.admin import ConfigResource as KpResource, ConfigResourceType

    admin = kp_admin(b.bootstrap)
    try:
        got = admin.describe_configs([KpResource(ConfigResourceType.BROKER, "0")])["broker"]["0"]
    finally:
        admin.close()
    # kafka-python's default filter ("modified") keeps a broker's dynamic entries
    assert {k: (v["value"], v["config_source"]) for k, v in got.items()} == {
        "log.message.timestamp.type": ("LogAppendTime", "DYNAMIC_BROKER_CONFIG"),
        "log.retention.ms": ("3600000", "DYNAMIC_BROKER_CONFIG"),
    }, got
    assert (b.log_dir / "__chronolog_dynamic_broker_configs.json").exists()

    # a new topic created afterwards gets the dynamic default too
    later = create_topic(b.bootstrap, unique_topic("later"))
    assert produce("ck", b.bootstrap, later, [Rec(b"k", b"v", old)])[0].timestamp_type == LOG_APPEND_TIME

    # DELETE goes back to the static value
    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("log.message.timestamp.type", "DELETE", None)])
    a = produce("ck", b.bootstrap, plain, [Rec(b"k", b"v", old)])[0]
    assert a.timestamp == old and a.timestamp_type == CREATE_TIME
    assert ck_topic_configs(b.bootstrap, plain)["message.timestamp.type"].source == ConfigSource.DEFAULT_CONFIG.value

    # read-only broker properties and invalid values: INVALID_REQUEST, as Kafka answers
    for ops in ([("log.retention.hours", "SET", "5")], [("node.id", "SET", "3")],
                [("log.retention.ms", "SET", "soon")]):
        with pytest.raises(KafkaException) as ei:
            ck_incremental(b.bootstrap, ResourceType.BROKER, "0", ops)
        code, msg = ck_error(ei)
        assert code == 42 and ops[0][0] in msg, msg
    code, msg = raw_incremental(b.port, 4, "5", [("log.retention.ms", 0, "1000")])
    assert code == 42 and "Unexpected broker id" in msg
    assert ck_topic_configs(b.bootstrap, plain)["retention.ms"].value == "3600000"


def test_dynamic_cluster_default_broker_config(broker_factory):
    from confluent_kafka.admin import ConfigSource, ResourceType

    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("clusterdef"))
    # (confluent-kafka refuses a BROKER resource named "": raw requests for the cluster level)
    assert raw_incremental(b.port, 4, "", [("log.segment.bytes", 0, "2097152")], version=0) == (0, None)
    cfg = ck_topic_configs(b.bootstrap, topic)
    assert cfg["segment.bytes"].value == "2097152"
    assert cfg["segment.bytes"].source == ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
    d = raw_describe(b.port, 4, "")
    assert d.error_code == 0
    assert [(c.name, c.value, c.config_source) for c in d.configs] == [
        ("log.segment.bytes", "2097152", 3), ("min.insync.replicas", "1", 3)]
    assert raw_incremental(b.port, 4, "", [("log.retention.hours", 0, "1")])[0] == 42
    # a per-broker value wins over the cluster default
    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("log.segment.bytes", "SET", "3145728")])
    assert ck_topic_configs(b.bootstrap, topic)["segment.bytes"].value == "3145728"
    b.restart()
    cfg = ck_topic_configs(b.bootstrap, topic)
    assert cfg["segment.bytes"].value == "3145728"
    assert cfg["segment.bytes"].source == ConfigSource.DYNAMIC_BROKER_CONFIG.value
    # CreateTopics v5+ echoes every config of the new topic with the same sources as
    # DescribeConfigs: the per-broker dynamic value, a cluster default, a topic override
    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("log.segment.bytes", "DELETE", None)])
    assert raw_incremental(b.port, 4, "", [("log.retention.bytes", 0, "5000000")], version=0) == (0, None)
    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("log.message.timestamp.type", "SET", "LogAppendTime")])
    from protocol.messages import CreateTopicsRequest as CT

    new = unique_topic("echo")
    body = CT(topics=[CT.CreatableTopic(name=new, num_partitions=1, replication_factor=1, assignments=[],
                                        configs=[CT.CreatableTopicConfig(name="retention.ms", value="60000")])],
              timeout_ms=10_000, validate_only=False)
    (res,) = raw_request(b.port, 19, 7, body).topics
    assert res.error_code == 0
    echoed = {c.name: (c.value, c.config_source) for c in res.configs}
    described = {n: (e.value, e.source) for n, e in ck_topic_configs(b.bootstrap, new).items()}
    assert echoed == described
    assert echoed["segment.bytes"] == ("2097152", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert echoed["retention.bytes"] == ("5000000", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert echoed["message.timestamp.type"] == ("LogAppendTime", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
    assert echoed["retention.ms"] == ("60000", ConfigSource.DYNAMIC_TOPIC_CONFIG.value)
    assert echoed["cleanup.policy"] == ("delete", ConfigSource.DEFAULT_CONFIG.value)


def test_eligible_leader_replicas_cluster_min_insync_replicas(broker_factory):
    """A Kafka 4.1+ cluster runs with eligible leader replicas (KIP-966): its controller
    writes a cluster-level min.insync.replicas (the static value) before serving, so every
    topic reports it as a dynamic cluster default (confluent-kafka-python's
    test_incremental_alter_configs expects it among a topic's non-default configs); it
    cannot be removed, and no broker may have its own."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigSource, ResourceType
    from protocol.messages import AlterConfigsRequest as AC

    b = broker_factory({"min.insync.replicas": "2"})
    topic = create_topic(b.bootstrap, unique_topic("elr"))
    cfg = ck_topic_configs(b.bootstrap, topic)
    assert (cfg["min.insync.replicas"].value, cfg["min.insync.replicas"].source) == \
        ("2", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
    assert not cfg["min.insync.replicas"].is_default
    assert [n for n, e in cfg.items() if not e.is_default] == ["min.insync.replicas"]
    (entry,) = [c for c in raw_describe(b.port, 4, "0").configs if c.name == "min.insync.replicas"]
    assert (entry.value, entry.config_source) == ("2", 3)
    assert [(s.name, s.value, s.source) for s in entry.synonyms] == [
        ("min.insync.replicas", "2", 3), ("min.insync.replicas", "2", 4), ("min.insync.replicas", "1", 5)]
    # removing it: deleted by name, or left out of a legacy whole-set replacement
    removal = "Cluster-level min.insync.replicas cannot be removed while ELR is enabled."
    assert raw_incremental(b.port, 4, "", [("min.insync.replicas", 1, None)]) == (40, removal)  # INVALID_CONFIG
    assert raw_incremental(b.port, 4, "", [("min.insync.replicas", 1, None)], validate_only=True) == (40, removal)
    body = AC(resources=[AC.AlterConfigsResource(resource_type=4, resource_name="", configs=[
        AC.AlterableConfig(name="log.segment.bytes", value="2097152")])], validate_only=False)
    (r,) = raw_request(b.port, 33, 1, body).responses
    assert (r.error_code, r.error_message) == (40, removal)
    # a broker-level value, whatever the operation
    with pytest.raises(KafkaException) as e:
        ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("min.insync.replicas", "SET", "1")])
    assert ck_error(e) == (40, "Broker-level min.insync.replicas cannot be altered while ELR is enabled.")
    # changing the cluster-level value is allowed and reaches the topics
    assert raw_incremental(b.port, 4, "", [("min.insync.replicas", 0, "1")]) == (0, None)
    assert ck_topic_configs(b.bootstrap, topic)["min.insync.replicas"].value == "1"
    # written once: a restart with another static value keeps the stored one
    b.overrides["min.insync.replicas"] = "3"
    b.restart()
    assert ck_topic_configs(b.bootstrap, topic)["min.insync.replicas"].value == "1"
    # nothing was changed by the refused requests
    d = raw_describe(b.port, 4, "")
    assert [(c.name, c.value) for c in d.configs] == [("min.insync.replicas", "1")]


def test_dynamic_listener_and_connection_configs_apply_live(broker_factory):
    """Kafka's dynamic listener and connection configs: max.connections.per.ip limits the
    connections accepted from then on; what Chronolog cannot change live (listeners) and
    what Kafka 4.0+ cannot (advertised.listeners) is refused by name, and a value stored
    before (an older Chronolog allowed advertised.listeners) is ignored at start; Kafka's
    no-op settings (Kerberos relogin) are stored and described."""
    import json

    from confluent_kafka.admin import ConfigSource, ResourceType

    b = broker_factory({})

    def advertised():
        md = ck_admin(b.bootstrap).list_topics(timeout=10)
        return {(x.host, x.port) for x in md.brokers.values()}

    assert advertised() == {("127.0.0.1", b.port)}
    for name, value in (("advertised.listeners", f"PLAINTEXT://localhost:{b.port}"),
                        ("listeners", "PLAINTEXT://127.0.0.1:0")):
        code, msg = raw_incremental(b.port, 4, "0", [(name, 0, value)])
        assert (code, msg) == (42, f"Cannot update these configs dynamically: Set({name})")
    entry = ck_describe(b.bootstrap, ResourceType.BROKER, "0")["advertised.listeners"]
    assert entry.is_read_only and entry.source == ConfigSource.DEFAULT_CONFIG.value
    port = b.port
    b.stop()
    with open(b.log_dir / "__chronolog_dynamic_broker_configs.json", "w") as fh:
        json.dump({"version": 1, "generation": 1, "default": {},
                   "broker": {"advertised.listeners": f"PLAINTEXT://localhost:{port}"}}, fh)
    b.start(port)
    assert advertised() == {("127.0.0.1", port)}
    assert "ignoring advertised.listeners=PLAINTEXT://localhost" in b.log_path.read_text()

    # connection limits: the next connections count against the new one
    assert raw_incremental(b.port, 4, "", [("max.connections.per.ip", 0, "2")]) == (0, None)
    held = [RawConn(b.port), RawConn(b.port)]
    try:
        third = RawConn(b.port)
        assert third.wait_closed(5.0), "a third connection from 127.0.0.1 was kept"
        third.close()
    finally:
        for c in held:
            c.close()
    def lift():
        try:  # the broker may not have seen the two closes yet: this one is refused then
            return raw_incremental(b.port, 4, "", [("max.connections.per.ip", 1, None)]) == (0, None)
        except (ConnectionError, OSError):
            return False

    wait_for(lift, 10, "max.connections.per.ip removed")
    conns = [RawConn(b.port) for _ in range(3)]
    try:
        assert not conns[2].wait_closed(0.5)
    finally:
        for c in conns:
            c.close()

    ck_incremental(b.bootstrap, ResourceType.BROKER, "0", [("sasl.kerberos.min.time.before.relogin", "SET", "58000")])
    entry = ck_describe(b.bootstrap, ResourceType.BROKER, "0")["sasl.kerberos.min.time.before.relogin"]
    assert (entry.value, entry.source) == ("58000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)


def test_group_config_resources(broker_factory):
    """GROUP config resources (type 32): described with the broker's defaults for any
    group, changed with IncrementalAlterConfigs and AlterConfigs, validated as Kafka's
    GroupConfig (INVALID_CONFIG), kept across a restart."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import ConfigSource, ResourceType

    b = broker_factory({"group.consumer.session.timeout.ms": "50000"})
    d = ck_describe(b.bootstrap, ResourceType.GROUP, "billing")
    assert {n: (e.value, e.source) for n, e in d.items()} == {
        "consumer.session.timeout.ms": ("50000", ConfigSource.DEFAULT_CONFIG.value),
        "consumer.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG.value),
        "share.session.timeout.ms": ("45000", ConfigSource.DEFAULT_CONFIG.value),
        "share.heartbeat.interval.ms": ("5000", ConfigSource.DEFAULT_CONFIG.value),
        "share.record.lock.duration.ms": ("30000", ConfigSource.DEFAULT_CONFIG.value),
        "share.delivery.count.limit": ("5", ConfigSource.DEFAULT_CONFIG.value),
        "share.partition.max.record.locks": ("2000", ConfigSource.DEFAULT_CONFIG.value),
        "share.auto.offset.reset": ("latest", ConfigSource.DEFAULT_CONFIG.value),
        "share.isolation.level": ("read_uncommitted", ConfigSource.DEFAULT_CONFIG.value)}
    ck_incremental(b.bootstrap, ResourceType.GROUP, "billing", [("consumer.session.timeout.ms", "SET", "55000"),
                                                                ("consumer.heartbeat.interval.ms", "SET", "6000")])
    d = ck_describe(b.bootstrap, ResourceType.GROUP, "billing")
    assert (d["consumer.session.timeout.ms"].value, d["consumer.session.timeout.ms"].source) == \
        ("55000", ConfigSource.GROUP_CONFIG.value)
    assert d["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # another group keeps the defaults
    assert ck_describe(b.bootstrap, ResourceType.GROUP, "other")["consumer.session.timeout.ms"].value == "50000"
    for ops, message in (
            ([("consumer.session.timeout.ms", "SET", "61000")],
             "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
            ([("nope", "SET", "1")], "Unknown group config name: nope"),
            ([("consumer.session.timeout.ms", "APPEND", "1")], "append is not allowed")):
        with pytest.raises(KafkaException) as ei:
            ck_incremental(b.bootstrap, ResourceType.GROUP, "billing", ops)
        code, text = ck_error(ei)
        assert code == 40 and message in text, text  # INVALID_CONFIG
    # validate_only changes nothing
    ck_incremental(b.bootstrap, ResourceType.GROUP, "billing", [("consumer.heartbeat.interval.ms", "SET", "7000")],
                   validate_only=True)
    assert ck_describe(b.bootstrap, ResourceType.GROUP, "billing")["consumer.heartbeat.interval.ms"].value == "6000"
    # raw: the empty group name, every DescribeConfigs version, legacy AlterConfigs
    assert raw_incremental(b.port, 32, "", [("consumer.session.timeout.ms", 0, "50000")]) == \
        (42, "Default group resources are not allowed.")
    for version in range(5):
        from protocol.messages import DescribeConfigsRequest

        body = DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=32, resource_name="billing", configuration_keys=["consumer.session.timeout.ms"])],
            include_synonyms=version >= 1)
        (res,) = raw_request(b.port, 32, version, body).results
        assert res.error_code == 0 and [(c.name, c.value) for c in res.configs] == \
            [("consumer.session.timeout.ms", "55000")]
    from protocol.messages import AlterConfigsRequest as AC

    body = AC(resources=[AC.AlterConfigsResource(resource_type=32, resource_name="legacy", configs=[
        AC.AlterableConfig(name="share.record.lock.duration.ms", value="20000")])], validate_only=False)
    (r,) = raw_request(b.port, 33, 2, body).responses
    assert (r.error_code, r.resource_type, r.resource_name) == (0, 32, "legacy")
    b.restart()
    d = ck_describe(b.bootstrap, ResourceType.GROUP, "billing")
    assert d["consumer.session.timeout.ms"].value == "55000" and d["consumer.heartbeat.interval.ms"].value == "6000"
    assert ck_describe(b.bootstrap, ResourceType.GROUP, "legacy")["share.record.lock.duration.ms"].value == "20000"
    ck_incremental(b.bootstrap, ResourceType.GROUP, "billing", [("consumer.session.timeout.ms", "DELETE", None)])
    d = ck_describe(b.bootstrap, ResourceType.GROUP, "billing")
    assert (d["consumer.session.timeout.ms"].value, d["consumer.session.timeout.ms"].source) == \
        ("50000", ConfigSource.DEFAULT_CONFIG.value)


# ---------------------------------------------------------------------------------------
# CreatePartitions
# ---------------------------------------------------------------------------------------

def test_create_partitions_confluent_then_produce_and_consume(broker, new_topic):
    from confluent_kafka.admin import NewPartitions

    topic = new_topic(partitions=1)
    a = ck_admin(broker.bootstrap)
    a.create_partitions([NewPartitions(topic, 3)], request_timeout=15)[topic].result(timeout=20)
    md = a.list_topics(topic, timeout=15)
    assert sorted(md.topics[topic].partitions) == [0, 1, 2]
    recs = make_records(4, now_ms() - 1000, prefix="p2")
    acks = produce("ck", broker.bootstrap, topic, recs, partition=2)
    assert [x.offset for x in acks] == [0, 1, 2, 3]
    got = consume("kp", broker.bootstrap, topic, 4, partition=2)
    assert [g.value for g in got] == [r.value for r in recs]
    assert end_offset(broker.bootstrap, topic, 0) == 0


def test_create_partitions_kafka_python_and_errors(broker, new_topic):
    import kafka.errors
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewPartitions

    topic = new_topic(partitions=2)
    admin = kp_admin(broker.bootstrap)
    try:
        admin.create_partitions({topic: 4})
        (t,) = admin.describe_topics([topic])
        assert len(t["partitions"]) == 4, t
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            admin.create_partitions({topic: 4})
        with pytest.raises(kafka.errors.InvalidPartitionsError):
            admin.create_partitions({topic: 2})
        admin.create_partitions({topic: 9}, validate_only=True)
        (t,) = admin.describe_topics([topic])
        assert len(t["partitions"]) == 4, "validate_only created partitions"
        admin.create_partitions({topic: {"count": 5, "assignments": [[0]]}})
        (t,) = admin.describe_topics([topic])
        assert len(t["partitions"]) == 5, "explicit assignment to this broker refused"
    finally:
        admin.close()
    a = ck_admin(broker.bootstrap)
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 7, replica_assignment=[[0]])], request_timeout=15)[topic].result(timeout=20)
    assert ck_error(ei)[0] == 39  # INVALID_REPLICA_ASSIGNMENT (2 new partitions, 1 assignment)
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(topic, 6, replica_assignment=[[3]])], request_timeout=15)[topic].result(timeout=20)
    assert ck_error(ei)[0] == 39
    a.create_partitions([NewPartitions(topic, 6, replica_assignment=[[0]])], request_timeout=15)[topic].result(timeout=20)
    assert sorted(a.list_topics(topic, timeout=15).topics[topic].partitions) == [0, 1, 2, 3, 4, 5]
    missing = unique_topic("nope")
    with pytest.raises(KafkaException) as ei:
        a.create_partitions([NewPartitions(missing, 3)], request_timeout=15)[missing].result(timeout=20)
    assert ck_error(ei)[0] == 3


def test_created_partitions_survive_restart(broker_factory):
    from confluent_kafka.admin import NewPartitions

    b = broker_factory({"auto.create.topics.enable": "false"})
    topic = create_topic(b.bootstrap, unique_topic("cpr"))
    a = ck_admin(b.bootstrap)
    a.create_partitions([NewPartitions(topic, 2)], request_timeout=15)[topic].result(timeout=20)
    produce("kp", b.bootstrap, topic, make_records(2, now_ms(), prefix="x"), partition=1)
    b.restart()
    a = ck_admin(b.bootstrap)
    assert sorted(a.list_topics(topic, timeout=15).topics[topic].partitions) == [0, 1]
    assert end_offset(b.bootstrap, topic, 1) == 2


# ---------------------------------------------------------------------------------------
# DescribeCluster
# ---------------------------------------------------------------------------------------

def test_describe_cluster(broker):
    # librdkafka answers describe_cluster from a Metadata request
    a = ck_admin(broker.bootstrap)
    d = a.describe_cluster(request_timeout=15).result(timeout=20)
    assert d.controller.id == 0
    assert [(n.id, n.host, n.port) for n in d.nodes] == [(0, "127.0.0.1", broker.port)]
    assert d.cluster_id and len(d.cluster_id) >= 16

    admin = kp_admin(broker.bootstrap)
    try:
        k = admin.describe_cluster()
    finally:
        admin.close()
    assert k["cluster_id"] == d.cluster_id and k["controller_id"] == 0
    # kafka-python sends DescribeCluster asking for the authorized operations: without an
    # authorizer Kafka allows every operation the CLUSTER resource supports
    assert sorted(k["authorized_operations"]) == sorted(
        ["CREATE", "ALTER", "DESCRIBE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"])
    assert [(x["broker_id"], x["host"], x["port"]) for x in k["brokers"]] == [(0, "127.0.0.1", broker.port)]


@pytest.mark.parametrize("version", [0, 1])
def test_describe_cluster_raw(broker, version):
    from protocol.messages import DescribeClusterRequest

    r = raw_request(broker.port, 60, version, DescribeClusterRequest(include_cluster_authorized_operations=False))
    assert r.error_code == 0 and r.controller_id == 0 and r.cluster_authorized_operations == -2147483648
    assert [(x.broker_id, x.host, x.port) for x in r.brokers] == [(0, "127.0.0.1", broker.port)]
    if version == 1:
        r = raw_request(broker.port, 60, 1, DescribeClusterRequest(include_cluster_authorized_operations=True,
                                                                   endpoint_type=2))
        assert r.error_code == 114  # MISMATCHED_ENDPOINT_TYPE: no controller endpoint here


def test_kafka_python_incremental_and_modified_filter(broker, new_topic):
    """kafka-python's defaults: alter_configs goes incremental (checking the keys against
    DescribeConfigs first); describe_configs shows only the modified (non-default) keys."""
    from kafka.admin import ConfigResource, ConfigResourceType

    topic = new_topic({"retention.ms": "3600000"})
    admin = kp_admin(broker.bootstrap)
    try:
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic,
                                                  configs={"segment.ms": "900000",
                                                           "cleanup.policy": ("APPEND", "compact")})])
        assert out == {"topic": {topic: "OK"}}, out
        out = admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, topic, configs={"retention.ms": "-7"})])
        msg = out["topic"][topic]
        assert "Error 40" in msg and "retention.ms" in msg and "-7" in msg, out  # INVALID_CONFIG
        got = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])["topic"][topic]
        assert {k: v["value"] for k, v in got.items()} == {
            "retention.ms": "3600000", "segment.ms": "900000", "cleanup.policy": "delete,compact"}, got
    finally:
        admin.close()
