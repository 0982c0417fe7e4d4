"""gzip, snappy, lz4 and zstd: produce compressed batches with each client and read them
back with every client, including kafka-python api_version=(0,10,0), which fetches with
Fetch v2 and so gets magic-1 messages down-converted by the broker."""

from __future__ import annotations

import struct

import pytest

from tests.integration.helpers import (
    CLIENTS,
    CREATE_TIME,
    HEADER_CLIENTS,
    assert_records_equal,
    consume,
    make_records,
    now_ms,
    produce,
)

pytestmark = pytest.mark.timeout(120)

CODECS = {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}


def kp_has(codec: str) -> bool:
    import kafka.codec as kc

    return {"gzip": kc.has_gzip, "snappy": kc.has_snappy, "lz4": kc.has_lz4, "zstd": kc.has_zstd}[codec]()


KP_SNAPPY_MISSING = (
    "kafka-python's snappy support imports the `snappy` module: install the "
    "`python-snappy` package (0.7+, built on cramjam) with the test extras"
)


def first_batch_attributes(partition_dir) -> tuple[int, int]:
    """(magic, attributes) of the first batch of the first segment, read from disk."""
    with open(partition_dir / ("0" * 20 + ".log"), "rb") as f:
        head = f.read(23)
    assert len(head) == 23, f"segment too short: {len(head)} bytes"
    magic = head[16]
    (attrs,) = struct.unpack_from(">h", head, 21)
    return magic, attrs


# kafka-python with api_version=(0,10,0) cannot produce zstd (magic 1 has no zstd: the
# client raises 'Zstd Requires >= Kafka 2.1 Brokers'), so that pair is not in the matrix;
# consuming zstd data with it is checked below (UNSUPPORTED_COMPRESSION_TYPE).
PAIRS = [(p, c) for p in CLIENTS for c in CODECS if (p, c) != ("kp010", "zstd")]


@pytest.mark.parametrize("producer,codec", PAIRS, ids=[f"{p}-{c}" for p, c in PAIRS])
def test_compressed_cross_client(broker, new_topic, producer, codec):
    if producer in ("kp", "kp010"):
        assert kp_has(codec), KP_SNAPPY_MISSING
    topic = new_topic()
    hdr = producer in HEADER_CLIENTS
    recs = make_records(60, now_ms() - 90_000, step=17, headers=hdr, prefix=f"{producer}-{codec}",
                        value_size=300)
    recs[12].timestamp -= 10_000  # out of order inside a compressed batch
    linger = {"linger.ms": 200} if producer == "ck" else {"linger_ms": 200}
    acks = produce(producer, broker.bootstrap, topic, recs[:30], compression=codec, **linger)
    acks += produce(producer, broker.bootstrap, topic, recs[30:], compression=codec, **linger)
    assert [a.offset for a in acks] == list(range(60)), f"{producer}/{codec} produce offsets"

    magic, attrs = first_batch_attributes(broker.partition_dir(topic))
    assert magic == 2, f"segment holds magic {magic} batches, Kafka stores record batch v2"
    # (librdkafka sends uncompressed batches when it thinks the broker lacks the codec:
    # it enables lz4 only if ApiVersions lists FindCoordinator (key 10), and zstd only
    # with Produce v7 + Fetch v10; "Broker does not support compression type" in its
    # debug=msg log.)
    assert attrs & 0x7 == CODECS[codec], f"stored batch codec {attrs & 7}, producer {producer} was set to {codec}"

    for consumer in CLIENTS:
        who = f"{producer}({codec})->{consumer}"
        if consumer == "kp010" and codec == "zstd":
            # Kafka cannot down-convert zstd for Fetch < v10 and answers
            # UNSUPPORTED_COMPRESSION_TYPE (76); kafka-python raises it from poll().
            import kafka.errors

            with pytest.raises(kafka.errors.UnsupportedCompressionTypeError):
                consume(consumer, broker.bootstrap, topic, 60, timeout=15)
            continue
        got = consume(consumer, broker.bootstrap, topic, 60)
        assert_records_equal(got, recs, ts_type=CREATE_TIME, headers=hdr and consumer in HEADER_CLIENTS,
                             who=who)
        # start inside the second compressed batch
        got = consume(consumer, broker.bootstrap, topic, 15, start=45)
        assert_records_equal(got, recs[45:], start=45, ts_type=CREATE_TIME,
                             headers=hdr and consumer in HEADER_CLIENTS, who=who + " from 45")
