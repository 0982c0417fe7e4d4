"""The Prometheus endpoint (``metrics.port``) of a live broker: values, not just names.

One private broker for the module, started with ``metrics.port`` on a free port, a fast
retention check and no initial rebalance delay. Every test creates its own topics (and
groups), so the per-topic series it checks are its own; broker-wide counters are
compared before/after.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
import uuid

import pytest

from tests.integration import helpers
from tests.integration.helpers import now_ms


@pytest.fixture(scope="module")
def mbroker(tmp_path_factory):
    port = helpers.free_port()
    b = helpers.start_broker(tmp_path_factory.mktemp("metrics-broker"), {
        "metrics.port": str(port),
        "auto.create.topics.enable": "false",
        "group.initial.rebalance.delay.ms": "0",
        "log.retention.check.interval.ms": "300",
        "log.segment.delete.delay.ms": "0",
    })
    b.metrics_port = port
    yield b
    rc = b.stop()
    assert rc == 0, f"metrics broker: SIGTERM gave exit code {rc}"


def scrape(b) -> dict:
    """{(sample name, frozenset(labels)): value} of one scrape, parsed with
    prometheus_client's parser."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=10) as resp:
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/plain")
        text = resp.read().decode()
    out = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(samples: dict, name: str, default=None, **labels):
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), default)


def topic(b, name: str, configs: dict | None = None, partitions: int = 1) -> str:
    t = helpers.unique_topic(name)
    return helpers.create_topic(b.bootstrap, t, configs, partitions)


def log_files(b, t: str, p: int = 0) -> list:
    return sorted(b.partition_dir(t, p).glob("*.log"))


# -------------------------------------------------------------------------------------
def test_partition_offsets_log_size_and_bytes_in(mbroker):
    t = topic(mbroker, "offsets", {"message.timestamp.type": "CreateTime", "segment.bytes": "300"})
    base = now_ms() - 10_000
    helpers.produce_batches(mbroker.bootstrap, t, [(None, [base + i * 10 + j for j in range(3)]) for i in range(5)])
    end = helpers.end_offset(mbroker.bootstrap, t)
    assert end == 15
    s = scrape(mbroker)
    assert val(s, "kafka_topic_partition_current_offset", topic=t, partition=0) == end
    assert val(s, "kafka_topic_partition_oldest_offset", topic=t, partition=0) == \
        helpers.beginning_offset(mbroker.bootstrap, t) == 0
    assert val(s, "kafka_topic_partitions", topic=t) == 1
    files = log_files(mbroker, t)
    assert len(files) > 1, "segment.bytes=300 should have rolled"
    total = sum(f.stat().st_size for f in files)
    assert val(s, "chronolog_log_size_bytes", topic=t, partition=0) == total
    assert val(s, "chronolog_log_segments", topic=t, partition=0) == len(files)
    # uncompressed batches are stored as they arrived: bytes in == bytes on disk
    assert val(s, "chronolog_topic_bytes_in_total", topic=t) == total
    assert val(s, "chronolog_topic_messages_in_total", topic=t) == 15
    assert val(s, "chronolog_topic_produce_requests_total", topic=t) == 5
    assert val(s, "chronolog_topic_failed_produce_requests_total", topic=t) == 0
    assert val(s, "kafka_brokers") == 1
    assert val(s, "chronolog_log_recovery_seconds") >= 0

    got = helpers.consume_ck(mbroker.bootstrap, t, 15)
    assert len(got) == 15
    s = scrape(mbroker)
    assert val(s, "chronolog_topic_bytes_out_total", topic=t) == total
    assert val(s, "chronolog_topic_fetch_requests_total", topic=t) >= 1


def test_append_delay_histogram(mbroker):
    t = topic(mbroker, "delay", {"message.timestamp.type": "CreateTime"})
    skew = 60_000
    before = now_ms()
    batches = [(None, [before - skew - 2000 + i * 100 + j for j in range(4)]) for i in range(5)]
    helpers.produce_batches(mbroker.bootstrap, t, batches)
    after = now_ms()
    s = scrape(mbroker)
    count = val(s, "chronolog_produce_append_delay_seconds_count", topic=t)
    total = val(s, "chronolog_produce_append_delay_seconds_sum", topic=t)
    assert count == len(batches)
    # each batch was appended between `before` and `after` (ms clocks of this machine;
    # 1 ms slack per batch for the truncation of both clocks to milliseconds)
    max_ts = [max(stamps) for _, stamps in batches]
    lo = sum(before - m for m in max_ts) / 1000 - 0.001 * len(batches)
    hi = sum(after - m for m in max_ts) / 1000 + 0.001 * len(batches)
    assert lo <= total <= hi, (lo, total, hi)
    # all observations are ~62 s: in the (60, 300] bucket
    assert val(s, "chronolog_produce_append_delay_seconds_bucket", topic=t, le="60.0") == 0
    assert val(s, "chronolog_produce_append_delay_seconds_bucket", topic=t, le="300.0") == len(batches)
    assert val(s, "chronolog_produce_append_delay_negative_total", topic=t) == 0

    # batches from the future: counted apart, not observed
    t3 = topic(mbroker, "delay-future", {"message.timestamp.type": "CreateTime"})
    helpers.produce_batches(mbroker.bootstrap, t3, [(None, [now_ms() + 3_600_000]), (None, [before])])
    s = scrape(mbroker)
    assert val(s, "chronolog_produce_append_delay_negative_total", topic=t3) == 1
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic=t3) == 1

    # LogAppendTime topics have no append delay
    t2 = topic(mbroker, "delay-lat", {"message.timestamp.type": "LogAppendTime"})
    helpers.produce_batches(mbroker.bootstrap, t2, [(None, [before - skew])])
    s = scrape(mbroker)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic=t2) is None
    assert val(s, "chronolog_topic_messages_in_total", topic=t2) == 1


def _consume_and_commit(bootstrap: str, t: str, group: str, n: int) -> None:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(helpers.ck_consumer_config(bootstrap, **{
        "group.id": group, "auto.offset.reset": "earliest", "session.timeout.ms": 6000}))
    try:
        c.subscribe([t])
        got = 0
        deadline = time.monotonic() + 30
        while got < n and time.monotonic() < deadline:
            m = helpers.ck_poll(c, timeout=1.0)
            if m is not None:
                got += 1
        assert got == n, f"group {group}: consumed {got} of {n}"
        c.commit(offsets=[TopicPartition(t, 0, n)], asynchronous=False)
    finally:
        c.close()


def test_consumer_group_offsets_lag_and_lag_seconds(mbroker):
    t = topic(mbroker, "lag", {"message.timestamp.type": "CreateTime"})
    base = now_ms() - 100_000
    stamps = [base + i * 1000 for i in range(10)]
    # batch A = offsets 0-5, batch B = offsets 6-9
    helpers.produce_batches(mbroker.bootstrap, t, [(None, stamps[:6]), ("gzip", stamps[6:])])
    tag = uuid.uuid4().hex[:6]
    groups = {f"mid-batch-{tag}": 4, f"batch-start-{tag}": 6, f"caught-up-{tag}": 10}
    for g, n in groups.items():
        _consume_and_commit(mbroker.bootstrap, t, g, n)
    t0 = now_ms()
    s = scrape(mbroker)
    t1 = now_ms()
    for g, committed in groups.items():
        assert val(s, "kafka_consumergroup_current_offset", consumergroup=g, topic=t, partition=0) == committed
        assert val(s, "kafka_consumergroup_lag", consumergroup=g, topic=t, partition=0) == 10 - committed
        assert val(s, "kafka_consumergroup_lag_sum", consumergroup=g, topic=t) == 10 - committed
        lag_s = val(s, "kafka_consumergroup_lag_seconds", consumergroup=g, topic=t, partition=0)
        if committed == 10:
            assert lag_s == 0
        else:
            # now (taken by the broker during the scrape, between t0 and t1) minus the
            # timestamp of the record at the committed offset; ms resolution both sides
            ts = stamps[committed]
            assert (t0 - ts) / 1000 - 0.002 <= lag_s <= (t1 - ts) / 1000 + 0.002, (g, lag_s)
        assert val(s, "kafka_consumergroup_members", consumergroup=g) == 0  # consumers closed


def test_request_counts_errors_and_latency(mbroker):
    s0 = scrape(mbroker)
    t = topic(mbroker, "requests")
    helpers.produce_batches(mbroker.bootstrap, t, [(None, [now_ms()])])
    s1 = scrape(mbroker)
    assert val(s1, "chronolog_requests_total", api="Produce") >= val(s0, "chronolog_requests_total", 0, api="Produce") + 1
    assert val(s1, "chronolog_requests_total", api="CreateTopics") >= 1
    assert val(s1, "chronolog_request_latency_seconds_count", api="Produce") == \
        val(s1, "chronolog_requests_total", api="Produce")
    assert val(s1, "chronolog_request_latency_seconds_sum", api="Produce") > 0

    # a produce to a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION in the response
    before = val(s1, "chronolog_request_errors_total", 0, api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION")
    batch = helpers.build_v2_batch([helpers.Rec(key=b"k", value=b"v", timestamp=now_ms())])
    with helpers.RawConn(mbroker.port) as conn:
        body = conn.request(0, 3, helpers.produce_request_v3("no-such-topic-" + uuid.uuid4().hex[:6], 0, batch), 7)
    (err, _, _), = helpers.parse_produce_response_v3(body).values()
    assert err == 3
    s2 = scrape(mbroker)
    assert val(s2, "chronolog_request_errors_total", api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == before + 1

    # ListOffsets by timestamp: a time-index lookup
    lookups = val(s2, "chronolog_time_index_lookups_total")
    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=mbroker.bootstrap, request_timeout_ms=helpers.REQUEST_TIMEOUT_MS)
    try:
        tp = TopicPartition(t, 0)
        assert c.offsets_for_times({tp: 0})[tp].offset == 0
    finally:
        c.close()
    s3 = scrape(mbroker)
    assert val(s3, "chronolog_time_index_lookups_total") == lookups + 1
    assert val(s3, "chronolog_time_index_lookup_seconds_count") == lookups + 1


def test_retention_deletions_counted(mbroker):
    before = val(scrape(mbroker), "chronolog_log_retention_segments_deleted_total")
    t = topic(mbroker, "retention", {"retention.ms": "60000", "segment.bytes": "100"})
    old = now_ms() - 3_600_000
    helpers.produce_batches(mbroker.bootstrap, t, [(None, [old + i]) for i in range(3)])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        s = scrape(mbroker)
        if val(s, "kafka_topic_partition_oldest_offset", topic=t, partition=0) == 3:
            break
        time.sleep(0.2)
    assert val(s, "kafka_topic_partition_oldest_offset", topic=t, partition=0) == 3
    assert val(s, "kafka_topic_partition_current_offset", topic=t, partition=0) == 3
    assert val(s, "chronolog_log_retention_segments_deleted_total") - before == 3
    assert val(s, "chronolog_log_size_bytes", topic=t, partition=0) == 0


def test_other_paths(mbroker):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(f"http://127.0.0.1:{mbroker.metrics_port}/nope", timeout=10)
    assert e.value.code == 404
    s = scrape(mbroker)
    assert val(s, "process_cpu_seconds_total") is not None


def test_disabled_with_port_zero(broker_factory):
    b = broker_factory({"metrics.port": "0"})
    assert "metrics endpoint" not in b.log_text()
    t = topic(b, "off")
    helpers.produce_batches(b.bootstrap, t, [(None, [now_ms()])])
    assert len(helpers.consume_ck(b.bootstrap, t, 1)) == 1


def test_deleted_topic_series_are_removed(mbroker):
    """Deleting a topic drops its per-topic series (Kafka removes a deleted topic's
    BrokerTopicMetrics); the same name created again counts from zero."""
    from confluent_kafka.admin import AdminClient

    t = topic(mbroker, "deleted", {"message.timestamp.type": "CreateTime"})
    helpers.produce_batches(mbroker.bootstrap, t, [(None, [now_ms() - 100, now_ms() - 50])] * 2)
    assert len(helpers.consume_ck(mbroker.bootstrap, t, 4)) == 4

    def series(samples):
        return sorted(name for (name, labels) in samples if ("topic", t) in labels)

    before = series(scrape(mbroker))
    for name in ("chronolog_topic_bytes_in_total", "chronolog_topic_messages_in_total",
                 "chronolog_topic_bytes_out_total", "chronolog_topic_fetch_requests_total",
                 "chronolog_produce_append_delay_seconds_count", "kafka_topic_partition_current_offset"):
        assert name in before, (name, before)
    # a Fetch long poll parked at the log end when the topic is deleted: the deletion
    # wakes it and it answers for the deleted topic, which must not bring series back
    from protocol import codec
    from protocol.messages import FetchRequest, RequestHeader

    req = FetchRequest(replica_id=-1, max_wait_ms=10_000, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                       session_id=0, session_epoch=-1, forgotten_topics_data=[], rack_id="",
                       topics=[FetchRequest.FetchTopic(topic=t, partitions=[FetchRequest.FetchPartition(
                           partition=0, current_leader_epoch=-1, fetch_offset=4, log_start_offset=-1,
                           partition_max_bytes=1 << 20)])])
    with helpers.RawConn(mbroker.port, timeout=30) as conn:
        conn.send(codec.encode_request(RequestHeader(api_key=1, api_version=11, correlation_id=7,
                                                     client_id="parked"), req))
        time.sleep(0.3)  # parked
        admin = AdminClient({"bootstrap.servers": mbroker.bootstrap})
        t0 = time.monotonic()
        admin.delete_topics([t], request_timeout=15)[t].result(timeout=20)
        cid, resp = codec.decode_response(1, 11, conn.recv_frame())
        assert time.monotonic() - t0 < 5, "the deletion did not wake the parked fetch"
        assert cid == 7 and resp.responses[0].partitions[0].error_code != 0
    assert series(scrape(mbroker)) == []
    # nor does a produce to the topic that no longer exists (auto-create is off)
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": mbroker.bootstrap, "message.timeout.ms": 1500})
    p.produce(t, b"x")
    p.flush(10)
    assert series(scrape(mbroker)) == []

    helpers.create_topic(mbroker.bootstrap, t, {"message.timestamp.type": "CreateTime"}, 1)
    helpers.produce_batches(mbroker.bootstrap, t, [(None, [now_ms() - 10])])
    s = scrape(mbroker)
    assert val(s, "chronolog_topic_messages_in_total", topic=t) == 1
    assert val(s, "chronolog_topic_produce_requests_total", topic=t) == 1
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic=t) == 1
    assert val(s, "chronolog_topic_bytes_out_total", topic=t) is None


def test_event_loop_lag_is_measured(mbroker):
    """chronolog_event_loop_lag_seconds: a tick every 100 ms, its lateness observed; an
    idle broker's ticks are on time (under a quarter second, with room for a busy
    machine)."""
    s1 = scrape(mbroker)
    n1 = val(s1, "chronolog_event_loop_lag_seconds_count")
    time.sleep(1.0)
    s2 = scrape(mbroker)
    n2 = val(s2, "chronolog_event_loop_lag_seconds_count")
    assert 4 <= n2 - n1 <= 12, (n1, n2)
    on_time = val(s2, "chronolog_event_loop_lag_seconds_bucket", le="0.25") \
        - val(s1, "chronolog_event_loop_lag_seconds_bucket", le="0.25")
    assert on_time >= (n2 - n1) - 1
