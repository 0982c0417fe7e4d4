"""Option parsing and offset resolution of the kafka-compatible Spark source, without
Spark and without a broker (ListOffsets is a fake callable)."""

from __future__ import annotations

import pytest

from pyspark_kafka_compatible.kafka_io import default_partition, murmur2
from pyspark_kafka_compatible.offsets import (
    from_spark_json,
    plan_ranges,
    rate_limit,
    resolve,
    split_ranges,
    to_spark_json,
)
from pyspark_kafka_compatible.options import (
    KafkaOptionError,
    KafkaSourceError,
    OffsetSpec,
    parse_sink_options,
    parse_source_options,
)

BS = {"kafka.bootstrap.servers": "h:9092"}


def opts(**kw):
    d = dict(BS)
    d.update({k.replace("_", "."): v for k, v in kw.items()})
    return d


# --------------------------------------------------------------------------- options


def test_defaults_batch_and_stream():
    o = parse_source_options({**BS, "subscribe": "a, b"})
    assert o.subscription.kind == "subscribe" and o.subscription.topics == ("a", "b")
    assert o.starting == OffsetSpec("earliest") and o.ending == OffsetSpec("latest")
    assert o.fail_on_data_loss is True and o.include_headers is False and o.strategy == "error"
    s = parse_source_options({**BS, "subscribe": "a"}, streaming=True)
    assert s.starting == OffsetSpec("latest")


def test_keys_are_case_insensitive():
    # PySpark lower-cases option keys; users write Spark's camelCase
    o = parse_source_options({"KAFKA.BOOTSTRAP.SERVERS": "h:1", "subscribePattern": "t-.*",
                              "includeHeaders": "TRUE", "minPartitions": "4", "failOnDataLoss": "false",
                              "maxOffsetsPerTrigger": "10", "filterPushdown": "true"})
    assert o.subscription.kind == "pattern" and o.subscription.pattern == "t-.*"
    assert o.include_headers and o.min_partitions == 4 and not o.fail_on_data_loss
    assert o.max_offsets_per_trigger == 10 and o.filter_pushdown
    assert not parse_source_options({**BS, "subscribe": "a"}).filter_pushdown


@pytest.mark.parametrize("bad", [
    {},  # no subscription
    {"subscribe": "a", "assign": '{"a":[0]}'},
    {"subscribe": " , "},
    {"subscribepattern": "("},
    {"assign": '{"a":"0"}'},
    {"assign": "[1]"},
])
def test_subscription_errors(bad):
    with pytest.raises(KafkaOptionError):
        parse_source_options({**BS, **bad})


def test_bootstrap_required():
    with pytest.raises(KafkaOptionError, match="kafka.bootstrap.servers"):
        parse_source_options({"subscribe": "a"})


def test_assign_json():
    o = parse_source_options({**BS, "assign": '{"a":[1,0,1],"b":[2]}'})
    assert o.subscription.assign == {"a": [0, 1], "b": [2]}


def test_offsets_json_and_precedence():
    o = parse_source_options({**BS, "subscribe": "a", "startingoffsets": '{"a":{"0":5,"1":-2}}',
                              "endingoffsets": '{"a":{"0":-1,"1":9}}'})
    assert o.starting == OffsetSpec("offsets", offsets={"a": {0: 5, 1: -2}})
    assert o.ending == OffsetSpec("offsets", offsets={"a": {0: -1, 1: 9}})
    # startingTimestamp > startingOffsetsByTimestamp > startingOffsets (as Spark)
    o = parse_source_options({**BS, "subscribe": "a", "startingoffsets": "earliest",
                              "startingoffsetsbytimestamp": '{"a":{"0":1000}}', "startingtimestamp": "2000",
                              "endingoffsetsbytimestamp": '{"a":{"0":3000}}'})
    assert o.starting == OffsetSpec("timestamp", timestamp=2000)
    assert o.ending == OffsetSpec("by_timestamp", timestamps={"a": {0: 3000}})


@pytest.mark.parametrize("bad", [
    {"startingoffsets": "latest"},            # batch cannot start at latest
    {"endingoffsets": "earliest"},
    {"startingoffsets": '{"a":{"0":-1}}'},
    {"endingoffsets": '{"a":{"0":-2}}'},
    {"startingoffsets": '{"a":{"0":-3}}'},
    {"startingoffsets": "middle"},
    {"startingoffsets": '{"a":{"x":1}}'},
    {"startingoffsets": '{"a":'},
    {"startingtimestamp": "yesterday"},
    {"startingtimestamp": "-5"},
    {"startingoffsetsbytimestamp": '{"a":{"0":-1}}'},
    {"startingoffsetsbytimestampstrategy": "earliest"},
    {"failondataloss": "maybe"},
    {"minpartitions": "0"},
    {"kafka.group.id": "g"},
])
def test_offset_option_errors(bad):
    with pytest.raises(KafkaOptionError):
        parse_source_options({**BS, "subscribe": "a", **bad})


def test_streaming_rejects_ending_offsets():
    with pytest.raises(KafkaOptionError, match="batch"):
        parse_source_options({**BS, "subscribe": "a", "endingoffsets": "latest"}, streaming=True)
    o = parse_source_options({**BS, "subscribe": "a", "startingoffsets": '{"a":{"0":-1}}'}, streaming=True)
    assert o.starting.offsets == {"a": {0: -1}}


def test_sink_options():
    s = parse_sink_options({**BS, "topic": "out", "includeHeaders": "true"})
    assert s.topic == "out" and s.include_headers and s.acks == -1
    assert parse_sink_options(BS).topic is None
    with pytest.raises(KafkaOptionError):
        parse_sink_options({**BS, "kafka.acks": "2"})


# --------------------------------------------------------------------------- resolution


class FakeLog:
    """ListOffsets over in-memory partitions: {tp: [timestamps]} with a log start offset."""

    def __init__(self, logs: dict, start: dict | None = None):
        self.logs = logs
        self.start = start or {}
        self.calls = []

    def __call__(self, req: dict) -> dict:
        self.calls.append(dict(req))
        out = {}
        for tp, spec in req.items():
            ts = self.logs[tp]
            lo = self.start.get(tp, 0)
            if spec == -2:
                out[tp] = (0, lo, -1)
            elif spec == -1:
                out[tp] = (0, len(ts), -1)
            else:
                hit = next((i for i in range(lo, len(ts)) if ts[i] >= spec), None)
                out[tp] = (0, -1, -1) if hit is None else (0, hit, ts[hit])
        return out


A0, A1 = ("a", 0), ("a", 1)
LOGS = {A0: [100, 200, 300, 400], A1: [150, 250]}


def test_resolve_earliest_latest_json():
    f = FakeLog(LOGS, {A0: 1})
    assert resolve(OffsetSpec("earliest"), [A0, A1], f, which="starting") == {A0: 1, A1: 0}
    assert resolve(OffsetSpec("latest"), [A0, A1], f, which="ending") == {A0: 4, A1: 2}
    spec = OffsetSpec("offsets", offsets={"a": {0: 2, 1: -2}})
    assert resolve(spec, [A0, A1], f, which="starting") == {A0: 2, A1: 0}


def test_resolve_json_must_name_every_partition():
    with pytest.raises(KafkaSourceError, match="missing a-1"):
        resolve(OffsetSpec("offsets", offsets={"a": {0: 2}}), [A0, A1], FakeLog(LOGS), which="starting")
    with pytest.raises(KafkaSourceError, match="b-0"):
        resolve(OffsetSpec("offsets", offsets={"a": {0: 1, 1: 1}, "b": {0: 1}}), [A0, A1], FakeLog(LOGS),
                which="starting")


def test_resolve_by_timestamp():
    f = FakeLog(LOGS)
    assert resolve(OffsetSpec("timestamp", timestamp=200), [A0, A1], f, which="starting") == {A0: 1, A1: 1}
    spec = OffsetSpec("by_timestamp", timestamps={"a": {0: 301, 1: 0}})
    assert resolve(spec, [A0, A1], f, which="starting") == {A0: 3, A1: 0}


def test_resolve_timestamp_past_the_end():
    f = FakeLog(LOGS)
    with pytest.raises(KafkaSourceError) as ei:
        resolve(OffsetSpec("timestamp", timestamp=300), [A0, A1], f, which="starting", strategy="error")
    msg = str(ei.value)
    assert "topic a partition 1" in msg and "300" in msg and "startingOffsetsByTimestampStrategy" in msg
    # strategy latest: that partition starts at its latest offset
    assert resolve(OffsetSpec("timestamp", timestamp=300), [A0, A1], f, which="starting",
                   strategy="latest") == {A0: 2, A1: 2}
    # an ending timestamp with no record after it ends at latest
    assert resolve(OffsetSpec("timestamp", timestamp=1000), [A0, A1], f, which="ending") == {A0: 4, A1: 2}


def test_resolve_reports_broker_errors():
    def failing(req):
        return {tp: (3, -1, -1) for tp in req}

    with pytest.raises(KafkaSourceError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        resolve(OffsetSpec("earliest"), [A0], failing, which="starting")


def test_plan_ranges_data_loss():
    s, e = {A0: 0, A1: 1}, {A0: 4, A1: 2}
    lo, hi = {A0: 2, A1: 0}, {A0: 4, A1: 2}
    with pytest.raises(KafkaSourceError, match="a-0.*log start offset 2.*failOnDataLoss"):
        plan_ranges(s, e, lo, hi, fail_on_data_loss=True)
    assert plan_ranges(s, e, lo, hi, fail_on_data_loss=False) == [("a", 0, 2, 4), ("a", 1, 1, 2)]
    with pytest.raises(KafkaSourceError, match="beyond the latest offset"):
        plan_ranges({A0: 0}, {A0: 9}, {A0: 0}, {A0: 4}, fail_on_data_loss=True)
    assert plan_ranges({A0: 0}, {A0: 9}, {A0: 0}, {A0: 4}, fail_on_data_loss=False) == [("a", 0, 0, 4)]
    with pytest.raises(KafkaSourceError, match="after the ending offset"):
        plan_ranges({A0: 3}, {A0: 1}, {A0: 0}, {A0: 4}, fail_on_data_loss=False)


def test_split_ranges_min_partitions():
    ranges = [("a", 0, 0, 100), ("a", 1, 0, 10), ("b", 0, 5, 5)]
    assert split_ranges(ranges, None) == ranges[:2]
    out = split_ranges(ranges, 11)
    assert sum(1 for r in out if r[:2] == ("a", 0)) == 10
    assert [r for r in out if r[:2] == ("a", 1)] == [("a", 1, 0, 10)]
    a0 = [r for r in out if r[:2] == ("a", 0)]
    assert a0[0][2] == 0 and a0[-1][3] == 100 and all(x[3] == y[2] for x, y in zip(a0, a0[1:]))


def test_rate_limit_is_proportional():
    start = {A0: 0, A1: 0}
    latest = {A0: 90, A1: 10}
    assert rate_limit(start, latest, None) == latest
    assert rate_limit(start, latest, 1000) == latest
    assert rate_limit(start, latest, 10) == {A0: 9, A1: 1}
    assert rate_limit({A0: 0, A1: 0}, {A0: 1000, A1: 1}, 10) == {A0: 9, A1: 1}  # share < 1 rounds up


def test_spark_offset_json_shape():
    j = to_spark_json({A0: 5, A1: 7, ("b", 10): 0})
    assert j == {"a": {"0": 5, "1": 7}, "b": {"10": 0}}
    assert from_spark_json(j) == {A0: 5, A1: 7, ("b", 10): 0}


def test_murmur2_matches_kafka():
    # values from Kafka's UtilsTest.testMurmur2
    cases = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
             b"a-little-bit-longer-string": -1486304829,
             b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971, b"abc": 479470107}
    for k, v in cases.items():
        assert murmur2(k) == v, k
    assert 0 <= default_partition(b"abc", 3) < 3


def test_max_trigger_delay_option_and_delay_rule():
    from pyspark_kafka_compatible import offsets as off
    from pyspark_kafka_compatible.options import KafkaOptionError, parse_source_options

    base = {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "minOffsetsPerTrigger": "100"}
    assert parse_source_options(base).max_trigger_delay_ms == 15 * 60 * 1000  # Spark's default
    for text, ms in (("30s", 30_000), ("500ms", 500), ("2m", 120_000), ("1h", 3_600_000), ("250", 250)):
        assert parse_source_options({**base, "maxTriggerDelay": text}).max_trigger_delay_ms == ms
    with pytest.raises(KafkaOptionError, match="maxTriggerDelay"):
        parse_source_options({**base, "maxTriggerDelay": "soon"})
    # fewer than min rows: held until the delay since the last released batch has passed
    assert off.delay_batch(10, 100, now_ms=5_000, last_trigger_ms=0, max_trigger_delay_ms=10_000) is True
    assert off.delay_batch(10, 100, now_ms=10_000, last_trigger_ms=0, max_trigger_delay_ms=10_000) is False
    assert off.delay_batch(100, 100, now_ms=1, last_trigger_ms=0, max_trigger_delay_ms=10_000) is False


def test_read_committed_skips_aborted_transactions_and_control_batches():
    """Kafka's consumer rule, on batches as a broker with transactions returns them."""
    import struct as _st

    from protocol import records as R
    from pyspark_kafka_compatible.kafka_io import AbortedTransactionFilter

    def txn(base, pid, n=1):
        return R.build_batch([(1000 + base + i, None, b"v%d" % (base + i)) for i in range(n)],
                             base_offset=base, producer_id=pid, producer_epoch=0, base_sequence=0,
                             is_transactional=True)

    def marker(base, pid, kind):  # kind 0 ABORT, 1 COMMIT
        return R.build_batch([(2000 + base, _st.pack(">hh", 0, kind), _st.pack(">hi", 0, 0))],
                             base_offset=base, producer_id=pid, producer_epoch=0, is_transactional=True,
                             is_control=True)

    plain = R.build_batch([(1002, None, b"plain")], base_offset=2)
    data = b"".join([txn(0, 7, 2), plain, txn(3, 8), marker(4, 7, 0), marker(5, 8, 1), txn(6, 7), txn(7, 9)])
    f = AbortedTransactionFilter([(9, 7), (7, 0)])  # pid 7 aborted from offset 0, pid 9 from 7
    kept = [h.base_offset for pos, h in R.iter_batches(data) if not f.skip(data, pos, h)]
    # 0-1: aborted (pid 7); 2: not transactional; 3: committed (pid 8); 4-5 markers;
    # 6: pid 7's next transaction (its aborted one ended at the marker); 7: pid 9 aborted
    assert kept == [2, 3, 6]
    # without aborted transactions only the control batches go
    f = AbortedTransactionFilter([])
    assert [h.base_offset for pos, h in R.iter_batches(data) if not f.skip(data, pos, h)] == [0, 2, 3, 6, 7]
