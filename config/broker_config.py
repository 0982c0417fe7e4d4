"""Broker configuration with Kafka's property names.

Load order (later wins): embedded defaults, ``--config server.properties``,
``CHRONOLOG_<PROPERTY>`` environment variables (``log.segment.bytes`` ->
``CHRONOLOG_LOG_SEGMENT_BYTES``), then ``--override key=value``. Values from those
sources are strings, coerced and validated as Kafka's ConfigDef declares them; an invalid
value raises :class:`ConfigError`. Unknown properties are collected (Kafka brokers accept
them) and logged as a warning. Each property's source is recorded.
"""

from __future__ import annotations

import logging
import os
import re
import socket
from typing import Any, Iterable, Mapping, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, create_model, model_validator

from config.properties import (
    INT_MAX,
    LONG_MAX,
    ConfigError,
    ConfigKey,
    ConfigType as T,
    Range,
    ValidList,
    ValidString,
    load_properties,
    value_to_string,
)
from config.topic_config import (
    CLEANUP_POLICIES,
    COMPACTION_STRATEGIES,
    COMPRESSION_TYPES,
    DEFAULT_DELETE_RETENTION_MS,
    DEFAULT_FILE_DELETE_DELAY_MS,
    DEFAULT_INDEX_INTERVAL_BYTES,
    DEFAULT_INDEX_SIZE_MAX_BYTES,
    DEFAULT_MAX_MESSAGE_BYTES,
    DEFAULT_MESSAGE_FORMAT_VERSION,
    DEFAULT_SEGMENT_BYTES,
    RECORD_OVERHEAD_V0,
    TIMESTAMP_TYPES,
    TOPIC_CONFIG_SYNONYMS,
    TOPIC_KEYS,
    TopicConfig,
    canonical_topic_config_name,
    validate_gzip_level,
    validate_message_format_version,
)

__all__ = [
    "BrokerConfig",
    "BROKER_KEYS",
    "IGNORED_KAFKA_PROPERTIES",
    "SOURCES",
    "load_broker_config",
    "env_var_name",
    "parse_listener",
]

log = logging.getLogger("chronolog.config")

ENV_PREFIX = "CHRONOLOG_"
SOURCES = ("default", "file", "env", "override")

_LISTENER_RE = re.compile(r"^(.*)://\[?([0-9a-zA-Z\-%._:]*)\]?:(-?[0-9]+)$")


def parse_listener(name: str, text: str) -> tuple[str, str, int]:
    """``NAME://host:port`` -> (NAME, host, port), as Kafka's EndPoint parser."""
    m = _LISTENER_RE.match(text.strip())
    if not m:
        raise ConfigError(name, text, "Unable to parse " + text + " to a broker endpoint")
    port = int(m.group(3))
    if not 0 <= port <= 65535:
        raise ConfigError(name, text, "port must be between 0 and 65535")
    return m.group(1).upper(), m.group(2), port


def _parse_listener_list(name: str, value: str) -> list[tuple[str, str, int]]:
    items = [s.strip() for s in value.split(",") if s.strip()]
    return [parse_listener(name, s) for s in items]


def validate_listeners(name: str, value: Any) -> None:
    eps = _parse_listener_list(name, value)
    if not eps:
        raise ConfigError(name, value, "at least one listener (NAME://host:port) is needed")
    names = [ep[0] for ep in eps]
    if len(set(names)) != len(names):
        raise ConfigError(name, value, "Each listener must have a different name")
    ports = [ep[2] for ep in eps if ep[2]]
    if len(set(ports)) != len(ports):
        raise ConfigError(name, value, "Each listener must have a different port")


def validate_advertised_listeners(name: str, value: Any) -> None:
    eps = _parse_listener_list(name, value)
    names = [ep[0] for ep in eps]
    if len(set(names)) != len(names):
        raise ConfigError(name, value, "Each listener must have a different name")
    for ep in eps:
        if ep[1] == "0.0.0.0":
            raise ConfigError(
                name, value, "advertised.listeners cannot use the nonroutable meta-address 0.0.0.0. Use a routable IP address."
            )


SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
DEFAULT_PROTOCOL_MAP = "SASL_SSL:SASL_SSL,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT"


def parse_protocol_map(name: str, value: Any) -> dict[str, str]:
    """``INTERNAL:PLAINTEXT,EXTERNAL:SASL_SSL`` -> {"INTERNAL": "PLAINTEXT", ...}."""
    out: dict[str, str] = {}
    for item in (i.strip() for i in str(value or "").split(",")):
        if not item:
            continue
        listener, sep, proto = item.partition(":")
        listener, proto = listener.strip().upper(), proto.strip().upper()
        if not sep or not listener or proto not in SECURITY_PROTOCOLS:
            raise ConfigError(name, value, "Map entry '" + item + "' is not of the form LISTENER_NAME:PROTOCOL "
                              "with PROTOCOL one of " + ", ".join(SECURITY_PROTOCOLS))
        if listener in out:
            raise ConfigError(name, value, "Map entry '" + listener + "' is duplicated")
        out[listener] = proto
    return out


def validate_protocol_map(name: str, value: Any) -> None:
    parse_protocol_map(name, value)


SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
# OAUTHBEARER's server callback handler: Kafka's default, which checks unsecured JWTs, is
# the one Chronolog has (protocol.sasl.OAuthBearerServer)
OAUTH_UNSECURED_VALIDATOR = ("org.apache.kafka.common.security.oauthbearer.internals.unsecured."
                             "OAuthBearerUnsecuredValidatorCallbackHandler")


def validate_mechanisms(name: str, value: Any) -> None:
    for mech in value:
        if mech not in SASL_MECHANISMS:
            raise ConfigError(name, value, f"SASL mechanism {mech} is not supported by Chronolog (supported: "
                              + ", ".join(SASL_MECHANISMS) + ")")


SSL_CLIENT_AUTH = ("required", "requested", "none")
TLS_PROTOCOLS = ("TLSv1.2", "TLSv1.3")
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
ACL_AUTHORIZER = "kafka.security.authorizer.AclAuthorizer"


def validate_tls_protocols(name: str, value: Any) -> None:
    for p in value:
        if p not in TLS_PROTOCOLS:
            raise ConfigError(name, value, f"TLS protocol {p} is not supported (supported: " + ", ".join(TLS_PROTOCOLS) + ")")


CONSUMER_ASSIGNORS = {"uniform": "uniform", "range": "range",
                      "org.apache.kafka.coordinator.group.assignor.UniformAssignor": "uniform",
                      "org.apache.kafka.coordinator.group.assignor.RangeAssignor": "range"}


def validate_migration_policy(name: str, value) -> None:
    """Kafka's CaseInsensitiveValidString over ConsumerGroupMigrationPolicy."""
    from broker.coordinator.classic_members import POLICIES

    if str(value).lower() not in POLICIES:
        raise ConfigError(name, value, "String must be one of (case insensitive): " + ", ".join(POLICIES))


def validate_assignors(name: str, value: Any) -> None:
    if not value:
        raise ConfigError(name, value, "at least one assignor is needed (uniform, range)")
    for a in value:
        if a not in CONSUMER_ASSIGNORS:
            raise ConfigError(name, value, f"unknown assignor {a} (the server-side assignors are uniform and range, "
                                           "or Kafka's UniformAssignor / RangeAssignor class names)")


def validate_authorizer(name: str, value: Any) -> None:
    if value and value not in (STANDARD_AUTHORIZER, ACL_AUTHORIZER):
        raise ConfigError(name, value, "Chronolog's authorizer implements " + STANDARD_AUTHORIZER
                          + " (and the older " + ACL_AUTHORIZER + "); leave it empty for no authorization")


def parse_ip_overrides(name: str, value: Any) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count,host:count``."""
    out: dict[str, int] = {}
    for item in (i.strip() for i in str(value or "").split(",")):
        if not item:
            continue
        host, sep, count = item.rpartition(":")
        try:
            n = int(count)
        except ValueError:
            n = -1
        if not sep or not host or n < 0:
            raise ConfigError(name, value, "entries must be host:count with count >= 0, got '" + item + "'")
        out[host.strip()] = n
    return out


def validate_ip_overrides(name: str, value: Any) -> None:
    parse_ip_overrides(name, value)


LOG_FORMATS = ("text", "json")
LOG_LEVELS = ("CRITICAL", "ERROR", "WARNING", "INFO", "DEBUG")
_LOGGER_NAME_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.\-]*$")


def parse_level_spec(name: str, value: Any) -> tuple[Optional[str], dict[str, str]]:
    """``"INFO,chronolog.produce=DEBUG,storage=WARNING"`` -> ("INFO", {"chronolog.produce":
    "DEBUG", "storage": "WARNING"}): a bare level is the root logger's, ``logger=LEVEL``
    a Python logger's (``root=LEVEL`` is the root too). Levels are case-insensitive;
    WARN is WARNING. Raises ConfigError naming ``name``."""
    rule = "must be LEVEL or logger=LEVEL[,logger=LEVEL...] with LEVEL one of " + ", ".join(LOG_LEVELS)
    root: Optional[str] = None
    per: dict[str, str] = {}
    text = "" if value is None else str(value)
    for item in (i.strip() for i in text.split(",")):
        if not item:
            continue
        logger, sep, level = item.rpartition("=")
        level = level.strip().upper()
        level = "WARNING" if level == "WARN" else level
        logger = logger.strip()
        if level not in LOG_LEVELS or (sep and not _LOGGER_NAME_RE.match(logger)):
            raise ConfigError(name, value, rule)
        if not sep or logger == "root":
            root = level
        else:
            per[logger] = level
    if root is None and not per:
        raise ConfigError(name, value, rule)
    return root, per


def validate_level_spec(name: str, value: Any) -> None:
    parse_level_spec(name, value)


def validate_non_empty_list(name: str, value: Any) -> None:
    if not [v for v in value if v]:
        raise ConfigError(name, value, "At least one log directory must be defined via log.dirs or log.dir.")


_COMPAT = "Accepted, stored and described as Kafka does; it has no effect on this broker."

# Every property BrokerConfig knows: (Kafka name, ConfigDef type, default, validator).
# Defaults are Kafka's except where marked "chronolog".
BROKER_KEYS: tuple[ConfigKey, ...] = (
    # node / network
    ConfigKey("node.id", T.INT, 0, Range.at_least(0)),  # chronolog: Kafka -1
    ConfigKey("broker.id", T.INT, None, None),  # chronolog: must equal node.id when set
    ConfigKey("listeners", T.STRING, "PLAINTEXT://127.0.0.1:9092", validate_listeners),  # chronolog
    ConfigKey("advertised.listeners", T.STRING, None, validate_advertised_listeners),
    ConfigKey("socket.request.max.bytes", T.INT, 100 * 1024 * 1024, Range.at_least(1)),
    ConfigKey("socket.send.buffer.bytes", T.INT, 100 * 1024, None),
    ConfigKey("socket.receive.buffer.bytes", T.INT, 100 * 1024, None),
    ConfigKey("socket.listen.backlog.size", T.INT, 50, Range.at_least(1)),
    ConfigKey("connections.max.idle.ms", T.LONG, 10 * 60 * 1000, None),
    ConfigKey("listener.security.protocol.map", T.STRING, DEFAULT_PROTOCOL_MAP, validate_protocol_map),
    ConfigKey("max.connections", T.INT, INT_MAX, Range.at_least(0)),
    ConfigKey("max.connections.per.ip", T.INT, INT_MAX, Range.at_least(0)),
    ConfigKey("max.connections.per.ip.overrides", T.STRING, "", validate_ip_overrides),
    # security: SASL
    ConfigKey("sasl.enabled.mechanisms", T.LIST, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"],
              validate_mechanisms),  # chronolog: Kafka GSSAPI (Kerberos is not implemented)
    ConfigKey("sasl.server.max.receive.size", T.INT, 524288, Range.at_least(1)),
    ConfigKey("connections.max.reauth.ms", T.LONG, 0, Range.at_least(0)),
    ConfigKey("connection.failed.authentication.delay.ms", T.INT, 100, Range.at_least(0)),
    # security: TLS (PEM key material; Kafka's JKS/PKCS12 stores are refused with a message)
    ConfigKey("ssl.keystore.type", T.STRING, "JKS", None),
    ConfigKey("ssl.keystore.location", T.STRING, None, None),
    ConfigKey("ssl.keystore.password", T.PASSWORD, None, None),
    ConfigKey("ssl.keystore.certificate.chain", T.PASSWORD, None, None),
    ConfigKey("ssl.keystore.key", T.PASSWORD, None, None),
    ConfigKey("ssl.key.password", T.PASSWORD, None, None),
    ConfigKey("ssl.truststore.type", T.STRING, "JKS", None),
    ConfigKey("ssl.truststore.location", T.STRING, None, None),
    ConfigKey("ssl.truststore.password", T.PASSWORD, None, None),
    ConfigKey("ssl.truststore.certificates", T.PASSWORD, None, None),
    ConfigKey("ssl.protocol", T.STRING, "TLSv1.3", None),
    ConfigKey("ssl.enabled.protocols", T.LIST, ["TLSv1.2", "TLSv1.3"], validate_tls_protocols),
    ConfigKey("ssl.cipher.suites", T.LIST, [], None),
    ConfigKey("ssl.client.auth", T.STRING, "none", ValidString(SSL_CLIENT_AUTH)),
    ConfigKey("ssl.principal.mapping.rules", T.STRING, "DEFAULT", None),
    ConfigKey("ssl.endpoint.identification.algorithm", T.STRING, "https", None),
    # a dynamic keystore update must keep the certificate's DN and SANs unless these allow it
    ConfigKey("ssl.allow.dn.changes", T.BOOLEAN, False, None),
    ConfigKey("ssl.allow.san.changes", T.BOOLEAN, False, None),
    # security: authorization
    ConfigKey("authorizer.class.name", T.STRING, "", validate_authorizer),
    ConfigKey("super.users", T.STRING, "", None),
    ConfigKey("allow.everyone.if.no.acl.found", T.BOOLEAN, False, None),
    ConfigKey("queued.max.requests", T.INT, 500, Range.at_least(1)),
    ConfigKey("queued.max.request.bytes", T.LONG, -1, None),
    ConfigKey("num.network.threads", T.INT, 3, Range.at_least(1)),
    ConfigKey("num.io.threads", T.INT, 8, Range.at_least(1)),
    # Kafka's dynamic broker configs that have nothing to drive on this broker (one event
    # loop, no Kerberos, no replication, no tiered storage): accepted, stored and
    # described with Kafka's defaults so that admin tools and clients can set them
    ConfigKey("max.connection.creation.rate", T.INT, INT_MAX, Range.at_least(0), _COMPAT),
    ConfigKey("num.replica.fetchers", T.INT, 1, Range.at_least(1), _COMPAT),
    ConfigKey("background.threads", T.INT, 10, Range.at_least(1), _COMPAT),
    ConfigKey("metric.reporters", T.LIST, [], None, _COMPAT),
    ConfigKey("principal.builder.class", T.STRING,
              "org.apache.kafka.common.security.authenticator.DefaultKafkaPrincipalBuilder", None, _COMPAT),
    ConfigKey("ssl.provider", T.STRING, None, None, _COMPAT),
    ConfigKey("ssl.keymanager.algorithm", T.STRING, "SunX509", None, _COMPAT),
    ConfigKey("ssl.trustmanager.algorithm", T.STRING, "PKIX", None, _COMPAT),
    ConfigKey("ssl.secure.random.implementation", T.STRING, None, None, _COMPAT),
    ConfigKey("ssl.engine.factory.class", T.STRING, None, None, _COMPAT),
    ConfigKey("sasl.mechanism.inter.broker.protocol", T.STRING, "GSSAPI", None, _COMPAT),
    ConfigKey("sasl.kerberos.service.name", T.STRING, None, None, _COMPAT),
    ConfigKey("sasl.kerberos.kinit.cmd", T.STRING, "/usr/bin/kinit", None, _COMPAT),
    ConfigKey("sasl.kerberos.ticket.renew.window.factor", T.DOUBLE, 0.8, None, _COMPAT),
    ConfigKey("sasl.kerberos.ticket.renew.jitter", T.DOUBLE, 0.05, None, _COMPAT),
    ConfigKey("sasl.kerberos.min.time.before.relogin", T.LONG, 60000, None, _COMPAT),
    ConfigKey("sasl.kerberos.principal.to.local.rules", T.LIST, ["DEFAULT"], None, _COMPAT),
    ConfigKey("sasl.login.refresh.window.factor", T.DOUBLE, 0.8, Range.between(0.5, 1.0), _COMPAT),
    ConfigKey("sasl.login.refresh.window.jitter", T.DOUBLE, 0.05, Range.between(0.0, 0.25), _COMPAT),
    ConfigKey("sasl.login.refresh.min.period.seconds", T.SHORT, 60, Range.between(0, 900), _COMPAT),
    ConfigKey("sasl.login.refresh.buffer.seconds", T.SHORT, 300, Range.between(0, 3600), _COMPAT),
    ConfigKey("remote.log.index.file.cache.total.size.bytes", T.LONG, 1024 * 1024 * 1024, Range.at_least(1),
              _COMPAT),
    ConfigKey("remote.fetch.max.wait.ms", T.INT, 500, Range.at_least(1), _COMPAT),
    ConfigKey("remote.log.manager.copy.max.bytes.per.second", T.LONG, LONG_MAX, Range.at_least(1), _COMPAT),
    ConfigKey("remote.log.manager.fetch.max.bytes.per.second", T.LONG, LONG_MAX, Range.at_least(1), _COMPAT),
    ConfigKey("remote.list.offsets.request.timeout.ms", T.LONG, 30000, Range.at_least(1), _COMPAT),
    ConfigKey("producer.id.expiration.ms", T.INT, 86400000, Range.at_least(1),
              "How long an idle producer's state is kept in each partition (its sequence numbers)."),
    ConfigKey("fetch.max.bytes", T.INT, 55 * 1024 * 1024, Range.at_least(1024)),
    ConfigKey("max.request.partition.size.limit", T.INT, 2000, Range.at_least(1),
              "The maximum number of partitions can be served in one request (DescribeTopicPartitions)."),
    ConfigKey("metrics.port", T.INT, 9404, Range.between(-1, 65535)),  # chronolog only
    # lifecycle and logging (chronolog only)
    ConfigKey("controlled.shutdown.timeout.ms", T.LONG, 8000, Range.between(100, 600000)),
    ConfigKey("logging.format", T.STRING, "text", ValidString(LOG_FORMATS)),
    ConfigKey("logging.levels", T.STRING, "INFO", validate_level_spec),
    # topics
    ConfigKey("num.partitions", T.INT, 1, Range.at_least(1)),
    ConfigKey("auto.create.topics.enable", T.BOOLEAN, True, None),
    ConfigKey("default.replication.factor", T.INT, 1, None),
    ConfigKey("delete.topic.enable", T.BOOLEAN, True, None),
    ConfigKey("min.insync.replicas", T.INT, 1, Range.at_least(1)),
    ConfigKey("unclean.leader.election.enable", T.BOOLEAN, False, None),
    ConfigKey("message.max.bytes", T.INT, DEFAULT_MAX_MESSAGE_BYTES, Range.at_least(0)),
    ConfigKey("compression.type", T.STRING, "producer", ValidString(COMPRESSION_TYPES)),
    ConfigKey("compression.gzip.level", T.INT, -1, validate_gzip_level),
    ConfigKey("compression.lz4.level", T.INT, 9, Range.between(1, 17)),
    ConfigKey("compression.zstd.level", T.INT, 3, Range.between(-131072, 22)),
    # log
    ConfigKey("log.dirs", T.LIST, ["./data"], validate_non_empty_list),  # chronolog: Kafka null
    ConfigKey("log.dir", T.STRING, None, None),  # chronolog: Kafka /tmp/kafka-logs
    ConfigKey("log.open.files.max", T.INT, -1, Range.at_least(-1),  # chronolog only
              "The most segment files (.log descriptors and index maps) held open at once; the least "
              "recently used are closed and reopened on demand. -1: three quarters of the open-files "
              "limit."),
    ConfigKey("log.segment.bytes", T.INT, DEFAULT_SEGMENT_BYTES, Range.at_least(RECORD_OVERHEAD_V0)),
    ConfigKey("log.roll.ms", T.LONG, None, None),
    ConfigKey("log.roll.hours", T.INT, 24 * 7, Range.at_least(1)),
    ConfigKey("log.roll.jitter.ms", T.LONG, None, None),
    ConfigKey("log.roll.jitter.hours", T.INT, 0, Range.at_least(0)),
    ConfigKey("log.index.size.max.bytes", T.INT, DEFAULT_INDEX_SIZE_MAX_BYTES, Range.at_least(4)),
    ConfigKey("log.index.interval.bytes", T.INT, DEFAULT_INDEX_INTERVAL_BYTES, Range.at_least(0)),
    ConfigKey("log.message.timestamp.type", T.STRING, "CreateTime", ValidString(TIMESTAMP_TYPES)),
    ConfigKey("log.message.timestamp.difference.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("log.message.timestamp.before.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("log.message.timestamp.after.max.ms", T.LONG, LONG_MAX, Range.at_least(0)),
    ConfigKey("log.message.format.version", T.STRING, DEFAULT_MESSAGE_FORMAT_VERSION, validate_message_format_version),
    ConfigKey("inter.broker.protocol.version", T.STRING, "3.9-IV0", validate_message_format_version,
              "Accepted for compatibility (one broker: nothing to agree with); any version Kafka accepts."),
    ConfigKey("log.message.downconversion.enable", T.BOOLEAN, True, None),
    ConfigKey("log.retention.ms", T.LONG, None, None),
    ConfigKey("log.retention.minutes", T.INT, None, None),
    ConfigKey("log.retention.hours", T.INT, 24 * 7, None),
    ConfigKey("log.retention.bytes", T.LONG, -1, None),
    ConfigKey("log.retention.check.interval.ms", T.LONG, 5 * 60 * 1000, Range.at_least(1)),
    ConfigKey("log.segment.delete.delay.ms", T.LONG, DEFAULT_FILE_DELETE_DELAY_MS, Range.at_least(0)),
    ConfigKey("log.flush.interval.messages", T.LONG, LONG_MAX, Range.at_least(1)),
    ConfigKey("log.flush.interval.ms", T.LONG, None, None),
    ConfigKey("log.flush.scheduler.interval.ms", T.LONG, LONG_MAX, None),
    ConfigKey("log.flush.offset.checkpoint.interval.ms", T.INT, 60000, Range.at_least(0)),
    ConfigKey("log.flush.start.offset.checkpoint.interval.ms", T.INT, 60000, Range.at_least(0)),
    ConfigKey("log.cleanup.policy", T.LIST, ["delete"], ValidList(CLEANUP_POLICIES)),
    ConfigKey("log.preallocate", T.BOOLEAN, False, None),
    ConfigKey("log.cleaner.enable", T.BOOLEAN, True, None),
    ConfigKey("log.cleaner.delete.retention.ms", T.LONG, DEFAULT_DELETE_RETENTION_MS, Range.at_least(0)),
    ConfigKey("log.cleaner.min.compaction.lag.ms", T.LONG, 0, Range.at_least(0)),
    ConfigKey("log.cleaner.max.compaction.lag.ms", T.LONG, LONG_MAX, Range.at_least(1)),
    ConfigKey("log.cleaner.min.cleanable.ratio", T.DOUBLE, 0.5, Range.between(0, 1)),
    ConfigKey("log.cleaner.threads", T.INT, 1, Range.at_least(0),
              "Cleaner worker processes (each cleans one log at a time, off the event loop)."),
    ConfigKey("log.cleaner.dedupe.buffer.size", T.LONG, 128 * 1024 * 1024, None,
              "Memory for the key-hash to offset maps of all cleaner workers together."),
    ConfigKey("log.cleaner.io.buffer.load.factor", T.DOUBLE, 0.9, None,
              "How full a cleaner's offset map may get before a clean stops mapping (and continues next pass)."),
    ConfigKey("log.cleaner.io.buffer.size", T.INT, 512 * 1024, Range.at_least(0),
              "Read size of the cleaner's I/O, all workers together."),
    ConfigKey("log.cleaner.io.max.bytes.per.second", T.DOUBLE, 1.7976931348623157e308, None,
              "Throttle on the cleaner's reads and writes (bytes per second, all workers together)."),
    ConfigKey("replica.alter.log.dirs.io.max.bytes.per.second", T.LONG, 9223372036854775807, Range.at_least(1),
              "Throttle on the copying of a partition moved to a log dir on another filesystem "
              "(AlterReplicaLogDirs), bytes per second; set it dynamically, as Kafka."),
    ConfigKey("log.cleaner.backoff.ms", T.LONG, 15000, Range.at_least(0),
              "How long the cleaner waits before looking again when no log needs cleaning."),
    ConfigKey("log.cleaner.compaction.strategy", T.STRING, "offset", ValidString(COMPACTION_STRATEGIES),
              "KIP-280: which record of a key compaction keeps: offset (the last written, Kafka's rule), "
              "timestamp (the highest record timestamp) or header (the highest 8-byte value of a header)."),
    ConfigKey("log.cleaner.compaction.strategy.header", T.STRING, "", None,
              "KIP-280: the header whose 8-byte big-endian value orders records under the header strategy."),
    ConfigKey("log.local.retention.ms", T.LONG, -2, Range.at_least(-2)),
    ConfigKey("log.local.retention.bytes", T.LONG, -2, Range.at_least(-2)),
    ConfigKey("num.recovery.threads.per.data.dir", T.INT, 1, Range.at_least(1)),
    # group coordinator
    ConfigKey("offsets.retention.minutes", T.INT, 7 * 24 * 60, Range.at_least(1)),
    ConfigKey("offsets.retention.check.interval.ms", T.LONG, 600000, Range.at_least(1)),
    ConfigKey("group.initial.rebalance.delay.ms", T.INT, 3000, None),
    ConfigKey("group.min.session.timeout.ms", T.INT, 6000, None),
    ConfigKey("group.max.session.timeout.ms", T.INT, 1800000, None),
    ConfigKey("group.max.size", T.INT, INT_MAX, Range.at_least(1),
              "Most members a consumer group may have; a JoinGroup beyond it gets GROUP_MAX_SIZE_REACHED."),
    # the consumer group protocol (KIP-848) and share groups (KIP-932): the defaults and
    # bounds of the GROUP configs (config.group_config)
    ConfigKey("group.consumer.session.timeout.ms", T.INT, 45000, Range.at_least(1),
              "The timeout to detect client failures when using the consumer group protocol."),
    ConfigKey("group.consumer.min.session.timeout.ms", T.INT, 45000, Range.at_least(1),
              "The minimum allowed session timeout for registered consumers."),
    ConfigKey("group.consumer.max.session.timeout.ms", T.INT, 60000, Range.at_least(1),
              "The maximum allowed session timeout for registered consumers."),
    ConfigKey("group.consumer.heartbeat.interval.ms", T.INT, 5000, Range.at_least(1),
              "The heartbeat interval given to the members of a consumer group."),
    ConfigKey("group.consumer.min.heartbeat.interval.ms", T.INT, 5000, Range.at_least(1),
              "The minimum heartbeat interval for registered consumers."),
    ConfigKey("group.consumer.max.heartbeat.interval.ms", T.INT, 15000, Range.at_least(1),
              "The maximum heartbeat interval for registered consumers."),
    ConfigKey("group.consumer.assignors", T.LIST, ["uniform", "range"], validate_assignors,
              "The server-side assignors of the consumer group protocol, by name (uniform, range) or Kafka's "
              "class names; the first is the default."),
    ConfigKey("group.consumer.max.size", T.INT, INT_MAX, Range.at_least(1),
              "The maximum number of consumers that a single consumer group (consumer protocol) can accommodate."),
    ConfigKey("group.consumer.migration.policy", T.STRING, "bidirectional", validate_migration_policy,
              "The online migration of a group between the classic and the consumer protocol: bidirectional "
              "(both ways), upgrade (classic to consumer only), downgrade (consumer to classic only) or disabled."),
    ConfigKey("group.share.session.timeout.ms", T.INT, 45000, Range.at_least(1),
              "The timeout to detect client failures when using the share group protocol."),
    ConfigKey("group.share.min.session.timeout.ms", T.INT, 45000, Range.at_least(1),
              "The minimum allowed session timeout for share group members."),
    ConfigKey("group.share.max.session.timeout.ms", T.INT, 60000, Range.at_least(1),
              "The maximum allowed session timeout for share group members."),
    ConfigKey("group.share.heartbeat.interval.ms", T.INT, 5000, Range.at_least(1),
              "The heartbeat interval given to the members of a share group."),
    ConfigKey("group.share.min.heartbeat.interval.ms", T.INT, 5000, Range.at_least(1),
              "The minimum heartbeat interval for share group members."),
    ConfigKey("group.share.max.heartbeat.interval.ms", T.INT, 15000, Range.at_least(1),
              "The maximum heartbeat interval for share group members."),
    ConfigKey("group.share.max.size", T.INT, 200, Range.between(10, 1000),
              "The maximum number of members that a single share group can accommodate."),
    ConfigKey("group.share.record.lock.duration.ms", T.INT, 30000, Range.between(1000, 3600000),
              "The record acquisition lock duration in milliseconds for share groups."),
    ConfigKey("group.share.min.record.lock.duration.ms", T.INT, 15000, Range.between(1000, 30000),
              "The record acquisition lock minimum duration in milliseconds for share groups."),
    ConfigKey("group.share.max.record.lock.duration.ms", T.INT, 60000, Range.between(30000, 3600000),
              "The record acquisition lock maximum duration in milliseconds for share groups."),
    ConfigKey("group.share.delivery.count.limit", T.INT, 5, Range.between(2, 10),
              "The maximum number of delivery attempts for a record delivered to a share group."),
    ConfigKey("group.share.min.delivery.count.limit", T.INT, 2, Range.between(2, 10),
              "The minimum share.delivery.count.limit a share group may set."),
    ConfigKey("group.share.max.delivery.count.limit", T.INT, 10, Range.between(2, 10),
              "The maximum share.delivery.count.limit a share group may set."),
    ConfigKey("group.share.partition.max.record.locks", T.INT, 2000, Range.between(100, 10000),
              "Share-group record lock limit per share-partition: the most records in flight."),
    ConfigKey("group.share.min.partition.max.record.locks", T.INT, 100, Range.between(100, 10000),
              "The minimum share.partition.max.record.locks a share group may set."),
    ConfigKey("group.share.max.partition.max.record.locks", T.INT, 10000, Range.between(100, 10000),
              "The maximum share.partition.max.record.locks a share group may set."),
    ConfigKey("group.share.max.share.sessions", T.INT, 2000, Range.at_least(1),
              "The maximum number of share sessions per broker; a ShareFetch opening one more is refused "
              "(SHARE_SESSION_LIMIT_REACHED)."),
    ConfigKey("share.coordinator.state.topic.num.partitions", T.INT, 50, Range.at_least(1),
              "The number of partitions of __share_group_state, made on first use."),
    ConfigKey("share.coordinator.state.topic.segment.bytes", T.INT, 104857600, Range.at_least(1),
              "segment.bytes of __share_group_state when the broker creates it."),
    ConfigKey("offsets.topic.num.partitions", T.INT, 50, Range.at_least(1)),
    ConfigKey("offsets.topic.segment.bytes", T.INT, 104857600, Range.at_least(1),
              "segment.bytes of __consumer_offsets when the broker creates it."),
    # client quotas (broker.quotas): rates are measured over quota.window.num samples of
    # quota.window.size.seconds each, as Kafka's ClientQuotaManager
    ConfigKey("quota.window.num", T.INT, 11, Range.at_least(1),
              "The number of samples to retain in memory for client quotas."),
    ConfigKey("quota.window.size.seconds", T.INT, 1, Range.at_least(1),
              "The time span of each sample for client quotas."),
    # transaction coordinator
    ConfigKey("transaction.max.timeout.ms", T.INT, 900000, Range.at_least(1),
              "Longest transaction timeout a producer may ask for; InitProducerId asking more gets "
              "INVALID_TRANSACTION_TIMEOUT."),
    ConfigKey("transactional.id.expiration.ms", T.INT, 604800000, Range.at_least(1),
              "How long a transactional id with no transaction under way is kept after its last use."),
    ConfigKey("transaction.abort.timed.out.transaction.cleanup.interval.ms", T.INT, 10000, Range.at_least(1),
              "How often transactions older than their timeout are looked for and aborted."),
    ConfigKey("transaction.remove.expired.transaction.cleanup.interval.ms", T.INT, 3600000, Range.at_least(1),
              "How often transactional ids past transactional.id.expiration.ms are removed."),
    ConfigKey("transaction.state.log.num.partitions", T.INT, 50, Range.at_least(1)),
    ConfigKey("transaction.state.log.segment.bytes", T.INT, 104857600, Range.at_least(1)),
    ConfigKey("transaction.partition.verification.enable", T.BOOLEAN, True, None,
              "Check that a transactional produce goes to a partition its transaction added (KIP-890)."),
)
_KEYS: dict[str, ConfigKey] = {k.name: k for k in BROKER_KEYS}
_ATTRS: dict[str, ConfigKey] = {k.attr: k for k in BROKER_KEYS}

# ``listener.name.<listener>.<property>``: per-listener values (Kafka's ListenerName
# prefix). These properties may be given per listener, besides ``<mechanism>.sasl.jaas.config``
# and ``<mechanism>.connections.max.reauth.ms``; any other suffix is reported as unknown.
_LISTENER_PREFIX_RE = re.compile(r"^listener\.name\.([A-Za-z0-9_\-]+)\.(.+)$")
LISTENER_OVERRIDABLE = frozenset(
    {k.name for k in BROKER_KEYS if k.name.startswith("ssl.")}
    | {"sasl.enabled.mechanisms", "sasl.server.max.receive.size", "connections.max.reauth.ms",
       "max.connections", "connection.failed.authentication.delay.ms"}
)


def validate_callback_handler(name: str, value: Any) -> None:
    if value and value != OAUTH_UNSECURED_VALIDATOR:
        raise ConfigError(name, value, "Chronolog has one SASL server callback handler, Kafka's default for "
                          "OAUTHBEARER (" + OAUTH_UNSECURED_VALIDATOR + ", unsecured JWTs); JWT signature "
                          "validation (OAuthBearerValidatorCallbackHandler with a JWKS endpoint) and custom "
                          "handlers are not supported")


_MECH_PROPS = {"sasl.jaas.config": ConfigKey("sasl.jaas.config", T.PASSWORD, None, None),
               "connections.max.reauth.ms": _KEYS["connections.max.reauth.ms"],
               "sasl.server.callback.handler.class": ConfigKey("sasl.server.callback.handler.class", T.STRING,
                                                               None, validate_callback_handler)}
_MECH_PREFIXES = tuple(m.lower() + "." for m in SASL_MECHANISMS) + ("gssapi.",)


def listener_property_key(name: str) -> Optional[tuple[str, str, ConfigKey]]:
    """``listener.name.sasl_ssl.plain.sasl.jaas.config`` -> ("SASL_SSL",
    "plain.sasl.jaas.config", key) when the suffix may be set per listener, else None."""
    m = _LISTENER_PREFIX_RE.match(name)
    if not m:
        return None
    listener, prop = m.group(1).upper(), m.group(2)
    if prop in LISTENER_OVERRIDABLE:
        return listener, prop, _KEYS[prop]
    for pre in _MECH_PREFIXES:
        if prop.startswith(pre) and prop[len(pre):] in _MECH_PROPS:
            return listener, prop, _MECH_PROPS[prop[len(pre):]]
    return None


def broker_key(name: str) -> Optional[ConfigKey]:
    """The ConfigKey of a broker property, listener-prefixed or not (None: unknown)."""
    key = _KEYS.get(name)
    if key is None:
        lk = listener_property_key(name)
        key = None if lk is None else lk[2]
    return key


class ListenerSpec(BaseModel):
    """One configured listener: where it binds, what it advertises, its protocol."""

    name: str
    protocol: str
    host: str
    port: int
    advertised_host: Optional[str] = None
    advertised_port: Optional[int] = None

# Real Kafka broker properties (typical in a Kafka server.properties) that have no
# meaning for a single-node Chronolog broker: accepted, reported as ignored (not unknown).
IGNORED_KAFKA_PROPERTIES = frozenset(
    {
        "process.roles",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        "inter.broker.listener.name",
        "offsets.topic.replication.factor",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.replication.factor",
        "share.coordinator.state.topic.min.isr",
        "zookeeper.connect",
        "zookeeper.connection.timeout.ms",
        "replica.lag.time.max.ms",
        "group.coordinator.rebalance.protocols",
        # controlled shutdown moves partition leadership away first: nothing to move here
        "controlled.shutdown.enable",
        "controlled.shutdown.max.retries",
        "controlled.shutdown.retry.backoff.ms",
        # read only by Kafka's JWT-signature validator (OAuthBearerValidatorCallbackHandler),
        # which a broker uses only when its sasl.server.callback.handler.class names it (refused
        # here); the default OAUTHBEARER check, unsecured JWTs, ignores them in Kafka too
        "sasl.oauthbearer.jwks.endpoint.url",
        "sasl.oauthbearer.jwks.endpoint.refresh.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
        "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
        "sasl.oauthbearer.expected.issuer",
        "sasl.oauthbearer.expected.audience",
        "sasl.oauthbearer.scope.claim.name",
        "sasl.oauthbearer.sub.claim.name",
        "sasl.oauthbearer.clock.skew.seconds",
    }
)


def env_var_name(prop: str) -> str:
    """``log.segment.bytes`` -> ``CHRONOLOG_LOG_SEGMENT_BYTES``."""
    return ENV_PREFIX + re.sub(r"[^0-9A-Za-z]", "_", prop).upper()


_ENV_TO_PROP: dict[str, str] = {env_var_name(k.name): k.name for k in BROKER_KEYS}
_ENV_TO_PROP.update({env_var_name(n): n for n in IGNORED_KAFKA_PROPERTIES})


def _annotation(key: ConfigKey) -> Any:
    base = {T.INT: int, T.SHORT: int, T.LONG: int, T.BOOLEAN: bool, T.STRING: str, T.PASSWORD: str, T.DOUBLE: float,
            T.LIST: list[str]}[key.type]
    return Optional[base] if key.default is None else base


class _Base(BaseModel):
    model_config = ConfigDict(populate_by_name=True, extra="forbid")


_Fields = create_model(  # type: ignore[call-overload]
    "_BrokerConfigFields",
    __base__=_Base,
    **{k.attr: (_annotation(k), Field(k.default, alias=k.name)) for k in BROKER_KEYS},
)


class BrokerConfig(_Fields):  # type: ignore[misc, valid-type]
    """Broker configuration. Every Kafka property ``a.b.c`` is the attribute ``a_b_c``
    (see :data:`BROKER_KEYS`); construct with :func:`load_broker_config`, or directly
    with python names or Kafka names as keyword arguments (tests)."""

    # listener.name.<LISTENER>.<property> values: {"SASL_SSL": {"ssl.keystore.location": ...}}
    listener_props: dict = Field(default_factory=dict)

    _sources: dict = PrivateAttr(default_factory=dict)
    _unknown: dict = PrivateAttr(default_factory=dict)
    _ignored: dict = PrivateAttr(default_factory=dict)

    # ------------------------------------------------------------------ validation

    @model_validator(mode="before")
    @classmethod
    def _coerce(cls, data: Any) -> Any:
        if not isinstance(data, Mapping):
            return data
        values: dict[str, Any] = {}
        per_listener: dict[str, dict[str, Any]] = {}
        for raw_key, value in data.items():
            if raw_key == "listener_props":
                for lname, props in (value or {}).items():
                    per_listener.setdefault(lname.upper(), {}).update(props)
                continue
            lk = listener_property_key(raw_key)
            if lk is not None:
                per_listener.setdefault(lk[0], {})[lk[1]] = lk[2].parse(value)
                continue
            key = _KEYS.get(raw_key) or _ATTRS.get(raw_key)
            if key is None:
                raise ConfigError(raw_key, value, "Unknown broker config name")
            values[key.name] = key.parse(value)
        # log.dirs falls back to log.dir (KafkaConfig.logDirs); empty CSV items dropped
        if "log.dirs" not in values and values.get("log.dir"):
            values["log.dirs"] = _KEYS["log.dirs"].parse(values["log.dir"])
        if "log.dirs" in values:
            values["log.dirs"] = [d for d in values["log.dirs"] if d]
        # broker.id and node.id must agree (KafkaConfig.validateValues)
        if values.get("broker.id") is not None:
            if "node.id" not in values:
                values["node.id"] = _KEYS["node.id"].parse(values["broker.id"])
            elif values["node.id"] != values["broker.id"]:
                raise ConfigError(
                    "node.id", values["node.id"], f"You must set `node.id` to the same value as `broker.id` ({values['broker.id']})."
                )
        out = {_KEYS[n].attr: v for n, v in values.items()}
        if per_listener:
            out["listener_props"] = per_listener
        return out

    @model_validator(mode="after")
    def _check(self) -> "BrokerConfig":
        protocols = parse_protocol_map("listener.security.protocol.map", self.listener_security_protocol_map)
        names = []
        for name, _host, _port in _parse_listener_list("listeners", self.listeners):
            if name not in protocols:
                raise ConfigError("listener.security.protocol.map", self.listener_security_protocol_map,
                                  f"No security protocol defined for listener {name}")
            names.append(name)
        if self.advertised_listeners:
            for name, _host, _port in _parse_listener_list("advertised.listeners", self.advertised_listeners):
                if name not in names:
                    raise ConfigError("advertised.listeners", self.advertised_listeners,
                                      f"advertised.listeners listener names must be equal to or a subset of the "
                                      f"ones defined in listeners; {name} is not in listeners")
        if 0 < self.queued_max_request_bytes < self.socket_request_max_bytes:
            raise ConfigError(
                "queued.max.request.bytes", self.queued_max_request_bytes,
                "queued.max.request.bytes must be larger or equal to socket.request.max.bytes "
                f"({self.socket_request_max_bytes})")
        if self.log_roll_ms_effective < 1:
            raise ConfigError("log.roll.ms", self.log_roll_ms_effective, "log.roll.ms must be greater than or equal to 1")
        if self.log_roll_jitter_ms_effective < 0:
            raise ConfigError(
                "log.roll.jitter.ms", self.log_roll_jitter_ms_effective, "log.roll.jitter.ms must be greater than or equal to 0"
            )
        if self.log_retention_ms_effective == 0:
            raise ConfigError(
                "log.retention.ms", 0, "log.retention.ms must be unlimited (-1) or, greater than or equal to 1"
            )
        for kind in ("consumer", "share"):  # GroupCoordinatorConfig's requirements
            v = {n: getattr(self, f"group_{kind}_{n}") for n in (
                "session_timeout_ms", "min_session_timeout_ms", "max_session_timeout_ms",
                "heartbeat_interval_ms", "min_heartbeat_interval_ms", "max_heartbeat_interval_ms")}

            def require(ok, a, rel, b, _kind=kind, _v=v):
                if not ok:
                    name = f"group.{_kind}.{a.replace('_', '.')}"
                    raise ConfigError(name, _v[a], f"{name} must be {rel} group.{_kind}.{b.replace('_', '.')}")

            require(v["max_heartbeat_interval_ms"] >= v["min_heartbeat_interval_ms"], "max_heartbeat_interval_ms",
                    "greater than or equal to", "min_heartbeat_interval_ms")
            require(v["heartbeat_interval_ms"] >= v["min_heartbeat_interval_ms"], "heartbeat_interval_ms",
                    "greater than or equal to", "min_heartbeat_interval_ms")
            require(v["heartbeat_interval_ms"] <= v["max_heartbeat_interval_ms"], "heartbeat_interval_ms",
                    "less than or equal to", "max_heartbeat_interval_ms")
            require(v["max_session_timeout_ms"] >= v["min_session_timeout_ms"], "max_session_timeout_ms",
                    "greater than or equal to", "min_session_timeout_ms")
            require(v["session_timeout_ms"] >= v["min_session_timeout_ms"], "session_timeout_ms",
                    "greater than or equal to", "min_session_timeout_ms")
            require(v["session_timeout_ms"] <= v["max_session_timeout_ms"], "session_timeout_ms",
                    "less than or equal to", "max_session_timeout_ms")
            require(v["heartbeat_interval_ms"] < v["session_timeout_ms"], "heartbeat_interval_ms",
                    "less than", "session_timeout_ms")
        if self.log_cleaner_threads > 0 and self.log_cleaner_dedupe_buffer_size // self.log_cleaner_threads <= 1024 * 1024:
            raise ConfigError("log.cleaner.dedupe.buffer.size", self.log_cleaner_dedupe_buffer_size,
                              "log.cleaner.dedupe.buffer.size must be at least 1MB per cleaner thread.")
        if not 0 < self.log_cleaner_io_buffer_load_factor <= 1:
            raise ConfigError("log.cleaner.io.buffer.load.factor", self.log_cleaner_io_buffer_load_factor,
                              "the dedupe buffer load factor must be in (0, 1]")
        if self.log_cleaner_min_compaction_lag_ms > self.log_cleaner_max_compaction_lag_ms:
            raise ConfigError(
                "log.cleaner.min.compaction.lag.ms",
                self.log_cleaner_min_compaction_lag_ms,
                f"conflict topic config setting min.compaction.lag.ms ({self.log_cleaner_min_compaction_lag_ms}) > "
                f"max.compaction.lag.ms ({self.log_cleaner_max_compaction_lag_ms})",
            )
        return self

    def model_post_init(self, __context: Any) -> None:
        if not self._sources:
            self._sources = {k.name: "default" for k in BROKER_KEYS}
            for attr in self.model_fields_set:
                if attr in _ATTRS:
                    self._sources[_ATTRS[attr].name] = "override"

    # ------------------------------------------------------------------ derived values

    @property
    def log_roll_ms_effective(self) -> int:
        """``log.roll.ms`` if set, else ``log.roll.hours`` in ms (becomes ``segment.ms``)."""
        if self.log_roll_ms is not None:
            return self.log_roll_ms
        return 60 * 60 * 1000 * self.log_roll_hours

    @property
    def log_roll_jitter_ms_effective(self) -> int:
        if self.log_roll_jitter_ms is not None:
            return self.log_roll_jitter_ms
        return 60 * 60 * 1000 * self.log_roll_jitter_hours

    @property
    def log_retention_ms_effective(self) -> int:
        """ms > minutes > hours; any negative result is -1 (unlimited)."""
        if self.log_retention_ms is not None:
            millis = self.log_retention_ms
        elif self.log_retention_minutes is not None:
            millis = 60 * 1000 * self.log_retention_minutes
        else:
            millis = 60 * 60 * 1000 * self.log_retention_hours
        return -1 if millis < 0 else millis

    @property
    def log_flush_interval_ms_effective(self) -> int:
        """``log.flush.interval.ms``, else ``log.flush.scheduler.interval.ms``."""
        if self.log_flush_interval_ms is not None:
            return self.log_flush_interval_ms
        return self.log_flush_scheduler_interval_ms

    @property
    def log_message_timestamp_before_max_ms_effective(self) -> int:
        v = self.log_message_timestamp_before_max_ms
        return v if v != LONG_MAX else self.log_message_timestamp_difference_max_ms

    @property
    def log_message_timestamp_after_max_ms_effective(self) -> int:
        v = self.log_message_timestamp_after_max_ms
        return v if v != LONG_MAX else self.log_message_timestamp_difference_max_ms

    def listener_specs(self) -> list[ListenerSpec]:
        """Every listener in ``listeners`` order, with its security protocol (from
        ``listener.security.protocol.map``) and its ``advertised.listeners`` entry. An
        empty bind host means all interfaces ("0.0.0.0"); an unset or wildcard
        advertised host becomes this machine's canonical host name when bound to all
        interfaces, else the bind host; an advertised port 0 or an unset one means the
        port actually bound."""
        protocols = parse_protocol_map("listener.security.protocol.map", self.listener_security_protocol_map)
        advertised = {}
        if self.advertised_listeners:
            advertised = {n: (h, p) for n, h, p in
                          _parse_listener_list("advertised.listeners", self.advertised_listeners)}
        out = []
        for name, host, port in _parse_listener_list("listeners", self.listeners):
            bind = host or "0.0.0.0"
            adv_host, adv_port = advertised.get(name, (None, None))
            if not adv_host:
                adv_host = socket.getfqdn() if bind in ("0.0.0.0", "::") else bind
            out.append(ListenerSpec(name=name, protocol=protocols[name], host=bind, port=port,
                                    advertised_host=adv_host, advertised_port=adv_port or None))
        return out

    def listener_value(self, listener: str, prop: str) -> Any:
        """``listener.name.<listener>.<prop>`` if set, else the broker-wide ``prop``
        (``<mechanism>.sasl.jaas.config`` has no broker-wide value: None)."""
        props = self.listener_props.get(listener.upper(), {})
        if prop in props:
            return props[prop]
        if prop in _KEYS:
            return getattr(self, _KEYS[prop].attr)
        if prop.endswith(".connections.max.reauth.ms"):
            return self.connections_max_reauth_ms
        return None

    def listener(self) -> tuple[str, int]:
        """(host, port) of the first listener; an empty host means all interfaces
        (returned as "0.0.0.0"); port 0 asks for an ephemeral port."""
        spec = self.listener_specs()[0]
        return (spec.host, spec.port)

    def advertised_listener(self) -> tuple[str, int]:
        """(host, port) the first listener advertises (port 0: the port it bound)."""
        spec = self.listener_specs()[0]
        return (spec.advertised_host, spec.advertised_port or spec.port)

    # ------------------------------------------------------------------ sources / describe

    @classmethod
    def from_layers(cls, layers: Iterable[tuple[str, Mapping[str, str]]]) -> "BrokerConfig":
        """Build from ``[(source, {property: string value}), ...]`` (later layers win).
        Unknown properties are collected in :attr:`unknown_properties`."""
        merged: dict[str, Any] = {}
        sources = {k.name: "default" for k in BROKER_KEYS}
        unknown: dict[str, tuple[str, str]] = {}
        ignored: dict[str, tuple[str, str]] = {}
        for source, props in layers:
            for name, value in props.items():
                if name in _KEYS or listener_property_key(name) is not None:
                    merged[name] = value
                    sources[name] = source
                elif name in IGNORED_KAFKA_PROPERTIES:
                    ignored[name] = (value, source)
                else:
                    unknown[name] = (value, source)
        cfg = cls.model_validate(merged)
        # log.dir fallback: log.dirs takes log.dir's source when only log.dir was given
        if sources["log.dirs"] == "default" and sources["log.dir"] != "default":
            sources["log.dirs"] = sources["log.dir"]
        if sources["node.id"] == "default" and sources["broker.id"] != "default":
            sources["node.id"] = sources["broker.id"]
        cfg._sources = sources
        cfg._unknown = unknown
        cfg._ignored = ignored
        return cfg

    def source_of(self, name: str) -> str:
        """"default" | "file" | "env" | "override" for a Kafka property name."""
        if name not in _KEYS:
            raise KeyError(name)
        return self._sources.get(name, "default")

    @property
    def sources(self) -> dict[str, str]:
        return dict(self._sources)

    @property
    def unknown_properties(self) -> dict[str, tuple[str, str]]:
        """Unknown property name -> (value, source)."""
        return dict(self._unknown)

    @property
    def ignored_properties(self) -> dict[str, tuple[str, str]]:
        """Recognised Kafka properties that have no effect here -> (value, source)."""
        return dict(self._ignored)

    def explicit_properties(self) -> set[str]:
        """Names whose value came from a file, env var or override (not a default)."""
        return {n for n, s in self._sources.items() if s != "default"}

    def get(self, name: str) -> Any:
        """Value by Kafka property name; a listener-prefixed name gives that listener's
        own value (None when not set). KeyError for an unknown name."""
        key = _KEYS.get(name)
        if key is not None:
            return getattr(self, key.attr)
        lk = listener_property_key(name)
        if lk is None:
            raise KeyError(name)
        return self.listener_props.get(lk[0], {}).get(lk[1])

    def describe(self) -> list[tuple[str, Optional[str], str]]:
        """``[(property, value as string or None, source)]`` sorted by property name."""
        return [
            (k.name, value_to_string(getattr(self, k.attr), k.type), self.source_of(k.name))
            for k in sorted(BROKER_KEYS, key=lambda k: k.name)
        ]

    # ------------------------------------------------------------------ topic configs

    @staticmethod
    def topic_synonym(name: str) -> Optional[str]:
        """Topic property -> its highest-priority broker property (``segment.ms`` ->
        ``log.roll.ms``), or None for topic properties without a broker default."""
        return TOPIC_CONFIG_SYNONYMS.get(canonical_topic_config_name(name))

    def log_config_defaults(self) -> dict[str, Any]:
        """Topic property -> this broker's default value (KafkaConfig.extractLogConfigMap)."""
        values = {k.name: k.default for k in TOPIC_KEYS}
        values.update(
            {
                "segment.bytes": self.log_segment_bytes,
                "segment.ms": self.log_roll_ms_effective,
                "segment.jitter.ms": self.log_roll_jitter_ms_effective,
                "segment.index.bytes": self.log_index_size_max_bytes,
                "flush.messages": self.log_flush_interval_messages,
                "flush.ms": self.log_flush_interval_ms_effective,
                "retention.bytes": self.log_retention_bytes,
                "retention.ms": self.log_retention_ms_effective,
                "max.message.bytes": self.message_max_bytes,
                "index.interval.bytes": self.log_index_interval_bytes,
                "delete.retention.ms": self.log_cleaner_delete_retention_ms,
                "min.compaction.lag.ms": self.log_cleaner_min_compaction_lag_ms,
                "max.compaction.lag.ms": self.log_cleaner_max_compaction_lag_ms,
                "file.delete.delay.ms": self.log_segment_delete_delay_ms,
                "min.cleanable.dirty.ratio": self.log_cleaner_min_cleanable_ratio,
                "cleanup.policy": list(self.log_cleanup_policy),
                "compaction.strategy": self.log_cleaner_compaction_strategy,
                "compaction.strategy.header": self.log_cleaner_compaction_strategy_header,
                "min.insync.replicas": self.min_insync_replicas,
                "compression.type": self.compression_type,
                "compression.gzip.level": self.compression_gzip_level,
                "compression.lz4.level": self.compression_lz4_level,
                "compression.zstd.level": self.compression_zstd_level,
                "unclean.leader.election.enable": self.unclean_leader_election_enable,
                "preallocate": self.log_preallocate,
                "message.format.version": self.log_message_format_version,
                "message.timestamp.type": self.log_message_timestamp_type,
                "message.timestamp.difference.max.ms": self.log_message_timestamp_difference_max_ms,
                "message.timestamp.before.max.ms": self.log_message_timestamp_before_max_ms_effective,
                "message.timestamp.after.max.ms": self.log_message_timestamp_after_max_ms_effective,
                "message.downconversion.enable": self.log_message_downconversion_enable,
                "local.retention.ms": self.log_local_retention_ms,
                "local.retention.bytes": self.log_local_retention_bytes,
            }
        )
        return values

    def topic_config(self, overrides: Mapping[str, Any] | None = None) -> TopicConfig:
        """Shortcut for ``TopicConfig.from_broker(self, overrides)``."""
        return TopicConfig.from_broker(self, overrides or {})


# ---------------------------------------------------------------------- loading


def _parse_override(item: str) -> tuple[str, str]:
    if "=" not in item:
        raise ConfigError(item, None, "an override must look like key=value")
    key, value = item.split("=", 1)
    key = key.strip()
    if not key:
        raise ConfigError(item, value, "an override must look like key=value")
    return key, value


def _env_layer(env: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    props: dict[str, str] = {}
    unknown: dict[str, str] = {}
    for var, value in env.items():
        if not var.startswith(ENV_PREFIX):
            continue
        prop = _ENV_TO_PROP.get(var)
        if prop is None:
            unknown[var] = value
        else:
            props[prop] = value
    return props, unknown


def load_broker_config(
    properties_file: str | None = None,
    overrides: Iterable[str] = (),
    env: Mapping[str, str] | None = None,
    *,
    warn: bool = True,
) -> BrokerConfig:
    """Defaults < properties file < ``CHRONOLOG_*`` env vars < ``key=value`` overrides.

    Raises :class:`ConfigError` for an invalid value (or an unreadable file). Unknown
    properties are kept in ``cfg.unknown_properties`` and logged as warnings (unknown
    ``CHRONOLOG_*`` variables appear there under their variable name)."""
    if env is None:
        env = os.environ
    layers: list[tuple[str, Mapping[str, str]]] = []
    if properties_file:
        try:
            layers.append(("file", load_properties(properties_file)))
        except OSError as exc:
            raise ConfigError("--config", properties_file, f"cannot read the properties file: {exc.strerror or exc}") from None
    env_props, env_unknown = _env_layer(env)
    layers.append(("env", env_props))
    layers.append(("override", dict(_parse_override(o) for o in overrides)))
    cfg = BrokerConfig.from_layers(layers)
    for var, value in env_unknown.items():
        cfg._unknown[var] = (value, "env")
    if warn:
        warn_unknown(cfg)
    return cfg


def warn_unknown(cfg: BrokerConfig) -> None:
    """Log the unknown (warning) and ignored (info) properties of a loaded config."""
    for name, (value, source) in cfg._unknown.items():
        log.warning("The configuration '%s' (%s) was supplied but isn't a known config", name, source)
    for name, (value, source) in cfg._ignored.items():
        log.info("The Kafka configuration '%s' (%s) has no effect in Chronolog", name, source)
