"""broker.metrics without a broker process: hooks, the scrape-time collector, the HTTP
endpoint, and the no-op path (metrics.port=0)."""

from __future__ import annotations

import asyncio
import time
from types import SimpleNamespace

import pytest
from prometheus_client.parser import text_string_to_metric_families

from broker.coordinator.group import GroupCoordinator, OffsetEntry
from broker.metrics import BrokerMetrics, MetricsServer, record_timestamp_at
from storage.clock import ManualClock
from storage.log import AppendInfo
from tests.unit.test_log_helpers import append, build_batch
from tests.unit.test_log_manager import manager

NOW = 1_000_000_000


def samples(m: BrokerMetrics) -> dict:
    out = {}
    for fam in text_string_to_metric_families(m.exposition().decode()):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def val(s, name, default=None, **labels):
    return s.get((name, frozenset((k, str(v)) for k, v in labels.items())), default)


def info(count, max_ts, log_append_time=-1):
    return AppendInfo(0, count - 1, log_append_time, 0, count, max_ts)


def appended(m, topic, records, info, now, one_batch=False):
    """One successful append told as the produce handler tells it."""
    from broker.handlers.produce import _count

    tally = {}
    _count(tally, topic, records, info, now, one_batch)
    m.produced([], tally)


def test_append_delay_one_observation_per_batch():
    m = BrokerMetrics(process_metrics=False)
    b1 = build_batch([(NOW - 5000, b"a"), (NOW - 4000, b"b")])
    b2 = build_batch([(NOW - 2000, b"c")])
    future = build_batch([(NOW + 10, b"d")])
    records = memoryview(bytearray(b1 + b2 + future))
    appended(m, "t", records, info(4, NOW + 10), NOW)
    s = samples(m)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="t") == 2
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="t") == pytest.approx(4.0 + 2.0)
    assert val(s, "chronolog_produce_append_delay_negative_total", topic="t") == 1
    assert val(s, "chronolog_topic_bytes_in_total", topic="t") == len(records)
    assert val(s, "chronolog_topic_messages_in_total", topic="t") == 4


def test_append_delay_legacy_set_and_log_append_time():
    m = BrokerMetrics(process_metrics=False)
    legacy = bytearray(70)  # magic byte (offset 16) is 0/1: one observation from the AppendInfo
    legacy[16] = 1
    appended(m, "old", legacy, info(3, NOW - 1500), NOW)
    appended(m, "lat", build_batch([(NOW - 1, b"x")]), info(1, NOW, NOW), NOW)
    s = samples(m)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="old") == 1
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="old") == pytest.approx(1.5)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="lat") is None
    assert val(s, "chronolog_topic_messages_in_total", topic="lat") == 1


def test_append_delay_short_legacy_set_and_one_batch():
    m = BrokerMetrics(process_metrics=False)
    short = bytearray(40)  # one magic 1 message with a small value: under a v2 header's 61 bytes
    short[16] = 1
    appended(m, "old", short, info(1, NOW - 250), NOW)
    one = memoryview(bytearray(build_batch([(NOW - 3000, b"a"), (NOW - 500, b"b")])))
    appended(m, "one", one, info(2, NOW - 500), NOW)
    # the produce handler's word that it is one batch (Produce v3+) changes nothing
    appended(m, "told", one, info(2, NOW - 500), NOW, True)
    appended(m, "told", one, info(2, NOW + 500), NOW, True)
    s = samples(m)
    for name in ("bytes_in_total", "messages_in_total"):
        assert val(s, f"chronolog_topic_{name}", topic="told") == 2 * val(s, f"chronolog_topic_{name}", topic="one")
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="told") == pytest.approx(0.5)
    assert val(s, "chronolog_produce_append_delay_negative_total", topic="told") == 1
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="old") == 1
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="old") == pytest.approx(0.25)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="one") == 1
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="one") == pytest.approx(0.5)


def test_produced_counts_requests_per_topic_and_appends_in_request_order():
    """One call per produce request: a request per topic in it, failed when any of its
    partitions failed; bytes, messages and delays per append, topic by topic; a topic
    the broker does not have gets no series."""
    from protocol.messages import ProduceResponse

    P = ProduceResponse.PartitionProduceResponse
    T = ProduceResponse.TopicProduceResponse
    m = BrokerMetrics(process_metrics=False)
    m.topic_exists = lambda topic: topic != "gone"
    a0 = build_batch([(NOW - 1000, b"a")])
    a1 = build_batch([(NOW - 3000, b"bb"), (NOW - 2000, b"c")])
    b0 = build_batch([(NOW + 5, b"d")])
    responses = [T(name="a", partition_responses=[P(index=0), P(index=1), P(index=2, error_code=3)]),
                 T(name="b", partition_responses=[P(index=0)]),
                 T(name="gone", partition_responses=[P(index=0, error_code=3)])]
    from broker.handlers.produce import _count

    tally = {}
    for topic, records, i in (("a", a0, info(1, NOW - 1000)), ("a", a1, info(2, NOW - 2000)),
                              ("b", b0, info(1, NOW + 5))):
        _count(tally, topic, records, i, NOW, True)
    m.produced(responses, tally)
    tally = {}
    _count(tally, "b", b0, info(1, NOW - 7, NOW - 7), NOW, True)  # a LogAppendTime append
    m.produced(responses[1:2], tally)
    s = samples(m)
    assert val(s, "chronolog_topic_produce_requests_total", topic="a") == 1
    assert val(s, "chronolog_topic_failed_produce_requests_total", topic="a") == 1
    assert val(s, "chronolog_topic_produce_requests_total", topic="b") == 2
    assert val(s, "chronolog_topic_failed_produce_requests_total", topic="b") == 0
    assert val(s, "chronolog_topic_produce_requests_total", topic="gone") is None
    assert val(s, "chronolog_topic_bytes_in_total", topic="a") == len(a0) + len(a1)
    assert val(s, "chronolog_topic_messages_in_total", topic="a") == 3
    assert val(s, "chronolog_topic_bytes_in_total", topic="b") == 2 * len(b0)
    assert val(s, "chronolog_topic_messages_in_total", topic="b") == 2
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="a") == 2
    assert val(s, "chronolog_produce_append_delay_seconds_sum", topic="a") == pytest.approx(3.0)
    assert val(s, "chronolog_produce_append_delay_seconds_count", topic="b") == 0
    assert val(s, "chronolog_produce_append_delay_negative_total", topic="b") == 1


def test_request_errors_from_response_structure():
    from protocol.messages import ProduceResponse

    P = ProduceResponse.PartitionProduceResponse
    resp = ProduceResponse(responses=[
        ProduceResponse.TopicProduceResponse(name="a", partition_responses=[
            P(index=0, error_code=0), P(index=1, error_code=3), P(index=2, error_code=3)]),
        ProduceResponse.TopicProduceResponse(name="b", partition_responses=[P(index=0, error_code=32)]),
    ], throttle_time_ms=0)
    m = BrokerMetrics(process_metrics=False)
    m.request_done(0, resp, 0.002)
    m.request_done(0, None, 0.001)  # acks=0
    m.request_failed(1, 0.5)
    s = samples(m)
    assert val(s, "chronolog_requests_total", api="Produce") == 2
    assert val(s, "chronolog_request_errors_total", api="Produce", error="UNKNOWN_TOPIC_OR_PARTITION") == 2
    assert val(s, "chronolog_request_errors_total", api="Produce", error="INVALID_TIMESTAMP") == 1
    assert val(s, "chronolog_request_errors_total", api="Fetch", error="UNKNOWN_SERVER_ERROR") == 1
    assert val(s, "chronolog_request_latency_seconds_count", api="Produce") == 2
    assert val(s, "chronolog_request_latency_seconds_sum", api="Produce") == pytest.approx(0.003)
    assert val(s, "chronolog_request_latency_seconds_bucket", api="Fetch", le="0.5") == 1


def _state(tmp_path):
    clock = ManualClock(NOW)
    lm = manager([tmp_path], clock)
    lm.create_topic("t", 2)
    plog = lm.get_log("t", 0)
    append(plog, [build_batch([(NOW - 9000, b"0"), (NOW - 8000, b"1"), (NOW - 7000, b"2")]),
                  build_batch([(NOW - 3000, b"3")], compression=1)])
    coord = GroupCoordinator(clock=clock)
    m = BrokerMetrics(process_metrics=False)
    m.attach_state(lm, lambda: coord, clock)
    return clock, lm, coord, m


def _commit(coord, group, tp, offset):
    from broker.coordinator.group import ClassicGroup

    g = coord.groups.setdefault(group, ClassicGroup(group, NOW))
    g.offsets[tp] = OffsetEntry(offset, -1, "", NOW)


def test_scrape_time_gauges(tmp_path):
    clock, lm, coord, m = _state(tmp_path)
    for g, off in (("mid", 1), ("start", 3), ("done", 4), ("none-yet", 0)):
        _commit(coord, g, ("t", 0), off)
    _commit(coord, "gone-topic", ("x", 0), 5)
    s = samples(m)
    plog = lm.get_log("t", 0)
    assert val(s, "kafka_topic_partition_current_offset", topic="t", partition=0) == 4
    assert val(s, "kafka_topic_partition_current_offset", topic="t", partition=1) == 0
    assert val(s, "kafka_topic_partition_oldest_offset", topic="t", partition=0) == 0
    assert val(s, "kafka_topic_partitions", topic="t") == 2
    assert val(s, "chronolog_log_size_bytes", topic="t", partition=0) == plog.size_in_bytes > 0
    assert val(s, "chronolog_log_segments", topic="t", partition=0) == 1
    from storage.open_files import OPEN_FILES

    assert val(s, "chronolog_log_open_files") == len(OPEN_FILES) >= 2  # at least the 2 .log files
    assert val(s, "chronolog_log_file_reopens_total") == OPEN_FILES.reopens
    expect = {"mid": (3, 8.0), "start": (1, 3.0), "done": (0, 0.0), "none-yet": (4, 9.0)}
    for g, (lag, lag_s) in expect.items():
        assert val(s, "kafka_consumergroup_current_offset", consumergroup=g, topic="t", partition=0) == 4 - lag
        assert val(s, "kafka_consumergroup_lag", consumergroup=g, topic="t", partition=0) == lag
        assert val(s, "kafka_consumergroup_lag_seconds", consumergroup=g, topic="t", partition=0) == lag_s
    # a committed offset of a partition this broker does not host: offset only
    assert val(s, "kafka_consumergroup_current_offset", consumergroup="gone-topic", topic="x", partition=0) == 5
    assert val(s, "kafka_consumergroup_lag", consumergroup="gone-topic", topic="x", partition=0) is None
    # lag in seconds grows with the clock; the cached timestamps stay right
    clock.advance(2000)
    s = samples(m)
    assert val(s, "kafka_consumergroup_lag_seconds", consumergroup="mid", topic="t", partition=0) == 10.0
    assert set(m.state_collector._ts_cache) == {("t", 0, 1), ("t", 0, 3), ("t", 0, 0)}


def test_a_scrape_in_a_thread_reads_records_on_the_loop(tmp_path, monkeypatch):
    """The scrape's thread hands the reads of records (the timestamps of lag in seconds)
    to the event loop the collector was made on, and gets the same values as a scrape
    on the loop."""
    import threading

    from broker import metrics as metrics_mod

    readers = []
    real = metrics_mod.record_timestamp_at

    def reading(plog, offset):
        readers.append(threading.get_ident())
        return real(plog, offset)

    monkeypatch.setattr(metrics_mod, "record_timestamp_at", reading)

    async def run():
        clock, lm, coord, m = _state(tmp_path)  # made on the loop: the collector knows it
        for g, off in (("mid", 1), ("start", 3)):
            _commit(coord, g, ("t", 0), off)
        text = await asyncio.get_running_loop().run_in_executor(None, m.exposition)
        return text, lm

    text, lm = asyncio.run(run())
    assert readers and set(readers) == {threading.get_ident()}  # this thread ran the loop
    lines = text.decode().splitlines()
    assert 'kafka_consumergroup_lag_seconds{consumergroup="mid",partition="0",topic="t"} 8.0' in lines
    assert 'kafka_consumergroup_lag_seconds{consumergroup="start",partition="0",topic="t"} 3.0' in lines


def test_record_timestamp_at(tmp_path):
    _clock, lm, _coord, _m = _state(tmp_path)
    plog = lm.get_log("t", 0)
    assert [record_timestamp_at(plog, o) for o in range(4)] == [NOW - 9000, NOW - 8000, NOW - 7000, NOW - 3000]


def test_metrics_server_serves_metrics_and_404(tmp_path):
    m = BrokerMetrics(process_metrics=False)
    m.requests.labels("Produce").inc()

    async def run():
        srv = MetricsServer(m, "127.0.0.1", 0)
        assert await srv.start()
        out = []
        for path in ("/metrics", "/other"):
            r, w = await asyncio.open_connection("127.0.0.1", srv.port)
            w.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
            out.append(await r.read())
            w.close()
        task = asyncio.ensure_future(srv.serve_until_cancelled())
        await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert srv.server is None
        return out

    ok, missing = asyncio.run(run())
    assert ok.startswith(b"HTTP/1.1 200 OK\r\n")
    assert b'chronolog_requests_total{api="Produce"} 1.0' in ok
    assert missing.startswith(b"HTTP/1.1 404")


def test_a_scrape_leaves_the_event_loop_free(tmp_path):
    """A scrape of a broker with thousands of partitions takes a quarter of a second;
    it runs beside the event loop, not on it. A collector here waits for the loop to
    run a callback scheduled once the scrape has begun: on the loop it would wait in
    vain (the loop is the one waiting), beside it the loop runs the callback at once."""
    import threading

    m = BrokerMetrics(process_metrics=False)
    began, loop_ran = threading.Event(), threading.Event()

    class WaitsForTheLoop:
        def describe(self):
            return []

        def collect(self):
            began.set()
            loop_ran.wait(5)
            return []

    m.registry.register(WaitsForTheLoop())

    async def run():
        loop = asyncio.get_running_loop()
        srv = MetricsServer(m, "127.0.0.1", 0)
        assert await srv.start()
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
        while not began.is_set():
            await asyncio.sleep(0.001)
        loop.call_soon(loop_ran.set)
        answer = await r.read()
        w.close()
        srv.server.close()
        return answer

    started = time.monotonic()
    answer = asyncio.run(run())
    assert answer.startswith(b"HTTP/1.1 200 OK\r\n") and loop_ran.is_set()
    assert time.monotonic() - started < 4  # the collector did not wait out its 5 s


def test_port_in_use_is_logged_not_fatal(caplog):
    import socket

    m = BrokerMetrics(process_metrics=False)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]

        async def run():
            return await MetricsServer(m, "127.0.0.1", port).start()

        assert asyncio.run(run()) is False
    assert "metrics endpoint not started" in caplog.text


def test_dispatcher_without_metrics_is_untouched():
    """metrics.port=0: the context holds None and the dispatcher copies it."""
    from broker.context import BrokerContext
    from broker.dispatcher import Dispatcher

    ctx = BrokerContext(config=SimpleNamespace(socket_request_max_bytes=1 << 20), log_manager=None,
                        clock=None, node_id=0, host="h", port=1, cluster_id="c")
    assert ctx.metrics is None
    assert Dispatcher(ctx).metrics is None


def test_record_timestamp_at_steps_over_transaction_markers(tmp_path):
    from protocol import records as R

    _clock, lm, _coord, _m = _state(tmp_path)
    plog = lm.get_log("t", 0)
    end = plog.log_end_offset
    plog.append(bytearray(R.build_batch([(NOW - 500, None, b"t")], producer_id=77, producer_epoch=0,
                                        base_sequence=0, is_transactional=True)), in_place=True)
    plog.append_end_txn_marker(77, 0, True, 0, now_ms=NOW)  # at end + 1
    assert record_timestamp_at(plog, end + 1) is None  # only a marker there: no record
    plog.append(bytearray(R.build_batch([(NOW - 100, None, b"after")])), in_place=True)
    assert record_timestamp_at(plog, end + 1) == NOW - 100


def test_observe_ms_counts_as_observe_does():
    """A histogram's observe_ms(ms) (the append delay's: a bucket from a table under
    _MS_TABLE_SIZE ms, by bisection above) leaves the counts and sum observe(ms / 1000)
    leaves: every ms up to twice the table, and each bound's neighbours."""
    from broker.metrics import _MS_TABLE_SIZE, APPEND_DELAY_BUCKETS, _HistogramChild

    for bounds in (tuple(float(b) for b in APPEND_DELAY_BUCKETS), (0.0005, 0.0015, 0.002, 1.0235, 7.5)):
        by_ms, by_s = _HistogramChild(bounds), _HistogramChild(bounds)
        values = set(range(2 * _MS_TABLE_SIZE))
        for bound in bounds:
            ms = round(bound * 1000)
            values |= {v for v in (ms - 1, ms, ms + 1) if v >= 0}
        for ms in sorted(values):
            by_ms.observe_ms(ms)
            by_s.observe(ms / 1000.0)
        assert by_ms.counts == by_s.counts and by_ms.sum == by_s.sum
        assert sum(by_ms.counts) == len(values) and all(by_ms.counts[:-1])  # every bucket was reached


def test_a_labelled_histograms_ms_table_is_made_with_the_histogram():
    """The table observe_ms reads is made when the histogram is (at start-up), not when
    the first request with a new label (a topic's first produce) makes its child."""
    from broker.metrics import Histogram, _ms_tables

    bounds = (0.0007, 0.0031, 0.047)
    assert bounds not in _ms_tables
    h = Histogram("chronolog_test_table_seconds", "test", ["topic"], buckets=bounds)
    assert h.children == {} and bounds in _ms_tables
    table = _ms_tables[bounds]
    assert h.labels("t").ms_buckets is table
