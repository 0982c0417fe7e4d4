"""The CreateTime skew window (KIP-32 max.message.time.difference.ms, later
message.timestamp.difference.max.ms, refined by KIP-937 into
message.timestamp.before.max.ms / after.max.ms): a record outside it fails the whole batch
with INVALID_TIMESTAMP (32), nothing is appended, and the topic keeps working."""

from __future__ import annotations

import pytest

from tests.integration.helpers import (
    CLIENTS,
    CREATE_TIME,
    HEADER_CLIENTS,
    LOG_APPEND_TIME,
    Rec,
    assert_records_equal,
    consume,
    end_offset,
    now_ms,
    produce,
    produce_ck,
    produce_kp,
)

pytestmark = pytest.mark.timeout(120)

MIN = 60_000

# name -> (topic configs, [(offset from now in ms, accepted?)])
WINDOWS = {
    "before-after": (
        {"message.timestamp.before.max.ms": MIN, "message.timestamp.after.max.ms": MIN},
        [(-10 * MIN, False), (10 * MIN, False), (-MIN // 2, True), (MIN // 2, True)],
    ),
    "difference-max": (
        {"message.timestamp.difference.max.ms": MIN},
        [(-10 * MIN, False), (10 * MIN, False), (-MIN // 2, True), (MIN // 2, True)],
    ),
    "kip32-name": (
        {"max.message.time.difference.ms": MIN},
        [(-10 * MIN, False), (10 * MIN, False), (-MIN // 2, True), (MIN // 2, True)],
    ),
    "asymmetric": (
        {"message.timestamp.before.max.ms": 60 * MIN, "message.timestamp.after.max.ms": 5_000},
        [(-30 * MIN, True), (MIN, False), (-120 * MIN, False), (1_000, True)],
    ),
}

CASES = [(w, c) for w in WINDOWS for c in CLIENTS if w != "asymmetric" or c in ("kp", "ck")]


def expect_invalid_timestamp(client: str, bootstrap: str, topic: str, recs: list[Rec],
                             bad: set[int] | None = None, **kw) -> None:
    """Produce ``recs`` and assert every one of them fails: with INVALID_TIMESTAMP, except
    that kafka-python with Produce v8+ (KIP-467 record_errors) raises INVALID_TIMESTAMP
    for the offending records (indexes ``bad``) and a generic KafkaError ("part of a
    batch which had invalid records") for the others."""
    if client in ("kp", "kp010"):
        import kafka.errors

        results = produce_kp(bootstrap, topic, recs, legacy=client == "kp010", raise_on_error=False, **kw)
        for i, r in enumerate(results):
            assert isinstance(r, kafka.errors.KafkaError), f"record {i} was not rejected: {r}"
            if bad is None or i in bad or client == "kp010":
                assert isinstance(r, kafka.errors.InvalidTimestampError), f"record {i}: {r!r}"
            else:
                # Produce v8+: the response's record_errors names only the offending
                # record indexes; kafka-python fails the others with a plain KafkaError.
                assert not isinstance(r, kafka.errors.InvalidTimestampError), (
                    f"record {i} (valid) failed with INVALID_TIMESTAMP: record_errors should "
                    f"list only the offending indexes {sorted(bad)}")
    elif client == "aio":
        import aiokafka.errors

        with pytest.raises(aiokafka.errors.InvalidTimestampError):
            produce(client, bootstrap, topic, recs, **kw)
    elif client == "ck":
        from confluent_kafka import KafkaError

        results = produce_ck(bootstrap, topic, recs, raise_on_error=False, **kw)
        codes = [r.code() if isinstance(r, KafkaError) else ("delivered", r.offset) for r in results]
        assert codes == [KafkaError.INVALID_TIMESTAMP] * len(recs), (
            f"confluent delivery reports: {codes} (expected INVALID_TIMESTAMP={KafkaError.INVALID_TIMESTAMP})")
    else:
        raise ValueError(client)


@pytest.mark.parametrize("window,client", CASES)
def test_timestamp_window(broker, new_topic, window, client):
    configs, cases = WINDOWS[window]
    topic = new_topic(configs)
    hdr = client in HEADER_CLIENTS
    accepted: list[Rec] = []

    def rec(i: int, delta: int) -> Rec:
        return Rec(f"k{i}".encode(), f"{client}-{window}-{i}-{delta}".encode(), now_ms() + delta,
                   [("i", str(i).encode())] if hdr else [])

    first = rec(0, -1_000)
    produce(client, bootstrap=broker.bootstrap, topic=topic, recs=[first])
    accepted.append(first)
    assert end_offset(broker.bootstrap, topic) == 1

    i = 1
    for delta, ok in cases:
        if ok:
            continue
        expect_invalid_timestamp(client, broker.bootstrap, topic, [rec(i, delta)])
        i += 1
        assert end_offset(broker.bootstrap, topic) == len(accepted), (
            f"a rejected record (now{delta:+d} ms) changed the log end offset")

    # One bad record among good ones in the same batch rejects the whole batch.
    bad_delta = next(d for d, ok in cases if not ok)
    batch = [rec(i, -500), rec(i + 1, bad_delta), rec(i + 2, -400)]
    i += 3
    linger = {"linger.ms": 300} if client == "ck" else {"linger_ms": 300}
    expect_invalid_timestamp(client, broker.bootstrap, topic, batch, bad={1}, **linger)
    assert end_offset(broker.bootstrap, topic) == len(accepted), "part of a rejected batch was appended"

    # Records inside the window still go through afterwards, at the next offsets.
    for delta, ok in cases:
        if not ok:
            continue
        r = rec(i, delta)
        i += 1
        acks = produce(client, broker.bootstrap, topic, [r])
        assert acks[0].offset == len(accepted), f"accepted record got offset {acks[0].offset}"
        accepted.append(r)

    assert end_offset(broker.bootstrap, topic) == len(accepted)
    got = consume(client, broker.bootstrap, topic, len(accepted))
    assert_records_equal(got, accepted, ts_type=CREATE_TIME, headers=hdr, who=client)


def test_window_does_not_apply_to_log_append_time(broker, new_topic):
    """Kafka checks the window only for CreateTime topics: on a LogAppendTime topic an
    old CreateTime is simply replaced."""
    topic = new_topic({"message.timestamp.type": "LogAppendTime",
                       "message.timestamp.before.max.ms": MIN,
                       "message.timestamp.after.max.ms": MIN})
    recs = [Rec(b"old", b"v", now_ms() - 100 * MIN), Rec(b"future", b"v", now_ms() + 100 * MIN)]
    before = now_ms()
    acks = produce("kp", broker.bootstrap, topic, recs)
    after = now_ms()
    assert [a.offset for a in acks] == [0, 1]
    assert all(before <= a.timestamp <= after for a in acks)
    got = consume("ck", broker.bootstrap, topic, 2)
    assert_records_equal(got, recs, ts_type=LOG_APPEND_TIME, headers=False, who="ck")


def test_broker_default_window(broker_factory):
    """The broker-wide log.message.timestamp.* defaults apply to topics without
    overrides; a topic override wins over the broker default."""
    b = broker_factory({"log.message.timestamp.before.max.ms": MIN,
                        "log.message.timestamp.after.max.ms": MIN,
                        "auto.create.topics.enable": "false"})
    from tests.integration.helpers import create_topic, unique_topic

    strict = create_topic(b.bootstrap, unique_topic("strict"))
    loose = create_topic(b.bootstrap, unique_topic("loose"),
                         {"message.timestamp.before.max.ms": 1000 * MIN})
    old = Rec(b"k", b"old", now_ms() - 100 * MIN)
    expect_invalid_timestamp("ck", b.bootstrap, strict, [old])
    assert end_offset(b.bootstrap, strict) == 0
    acks = produce("ck", b.bootstrap, loose, [old])
    assert acks[0].offset == 0
