"""broker.quotas: Kafka's client-quota rules without a network: the rate and its window,
which quota applies to a user and client id and who shares it, the throttle times, and
AlterClientQuotas / DescribeClientQuotas validation and filters, persisted."""

import pytest

from broker.quotas import (FETCH, PRODUCE, REQUEST, ClientQuotas, Rate, QuotaRequestError, decode_entity,
                           encode_entity)
from protocol.errors import ErrorCode
from storage.entity_configs import EntityConfigStore

INVALID = int(ErrorCode.INVALID_REQUEST)


def quotas(tmp_path, samples=11, window=1):
    return ClientQuotas(EntityConfigStore(str(tmp_path), "client-quotas"), samples, window)


def set_quota(q, entity, **values):
    (res,) = q.alter([(list(entity), [(k, v, False) for k, v in values.items()])], False)
    assert res[1] == 0, res
    return res


def test_rate_uses_kafkas_minimum_window():
    r = Rate(11, 1000)
    r.record(100_000, 0)
    # one sample: the elapsed time is taken as 10 full windows, so 100 KB is 10 KB/s
    assert r.window_size_ms(0) == 10_000 and r.measure(0) == pytest.approx(10_000)
    r.record(50_000, 5_500)
    # 5.5 s elapsed (5 full windows) counts as 5.5 s plus the 5 missing windows
    assert r.window_size_ms(5_500) == 10_500 and r.measure(5_500) == pytest.approx(150_000 / 10.5)
    # 11 windows on, the first sample has expired
    assert r.measure(11_000) == pytest.approx(50_000 / 10.5)
    assert r.measure(30_000) == 0


def test_entities_round_trip_through_the_file_encoding():
    for entity in (frozenset({("user", "alice"), ("client-id", None)}), frozenset({("client-id", "a&b=c d")}),
                   frozenset({("ip", "10.0.0.1")}), frozenset({("user", None)})):
        assert decode_entity(encode_entity(entity)) == entity
    assert encode_entity(frozenset({("client-id", "c1"), ("user", "alice")})) == "user=alice&client-id=c1"
    assert encode_entity(frozenset({("user", None)})) == "user"


def test_resolution_order_and_who_shares_a_rate(tmp_path):
    q = quotas(tmp_path)
    assert q.resolve(PRODUCE, "alice", "c1") is None and not q.enforcing
    set_quota(q, [("client-id", None)], producer_byte_rate=8)
    assert q.resolve(PRODUCE, "alice", "c1") == (8, ("", "c1"))        # each client id its own rate
    set_quota(q, [("client-id", "c1")], producer_byte_rate=7)
    assert q.resolve(PRODUCE, "alice", "c1") == (7, ("", "c1"))
    set_quota(q, [("user", None)], producer_byte_rate=6)
    assert q.resolve(PRODUCE, "alice", "c1") == (6, ("alice", ""))     # shared by alice's clients
    set_quota(q, [("user", None), ("client-id", None)], producer_byte_rate=5)
    assert q.resolve(PRODUCE, "alice", "c1") == (5, ("alice", "c1"))
    set_quota(q, [("user", None), ("client-id", "c1")], producer_byte_rate=4)
    assert q.resolve(PRODUCE, "alice", "c1") == (4, ("alice", "c1"))
    set_quota(q, [("user", "alice")], producer_byte_rate=3)
    assert q.resolve(PRODUCE, "alice", "c1") == (3, ("alice", ""))
    set_quota(q, [("user", "alice"), ("client-id", None)], producer_byte_rate=2)
    assert q.resolve(PRODUCE, "alice", "c1") == (2, ("alice", "c1"))
    set_quota(q, [("user", "alice"), ("client-id", "c1")], producer_byte_rate=1)
    assert q.resolve(PRODUCE, "alice", "c1") == (1, ("alice", "c1"))
    assert q.resolve(PRODUCE, "bob", "c9") == (5, ("bob", "c9"))
    # each kind resolves on its own
    assert q.resolve(FETCH, "alice", "c1") is None and q.enforcing


def test_throttle_times(tmp_path):
    q = quotas(tmp_path)
    set_quota(q, [("client-id", "p")], producer_byte_rate=1000)
    assert q.record(PRODUCE, "u", "p", 10_000, 0) == 0                  # 1000 B/s: at the quota
    # 15 KB in the 10.1 s window: (15000 / 10.1 - 1000) / 1000 x 10.1 s = 4.9 s
    assert q.record(PRODUCE, "u", "p", 5_000, 100) == 4_900
    assert q.record(PRODUCE, "u", "other", 5_000, 100) == 0           # another client id, another rate
    set_quota(q, [("user", "u")], request_percentage=10)
    # request time is bounded by one window
    assert q.record(REQUEST, "u", "x", 1_000.0, 0) == 1_000
    # unrecording takes the value back
    set_quota(q, [("client-id", "f")], consumer_byte_rate=100)
    assert q.record(FETCH, "u", "f", 5_000, 0) > 0
    q.unrecord(FETCH, "u", "f", 5_000, 0)
    assert q.record(FETCH, "u", "f", 500, 0) == 0
    assert q.max_value_in_window(FETCH, "u", "f") == 100 * 10 * 1.0


@pytest.mark.parametrize("entity, ops, message", [
    ([], [("producer_byte_rate", 1.0, False)], "Invalid empty client quota entity"),
    ([("group", "g")], [("producer_byte_rate", 1.0, False)], "Unhandled client quota entity type: group"),
    ([("user", "")], [("producer_byte_rate", 1.0, False)], "Empty user not supported"),
    ([("user", "a"), ("user", "b")], [("producer_byte_rate", 1.0, False)], "duplicate entity entry user"),
    ([("user", "a"), ("ip", "1.2.3.4")], [("producer_byte_rate", 1.0, False)], "IP entity should"),
    ([("ip", "not an ip or a host!")], [("connection_creation_rate", 1.0, False)], "is not a valid IP"),
    ([("user", "a")], [("connection_creation_rate", 1.0, False)], "Invalid configuration key connection_creation_rate"),
    ([("ip", "1.2.3.4")], [("producer_byte_rate", 1.0, False)], "Invalid configuration key producer_byte_rate"),
    ([("user", "a")], [("nope", 1.0, False)], "Invalid configuration key nope"),
    ([("user", "a")], [("producer_byte_rate", 0.0, False)], "Quota producer_byte_rate must be greater than 0"),
    ([("user", "a")], [("request_percentage", -5.0, False)], "must be greater than 0"),
    ([("user", "a")], [("producer_byte_rate", 1.5, False)], "producer_byte_rate cannot be a fractional value."),
    ([("user", "a")], [("producer_byte_rate", 1e19, False)], "too large for a LONG"),
    ([("ip", "1.2.3.4")], [("connection_creation_rate", 3e9, False)], "too large for an INT"),
    ([("user", "a")], [("producer_byte_rate", 1.0, False), ("producer_byte_rate", 2.0, False)],
     "Duplicate quota key producer_byte_rate"),
])
def test_alter_refuses_what_kafka_refuses(tmp_path, entity, ops, message):
    q = quotas(tmp_path)
    ((echo, code, msg),) = q.alter([(entity, ops)], False)
    assert echo == entity and code == INVALID and message in msg
    assert q.describe([], False) == []


def test_alter_applies_valid_entries_persists_and_removes(tmp_path):
    q = quotas(tmp_path)
    results = q.alter([([("user", "alice")], [("producer_byte_rate", 1024.0, False), ("request_percentage", 12.5, False)]),
                       ([("user", "bob")], [("producer_byte_rate", 0.5, False)]),
                       ([("user", "alice")], [("consumer_byte_rate", 1.0, False)])], False)
    assert [r[1] for r in results] == [0, INVALID, INVALID]
    assert "Ignoring duplicate entity" in results[2][2]
    # validate_only changes nothing
    assert q.alter([([("client-id", None)], [("consumer_byte_rate", 10.0, False)])], True)[0][1] == 0
    again = quotas(tmp_path)
    assert again.describe([], False) == [(frozenset({("user", "alice")}),
                                          {"producer_byte_rate": 1024.0, "request_percentage": 12.5})]
    again.alter([([("user", "alice")], [("producer_byte_rate", 0.0, True), ("request_percentage", 0.0, True)])], False)
    assert quotas(tmp_path).describe([], False) == []


def test_describe_filters_as_kafka(tmp_path):
    q = quotas(tmp_path)
    for entity in ([("user", "alice")], [("user", None)], [("user", "alice"), ("client-id", "c1")],
                   [("client-id", "c1")], [("ip", "10.0.0.1")]):
        key = "connection_creation_rate" if entity[0][0] == "ip" else "producer_byte_rate"
        set_quota(q, entity, **{key: 100})

    def names(components, strict=False):
        return sorted(sorted((t, n or "<default>") for t, n in e) for e, _ in q.describe(components, strict))

    assert names([("user", 0, "alice")]) == [[("client-id", "c1"), ("user", "alice")], [("user", "alice")]]
    assert names([("user", 0, "alice")], strict=True) == [[("user", "alice")]]
    assert names([("user", 1, None)]) == [[("user", "<default>")]]
    assert names([("user", 2, None)], strict=True) == [[("user", "<default>")], [("user", "alice")]]
    assert names([("client-id", 2, None)]) == [[("client-id", "c1")], [("client-id", "c1"), ("user", "alice")]]
    assert names([("ip", 2, None)]) == [[("ip", "10.0.0.1")]]
    assert len(names([])) == 5 and names([], strict=True) == []
    for components, code, message in [
        ([("", 0, "x")], INVALID, "Invalid empty entity type."),
        ([("user", 0, "a"), ("user", 1, None)], INVALID, "cannot appear more than once"),
        ([("topic", 0, "t")], int(ErrorCode.UNSUPPORTED_VERSION), "Unsupported entity type topic"),
        ([("user", 0, None)], INVALID, "MATCH_TYPE_EXACT, but set match string to null"),
        ([("user", 1, "a")], INVALID, "MATCH_TYPE_DEFAULT, but also specified a match string"),
        ([("user", 2, "a")], INVALID, "MATCH_TYPE_SPECIFIED, but also specified a match string"),
        ([("user", 7, None)], INVALID, "Unknown match type 7"),
        ([("ip", 2, None), ("user", 2, None)], INVALID, "IP filter component should not be used"),
    ]:
        with pytest.raises(QuotaRequestError) as info:
            q.describe(components, False)
        assert info.value.code == code and message in str(info.value)


def test_controller_mutation_token_bucket(tmp_path):
    from broker.quotas import ThrottlingQuotaExceeded

    q = quotas(tmp_path)
    set_quota(q, [("user", "ops")], controller_mutation_rate=2)
    # a burst of 2 x 11 x 1 s = 22 partitions; strict: the request that finds the bucket
    # below zero is refused, with the time to refill it
    m = q.mutation_quota("ops", "c", True, 0)
    m.record(20)
    m.record(10)            # 22 - 30 = -8: done, the bucket is now below zero
    assert m.throttle_ms == 0
    with pytest.raises(ThrottlingQuotaExceeded) as info:
        q.mutation_quota("ops", "c", True, 0).record(1)
    assert info.value.throttle_ms == 4000  # 8 tokens at 2 per second
    # refilled after 4 s (tokens back to 0): accepted again
    q.mutation_quota("ops", "c", True, 4000).record(1)
    # permissive (old request versions): always done, throttled by the debt
    p = q.mutation_quota("ops", "c", False, 4000)
    p.record(5)
    assert p.throttle_ms == 3000  # -6 tokens / 2 per second
    # no quota for this user
    free = q.mutation_quota("dev", "c", True, 0)
    free.record(10_000)
    assert free.throttle_ms == 0


def test_answers_follow_kafkas_hashmap_order():
    """The orders java.util.HashMap gives Kafka's quota answers, checked against a JVM
    (Java 17) once: ClientQuotaDelta's maps for one alteration, a ClientQuotaEntity's
    parts and its hashCode."""
    from broker.quotas import _entity_hash, entity_parts, java_capacity, value_order

    assert value_order(["producer_byte_rate", "consumer_byte_rate", "request_percentage"]) == [
        "consumer_byte_rate", "request_percentage", "producer_byte_rate"]
    assert value_order(["request_percentage", "controller_mutation_rate", "consumer_byte_rate",
                        "producer_byte_rate"]) == [
        "producer_byte_rate", "consumer_byte_rate", "controller_mutation_rate", "request_percentage"]
    assert value_order(["producer_byte_rate"]) == ["producer_byte_rate"]
    assert entity_parts([("user", "u"), ("client-id", None)]) == [("client-id", None), ("user", "u")]
    assert entity_parts([("user", None), ("nosuch", "x")])[0] == ("user", None)  # unknown types do not raise
    signed = lambda h: h - (1 << 32) if h >= 1 << 31 else h  # noqa: E731
    assert signed(_entity_hash(frozenset([("user", "User1")]))) == 81098380
    assert signed(_entity_hash(frozenset([("user", "User1"), ("client-id", "Client1")]))) == 484093575
    assert [java_capacity(n, 0) for n in (1, 2, 3, 4, 7)] == [2, 4, 4, 8, 16]
    assert java_capacity(12) == 16 and java_capacity(13) == 32
