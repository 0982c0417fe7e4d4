"""GROUP config resources (ConfigResource type 32), as Kafka's GroupConfig.

A group may override settings of the consumer group protocol (KIP-848) and of share
groups (KIP-932); a group without an override takes the broker's ``group.consumer.*`` /
``group.share.*`` value, or for ``share.auto.offset.reset`` (``latest``, ``earliest``,
``by_duration:<ISO-8601 duration>``) and ``share.isolation.level`` (``read_uncommitted``,
``read_committed``) Kafka's default. Overrides are kept whether or not the group exists (as Kafka),
in ``storage.entity_configs`` (``group-configs``), and changed with
(Incremental)AlterConfigs. Validation is Kafka's ``GroupConfig.validate``: an unknown name
"Unknown group config name: x", a value outside the broker's bounds
"consumer.session.timeout.ms must be greater than or equal to
group.consumer.min.session.timeout.ms", a session timeout not above the heartbeat
interval; each answered INVALID_CONFIG.
"""

from __future__ import annotations

from typing import Mapping, Optional

from config.properties import ConfigError, ConfigKey, ConfigType as T, Range, ValidString

# (name, broker property giving its default, broker min bound, broker max bound)
_GROUP = (
    ("consumer.session.timeout.ms", "group.consumer.session.timeout.ms",
     "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "group.consumer.heartbeat.interval.ms",
     "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms"),
    ("share.session.timeout.ms", "group.share.session.timeout.ms",
     "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms"),
    ("share.heartbeat.interval.ms", "group.share.heartbeat.interval.ms",
     "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms"),
    ("share.record.lock.duration.ms", "group.share.record.lock.duration.ms",
     "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "group.share.delivery.count.limit",
     "group.share.min.delivery.count.limit", "group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "group.share.partition.max.record.locks",
     "group.share.min.partition.max.record.locks", "group.share.max.partition.max.record.locks"),
)
_BROKER_DEFAULT = {g[0]: g[1] for g in _GROUP}
_BOUNDS = {g[0]: (g[2], g[3]) for g in _GROUP}
_MIN = {"share.record.lock.duration.ms": 1000, "share.delivery.count.limit": 2,
        "share.partition.max.record.locks": 100}

SHARE_AUTO_OFFSET_RESET, SHARE_ISOLATION_LEVEL = "share.auto.offset.reset", "share.isolation.level"
_STRING_DEFAULTS = {SHARE_AUTO_OFFSET_RESET: "latest", SHARE_ISOLATION_LEVEL: "read_uncommitted"}


def by_duration_ms(value: str) -> int | None:
    """The milliseconds of a ``by_duration:<ISO-8601 duration>`` reset, None for another
    value or a duration that does not parse or is negative."""
    if not value.startswith("by_duration:"):
        return None
    from broker.tools import UsageError
    from broker.tools.timeparse import parse_duration

    try:
        ms = parse_duration(value[len("by_duration:"):])
    except UsageError:
        return None
    return ms if ms >= 0 else None


def _offset_reset(name, value):
    if value not in ("latest", "earliest") and by_duration_ms(str(value)) is None:
        raise ConfigError(name, value, "String must be one of: latest, earliest, by_duration:<ISO-8601 duration>")


GROUP_KEYS: dict[str, ConfigKey] = {
    name: ConfigKey(name, T.INT, None, Range.at_least(_MIN.get(name, 1))) for name in _BROKER_DEFAULT}
GROUP_KEYS[SHARE_AUTO_OFFSET_RESET] = ConfigKey(SHARE_AUTO_OFFSET_RESET, T.STRING, None, _offset_reset)
GROUP_KEYS[SHARE_ISOLATION_LEVEL] = ConfigKey(SHARE_ISOLATION_LEVEL, T.STRING, None,
                                              ValidString(("read_committed", "read_uncommitted")))
GROUP_CONFIG_NAMES: tuple[str, ...] = tuple(GROUP_KEYS)

GROUP_DOCS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members of a consumer group.",
    "share.session.timeout.ms": "The timeout to detect client failures when using the share group protocol.",
    "share.heartbeat.interval.ms": "The heartbeat interval given to the members of a share group.",
    "share.record.lock.duration.ms": "The record acquisition lock duration in milliseconds for share groups.",
    "share.delivery.count.limit": "The maximum number of delivery attempts for a record delivered to a share group.",
    "share.partition.max.record.locks": "Share-group record lock limit per share-partition.",
    SHARE_AUTO_OFFSET_RESET: "The strategy to initialize the share-partition start offset: latest, earliest or "
                             "by_duration:<ISO-8601 duration> (the first record at or after that long ago).",
    SHARE_ISOLATION_LEVEL: "Controls how to read records written transactionally: read_committed or "
                           "read_uncommitted.",
}


class GroupConfigError(Exception):
    """Kafka's InvalidConfigurationException for a group config (INVALID_CONFIG)."""


def _broker_value(broker_cfg, prop: str) -> int:
    return int(getattr(broker_cfg, prop.replace(".", "_")))


def group_config_type(name: str) -> Optional[str]:
    key = GROUP_KEYS.get(name)
    return None if key is None else key.type


def group_defaults(broker_cfg) -> dict:
    """Kafka's extractGroupConfigMap: each group config's broker default."""
    out: dict = {name: _broker_value(broker_cfg, prop) for name, prop in _BROKER_DEFAULT.items()}
    out.update(_STRING_DEFAULTS)
    return out


def effective_group_config(broker_cfg, overrides: Mapping[str, str]) -> dict:
    """The group's value of every group config: its override, else the broker default."""
    out = group_defaults(broker_cfg)
    for name, value in overrides.items():
        key = GROUP_KEYS.get(name)
        if key is not None:
            out[name] = int(value) if key.type == T.INT else str(value)
    return out


def validate_group_config(overrides: Mapping[str, str], broker_cfg) -> None:
    """GroupConfig.validate on the group's whole new override set."""
    for name in overrides:
        if name not in GROUP_KEYS:
            raise GroupConfigError(f"Unknown group config name: {name}")
    parsed = {}
    for name, value in overrides.items():
        try:
            parsed[name] = GROUP_KEYS[name].parse(value)
        except ConfigError as exc:
            raise GroupConfigError(str(exc)) from None
    values = group_defaults(broker_cfg)
    values.update(parsed)
    for name in ("consumer.heartbeat.interval.ms", "consumer.session.timeout.ms", "share.heartbeat.interval.ms",
                 "share.session.timeout.ms", "share.record.lock.duration.ms", "share.delivery.count.limit",
                 "share.partition.max.record.locks"):  # Kafka's order
        lo, hi = _BOUNDS[name]
        if values[name] < _broker_value(broker_cfg, lo):
            raise GroupConfigError(f"{name} must be greater than or equal to {lo}")
        if values[name] > _broker_value(broker_cfg, hi):
            raise GroupConfigError(f"{name} must be less than or equal to {hi}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise GroupConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
