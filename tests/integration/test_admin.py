"""Topic administration as stock clients use it: CreateTopics with timestamp configs
(validated as Kafka validates them), DeleteTopics, auto-creation with broker defaults."""

from __future__ import annotations

import time

import pytest

from tests.integration.helpers import (
    LOG_APPEND_TIME,
    Rec,
    assert_records_equal,
    consume,
    create_topic,
    end_offset,
    kp_admin,
    make_records,
    now_ms,
    produce,
    unique_topic,
)

pytestmark = pytest.mark.timeout(120)


@pytest.mark.parametrize("configs", [
    {"message.timestamp.type": "WallClockTime"},
    {"message.timestamp.before.max.ms": "-5"},
    {"message.timestamp.after.max.ms": "soon"},
    {"no.such.topic.property": "1"},
])
def test_create_topic_invalid_config(broker, configs):
    import kafka.errors

    name = unique_topic("badcfg")
    with pytest.raises(kafka.errors.InvalidConfigurationError):
        create_topic(broker.bootstrap, name, configs)
    admin = kp_admin(broker.bootstrap)
    try:
        assert name not in admin.list_topics(), "a topic with an invalid config was created anyway"
    finally:
        admin.close()


def test_create_existing_topic(broker, new_topic):
    import kafka.errors

    topic = new_topic()
    with pytest.raises(kafka.errors.TopicAlreadyExistsError):
        create_topic(broker.bootstrap, topic)


def test_confluent_admin_create_with_configs(broker):
    """confluent-kafka's AdminClient: CreateTopics with LogAppendTime works the same way."""
    from confluent_kafka.admin import NewTopic

    from tests.integration.helpers import ck_admin

    topic = unique_topic("ckadmin")
    a = ck_admin(broker.bootstrap)
    fut = a.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1,
                                    config={"message.timestamp.type": "LogAppendTime"})],
                          request_timeout=15)[topic]
    fut.result(timeout=20)
    md = a.list_topics(topic, timeout=15)
    assert sorted(md.topics[topic].partitions) == [0, 1]
    before = now_ms()
    acks = produce("ck", broker.bootstrap, topic, [Rec(b"k", b"v", 1_000)], partition=1)
    assert acks[0].offset == 0 and acks[0].timestamp_type == LOG_APPEND_TIME
    assert acks[0].timestamp >= before


def test_delete_and_recreate_topic(broker, new_topic):
    import kafka.errors

    topic = new_topic()
    produce("kp", broker.bootstrap, topic, make_records(5, now_ms() - 1000, prefix="old"))
    assert end_offset(broker.bootstrap, topic) == 5
    admin = kp_admin(broker.bootstrap)
    try:
        admin.delete_topics([topic], timeout_ms=15_000)
        deadline = time.monotonic() + 15
        while topic in admin.list_topics() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert topic not in admin.list_topics()
    finally:
        admin.close()
    with pytest.raises(kafka.errors.KafkaError):
        produce("kp", broker.bootstrap, topic, [Rec(b"k", b"v", now_ms())], max_block_ms=3000)
    # recreated: a fresh log starting at offset 0 with the new configuration
    create_topic(broker.bootstrap, topic, {"message.timestamp.type": "LogAppendTime"})
    recs = make_records(3, now_ms() - 1000, prefix="new")
    acks = produce("kp", broker.bootstrap, topic, recs)
    assert [a.offset for a in acks] == [0, 1, 2]
    got = consume("ck", broker.bootstrap, topic, 3)
    assert_records_equal(got, recs, ts_type=LOG_APPEND_TIME, who="recreated")


def test_auto_create_with_broker_timestamp_defaults(broker_factory):
    """With auto.create.topics.enable (the default), a producer's first Metadata request
    creates the topic with the broker defaults: log.message.timestamp.type applies."""
    b = broker_factory({"log.message.timestamp.type": "LogAppendTime", "num.partitions": 2})
    topic = unique_topic("auto")
    recs = make_records(4, 1_000_000, prefix="auto", headers=False)
    before = now_ms()
    acks = produce("kp", b.bootstrap, topic, recs, partition=1)
    after = now_ms()
    assert [a.offset for a in acks] == [0, 1, 2, 3]
    assert all(before <= a.timestamp <= after for a in acks)
    admin = kp_admin(b.bootstrap)
    try:
        (t,) = admin.describe_topics([topic])
        assert len(t["partitions"]) == 2, t
    finally:
        admin.close()
    got = consume("aio", b.bootstrap, topic, 4, partition=1)
    assert_records_equal(got, recs, ts_type=LOG_APPEND_TIME, headers=False, who="aio")
