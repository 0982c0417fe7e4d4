"""The security building blocks without a network: SASL mechanisms (RFC 7677's test
vector, client against server, OAUTHBEARER's unsecured JWTs), the principal mapping rules, DN formatting, JAAS text,
the authorizer's rules, the durable ACL and SCRAM stores, and the metrics hooks."""

from __future__ import annotations

import base64
import os
from types import SimpleNamespace

import pytest

from broker.security import authorizer as A
from broker.security.jaas import oauth_validator_options, parse_jaas, plain_users
from broker.security.tls import NoMatchingRule, PrincipalMapper, iana_to_openssl, subject_dn
from config.properties import ConfigError
from protocol.sasl import (
    OAuthBearerServer,
    PlainServer,
    SaslAuthenticationError,
    SaslFormatError,
    ScramClient,
    ScramCredential,
    ScramServer,
    credential_from_salted,
    salted_password,
    scram_credential,
)
from storage.acl_store import AclBinding, AclStore, AclStoreError
from storage.scram_credentials import CredentialStoreError, ScramCredentialStore


# ---------------------------------------------------------------------- SASL

def test_plain_accepts_the_right_password_only():
    users = {"alice": "secret"}
    s = PlainServer(users.get)
    assert s.evaluate(b"\0alice\0secret") == b"" and s.complete and s.username == "alice"
    for token, message in ((b"\0alice\0nope", "Invalid username or password"),
                           (b"\0bob\0secret", "Invalid username or password"),
                           (b"\0\0secret", "username not specified"),
                           (b"\0alice\0", "password not specified"),
                           (b"carol\0alice\0secret", "authorization id that is different")):
        with pytest.raises(SaslAuthenticationError, match=message):
            PlainServer(users.get).evaluate(token)
    with pytest.raises(SaslFormatError, match="expected 3 tokens, got 2"):
        PlainServer(users.get).evaluate(b"alice\0secret")


def test_scram_sha256_rfc7677_vector():
    """RFC 7677 section 3: user "user", password "pencil", the server's salt and nonce."""
    salt = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
    cred = scram_credential("SCRAM-SHA-256", "pencil", 4096, salt)
    server = ScramServer("SCRAM-SHA-256", lambda u: cred if u == "user" else None)
    first = server.evaluate(b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO")
    assert first.startswith(b"r=rOprNGfwEbeRWgbNEkqO") and first.endswith(b",s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096")
    # recompute the proof for the server's own nonce, as the RFC's client would
    client = ScramClient("SCRAM-SHA-256", "user", "pencil")
    client._nonce, client._first_bare = "rOprNGfwEbeRWgbNEkqO", "n=user,r=rOprNGfwEbeRWgbNEkqO"
    final = client.final(first)
    server_final = server.evaluate(final)
    assert server.complete and server.username == "user"
    client.verify(server_final)


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_and_server(mechanism):
    cred = scram_credential(mechanism, "p@ss,w=rd", 4096)
    server = ScramServer(mechanism, {"a,b=c": cred}.get)
    client = ScramClient(mechanism, "a,b=c", "p@ss,w=rd")
    client.verify(server.evaluate(client.final(server.evaluate(client.first()))))
    assert server.username == "a,b=c"
    # a wrong password
    server = ScramServer(mechanism, {"u": cred}.get)
    client = ScramClient(mechanism, "u", "wrong")
    with pytest.raises(SaslAuthenticationError, match=f"invalid credentials with SASL mechanism {mechanism}"):
        server.evaluate(client.final(server.evaluate(client.first())))
    # an unknown user fails at the first message, with the same message
    with pytest.raises(SaslAuthenticationError, match="invalid credentials"):
        ScramServer(mechanism, {}.get).evaluate(ScramClient(mechanism, "x", "y").first())


def _final_with_nonce(client: ScramClient, server_first: bytes, nonce: str) -> bytes:
    """The client final message a client computes when it echoes ``nonce``."""
    import hashlib
    import hmac

    text = server_first.decode()
    attrs = dict(p.split("=", 1) for p in text.split(","))
    salted = salted_password(client.mechanism, client._password, base64.b64decode(attrs["s"]), int(attrs["i"]))
    without_proof = f"c=biws,r={nonce}"
    auth = f"{client._first_bare},{text},{without_proof}".encode()
    ck = hmac.new(salted, b"Client Key", client._hash).digest()
    sig = hmac.new(hashlib.new(client._hash, ck).digest(), auth, client._hash).digest()
    return f"{without_proof},p={base64.b64encode(bytes(a ^ b for a, b in zip(ck, sig))).decode()}".encode()


def test_scram_nonce_and_format_rules():
    cred = scram_credential("SCRAM-SHA-256", "pw", 4096)
    # librdkafka 2.0 sends its own nonce again in front of the server's: Kafka accepts a
    # final nonce that ends with the server's (ScramSaslServer), and so do we
    server = ScramServer("SCRAM-SHA-256", {"u": cred}.get)
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    first = server.evaluate(client.first())
    server_nonce = dict(p.split("=", 1) for p in first.decode().split(","))["r"]
    server.evaluate(_final_with_nonce(client, first, client._nonce + server_nonce))
    assert server.complete
    # a nonce that does not end with the server's is refused
    server = ScramServer("SCRAM-SHA-256", {"u": cred}.get)
    client = ScramClient("SCRAM-SHA-256", "u", "pw")
    first = server.evaluate(client.first())
    with pytest.raises(SaslFormatError, match="nonce"):
        server.evaluate(_final_with_nonce(client, first, client._nonce + "forged"))
    with pytest.raises(SaslFormatError, match="channel binding"):
        ScramServer("SCRAM-SHA-256", {"u": cred}.get).evaluate(b"p=tls-unique,,n=u,r=abc")
    with pytest.raises(SaslFormatError):
        ScramServer("SCRAM-SHA-256", {"u": cred}.get).evaluate(b"garbage")


def test_stored_credential_matches_salted_password():
    salt = os.urandom(16)
    salted = salted_password("SCRAM-SHA-512", "pw", salt, 4096)
    assert credential_from_salted("SCRAM-SHA-512", salted, salt, 4096) == scram_credential("SCRAM-SHA-512", "pw", 4096, salt)


# ---------------------------------------------------------------------- OAUTHBEARER

def _jwt(claims, header=None, signature=""):
    import json

    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return part(header or {"alg": "none"}) + "." + part(claims) + "." + signature


def _first(jwt, authzid="", ext=""):
    return f"n,{'a=' + authzid if authzid else ''},\x01auth=Bearer {jwt}\x01{ext}\x01".encode()


NOW_MS = 1_700_000_000_000


def _refusal(claims, **options):
    """The JSON challenge and the logged reason of a refused token (None: accepted)."""
    server = OAuthBearerServer(lambda: NOW_MS, **options)
    answer = server.evaluate(_first(_jwt(claims)))
    if server.complete:
        return None
    with pytest.raises(SaslAuthenticationError) as failed:
        server.evaluate(b"\x01")
    assert str(failed.value) == answer.decode()
    return answer.decode(), server.failure_reason


def test_oauthbearer_unsecured_jwt_rules():
    now = NOW_MS / 1000
    server = OAuthBearerServer(lambda: NOW_MS)
    assert server.evaluate(_first(_jwt({"sub": "alice", "exp": now + 60, "iat": now}), "alice",
                                  "traceId=abc\x01")) == b""
    assert (server.complete, server.username, server.expires_ms, server.extensions) == (
        True, "alice", NOW_MS + 60_000, {"traceId": "abc"})
    invalid = '{"status":"invalid_token"}'
    assert _refusal({"sub": "alice", "exp": now})[0] == invalid  # exp is not after now
    assert _refusal({"sub": "alice", "exp": now - 1}, clock_skew_ms=2000) is None
    assert "Issued At" in _refusal({"sub": "a", "exp": now + 60, "iat": now + 5})[1]
    assert "was not after the Issued At" in _refusal({"sub": "a", "exp": now + 60, "iat": now + 60},
                                                     clock_skew_ms=100_000)[1]
    assert _refusal({"sub": "a"})[1] == "No expiration time in JWT"
    assert "was not of type Number" in _refusal({"sub": "a", "exp": "soon"})[1]
    assert _refusal({"sub": " ", "exp": now + 60})[1] == "No principal name in JWT claim: sub"
    assert _refusal({"user": "bob", "exp": now + 60}, principal_claim="user") is None
    far = OAuthBearerServer(lambda: NOW_MS)
    far.evaluate(_first(_jwt({"sub": "a", "exp": 1e308})))
    assert far.complete and far.expires_ms == 2**63 - 1  # saturates as Java's Math.round
    assert _refusal({"sub": "a", "exp": now + 60, "scope": ["read", "write"]},
                    required_scope=("write", "admin"))[0] == '{"status":"insufficient_scope", "scope":"[write, admin]"}'
    assert _refusal({"sub": "a", "exp": now + 60, "scp": "admin"}, scope_claim="scp", required_scope=("admin",)) is None
    assert _refusal({"sub": "a", "exp": now + 60, "scope": 7})[0] == invalid
    # the token's own form
    for bad, reason in [(_jwt({"sub": "a", "exp": now + 60}, {"alg": "HS256"}), "'none' for an algorithm"),
                        (_jwt({"sub": "a", "exp": now + 60}, signature="c2ln"), "must not contain a digital signature"),
                        ("abc.def", "3 dot-separated"), ("a..b", "contains '..'"),
                        ("e30.x.", "malformed Base64"), ("e30.WzFd.", "malformed JSON"),
                        ("e30." + base64.urlsafe_b64encode(b'{"sub":"a","exp":Infinity}').decode().rstrip("=") + ".",
                         "malformed JSON")]:
        server = OAuthBearerServer(lambda: NOW_MS)
        assert server.evaluate(_first(bad)) == invalid.encode() and reason in server.failure_reason, bad
    # the client's message: RFC 7628's grammar, Kafka's errors
    for message in [b"n,,auth=Bearer x\x01\x01", b"n,,\x01\x01", b"n,,\x01auth=Basic abc\x01\x01",
                    b"n,,\x01auth=Bearer a b\x01\x01", b"n,,\x01auth=Bearer x\x011bad=v\x01\x01", b"\xff"]:
        with pytest.raises(SaslFormatError):
            OAuthBearerServer(lambda: NOW_MS).evaluate(message)
    with pytest.raises(SaslAuthenticationError, match="different from the token's principal name"):
        OAuthBearerServer(lambda: NOW_MS).evaluate(_first(_jwt({"sub": "alice", "exp": now + 60}), "bob"))
    with pytest.raises(SaslFormatError):  # a lone ^A before any error is no first message
        OAuthBearerServer(lambda: NOW_MS).evaluate(b"\x01")


def test_oauthbearer_client_token_from_jaas_options():
    """The tools' side (Kafka's unsecured login handler) against the broker's check."""
    from protocol.sasl import oauthbearer_client_first, unsecured_login_token

    options = {"unsecuredLoginStringClaim_sub": "alice", "unsecuredLoginListClaim_scope": "|read|write",
               "unsecuredLoginNumberClaim_level": "3", "unsecuredLoginLifetimeSeconds": "60",
               "unsecuredLoginExtension_traceId": "t1"}
    token, extensions = unsecured_login_token(options, NOW_MS)
    server = OAuthBearerServer(lambda: NOW_MS + 59_000, required_scope=("write",))
    assert server.evaluate(oauthbearer_client_first(token, extensions)) == b""
    assert (server.username, server.expires_ms, server.extensions) == ("alice", NOW_MS + 60_000, {"traceId": "t1"})
    late = OAuthBearerServer(lambda: NOW_MS + 60_000)
    assert late.evaluate(oauthbearer_client_first(token, {})) == b'{"status":"invalid_token"}'
    assert unsecured_login_token({"unsecuredLoginPrincipalClaimName": "user",
                                  "unsecuredLoginStringClaim_user": "bob"}, NOW_MS)[0]
    for bad in ({}, {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginLifetimeSeconds": "soon"},
                {"unsecuredLoginStringClaim_sub": "a", "unsecuredLoginNumberClaim_n": "x"}):
        with pytest.raises(ValueError):
            unsecured_login_token(bad, NOW_MS)


def test_oauthbearer_jaas_options():
    assert oauth_validator_options("p", None) == {"principal_claim": "sub", "scope_claim": "scope",
                                                  "required_scope": (), "clock_skew_ms": 0}
    text = ('org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredValidatorPrincipalClaimName="user" unsecuredValidatorScopeClaimName="scp" '
            'unsecuredValidatorRequiredScope="read  write" unsecuredValidatorAllowableClockSkewMs="3000";')
    assert oauth_validator_options("p", text) == {"principal_claim": "user", "scope_claim": "scp",
                                                  "required_scope": ("read", "write"), "clock_skew_ms": 3000}
    for skew in ("-1", "soon"):
        with pytest.raises(ConfigError, match="unsecuredValidatorAllowableClockSkewMs"):
            oauth_validator_options("p", text.replace('"3000"', f'"{skew}"'))


# ---------------------------------------------------------------------- TLS names

def test_subject_dn_is_rfc2253_most_specific_first():
    cert = {"subject": ((("countryName", "US"),), (("organizationName", "Example, Inc"),),
                        (("organizationalUnitName", "eng"),), (("commonName", "alice"),))}
    assert subject_dn(cert) == r"CN=alice,OU=eng,O=Example\, Inc,C=US"
    email = {"subject": ((("commonName", "x"),), (("emailAddress", "a@b"),))}
    assert subject_dn(email) == "1.2.840.113549.1.9.1=#1603614062,CN=x"


def test_principal_mapping_rules():
    m = PrincipalMapper("RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=.*$/$1@$2/L,DEFAULT")
    assert m.name("CN=kafka-svc,OU=ServiceUsers,O=Org,C=US") == "kafka-svc"
    assert m.name("CN=Alice,OU=ENG,O=Org,C=US") == "alice@eng"
    assert m.name("CN=plain") == "CN=plain"
    upper = PrincipalMapper("RULE:^CN=([a-z]+)$/$1/U")
    assert upper.name("CN=bob") == "BOB"
    with pytest.raises(NoMatchingRule):
        upper.name("CN=Bob,O=x")
    assert PrincipalMapper("DEFAULT").name("CN=a,O=b") == "CN=a,O=b"
    with pytest.raises(ConfigError, match="Invalid rule"):
        PrincipalMapper("RULE:missing-slashes")


def test_iana_cipher_names():
    assert iana_to_openssl("TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"
    assert iana_to_openssl("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256") == "ECDHE-ECDSA-CHACHA20-POLY1305"
    assert iana_to_openssl("TLS_RSA_WITH_AES_256_GCM_SHA384") == "AES256-GCM-SHA384"
    assert iana_to_openssl("ECDHE-RSA-AES128-GCM-SHA256") == "ECDHE-RSA-AES128-GCM-SHA256"


def test_jaas_text():
    text = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
            'password="a\\"b" user_admin="a\\"b" user_alice=alice-secret;')
    [(module, flag, options)] = parse_jaas("p", text)
    assert module.endswith("PlainLoginModule") and flag == "required" and options["password"] == 'a"b'
    assert plain_users("p", text) == {"admin": 'a"b', "alice": "alice-secret"}
    for bad in ("PlainLoginModule user_a=b;", "PlainLoginModule required user_a=b", "x required a;"):
        with pytest.raises(ConfigError) as ei:
            parse_jaas("listener.name.x.plain.sasl.jaas.config", bad)
        assert "[hidden]" in str(ei.value) and "user_a=b" not in str(ei.value)


# ---------------------------------------------------------------------- authorizer

def _authz(tmp_path, acls, super_users="", allow_if_none=False):
    store = AclStore(str(tmp_path))
    store.change(add=acls)
    return A.Authorizer(store, super_users, allow_if_none)


def acl(rtype, name, op, perm=A.ALLOW, principal="User:alice", pattern=A.LITERAL, host="*"):
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def test_authorizer_rules(tmp_path):
    z = _authz(tmp_path, [
        acl(A.TOPIC, "orders", A.READ),
        acl(A.TOPIC, "app-", A.WRITE, pattern=A.PREFIXED),
        acl(A.TOPIC, "*", A.DESCRIBE, principal="User:*"),
        acl(A.TOPIC, "app-secret", A.WRITE, perm=A.DENY, principal="User:*"),
        acl(A.GROUP, "g", A.ALL, host="10.0.0.1"),
        acl(A.TOPIC, "cfg", A.ALTER_CONFIGS),
        acl(A.TOPIC, "deny-read", A.READ, perm=A.DENY),
        acl(A.TOPIC, "deny-read", A.DESCRIBE),
    ], super_users="User:admin;User:ops")
    ok = lambda op, rtype, name, who="User:alice", host="127.0.0.1": z.allowed(who, host, op, rtype, name)  # noqa: E731
    assert ok(A.READ, A.TOPIC, "orders") and not ok(A.WRITE, A.TOPIC, "orders")
    assert ok(A.DESCRIBE, A.TOPIC, "orders")  # READ implies DESCRIBE
    assert ok(A.WRITE, A.TOPIC, "app-1") and not ok(A.WRITE, A.TOPIC, "ap")  # prefixed
    assert not ok(A.WRITE, A.TOPIC, "app-secret")  # DENY wins, User:* included
    assert ok(A.DESCRIBE, A.TOPIC, "anything", who="User:bob")  # wildcard name and principal
    assert ok(A.READ, A.GROUP, "g", host="10.0.0.1") and not ok(A.READ, A.GROUP, "g")  # host
    assert ok(A.DESCRIBE_CONFIGS, A.TOPIC, "cfg")  # ALTER_CONFIGS implies DESCRIBE_CONFIGS
    assert not ok(A.READ, A.TOPIC, "deny-read") and ok(A.DESCRIBE, A.TOPIC, "deny-read")  # DENY implies nothing
    assert ok(A.ALTER, A.CLUSTER, A.CLUSTER_NAME, who="User:ops")  # super user
    assert not ok(A.READ, A.TOPIC, "no-acl-at-all")


def _linear(z, principal, host, op, rtype, name) -> bool:
    """The decision read off every ACL in turn (what the index must give)."""
    if principal in z.super_users:
        return True
    principals = (principal, principal.split(":", 1)[0] + ":*")
    applying = [a for a in z.store.all() if A.applies_to(a, rtype, name)]
    results = [A._result(a, principals, host, op) for a in applying]
    if A.DENY in results:
        return False
    return A.ALLOW in results or (z.allow_if_no_acl and not applying)


@pytest.mark.parametrize("seed", range(4))
def test_the_acl_index_decides_as_reading_every_acl(tmp_path, seed):
    """Authorizer reads only the ACLs indexed under the resource's name, ``*`` and the
    name's prefixes; over random ACLs (LITERAL, PREFIXED, ``*``, principals, hosts,
    operations, DENY and ALLOW) and random actions it decides as reading them all does."""
    import random

    rng = random.Random(seed)
    names = ["a", "ab", "abc", "abd", "b", "ba", "*", "orders", "ord", "o", "orders-eu"]
    ops = [A.ALL, A.READ, A.WRITE, A.DESCRIBE, A.ALTER, A.ALTER_CONFIGS, A.DESCRIBE_CONFIGS, A.DELETE]
    acls = [AclBinding(rng.choice([A.TOPIC, A.GROUP]), rng.choice(names), rng.choice([A.LITERAL, A.PREFIXED]),
                       rng.choice(["User:alice", "User:bob", "User:*"]), rng.choice(["*", "10.0.0.1"]),
                       rng.choice(ops), rng.choice([A.ALLOW, A.ALLOW, A.DENY])) for _ in range(rng.randint(0, 40))]
    acls = [a for a in acls if not (a.pattern_type == A.PREFIXED and a.resource_name == "*")]
    z = _authz(tmp_path, acls, super_users="User:root", allow_if_none=seed % 2 == 0)
    decided = set()
    for _ in range(3000):
        action = (rng.choice(["User:alice", "User:bob", "User:carol", "User:root"]),
                  rng.choice(["10.0.0.1", "10.0.0.2"]), rng.choice(ops[1:]), rng.choice([A.TOPIC, A.GROUP]),
                  rng.choice(names + ["abcd", "x", "order", "orders-us"]))
        want = _linear(z, *action)
        assert z.allowed(*action) == want, action
        session = SimpleNamespace(principal=action[0], client_ip=action[1])
        assert z.authorize(session, *action[2:]) == want, action  # remembered or not, the same
        decided.add(want)
    assert decided == {True, False}


def test_allowed_decisions_are_remembered_until_the_acls_change(tmp_path, monkeypatch):
    """authorize remembers what it allowed (per principal, host, operation and resource
    type) and hands it out as allowed_names; a denial is decided, counted and logged
    every time; any change of the ACLs starts from nothing; the memory is bounded."""
    class Denials:
        n = 0

        def authorization_denied(self, api, rtype):
            self.n += 1

    store = AclStore(str(tmp_path))
    store.change(add=[acl(A.TOPIC, "t", A.WRITE), acl(A.TOPIC, "u", A.WRITE)])
    denials = Denials()
    z = A.Authorizer(store, "", False, denials)
    alice = SimpleNamespace(principal="User:alice", client_ip="1.2.3.4")
    names = z.allowed_names(alice, A.WRITE, A.TOPIC)
    assert names == set()
    assert z.authorize(alice, A.WRITE, A.TOPIC, "t") and not z.authorize(alice, A.WRITE, A.TOPIC, "v")
    assert not z.authorize(alice, A.WRITE, A.TOPIC, "v")
    assert names == {"t"} and denials.n == 2 and z.allowed_names(alice, A.WRITE, A.TOPIC) is names
    assert z.allowed_names(alice, A.READ, A.TOPIC) == set()  # another operation's
    assert z.allowed_names(SimpleNamespace(principal="User:alice", client_ip="5.6.7.8"), A.WRITE, A.TOPIC) == set()
    store.change(add=[acl(A.TOPIC, "t", A.WRITE, perm=A.DENY, principal="User:*")])
    assert z.allowed_names(alice, A.WRITE, A.TOPIC) == set() and names == {"t"}  # a new set; the old one kept
    assert not z.authorize(alice, A.WRITE, A.TOPIC, "t") and denials.n == 3
    monkeypatch.setattr(A, "REMEMBERED_MAX", 1)
    assert z.authorize(alice, A.WRITE, A.TOPIC, "u")
    assert z.allowed_names(alice, A.WRITE, A.TOPIC) == {"u"}
    assert z.authorize(bob := SimpleNamespace(principal="User:bob", client_ip="1.2.3.4"), A.WRITE, A.TOPIC, "x") \
        is False and z.authorize(alice, A.DESCRIBE, A.TOPIC, "u")  # WRITE implies DESCRIBE: a second name
    assert z.allowed_names(alice, A.WRITE, A.TOPIC) == set()  # over the bound: started again
    assert z.allowed_names(alice, A.DESCRIBE, A.TOPIC) == {"u"} and z.allowed_names(bob, A.WRITE, A.TOPIC) == set()


def test_allow_everyone_if_no_acl_found(tmp_path):
    z = _authz(tmp_path, [acl(A.TOPIC, "guarded", A.READ)], allow_if_none=True)
    assert z.allowed("User:bob", "h", A.WRITE, A.TOPIC, "free")  # no ACL on the resource
    assert not z.allowed("User:bob", "h", A.READ, A.TOPIC, "guarded")  # an ACL exists: denied


def test_authorized_operations_bitfield(tmp_path):
    z = _authz(tmp_path, [acl(A.TOPIC, "t", A.READ), acl(A.TOPIC, "t", A.ALTER_CONFIGS)])
    session = SimpleNamespace(principal="User:alice", client_ip="1.2.3.4")
    assert z.authorized_ops(session, A.TOPIC, "t") == (1 << A.READ) | (1 << A.DESCRIBE) | \
        (1 << A.ALTER_CONFIGS) | (1 << A.DESCRIBE_CONFIGS)


def test_group_authorized_operations_include_its_configs(tmp_path):
    """Kafka 4.0's groups have configs (KIP-848), so a group's operations are READ,
    DESCRIBE, DELETE, DESCRIBE_CONFIGS and ALTER_CONFIGS (librdkafka's 0081 asks for
    all five from a 4.0 broker); an ACL allowing ALTER_CONFIGS shows in the bitfield."""
    z = _authz(tmp_path, [acl(A.GROUP, "g", A.READ), acl(A.GROUP, "g", A.ALTER_CONFIGS)], allow_if_none=True)
    session = SimpleNamespace(principal="User:alice", client_ip="1.2.3.4")
    everything = {A.READ, A.DESCRIBE, A.DELETE, A.DESCRIBE_CONFIGS, A.ALTER_CONFIGS}
    assert z.authorized_ops(session, A.GROUP, "free") == sum(1 << op for op in everything)  # no ACL on it
    assert z.authorized_ops(session, A.GROUP, "g") == sum(1 << op for op in everything - {A.DELETE})


def test_acl_filters():
    f = SimpleNamespace(resource_type_filter=A.TOPIC, resource_name_filter="app-1", pattern_type_filter=A.MATCH,
                        principal_filter=None, host_filter=None, operation=A.ANY_OP, permission_type=A.ANY_PERMISSION)
    assert A.filter_matches(f, acl(A.TOPIC, "app-", A.WRITE, pattern=A.PREFIXED))
    assert A.filter_matches(f, acl(A.TOPIC, "*", A.WRITE))
    assert not A.filter_matches(f, acl(A.TOPIC, "other", A.WRITE))
    f.pattern_type_filter = A.LITERAL
    assert not A.filter_matches(f, acl(A.TOPIC, "*", A.WRITE))
    f.pattern_type_filter, f.principal_filter = A.ANY_PATTERN, "User:bob"
    assert not A.filter_matches(f, acl(A.TOPIC, "app-1", A.WRITE))


# ---------------------------------------------------------------------- stores

def test_acl_store_is_durable_and_refuses_a_damaged_file(tmp_path):
    store = AclStore(str(tmp_path))
    a = acl(A.GROUP, "name with spaces/%", A.READ, principal="User:CN=x,O=y")
    store.change(add=[a, acl(A.TOPIC, "t", A.WRITE)])
    store.change(remove=[acl(A.TOPIC, "t", A.WRITE)])
    assert AclStore(str(tmp_path)).all() == frozenset({a})
    (tmp_path / "acls").write_text("chronolog-acls 1\nTOPIC LITERAL User:a * READ\n")
    with pytest.raises(AclStoreError, match="line 2"):
        AclStore(str(tmp_path))


def test_scram_store_keeps_no_password(tmp_path):
    store = ScramCredentialStore(str(tmp_path))
    cred = scram_credential("SCRAM-SHA-256", "the-password", 4096)
    store.apply({("bob smith", "SCRAM-SHA-256"): (cred.salt, cred.stored_key, cred.server_key, cred.iterations)}, [])
    again = ScramCredentialStore(str(tmp_path))
    assert ScramCredential(*again.get("bob smith", "SCRAM-SHA-256")) == cred
    assert again.users() == {"bob smith": [("SCRAM-SHA-256", 4096)]}
    assert "the-password" not in (tmp_path / "scram-credentials").read_text()
    again.apply({}, [("bob smith", "SCRAM-SHA-256")])
    assert ScramCredentialStore(str(tmp_path)).users() == {}
    (tmp_path / "scram-credentials").write_text("something else\n")
    with pytest.raises(CredentialStoreError, match="line 1"):
        ScramCredentialStore(str(tmp_path))


def test_security_metrics_are_exported():
    from prometheus_client import generate_latest

    from broker.metrics import BrokerMetrics

    m = BrokerMetrics(process_metrics=False)
    m.authentication("SASL_SSL", "PLAIN", False)
    m.authorization_denied("Produce", "Topic")
    m.connection_rejected("PLAINTEXT")
    m.connections_changed("PLAINTEXT", 3)
    text = generate_latest(m.registry).decode()
    assert 'chronolog_authentications_total{listener="SASL_SSL",mechanism="PLAIN",result="failure"} 1.0' in text
    assert 'chronolog_authorization_denied_total{api="Produce",resource_type="Topic"} 1.0' in text
    assert 'chronolog_connections{listener="PLAINTEXT"} 3.0' in text


def test_inline_pem_keystore_loads_and_names_its_certificate(tmp_path):
    """ssl.keystore.certificate.chain + ssl.keystore.key (Kafka's inline PEM): the context
    serves them and keystore_certificate reads the broker certificate from the chain;
    the private temporary file is gone afterwards."""
    import ssl
    import subprocess
    import tempfile

    from broker.security.tls import build_server_context, keystore_certificate

    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "k.pem", "-out", "c.pem",
                    "-days", "2", "-subj", "/CN=inline.example"], cwd=tmp_path, check=True, capture_output=True)
    values = {"ssl.enabled.protocols": ["TLSv1.2", "TLSv1.3"], "ssl.keystore.type": "PEM",
              "ssl.keystore.certificate.chain": (tmp_path / "c.pem").read_text(),
              "ssl.keystore.key": (tmp_path / "k.pem").read_text(), "ssl.client.auth": "none"}
    before = set(os.listdir(tempfile.gettempdir()))
    ctx = build_server_context(values.get, "SSL")
    assert isinstance(ctx, ssl.SSLContext)
    assert subject_dn(keystore_certificate(values.get)) == "CN=inline.example"
    assert not {n for n in set(os.listdir(tempfile.gettempdir())) - before if n.startswith("chronolog-tls-")}
    with pytest.raises(ConfigError, match="ssl.keystore.key"):
        build_server_context({**values, "ssl.keystore.key": "not a key"}.get, "SSL")


def test_tls_listener_on_all_interfaces_binds_one_ephemeral_port():
    """TlsServer binds every address of an empty host (IPv4 and IPv6 here) on the same
    port when asked for port 0, as loop.create_server does."""
    import asyncio

    from broker.connection import TlsServer

    async def bind():
        srv = await TlsServer.start(SimpleNamespace(handshakes=set()), SimpleNamespace(name="SSL"), "", 0)
        try:
            return [s.getsockname()[1] for s in srv.sockets]
        finally:
            srv.close()
            await srv.wait_closed()

    ports = asyncio.run(bind())
    assert len(ports) >= 1 and len(set(ports)) == 1, ports
