"""Security with real clients: TLS listeners (CA verification, mutual TLS), SASL PLAIN,
SCRAM-SHA-256/512 and OAUTHBEARER (unsecured JWTs) over SASL_PLAINTEXT and SASL_SSL, ACLs, connection limits and bad
input, against confluent-kafka, kafka-python, aiokafka, kcat and kafkajs.

Certificates come from ``openssl`` (a development CA, the broker's certificate for
localhost/127.0.0.1, a client certificate, and one from a CA the broker does not trust).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import shutil
import socket
import ssl
import struct
import subprocess
import time
from pathlib import Path

import pytest

from protocol.errors import ErrorCode
from tests.integration import helpers
from tests.integration.helpers import REPO_ROOT, RawConn, frame, request_header_v1, start_broker, unique_topic

ALICE_PW, BOB_PW, ADMIN_PW = "alice-secret", "bob-secret", "admin-secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" '
        f'password="{ADMIN_PW}" user_admin="{ADMIN_PW}" user_alice="{ALICE_PW}" user_bob="{BOB_PW}";')


def _openssl(*args, cwd):
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


@pytest.fixture(scope="module")
def certs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("certs")
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
             "-days", "30", "-subj", "/CN=Chronolog Test CA", cwd=d)
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
             "-subj", "/CN=localhost", cwd=d)
    _openssl("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "broker.crt", "-days", "30", "-extfile", "san.ext", cwd=d)
    (d / "broker.pem").write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text())
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "client.key", "-out", "client.csr",
             "-subj", "/C=US/O=Example/OU=eng/CN=alice", cwd=d)
    _openssl("x509", "-req", "-in", "client.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "client.crt", "-days", "30", cwd=d)
    # a client certificate from a CA the broker does not trust
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "rogue.key", "-out", "rogue.crt",
             "-days", "30", "-subj", "/CN=mallory", cwd=d)
    return d


def tls_overrides(certs: Path, client_auth: str = "requested") -> dict:
    return {
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs / "broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs / "ca.pem"),
        "ssl.client.auth": client_auth,
    }


FOUR_LISTENERS = ("PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0,"
                  "SASL_SSL://127.0.0.1:0")


@pytest.fixture(scope="module")
def secure_broker(tmp_path_factory, certs):
    overrides = {
        "listeners": FOUR_LISTENERS,
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "auto.create.topics.enable": "false",
        **tls_overrides(certs),
    }
    b = start_broker(tmp_path_factory.mktemp("secure"), overrides)
    b.ports = b.listener_ports()
    # SCRAM users, created through the PLAINTEXT listener (no authorizer on this broker)
    _scram_upsert(f"127.0.0.1:{b.ports['PLAINTEXT']}", [("bob", "SCRAM-SHA-256", BOB_PW), ("carol", "SCRAM-SHA-512", "carol-secret")])
    yield b
    b.stop()


def _scram_upsert(bootstrap, users, iterations=4096):
    from confluent_kafka.admin import ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    mech = {"SCRAM-SHA-256": ScramMechanism.SCRAM_SHA_256, "SCRAM-SHA-512": ScramMechanism.SCRAM_SHA_512}
    admin = helpers.ck_admin(bootstrap)
    futures = admin.alter_user_scram_credentials([
        UserScramCredentialUpsertion(u, ScramCredentialInfo(mech[m], iterations), pw.encode()) for u, m, pw in users])
    for f in futures.values():
        f.result(20)


def ck_security(broker, listener: str, certs: Path, mechanism=None, user=None, password=None, client_cert=False) -> dict:
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ports[listener]}", "security.protocol": listener}
    if listener.endswith("SSL"):
        conf["ssl.ca.location"] = str(certs / "ca.pem")
    if client_cert:
        conf["ssl.certificate.location"] = str(certs / "client.crt")
        conf["ssl.key.location"] = str(certs / "client.key")
    if mechanism:
        conf.update({"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password})
    return conf


def create(broker, topic, partitions=1):
    helpers.create_topic(f"127.0.0.1:{broker.ports['PLAINTEXT']}", topic, partitions=partitions)
    return topic


def ck_roundtrip(conf: dict, topic: str, n: int = 5) -> list[bytes]:
    """Produce n records and read them back with confluent-kafka; returns the values."""
    from confluent_kafka import Consumer, Producer

    errors = []
    p = Producer({**conf, "message.timeout.ms": 15000, "error_cb": lambda e: errors.append(e)})
    delivered = []
    for i in range(n):
        p.produce(topic, f"v{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
    assert p.flush(20) == 0, f"undelivered; client errors: {errors[:3]}"
    assert delivered == [None] * n, delivered
    c = Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.assign([__import__("confluent_kafka").TopicPartition(topic, 0, 0)])
    got = []
    deadline = time.monotonic() + 20
    while len(got) < n and time.monotonic() < deadline:
        m = c.poll(1.0)
        if m is not None and not m.error():
            got.append(m.value())
    c.close()
    return got


@pytest.mark.parametrize("listener, mechanism, user, password, client_cert", [
    ("SSL", None, None, None, False),
    ("SSL", None, None, None, True),
    ("SASL_PLAINTEXT", "PLAIN", "alice", ALICE_PW, False),
    ("SASL_PLAINTEXT", "SCRAM-SHA-256", "bob", BOB_PW, False),
    ("SASL_SSL", "PLAIN", "alice", ALICE_PW, False),
    ("SASL_SSL", "SCRAM-SHA-256", "bob", BOB_PW, False),
    ("SASL_SSL", "SCRAM-SHA-512", "carol", "carol-secret", False),
], ids=["ssl", "mtls", "sasl_plaintext-plain", "sasl_plaintext-scram256", "sasl_ssl-plain",
        "sasl_ssl-scram256", "sasl_ssl-scram512"])
def test_confluent_kafka_roundtrip(secure_broker, certs, listener, mechanism, user, password, client_cert):
    topic = create(secure_broker, unique_topic(f"ck-{listener}"))
    conf = ck_security(secure_broker, listener, certs, mechanism, user, password, client_cert)
    assert ck_roundtrip(conf, topic) == [f"v{i}".encode() for i in range(5)]


def test_metadata_advertises_the_listener_the_client_came_through(secure_broker, certs):
    from confluent_kafka.admin import AdminClient

    for listener in ("PLAINTEXT", "SSL", "SASL_SSL"):
        conf = ck_security(secure_broker, listener, certs, *(("PLAIN", "alice", ALICE_PW) if listener == "SASL_SSL" else ()))
        md = AdminClient(conf).list_topics(timeout=15)
        [b] = md.brokers.values()
        assert (b.host, b.port) == ("127.0.0.1", secure_broker.ports[listener])


def test_wrong_password_fails_with_kafkas_message_and_no_secret_in_the_log(secure_broker, certs):
    from confluent_kafka import Producer

    for mechanism, user in (("PLAIN", "alice"), ("SCRAM-SHA-512", "carol"), ("SCRAM-SHA-256", "nobody")):
        errors = []
        conf = ck_security(secure_broker, "SASL_SSL", certs, mechanism, user, "Wr0ngPassw0rd!")
        p = Producer({**conf, "error_cb": lambda e: errors.append(e)})
        deadline = time.monotonic() + 15
        while not errors and time.monotonic() < deadline:
            p.poll(0.2)
        assert errors, "no authentication error reported"
        text = errors[0].str()
        assert "SASL authentication error" in text
        if mechanism == "PLAIN":
            assert "Authentication failed: Invalid username or password" in text
        else:
            assert f"due to invalid credentials with SASL mechanism {mechanism}" in text
    # what the broker wrote (the harness's "===== start" lines echo its command line)
    log = "\n".join(ln for ln in secure_broker.log_tail(400).splitlines() if not ln.startswith("====="))
    assert "authentication failed for" in log
    assert "Wr0ngPassw0rd" not in log and ALICE_PW not in log and BOB_PW not in log


def test_kafka_python_and_aiokafka_on_sasl_ssl(secure_broker, certs):
    from kafka import KafkaConsumer, KafkaProducer

    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    port = secure_broker.ports["SASL_SSL"]
    for mechanism, user, pw in (("PLAIN", "alice", ALICE_PW), ("SCRAM-SHA-256", "bob", BOB_PW),
                                ("SCRAM-SHA-512", "carol", "carol-secret")):
        topic = create(secure_broker, unique_topic("kp-" + mechanism))
        kw = dict(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_SSL", ssl_context=ctx,
                  sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=pw,
                  request_timeout_ms=15000)
        p = KafkaProducer(**kw)
        offsets = [p.send(topic, f"kp{i}".encode()).get(15).offset for i in range(3)]
        p.close()
        c = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **kw)
        got = [m.value for m in itertools.islice(c, 3)]  # not on to the consumer timeout
        c.close()
        assert offsets == [0, 1, 2] and got == [b"kp0", b"kp1", b"kp2"], (mechanism, offsets, got)

    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def aio(mechanism, user, pw):
        topic = create(secure_broker, unique_topic("aio-" + mechanism))
        kw = dict(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_SSL", ssl_context=ctx,
                  sasl_mechanism=mechanism, sasl_plain_username=user, sasl_plain_password=pw)
        p = AIOKafkaProducer(**kw)
        await p.start()
        md = await p.send_and_wait(topic, b"aio")
        await p.stop()
        c = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **kw)
        await c.start()
        try:
            m = await asyncio.wait_for(c.getone(), 15)
        finally:
            await c.stop()
        return md.offset, m.value

    for args in (("PLAIN", "alice", ALICE_PW), ("SCRAM-SHA-512", "carol", "carol-secret")):
        assert asyncio.run(aio(*args)) == (0, b"aio")


@pytest.mark.kcat
def test_kcat_on_sasl_ssl(secure_broker, certs):
    topic = create(secure_broker, unique_topic("kcat-sasl"))
    common = ["-b", f"127.0.0.1:{secure_broker.ports['SASL_SSL']}", "-X", "security.protocol=SASL_SSL",
              "-X", f"ssl.ca.location={certs / 'ca.pem'}", "-X", "sasl.mechanism=SCRAM-SHA-256",
              "-X", "sasl.username=bob", "-X", f"sasl.password={BOB_PW}", "-t", topic]
    subprocess.run(["kcat", *common, "-P"], input=b"one\ntwo\nthree\n", check=True, timeout=60, capture_output=True)
    out = subprocess.run(["kcat", *common, "-C", "-o", "beginning", "-e", "-c", "3"], check=True, timeout=60,
                         capture_output=True)
    assert out.stdout.split() == [b"one", b"two", b"three"]


def _node_script(env: dict) -> dict:
    node = shutil.which("node")
    assert node, "node is needed (make tools installs npm and kafkajs)"
    js_dir = REPO_ROOT / "tests" / "js"
    assert (js_dir / "node_modules" / "kafkajs").exists(), "kafkajs is not installed: run `make tools`"
    out = subprocess.run([node, str(js_dir / "roundtrip.js")], env={**os.environ, **env}, capture_output=True,
                         timeout=120, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("mechanism, user, password", [("PLAIN", "alice", ALICE_PW),
                                                       ("SCRAM-SHA-256", "bob", BOB_PW),
                                                       ("SCRAM-SHA-512", "carol", "carol-secret")])
def test_kafkajs_on_sasl_ssl(secure_broker, certs, mechanism, user, password):
    topic = create(secure_broker, unique_topic("kafkajs-" + mechanism))
    res = _node_script({"BROKER": f"localhost:{secure_broker.ports['SASL_SSL']}", "CA_FILE": str(certs / "ca.pem"),
                        "MECHANISM": mechanism, "USERNAME": user, "PASSWORD": password, "TOPIC": topic,
                        "GROUP": unique_topic("kjs"), "COUNT": "3"})
    assert res == {"produced": ["0"], "consumed": ["v0", "v1", "v2"]}
    bad = _node_script({"BROKER": f"localhost:{secure_broker.ports['SASL_SSL']}", "CA_FILE": str(certs / "ca.pem"),
                        "MECHANISM": mechanism, "USERNAME": user, "PASSWORD": "nope", "TOPIC": topic,
                        "GROUP": unique_topic("kjs")})
    assert "SASL" in bad.get("error", "") and "Authentication failed" in bad["error"], bad


# ---------------------------------------------------------------------------------------
# Bad input: every case closes or refuses cleanly, and other clients are unaffected
# ---------------------------------------------------------------------------------------

def _sasl_handshake(conn: RawConn, mechanism: str, version: int = 1, cid: int = 1) -> tuple[int, list[str]]:
    body = struct.pack(">h", len(mechanism)) + mechanism.encode()
    resp = conn.request(17, version, body, cid)
    err, n = struct.unpack_from(">hi", resp, 0)
    pos, mechs = 6, []
    for _ in range(n):
        (ln,) = struct.unpack_from(">h", resp, pos)
        mechs.append(resp[pos + 2:pos + 2 + ln].decode())
        pos += 2 + ln
    return err, mechs


def _sasl_authenticate(conn: RawConn, token: bytes, version: int = 1, cid: int = 2):
    resp = conn.request(36, version, struct.pack(">i", len(token)) + token, cid)
    err, = struct.unpack_from(">h", resp, 0)
    (mlen,) = struct.unpack_from(">h", resp, 2)
    msg = resp[4:4 + mlen].decode() if mlen >= 0 else None
    pos = 4 + max(mlen, 0)
    (blen,) = struct.unpack_from(">i", resp, pos)
    pos += 4 + max(blen, 0)
    lifetime = struct.unpack_from(">q", resp, pos)[0] if version >= 1 else None
    return err, msg, lifetime


def _metadata_ok(port: int) -> bool:
    with RawConn(port) as c:
        resp = c.request(3, 1, helpers.metadata_request_v1([]), 7)
        return len(resp) > 4


def test_sasl_protocol_errors_close_cleanly(secure_broker):
    port = secure_broker.ports["SASL_PLAINTEXT"]
    # an unknown mechanism: UNSUPPORTED_SASL_MECHANISM (33) with the enabled list, then closed
    with RawConn(port) as c:
        err, mechs = _sasl_handshake(c, "GSSAPI")
        assert err == 33 and set(mechs) == {"PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"}
        assert c.wait_closed(5)
    # a request other than ApiVersions/SaslHandshake before authentication: closed unanswered
    with RawConn(port) as c:
        c.send(frame(request_header_v1(3, 1, 1) + helpers.metadata_request_v1([])))
        assert c.wait_closed(5)
    # raw SASL bytes before the handshake: closed
    with RawConn(port) as c:
        c.send(frame(b"\x00alice\x00" + ALICE_PW.encode()))
        assert c.wait_closed(5)
    # a token over sasl.server.max.receive.size (512 KiB): closed
    with RawConn(port) as c:
        assert _sasl_handshake(c, "PLAIN")[0] == 0
        c.send(frame(request_header_v1(36, 1, 2) + struct.pack(">i", 600_000) + b"\0" * 600_000))
        assert c.wait_closed(5)
    # a malformed PLAIN token: SASL_AUTHENTICATION_FAILED (58), then closed
    with RawConn(port) as c:
        assert _sasl_handshake(c, "PLAIN")[0] == 0
        err, msg, _ = _sasl_authenticate(c, b"just-one-token")
        assert err == 58 and "invalid credentials with SASL mechanism PLAIN" in msg
        assert c.wait_closed(5)
    # a TLS ClientHello on a plaintext port: closed, nothing crashes
    for p in (secure_broker.ports["PLAINTEXT"], port):
        with socket.create_connection(("127.0.0.1", p), timeout=5) as s:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(s, server_hostname="localhost")
    # plaintext Kafka on a TLS port: closed
    with RawConn(secure_broker.ports["SSL"]) as c:
        c.send(frame(request_header_v1(18, 0, 1)))
        assert c.wait_closed(5)
    assert _metadata_ok(secure_broker.ports["PLAINTEXT"])
    assert secure_broker.running and "Traceback" not in secure_broker.log_tail(300)


def test_legacy_v0_framing_and_session_lifetime(secure_broker):
    """SaslHandshake v0, then the raw PLAIN token; the broker answers a raw (empty)
    token and the connection then serves Kafka requests."""
    with RawConn(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        assert _sasl_handshake(c, "PLAIN", version=0) == (0, ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"])
        c.send(frame(b"\0alice\0" + ALICE_PW.encode()))
        assert c.recv_frame() == b""
        resp = c.request(3, 1, helpers.metadata_request_v1([]), 9)
        assert len(resp) > 4
    with RawConn(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        assert _sasl_handshake(c, "PLAIN", version=0)[0] == 0
        c.send(frame(b"\0alice\0wrong"))
        assert c.wait_closed(5)  # the legacy framing cannot carry an error: closed
    with RawConn(secure_broker.ports["SASL_PLAINTEXT"]) as c:
        assert _sasl_handshake(c, "PLAIN")[0] == 0
        err, msg, lifetime = _sasl_authenticate(c, b"\0alice\0" + ALICE_PW.encode())
        assert (err, msg, lifetime) == (0, None, 0)  # connections.max.reauth.ms=0: no lifetime


def _tls_refused(port: int, certs: Path, cert=None, hostname: str = "localhost") -> int:
    """A TLS client (``cert``: its (certificate, key) files) trusting the test CA that the
    broker must refuse: the handshake fails or the connection closes before an answer.
    Returns the client's local port (what the broker's log names)."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    if cert:
        ctx.load_cert_chain(*cert)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        local_port = s.getsockname()[1]
        with pytest.raises((ssl.SSLError, OSError)):
            with ctx.wrap_socket(s, server_hostname=hostname) as t:
                t.sendall(frame(request_header_v1(18, 0, 1)))
                if not t.recv(4):
                    raise ConnectionError("closed")
        return local_port


def test_tls_client_certificates(tmp_path, certs):
    """ssl.client.auth=required: no certificate or an untrusted one is refused; a trusted
    one connects and its DN is mapped by ssl.principal.mapping.rules (checked through
    an ACL on the mapped name)."""
    b = start_broker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
        **tls_overrides(certs, "required"),
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+),OU=eng,.*$/$1-eng/L,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS",  # the PLAINTEXT listener administers
    })
    try:
        ports = b.listener_ports()
        plain = f"127.0.0.1:{ports['PLAINTEXT']}"
        topic = unique_topic("mtls")
        helpers.create_topic(plain, topic)
        from confluent_kafka.admin import AclBinding, AclOperation, AclPermissionType, ResourcePatternType, ResourceType

        admin = helpers.ck_admin(plain)
        for op in (AclOperation.WRITE, AclOperation.READ):
            for f in admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                   "User:alice-eng", "*", op, AclPermissionType.ALLOW)]).values():
                f.result(15)
        for f in admin.create_acls([AclBinding(ResourceType.GROUP, "*", ResourcePatternType.LITERAL,
                                               "User:alice-eng", "*", AclOperation.READ,
                                               AclPermissionType.ALLOW)]).values():
            f.result(15)
        b.ports = ports
        conf = ck_security(b, "SSL", certs, client_cert=True)
        assert ck_roundtrip(conf, topic, 3) == [b"v0", b"v1", b"v2"]
        # no client certificate / an untrusted one: the handshake fails
        _tls_refused(ports["SSL"], certs)
        _tls_refused(ports["SSL"], certs, (str(certs / "rogue.crt"), str(certs / "rogue.key")))
        assert _metadata_ok(ports["PLAINTEXT"])
    finally:
        b.stop()


def test_connection_limits(tmp_path):
    b = start_broker(tmp_path, {"max.connections.per.ip": "3"})
    try:
        conns = [RawConn(b.port) for _ in range(3)]
        for c in conns:  # the first three are served
            assert c.request(18, 0, b"", 1)
        extra = RawConn(b.port)
        assert extra.wait_closed(5)  # the fourth is closed at accept
        conns.pop().close()
        deadline = time.monotonic() + 5
        while True:  # a freed slot is usable again
            c = RawConn(b.port)
            try:
                if c.request(18, 0, b"", 2):
                    break
            except (ConnectionError, OSError):
                assert time.monotonic() < deadline
                time.sleep(0.1)
            finally:
                c.close()
        assert "rejecting connection from 127.0.0.1" in b.log_tail(100)
        for c in conns:
            c.close()
    finally:
        b.stop()


def test_scram_users_survive_sigkill(tmp_path):
    b = start_broker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
    })
    ports = b.listener_ports()
    _scram_upsert(f"127.0.0.1:{ports['PLAINTEXT']}", [("dave", "SCRAM-SHA-512", "dave-secret")], iterations=8192)
    b.kill()
    b.start()
    try:
        ports = b.listener_ports()
        b.ports = ports
        topic = create(b, unique_topic("scram-kill"))
        conf = {"bootstrap.servers": f"127.0.0.1:{ports['SASL_PLAINTEXT']}", "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "dave", "sasl.password": "dave-secret"}
        assert ck_roundtrip(conf, topic, 2) == [b"v0", b"v1"]
        admin = helpers.ck_admin(f"127.0.0.1:{ports['PLAINTEXT']}")
        info = admin.describe_user_scram_credentials(["dave"])["dave"].result(15).scram_credential_infos[0]
        assert info.iterations == 8192
        stored = (Path(b.log_dir) / "scram-credentials").read_text()
        assert "dave-secret" not in stored and "dave SCRAM-SHA-512 8192" in stored
    finally:
        b.stop()


# ---------------------------------------------------------------------------------------
# ACLs (StandardAuthorizer semantics) through the clients' admin APIs
# ---------------------------------------------------------------------------------------

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _plain(port, user, pw) -> dict:
    return {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": pw}


def _produce_error(conf, topic):
    """The delivery error code of one record (None when delivered)."""
    from confluent_kafka import Producer

    p = Producer({**conf, "message.timeout.ms": 8000, "retries": 0})
    out = []
    p.produce(topic, b"x", on_delivery=lambda e, m: out.append(e))
    p.flush(15)
    return None if out[0] is None else out[0].code()


def _send(producer, topic):
    """The delivery error code of one record sent by a producer kept open (None when
    delivered): its connection stays, and so does what the broker remembers of it."""
    out = []
    producer.produce(topic, b"x", on_delivery=lambda e, m: out.append(e))
    producer.flush(15)
    return None if out[0] is None else out[0].code()


def _consume_error(conf, topic, group):
    """Subscribe and poll: the first error code, or None once a record arrives."""
    from confluent_kafka import Consumer

    c = Consumer({**conf, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() in (-191,):  # _PARTITION_EOF
                    continue
                return m.error().code()
            return None
        return "timeout"
    finally:
        c.close()


def test_acls_apply_at_once_persist_and_deny_wins(tmp_path):
    from confluent_kafka import KafkaError
    from confluent_kafka.admin import (
        AclBinding, AclBindingFilter, AclOperation, AclPermissionType, NewTopic, ResourcePatternType, ResourceType,
    )

    b = start_broker(tmp_path, {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
        "auto.create.topics.enable": "false",
    })
    try:
        port = b.port
        admin_conf = _plain(port, "admin", ADMIN_PW)
        alice = _plain(port, "alice", ALICE_PW)
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(admin_conf)
        topic, hidden = unique_topic("acl"), unique_topic("acl-hidden")
        for f in admin.create_topics([NewTopic(topic, 1), NewTopic(hidden, 1)]).values():
            f.result(15)

        def allow(rtype, name, op, pattern=ResourcePatternType.LITERAL, perm=AclPermissionType.ALLOW,
                  principal="User:alice"):
            for f in admin.create_acls([AclBinding(rtype, name, pattern, principal, "*", op, perm)]).values():
                f.result(15)

        # no ACL: refused (allow.everyone.if.no.acl.found=false)
        assert _produce_error(alice, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        allow(ResourceType.TOPIC, topic, AclOperation.WRITE)
        assert _produce_error(alice, topic) is None  # applies at once
        # a producer that stays connected: its writes are remembered as allowed (and
        # answered by the compiled lane) until the ACLs change, checked further down
        from confluent_kafka import Producer

        kept = Producer({**alice, "message.timeout.ms": 8000, "retries": 0})
        assert [_send(kept, topic) for _ in range(3)] == [None] * 3
        # READ on the topic but not on the group
        allow(ResourceType.TOPIC, topic, AclOperation.READ)
        assert _consume_error(alice, topic, "app-1") == KafkaError.GROUP_AUTHORIZATION_FAILED
        allow(ResourceType.GROUP, "app-", AclOperation.READ, pattern=ResourcePatternType.PREFIXED)
        assert _consume_error(alice, topic, "app-1") is None
        assert _consume_error(alice, topic, "other-group") == KafkaError.GROUP_AUTHORIZATION_FAILED
        # Metadata shows only what alice may describe (WRITE/READ imply DESCRIBE)
        names = set(AdminClient(alice).list_topics(timeout=15).topics)
        assert topic in names and hidden not in names
        # authorized operations, as librdkafka's admin client reads them (Metadata v8+, DescribeCluster)
        from confluent_kafka import TopicCollection

        alice_admin = AdminClient(alice)  # kept: a collected client cancels its futures
        desc = alice_admin.describe_topics(TopicCollection([topic]), include_authorized_operations=True)[topic].result(15)
        assert {op.name for op in desc.authorized_operations} == {"READ", "WRITE", "DESCRIBE"}
        cluster = alice_admin.describe_cluster(include_authorized_operations=True).result(15)
        assert not cluster.authorized_operations
        cluster = admin.describe_cluster(include_authorized_operations=True).result(15)
        assert {op.name for op in cluster.authorized_operations} >= {"ALTER", "DESCRIBE", "CREATE", "IDEMPOTENT_WRITE"}
        # creating topics and ACLs needs the cluster
        res = alice_admin.create_topics([NewTopic(unique_topic("nope"), 1)])
        with pytest.raises(Exception) as ei:
            list(res.values())[0].result(15)
        assert ei.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
        res = alice_admin.create_acls([AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL,
                                                         "User:alice", "*", AclOperation.ALL, AclPermissionType.ALLOW)])
        with pytest.raises(Exception) as ei:
            list(res.values())[0].result(15)
        assert ei.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
        # DENY wins over ALLOW, for User:* too
        allow(ResourceType.TOPIC, topic, AclOperation.WRITE, perm=AclPermissionType.DENY, principal="User:*")
        assert _produce_error(alice, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        assert _send(kept, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED  # on its open connection too
        # kafka-python's admin client lists and deletes them
        from kafka.admin import ACLFilter, ACLOperation, ACLPermissionType, KafkaAdminClient
        from kafka.admin import ResourcePatternFilter, ResourceType as KRT, ACLResourcePatternType

        kp = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{port}", security_protocol="SASL_PLAINTEXT",
                              sasl_mechanism="PLAIN", sasl_plain_username="admin", sasl_plain_password=ADMIN_PW)
        acls, err = kp.describe_acls(ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                                               permission_type=ACLPermissionType.ANY,
                                               resource_pattern=ResourcePatternFilter(KRT.TOPIC, topic,
                                                                                      ACLResourcePatternType.MATCH)))
        assert {(a.principal, a.operation.name, a.permission_type.name) for a in acls} == {
            ("User:alice", "WRITE", "ALLOW"), ("User:alice", "READ", "ALLOW"), ("User:*", "WRITE", "DENY")}
        deleted = kp.delete_acls([ACLFilter(principal="User:*", host="*", operation=ACLOperation.WRITE,
                                            permission_type=ACLPermissionType.DENY,
                                            resource_pattern=ResourcePatternFilter(KRT.TOPIC, topic,
                                                                                   ACLResourcePatternType.LITERAL))])
        assert len(deleted[0][1]) == 1
        kp.close()
        assert _produce_error(alice, topic) is None
        # (librdkafka holds a topic refused on produce as failed until its metadata is read again)
        assert kept.list_topics(topic, timeout=10).topics[topic].error is None
        assert _send(kept, topic) is None
        kept.flush(5)
        # ACLs are durable: SIGKILL, restart, same answers
        b.kill()
        b.start()
        port = b.port
        alice, admin_conf = _plain(port, "alice", ALICE_PW), _plain(port, "admin", ADMIN_PW)
        assert _produce_error(alice, topic) is None
        assert _produce_error(_plain(port, "bob", BOB_PW), topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
        admin = AdminClient(admin_conf)
        found = admin.describe_acls(AclBindingFilter(
            ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
            AclPermissionType.ANY)).result(15)
        assert len(found) == 3
    finally:
        b.stop()


def test_cli_acls_and_scram_users_with_command_config(tmp_path, certs):
    """chronolog acls / configs --entity-type users, authenticating with --command-config
    as kafka-acls.sh and kafka-configs.sh do; then the user they made logs in."""
    b = start_broker(tmp_path, {
        "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
        "listener.name.sasl_ssl.plain.sasl.jaas.config": JAAS,
        "authorizer.class.name": STANDARD_AUTHORIZER,
        "super.users": "User:admin",
        **tls_overrides(certs, "none"),
    })
    try:
        ports = b.listener_ports()
        props = tmp_path / "admin.properties"
        props.write_text("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n"
                         "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required "
                         f'username="admin" password="{ADMIN_PW}";\n'
                         f"ssl.truststore.type=PEM\nssl.truststore.location={certs / 'ca.pem'}\n")
        base = [os.path.join(os.path.dirname(__import__("sys").executable), "chronolog")]
        common = ["--bootstrap-server", f"localhost:{ports['SASL_SSL']}", "--command-config", str(props)]

        def run(*args, ok=True):
            out = subprocess.run([*base, *args], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
            assert (out.returncode == 0) == ok, (args, out.stdout, out.stderr)
            return out.stdout + out.stderr

        run("configs", *common, "--entity-type", "users", "--entity-name", "erin", "--alter", "--add-config",
            "SCRAM-SHA-512=[iterations=8192,password=erin-secret]")
        assert "SCRAM-SHA-512=iterations=8192" in run("configs", *common, "--entity-type", "users", "--describe")
        topic = unique_topic("cli-acl")
        run("topics", *common, "--create", "--topic", topic)
        out = run("acls", *common, "--add", "--allow-principal", "User:erin", "--producer", "--topic", topic)
        assert "operation=WRITE, permissionType=ALLOW" in out
        listed = run("acls", *common, "--list", "--topic", topic)
        assert f"name={topic}, patternType=LITERAL" in listed and listed.count("User:erin") == 3
        # the anonymous PLAINTEXT client may not
        assert "CLUSTER_AUTHORIZATION_FAILED" in run("acls", "--bootstrap-server", f"127.0.0.1:{ports['PLAINTEXT']}",
                                                     "--list", ok=False)
        b.ports = ports
        conf = ck_security(b, "SASL_SSL", certs, "SCRAM-SHA-512", "erin", "erin-secret")
        assert _produce_error(conf, topic) is None
        run("acls", *common, "--remove", "--allow-principal", "User:erin", "--operation", "Write", "--topic", topic)
        from confluent_kafka import KafkaError

        assert _produce_error(conf, topic) == KafkaError.TOPIC_AUTHORIZATION_FAILED
    finally:
        b.stop()


def test_reauthentication_and_session_expiry(tmp_path):
    """connections.max.reauth.ms: SaslAuthenticate v1 tells the session lifetime; a
    connection that does not re-authenticate is closed at its first request after it;
    one that re-authenticates (same mechanism, same principal) keeps working, and
    confluent-kafka (librdkafka re-authenticates, KIP-368) produces across several
    lifetimes."""
    b = start_broker(tmp_path, {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "connections.max.reauth.ms": "1500",
    })
    try:
        plain = b"\0alice\0" + ALICE_PW.encode()
        with RawConn(b.port) as c:
            assert _sasl_handshake(c, "PLAIN")[0] == 0
            err, msg, lifetime = _sasl_authenticate(c, plain)
            assert err == 0 and 1000 <= lifetime <= 1500
            assert c.request(3, 1, helpers.metadata_request_v1([]), 3)
            time.sleep(1.7)
            c.send(frame(request_header_v1(3, 1, 4) + helpers.metadata_request_v1([])))
            assert c.wait_closed(5)
        with RawConn(b.port) as c:
            assert _sasl_handshake(c, "PLAIN")[0] == 0
            assert _sasl_authenticate(c, plain)[0] == 0
            time.sleep(1.0)
            assert _sasl_handshake(c, "PLAIN", cid=5)[0] == 0  # re-authentication
            err, _, lifetime = _sasl_authenticate(c, plain, cid=6)
            assert err == 0 and lifetime > 1000
            time.sleep(1.0)  # past the first session, inside the second
            assert c.request(3, 1, helpers.metadata_request_v1([]), 7)
            # another principal on re-authentication is refused
            assert _sasl_handshake(c, "PLAIN", cid=8)[0] == 0
            err, msg, _ = _sasl_authenticate(c, b"\0bob\0" + BOB_PW.encode(), cid=9)
            assert err == 58 and "Cannot change principals" in msg
            assert c.wait_closed(5)
        topic = unique_topic("reauth")
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(_plain(b.port, "alice", ALICE_PW))
        admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
        from confluent_kafka import Producer

        p = Producer({**_plain(b.port, "alice", ALICE_PW), "message.timeout.ms": 10000})
        delivered = []
        for i in range(8):  # ~4 s: two or three session lifetimes on one connection
            p.produce(topic, f"r{i}".encode(), on_delivery=lambda e, m: delivered.append(e))
            p.flush(10)
            time.sleep(0.5)
        assert delivered == [None] * 8
    finally:
        b.stop()


def _unsecured_jwt(claims: dict) -> str:
    import base64

    def part(d):
        return base64.urlsafe_b64encode(json.dumps(d).encode()).rstrip(b"=").decode()

    return part({"alg": "none"}) + "." + part(claims) + "."


def _oauth_first(jwt: str, extensions: str = "") -> bytes:
    return ("n,,\x01auth=Bearer " + jwt + "\x01" + extensions + "\x01").encode()


def test_oauthbearer_unsecured_jwt(tmp_path):
    """SASL/OAUTHBEARER with Kafka's default token check (unsecured JWTs): the token's
    ``sub`` is the principal the authorizer sees (librdkafka's unsecured JWT and
    kafka-python's token provider), a token without the required scope or past its
    ``exp`` gets RFC 7628's JSON error as a challenge and then SASL_AUTHENTICATION_FAILED
    with it, and a session ends when its token expires."""
    b = start_broker(tmp_path, {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "sasl.enabled.mechanisms": "OAUTHBEARER,PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config":
            'org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required '
            'unsecuredValidatorRequiredScope="kafka";',
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:alice",
        "sasl.oauthbearer.expected.issuer": "ignored-as-in-kafka",
    })
    try:
        from confluent_kafka import Consumer, Producer
        from confluent_kafka.admin import AdminClient, NewTopic

        def oauth(principal):
            return {"bootstrap.servers": f"127.0.0.1:{b.port}", "security.protocol": "SASL_PLAINTEXT",
                    "sasl.mechanism": "OAUTHBEARER", "enable.sasl.oauthbearer.unsecure.jwt": True,
                    "sasl.oauthbearer.config": f"principal={principal} scope=kafka lifeSeconds=3600"}

        topic = unique_topic("oauth")
        admin = AdminClient(oauth("alice"))
        admin.create_topics([NewTopic(topic, 1)])[topic].result(15)
        p = Producer(oauth("alice"))
        for i in range(5):
            p.produce(topic, f"o{i}".encode())
        assert p.flush(15) == 0
        c = Consumer({**oauth("alice"), "group.id": "oauth-g", "auto.offset.reset": "earliest"})
        c.subscribe([topic])
        got, deadline = [], time.monotonic() + 20
        while len(got) < 5 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
        c.close()
        assert got == [f"o{i}".encode() for i in range(5)]
        # the principal is the token's sub: bob is no super user and has no ACL
        assert _produce_error(oauth("bob"), topic) == ErrorCode.TOPIC_AUTHORIZATION_FAILED

        from kafka.net.sasl.oauth import AbstractTokenProvider

        class Tokens(AbstractTokenProvider):  # kafka-python's sasl_oauth_token_provider
            def token(self):
                return _unsecured_jwt({"sub": "alice", "exp": time.time() + 600, "scope": ["kafka", "x"]})

            def extensions(self):
                return {"traceId": "abc"}

        from kafka import KafkaProducer

        kp = KafkaProducer(bootstrap_servers=f"127.0.0.1:{b.port}", security_protocol="SASL_PLAINTEXT",
                           sasl_mechanism="OAUTHBEARER", sasl_oauth_token_provider=Tokens())
        assert kp.send(topic, b"from-kafka-python").get(15).offset == 5
        kp.close()

        now = time.time()
        cases = [  # claims -> the JSON error the broker sends
            ({"sub": "alice", "exp": now + 60, "scope": "other"}, '{"status":"insufficient_scope", "scope":"[kafka]"}'),
            ({"sub": "alice", "exp": now - 5, "scope": "kafka"}, '{"status":"invalid_token"}'),
            ({"exp": now + 60, "scope": "kafka"}, '{"status":"invalid_token"}'),  # no principal
            ({"sub": "alice", "scope": "kafka"}, '{"status":"invalid_token"}'),  # no exp
        ]
        for claims, status in cases:
            with RawConn(b.port) as raw:
                assert _sasl_handshake(raw, "OAUTHBEARER")[0] == 0
                err, _, _ = _sasl_authenticate(raw, _oauth_first(_unsecured_jwt(claims)))
                resp = raw.request(36, 1, struct.pack(">i", 1) + b"\x01", 3)
                assert err == 0  # the first answer is the challenge
                (code, mlen) = struct.unpack_from(">hh", resp, 0)
                assert (code, resp[4:4 + mlen].decode()) == (58, status), claims
                assert raw.wait_closed(5)
        with RawConn(b.port) as raw:  # a signed token is not an unsecured one
            unsigned = _unsecured_jwt({"sub": "alice", "exp": now + 60, "scope": "kafka"})
            signed = "eyJhbGciOiJIUzI1NiJ9" + unsigned[unsigned.index("."):] + "c2ln"  # {"alg":"HS256"}, "sig"
            assert _sasl_handshake(raw, "OAUTHBEARER")[0] == 0
            assert _sasl_authenticate(raw, _oauth_first(signed))[0] == 0
            assert raw.request(36, 1, struct.pack(">i", 1) + b"\x01", 3)[:2] == struct.pack(">h", 58)
        with RawConn(b.port) as raw:  # not RFC 7628's first message
            assert _sasl_handshake(raw, "OAUTHBEARER")[0] == 0
            err, msg, _ = _sasl_authenticate(raw, b"auth=Bearer x")
            assert err == 58 and "OAUTHBEARER" in msg
        with RawConn(b.port) as raw:  # a token for ever: a lifetime an int64 holds
            assert _sasl_handshake(raw, "OAUTHBEARER")[0] == 0
            err, _, lifetime = _sasl_authenticate(raw, _oauth_first(_unsecured_jwt(
                {"sub": "alice", "exp": 1e308, "scope": "kafka"})))
            assert err == 0 and 2**52 < lifetime <= 2**53
        with RawConn(b.port) as raw:  # the session ends with the token
            assert _sasl_handshake(raw, "OAUTHBEARER")[0] == 0
            jwt = _unsecured_jwt({"sub": "alice", "exp": time.time() + 1.5, "scope": "kafka"})
            err, _, lifetime = _sasl_authenticate(raw, _oauth_first(jwt, "traceId=t1\x01"))
            assert err == 0 and 500 < lifetime <= 1500
            assert raw.request(3, 1, helpers.metadata_request_v1([]), 3)
            time.sleep(1.7)
            raw.send(frame(request_header_v1(3, 1, 4) + helpers.metadata_request_v1([])))
            assert raw.wait_closed(5)
        # the command-line tools log in as Kafka's do: an unsecured JWT from the JAAS options
        base = [os.path.join(os.path.dirname(__import__("sys").executable), "chronolog")]

        def tool(principal, *args, scope="kafka"):
            props = tmp_path / f"{principal}.properties"
            props.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=OAUTHBEARER\n"
                             "sasl.jaas.config=org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule "
                             f'required unsecuredLoginStringClaim_sub="{principal}" '
                             f'unsecuredLoginListClaim_scope=",{scope},other" unsecuredLoginLifetimeSeconds="60";\n')
            return subprocess.run([*base, "topics", "--bootstrap-server", f"127.0.0.1:{b.port}", "--command-config",
                                   str(props), *args], capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)

        listed = tool("alice", "--list")
        assert listed.returncode == 0 and topic in listed.stdout.split(), listed
        refused = tool("alice", "--list", scope="nope")
        assert refused.returncode != 0 and 'insufficient_scope' in refused.stdout + refused.stderr, refused
        log = b.log_text()  # why a token was refused is logged, the token never is
        assert "was missing a required scope (kafka)" in log and "No expiration time in JWT" in log
        assert "Unsecured JWS must have 'none' for an algorithm" in log and unsigned not in log
    finally:
        b.stop()


def test_idle_connections_are_closed(tmp_path):
    b = start_broker(tmp_path, {"connections.max.idle.ms": "1200"})
    try:
        idle, busy = RawConn(b.port), RawConn(b.port)
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:  # one connection keeps talking
            assert busy.request(18, 0, b"", 1)
            time.sleep(0.2)
        assert idle.wait_closed(3)
        assert busy.request(18, 0, b"", 2)
        idle.close()
        busy.close()
    finally:
        b.stop()


def _broker_cert(certs: Path, out: Path, name: str, cn: str = "localhost") -> Path:
    """A broker keystore (key + certificate, PEM) signed by the test CA, with the SANs
    of the fixture's broker certificate."""
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={cn}", cwd=out)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", str(certs / "ca.pem"), "-CAkey", str(certs / "ca.key"),
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "30", "-extfile", str(certs / "san.ext"), cwd=out)
    pem = out / f"{name}.pem"
    pem.write_text((out / f"{name}.key").read_text() + (out / f"{name}.crt").read_text())
    return pem


def _served_cert(port: int, certs: Path) -> tuple[bytes, ssl.SSLSocket]:
    """The DER certificate a new mutual-TLS connection is shown, and the open socket."""
    ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
    ctx.load_cert_chain(str(certs / "client.crt"), str(certs / "client.key"))
    t = ctx.wrap_socket(socket.create_connection(("127.0.0.1", port), timeout=10), server_hostname="localhost")
    return t.getpeercert(binary_form=True), t


def _api_versions_over(t: ssl.SSLSocket, cid: int) -> int:
    t.sendall(frame(request_header_v1(18, 0, cid)))
    size = struct.unpack(">i", t.recv(4))[0]
    body = b""
    while len(body) < size:
        body += t.recv(size - len(body))
    assert struct.unpack(">i", body[:4])[0] == cid
    return struct.unpack(">h", body[4:6])[0]


def _der(pem: Path) -> bytes:
    text = pem.read_text()
    return ssl.PEM_cert_to_DER_cert(text[text.index("-----BEGIN CERTIFICATE"):])


def test_dynamic_keystore_update(tmp_path, certs):
    """IncrementalAlterConfigs on listener.name.ssl.ssl.keystore.location: new connections
    get the new certificate, open ones keep theirs, client authentication still holds; a
    changed DN, a cluster-default or unprefixed name and an unknown listener are refused;
    the update survives a restart; naming the same file again reloads it."""
    from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    keys = tmp_path / "keys"
    keys.mkdir()
    rotated = _broker_cert(certs, keys, "rotated")
    renamed = _broker_cert(certs, keys, "renamed", cn="broker.example")
    third = _broker_cert(certs, keys, "third")
    b = start_broker(tmp_path / "b", {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                      **tls_overrides(certs, "required")})
    admin_keep = []
    try:
        ports = b.listener_ports()
        plain = f"127.0.0.1:{ports['PLAINTEXT']}"
        admin = helpers.ck_admin(plain)
        admin_keep.append(admin)

        def alter(name, value, broker="0"):
            res = ConfigResource(ResourceType.BROKER, broker, incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)])
            for f in admin.incremental_alter_configs([res]).values():
                f.result(20)

        first, old_conn = _served_cert(ports["SSL"], certs)
        assert first == _der(certs / "broker.crt")
        alter("listener.name.ssl.ssl.keystore.location", str(rotated))
        now, new_conn = _served_cert(ports["SSL"], certs)
        assert now == _der(keys / "rotated.crt")
        # the open connection keeps its session and is served; the new one too
        assert old_conn.getpeercert(binary_form=True) == first
        assert _api_versions_over(old_conn, 7) == 0
        assert _api_versions_over(new_conn, 8) == 0
        old_conn.close()
        new_conn.close()
        # client authentication is still required, against the same CA
        _tls_refused(ports["SSL"], certs)
        b.ports = ports
        topic = create(b, unique_topic("rotate"))
        assert ck_roundtrip(ck_security(b, "SSL", certs, client_cert=True), topic, 2) == [b"v0", b"v1"]

        # refused, and nothing changes
        from confluent_kafka import KafkaException

        for name, value, broker, words in [
            ("listener.name.ssl.ssl.keystore.location", str(renamed), "0", "DistinguishedName does not match"),
            ("listener.name.ssl.ssl.keystore.location", str(keys / "missing.pem"), "0", "cannot read the file"),
            ("ssl.keystore.location", str(rotated), "0", "only per-listener using the listener prefix"),
            ("listener.name.nosuch.ssl.keystore.location", str(rotated), "0", "no listener NOSUCH"),
            ("listener.name.plaintext.ssl.keystore.location", str(rotated), "0", "uses PLAINTEXT"),
        ]:
            with pytest.raises(KafkaException) as info:
                alter(name, value, broker)
            assert info.value.args[0].code() == 42 and words in info.value.args[0].str(), (name, info.value)
        # (confluent-kafka refuses a BROKER resource named "": a raw request for the cluster level)
        from tests.integration.test_admin_configs import raw_incremental

        code, message = raw_incremental(ports["PLAINTEXT"], 4, "", [
            ("listener.name.ssl.ssl.keystore.location", 0, str(renamed))])
        assert code == 42 and "broker id must be specified" in message, (code, message)
        assert _served_cert(ports["SSL"], certs)[0] == _der(keys / "rotated.crt")

        # DescribeConfigs lists the per-listener value as a dynamic broker config
        res = ConfigResource(ResourceType.BROKER, "0")
        entries = list(admin.describe_configs([res]).values())[0].result(20)
        e = entries["listener.name.ssl.ssl.keystore.location"]
        from confluent_kafka.admin import ConfigSource

        assert e.value == str(rotated) and e.source == ConfigSource.DYNAMIC_BROKER_CONFIG.value, e
        assert not e.is_read_only

        # a restart serves the stored keystore
        b.restart()
        ports = b.listener_ports()
        assert _served_cert(ports["SSL"], certs)[0] == _der(keys / "rotated.crt")
        # rewritten in place and named again (with the kafka-configs.sh command): reloaded
        shutil.copy(third, rotated)
        tool = os.path.join(os.path.dirname(__import__("sys").executable), "chronolog")
        out = subprocess.run([tool, "configs", "--bootstrap-server", f"127.0.0.1:{ports['PLAINTEXT']}",
                              "--entity-type", "brokers", "--entity-name", "0", "--alter", "--add-config",
                              f"listener.name.ssl.ssl.keystore.location={rotated}"],
                             capture_output=True, text=True, timeout=60, cwd=REPO_ROOT)
        assert out.returncode == 0, out.stdout + out.stderr
        assert _served_cert(ports["SSL"], certs)[0] == _der(keys / "third.crt")
        assert "new TLS connections now use the keystore" in b.log_text()
    finally:
        b.stop()


def test_bad_tls_input_is_logged_with_the_peer_and_reason(tmp_path, certs):
    """An expired, untrusted or missing client certificate, a client refusing the
    broker's certificate for the wrong host, plaintext on the TLS port and TLS on the
    PLAINTEXT port: the connection closes, the broker logs the peer and the reason and
    counts failed TLS authentications; other clients are unaffected."""
    from tests.integration.helpers import free_port
    from tests.integration.test_metrics import scrape, val

    d = tmp_path / "expired"
    d.mkdir()
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "old.key", "-out", "old.csr", "-subj", "/CN=old", cwd=d)
    _openssl("x509", "-req", "-in", "old.csr", "-CA", str(certs / "ca.pem"), "-CAkey", str(certs / "ca.key"),
             "-CAcreateserial", "-out", "old.crt", "-days", "-1", cwd=d)  # expired yesterday
    metrics_port = free_port()
    b = start_broker(tmp_path / "b", {"listeners": "PLAINTEXT://127.0.0.1:0,SSL://127.0.0.1:0",
                                      "metrics.port": str(metrics_port), **tls_overrides(certs, "required")})
    b.metrics_port = metrics_port
    try:
        ports = b.listener_ports()

        def tls_attempt(cert=None, hostname="localhost"):
            return _tls_refused(ports["SSL"], certs, cert, hostname)

        mark = b.log_size()
        expired = tls_attempt((str(d / "old.crt"), str(d / "old.key")))
        untrusted = tls_attempt((str(certs / "rogue.crt"), str(certs / "rogue.key")))
        missing = tls_attempt()
        wrong_host = tls_attempt((str(certs / "client.crt"), str(certs / "client.key")), hostname="kafka.example.com")
        with socket.create_connection(("127.0.0.1", ports["SSL"]), timeout=10) as s:
            plaintext = s.getsockname()[1]
            s.sendall(frame(request_header_v1(18, 0, 1)))
            assert s.recv(4) == b""  # closed at once, not left waiting
        ctx = ssl.create_default_context(cafile=str(certs / "ca.pem"))
        with socket.create_connection(("127.0.0.1", ports["PLAINTEXT"]), timeout=10) as s:
            tls_on_plain = s.getsockname()[1]
            with pytest.raises((ssl.SSLError, OSError)):
                ctx.wrap_socket(s, server_hostname="localhost")
        deadline = time.monotonic() + 10
        expected = {expired: "certificate has expired", untrusted: "client certificate rejected",
                    missing: "no client certificate", wrong_host: "the client refused the broker's certificate",
                    plaintext: "plaintext on a TLS listener", tls_on_plain: "is the client using SSL"}
        while time.monotonic() < deadline:
            text = b.log_text(mark)
            lines = {port: [ln for ln in text.splitlines() if f"127.0.0.1:{port}" in ln] for port in expected}
            if all(lines.values()):
                break
            time.sleep(0.1)
        for port, words in expected.items():
            assert any(words in ln for ln in lines[port]), (words, lines[port], text[-2000:])
        samples = scrape(b)
        assert val(samples, "chronolog_authentications_total", 0, listener="SSL", mechanism="SSL",
                   result="failure") >= 5
        # the broker still serves everyone else
        b.ports = ports
        topic = create(b, unique_topic("tlsbad"))
        assert ck_roundtrip(ck_security(b, "SSL", certs, client_cert=True), topic, 2) == [b"v0", b"v1"]
        assert val(scrape(b), "chronolog_authentications_total", 0, listener="SSL", mechanism="SSL",
                   result="success") >= 1
    finally:
        b.stop()
