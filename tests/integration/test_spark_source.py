"""The kafka-compatible PySpark data source against a live broker, through one
session-scoped ``local[2]`` SparkSession.

Spark needs Java (17 is what these were measured with).  Without it the session fixture
fails - these tests are never skipped.  The data source is found by PySpark's own
lookup of installed ``pyspark_*`` modules: nothing here registers it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration import helpers
from tests.integration.helpers import CREATE_TIME, LOG_APPEND_TIME, make_records, now_ms, produce_kp

FMT = "kafka-compatible"


def _java_home() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return home
    java = shutil.which("java")
    if java is None:
        for cand in sorted(Path("/usr/lib/jvm").glob("*17*")) + sorted(Path("/usr/lib/jvm").glob("*")):
            if (cand / "bin" / "java").exists():
                return str(cand)
        pytest.fail("Spark tests need Java (17+): no JAVA_HOME and no java on PATH; install it, "
                    "e.g. apt-get install -y openjdk-17-jre-headless", pytrace=False)
    return str(Path(os.path.realpath(java)).parent.parent)


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    os.environ["JAVA_HOME"] = _java_home()
    out = subprocess.run([os.path.join(os.environ["JAVA_HOME"], "bin", "java"), "-version"],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"java -version failed: {out.stderr}", pytrace=False)
    # executors' Python workers must be this interpreter (the one with the extra installed)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master("local[2]").appName("chronolog-spark-tests")
         .config("spark.ui.enabled", "false")
         .config("spark.driver.host", "127.0.0.1")
         .config("spark.driver.bindAddress", "127.0.0.1")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .config("spark.sql.streaming.forceDeleteTempCheckpointLocation", "true")
         .config("spark.local.dir", str(tmp_path_factory.mktemp("spark-local")))
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    yield s
    s.stop()


def read(spark, bootstrap, **options):
    r = spark.read.format(FMT).option("kafka.bootstrap.servers", bootstrap)
    for k, v in options.items():
        r = r.option(k, v)
    return r.load()


def rows_of(df):
    """Rows as plain tuples, timestamp in epoch ms, sorted by (topic, partition, offset)."""
    from pyspark.sql import functions as F

    cols = ["topic", "partition", "offset", "key", "value", F.expr("unix_millis(timestamp)").alias("ts"),
            "timestampType"]
    if "headers" in df.columns:
        cols.append("headers")
    out = []
    for r in df.select(*cols).collect():
        t = tuple(r)
        if "headers" in df.columns:
            t = t[:-1] + ([(h["key"], bytes(h["value"]) if h["value"] is not None else None)
                           for h in (r["headers"] or [])],)
        out.append(tuple(bytes(x) if isinstance(x, (bytearray, memoryview)) else x for x in t))
    return sorted(out, key=lambda x: (x[0], x[1], x[2]))


def expected_rows(topic, partition, recs, produced, ts_type, first_offset=0):
    out = []
    for r, p in zip(recs, produced):
        ts = r.timestamp if ts_type == CREATE_TIME else p.timestamp
        out.append((topic, partition, p.offset, r.key, r.value, ts, ts_type, list(r.headers)))
    return out


def spark_error(fn) -> str:
    with pytest.raises(Exception) as ei:
        fn()
    return str(ei.value)


# --------------------------------------------------------------------------- batch read


def test_schema_is_spark_kafka_schema(spark, broker, new_topic):
    t = new_topic()
    df = read(spark, broker.bootstrap, subscribe=t)
    assert [(f.name, f.dataType.simpleString()) for f in df.schema.fields] == [
        ("key", "binary"), ("value", "binary"), ("topic", "string"), ("partition", "int"),
        ("offset", "bigint"), ("timestamp", "timestamp"), ("timestampType", "int")]
    dfh = read(spark, broker.bootstrap, subscribe=t, includeHeaders="true")
    assert dfh.schema.fields[-1].name == "headers"
    assert dfh.schema.fields[-1].dataType.simpleString() == "array<struct<key:string,value:binary>>"
    assert dfh.count() == 0  # empty topic: empty result, no error


def test_earliest_to_latest_read_equals_produced(spark, broker, new_topic):
    ct = new_topic(partitions=2, suffix="-ct")
    lat = new_topic({"message.timestamp.type": "LogAppendTime"}, suffix="-lat")
    base = now_ms() - 60_000
    r0 = make_records(7, base, step=1000, prefix="p0")
    r1 = make_records(5, base + 500, step=1000, prefix="p1")
    r1[2].key = None  # null key
    rl = make_records(4, base, step=1000, prefix="lat", headers=False)
    p0 = produce_kp(broker.bootstrap, ct, r0, partition=0)
    p1 = produce_kp(broker.bootstrap, ct, r1, partition=1)
    pl = produce_kp(broker.bootstrap, lat, rl, partition=0)
    expected = (expected_rows(ct, 0, r0, p0, CREATE_TIME) + expected_rows(ct, 1, r1, p1, CREATE_TIME)
                + expected_rows(lat, 0, rl, pl, LOG_APPEND_TIME))
    expected.sort(key=lambda x: (x[0], x[1], x[2]))
    got = rows_of(read(spark, broker.bootstrap, subscribe=f"{ct},{lat}", includeHeaders="true",
                       startingOffsets="earliest", endingOffsets="latest"))
    assert got == expected
    # the LogAppendTime stamps are the broker's, and what a stock consumer sees
    consumed = helpers.consume_kp(broker.bootstrap, lat, 4)
    assert [g.timestamp for g in consumed] == [r[5] for r in got if r[0] == lat]
    # subscribePattern and assign pick the same data
    pat = rows_of(read(spark, broker.bootstrap, subscribePattern=ct.rsplit("-", 1)[0] + "-[0-9a-f]{6}",
                       includeHeaders="true"))
    assert pat == [r for r in expected if r[0] == ct]
    assigned = rows_of(read(spark, broker.bootstrap, assign=f'{{"{ct}":[1]}}'))
    assert [r[:7] for r in assigned] == [r[:7] for r in expected if r[0] == ct and r[1] == 1]


@pytest.mark.parametrize("codec", ["gzip", "lz4", "zstd"])
def test_compressed_batches(spark, broker, new_topic, codec):
    t = new_topic(suffix=codec)
    recs = make_records(30, now_ms() - 10_000, prefix=codec)
    produced = produce_kp(broker.bootstrap, t, recs, compression_type=codec, linger_ms=50)
    got = rows_of(read(spark, broker.bootstrap, subscribe=t, includeHeaders="true",
                       startingOffsets=f'{{"{t}":{{"0":5}}}}'))
    assert got == expected_rows(t, 0, recs, produced, CREATE_TIME)[5:]


def test_min_partitions_splits_ranges(spark, broker, new_topic):
    t = new_topic()
    produce_kp(broker.bootstrap, t, make_records(40, None, headers=False))
    df = read(spark, broker.bootstrap, subscribe=t, minPartitions="4")
    assert df.rdd.getNumPartitions() == 4
    assert [r.offset for r in df.select("offset").collect()] == list(range(40))


def test_json_offsets(spark, broker, new_topic):
    t = new_topic(partitions=2)
    produce_kp(broker.bootstrap, t, make_records(10, None, prefix="a"), partition=0)
    produce_kp(broker.bootstrap, t, make_records(6, None, prefix="b"), partition=1)
    df = read(spark, broker.bootstrap, subscribe=t,
              startingOffsets=f'{{"{t}":{{"0":3,"1":-2}}}}', endingOffsets=f'{{"{t}":{{"0":7,"1":-1}}}}')
    got = sorted((r.partition, r.offset, bytes(r.value)) for r in df.collect())
    assert got == ([(0, i, b"a-value-%d" % i) for i in range(3, 7)]
                   + [(1, i, b"b-value-%d" % i) for i in range(6)])
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=t,
                                   startingOffsets=f'{{"{t}":{{"0":3}}}}').count())
    assert f"missing {t}-1" in msg
    # read_committed: ListOffsets and Fetch with isolation level 1 (no transactions here:
    # the last stable offset is the high watermark, every record is committed)
    rc = read(spark, broker.bootstrap, subscribe=t, **{"kafka.isolation.level": "read_committed"})
    assert sorted((r.partition, r.offset) for r in rc.collect()) == (
        [(0, i) for i in range(10)] + [(1, i) for i in range(6)])


def test_time_window_reads(spark, broker, new_topic):
    t = new_topic(partitions=2)
    base = now_ms() - 100_000
    ts0 = [base + i * 1000 for i in range(10)]  # partition 0: base .. base+9s
    ts1 = [base + 300 + i * 2000 for i in range(5)]  # partition 1: base+0.3s .. base+8.3s
    produce_kp(broker.bootstrap, t, [helpers.Rec(b"k", b"v%d" % i, ts) for i, ts in enumerate(ts0)], partition=0)
    produce_kp(broker.bootstrap, t, [helpers.Rec(b"k", b"w%d" % i, ts) for i, ts in enumerate(ts1)], partition=1)

    def window(lo, hi):  # oracle: records with lo <= ts < hi (timestamps ascend here)
        return sorted([(0, i, ts) for i, ts in enumerate(ts0) if lo <= ts < hi]
                      + [(1, i, ts) for i, ts in enumerate(ts1) if lo <= ts < hi])

    def got(df):
        return sorted((r[1], r[2], r[5]) for r in rows_of(df))

    lo, hi = base + 2500, base + 6300
    assert got(read(spark, broker.bootstrap, subscribe=t, startingTimestamp=str(lo),
                    endingTimestamp=str(hi))) == window(lo, hi)
    # per partition; the timestamp option wins over offsets
    df = read(spark, broker.bootstrap, subscribe=t, startingOffsets="earliest",
              startingOffsetsByTimestamp=f'{{"{t}":{{"0":{base + 4000},"1":{base}}}}}',
              endingOffsetsByTimestamp=f'{{"{t}":{{"0":{base + 7000},"1":{base + 4300}}}}}')
    assert got(df) == sorted([(0, i, ts0[i]) for i in (4, 5, 6)] + [(1, i, ts1[i]) for i in (0, 1)])
    # no record at or after the start: strategy error names topic, partition and timestamp
    late = base + 9_500
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=t, startingTimestamp=str(late)).count())
    assert f"no record with a timestamp >= {late} in topic {t} partition" in msg
    # strategy latest: those partitions start (and end) at latest
    assert got(read(spark, broker.bootstrap, subscribe=t, startingTimestamp=str(late),
                    startingOffsetsByTimestampStrategy="latest")) == []
    assert got(read(spark, broker.bootstrap, subscribe=t, startingTimestamp=str(base + 8100),
                    startingOffsetsByTimestampStrategy="latest")) == window(base + 8100, base + 10**6)


def test_filter_pushdown(spark, broker, new_topic):
    from pyspark.sql import functions as F

    t = new_topic(partitions=2)
    base = now_ms() - 100_000
    ts0 = [base + 5000, base + 1000, base + 7000, base + 2000, base + 9000]  # CreateTime, out of order
    ts1 = [base + 100, base + 200, base + 300]
    produce_kp(broker.bootstrap, t, [helpers.Rec(b"k", b"a%d" % i, ts) for i, ts in enumerate(ts0)], partition=0)
    produce_kp(broker.bootstrap, t, [helpers.Rec(b"k", b"b%d" % i, ts) for i, ts in enumerate(ts1)], partition=1)
    import datetime as dt

    cut = dt.datetime.fromtimestamp((base + 4000) / 1000, tz=dt.timezone.utc)
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=t, filterPushdown="true").count())
    assert "spark.sql.python.filterPushdown.enabled" in msg
    spark.conf.set("spark.sql.python.filterPushdown.enabled", "true")
    try:
        df = read(spark, broker.bootstrap, subscribe=t, filterPushdown="true")
        by_time = df.filter(F.col("timestamp") >= F.lit(cut))
        assert by_time.rdd.getNumPartitions() == 1  # partition 1 holds nothing that late
        assert sorted((r[1], r[2], r[5]) for r in rows_of(by_time)) == [
            (0, i, ts) for i, ts in enumerate(ts0) if ts >= base + 4000]
        upper = df.filter(F.col("timestamp") < F.lit(cut))  # filters rows, never cuts the end
        assert sorted((r[1], r[2]) for r in rows_of(upper)) == [(0, 1), (0, 3), (1, 0), (1, 1), (1, 2)]
        one = df.filter("partition = 1")
        assert one.rdd.getNumPartitions() == 1
        assert [r.offset for r in one.collect()] == [0, 1, 2]
        assert df.filter("partition in (0, 7)").count() == 5
    finally:
        spark.conf.unset("spark.sql.python.filterPushdown.enabled")


# --------------------------------------------------------------------------- bad input


def test_bad_input_errors(spark, broker, new_topic):
    missing = helpers.unique_topic("no-such-topic")
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=missing).count())
    assert f"topic {missing!r} does not exist" in msg
    msg = spark_error(lambda: read(spark, "127.0.0.1:1", subscribe="t").count())
    assert "broker unreachable" in msg and "127.0.0.1:1" in msg
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe="t", startingOffsets="latest").count())
    assert "not allowed for a batch read" in msg
    # records deleted below the requested start
    t = new_topic()
    produce_kp(broker.bootstrap, t, make_records(10, None, headers=False))
    from kafka import TopicPartition

    admin = helpers.kp_admin(broker.bootstrap)
    try:
        admin.delete_records({TopicPartition(t, 0): 4})
    finally:
        admin.close()
    start = f'{{"{t}":{{"0":1}}}}'
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=t, startingOffsets=start).count())
    assert f"{t}-0: starting offset 1 is before the log start offset 4" in msg
    df = read(spark, broker.bootstrap, subscribe=t, startingOffsets=start, failOnDataLoss="false")
    assert [r.offset for r in df.select("offset").collect()] == list(range(4, 10))
    msg = spark_error(lambda: read(spark, broker.bootstrap, subscribe=t,
                                   endingOffsets=f'{{"{t}":{{"0":50}}}}').count())
    assert "ending offset 50 is beyond the latest offset 10" in msg


# --------------------------------------------------------------------------- write


def test_batch_write_read_back_with_a_stock_client(spark, broker, new_topic):
    from pyspark.sql.types import (ArrayType, BinaryType, IntegerType, StringType, StructField,
                                   StructType)

    t = new_topic(partitions=2)
    schema = StructType([
        StructField("key", StringType()), StructField("value", BinaryType()),
        StructField("partition", IntegerType()),
        StructField("headers", ArrayType(StructType([StructField("key", StringType()),
                                                     StructField("value", BinaryType())])))])
    data = [(f"k{i}", b"value-%d" % i, i % 2, [("h", b"%d" % i)]) for i in range(20)]
    df = spark.createDataFrame(data, schema).coalesce(1)
    before = now_ms()
    (df.write.format(FMT).option("kafka.bootstrap.servers", broker.bootstrap).option("topic", t)
     .option("includeHeaders", "true").mode("append").save())
    for part in (0, 1):
        got = helpers.consume_kp(broker.bootstrap, t, 10, partition=part)
        assert [(g.key, g.value, g.headers) for g in got] == [
            (b"k%d" % i, b"value-%d" % i, [("h", b"%d" % i)]) for i in range(part, 20, 2)]
        assert all(g.timestamp >= before - 1000 and g.timestamp_type == CREATE_TIME for g in got)
    # a topic column instead of the option; keys pick partitions as Kafka's default partitioner
    t2 = new_topic(partitions=3, suffix="-col")
    rows = [(t2, f"key-{i % 4}", f"v{i}") for i in range(12)]
    spark.createDataFrame(rows, ["topic", "key", "value"]).write.format(FMT) \
        .option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save()
    back = rows_of(read(spark, broker.bootstrap, subscribe=t2))
    assert sorted(r[4] for r in back) == sorted(f"v{i}".encode() for i in range(12))
    from pyspark_kafka_compatible.kafka_io import default_partition

    assert all(r[1] == default_partition(r[3], 3) for r in back)
    msg = spark_error(lambda: spark.createDataFrame([("x",)], ["value"]).write.format(FMT)
                      .option("kafka.bootstrap.servers", broker.bootstrap).mode("append").save())
    assert "topic option required" in msg


# --------------------------------------------------------------------------- streaming


def _run_available_now(spark, bootstrap, topic, out_dir, ckpt, **opts):
    r = (spark.readStream.format(FMT).option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic))
    for k, v in opts.items():
        r = r.option(k, v)
    q = (r.load().selectExpr("partition", "offset", "value")
         .writeStream.format("parquet").option("path", str(out_dir))
         .option("checkpointLocation", str(ckpt)).trigger(availableNow=True).start())
    assert q.awaitTermination(90), "availableNow query did not finish"
    if q.exception():
        raise q.exception()
    return [p for p in q.recentProgress if p["numInputRows"] > 0]


def test_streaming_available_now_and_restart_from_checkpoint(spark, broker, new_topic, tmp_path):
    t = new_topic(partitions=2)
    produce_kp(broker.bootstrap, t, make_records(6, None, prefix="a", headers=False), partition=0)
    produce_kp(broker.bootstrap, t, make_records(4, None, prefix="b", headers=False), partition=1)
    out, ckpt = tmp_path / "out", tmp_path / "ckpt"
    progress = _run_available_now(spark, broker.bootstrap, t, out, ckpt,
                                  startingOffsets="earliest", maxOffsetsPerTrigger="4")
    # Spark's proration of maxOffsetsPerTrigger over the backlogs (6, 4): floor(4*6/10),
    # floor(4*4/10) = 2+1, then (4, 3) -> 2+1, then (2, 2) -> 2+2
    assert [p["numInputRows"] for p in progress] == [3, 3, 4]
    # Spark's Kafka offset JSON shape in the checkpoint
    assert json.loads(progress[-1]["sources"][0]["endOffset"]) == {t: {"0": 6, "1": 4}}
    last = max((ckpt / "offsets").glob("[0-9]*"), key=lambda f: int(f.name))
    assert json.loads(last.read_text().splitlines()[-1]) == {t: {"0": 6, "1": 4}}

    def seen():
        return sorted((r.partition, r.offset) for r in spark.read.parquet(str(out)).collect())

    assert seen() == [(0, i) for i in range(6)] + [(1, i) for i in range(4)]
    produce_kp(broker.bootstrap, t, make_records(3, None, prefix="c", headers=False), partition=1)
    progress = _run_available_now(spark, broker.bootstrap, t, out, ckpt,
                                  startingOffsets="earliest", maxOffsetsPerTrigger="4")
    assert [p["numInputRows"] for p in progress] == [3]
    assert seen() == [(0, i) for i in range(6)] + [(1, i) for i in range(7)]


def test_stream_write(spark, broker, new_topic, tmp_path):
    src = new_topic(suffix="-src")
    dst = new_topic(suffix="-dst")
    produce_kp(broker.bootstrap, src, make_records(8, None, prefix="s", headers=False))
    q = (spark.readStream.format(FMT).option("kafka.bootstrap.servers", broker.bootstrap)
         .option("subscribe", src).option("startingOffsets", "earliest").load()
         .selectExpr("key", "upper(cast(value as string)) as value")
         .writeStream.format(FMT).option("kafka.bootstrap.servers", broker.bootstrap).option("topic", dst)
         .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(availableNow=True).start())
    assert q.awaitTermination(90)
    assert q.exception() is None
    got = helpers.consume_kp(broker.bootstrap, dst, 8)
    assert [(g.key, g.value) for g in got] == [(b"s-key-%d" % i, b"S-VALUE-%d" % i) for i in range(8)]


def test_read_committed_against_a_real_transactional_producer(spark, broker, new_topic):
    """kafka.isolation.level=read_committed: aborted records are left out and the read
    ends at the last stable offset (an open transaction's records are not read);
    read_uncommitted reads everything up to the high watermark."""
    from confluent_kafka import Producer

    t = new_topic(partitions=2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": t + "-tx"})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(6):
        p.produce(t, value=b"c%d" % i, partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(4):
        p.produce(t, value=b"a%d" % i, partition=i % 2)
    p.flush(10)  # written, then aborted (abort_transaction purges what is still queued)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce(t, value=b"c-late", partition=0)
    p.commit_transaction(30)
    p.begin_transaction()
    p.produce(t, value=b"open", partition=1)
    p.flush(10)
    rc = read(spark, broker.bootstrap, subscribe=t, **{"kafka.isolation.level": "read_committed"})
    assert sorted(bytes(r.value) for r in rc.collect()) == sorted([b"c%d" % i for i in range(6)] + [b"c-late"])
    ru = read(spark, broker.bootstrap, subscribe=t)
    assert sorted(bytes(r.value) for r in ru.collect()) == sorted(
        [b"c%d" % i for i in range(6)] + [b"a%d" % i for i in range(4)] + [b"c-late", b"open"])
    p.abort_transaction(30)
