"""config.group_config: Kafka's GroupConfig validation and defaults, and the GROUP
entries DescribeConfigs answers."""

import pytest

from config import ConfigError, load_broker_config
from config.describe import DEFAULT_CONFIG, GROUP_CONFIG, group_entries
from config.group_config import GROUP_CONFIG_NAMES, GroupConfigError, effective_group_config, validate_group_config


def broker(*props):
    return load_broker_config(None, ["log.dirs=/tmp/unused", *props], env={}, warn=False)


def test_defaults_come_from_the_broker():
    b = broker("group.consumer.session.timeout.ms=50000", "group.share.record.lock.duration.ms=20000")
    assert effective_group_config(b, {}) == {
        "consumer.session.timeout.ms": 50000, "consumer.heartbeat.interval.ms": 5000,
        "share.session.timeout.ms": 45000, "share.heartbeat.interval.ms": 5000,
        "share.record.lock.duration.ms": 20000, "share.delivery.count.limit": 5,
        "share.partition.max.record.locks": 2000, "share.auto.offset.reset": "latest",
        "share.isolation.level": "read_uncommitted"}
    assert effective_group_config(b, {"consumer.heartbeat.interval.ms": "7000"})["consumer.heartbeat.interval.ms"] == 7000


@pytest.mark.parametrize("props,message", [
    ({"nope": "1"}, "Unknown group config name: nope"),
    ({"consumer.session.timeout.ms": "abc"}, "consumer.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "0"}, "consumer.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "44999"},
     "consumer.session.timeout.ms must be greater than or equal to group.consumer.min.session.timeout.ms"),
    ({"consumer.session.timeout.ms": "60001"},
     "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms"),
    ({"consumer.heartbeat.interval.ms": "4999"},
     "consumer.heartbeat.interval.ms must be greater than or equal to group.consumer.min.heartbeat.interval.ms"),
    ({"share.heartbeat.interval.ms": "15001"},
     "share.heartbeat.interval.ms must be less than or equal to group.share.max.heartbeat.interval.ms"),
    ({"share.record.lock.duration.ms": "14999"},
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ({"share.delivery.count.limit": "11"},
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ({"share.partition.max.record.locks": "99"}, "share.partition.max.record.locks"),
    ({"share.auto.offset.reset": "newest"}, "share.auto.offset.reset"),
    ({"share.auto.offset.reset": "by_duration:1h"}, "share.auto.offset.reset"),
    ({"share.isolation.level": "committed"}, "share.isolation.level"),
])
def test_invalid_group_configs(props, message):
    with pytest.raises(GroupConfigError, match=message):
        validate_group_config(props, broker())


def test_session_must_exceed_heartbeat_with_wider_broker_bounds():
    b = broker("group.consumer.min.session.timeout.ms=1000", "group.consumer.session.timeout.ms=10000")
    validate_group_config({"consumer.session.timeout.ms": "6000"}, b)
    with pytest.raises(GroupConfigError, match="consumer.session.timeout.ms must be greater than "
                                               "consumer.heartbeat.interval.ms"):
        validate_group_config({"consumer.session.timeout.ms": "5000"}, b)


def test_broker_bounds_are_checked_at_start():
    with pytest.raises(ConfigError, match="group.consumer.heartbeat.interval.ms must be less than or equal to "
                                          "group.consumer.max.heartbeat.interval.ms"):
        broker("group.consumer.heartbeat.interval.ms=20000")
    with pytest.raises(ConfigError, match="group.share.heartbeat.interval.ms must be less than "
                                          "group.share.session.timeout.ms"):
        broker("group.share.min.session.timeout.ms=1000", "group.share.session.timeout.ms=5000")


def test_group_entries_sources_and_filter():
    b = broker()
    entries = group_entries(b, {"consumer.session.timeout.ms": "50000"}, include_synonyms=True,
                            include_documentation=True)
    assert [e.name for e in entries] == list(GROUP_CONFIG_NAMES)
    first = entries[0]
    assert (first.value, first.source, first.read_only, first.config_type) == ("50000", GROUP_CONFIG, False, 3)
    assert [(s.name, s.value, s.source) for s in first.synonyms] == [("consumer.session.timeout.ms", "50000", 8)]
    assert first.documentation
    assert (entries[1].value, entries[1].source) == ("5000", DEFAULT_CONFIG)
    only = group_entries(b, {}, keys=["share.session.timeout.ms"])
    assert [(e.name, e.synonyms, e.documentation) for e in only] == [("share.session.timeout.ms", [], None)]


def test_share_string_configs():
    b = broker()
    for value in ("latest", "earliest", "by_duration:PT1H", "by_duration:P1DT2H"):
        validate_group_config({"share.auto.offset.reset": value}, b)
    validate_group_config({"share.isolation.level": "read_committed"}, b)
    got = effective_group_config(b, {"share.auto.offset.reset": "earliest", "share.delivery.count.limit": "3"})
    assert got["share.auto.offset.reset"] == "earliest" and got["share.delivery.count.limit"] == 3
    types = {e.name: e.config_type for e in group_entries(b, {})}
    assert types["share.auto.offset.reset"] == 2 and types["share.delivery.count.limit"] == 3  # STRING, INT
