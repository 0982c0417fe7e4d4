"""The example pipeline (pipeline/) against a live broker, in-process on the session's
``local[2]`` SparkSession (the ``spark`` fixture of test_spark_source).

Records are produced with kafka-python to a LogAppendTime topic and read back with it:
the broker's append stamps are only known from there, so the expected per-key latencies
(LogAppendTime - created_ms header) are computed from the consumed records, and numpy's
(linear) percentiles are the oracle for Spark's exact ``percentile``.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pyarrow.parquet as pq
import pytest

from pipeline import PipelineError
from pipeline import generate as gen
from pipeline import latency_report as lr
from tests.integration import helpers
from tests.integration.helpers import LOG_APPEND_TIME, Rec, now_ms
from tests.integration.test_spark_source import spark  # noqa: F401  (session fixture)


def _records(prefix: str, n: int, rng: np.random.Generator) -> list[Rec]:
    out = []
    for i in range(n):
        key = None if i % 11 == 10 else f"{prefix}-{i % 3}".encode()
        headers = [("other", b"x")]
        if i % 9 == 4:
            pass  # no created_ms header: counted as missing
        elif i % 13 == 6:
            headers.append(("created_ms", b"not-a-number"))  # invalid: counted as missing
        else:
            headers.append(("created_ms", str(now_ms() - int(rng.integers(0, 5000))).encode()))
        out.append(Rec(key, f"v{i}".encode(), None, headers))
    return out


def _consume_all(bootstrap, topic, parts: dict[int, int]):
    got = []
    for p, n in parts.items():
        got += [(p, g) for g in helpers.consume_kp(bootstrap, topic, n, partition=p)]
    return got


def _expected(consumed):
    by_key: dict = {}
    for _, g in consumed:
        k = None if g.key is None else g.key.decode()
        hv = dict(g.headers).get("created_ms")
        created = int(hv) if hv is not None and hv.isdigit() else None
        d = by_key.setdefault(k, {"records": 0, "lat": []})
        d["records"] += 1
        if created is not None:
            d["lat"].append(g.timestamp - created)
    return by_key


def test_latency_report_window_parquet_and_output_topic(spark, broker, new_topic, tmp_path):  # noqa: F811
    bs = broker.bootstrap
    t = new_topic({"message.timestamp.type": "LogAppendTime"}, partitions=2)
    rng = np.random.default_rng(7)
    # old records: before the window
    old = _records("old", 20, rng)
    helpers.produce_kp(bs, t, old[:10], partition=0)
    helpers.produce_kp(bs, t, old[10:], partition=1)
    old_got = _consume_all(bs, t, {0: 10, 1: 10})
    assert all(g.timestamp_type == LOG_APPEND_TIME for _, g in old_got)
    time.sleep(0.05)
    new = _records("k", 60, rng)
    helpers.produce_kp(bs, t, new[:35], partition=0)
    helpers.produce_kp(bs, t, new[35:], partition=1)
    got = _consume_all(bs, t, {0: 45, 1: 30})
    new_got = [(p, g) for p, g in got if (p == 0 and g.offset >= 10) or (p == 1 and g.offset >= 10)]
    assert len(new_got) == 60
    start = min(g.timestamp for _, g in new_got)
    assert max(g.timestamp for _, g in old_got) < start  # the window cut is exact

    out_topic = t + "-latency"
    pq_path = str(tmp_path / "latency.parquet")
    report = lr.run(spark, bs, t, start_ms=start, output_topic=out_topic, parquet=pq_path)

    exp = _expected(new_got)
    assert report.records == 60
    n_lat = sum(len(d["lat"]) for d in exp.values())
    assert report.with_created == n_lat and report.missing_created == 60 - n_lat > 0
    all_lat = [x for d in exp.values() for x in d["lat"]]
    assert report.p95_ms == pytest.approx(np.percentile(all_lat, 95))

    table = pq.read_table(pq_path).to_pylist()
    assert {r["key"] for r in table} == set(exp)  # only keys of the window (no "old-*"), null key kept
    for r in table:
        e = exp[r["key"]]
        assert r["records"] == e["records"]
        assert r["with_created"] == len(e["lat"])
        assert r["missing_created"] == e["records"] - len(e["lat"])
        for q in (50, 95, 99):
            assert r[f"p{q}_ms"] == pytest.approx(np.percentile(e["lat"], q)), (r["key"], q)
        assert r["min_ms"] == min(e["lat"]) and r["max_ms"] == max(e["lat"])
        assert r["window_start_ms"] == start and r["window_end_ms"] is None

    # the output topic: one JSON record per key, keyed by the key
    out = helpers.consume_kp(bs, out_topic, len(table))
    assert len(out) == len(table)
    by_key = {(None if o.key is None else o.key.decode()): json.loads(o.value) for o in out}
    assert set(by_key) == set(exp)
    for r in table:
        v = by_key[r["key"]]
        assert v["records"] == r["records"] and v["missing_created"] == r["missing_created"]
        assert v["p99_ms"] == pytest.approx(r["p99_ms"])

    # an explicit [start, end) window that ends before the new records: only the old ones
    old_start = min(g.timestamp for _, g in old_got)
    early = lr.run(spark, bs, t, start_ms=old_start, end_ms=start)
    assert early.records == 20
    assert {r["key"] for r in early.per_key} == set(_expected(old_got))


def test_generator_and_errors(spark, broker, new_topic):  # noqa: F811
    bs = broker.bootstrap
    t = helpers.unique_topic("pipeline-gen")
    n = gen.generate(bs, t, rate=200, seconds=0.3, keys=3, missing_ratio=0.2, seed=3, quiet=True)
    assert n > 0
    consumed = _consume_all(bs, t, {p: helpers.end_offset(bs, t, p) for p in (0, 1)})
    assert len(consumed) == n
    assert all(g.timestamp_type == LOG_APPEND_TIME for _, g in consumed)
    rep = lr.run(spark, bs, t, start_ms=now_ms() - 60_000)
    assert rep.records == n
    assert rep.missing_created == sum(1 for _, g in consumed if "created_ms" not in dict(g.headers))
    assert {r["key"] for r in rep.per_key} == {"sensor-0", "sensor-1", "sensor-2"}
    # back-filled CreateTime records spread over 2 minutes: the last minute holds about half
    ct = helpers.unique_topic("pipeline-gen-ct")
    n2 = gen.generate(bs, ct, rate=5, minutes=2, timestamp_type="CreateTime", seed=4, quiet=True)
    half = lr.run(spark, bs, ct, start_ms=now_ms() - 60_000)
    assert n2 == 600 and 280 <= half.records <= 310

    with pytest.raises(PipelineError, match="topic 'no-such-topic' does not exist"):
        lr.run(spark, bs, "no-such-topic", start_ms=0)
    with pytest.raises(PipelineError, match="broker unreachable"):
        lr.run(spark, "127.0.0.1:1", t, start_ms=0)
    assert lr.main(["--bootstrap-server", bs, "--topic", "no-such-topic"]) == 2
