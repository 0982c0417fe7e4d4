"""SASL server mechanisms, sans-IO: client tokens in, server tokens out.

* PLAIN (RFC 4616): one token ``authzid NUL authcid NUL password``; Kafka's rules: exactly
  three parts, the user and password not empty, an authorization id empty or the user.
* OAUTHBEARER (RFC 7628) with Kafka's default check of unsecured JWTs: see
  :class:`OAuthBearerServer`.
* SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677), as Kafka's ScramSaslServer: client
  first message ``n,[a=authzid],n=user,r=nonce[,extensions]``, server first
  ``r=nonce,s=salt,i=iterations``, client final ``c=biws,r=nonce,p=proof``, server final
  ``v=signature``. No channel binding (``p=`` GS2 flags are refused).

A mechanism is an object with ``evaluate(token) -> bytes``, ``complete``,
``username``, ``expires_ms`` (when the credential expires, wall clock, or None: the
session ends with it, as Kafka's SaslServer's CREDENTIAL_LIFETIME_MS) and
``failure_reason`` (why a credential was refused, for the log only, or None). Wrong
credentials raise :class:`SaslAuthenticationError` (its message goes to the client as
it is, so it never says whether the user exists); a malformed token
raises :class:`SaslFormatError`. Credentials are looked up through a callable given by
the broker (``lookup(user) -> secret or None``); nothing here touches files or sockets.

:func:`scram_credential` computes what the broker stores (salt, stored key, server key,
iterations: never the password), as Kafka's ScramFormatter.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import re
import unicodedata
from dataclasses import dataclass
from typing import Callable, Optional

HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
# Kafka's ScramMechanism: minimum iterations 4096; AlterUserScramCredentials caps at 16384
MIN_ITERATIONS = 4096
MAX_ITERATIONS = 16384


class SaslAuthenticationError(Exception):
    """Wrong credentials: the message is what the client is told."""


class SaslFormatError(Exception):
    """A token that does not follow the mechanism's grammar."""


@dataclass(frozen=True)
class ScramCredential:
    """What the broker keeps for one user and mechanism (RFC 5802's stored values)."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


def salted_password(mechanism: str, password: str, salt: bytes, iterations: int) -> bytes:
    """Hi(Normalize(password), salt, i): PBKDF2 with the mechanism's HMAC."""
    norm = unicodedata.normalize("NFKC", password)
    return hashlib.pbkdf2_hmac(HASHES[mechanism], norm.encode("utf-8"), salt, iterations)


def credential_from_salted(mechanism: str, salted: bytes, salt: bytes, iterations: int) -> ScramCredential:
    h = HASHES[mechanism]
    client_key = hmac.new(salted, b"Client Key", h).digest()
    stored_key = hashlib.new(h, client_key).digest()
    server_key = hmac.new(salted, b"Server Key", h).digest()
    return ScramCredential(salt, stored_key, server_key, iterations)


def scram_credential(mechanism: str, password: str, iterations: int, salt: Optional[bytes] = None) -> ScramCredential:
    salt = salt if salt is not None else os.urandom(32)
    return credential_from_salted(mechanism, salted_password(mechanism, password, salt, iterations), salt, iterations)


# ---------------------------------------------------------------------- PLAIN

class PlainServer:
    """``lookup(user) -> password or None`` (the JAAS ``user_<name>`` entries)."""

    mechanism = "PLAIN"
    expires_ms: Optional[int] = None  # a password does not expire
    failure_reason: Optional[str] = None

    def __init__(self, lookup: Callable[[str], Optional[str]]) -> None:
        self._lookup = lookup
        self.complete = False
        self.username: Optional[str] = None

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFormatError("Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise SaslFormatError(f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authz, user, password = parts
        if not user:
            raise SaslAuthenticationError("Authentication failed: username not specified")
        if not password:
            raise SaslAuthenticationError("Authentication failed: password not specified")
        expected = self._lookup(user)
        # compare in constant time, and compare even for an unknown user
        ok = hmac.compare_digest((expected or "\0unknown").encode("utf-8"), password.encode("utf-8"))
        if expected is None or not ok:
            raise SaslAuthenticationError("Authentication failed: Invalid username or password")
        if authz and authz != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self.username = user
        self.complete = True
        return b""


# ---------------------------------------------------------------------- OAUTHBEARER

_OAUTH_FIRST = re.compile(
    r"n,(?:a=(?P<authzid>(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,\x01"
    r"(?P<kvpairs>(?:[A-Za-z]+=[\x21-\x7e \t\r\n]+\x01)*)\x01", re.S)
_OAUTH_AUTH = re.compile(r"(?P<scheme>\w+) +(?P<token>[-_.a-zA-Z0-9]+)", re.A)
_LONG_MAX = 2**63 - 1


class OAuthBearerServer:
    """SASL/OAUTHBEARER (RFC 7628) with Kafka's default token check, the one a broker
    uses when no ``sasl.server.callback.handler.class`` is set: an unsecured JWT
    (OAuthBearerUnsecuredValidatorCallbackHandler), meant for development and tests.

    The client's first message is ``n,[a=authzid],^Aauth=Bearer <jwt>^A[key=value^A]...^A``
    (``^A`` = 0x01). The JWT is ``base64url(header).base64url(claims).`` with
    ``"alg": "none"`` and no signature; its claims must hold a string principal (``sub``,
    or ``principal_claim``), a numeric ``exp`` after now - ``clock_skew_ms``, an
    optional numeric ``iat`` not after now + skew and before ``exp``, and every
    ``required_scope`` in its ``scope`` claim (a string or a list). Extensions are
    accepted as they are, as Kafka's default does. A token that fails is answered with
    RFC 7628's JSON error (``{"status":"invalid_token"}``, or ``insufficient_scope``
    with the scope) as a challenge; the client's ``^A`` then ends the exchange with
    that JSON as the failure message. ``expires_ms`` (the token's ``exp``) bounds the
    session; ``now_ms`` is the wall clock, given by the caller.
    """

    mechanism = "OAUTHBEARER"

    def __init__(self, now_ms: Callable[[], int], principal_claim: str = "sub", scope_claim: str = "scope",
                 required_scope: tuple = (), clock_skew_ms: int = 0) -> None:
        self._now_ms = now_ms
        self._principal_claim = principal_claim
        self._scope_claim = scope_claim
        self._required_scope = tuple(required_scope)
        self._skew = clock_skew_ms
        self._error: Optional[str] = None
        self.complete = False
        self.username: Optional[str] = None
        self.expires_ms: Optional[int] = None
        self.extensions: dict[str, str] = {}
        self.failure_reason: Optional[str] = None  # why the token was refused (logs only)

    def evaluate(self, token: bytes) -> bytes:
        if bytes(token) == b"\x01" and self._error is not None:
            raise SaslAuthenticationError(self._error)
        self._error = None
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFormatError("Invalid OAUTHBEARER client first message: not UTF-8") from None
        m = _OAUTH_FIRST.fullmatch(text)
        if m is None:
            raise SaslFormatError("Invalid OAUTHBEARER client first message")
        pairs = {}
        for item in m.group("kvpairs").split("\x01")[:-1]:
            key, _, value = item.partition("=")
            pairs[key] = value
        auth = pairs.pop("auth", None)
        if auth is None:
            raise SaslFormatError("Invalid OAUTHBEARER client first message: 'auth' not specified")
        am = _OAUTH_AUTH.fullmatch(auth)
        if am is None:
            raise SaslFormatError("Invalid OAUTHBEARER client first message: invalid 'auth' format")
        if am.group("scheme").lower() != "bearer":
            raise SaslFormatError(f"Invalid scheme in OAUTHBEARER client first message: {am.group('scheme')[:32]}")
        try:
            principal, expires_ms = self._validate(am.group("token"))
        except _TokenRefused as refused:
            self.failure_reason = str(refused)
            if refused.scope is not None:
                self._error = '{"status":"insufficient_scope", "scope":"%s"}' % refused.scope
            else:
                self._error = '{"status":"invalid_token"}'
            return self._error.encode()
        authzid = m.group("authzid") or ""
        if authzid and authzid != principal:
            raise SaslAuthenticationError(
                f"Authentication failed: Client requested an authorization id ({authzid}) that is different "
                f"from the token's principal name ({principal})")
        self.extensions = pairs
        self.username = principal
        self.expires_ms = expires_ms
        self.complete = True
        return b""

    def _validate(self, jwt: str) -> tuple[str, int]:
        if ".." in jwt:
            raise _TokenRefused("Malformed compact serialization contains '..'")
        parts = jwt.split(".")
        if len(parts) != 3:
            raise _TokenRefused("Unsecured JWS compact serializations must have 3 dot-separated Base64URL-encoded "
                                "values")
        header, claims = _jws_json(parts[0]), _jws_json(parts[1])
        if header.get("alg") != "none":
            raise _TokenRefused("Unsecured JWS must have 'none' for an algorithm")
        if parts[2]:
            raise _TokenRefused("Unsecured JWS must not contain a digital signature")
        scope = claims.get(self._scope_claim)
        if isinstance(scope, str):
            scope_set = {scope.strip()} if scope.strip() else set()
        elif isinstance(scope, list):
            scope_set = {str(x).strip() for x in scope if str(x).strip()}
        elif scope is None:
            scope_set = set()
        else:
            raise _TokenRefused(f"The '{self._scope_claim}' claim was not of type List")
        exp = _number_claim(claims, "exp")
        if exp is None:
            raise _TokenRefused("No expiration time in JWT")
        principal = claims.get(self._principal_claim)
        if not isinstance(principal, str) or not principal.strip():
            raise _TokenRefused(f"No principal name in JWT claim: {self._principal_claim}")
        iat = _number_claim(claims, "iat")
        now = self._now_ms()
        if iat is not None and 1000 * iat > now + self._skew:
            raise _TokenRefused(f"The Issued At value ({iat:f} seconds) was after the indicated time ({now} ms) "
                                f"plus allowable clock skew ({self._skew} ms)")
        if now - self._skew >= 1000 * exp:
            raise _TokenRefused(f"The indicated time ({now} ms) minus allowable clock skew ({self._skew} ms) was on "
                                f"or after the Expiration Time value ({exp:f} seconds)")
        if iat is not None and exp <= iat:
            raise _TokenRefused(f"The Expiration Time time ({exp:f} seconds) was not after the Issued At time "
                                f"({iat:f} seconds)")
        for needed in self._required_scope:
            if needed not in scope_set:
                raise _TokenRefused(f"The provided scope ({sorted(scope_set)}) was missing a required scope "
                                    f"({needed})", scope="[" + ", ".join(self._required_scope) + "]")
        exp_ms = 1000 * exp  # Java's Math.round saturates at Long.MAX_VALUE; so does this
        return principal, int(round(exp_ms)) if exp_ms < _LONG_MAX else _LONG_MAX


def unsecured_login_token(options: dict, now_ms: int) -> tuple[str, dict]:
    """The client side of the same check, as Kafka's OAuthBearerUnsecuredLoginCallbackHandler
    makes a token from its JAAS options: ``unsecuredLoginStringClaim_<name>``,
    ``unsecuredLoginNumberClaim_<name>`` and ``unsecuredLoginListClaim_<name>`` (its
    first character the separator) claims, ``unsecuredLoginLifetimeSeconds`` (3600), and
    ``unsecuredLoginExtension_<name>`` extensions. Returns (JWT, extensions); the
    principal claim (``sub``, or ``unsecuredLoginPrincipalClaimName``) is required.
    Raises ValueError naming a bad option."""
    claims: dict = {}
    extensions = {}
    for key, value in options.items():
        if key.startswith("unsecuredLoginStringClaim_"):
            claims[key[len("unsecuredLoginStringClaim_"):]] = value
        elif key.startswith("unsecuredLoginNumberClaim_"):
            try:
                claims[key[len("unsecuredLoginNumberClaim_"):]] = float(value) if "." in value else int(value)
            except ValueError:
                raise ValueError(f"{key}={value!r} is not a number") from None
        elif key.startswith("unsecuredLoginListClaim_"):
            separator, rest = value[:1], value[1:]
            claims[key[len("unsecuredLoginListClaim_"):]] = [v for v in rest.split(separator) if v] if value else []
        elif key.startswith("unsecuredLoginExtension_"):
            extensions[key[len("unsecuredLoginExtension_"):]] = value
    principal_claim = options.get("unsecuredLoginPrincipalClaimName", "").strip() or "sub"
    if not isinstance(claims.get(principal_claim), str) or not claims[principal_claim].strip():
        raise ValueError(f'OAUTHBEARER needs unsecuredLoginStringClaim_{principal_claim}="<principal>" '
                         "in sasl.jaas.config")
    try:
        lifetime = int(options.get("unsecuredLoginLifetimeSeconds", "3600"))
    except ValueError:
        raise ValueError("unsecuredLoginLifetimeSeconds is not a whole number of seconds") from None
    claims.setdefault("iat", now_ms / 1000.0)
    claims.setdefault("exp", now_ms / 1000.0 + lifetime)

    def part(d: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(d, separators=(",", ":")).encode()).rstrip(b"=").decode()

    return part({"alg": "none"}) + "." + part(claims) + ".", extensions


def oauthbearer_client_first(token: str, extensions: dict) -> bytes:
    """RFC 7628's client first message: ``n,,^Aauth=Bearer <token>^A[key=value^A]...^A``."""
    ext = "".join(f"{k}={v}\x01" for k, v in extensions.items())
    return f"n,,\x01auth=Bearer {token}\x01{ext}\x01".encode()


class _TokenRefused(Exception):
    def __init__(self, message: str, scope: Optional[str] = None) -> None:
        super().__init__(message)
        self.scope = scope


def _jws_json(part: str) -> dict:
    try:
        raw = base64.b64decode(part + "=" * (-len(part) % 4), altchars=b"-_", validate=True)
    except ValueError:
        raise _TokenRefused("malformed Base64 URL encoded value") from None
    try:  # NaN and Infinity are not JSON (Python's parser would take them)
        value = json.loads(raw, parse_constant=_not_json)
    except (ValueError, RecursionError):
        raise _TokenRefused("malformed JSON") from None
    if not isinstance(value, dict):
        raise _TokenRefused("malformed JSON")
    return value


def _not_json(constant: str):
    raise ValueError(constant)


def _number_claim(claims: dict, name: str) -> Optional[float]:
    value = claims.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _TokenRefused(f"The '{name}' claim was not of type Number")
    return float(value)


# ---------------------------------------------------------------------- SCRAM

_CLIENT_FIRST = re.compile(
    r"^n,(?:a=(?P<authzid>(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+))?,"
    r"(?P<bare>n=(?P<saslname>(?:[\x01-\x2b\x2d-\x3c\x3e-\x7f]|=2C|=3D)+),"
    r"r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)(?P<extensions>(?:,[A-Za-z]=[^,]*)*))$")
_CLIENT_FINAL = re.compile(
    r"^(?P<without_proof>c=(?P<channel>[A-Za-z0-9+/=]+),r=(?P<nonce>[\x21-\x2b\x2d-\x7e]+)"
    r"(?:,[A-Za-z]=[^,]*)*),p=(?P<proof>[A-Za-z0-9+/=]+)$")


def _saslname_to_user(name: str) -> str:
    return name.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """``lookup(user) -> ScramCredential or None``."""

    expires_ms: Optional[int] = None  # a SCRAM credential does not expire (no delegation tokens)
    failure_reason: Optional[str] = None

    def __init__(self, mechanism: str, lookup: Callable[[str], Optional[ScramCredential]]) -> None:
        if mechanism not in HASHES:
            raise ValueError(mechanism)
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._lookup = lookup
        self.complete = False
        self.username: Optional[str] = None
        self._state = 0
        self._first_bare = ""
        self._server_first = ""
        self._nonce = ""
        self._gs2 = ""
        self._cred: Optional[ScramCredential] = None

    def _fail(self) -> SaslAuthenticationError:
        return SaslAuthenticationError("Authentication failed during authentication due to invalid credentials "
                                       f"with SASL mechanism {self.mechanism}")

    def evaluate(self, token: bytes) -> bytes:
        try:
            text = bytes(token).decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFormatError("Invalid SCRAM message: not UTF-8") from None
        if self._state == 0:
            return self._first(text)
        if self._state == 1:
            return self._final(text)
        raise SaslFormatError("Unexpected SCRAM message after the exchange completed")

    def _first(self, text: str) -> bytes:
        m = _CLIENT_FIRST.match(text)
        if m is None:
            if text.startswith(("p=", "y,")) or text[:2] == "p=":
                raise SaslFormatError("Invalid SCRAM client first message: channel binding is not supported")
            raise SaslFormatError("Invalid SCRAM client first message")
        user = _saslname_to_user(m.group("saslname"))
        authz = m.group("authzid")
        if m.group("extensions") and "tokenauth=true" in m.group("extensions"):
            raise self._fail()  # delegation tokens are not implemented
        cred = self._lookup(user)
        if cred is None:
            raise self._fail()
        if authz and _saslname_to_user(authz) != user:
            raise SaslAuthenticationError(
                "Authentication failed: Client requested an authorization id that is different from username")
        self._cred = cred
        self.username = user
        self._gs2 = text[: m.start("bare")]
        self._first_bare = m.group("bare")
        # alphanumeric, as Kafka's ScramFormatter.secureRandomString (some clients
        # mis-parse other printable characters)
        self._nonce = m.group("nonce") + format(int.from_bytes(os.urandom(17), "big"), "x")
        self._server_first = f"r={self._nonce},s={base64.b64encode(cred.salt).decode()},i={cred.iterations}"
        self._state = 1
        return self._server_first.encode()

    def _final(self, text: str) -> bytes:
        m = _CLIENT_FINAL.match(text)
        if m is None:
            raise SaslFormatError("Invalid SCRAM client final message")
        # Kafka accepts a nonce that ends with the server's (librdkafka 2.0 sends its own
        # nonce again in front of it)
        if not m.group("nonce").endswith(self._nonce):
            raise SaslFormatError("Invalid client nonce in the final client message.")
        try:
            channel = base64.b64decode(m.group("channel"), validate=True).decode("utf-8", "replace")
            proof = base64.b64decode(m.group("proof"), validate=True)
        except ValueError:
            raise SaslFormatError("Invalid SCRAM client final message: bad base64") from None
        if channel != self._gs2:
            raise SaslFormatError("Invalid SCRAM client final message: channel binding does not match")
        cred = self._cred
        auth_message = f"{self._first_bare},{self._server_first},{m.group('without_proof')}".encode()
        client_signature = hmac.new(cred.stored_key, auth_message, self._hash).digest()
        if len(proof) != len(client_signature):
            raise self._fail()
        client_key = bytes(a ^ b for a, b in zip(proof, client_signature))
        if not hmac.compare_digest(hashlib.new(self._hash, client_key).digest(), cred.stored_key):
            raise self._fail()
        server_signature = hmac.new(cred.server_key, auth_message, self._hash).digest()
        self._state = 2
        self.complete = True
        return b"v=" + base64.b64encode(server_signature)


# ---------------------------------------------------------------------- clients (tools)

class ScramClient:
    """The client side of SCRAM, for the command-line tools: ``first()``, then
    ``final(server_first)``, then ``verify(server_final)`` (raises SaslAuthenticationError
    when the server's signature is wrong)."""

    def __init__(self, mechanism: str, username: str, password: str) -> None:
        self.mechanism = mechanism
        self._hash = HASHES[mechanism]
        self._user = username.replace("=", "=3D").replace(",", "=2C")
        self._password = password
        self._nonce = format(int.from_bytes(os.urandom(18), "big"), "x")
        self._first_bare = f"n={self._user},r={self._nonce}"
        self._auth_message = b""
        self._salted = b""

    def first(self) -> bytes:
        return ("n,," + self._first_bare).encode()

    def final(self, server_first: bytes) -> bytes:
        text = bytes(server_first).decode("utf-8")
        attrs = dict(part.split("=", 1) for part in text.split(",") if "=" in part)
        nonce, salt, iterations = attrs.get("r", ""), attrs.get("s"), int(attrs.get("i", "0"))
        if not nonce.startswith(self._nonce) or salt is None or iterations < 1:
            raise SaslFormatError("Invalid SCRAM server first message")
        self._salted = salted_password(self.mechanism, self._password, base64.b64decode(salt), iterations)
        without_proof = f"c=biws,r={nonce}"
        self._auth_message = f"{self._first_bare},{text},{without_proof}".encode()
        client_key = hmac.new(self._salted, b"Client Key", self._hash).digest()
        stored_key = hashlib.new(self._hash, client_key).digest()
        signature = hmac.new(stored_key, self._auth_message, self._hash).digest()
        proof = bytes(a ^ b for a, b in zip(client_key, signature))
        return f"{without_proof},p={base64.b64encode(proof).decode()}".encode()

    def verify(self, server_final: bytes) -> None:
        text = bytes(server_final).decode("utf-8", "replace")
        server_key = hmac.new(self._salted, b"Server Key", self._hash).digest()
        expected = b"v=" + base64.b64encode(hmac.new(server_key, self._auth_message, self._hash).digest())
        if not hmac.compare_digest(text.encode(), expected):
            raise SaslAuthenticationError("the broker's SCRAM signature is wrong: " + text[:64])
