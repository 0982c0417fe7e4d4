"""``--command-config FILE`` for the command-line tools: the client properties Kafka's
tools read (``security.protocol``, ``sasl.mechanism``, ``sasl.jaas.config`` or
``sasl.username``/``sasl.password``, ``ssl.truststore.location`` (PEM) or
``ssl.ca.location``, ``ssl.keystore.location`` (PEM key + chain) or
``ssl.certificate.location`` + ``ssl.key.location``, ``ssl.key.password``,
``ssl.endpoint.identification.algorithm``), and what a connection does with them: TLS,
then SaslHandshake v1 and SaslAuthenticate with PLAIN, SCRAM or OAUTHBEARER (an unsecured
JWT made from ``OAuthBearerLoginModule``'s ``unsecuredLogin*`` options, as Kafka's tools
make it)."""

from __future__ import annotations

import re
import ssl
from dataclasses import dataclass
from typing import Optional

from broker.tools import ToolError, UsageError

_JAAS_OPTION = re.compile(r'(\w+)\s*=\s*"((?:\\.|[^"\\])*)"')


@dataclass
class ClientSecurity:
    protocol: str = "PLAINTEXT"
    mechanism: str = "GSSAPI"
    username: Optional[str] = None
    password: Optional[str] = None
    oauth_options: Optional[dict] = None  # OAUTHBEARER: the JAAS options of the login module
    ssl_context: Optional[ssl.SSLContext] = None
    check_hostname: bool = True

    @property
    def tls(self) -> bool:
        return self.protocol in ("SSL", "SASL_SSL")

    @property
    def sasl(self) -> bool:
        return self.protocol.startswith("SASL_")


def load_command_config(path: Optional[str]) -> ClientSecurity:
    if not path:
        return ClientSecurity()
    from config.properties import load_properties

    try:
        props = load_properties(path)
    except OSError as exc:
        raise UsageError(f"--command-config {path}: {exc.strerror or exc}") from None
    sec = ClientSecurity(protocol=props.get("security.protocol", "PLAINTEXT").strip().upper(),
                         mechanism=props.get("sasl.mechanism", "GSSAPI").strip().upper())
    if sec.protocol not in ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"):
        raise UsageError(f"--command-config {path}: security.protocol={sec.protocol} is not one of "
                         "PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL")
    if sec.sasl:
        if sec.mechanism not in ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER"):
            raise UsageError(f"--command-config {path}: sasl.mechanism={sec.mechanism} is not supported "
                             "(PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)")
        options = dict((k, re.sub(r"\\(.)", r"\1", v)) for k, v in _JAAS_OPTION.findall(props.get("sasl.jaas.config", "")))
        if sec.mechanism == "OAUTHBEARER":
            from protocol.sasl import unsecured_login_token

            try:
                unsecured_login_token(options, 0)  # the options checked once, here
            except ValueError as exc:
                raise UsageError(f"--command-config {path}: {exc}") from None
            sec.oauth_options = options
            options = {}
        sec.username = props.get("sasl.username", options.get("username"))
        sec.password = props.get("sasl.password", options.get("password"))
        if sec.oauth_options is None and (not sec.username or sec.password is None):
            raise UsageError(f"--command-config {path}: SASL needs sasl.jaas.config with username=\"...\" "
                             "password=\"...\" (or sasl.username and sasl.password)")
    if sec.tls:
        ctx = ssl.create_default_context()
        ca = props.get("ssl.truststore.location") or props.get("ssl.ca.location")
        try:
            if ca:
                ctx.load_verify_locations(cafile=ca.strip())
            cert = props.get("ssl.keystore.location") or props.get("ssl.certificate.location")
            if cert:
                ctx.load_cert_chain(cert.strip(), props.get("ssl.key.location"), password=props.get("ssl.key.password"))
        except (OSError, ssl.SSLError) as exc:
            raise UsageError(f"--command-config {path}: cannot load TLS material: {exc}") from None
        if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
            ctx.check_hostname = False
        sec.ssl_context = ctx
    return sec


def authenticate(conn, sec: ClientSecurity) -> None:
    """SaslHandshake v1 + SaslAuthenticate on a connection that has negotiated versions."""
    from protocol.messages import SaslAuthenticateRequest, SaslHandshakeRequest
    from protocol.sasl import ScramClient

    _, resp = conn.request(SaslHandshakeRequest(mechanism=sec.mechanism), 1)
    if resp.error_code:
        raise ToolError(f"broker {conn.host}:{conn.port} does not enable SASL mechanism {sec.mechanism} "
                        f"(enabled: {', '.join(resp.mechanisms)})")
    v = min(conn.versions.get(36, (0, 1))[1], 2)

    def step(token: bytes) -> bytes:
        _, r = conn.request(SaslAuthenticateRequest(auth_bytes=token), v)
        if r.error_code:
            raise ToolError(f"authentication to {conn.host}:{conn.port} failed: {r.error_message}")
        return bytes(r.auth_bytes)

    if sec.mechanism == "PLAIN":
        step(b"\0" + sec.username.encode() + b"\0" + sec.password.encode())
        return
    if sec.mechanism == "OAUTHBEARER":
        import time

        from protocol.sasl import oauthbearer_client_first, unsecured_login_token

        token, extensions = unsecured_login_token(sec.oauth_options, int(time.time() * 1000))
        answer = step(oauthbearer_client_first(token, extensions))
        if answer:  # RFC 7628's error challenge: ^A gets the failure, with its JSON
            step(b"\x01")
        return
    client = ScramClient(sec.mechanism, sec.username, sec.password)
    server_first = step(client.first())
    client.verify(step(client.final(server_first)))
