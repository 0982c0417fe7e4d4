"""Per-topic configuration (Kafka's ``LogConfig``) with Kafka's topic property names.

Resolution follows Kafka: a topic override wins over the broker's ``log.*`` synonym,
which wins over Kafka's default. ``message.timestamp.before.max.ms`` /
``message.timestamp.after.max.ms`` are resolved against
``message.timestamp.difference.max.ms`` exactly as ``LogConfig`` does: while one of them
still has its default (Long.MAX_VALUE) the difference value is used instead.
``max.message.time.difference.ms`` (KIP-32's name) is accepted as an alias of
``message.timestamp.difference.max.ms``.
"""

from __future__ import annotations

import functools
import re
from typing import Any, Mapping, NamedTuple, Optional

from pydantic import BaseModel, ConfigDict, PrivateAttr, model_validator

from config.properties import (
    LONG_MAX,
    ConfigError,
    ConfigKey,
    ConfigType as T,
    Range,
    ValidList,
    ValidString,
    value_to_string,
)

__all__ = [
    "TopicConfig",
    "ConfigEntry",
    "TOPIC_KEYS",
    "TOPIC_CONFIG_NAMES",
    "TOPIC_CONFIG_ALIASES",
    "TOPIC_CONFIG_SYNONYMS",
    "ALL_TOPIC_CONFIG_SYNONYMS",
    "COMPRESSION_TYPES",
    "RECORD_OVERHEAD_V0",
]

RECORD_OVERHEAD_V0 = 14  # LegacyRecord.RECORD_OVERHEAD_V0: crc 4 + magic 1 + attrs 1 + key len 4 + value len 4
LOG_OVERHEAD = 12  # Records.LOG_OVERHEAD: offset 8 + size 4
DEFAULT_MAX_MESSAGE_BYTES = 1024 * 1024 + LOG_OVERHEAD
DEFAULT_SEGMENT_BYTES = 1024 * 1024 * 1024
DEFAULT_SEGMENT_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_RETENTION_MS = 7 * 24 * 60 * 60 * 1000
DEFAULT_DELETE_RETENTION_MS = 24 * 60 * 60 * 1000
DEFAULT_INDEX_SIZE_MAX_BYTES = 10 * 1024 * 1024
DEFAULT_INDEX_INTERVAL_BYTES = 4096
DEFAULT_FILE_DELETE_DELAY_MS = 60_000
DEFAULT_MESSAGE_FORMAT_VERSION = "3.0-IV1"
COMPRESSION_TYPES = ("uncompressed", "zstd", "lz4", "snappy", "gzip", "producer")
TIMESTAMP_TYPES = ("CreateTime", "LogAppendTime")
CLEANUP_POLICIES = ("compact", "delete")
#: KIP-280 (accepted in Kafka, never shipped there): which record of a key compaction keeps
COMPACTION_STRATEGIES = ("offset", "timestamp", "header")

# Kafka's MetadataVersion (IBP) versions: release -> its IV suffixes. A release alone
# means its latest IV.
_IBP_RELEASES: dict[str, tuple[str, ...]] = {
    "0.8.0": (), "0.8.1": (), "0.8.2": (), "0.9.0": (), "0.10.0": ("IV0", "IV1"),
    "0.10.1": ("IV0", "IV1", "IV2"), "0.10.2": ("IV0",), "0.11.0": ("IV0", "IV1", "IV2"), "1.0": ("IV0",),
    "1.1": ("IV0",), "2.0": ("IV0", "IV1"), "2.1": ("IV0", "IV1", "IV2"), "2.2": ("IV0", "IV1"),
    "2.3": ("IV0", "IV1"), "2.4": ("IV0", "IV1"), "2.5": ("IV0",), "2.6": ("IV0",), "2.7": ("IV0", "IV1", "IV2"),
    "2.8": ("IV0", "IV1"), "3.0": ("IV0", "IV1"), "3.1": ("IV0",), "3.2": ("IV0",), "3.3": ("IV0", "IV1", "IV2", "IV3"),
    "3.4": ("IV0",), "3.5": ("IV0", "IV1", "IV2"), "3.6": ("IV0", "IV1", "IV2"),
    "3.7": ("IV0", "IV1", "IV2", "IV3", "IV4"), "3.8": ("IV0",), "3.9": ("IV0",), "4.0": ("IV0", "IV1", "IV2", "IV3"),
}
IBP_VERSIONS: frozenset[str] = frozenset(
    [r for r in _IBP_RELEASES] + [f"{r}-{iv}" for r, ivs in _IBP_RELEASES.items() for iv in ivs])


def validate_message_format_version(name: str, value: Any) -> None:
    """Kafka's MetadataVersion.fromVersionString: the first three dot-separated parts of a
    0.x version, the first two of a later one, must name a known version
    (``0.10.0.0`` -> ``0.10.0``, ``2.8.1`` -> ``2.8``, ``3.0-IV1`` as is)."""
    text = str(value)
    parts = text.split(".")
    n = 3 if text.startswith("0.") else 2
    key = text if n >= len(parts) else ".".join(parts[:n])
    if key not in IBP_VERSIONS:
        raise ConfigError(name, value, f"Version {text} is not a valid version")


def validate_gzip_level(name: str, value: Any) -> None:
    if value > 9 or (value < 1 and value != -1):
        raise ConfigError(name, value, "Value must be between 1 and 9 or equal to -1")


_THROTTLE_ITEM = re.compile(r"([0-9]+:[0-9]+)?\Z")


def validate_throttled_replicas(name: str, value: Any) -> None:
    items = [v.strip() for v in value]
    if all(_THROTTLE_ITEM.match(i) for i in items) or "".join(items) == "*":
        return
    raise ConfigError(
        name,
        value,
        f"{name} must be the literal '*' or a list of replicas in the following format: "
        "[partitionId]:[brokerId],[partitionId]:[brokerId],...",
    )


# Kafka's LogConfig definitions (name, type, default, validator).
TOPIC_KEYS: tuple[ConfigKey, ...] = (
    ConfigKey("segment.bytes", T.INT, DEFAULT_SEGMENT_BYTES, Range.at_least(RECORD_OVERHEAD_V0)),
    ConfigKey("segment.ms", T.LONG, DEFAULT_SEGMENT_MS, Range.at_least(1)),
    ConfigKey("segment.jitter.ms", T.LONG, 0, Range.at_least(0)),
    ConfigKey("segment.index.bytes", T.INT, DEFAULT_INDEX_SIZE_MAX_BYTES, Range.at_least(4)),
    ConfigKey("flush.messages", T.LONG, LONG_MAX, Range.at_least(1)),
    ConfigKey("flush.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("retention.bytes", T.LONG, -1, None),
    ConfigKey("retention.ms", T.LONG, DEFAULT_RETENTION_MS, Range.at_least(-1)),
    ConfigKey("max.message.bytes", T.INT, DEFAULT_MAX_MESSAGE_BYTES, Range.at_least(0)),
    ConfigKey("index.interval.bytes", T.INT, DEFAULT_INDEX_INTERVAL_BYTES, Range.at_least(0)),
    ConfigKey("delete.retention.ms", T.LONG, DEFAULT_DELETE_RETENTION_MS, Range.at_least(0)),
    ConfigKey("min.compaction.lag.ms", T.LONG, 0, Range.at_least(0)),
    ConfigKey("max.compaction.lag.ms", T.LONG, LONG_MAX, Range.at_least(1)),
    ConfigKey("file.delete.delay.ms", T.LONG, DEFAULT_FILE_DELETE_DELAY_MS, Range.at_least(0)),
    ConfigKey("min.cleanable.dirty.ratio", T.DOUBLE, 0.5, Range.between(0, 1)),
    ConfigKey("cleanup.policy", T.LIST, ["delete"], ValidList(CLEANUP_POLICIES)),
    ConfigKey("compaction.strategy", T.STRING, "offset", ValidString(COMPACTION_STRATEGIES)),
    ConfigKey("compaction.strategy.header", T.STRING, "", None),
    ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, None),
    ConfigKey("min.insync.replicas", T.INT, 1, Range.at_least(1)),
    ConfigKey("compression.type", T.STRING, "producer", ValidString(COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", T.INT, -1, validate_gzip_level),
    ConfigKey("compression.lz4.level", T.INT, 9, Range.between(1, 17)),
    ConfigKey("compression.zstd.level", T.INT, 3, Range.between(-131072, 22)),
    ConfigKey("preallocate", T.BOOLEAN, False, None),
    ConfigKey("message.format.version", T.STRING, DEFAULT_MESSAGE_FORMAT_VERSION, validate_message_format_version),
    ConfigKey("message.timestamp.type", T.STRING, "CreateTime", ValidString(TIMESTAMP_TYPES)),
    ConfigKey("message.timestamp.difference.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("message.timestamp.before.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("message.timestamp.after.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("leader.replication.throttled.replicas", T.LIST, [], validate_throttled_replicas),
    ConfigKey("follower.replication.throttled.replicas", T.LIST, [], validate_throttled_replicas),
    ConfigKey("message.downconversion.enable", T.BOOLEAN, True, None),
    ConfigKey("remote.storage.enable", T.BOOLEAN, False, None),
    ConfigKey("local.retention.ms", T.LONG, -2, Range.at_least(-2)),
    ConfigKey("local.retention.bytes", T.LONG, -2, Range.at_least(-2)),
    ConfigKey("remote.log.copy.disable", T.BOOLEAN, False, None),
    ConfigKey("remote.log.delete.on.disable", T.BOOLEAN, False, None),
)
_KEYS: dict[str, ConfigKey] = {k.name: k for k in TOPIC_KEYS}
TOPIC_CONFIG_NAMES: tuple[str, ...] = tuple(sorted(_KEYS))

# Accepted alternative spellings -> canonical name.
TOPIC_CONFIG_ALIASES: dict[str, str] = {
    "max.message.time.difference.ms": "message.timestamp.difference.max.ms",  # KIP-32's name
}

# ServerTopicConfigSynonyms.ALL_TOPIC_CONFIG_SYNONYMS plus the extra broker synonyms that
# DynamicBrokerConfig.brokerConfigSynonyms adds (the order is Kafka's precedence).
ALL_TOPIC_CONFIG_SYNONYMS: dict[str, tuple[str, ...]] = {
    "segment.bytes": ("log.segment.bytes",),
    "segment.ms": ("log.roll.ms", "log.roll.hours"),
    "segment.jitter.ms": ("log.roll.jitter.ms", "log.roll.jitter.hours"),
    "segment.index.bytes": ("log.index.size.max.bytes",),
    "flush.messages": ("log.flush.interval.messages",),
    "flush.ms": ("log.flush.interval.ms", "log.flush.scheduler.interval.ms"),
    "retention.bytes": ("log.retention.bytes",),
    "retention.ms": ("log.retention.ms", "log.retention.minutes", "log.retention.hours"),
    "max.message.bytes": ("message.max.bytes",),
    "index.interval.bytes": ("log.index.interval.bytes",),
    "delete.retention.ms": ("log.cleaner.delete.retention.ms",),
    "min.compaction.lag.ms": ("log.cleaner.min.compaction.lag.ms",),
    "max.compaction.lag.ms": ("log.cleaner.max.compaction.lag.ms",),
    "file.delete.delay.ms": ("log.segment.delete.delay.ms",),
    "min.cleanable.dirty.ratio": ("log.cleaner.min.cleanable.ratio",),
    "cleanup.policy": ("log.cleanup.policy",),
    "compaction.strategy": ("log.cleaner.compaction.strategy",),
    "compaction.strategy.header": ("log.cleaner.compaction.strategy.header",),
    "unclean.leader.election.enable": ("unclean.leader.election.enable",),
    "min.insync.replicas": ("min.insync.replicas",),
    "compression.type": ("compression.type",),
    "compression.gzip.level": ("compression.gzip.level",),
    "compression.lz4.level": ("compression.lz4.level",),
    "compression.zstd.level": ("compression.zstd.level",),
    "preallocate": ("log.preallocate",),
    "message.format.version": ("log.message.format.version",),
    "message.timestamp.type": ("log.message.timestamp.type",),
    "message.timestamp.difference.max.ms": ("log.message.timestamp.difference.max.ms",),
    "message.timestamp.before.max.ms": ("log.message.timestamp.before.max.ms",),
    "message.timestamp.after.max.ms": ("log.message.timestamp.after.max.ms",),
    "message.downconversion.enable": ("log.message.downconversion.enable",),
    "local.retention.ms": ("log.local.retention.ms",),
    "local.retention.bytes": ("log.local.retention.bytes",),
}
# ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS: the highest-priority broker name.
TOPIC_CONFIG_SYNONYMS: dict[str, str] = {k: v[0] for k, v in ALL_TOPIC_CONFIG_SYNONYMS.items()}


class ConfigEntry(NamedTuple):
    """One DescribeConfigs entry."""

    name: str
    value: Optional[str]
    source: str  # "TOPIC_CONFIG" | "STATIC_BROKER_CONFIG" | "DEFAULT_CONFIG"
    is_sensitive: bool = False
    read_only: bool = False


def validation_rules_of(cfg) -> tuple[bool, int, int, bool, bool, int, int | None]:
    """What the produce validator (storage.validator) checks, from any object with
    TopicConfig's attribute names (a TopicConfig computes it once: ``validation_rules``):
    LogAppendTime topic, the CreateTime window (before, after), whether the window is
    checked at all, compacted (keys required), max.message.bytes, segment.bytes (None: no
    limit)."""
    lat_topic = cfg.message_timestamp_type == "LogAppendTime"
    before = cfg.message_timestamp_before_max_ms
    after = cfg.message_timestamp_after_max_ms
    check_window = not lat_topic and not (before >= LONG_MAX and after >= LONG_MAX)
    seg = getattr(cfg, "segment_bytes", None)
    return (lat_topic, before, after, check_window, bool(getattr(cfg, "compact", False)),
            cfg.max_message_bytes, seg if isinstance(seg, int) else None)


def canonical_topic_config_name(name: str) -> str:
    return TOPIC_CONFIG_ALIASES.get(name, name)


def _normalize_overrides(overrides: Mapping[str, Any] | None) -> dict[str, Any]:
    """Canonical names, unknown names rejected, alias/canonical conflicts rejected."""
    out: dict[str, Any] = {}
    for raw_name, value in (overrides or {}).items():
        name = canonical_topic_config_name(raw_name)
        if name not in _KEYS:
            raise ConfigError(raw_name, value, f"Unknown topic config name: {raw_name}")
        if name in out and _KEYS[name].parse(out[name]) != _KEYS[name].parse(value):
            raise ConfigError(raw_name, value, f"conflicts with {name}={out[name]}")
        out[name] = value
    return out


class TopicConfig(BaseModel):
    """Effective configuration of one topic. Attribute names are the topic property names
    with underscores; construct with :meth:`from_broker` (or directly, for tests)."""

    model_config = ConfigDict(populate_by_name=True, extra="forbid")

    segment_bytes: int = DEFAULT_SEGMENT_BYTES
    segment_ms: int = DEFAULT_SEGMENT_MS
    segment_jitter_ms: int = 0
    segment_index_bytes: int = DEFAULT_INDEX_SIZE_MAX_BYTES
    flush_messages: int = LONG_MAX
    flush_ms: int = LONG_MAX
    retention_bytes: int = -1
    retention_ms: int = DEFAULT_RETENTION_MS
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES
    index_interval_bytes: int = DEFAULT_INDEX_INTERVAL_BYTES
    delete_retention_ms: int = DEFAULT_DELETE_RETENTION_MS
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX
    file_delete_delay_ms: int = DEFAULT_FILE_DELETE_DELAY_MS
    min_cleanable_dirty_ratio: float = 0.5
    cleanup_policy: list[str] = ["delete"]
    compaction_strategy: str = "offset"
    compaction_strategy_header: str = ""
    unclean_leader_election_enable: bool = False
    min_insync_replicas: int = 1
    compression_type: str = "producer"
    compression_gzip_level: int = -1
    compression_lz4_level: int = 9
    compression_zstd_level: int = 3
    preallocate: bool = False
    message_format_version: str = DEFAULT_MESSAGE_FORMAT_VERSION
    message_timestamp_type: str = "CreateTime"
    message_timestamp_difference_max_ms: int = LONG_MAX
    # Effective values (already resolved against message_timestamp_difference_max_ms).
    message_timestamp_before_max_ms: int = LONG_MAX
    message_timestamp_after_max_ms: int = LONG_MAX
    leader_replication_throttled_replicas: list[str] = []
    follower_replication_throttled_replicas: list[str] = []
    message_downconversion_enable: bool = True
    remote_storage_enable: bool = False
    local_retention_ms: int = -2
    local_retention_bytes: int = -2
    remote_log_copy_disable: bool = False
    remote_log_delete_on_disable: bool = False

    # Raw (pre-resolution) values by property name, the topic overrides, and the broker
    # property names that were set explicitly (for describe()).
    _raw: dict = PrivateAttr(default_factory=dict)
    _overrides: dict = PrivateAttr(default_factory=dict)
    _static_broker: frozenset = PrivateAttr(default_factory=frozenset)

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        out: dict[str, Any] = {}
        for key, value in data.items():
            name = canonical_topic_config_name(key)
            if name in _KEYS:
                out[_KEYS[name].attr] = _KEYS[name].parse(value)
            else:
                attr_key = next((k for k in TOPIC_KEYS if k.attr == key), None)
                if attr_key is None:
                    raise ConfigError(key, value, f"Unknown topic config name: {key}")
                out[key] = attr_key.parse(value)
        return out

    @model_validator(mode="after")
    def _check(self) -> "TopicConfig":
        if self.min_compaction_lag_ms > self.max_compaction_lag_ms:
            raise ConfigError(
                "min.compaction.lag.ms",
                self.min_compaction_lag_ms,
                f"conflict topic config setting min.compaction.lag.ms ({self.min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.max_compaction_lag_ms})",
            )
        return self

    def model_post_init(self, __context: Any) -> None:
        if not self._raw:
            self._raw = {k.name: getattr(self, k.attr) for k in TOPIC_KEYS}

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_broker(cls, broker_cfg: Any, overrides: Mapping[str, Any] | None = None) -> "TopicConfig":
        """Topic override > the broker's ``log.*`` synonym > Kafka default.

        ``broker_cfg`` is a :class:`config.BrokerConfig` (or None for Kafka defaults);
        ``overrides`` maps topic property names to string values. Raises
        :class:`ConfigError` for an unknown name or an invalid value."""
        ov = _normalize_overrides(overrides)
        if broker_cfg is not None:
            values: dict[str, Any] = dict(broker_cfg.log_config_defaults())
            static = frozenset(broker_cfg.explicit_properties())
        else:
            values = {k.name: k.default for k in TOPIC_KEYS}
            static = frozenset()
        for name, value in ov.items():
            values[name] = _KEYS[name].parse(value)
        raw = dict(values)
        resolved = dict(values)
        diff = values["message.timestamp.difference.max.ms"]
        for name in ("message.timestamp.before.max.ms", "message.timestamp.after.max.ms"):
            if values[name] == LONG_MAX:
                resolved[name] = diff
        cfg = cls.model_validate({_KEYS[n].attr: v for n, v in resolved.items()})
        cfg._raw = raw
        cfg._overrides = {n: (v if isinstance(v, str) else value_to_string(_KEYS[n].parse(v))) for n, v in ov.items()}
        cfg._static_broker = static
        return cfg

    @classmethod
    def validate_overrides(cls, overrides: Mapping[str, Any]) -> dict[str, str]:
        """Check names and values of topic overrides (no broker needed); returns them
        with canonical names. Raises ConfigError."""
        ov = _normalize_overrides(overrides)
        for name, value in ov.items():
            _KEYS[name].parse(value)
        cls.from_broker(None, ov)  # cross-field checks
        return {n: (v if isinstance(v, str) else value_to_string(_KEYS[n].parse(v))) for n, v in ov.items()}

    # ------------------------------------------------------------------ helpers

    @property
    def overrides(self) -> dict[str, str]:
        return dict(self._overrides)

    # Derived values read on every append: computed once (a TopicConfig is never changed
    # in place; a config change makes a new one).
    @functools.cached_property
    def compact(self) -> bool:
        return "compact" in [p.lower() for p in self.cleanup_policy]

    @functools.cached_property
    def delete(self) -> bool:
        return "delete" in [p.lower() for p in self.cleanup_policy]

    @functools.cached_property
    def max_segment_ms(self) -> int:
        """LogConfig.maxSegmentMs: a compacted topic rolls at least every
        max.compaction.lag.ms, so a record cannot stay in the (never cleaned) active
        segment past its max compaction lag (KIP-354)."""
        if self.compact and self.max_compaction_lag_ms > 0:
            return min(self.max_compaction_lag_ms, self.segment_ms)
        return self.segment_ms

    @functools.cached_property
    def is_log_append_time(self) -> bool:
        return self.message_timestamp_type == "LogAppendTime"

    @functools.cached_property
    def validation_rules(self) -> tuple[bool, int, int, bool, bool, int, int | None]:
        """:func:`validation_rules_of` this config, computed once (read on every append)."""
        return validation_rules_of(self)

    def get(self, name: str) -> Any:
        """Effective value by topic property name (aliases accepted)."""
        name = canonical_topic_config_name(name)
        if name not in _KEYS:
            raise KeyError(name)
        return getattr(self, _KEYS[name].attr)

    def describe(self, overrides: Mapping[str, Any] | None = None) -> list[ConfigEntry]:
        """DescribeConfigs entries for every topic property, sorted by name.

        Values and sources follow Kafka's ConfigHelper: a name present in ``overrides``
        (default: the overrides this config was built with) is TOPIC_CONFIG; otherwise
        STATIC_BROKER_CONFIG when one of the broker synonyms was set explicitly (file,
        env or --override), else DEFAULT_CONFIG. As in Kafka, the before/after values are
        the configured ones (not the difference-resolved effective ones)."""
        ov = _normalize_overrides(overrides) if overrides is not None else dict(self._overrides)
        entries = []
        for name in TOPIC_CONFIG_NAMES:
            key = _KEYS[name]
            value = self._raw.get(name, getattr(self, key.attr))
            if name in ov:
                source = "TOPIC_CONFIG"
            elif any(s in self._static_broker for s in ALL_TOPIC_CONFIG_SYNONYMS.get(name, ())):
                source = "STATIC_BROKER_CONFIG"
            else:
                source = "DEFAULT_CONFIG"
            entries.append(ConfigEntry(name, value_to_string(value, key.type), source, False, False))
        return entries
