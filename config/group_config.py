"""GROUP config resources (ConfigResource type 32), as Kafka's GroupConfig.

A group may override five settings of the consumer group protocol (KIP-848) and of share
groups (KIP-932); a group without an override takes the broker's ``group.consumer.*`` /
``group.share.*`` value. Overrides are kept whether or not the group exists (as Kafka),
in ``storage.entity_configs`` (``group-configs``), and changed with
(Incremental)AlterConfigs. Validation is Kafka's ``GroupConfig.validate``: an unknown name
"Unknown group config name: x", a value outside the broker's bounds
"consumer.session.timeout.ms must be greater than or equal to
group.consumer.min.session.timeout.ms", a session timeout not above the heartbeat
interval; each answered INVALID_CONFIG.
"""

from __future__ import annotations

from typing import Mapping, Optional

from config.properties import ConfigError, ConfigKey, ConfigType as T, Range

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
)
GROUP_CONFIG_NAMES: tuple[str, ...] = tuple(g[0] for g in _GROUP)
_BROKER_DEFAULT = {g[0]: g[1] for g in _GROUP}
_BOUNDS = {g[0]: (g[2], g[3]) for g in _GROUP}

GROUP_KEYS: dict[str, ConfigKey] = {
    name: ConfigKey(name, T.INT, None, Range.at_least(1000 if name == "share.record.lock.duration.ms" else 1))
    for name in GROUP_CONFIG_NAMES
}

GROUP_DOCS = {
    "consumer.session.timeout.ms": "The timeout to detect client failures when using the consumer group protocol.",
    "consumer.heartbeat.interval.ms": "The heartbeat interval given to the members of a consumer group.",
    "share.session.timeout.ms": "The timeout to detect client failures when using the share group protocol.",
    "share.heartbeat.interval.ms": "The heartbeat interval given to the members of a share group.",
    "share.record.lock.duration.ms": "The record acquisition lock duration in milliseconds for share groups.",
}


class GroupConfigError(Exception):
    """Kafka's InvalidConfigurationException for a group config (INVALID_CONFIG)."""


def _broker_value(broker_cfg, prop: str) -> int:
    return int(getattr(broker_cfg, prop.replace(".", "_")))


def group_config_type(name: str) -> Optional[str]:
    return T.INT if name in GROUP_KEYS else None


def group_defaults(broker_cfg) -> dict[str, int]:
    """Kafka's extractGroupConfigMap: each group config's broker default."""
    return {name: _broker_value(broker_cfg, prop) for name, prop in _BROKER_DEFAULT.items()}


def effective_group_config(broker_cfg, overrides: Mapping[str, str]) -> dict[str, int]:
    """The group's value of every group config: its override, else the broker default."""
    out = group_defaults(broker_cfg)
    for name, value in overrides.items():
        if name in GROUP_KEYS:
            out[name] = int(value)
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
                 "share.session.timeout.ms", "share.record.lock.duration.ms"):  # Kafka's order
        lo, hi = _BOUNDS[name]
        if values[name] < _broker_value(broker_cfg, lo):
            raise GroupConfigError(f"{name} must be greater than or equal to {lo}")
        if values[name] > _broker_value(broker_cfg, hi):
            raise GroupConfigError(f"{name} must be less than or equal to {hi}")
    for kind in ("consumer", "share"):
        if values[f"{kind}.session.timeout.ms"] <= values[f"{kind}.heartbeat.interval.ms"]:
            raise GroupConfigError(f"{kind}.session.timeout.ms must be greater than {kind}.heartbeat.interval.ms")
