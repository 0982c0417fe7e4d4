"""DescribeConfigs (key 32), v0-4, as Kafka's ConfigHelper answers it.

* TOPIC (2): every topic property with its value, source (TOPIC_CONFIG,
  DYNAMIC_BROKER_CONFIG, DYNAMIC_DEFAULT_BROKER_CONFIG, STATIC_BROKER_CONFIG,
  DEFAULT_CONFIG), synonyms (v1+, when asked), config type and documentation (v3+, when
  asked); ``configuration_keys`` filters; an unknown topic answers
  UNKNOWN_TOPIC_OR_PARTITION, an illegal name INVALID_TOPIC_EXCEPTION.
* BROKER (4): name = this node id: every broker property; name "": the dynamic cluster
  defaults only; any other id answers INVALID_REQUEST.
* GROUP (32): the five group configs of Kafka's GroupConfig, the group's own value
  (GROUP_CONFIG) or the broker's ``group.consumer.*`` / ``group.share.*`` default
  (DEFAULT_CONFIG), for any group name (as Kafka, the group need not exist).
* BROKER_LOGGER (8) and other types: INVALID_REQUEST (no runtime loggers here).
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import DescribeConfigsResponse

from broker.errors import error_code_for
from broker.security import authorizer as A

log = logging.getLogger("chronolog.describe_configs")

R = DescribeConfigsResponse
TOPIC, BROKER, BROKER_LOGGER, GROUP = 2, 4, 8, 32


class RequestError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = int(code)


def broker_id_of(ctx, name: str, what: str = "Broker id") -> int:
    try:
        return int(name)
    except (TypeError, ValueError):
        raise RequestError(ErrorCode.INVALID_REQUEST, f"{what} must be an integer, but it is: {name}") from None


def _entries_to_wire(entries, version):
    out = []
    for e in entries:
        out.append(R.DescribeConfigsResourceResult(
            name=e.name,
            value=e.value,
            read_only=e.read_only,
            is_default=(e.source == 5) if version == 0 else False,
            config_source=e.source,
            is_sensitive=e.is_sensitive,
            synonyms=[R.DescribeConfigsSynonym(name=s.name, value=s.value, source=s.source) for s in e.synonyms],
            config_type=e.config_type,
            documentation=e.documentation,
        ))
    return out


def describe_resource(ctx, rtype, rname, keys, include_synonyms, include_docs):
    from config.describe import BrokerLayers, broker_entries, topic_entries
    from storage.log_manager import validate_topic_name

    lm = ctx.log_manager
    per_broker, default = lm.dynamic_broker_configs()
    layers = BrokerLayers(lm.static_broker_config, default, per_broker)
    if rtype == TOPIC:
        validate_topic_name(rname)
        info = lm.get_topic(rname)
        if info is None:
            raise RequestError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, None)
        return topic_entries(info.config, info.overrides, layers, keys, include_synonyms, include_docs)
    if rtype == BROKER:
        if rname is None or rname == "":
            return broker_entries(lm.broker_config, layers, False, keys, include_synonyms, include_docs)
        if broker_id_of(ctx, rname) != ctx.node_id:
            raise RequestError(ErrorCode.INVALID_REQUEST,
                               f"Unexpected broker id, expected {ctx.node_id} or empty string, but received {rname}")
        return broker_entries(lm.broker_config, layers, True, keys, include_synonyms, include_docs)
    if rtype == GROUP:
        from config.describe import group_entries

        if not rname:
            raise RequestError(ErrorCode.INVALID_REQUEST, "Group name must not be empty")
        return group_entries(lm.broker_config, ctx.group_configs.get(rname), keys, include_synonyms, include_docs)
    if rtype == BROKER_LOGGER:
        raise RequestError(ErrorCode.INVALID_REQUEST, "Chronolog has no runtime-configurable loggers (BROKER_LOGGER)")
    raise RequestError(ErrorCode.INVALID_REQUEST, f"Unsupported resource type: {rtype}")


def handle(ctx, header, request, session=None):
    from broker.handlers.alter_configs import config_resource_denied

    version = header.api_version
    include_synonyms = version >= 1 and bool(request.include_synonyms)
    include_docs = version >= 3 and bool(request.include_documentation)
    results = []
    for res in request.resources:
        denied = config_resource_denied(ctx, session, res.resource_type, res.resource_name, A.DESCRIBE_CONFIGS,
                                        "DescribeConfigs")
        if denied:
            results.append(R.DescribeConfigsResult(error_code=denied, error_message=None,
                                                   resource_type=res.resource_type, resource_name=res.resource_name,
                                                   configs=[]))
            continue
        try:
            entries = describe_resource(ctx, res.resource_type, res.resource_name, res.configuration_keys,
                                        include_synonyms, include_docs)
            results.append(R.DescribeConfigsResult(error_code=0, error_message=None,
                                                   resource_type=res.resource_type, resource_name=res.resource_name,
                                                   configs=_entries_to_wire(entries, version)))
        except Exception as exc:
            if isinstance(exc, RequestError):
                code, msg = exc.code, (str(exc) if exc.args[0] is not None else None)
            else:
                code, msg = error_code_for(exc), str(exc)
            log.info("describe configs of %s %r: error %d %s", res.resource_type, res.resource_name, code, msg)
            results.append(R.DescribeConfigsResult(error_code=code, error_message=msg,
                                                   resource_type=res.resource_type, resource_name=res.resource_name,
                                                   configs=[]))
    return R(throttle_time_ms=0, results=results)
