"""SASL authentication of one connection, as Kafka's SaslServerAuthenticator.

On a SASL_PLAINTEXT or SASL_SSL listener a connection starts unauthenticated. Until it
succeeds only these are served:

1. ApiVersions (once, before the handshake);
2. SaslHandshake v0-1: the mechanism must be enabled on the listener, else
   UNSUPPORTED_SASL_MECHANISM and the connection is closed;
3. after SaslHandshake v1: SaslAuthenticate v0-2 requests carry the tokens; after v0 (the
   legacy framing old clients use) the next frames are raw tokens, answered by raw
   size-prefixed tokens.

Any other request before authentication closes the connection (during the exchange a
non-SaslAuthenticate request first gets ILLEGAL_SASL_STATE), as Kafka does. Failed
credentials answer SASL_AUTHENTICATION_FAILED with Kafka's message after
``connection.failed.authentication.delay.ms``, then close. Tokens are bounded by
``sasl.server.max.receive.size``.

Re-authentication (KIP-368): with ``connections.max.reauth.ms`` > 0 a successful
SaslAuthenticate v1+ tells the client its session lifetime; a client may send
SaslHandshake + SaslAuthenticate again on the open connection (same mechanism, same
principal). A request arriving after the session expired closes the connection. An
OAUTHBEARER session also ends when its token expires (the lesser of the two), as in
Kafka.

No password or token ever reaches a log line: failures log the peer, listener,
mechanism, user name and Kafka's reason.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from dataclasses import dataclass
from typing import Optional

from protocol import codec
from protocol.errors import ErrorCode
from protocol.messages import SaslAuthenticateResponse, SaslHandshakeResponse
from protocol.sasl import (
    OAuthBearerServer,
    PlainServer,
    SaslAuthenticationError,
    SaslFormatError,
    ScramCredential,
    ScramServer,
)

log = logging.getLogger("chronolog.security")

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
_STRUCT = struct.Struct(">i")

# handle_unauthenticated's answer for ApiVersions: the dispatcher serves it as usual
SERVE = object()

# session states
INITIAL, HANDSHAKE, AUTHENTICATE, RAW, COMPLETE = "initial", "handshake", "authenticate", "raw", "complete"


@dataclass
class Session:
    """Who is on the other end of one connection, and how far its authentication got."""

    listener: object  # broker.security.listeners.Listener
    client_ip: str
    principal: str = "User:ANONYMOUS"
    state: str = COMPLETE
    mechanism: Optional[str] = None
    server: object = None  # the mechanism exchange in progress
    supports_reauth: bool = False
    reauthenticating: bool = False
    expires_at_ms: Optional[int] = None
    user: Optional[str] = None
    counted: bool = False  # counted by broker.security.limits until the connection closes

    @property
    def authenticated(self) -> bool:
        return self.state == COMPLETE

    @property
    def client_host(self) -> str:
        """The client's address as Kafka reports it (``/127.0.0.1``)."""
        return "/" + self.client_ip


def new_session(listener, client_ip: str) -> Session:
    return Session(listener=listener, client_ip=client_ip, state=INITIAL if listener.sasl else COMPLETE)


class Authenticator:
    """Serves the SASL part of the protocol for every connection of the broker."""

    def __init__(self, ctx) -> None:
        self.ctx = ctx

    # -- entry points (Dispatcher) -----------------------------------------------------
    def handle_unauthenticated(self, conn, frame):
        """A frame on a connection that has not authenticated (or is re-authenticating).
        Returns what Dispatcher.dispatch returns."""
        session = conn.session
        if session.state == RAW:
            return self._raw_token(conn, frame)
        try:
            header, offset = codec.decode_request_header(frame)
        except codec.DecodeError as exc:
            return self._close(conn, f"undecodable request header during SASL authentication: {exc}")
        key = header.api_key
        if session.state in (INITIAL, HANDSHAKE):
            if key == API_VERSIONS and session.state == INITIAL:
                from broker.dispatcher import SUPPORTED

                if header.api_version <= SUPPORTED[API_VERSIONS][1]:
                    session.state = HANDSHAKE  # an unsupported version may be retried (KIP-511)
                return SERVE
            if key != SASL_HANDSHAKE:
                return self._close(conn, f"unexpected Kafka request of type {codec.API_KEYS.get(key, key)} "
                                         "during SASL handshake")
            return self._handshake(conn, header, offset, frame)
        # AUTHENTICATE
        if key != SASL_AUTHENTICATE:
            return self._illegal_state(conn, header,
                                       f"Unexpected Kafka request of type {codec.API_KEYS.get(key, key)} "
                                       "during SASL authentication.")
        return self._authenticate(conn, header, offset, frame)

    def handle_authenticated(self, conn, header, offset, frame):
        """SaslHandshake / SaslAuthenticate on an authenticated connection: the start of
        a re-authentication (KIP-368), or a protocol error."""
        session = conn.session
        if header.api_key == SASL_HANDSHAKE and session.listener.sasl and session.supports_reauth:
            session.reauthenticating = True
            session.state = HANDSHAKE
            return self._handshake(conn, header, offset, frame)
        if header.api_key == SASL_HANDSHAKE:
            return self._encode(header, SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=list(session.listener.mechanisms)))
        return self._encode(header, SaslAuthenticateResponse(
            error_code=ErrorCode.ILLEGAL_SASL_STATE,
            error_message="SaslAuthenticate request received after successful authentication",
            auth_bytes=b""))

    def session_expired(self, session: Session) -> bool:
        return session.expires_at_ms is not None and self.ctx.clock.monotonic_ms() > session.expires_at_ms

    # -- steps -------------------------------------------------------------------------
    def _handshake(self, conn, header, offset, frame):
        session = conn.session
        try:
            request = codec.decode_request_body(header, frame, offset)
        except codec.DecodeError as exc:
            return self._close(conn, f"malformed SaslHandshake request: {exc}")
        listener = session.listener
        mechanism = request.mechanism
        enabled = list(listener.mechanisms)
        if mechanism not in enabled:
            log.info("authentication failed for %s on listener %s: unsupported SASL mechanism %r (enabled: %s)",
                     conn._peer, listener.name, mechanism[:64], ",".join(enabled))
            self._count(listener, mechanism if len(mechanism) < 32 else "other", False)
            return self._fail(conn, self._encode(header, SaslHandshakeResponse(
                error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled)))
        if session.reauthenticating and mechanism != session.mechanism:
            return self._fail(conn, self._encode(header, SaslHandshakeResponse(
                error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=enabled)),
                reason=f"re-authentication with {mechanism} after {session.mechanism}")
        session.mechanism = mechanism
        session.server = self._mechanism(mechanism, listener)
        session.state = AUTHENTICATE if header.api_version >= 1 else RAW
        return self._encode(header, SaslHandshakeResponse(error_code=0, mechanisms=enabled))

    def _mechanism(self, mechanism: str, listener):
        if mechanism == "PLAIN":
            users = listener.plain_users
            return PlainServer(users.get)
        if mechanism == "OAUTHBEARER":
            return OAuthBearerServer(self.ctx.clock.time_ms, **listener.oauth_options)
        store = self.ctx.scram_store

        def lookup(user: str, _mech=mechanism):
            cred = store.get(user, _mech) if store is not None else None
            return None if cred is None else ScramCredential(*cred)

        return ScramServer(mechanism, lookup)

    def _authenticate(self, conn, header, offset, frame):
        session = conn.session
        if header.api_version > 2:
            return self._close(conn, f"unsupported SaslAuthenticate version {header.api_version}")
        if len(frame) > session.listener.max_receive_size:
            return self._oversized(conn, frame)
        try:
            request = codec.decode_request_body(header, frame, offset)
        except codec.DecodeError as exc:
            return self._close(conn, f"malformed SaslAuthenticate request: {exc}")
        if header.api_version > 0:
            session.supports_reauth = True
        try:
            token = session.server.evaluate(request.auth_bytes)
        except SaslAuthenticationError as exc:
            why = session.server.failure_reason  # e.g. a refused OAUTHBEARER token's reason
            return self._auth_failed(conn, header, str(exc), f"{exc} ({why})" if why else str(exc))
        except SaslFormatError as exc:
            message = ("Authentication failed during authentication due to invalid credentials with SASL "
                       f"mechanism {session.mechanism}")
            return self._auth_failed(conn, header, message, str(exc))
        lifetime = 0
        if session.server.complete:
            failure = self._complete(conn)
            if failure is not None:
                return self._auth_failed(conn, header, failure, failure)
            lifetime = self._lifetime(session)
        return self._encode(header, SaslAuthenticateResponse(
            error_code=0, error_message=None, auth_bytes=token, session_lifetime_ms=lifetime))

    def _raw_token(self, conn, frame):
        session = conn.session
        if len(frame) > session.listener.max_receive_size:
            return self._oversized(conn, frame)
        try:
            token = session.server.evaluate(bytes(frame))
        except (SaslAuthenticationError, SaslFormatError) as exc:
            # the legacy framing has no way to say why: close after the delay
            return self._fail(conn, [], reason=str(exc))
        if session.server.complete:
            failure = self._complete(conn)
            if failure is not None:
                return self._fail(conn, [], reason=failure)
        # Kafka answers every raw token, an empty one (PLAIN's) included, size-prefixed
        return [_STRUCT.pack(len(token)), token]

    def _complete(self, conn) -> Optional[str]:
        session = conn.session
        principal = "User:" + session.server.username
        if session.reauthenticating and principal != session.principal:
            return "Cannot change principals during re-authentication from " + session.principal + ": " + principal
        first = not session.reauthenticating
        credential_expires_ms = session.server.expires_ms  # e.g. an OAUTHBEARER token's exp
        session.principal = principal
        session.user = session.server.username
        session.state = COMPLETE
        session.reauthenticating = False
        session.server = None
        reauth = session.listener.reauth_ms_for(session.mechanism)
        lifetime = reauth if reauth > 0 else None
        if credential_expires_ms is not None:  # Kafka: the session ends with the credential
            left = min(max(0, credential_expires_ms - self.ctx.clock.time_ms()), 2**53)  # a float-exact bound
            lifetime = left if lifetime is None else min(lifetime, left)
        session.expires_at_ms = self.ctx.clock.monotonic_ms() + lifetime if lifetime is not None else None
        self._count(session.listener, session.mechanism, True)
        if first:
            log.debug("%s authenticated as %s with %s on listener %s", conn._peer, principal,
                      session.mechanism, session.listener.name)
        return None

    def _lifetime(self, session: Session) -> int:
        if session.expires_at_ms is None:
            return 0
        return max(0, int(session.expires_at_ms - self.ctx.clock.monotonic_ms()))

    # -- outcomes ----------------------------------------------------------------------
    def _encode(self, header, body):
        return codec.encode_response(header.api_key, header.api_version, header.correlation_id, body)

    def _illegal_state(self, conn, header, message):
        if header.api_key == SASL_HANDSHAKE:
            body = SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
            return self._fail(conn, self._encode(header, body), reason=message, delay=False)
        return self._close(conn, message)

    def _oversized(self, conn, frame):
        return self._close(conn, f"SASL token of {len(frame)} bytes is over sasl.server.max.receive.size="
                                 f"{conn.session.listener.max_receive_size}")

    def _auth_failed(self, conn, header, message: str, reason: str):
        """SASL_AUTHENTICATION_FAILED with Kafka's ``message``, after the delay, then close."""
        return self._fail(conn, self._encode(header, SaslAuthenticateResponse(
            error_code=ErrorCode.SASL_AUTHENTICATION_FAILED, error_message=message, auth_bytes=b"")),
            reason=reason)

    def _close(self, conn, reason: str):
        log.info("closing connection from %s on listener %s: %s", conn._peer, conn.session.listener.name, reason)
        conn.close()
        return None

    def _fail(self, conn, chunks, reason: str = "", delay: bool = True):
        session = conn.session
        listener = session.listener
        user = getattr(session.server, "username", None) if session.server is not None else None
        if reason:
            log.info("authentication failed for %s on listener %s (mechanism %s%s): %s", conn._peer, listener.name,
                     session.mechanism, f", user {user!r}" if user else "", reason)
            self._count(listener, session.mechanism or "none", False)
        session.server = None
        session.state = "failed"
        delay_ms = listener.failed_auth_delay_ms if delay else 0
        return _respond_then_close(conn, chunks, delay_ms)

    def _count(self, listener, mechanism, ok: bool) -> None:
        metrics = getattr(self.ctx, "metrics", None)
        if metrics is not None:
            metrics.authentication(listener.name, mechanism, ok)


async def _respond_then_close(conn, chunks, delay_ms: int):
    """Kafka delays the failure response (``connection.failed.authentication.delay.ms``)
    to slow password guessing, then closes the connection."""
    if delay_ms > 0:
        await asyncio.sleep(delay_ms / 1000.0)
    if chunks:
        conn.write_chunks(chunks)
    conn.close()
    return None
