"""Connection limits, as Kafka's ConnectionQuotas: ``max.connections`` (broker-wide, and
per listener as ``listener.name.<l>.max.connections``), ``max.connections.per.ip`` and
``max.connections.per.ip.overrides`` (``host:count,...``; a host name is resolved when
the limits are set). All are dynamic broker configs: :meth:`ConnectionLimits.reconfigure`. A connection over a limit is closed at accept with a log line and counted
(``chronolog_connections_rejected_total``); the others are unaffected."""

from __future__ import annotations

import logging
import socket

from config.broker_config import parse_ip_overrides

log = logging.getLogger("chronolog.security")


class ConnectionLimits:
    def __init__(self, cfg, metrics=None) -> None:
        self.metrics = metrics
        self.total = 0
        self.per_ip: dict[str, int] = {}
        self.per_listener: dict[str, int] = {}
        self.reconfigure(cfg)

    def reconfigure(self, cfg) -> None:
        """New limits (a dynamic broker config update): they apply to the connections
        accepted from now on; open ones are not closed (as Kafka's ConnectionQuotas)."""
        overrides: dict[str, int] = {}
        for host, count in parse_ip_overrides("max.connections.per.ip.overrides",
                                              getattr(cfg, "max_connections_per_ip_overrides", "")).items():
            try:
                ip = socket.gethostbyname(host)
            except OSError:
                ip = host
            overrides[ip] = count
        self.overrides = overrides
        self.max_connections = getattr(cfg, "max_connections", 2**31 - 1)
        self.max_per_ip = getattr(cfg, "max_connections_per_ip", 2**31 - 1)

    def accept(self, conn, listener, ip: str) -> bool:
        limit_ip = self.overrides.get(ip, self.max_per_ip)
        reason = None
        if self.per_ip.get(ip, 0) >= limit_ip:
            reason = f"Too many connections from {ip} (max.connections.per.ip{' override' if ip in self.overrides else ''}={limit_ip})"
        elif self.per_listener.get(listener.name, 0) >= listener.max_connections:
            reason = f"listener {listener.name} has {listener.max_connections} connections (its max.connections)"
        elif self.total >= self.max_connections:
            reason = f"the broker has {self.max_connections} connections (max.connections)"
        if reason is not None:
            log.info("rejecting connection from %s on listener %s: %s", conn._peer, listener.name, reason)
            if self.metrics is not None:
                self.metrics.connection_rejected(listener.name)
            return False
        conn.session.counted = True
        self.total += 1
        self.per_ip[ip] = self.per_ip.get(ip, 0) + 1
        self.per_listener[listener.name] = self.per_listener.get(listener.name, 0) + 1
        if self.metrics is not None:
            self.metrics.connections_changed(listener.name, self.per_listener[listener.name])
        return True

    def release(self, conn) -> None:
        session = conn.session
        if session is None or not session.counted:
            return
        session.counted = False
        ip, name = session.client_ip, session.listener.name
        self.total -= 1
        n = self.per_ip.get(ip, 1) - 1
        if n:
            self.per_ip[ip] = n
        else:
            self.per_ip.pop(ip, None)
        self.per_listener[name] = self.per_listener.get(name, 1) - 1
        if self.metrics is not None:
            self.metrics.connections_changed(name, self.per_listener[name])
