"""Online migration between the classic and the consumer group protocol (Kafka 4's
``group.consumer.migration.policy``), with confluent-kafka members each in its own
process: a classic group is upgraded when a ``group.protocol=consumer`` member joins,
classic and consumer-protocol members share the partitions inside the consumer group
(across a broker SIGKILL), a classic member joins the consumer group, and the group is
downgraded to a classic one when its last consumer-protocol member leaves; with the
policy ``disabled`` the consumer-protocol member is refused."""

from __future__ import annotations

import signal
import time
import uuid

import pytest

from tests.integration.helpers import Rec, create_topic, produce_kp, unique_topic, wait_for
from tests.integration.test_consumer_group_protocol import Member, committed, describe, list_groups, split

pytestmark = pytest.mark.timeout(300)

FAST = {"num.partitions": "1", "group.consumer.heartbeat.interval.ms": "500",
        "group.consumer.min.heartbeat.interval.ms": "500", "group.consumer.session.timeout.ms": "6000",
        "group.consumer.min.session.timeout.ms": "6000", "group.initial.rebalance.delay.ms": "0"}


def member_types(port, group):
    d = describe(port, group)
    assert d.error_code == 0, d.error_message
    return sorted(m.member_type for m in d.members)


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_upgrade_mixed_restart_and_downgrade(broker_factory, strategy):
    b = broker_factory(FAST)
    topic = create_topic(b.bootstrap, unique_topic("migrate"), partitions=6)
    for p in range(6):
        produce_kp(b.bootstrap, topic, [Rec(b"k", b"v%d" % i) for i in range(10)], partition=p)
    group = "gmig-" + uuid.uuid4().hex[:6]
    classic = Member(b.bootstrap, group, topic, "classic1", f"classic:{strategy}")
    members = [classic]
    try:
        wait_for(lambda: sorted(classic.assigned) == list(range(6)), 60, "the classic member has everything")
        assert list_groups(b.port)[group] == ("classic", "Stable", "consumer")
        # a member of the consumer protocol joins: the group is upgraded, the partitions split
        modern = Member(b.bootstrap, group, topic, "modern1")
        members.append(modern)
        wait_for(lambda: split(members, 6) and len(classic.assigned) == 3, 60, "classic/consumer split")
        assert list_groups(b.port)[group][0] == "consumer"
        assert member_types(b.port, group) == [0, 1]
        wait_for(lambda: sum(m.state["consumed"] for m in members) >= 60, 30, "all 60 records consumed")
        # the broker crashes: the classic member is replayed as one (its protocols kept)
        b.restart(graceful=False)
        assert list_groups(b.port)[group][0] == "consumer"
        assert member_types(b.port, group) == [0, 1]
        for p in range(6):
            produce_kp(b.bootstrap, topic, [Rec(b"k", b"w%d" % i) for i in range(5)], partition=p)
        wait_for(lambda: committed(b.port, group, topic, range(6)) == {p: 15 for p in range(6)}, 60,
                 "records after the restart consumed and committed")
        assert split(members, 6) and list_groups(b.port)[group][0] == "consumer"
        # a second classic member joins the consumer group
        classic2 = Member(b.bootstrap, group, topic, "classic2", f"classic:{strategy}")
        members.append(classic2)
        wait_for(lambda: split(members, 6) and all(len(m.assigned) == 2 for m in members), 60, "three-way split")
        assert member_types(b.port, group) == [0, 0, 1]
        # the consumer-protocol member leaves: the group is a classic one again
        modern.stop()
        members.remove(modern)
        wait_for(lambda: list_groups(b.port)[group][0] == "classic", 30, "downgraded")
        wait_for(lambda: split(members, 6) and list_groups(b.port)[group][1] == "Stable", 60,
                 "classic split after the downgrade")
        for p in range(6):
            produce_kp(b.bootstrap, topic, [Rec(b"k", b"x%d" % i) for i in range(5)], partition=p)
        wait_for(lambda: committed(b.port, group, topic, range(6)) == {p: 20 for p in range(6)}, 60,
                 "records after the downgrade consumed and committed")
    finally:
        for m in members:
            m.stop(signal.SIGKILL)


def test_policy_disabled_refuses_the_upgrade(broker_factory):
    from confluent_kafka import Consumer, KafkaException

    b = broker_factory({**FAST, "group.consumer.migration.policy": "DISABLED"})
    topic = create_topic(b.bootstrap, unique_topic("nomigrate"), partitions=2)
    group = "gnomig-" + uuid.uuid4().hex[:6]
    classic = Member(b.bootstrap, group, topic, "classic1", "classic:range")
    try:
        wait_for(lambda: sorted(classic.assigned) == [0, 1], 60, "the classic member has everything")
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group, "group.protocol": "consumer"})
        errors = []
        try:
            c.subscribe([topic])
            deadline = time.time() + 15
            while not errors and time.time() < deadline:
                try:
                    m = c.poll(0.2)
                except KafkaException as exc:
                    errors.append(exc.args[0])
                    break
                if m is not None and m.error() is not None:
                    errors.append(m.error())
        finally:
            c.close()
        # librdkafka takes GROUP_ID_NOT_FOUND from ConsumerGroupHeartbeat as fatal
        assert errors and "The group id does not exist" in errors[0].str(), errors
        assert list_groups(b.port)[group][:2] == ("classic", "Stable")
        assert sorted(classic.assigned) == [0, 1]
    finally:
        classic.stop(signal.SIGKILL)
