"""Client quotas (issue 15): DescribeClientQuotas / AlterClientQuotas v0-1 with raw
requests and ``chronolog configs`` (kafka-configs.sh's quota syntax), persisted across a
SIGKILL, and enforced as Kafka enforces them: producer_byte_rate and consumer_byte_rate
and request_percentage give throttle_time_ms and mute the connection for that long
(KIP-219), a throttled Fetch carries no records, librdkafka sees the throttle."""

from __future__ import annotations

import time
import uuid

import pytest

from protocol import messages as T
from protocol import records as R
from protocol.errors import ErrorCode
from tests.integration.helpers import RawConn, create_topic, now_ms, unique_topic
from tests.integration.helpers import raw_request as raw
from tests.integration.test_cli_tools import fails, ok, tool

pytestmark = pytest.mark.timeout(240)

AQ, DQ = T.AlterClientQuotasRequest, T.DescribeClientQuotasRequest


def alter(port, entries, version=1, validate_only=False):
    req = AQ(entries=[AQ.EntryData(entity=[AQ.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                                   ops=[AQ.OpData(key=k, value=v, remove=rm) for k, v, rm in ops])
                      for entity, ops in entries], validate_only=validate_only)
    resp = raw(port, 49, version, req)
    return [([(e.entity_type, e.entity_name) for e in r.entity], r.error_code, r.error_message) for r in resp.entries]


def describe(port, components, strict=False, version=1):
    resp = raw(port, 48, version, DQ(components=[DQ.ComponentData(entity_type=t, match_type=m, match=x)
                                                 for t, m, x in components], strict=strict))
    if resp.error_code:
        return resp.error_code, resp.error_message
    return 0, sorted((tuple(sorted((e.entity_type, e.entity_name or "") for e in entry.entity)),
                      tuple(sorted((v.key, v.value) for v in entry.values))) for entry in resp.entries)


@pytest.fixture
def qbroker(broker_factory):
    return broker_factory({"num.partitions": "1"})


def test_alter_and_describe_every_version_and_restart(qbroker):
    b = qbroker
    for v in (0, 1):
        assert alter(b.port, [([("user", f"alice{v}")], [("producer_byte_rate", 1024.0, False)]),
                              ([("user", None), ("client-id", None)], [("request_percentage", 25.5, False)]),
                              ([("ip", "127.0.0.1")], [("connection_creation_rate", 10.0, False)])], version=v) == [
            ([("user", f"alice{v}")], 0, None), ([("client-id", None), ("user", None)], 0, None),  # Kafka's order
            ([("ip", "127.0.0.1")], 0, None)]
    code, entries = describe(b.port, [("user", 0, "alice0")], version=0)
    assert (code, entries) == (0, [((("user", "alice0"),), (("producer_byte_rate", 1024.0),))])
    code, entries = describe(b.port, [("user", 2, None)])
    assert sorted(e[0] for e in entries) == [(("client-id", ""), ("user", "")), (("user", "alice0"),),
                                             (("user", "alice1"),)]
    # bad inputs: Kafka's codes and messages, nothing applied
    bad = alter(b.port, [([("user", "bob")], [("producer_byte_rate", 10.5, False)]),
                         ([("user", "dave")], [("request_percentage", 0.0, False)]),
                         ([("group", "g")], [("producer_byte_rate", 1.0, False)]),
                         ([("user", "carol"), ("ip", "1.2.3.4")], [("producer_byte_rate", 1.0, False)]),
                         ([("client-id", "c")], [("no_such_quota", 1.0, False)])])
    assert [code for _, code, _ in bad] == [ErrorCode.INVALID_REQUEST] * 5
    assert "producer_byte_rate cannot be a fractional value." == bad[0][2]
    assert "Quota request_percentage must be greater than 0" == bad[1][2]
    assert "Unhandled client quota entity type: group" == bad[2][2]
    assert "Invalid configuration key no_such_quota" == bad[4][2]
    assert describe(b.port, [("user", 0, "bob")]) == (0, [])
    assert describe(b.port, [("topic", 2, None)])[0] == ErrorCode.UNSUPPORTED_VERSION
    assert describe(b.port, [("user", 0, None)]) == (
        ErrorCode.INVALID_REQUEST, "Request specified MATCH_TYPE_EXACT, but set match string to null.")
    # validate_only applies nothing
    assert alter(b.port, [([("client-id", "v")], [("consumer_byte_rate", 5.0, False)])], validate_only=True)[0][1] == 0
    assert describe(b.port, [("client-id", 0, "v")]) == (0, [])
    before = describe(b.port, [])
    b.restart(graceful=False)
    assert describe(b.port, []) == before and len(before[1]) == 4
    # removal
    assert alter(b.port, [([("user", "alice0")], [("producer_byte_rate", 0.0, True)])])[0][1] == 0
    assert describe(b.port, [("user", 0, "alice0")]) == (0, [])


def test_configs_tool_quota_syntax(qbroker):
    b = qbroker.bootstrap
    out = ok(tool("configs", "--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--add-config", "producer_byte_rate=1048576,consumer_byte_rate=20000000"))
    assert out == ["Completed updating config for user alice."]
    out = ok(tool("configs", "--bootstrap-server", b, "--alter", "--entity-type", "users", "--entity-name", "alice",
                  "--entity-type", "clients", "--entity-name", "app", "--add-config", "request_percentage=50"))
    assert out == ["Completed updating config for user alice."]
    out = ok(tool("configs", "--bootstrap-server", b, "--alter", "--client-defaults",
                  "--add-config", "producer_byte_rate=4096"))
    assert out == ["Completed updating default config for clients in the cluster."]
    ok(tool("configs", "--bootstrap-server", b, "--alter", "--ip", "127.0.0.1",
            "--add-config", "connection_creation_rate=100"))
    lines = ok(tool("configs", "--bootstrap-server", b, "--describe", "--entity-type", "users",
                    "--entity-name", "alice"))
    assert lines == ["Quota configs for user-principal 'alice' are consumer_byte_rate=2.0E7, "
                     "producer_byte_rate=1048576.0"]
    lines = ok(tool("configs", "--bootstrap-server", b, "--describe", "--user", "alice", "--client", "app"))
    assert lines == ["Quota configs for user-principal 'alice', client-id 'app' are request_percentage=50.0"]
    lines = ok(tool("configs", "--bootstrap-server", b, "--describe", "--entity-type", "clients"))
    assert lines == ["Quota configs for the default client-id are producer_byte_rate=4096.0"]
    lines = ok(tool("configs", "--bootstrap-server", b, "--describe", "--entity-type", "ips"))
    assert lines == ["Quota configs for ip '127.0.0.1' are connection_creation_rate=100.0"]
    ok(tool("configs", "--bootstrap-server", b, "--alter", "--user", "alice", "--delete-config", "consumer_byte_rate"))
    lines = ok(tool("configs", "--bootstrap-server", b, "--describe", "--user", "alice"))
    assert lines == ["Quota configs for user-principal 'alice' are producer_byte_rate=1048576.0"]
    # errors: one line, the broker's message or the tool's
    fails(tool("configs", "--bootstrap-server", b, "--alter", "--user", "bob", "--add-config",
               "producer_byte_rate=1.5"), 1, "INVALID_REQUEST", "cannot be a fractional value")
    fails(tool("configs", "--bootstrap-server", b, "--alter", "--user", "bob", "--add-config",
               "producer_byte_rate=fast"), 2, "Cannot parse quota configuration value for producer_byte_rate: fast")
    fails(tool("configs", "--bootstrap-server", b, "--alter", "--client", "c", "--add-config",
               "retention.ms=5"), 2, "Only quota configs", "retention.ms")
    fails(tool("configs", "--bootstrap-server", b, "--alter", "--ip", "127.0.0.1", "--add-config",
               "producer_byte_rate=5"), 2, "Only connection quota configs")


def _produce(conn, topic, size, client_id, cid):
    from protocol import codec

    batch = R.build_batch([(now_ms(), None, b"x" * size)])
    P = T.ProduceRequest
    req = P(transactional_id=None, acks=1, timeout_ms=5000, topic_data=[P.TopicProduceData(
        name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)])])
    hdr = T.RequestHeader(api_key=0, api_version=9, correlation_id=cid, client_id=client_id)
    conn.send(codec.encode_request(hdr, req))
    _, resp = codec.decode_response(0, 9, conn.recv_frame())
    return resp


def test_produce_over_its_quota_is_throttled_and_muted(qbroker):
    b = qbroker
    topic = create_topic(b.bootstrap, unique_topic("quota-produce"))
    assert alter(b.port, [([("client-id", "slow")], [("producer_byte_rate", 10000.0, False)])])[0][1] == 0
    with RawConn(b.port) as conn:
        # 100 KB within the 10 s minimum window is 10 KB/s: at the quota, not over it
        first = _produce(conn, topic, 99_000, "slow", 1)
        assert first.throttle_time_ms == 0
        assert first.responses[0].partition_responses[0].error_code == 0
        # 20 KB more: ~12 KB/s, (12 - 10) / 10 of the window, about 2 s
        second = _produce(conn, topic, 20_000, "slow", 2)
        # (less by the time between the two requests, on a loaded machine up to a second)
        assert 1_000 <= second.throttle_time_ms <= 2_500, second.throttle_time_ms
        assert second.responses[0].partition_responses[0].error_code == 0  # appended all the same
        # the connection reads nothing until the throttle time has passed (Kafka mutes it)
        started = time.monotonic()
        _produce(conn, topic, 10, "slow", 3)
        assert time.monotonic() - started >= second.throttle_time_ms / 1000 * 0.9
    with RawConn(b.port) as conn:  # another client id has no quota
        assert _produce(conn, topic, 120_000, "fast", 4).throttle_time_ms == 0


def test_fetch_over_its_quota_gets_no_records(qbroker):
    b = qbroker
    topic = create_topic(b.bootstrap, unique_topic("quota-fetch"))
    with RawConn(b.port) as conn:
        for i in range(3):
            _produce(conn, topic, 60_000, "writer", i)
    assert alter(b.port, [([("user", None)], [("consumer_byte_rate", 10000.0, False)])])[0][1] == 0
    F = T.FetchRequest

    def fetch(offset):
        req = F(replica_id=-1, max_wait_ms=0, min_bytes=0, max_bytes=50 << 20, isolation_level=0, session_id=0,
                session_epoch=-1, topics=[F.FetchTopic(topic=topic, partitions=[F.FetchPartition(
                    partition=0, current_leader_epoch=-1, fetch_offset=offset, last_fetched_epoch=-1,
                    log_start_offset=-1, partition_max_bytes=50 << 20)])], forgotten_topics_data=[], rack_id="")
        return raw(b.port, 1, 12, req)

    # the fetch is capped to what the quota allows in its window (100 KB: a batch and part of the next)
    first = fetch(0)
    assert first.throttle_time_ms == 0
    (p,) = first.responses[0].partitions
    assert 60_000 < len(p.records) <= 100_000
    # the next batch takes the user over the quota: answered without records, throttled
    second = fetch(1)
    assert second.throttle_time_ms > 0 and second.responses == []


def test_request_percentage_and_librdkafka_sees_the_throttle(qbroker):
    from confluent_kafka import Producer

    b = qbroker
    topic = create_topic(b.bootstrap, unique_topic("quota-rdk"))
    client = "rdk-" + uuid.uuid4().hex[:6]
    assert alter(b.port, [([("client-id", client)], [("producer_byte_rate", 20000.0, False)])])[0][1] == 0
    events = []
    p = Producer({"bootstrap.servers": b.bootstrap, "client.id": client, "linger.ms": 5,
                  "throttle_cb": lambda ev: events.append(ev.throttle_time)})
    for _ in range(30):
        p.produce(topic, b"y" * 10_000)
    assert p.flush(60) == 0
    deadline = time.monotonic() + 20
    while not events and time.monotonic() < deadline:
        p.poll(0.2)
    assert events and max(events) > 0
    # request_percentage: a tiny share of one thread throttles even cheap requests
    assert alter(b.port, [([("user", "ANONYMOUS")], [("request_percentage", 0.001, False)])])[0][1] == 0
    from protocol import codec

    throttles = []
    with RawConn(b.port) as conn:
        for i in range(500):  # until the handler time adds up over the quota
            hdr = T.RequestHeader(api_key=18, api_version=3, correlation_id=i, client_id="meta")
            conn.send(codec.encode_request(hdr, T.ApiVersionsRequest(client_software_name="t",
                                                                     client_software_version="1")))
            _, resp = codec.decode_response(18, 3, conn.recv_frame())
            throttles.append(resp.throttle_time_ms)
            if resp.throttle_time_ms:
                break
    # bounded by one quota window (1 s)
    assert 0 < max(throttles) <= 1000


def test_connection_creation_rate_per_ip(qbroker):
    """KIP-612: connections from an ip over its connection_creation_rate are closed; the
    other ips are not affected."""
    import socket
    import struct

    from protocol import codec

    b = qbroker
    assert alter(b.port, [([("ip", "127.0.0.2")], [("connection_creation_rate", 1.0, False)])])[0][1] == 0

    def api_versions_from(source):
        s = socket.create_connection(("127.0.0.1", b.port), timeout=5, source_address=(source, 0))
        try:
            hdr = T.RequestHeader(api_key=18, api_version=0, correlation_id=1, client_id="conn-rate")
            s.sendall(codec.encode_request(hdr, T.ApiVersionsRequest()))
            head = s.recv(4)
            if len(head) < 4:
                return False
            size = struct.unpack(">i", head)[0]
            while size > 0:
                chunk = s.recv(size)
                if not chunk:
                    return False
                size -= len(chunk)
            return True
        except (ConnectionError, socket.timeout):
            return False
        finally:
            s.close()

    # 1 per second over the 10 s minimum window: ten are let in, then they are refused
    results = [api_versions_from("127.0.0.2") for _ in range(14)]
    assert results[:10] == [True] * 10 and results[10:] == [False] * 4
    assert all(api_versions_from("127.0.0.1") for _ in range(14))
    assert "connection_creation_rate quota of 127.0.0.2 exceeded" in b.log_path.read_text()


def test_controller_mutation_rate(qbroker):
    """KIP-599: partitions created or deleted count against controller_mutation_rate;
    CreateTopics v6+ (strict) refuses topics with THROTTLING_QUOTA_EXCEEDED once the
    bucket is spent, older versions are served and throttled."""
    b = qbroker
    assert alter(b.port, [([("client-id", "ops")], [("controller_mutation_rate", 1.0, False)])])[0][1] == 0
    from protocol import codec

    C = T.CreateTopicsRequest
    prefix = unique_topic("mut")

    def create(conn, version, names, partitions, cid):
        req = C(topics=[C.CreatableTopic(name=n, num_partitions=partitions, replication_factor=-1, assignments=[],
                                         configs=[]) for n in names], timeout_ms=10000, validate_only=False)
        conn.send(codec.encode_request(T.RequestHeader(api_key=19, api_version=version, correlation_id=cid,
                                                       client_id="ops"), req))
        _, resp = codec.decode_response(19, version, conn.recv_frame())
        return resp

    with RawConn(b.port) as conn:
        # the bucket holds 1 x 11 x 1 s = 11 partitions: 8 + 8 go (the second spends it below zero) ...
        first = create(conn, 7, [f"{prefix}-a", f"{prefix}-b"], 8, 1)
        assert [t.error_code for t in first.topics] == [0, 0] and first.throttle_time_ms == 0
        # ... and the next strict request is refused while the bucket refills
        refused = create(conn, 7, [f"{prefix}-c"], 1, 2)
        (t,) = refused.topics
        assert t.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
        assert t.error_message == "The throttling quota has been exceeded."
        assert 3_000 <= refused.throttle_time_ms <= 5_000
    with RawConn(b.port) as conn:
        # v5 predates the error: the topic is created, the response throttled
        old = create(conn, 5, [f"{prefix}-d"], 1, 3)
        assert old.topics[0].error_code == 0 and old.throttle_time_ms > 0
    names = {t.name for t in raw(b.port, 3, 12, T.MetadataRequest(
        topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False)).topics}
    assert {f"{prefix}-a", f"{prefix}-b", f"{prefix}-d"} <= names and f"{prefix}-c" not in names
