"""The broker's listeners at run time: bound address, advertised endpoint, TLS context,
SASL settings and principal mapping, built from ``BrokerConfig.listener_specs()`` and
the listener's own values (``listener.name.<listener>.<property>`` over the broker's).

Configuration problems raise ConfigError naming the property, before anything binds.

A TLS listener's key and trust material can be replaced while it serves
(:func:`plan_tls_update`, then :meth:`Listener.use_tls`): IncrementalAlterConfigs on
``listener.name.<l>.ssl.keystore.*`` / ``ssl.truststore.*``, and the stored dynamic values
at start.
"""

from __future__ import annotations

import logging
import ssl
from dataclasses import dataclass, field
from typing import Optional

from broker.security.jaas import oauth_validator_options, plain_users
from broker.security.tls import PrincipalMapper, build_server_context, ensure_compatible, keystore_certificate

log = logging.getLogger("chronolog.security")


@dataclass
class Listener:
    name: str
    protocol: str  # PLAINTEXT | SSL | SASL_PLAINTEXT | SASL_SSL
    host: str
    port: int  # the configured port; the bound one once started
    advertised_host: str
    advertised_port: Optional[int]
    ssl_context: Optional[ssl.SSLContext] = None  # what the next TLS handshake uses
    mechanisms: list = field(default_factory=list)
    plain_users: dict = field(default_factory=dict)
    principal_mapper: Optional[PrincipalMapper] = None
    max_receive_size: int = 524288
    reauth_ms: int = 0
    failed_auth_delay_ms: int = 100
    max_connections: int = 2**31 - 1
    reauth_by_mechanism: dict = field(default_factory=dict)  # <mechanism>.connections.max.reauth.ms
    oauth_options: dict = field(default_factory=dict)  # OAuthBearerServer's, from the OAUTHBEARER JAAS options
    certificate: Optional[dict] = None  # the broker certificate new handshakes present

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    def endpoint(self) -> tuple[str, int]:
        """(host, port) clients of this listener are told to use."""
        return self.advertised_host, self.advertised_port or self.port

    def use_tls(self, context: ssl.SSLContext, certificate: dict) -> None:
        """New handshakes get ``context``; open connections keep theirs."""
        self.ssl_context = context
        self.certificate = certificate

    def reauth_ms_for(self, mechanism: str) -> int:
        """connections.max.reauth.ms for a session authenticated with ``mechanism``."""
        return self.reauth_by_mechanism.get(mechanism, self.reauth_ms)


def build_listeners(cfg) -> list[Listener]:
    out = []
    for spec in cfg.listener_specs():
        def value(prop, _name=spec.name):
            return cfg.listener_value(_name, prop)

        lst = Listener(name=spec.name, protocol=spec.protocol, host=spec.host, port=spec.port,
                       advertised_host=spec.advertised_host, advertised_port=spec.advertised_port)
        _apply_settings(lst, value)
        if lst.tls:
            lst.ssl_context = build_server_context(value, spec.name)
            lst.certificate = keystore_certificate(value)
        out.append(lst)
    return out


def _apply_settings(lst: Listener, value) -> None:
    """Everything but the bind address and the TLS context, from the listener's values."""
    lst.max_receive_size = value("sasl.server.max.receive.size")
    lst.reauth_ms = value("connections.max.reauth.ms")
    lst.failed_auth_delay_ms = value("connection.failed.authentication.delay.ms")
    lst.max_connections = value("max.connections")
    if lst.tls:
        lst.principal_mapper = PrincipalMapper(value("ssl.principal.mapping.rules"))
    if lst.sasl:
        mechanisms = list(value("sasl.enabled.mechanisms"))
        prop = f"listener.name.{lst.name.lower()}.plain.sasl.jaas.config"
        users = plain_users(prop, value("plain.sasl.jaas.config"))
        if "PLAIN" in mechanisms and not users:
            log.warning("listener %s enables SASL/PLAIN but has no users: set %s "
                        "(org.apache.kafka.common.security.plain.PlainLoginModule required user_<name>=\"<password>\";)",
                        lst.name, prop)
        lst.mechanisms = mechanisms
        lst.plain_users = users
        lst.reauth_by_mechanism = {m: value(f"{m.lower()}.connections.max.reauth.ms") for m in mechanisms}
        if "OAUTHBEARER" in mechanisms:
            lst.oauth_options = oauth_validator_options(
                f"listener.name.{lst.name.lower()}.oauthbearer.sasl.jaas.config",
                value("oauthbearer.sasl.jaas.config"))


def plan_listener_settings(listeners: list[Listener], cfg) -> list[tuple[Listener, Listener]]:
    """A dynamic broker config update (or the stored dynamic configs at start) for the
    running listeners: advertised endpoints, SASL mechanisms and users, connection and
    re-authentication limits, all built from ``cfg`` first (ConfigError for a value that
    does not load, nothing changed); :func:`apply_listener_settings` then hands them over.
    The bind address stays (``listeners`` is read-only); TLS contexts change through
    :func:`plan_tls_update`."""
    specs = {spec.name: spec for spec in cfg.listener_specs()}
    staged = []
    for lst in listeners:
        spec = specs.get(lst.name)
        if spec is None:
            continue
        fresh = Listener(name=lst.name, protocol=lst.protocol, host=lst.host, port=lst.port,
                         advertised_host=spec.advertised_host, advertised_port=spec.advertised_port)

        def value(prop, _name=lst.name):
            return cfg.listener_value(_name, prop)

        _apply_settings(fresh, value)
        staged.append((lst, fresh))
    return staged


_DYNAMIC_FIELDS = ("advertised_host", "advertised_port", "max_receive_size", "reauth_ms", "failed_auth_delay_ms",
                   "max_connections", "principal_mapper", "mechanisms", "plain_users", "reauth_by_mechanism",
                   "oauth_options")


def apply_listener_settings(plan: list[tuple[Listener, Listener]]) -> None:
    """New connections and the next Metadata responses see the new settings; open
    sessions keep what they negotiated."""
    for lst, fresh in plan:
        for f in _DYNAMIC_FIELDS:
            setattr(lst, f, getattr(fresh, f))


def plan_tls_update(listeners: list[Listener], old_cfg, new_cfg, named=(), check_compatible: bool = True):
    """The TLS listeners whose key or trust material differs between two broker configs
    (or is named in ``named``, which reloads a file rewritten in place): ``[(listener,
    context, certificate)]`` to hand to :meth:`Listener.use_tls`. Everything is built and
    checked first; raises DynamicConfigError for an unknown or non-TLS listener named,
    ConfigError for a keystore that does not load, IncompatibleKeystore for a certificate
    whose DN or SANs changed."""
    from config.describe import LISTENER_RECONFIGURABLE, SSL_RECONFIGURABLE, DynamicConfigError, listener_ssl_name

    tls_props = SSL_RECONFIGURABLE | {p for p in LISTENER_RECONFIGURABLE if p.startswith("ssl.")}

    by_name = {lst.name: lst for lst in listeners}
    touched = set()
    for name in named:
        ls = listener_ssl_name(name)
        if ls is None:
            continue
        lst = by_name.get(ls[0])
        if lst is None:
            raise DynamicConfigError(f"{name}: this broker has no listener {ls[0]} (its listeners: "
                                     + ", ".join(by_name) + ")")
        if not lst.tls:
            raise DynamicConfigError(f"{name}: listener {lst.name} uses {lst.protocol}; TLS settings apply "
                                     "to SSL and SASL_SSL listeners only")
        touched.add(lst.name)
    plan = []
    for lst in listeners:
        if not lst.tls:
            continue
        changed = any(old_cfg.listener_value(lst.name, p) != new_cfg.listener_value(lst.name, p)
                      for p in tls_props)
        if not changed and lst.name not in touched:
            continue

        def value(prop, _name=lst.name):
            return new_cfg.listener_value(_name, prop)

        context = build_server_context(value, lst.name)
        certificate = keystore_certificate(value)
        if check_compatible:
            ensure_compatible(lst.certificate, certificate, bool(value("ssl.allow.dn.changes")),
                              bool(value("ssl.allow.san.changes")))
        plan.append((lst, context, certificate))
    return plan
