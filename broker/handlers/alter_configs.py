"""AlterConfigs (key 33), v0-2: replaces a resource's whole config set (Kafka's legacy
semantics); the shared machinery for IncrementalAlterConfigs lives here too.

As Kafka (ConfigAdminManager.preprocess, ConfigurationControlManager):
* a resource named twice: INVALID_REQUEST "Each resource must appear at most once.";
  a key named twice: INVALID_REQUEST "Error due to duplicate config keys"; a null value
  (other than an incremental DELETE): INVALID_REQUEST "Null value not supported for : k";
* TOPIC: unknown topic UNKNOWN_TOPIC_OR_PARTITION; the new override set is validated
  through TopicConfig (an unknown name or invalid value: INVALID_CONFIG, the message
  naming the property, the value and the rule); applied at once to the open logs and
  persisted (LogManager.set_topic_config);
* BROKER: name = this node id (its dynamic configs) or "" (the dynamic cluster defaults);
  another id INVALID_REQUEST; only the dynamically updatable log defaults
  (config.describe.DYNAMIC_BROKER_CONFIGS) may change, others answer INVALID_REQUEST
  "Cannot update these configs dynamically: Set(...)", and invalid values INVALID_REQUEST
  too (KAFKA-13609: Kafka wraps the ConfigException so); applied to every topic without
  an override of its own and persisted in the log dirs; eligible leader replicas
  (KIP-966, on as in any Kafka 4.1+ cluster): a broker-level ``min.insync.replicas``
  answers INVALID_CONFIG "Broker-level min.insync.replicas cannot be altered while ELR
  is enabled.", removing the cluster-level one INVALID_CONFIG "Cluster-level
  min.insync.replicas cannot be removed while ELR is enabled.";
* a TLS listener's key and trust material, ``listener.name.<l>.ssl.keystore.*`` /
  ``ssl.truststore.*``, per broker only (Kafka's dynamic keystore update): the new
  keystore is loaded and its certificate must keep the DN and SANs
  (``ssl.allow.dn.changes`` / ``ssl.allow.san.changes``), else INVALID_REQUEST
  "Validation of dynamic config update of SSLFactory failed: ..."; then new connections
  use it and open ones keep theirs (naming the same file again reloads it);
* GROUP (32): a group's ``consumer.*`` / ``share.*`` configs (config.group_config), the
  whole new set validated as Kafka's GroupConfig.validate (INVALID_CONFIG), the group
  name required ("Default group resources are not allowed."), kept in
  ``storage.entity_configs`` (``group-configs``) whether or not the group exists;
* validate_only checks everything and changes nothing.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import AlterConfigsResponse

from broker.errors import error_code_for
from broker.security import authorizer as A
from broker.security.listeners import plan_listener_settings

log = logging.getLogger("chronolog.alter_configs")

TOPIC, BROKER, GROUP = 2, 4, 32


class AlterError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = int(code)


def _check_request_shape(resources, null_allowed=lambda c: False):
    """-> {id(resource): (code, message)} for resources failing the generic checks."""
    errors = {}
    seen = {}
    for r in resources:
        key = (r.resource_type, r.resource_name)
        if key in seen:
            for other in (seen[key], r):
                errors[id(other)] = (int(ErrorCode.INVALID_REQUEST), "Each resource must appear at most once.")
        seen[key] = r
    for r in resources:
        if id(r) in errors:
            continue
        names = [c.name for c in r.configs]
        if len(set(names)) != len(names):
            errors[id(r)] = (int(ErrorCode.INVALID_REQUEST), "Error due to duplicate config keys")
            continue
        nulls = [c.name for c in r.configs if c.value is None and not null_allowed(c)]
        if nulls:
            errors[id(r)] = (int(ErrorCode.INVALID_REQUEST), "Null value not supported for : " + ", ".join(nulls))
    return errors


def _topic_key_type(name):
    from config.topic_config import _KEYS, canonical_topic_config_name

    k = _KEYS.get(canonical_topic_config_name(name))
    return None if k is None else k.type


def _broker_key_type(name):
    from config.broker_config import BROKER_KEYS

    for k in BROKER_KEYS:
        if k.name == name:
            return k.type
    return None


def alter_resource(ctx, rtype, rname, make_new, validate_only, named=()):
    """``make_new(current: dict, type_of, current_value_of) -> dict`` computes the new
    config set of the resource from its current one; ``named`` are the config names the
    request gave. Raises AlterError."""
    from config import ConfigError
    from config.describe import DynamicConfigError, elr_alter_error, validate_dynamic_update
    from config.properties import value_to_string

    lm = ctx.log_manager
    if rtype == TOPIC:
        info = lm.get_topic(rname)
        if info is None:
            raise AlterError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"The topic '{rname}' does not exist.")

        def current_value(name):
            try:
                return value_to_string(info.config.get(name), _topic_key_type(name))
            except KeyError:
                return None

        try:
            new = make_new(dict(info.overrides), _topic_key_type, current_value)
            lm._topic_config(lm.broker_config, new)  # validates (ConfigError)
        except ConfigError as exc:
            raise AlterError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        except DynamicConfigError as exc:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        if validate_only:
            return
        lm.set_topic_config(rname, new)
        log.info("topic %s: config overrides now %s", rname, new or "{}")
        return
    if rtype == BROKER:
        if rname:
            try:
                node = int(rname)
            except ValueError:
                raise AlterError(ErrorCode.INVALID_REQUEST, f"Node id must be an integer, but it is: {rname}") from None
            if node != ctx.node_id:
                raise AlterError(ErrorCode.INVALID_REQUEST, f"Unexpected broker id, expected {ctx.node_id}, but received {rname}")
        per_broker, default = lm.dynamic_broker_configs()
        current = per_broker if rname else default
        eff = lm.broker_config

        def current_value(name):
            t = _broker_key_type(name)
            if t is None:
                return None
            return value_to_string(eff.get(name), t)

        try:
            new = make_new(dict(current), _broker_key_type, current_value)
        except ConfigError as exc:
            raise AlterError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        except DynamicConfigError as exc:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        try:
            validate_dynamic_update(new, per_broker=bool(rname))
            if rname:  # checked whole (TLS stores loaded) before anything is written
                candidate = lm.set_dynamic_broker_configs(per_broker=new, validate_only=True)
            else:
                candidate = lm.set_dynamic_broker_configs(default=new, validate_only=True)
            tls_plan = _plan_tls(ctx, candidate, named if rname else ())
            listener_plan = plan_listener_settings(ctx.listeners or [], candidate)
        except (ConfigError, DynamicConfigError) as exc:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        # the controller's checks, after the broker's own (Kafka forwards the request)
        elr = elr_alter_error(bool(rname), named, current, new)
        if elr is not None:
            raise AlterError(ErrorCode.INVALID_CONFIG, elr)
        if validate_only:
            return
        try:
            if rname:
                lm.set_dynamic_broker_configs(per_broker=new)
            else:
                lm.set_dynamic_broker_configs(default=new)
        except (ConfigError, DynamicConfigError) as exc:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        ctx.apply_broker_config(lm.broker_config, tls_plan, listener_plan)
        log.info("dynamic broker configs (%s) now %s", rname or "cluster default", new or "{}")
        return
    if rtype == GROUP:
        from config.group_config import GroupConfigError, group_config_type, validate_group_config

        if not rname:
            raise AlterError(ErrorCode.INVALID_REQUEST, "Default group resources are not allowed.")
        store = ctx.group_configs
        defaults = None

        def current_value(name):
            nonlocal defaults
            from config.group_config import effective_group_config

            if defaults is None:
                defaults = effective_group_config(lm.broker_config, store.get(rname))
            return None if name not in defaults else str(defaults[name])

        try:
            new = make_new(store.get(rname), group_config_type, current_value)
            nulls = [n for n, v in new.items() if v is None]
            if nulls:
                raise GroupConfigError("Null value not supported for group configs: " + ",".join(nulls))
            validate_group_config(new, lm.broker_config)
        except (ConfigError, GroupConfigError) as exc:
            raise AlterError(ErrorCode.INVALID_CONFIG, str(exc)) from None
        except DynamicConfigError as exc:
            raise AlterError(ErrorCode.INVALID_REQUEST, str(exc)) from None
        if validate_only:
            return
        store.set(rname, new)
        log.info("group %s: configs now %s", rname, new or "{}")
        return
    raise AlterError(ErrorCode.INVALID_REQUEST, f"Unknown resource type {rtype}")


def _plan_tls(ctx, new_cfg, named):
    """The listeners whose TLS contexts the update replaces (Kafka's SslFactory
    validateReconfiguration): everything is loaded and checked before anything changes."""
    from config import ConfigError
    from broker.security.listeners import plan_tls_update
    from broker.security.tls import IncompatibleKeystore

    try:
        return plan_tls_update(ctx.listeners or [], ctx.log_manager.broker_config, new_cfg, named)
    except (ConfigError, IncompatibleKeystore) as exc:
        raise AlterError(ErrorCode.INVALID_REQUEST,
                         f"Validation of dynamic config update of SSLFactory failed: {exc}") from None


def config_resource_denied(ctx, session, rtype: int, rname: str, op: int, api: str):
    """Kafka's check for a config resource: ``op`` (DESCRIBE_CONFIGS / ALTER_CONFIGS) on
    the topic, or on the cluster for broker and broker-logger resources. Returns the
    error code to answer, or 0."""
    if rtype == 2:
        return 0 if ctx.authorize(session, op, A.TOPIC, rname, api) else int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
    if rtype in (4, 8):
        return 0 if ctx.authorize(session, op, A.CLUSTER, A.CLUSTER_NAME, api) else int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if rtype == GROUP:
        return 0 if ctx.authorize(session, op, A.GROUP, rname, api) else int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return 0


def run(ctx, resources, make_new_for, validate_only, result_cls, null_allowed=lambda c: False,
        session=None, api="AlterConfigs"):
    errors = _check_request_shape(resources, null_allowed)
    out = []
    for r in resources:
        err = errors.get(id(r))
        if err is None:
            denied = config_resource_denied(ctx, session, r.resource_type, r.resource_name, A.ALTER_CONFIGS, api)
            if denied:
                err = (denied, None)
        if err is None:
            try:
                alter_resource(ctx, r.resource_type, r.resource_name, make_new_for(r), validate_only,
                               named=[c.name for c in r.configs])
                err = (0, None)
            except AlterError as exc:
                err = (exc.code, str(exc))
            except Exception as exc:
                err = (error_code_for(exc), str(exc))
        if err[0]:
            log.info("alter configs of %s %r refused: %s", r.resource_type, r.resource_name, err[1])
        out.append(result_cls(error_code=err[0], error_message=err[1],
                              resource_type=r.resource_type, resource_name=r.resource_name))
    return out


def handle(ctx, header, request, session=None):
    def make_new_for(r):
        return lambda current, type_of, current_value: {c.name: c.value for c in r.configs}

    results = run(ctx, request.resources, make_new_for, request.validate_only,
                  AlterConfigsResponse.AlterConfigsResourceResponse, session=session)
    return AlterConfigsResponse(throttle_time_ms=0, responses=results)
