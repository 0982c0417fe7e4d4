"""DescribeConfigs entries and dynamic broker configs, as Kafka's ConfigHelper and
DynamicBrokerConfig compute them.

* Sources (DescribeConfigsResponse ConfigSource ids): TOPIC_CONFIG 1,
  DYNAMIC_BROKER_CONFIG 2, DYNAMIC_DEFAULT_BROKER_CONFIG 3, STATIC_BROKER_CONFIG 4,
  DEFAULT_CONFIG 5, GROUP_CONFIG 8.
* Synonyms of a broker property (``DynamicBrokerConfig.brokerConfigSynonyms``):
  ``log.retention.ms|minutes|hours``, ``log.roll.ms|hours``, ``log.roll.jitter.ms|hours``
  and ``log.flush.interval.ms`` + ``log.flush.scheduler.interval.ms``; every other
  property is its own only synonym. Synonyms are listed by layer (dynamic per-broker,
  dynamic cluster default, static, Kafka default), then everything before the first entry
  named like the described property is dropped (Kafka's ``dropWhile``: a topic whose
  broker default comes from ``log.retention.hours`` alone shows no synonym and
  DEFAULT_CONFIG, exactly as Kafka does).
* A topic entry's synonyms are its own override (TOPIC_CONFIG) followed by those of its
  highest-priority broker property (``ServerTopicConfigSynonyms.TOPIC_CONFIG_SYNONYMS``);
  its source is the first synonym's, else DEFAULT_CONFIG.
* Dynamic broker configs: the broker ``log.*`` defaults that Kafka's
  ``DynamicLogConfig.ReconfigurableConfigs`` lists (the highest-priority broker synonym
  of every topic property but ``message.format.version``) and that Chronolog knows.
  Anything else is refused as Kafka refuses it ("Cannot update these configs
  dynamically: ..."; the broker answers INVALID_REQUEST).
* Eligible leader replicas (KIP-966), on in every Kafka cluster created by 4.1 or later:
  the cluster-level ``min.insync.replicas`` always exists (written with the static value
  when missing, and a per-broker one removed: Kafka's ``maybeGenerateElrSafetyRecords``),
  so every topic reports it as a DYNAMIC_DEFAULT_BROKER_CONFIG; it cannot be removed,
  and a broker-level one cannot be set (INVALID_CONFIG; ``elr_alter_error``).
"""

from __future__ import annotations

from typing import Any, Mapping, NamedTuple, Optional

from config.properties import ConfigError, ConfigType as T, value_to_string
from config.topic_config import (
    TOPIC_CONFIG_NAMES,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_KEYS,
    TopicConfig,
)

TOPIC_CONFIG = 1
DYNAMIC_BROKER_CONFIG = 2
DYNAMIC_DEFAULT_BROKER_CONFIG = 3
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
GROUP_CONFIG = 8
SOURCE_NAMES = {
    TOPIC_CONFIG: "TOPIC_CONFIG",
    DYNAMIC_BROKER_CONFIG: "DYNAMIC_BROKER_CONFIG",
    DYNAMIC_DEFAULT_BROKER_CONFIG: "DYNAMIC_DEFAULT_BROKER_CONFIG",
    STATIC_BROKER_CONFIG: "STATIC_BROKER_CONFIG",
    DEFAULT_CONFIG: "DEFAULT_CONFIG",
    GROUP_CONFIG: "GROUP_CONFIG",
}

# DescribeConfigsResponse.ConfigType ids
CONFIG_TYPE_IDS = {T.BOOLEAN: 1, T.STRING: 2, T.INT: 3, T.SHORT: 4, T.LONG: 5, T.DOUBLE: 6, T.LIST: 7, T.PASSWORD: 9}

_TOPIC_KEYS = {k.name: k for k in TOPIC_KEYS}

# Short descriptions (our words) of the topic properties; the broker log.* synonyms
# describe themselves as the default of the topic property.
TOPIC_DOCS: dict[str, str] = {
    "segment.bytes": "Size in bytes at which a log segment is rolled.",
    "segment.ms": "Time after which a segment is rolled even if not full, measured on message timestamps.",
    "segment.jitter.ms": "Maximum random jitter subtracted from segment.ms to avoid rolling every segment at once.",
    "segment.index.bytes": "Size in bytes of the offset and time indexes of a segment.",
    "flush.messages": "Number of messages written to a partition before its log is fsynced.",
    "flush.ms": "Maximum time data stays unflushed before the log is fsynced.",
    "retention.bytes": "Maximum size of a partition before old segments are deleted (-1: no limit).",
    "retention.ms": "Retention by time: maximum age of a segment's largest timestamp before the segment is deleted (-1: no limit).",
    "max.message.bytes": "Largest record batch size accepted after compression.",
    "index.interval.bytes": "How many bytes of log lie between two offset index entries.",
    "delete.retention.ms": "How long delete tombstones are kept on compacted topics.",
    "min.compaction.lag.ms": "Minimum time a message stays uncompacted.",
    "max.compaction.lag.ms": "Maximum time a message stays ineligible for compaction.",
    "file.delete.delay.ms": "Time to wait before deleting the files of a deleted segment.",
    "min.cleanable.dirty.ratio": "Dirty/total ratio above which the log cleaner compacts a log.",
    "cleanup.policy": "delete and/or compact: what happens to old segments.",
    "compaction.strategy": "KIP-280: which record of a key compaction keeps: offset (the last written), timestamp "
                           "(the highest timestamp, ties by offset) or header (the highest 8-byte big-endian value "
                           "of compaction.strategy.header; records without it lose).",
    "compaction.strategy.header": "KIP-280: the header the header strategy orders by (empty: offset order).",
    "unclean.leader.election.enable": "Whether an out-of-sync replica may become leader.",
    "min.insync.replicas": "Minimum number of in-sync replicas for acks=all produces.",
    "compression.type": "Final compression of the topic's data (producer keeps the producer's codec).",
    "compression.gzip.level": "Compression level when compression.type is gzip.",
    "compression.lz4.level": "Compression level when compression.type is lz4.",
    "compression.zstd.level": "Compression level when compression.type is zstd.",
    "preallocate": "Whether segment files are preallocated.",
    "message.format.version": "Deprecated message format version (ignored for inter-broker protocol 3.0 and later).",
    "message.timestamp.type": "CreateTime keeps the producer's timestamps; LogAppendTime stamps the broker's time.",
    "message.timestamp.difference.max.ms": "Deprecated: largest allowed difference between a CreateTime timestamp and the broker's time.",
    "message.timestamp.before.max.ms": "How far in the past a CreateTime timestamp may lie.",
    "message.timestamp.after.max.ms": "How far in the future a CreateTime timestamp may lie.",
    "leader.replication.throttled.replicas": "Replicas whose leader-side replication is throttled.",
    "follower.replication.throttled.replicas": "Replicas whose follower-side replication is throttled.",
    "message.downconversion.enable": "Whether fetches of older clients are down-converted.",
    "remote.storage.enable": "Whether tiered storage is enabled for the topic.",
    "local.retention.ms": "Local retention time with tiered storage (-2: retention.ms).",
    "local.retention.bytes": "Local retention size with tiered storage (-2: retention.bytes).",
    "remote.log.copy.disable": "Whether copying segments to remote storage is disabled.",
    "remote.log.delete.on.disable": "Whether remote data is deleted when tiered storage is disabled.",
}

_BROKER_TO_TOPIC = {v: k for k, v in TOPIC_CONFIG_SYNONYMS.items()}

# Kafka's DynamicBrokerConfig.AllDynamicConfigs, by the component that reconfigures itself:
# LogCleaner.ReconfigurableConfigs (message.max.bytes is a topic synonym already),
LOG_CLEANER_RECONFIGURABLE: frozenset[str] = frozenset({
    "log.cleaner.threads", "log.cleaner.dedupe.buffer.size", "log.cleaner.io.buffer.load.factor",
    "log.cleaner.io.buffer.size", "log.cleaner.io.max.bytes.per.second", "log.cleaner.backoff.ms",
})
# DynamicThreadPool, metric reporters, DynamicProducerStateManagerConfig, DynamicRemoteLogConfig,
OTHER_RECONFIGURABLE: frozenset[str] = frozenset({
    "num.io.threads", "num.replica.fetchers", "num.recovery.threads.per.data.dir", "background.threads",
    "metric.reporters", "producer.id.expiration.ms", "transaction.partition.verification.enable",
    # DynamicConfig.Broker's quota for moves between log dirs (ReplicaAlterLogDirsThread)
    "replica.alter.log.dirs.io.max.bytes.per.second",
    "remote.log.index.file.cache.total.size.bytes", "remote.fetch.max.wait.ms",
    "remote.log.manager.copy.max.bytes.per.second", "remote.log.manager.fetch.max.bytes.per.second",
    "remote.list.offsets.request.timeout.ms",
})
# SocketServer.ReconfigurableConfigs,
SOCKET_SERVER_RECONFIGURABLE: frozenset[str] = frozenset({
    "max.connections.per.ip", "max.connections.per.ip.overrides", "max.connections", "max.connection.creation.rate",
})
# DynamicListenerConfig.ReconfigurableConfigs (per broker but for the cluster-level three)
# but for ``listeners`` and ``listener.security.protocol.map``: Chronolog binds its
# listeners at start only, so those two are read-only here (a deliberate difference).
# ``advertised.listeners`` is read-only as in Kafka 4.0+ (KAFKA-18405 took it out of the
# KRaft broker's reconfigurable configs),
LISTENER_RECONFIGURABLE: frozenset[str] = frozenset({
    "principal.builder.class",
    "ssl.protocol", "ssl.provider", "ssl.cipher.suites", "ssl.enabled.protocols", "ssl.keystore.type",
    "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password", "ssl.truststore.type",
    "ssl.truststore.location", "ssl.truststore.password", "ssl.keymanager.algorithm", "ssl.trustmanager.algorithm",
    "ssl.endpoint.identification.algorithm", "ssl.secure.random.implementation", "ssl.client.auth",
    "ssl.engine.factory.class", "sasl.mechanism.inter.broker.protocol", "sasl.jaas.config", "sasl.enabled.mechanisms",
    "sasl.kerberos.service.name", "sasl.kerberos.kinit.cmd", "sasl.kerberos.ticket.renew.window.factor",
    "sasl.kerberos.ticket.renew.jitter", "sasl.kerberos.min.time.before.relogin",
    "sasl.kerberos.principal.to.local.rules", "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter",
    "sasl.login.refresh.min.period.seconds", "sasl.login.refresh.buffer.seconds", "max.connections",
    "max.connection.creation.rate", "num.network.threads",
})
CLUSTER_LEVEL_LISTENER_CONFIGS: frozenset[str] = frozenset({
    "max.connections", "max.connection.creation.rate", "num.network.threads"})


# DynamicLogConfig.ReconfigurableConfigs (the topic properties' broker synonyms but for
# message.format.version) and the rest above, restricted to the properties Chronolog knows.
def _dynamic_names() -> frozenset[str]:
    from config.broker_config import BROKER_KEYS

    known = {k.name for k in BROKER_KEYS}
    log_configs = {v for k, v in TOPIC_CONFIG_SYNONYMS.items() if k != "message.format.version"}
    every = log_configs | LOG_CLEANER_RECONFIGURABLE | OTHER_RECONFIGURABLE | SOCKET_SERVER_RECONFIGURABLE \
        | LISTENER_RECONFIGURABLE
    return frozenset(n for n in every if n in known)


DYNAMIC_BROKER_CONFIGS: frozenset[str] = _dynamic_names()

# SslConfigs.RECONFIGURABLE_CONFIGS: a listener's key and trust material, updatable per
# broker with the listener prefix only (``listener.name.<l>.ssl.keystore.location``).
SSL_RECONFIGURABLE: frozenset[str] = frozenset({
    "ssl.keystore.type", "ssl.keystore.location", "ssl.keystore.password", "ssl.key.password",
    "ssl.truststore.type", "ssl.truststore.location", "ssl.truststore.password",
    "ssl.keystore.certificate.chain", "ssl.keystore.key", "ssl.truststore.certificates",
})


def listener_ssl_name(name: str) -> Optional[tuple[str, str]]:
    """``listener.name.ssl.ssl.keystore.location`` -> ("SSL", "ssl.keystore.location") for
    a reconfigurable TLS property given with a listener prefix, else None."""
    from config.broker_config import listener_property_key

    lk = listener_property_key(name)
    if lk is None or lk[1] not in SSL_RECONFIGURABLE:
        return None
    return lk[0], lk[1]


def is_dynamic(name: str) -> bool:
    """Whether a broker property may be changed through (Incremental)AlterConfigs: one of
    Kafka's dynamic broker configs, or a listener-prefixed one (``listener.name.<l>.``)."""
    from config.broker_config import listener_property_key

    if name in DYNAMIC_BROKER_CONFIGS:
        return True
    return listener_property_key(name) is not None


def is_per_broker(name: str) -> bool:
    """DynamicBrokerConfig.perBrokerConfigs: TLS key material and listener configs can be
    set for one broker only, not as a cluster default (except max.connections,
    max.connection.creation.rate and num.network.threads)."""
    from config.broker_config import listener_property_key

    lk = listener_property_key(name)
    base = lk[1] if lk is not None else name
    if lk is not None:
        return base not in CLUSTER_LEVEL_LISTENER_CONFIGS
    return (name in SSL_RECONFIGURABLE or name in LISTENER_RECONFIGURABLE) and name not in CLUSTER_LEVEL_LISTENER_CONFIGS


def dynamic_update_mode(name: str) -> str:
    """Kafka's dynamicConfigUpdateModes: "per-broker", "cluster-wide" or "read-only"."""
    if not is_dynamic(name):
        return "read-only"
    return "per-broker" if is_per_broker(name) else "cluster-wide"


def broker_config_synonyms(name: str) -> list[str]:
    """DynamicBrokerConfig.brokerConfigSynonyms: a listener-prefixed name has the
    broker-wide name as its synonym."""
    from config.broker_config import listener_property_key

    lk = listener_property_key(name)
    if lk is not None:
        return [name, lk[1]]
    if name in ("log.roll.ms", "log.roll.hours"):
        return ["log.roll.ms", "log.roll.hours"]
    if name in ("log.roll.jitter.ms", "log.roll.jitter.hours"):
        return ["log.roll.jitter.ms", "log.roll.jitter.hours"]
    if name == "log.flush.interval.ms":
        return ["log.flush.interval.ms", "log.flush.scheduler.interval.ms"]
    if name in ("log.retention.ms", "log.retention.minutes", "log.retention.hours"):
        return ["log.retention.ms", "log.retention.minutes", "log.retention.hours"]
    return [name]


def broker_doc(name: str) -> Optional[str]:
    topic = _BROKER_TO_TOPIC.get(name)
    if topic is None:
        for t, b in TOPIC_CONFIG_SYNONYMS.items():
            if name in broker_config_synonyms(b):
                topic = t
                break
    if topic is not None and topic in TOPIC_DOCS:
        return f"The default {topic} of topics without their own setting. {TOPIC_DOCS[topic]}"
    return None


class Synonym(NamedTuple):
    name: str
    value: Optional[str]
    source: int


class Entry(NamedTuple):
    name: str
    value: Optional[str]
    source: int
    is_sensitive: bool
    read_only: bool
    synonyms: list  # [Synonym]
    config_type: int
    documentation: Optional[str]


# ---------------------------------------------------------------------- broker layers

def _broker_keys():
    from config.broker_config import BROKER_KEYS

    return {k.name: k for k in BROKER_KEYS}


def static_broker_values(static_cfg) -> dict[str, str]:
    """Properties set in the file, env or overrides (Kafka's staticBrokerConfigs), the
    listener-prefixed ones included."""
    from config.broker_config import broker_key

    out = {}
    for name in static_cfg.explicit_properties():
        key = broker_key(name)
        if key is None:
            continue
        v = value_to_string(static_cfg.get(name), key.type)
        if v is not None:
            out[name] = v
    return out


def default_broker_values() -> dict[str, str]:
    """Kafka's staticDefaultConfigs: every property with a non-null default."""
    return {n: value_to_string(k.default, k.type) for n, k in _broker_keys().items() if k.default is not None}


class BrokerLayers:
    """The four layers a broker property's value can come from."""

    def __init__(self, static_cfg, dynamic_default: Mapping[str, str] | None = None,
                 dynamic_broker: Mapping[str, str] | None = None) -> None:
        self.static_cfg = static_cfg
        self.dynamic_broker = dict(dynamic_broker or {})
        self.dynamic_default = dict(dynamic_default or {})
        self.static = static_broker_values(static_cfg) if static_cfg is not None else {}
        self.defaults = default_broker_values()

    def synonyms(self, name: str) -> list[Synonym]:
        names = broker_config_synonyms(name)
        out: list[Synonym] = []
        for layer, source in ((self.dynamic_broker, DYNAMIC_BROKER_CONFIG),
                              (self.dynamic_default, DYNAMIC_DEFAULT_BROKER_CONFIG),
                              (self.static, STATIC_BROKER_CONFIG),
                              (self.defaults, DEFAULT_CONFIG)):
            for n in names:
                if n in layer:
                    out.append(Synonym(n, layer[n], source))
        while out and out[0].name != name:  # Kafka's dropWhile
            out.pop(0)
        return out


def effective_broker_config(static_cfg, dynamic_default: Mapping[str, str] | None = None,
                            dynamic_broker: Mapping[str, str] | None = None):
    """The static config with the dynamic cluster defaults, then the dynamic per-broker
    values laid over it. Raises ConfigError for an invalid value or combination."""
    from config.broker_config import BrokerConfig

    if not dynamic_default and not dynamic_broker:
        return static_cfg
    static = static_broker_values(static_cfg)
    cfg = BrokerConfig.from_layers([
        ("static", static),
        ("dynamic_default", dict(dynamic_default or {})),
        ("dynamic", dict(dynamic_broker or {})),
    ])
    # keep what the static config knew about unknown / ignored properties
    cfg._unknown = dict(static_cfg.unknown_properties)
    cfg._ignored = dict(static_cfg.ignored_properties)
    return cfg


class DynamicConfigError(Exception):
    """A dynamic broker config change Kafka refuses (answered INVALID_REQUEST)."""


#: the config eligible leader replicas (KIP-966) keep at the cluster level
ELR_MIN_ISR = "min.insync.replicas"


def elr_safety_configs(static_min_isr: int, per_broker: Mapping[str, str],
                       default: Mapping[str, str]) -> Optional[tuple[dict, dict]]:
    """Kafka's ``ConfigurationControlManager.maybeGenerateElrSafetyRecords``, run when the
    node starts: the new (per-broker, cluster default) dynamic configs with a
    cluster-level ``min.insync.replicas`` (the static value) and none per broker, or None
    when they already are so."""
    if ELR_MIN_ISR in default and ELR_MIN_ISR not in per_broker:
        return None
    new_default = dict(default)
    new_default.setdefault(ELR_MIN_ISR, str(int(static_min_isr)))
    return {k: v for k, v in per_broker.items() if k != ELR_MIN_ISR}, new_default


def elr_alter_error(per_broker: bool, named, current: Mapping[str, str],
                    new: Mapping[str, Optional[str]]) -> Optional[str]:
    """Kafka's ELR checks of a broker config change (``validateAlterConfig``), or None:
    a broker-level ``min.insync.replicas`` may not be named at all, the cluster-level one
    may not be removed (deleted, or left out of a whole new set)."""
    if per_broker:
        if ELR_MIN_ISR in named:
            return f"Broker-level {ELR_MIN_ISR} cannot be altered while ELR is enabled."
        return None
    if new.get(ELR_MIN_ISR) is None and (ELR_MIN_ISR in named or ELR_MIN_ISR in current):
        return f"Cluster-level {ELR_MIN_ISR} cannot be removed while ELR is enabled."
    return None


def validate_dynamic_update(props: Mapping[str, Optional[str]], per_broker: bool = True) -> None:
    """DynamicBrokerConfig.validateConfigs: names must be dynamically updatable (TLS key
    material only with a listener prefix), per-broker ones only for one broker, not as
    the cluster default; values must parse (ConfigError)."""
    from config.broker_config import broker_key

    def refuse(names, why):
        if names:
            raise DynamicConfigError(why + ": Set(" + ", ".join(sorted(names)) + ")")

    refuse([n for n in props if not is_dynamic(n) and n not in SSL_RECONFIGURABLE],
           "Cannot update these configs dynamically")
    refuse([n for n in props if n in SSL_RECONFIGURABLE],
           "These security configs can be dynamically updated only per-listener using the listener prefix")
    for n, v in props.items():
        if v is not None:
            broker_key(n).parse(v)
    if not per_broker:
        refuse([n for n in props if is_per_broker(n)],
               "Cannot update these configs at default cluster level, broker id must be specified")


# ---------------------------------------------------------------------- entries

def topic_entries(topic_cfg: TopicConfig, overrides: Mapping[str, str], layers: BrokerLayers,
                  keys=None, include_synonyms: bool = False, include_documentation: bool = False) -> list[Entry]:
    """ConfigHelper.createTopicConfigEntry for every topic property (or ``keys``)."""
    values = {e.name: e.value for e in topic_cfg.describe(overrides)}
    wanted = None if not keys else set(keys)
    out = []
    for name in TOPIC_CONFIG_NAMES:
        if wanted is not None and name not in wanted:
            continue
        key = _TOPIC_KEYS[name]
        value = values.get(name)
        syns: list[Synonym] = []
        if name in overrides:
            syns.append(Synonym(name, value, TOPIC_CONFIG))
        primary = TOPIC_CONFIG_SYNONYMS.get(name)
        if primary is not None:
            syns.extend(layers.synonyms(primary))
        source = syns[0].source if syns else DEFAULT_CONFIG
        out.append(Entry(name, value, source, False, False, syns if include_synonyms else [],
                         CONFIG_TYPE_IDS.get(key.type, 0),
                         TOPIC_DOCS.get(name) if include_documentation else None))
    return out


def group_entries(broker_cfg, overrides: Mapping[str, str], keys=None, include_synonyms: bool = False,
                  include_documentation: bool = False) -> list[Entry]:
    """ConfigHelper.createGroupConfigEntry for every group config (or ``keys``): the
    group's override (GROUP_CONFIG) else the broker's default (DEFAULT_CONFIG), its one
    synonym the entry itself."""
    from config.group_config import GROUP_CONFIG_NAMES, GROUP_DOCS, effective_group_config, group_config_type

    values = effective_group_config(broker_cfg, overrides)
    wanted = None if not keys else set(keys)
    out = []
    for name in GROUP_CONFIG_NAMES:
        if wanted is not None and name not in wanted:
            continue
        value = str(values[name])
        source = GROUP_CONFIG if name in overrides else DEFAULT_CONFIG
        out.append(Entry(name, value, source, False, False,
                         [Synonym(name, value, source)] if include_synonyms else [],
                         CONFIG_TYPE_IDS[group_config_type(name)],
                         GROUP_DOCS.get(name) if include_documentation else None))
    return out


def broker_entries(effective_cfg, layers: BrokerLayers, per_broker: bool, keys=None,
                   include_synonyms: bool = False, include_documentation: bool = False) -> list[Entry]:
    """ConfigHelper.createBrokerConfigEntry: every property of this broker
    (``per_broker``), or the dynamic cluster defaults only (resource name "")."""
    from config.broker_config import broker_key

    bkeys = _broker_keys()
    if per_broker:  # every property, and the listener-prefixed ones that are set
        prefixed = {n for layer in (layers.static, layers.dynamic_broker) for n in layer if n not in bkeys}
        names = sorted(bkeys) + sorted(prefixed)
    else:
        names = sorted(layers.dynamic_default)
    wanted = None if not keys else set(keys)
    out = []
    for name in names:
        if wanted is not None and name not in wanted:
            continue
        key = broker_key(name)
        if key is None:
            continue
        if per_broker:
            value = value_to_string(effective_cfg.get(name), key.type)
        else:
            value = layers.dynamic_default[name]
        syns = layers.synonyms(name)
        if not per_broker:
            syns = [s for s in syns if s.source == DYNAMIC_DEFAULT_BROKER_CONFIG]
        source = syns[0].source if syns else DEFAULT_CONFIG
        sensitive = key.type == T.PASSWORD
        if sensitive:  # Kafka never returns a password's value, nor a synonym's
            value = None
            syns = [Synonym(s.name, None, s.source) for s in syns]
        out.append(Entry(name, value, source, sensitive, not is_dynamic(name),
                         syns if include_synonyms else [], CONFIG_TYPE_IDS.get(key.type, 0),
                         broker_doc(name) if include_documentation else None))
    return out


# ---------------------------------------------------------------------- incremental ops

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


def _split(value: Optional[str]) -> list[str]:
    if value is None or value == "":
        return []
    return [v.strip() for v in value.split(",")]


def apply_incremental(current: Mapping[str, str], ops, type_of, current_value_of) -> dict[str, str]:
    """ConfigAdminManager.prepareIncrementalConfigs: ``ops`` are (name, op, value);
    ``type_of(name)`` the ConfigType (None: unknown name); ``current_value_of(name)`` the
    value an APPEND/SUBTRACT starts from when ``current`` lacks the name. Raises
    ConfigError (INVALID_CONFIG) for APPEND/SUBTRACT on a non-list property."""
    props = dict(current)
    for name, op, value in ops:
        if op == SET:
            props[name] = value
        elif op == DELETE:
            props.pop(name, None)
        elif op in (APPEND, SUBTRACT):
            t = type_of(name)
            if t is None:
                raise ConfigError(name, value, f"Unknown config name: {name}")
            if t != T.LIST:
                verb = "append" if op == APPEND else "subtract"
                raise ConfigError(name, value, f"Config value {verb} is not allowed for config key: {name}")
            old = _split(props[name] if name in props else current_value_of(name))
            items = _split(value)
            if op == APPEND:
                new = old + [v for v in items if v not in old]
            else:
                new = [v for v in old if v not in items]
            props[name] = ",".join(new)
        else:
            raise DynamicConfigError(f"Unknown operations type {op}")
    return props
