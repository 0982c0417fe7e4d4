"""Per-key latency report over the last N minutes of a topic.

    python -m pipeline.latency_report --bootstrap-server localhost:9092 --topic events \
        --minutes 15 --output-topic events-latency --parquet out/latency.parquet

1. Reads ``--topic`` through the ``kafka-compatible`` source from ``startingTimestamp`` =
   now - ``--minutes`` (or ``--start-ms``) to the latest offsets (or ``--end-ms``,
   exclusive): the broker's time index turns the timestamp into offsets (ListOffsets), and
   rows are also filtered on ``start <= timestamp < end`` so a CreateTime topic with
   out-of-order stamps is cut exactly.
2. Contract: the producer puts the record's creation time in the header ``created_ms``
   (epoch milliseconds, ASCII decimal digits).  latency_ms = the record's Kafka timestamp
   (the broker's LogAppendTime on a ``message.timestamp.type=LogAppendTime`` topic) minus
   ``created_ms``.  Records without the header, or with a value that is not an integer,
   are counted per key in ``missing_created`` and left out of the percentiles - never
   dropped silently.
3. Per key (the record key as UTF-8; null keys form their own group): ``records``,
   ``with_created``, ``missing_created``, ``p50_ms``/``p95_ms``/``p99_ms`` (exact
   percentiles, linear interpolation - numpy's default), ``min_ms``, ``max_ms``,
   ``mean_ms``, plus ``window_start_ms``/``window_end_ms``.
4. Writes that to Parquet (``--parquet``, overwritten) and to ``--output-topic`` (created
   if missing; one JSON value per key, keyed by the key) through the kafka-compatible
   writer, and prints a summary.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from dataclasses import dataclass, field

from pipeline import CREATED_HEADER, PipelineError, create_topic, topic_exists, topic_partitions

FMT = "kafka-compatible"


@dataclass
class Report:
    topic: str
    window_start_ms: int
    window_end_ms: int | None
    records: int = 0
    with_created: int = 0
    missing_created: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    p99_ms: float | None = None
    per_key: list[dict] = field(default_factory=list)

    def text(self) -> str:
        end = "latest" if self.window_end_ms is None else _iso(self.window_end_ms)
        lines = [f"topic {self.topic}: window {_iso(self.window_start_ms)} .. {end}",
                 f"records {self.records}, with {CREATED_HEADER} {self.with_created}, "
                 f"without {self.missing_created}; latency p50 {_ms(self.p50_ms)} "
                 f"p95 {_ms(self.p95_ms)} p99 {_ms(self.p99_ms)}",
                 f"{'key':<20} {'records':>8} {'missing':>8} {'p50_ms':>9} {'p95_ms':>9} {'p99_ms':>9}"]
        for r in self.per_key:
            key = "<null>" if r["key"] is None else r["key"]
            lines.append(f"{key:<20} {r['records']:>8} {r['missing_created']:>8} {_ms(r['p50_ms']):>9} "
                         f"{_ms(r['p95_ms']):>9} {_ms(r['p99_ms']):>9}")
        return "\n".join(lines)


def _iso(ms: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(ms / 1000)) + f".{ms % 1000:03d}Z"


def _ms(v) -> str:
    return "-" if v is None else f"{v:.1f}"


def read_window(spark, bootstrap: str, topic: str, start_ms: int, end_ms: int | None = None):
    """Records of ``topic`` with ``start_ms <= timestamp < end_ms`` (end None: up to latest)."""
    from pyspark.sql import functions as F

    r = (spark.read.format(FMT).option("kafka.bootstrap.servers", bootstrap)
         .option("subscribe", topic).option("includeHeaders", "true")
         .option("startingTimestamp", str(start_ms))
         # a partition with nothing at/after start contributes nothing (not an error)
         .option("startingOffsetsByTimestampStrategy", "latest"))
    if end_ms is not None:
        r = r.option("endingTimestamp", str(end_ms))
    df = r.load()
    ts = F.expr("unix_millis(timestamp)")
    df = df.where(ts >= F.lit(start_ms))
    if end_ms is not None:
        df = df.where(ts < F.lit(end_ms))
    return df


def with_latency(df, header: str = CREATED_HEADER):
    """Adds ``key_str``, ``ts_ms``, ``created_ms`` (null if absent/invalid), ``latency_ms``."""
    from pyspark.sql import functions as F

    # first header named `header`; try_element_at: no such header -> null (ANSI mode is on)
    created_bin = F.try_element_at(F.filter("headers", lambda h: h["key"] == F.lit(header)), F.lit(1))["value"]
    created = F.expr("try_cast(trim(cast(`__c` as string)) as bigint)")
    return (df.select(F.col("key").cast("string").alias("key_str"),
                      F.expr("unix_millis(timestamp)").alias("ts_ms"),
                      created_bin.alias("__c"))
              .withColumn("created_ms", created).drop("__c")
              .withColumn("latency_ms", F.col("ts_ms") - F.col("created_ms")))


def aggregate(df, start_ms: int, end_ms: int | None):
    from pyspark.sql import functions as F

    lat = F.col("latency_ms")
    return (df.groupBy(F.col("key_str").alias("key"))
              .agg(F.count(F.lit(1)).alias("records"),
                   F.count(lat).alias("with_created"),
                   F.sum(F.when(lat.isNull(), 1).otherwise(0)).cast("long").alias("missing_created"),
                   F.percentile(lat, 0.5).alias("p50_ms"),
                   F.percentile(lat, 0.95).alias("p95_ms"),
                   F.percentile(lat, 0.99).alias("p99_ms"),
                   F.min(lat).alias("min_ms"), F.max(lat).alias("max_ms"),
                   F.avg(lat).alias("mean_ms"))
              .withColumn("window_start_ms", F.lit(start_ms).cast("long"))
              .withColumn("window_end_ms", F.lit(end_ms).cast("long"))
              .orderBy(F.col("key").asc_nulls_first()))


def run(spark, bootstrap: str, topic: str, *, start_ms: int, end_ms: int | None = None,
        output_topic: str | None = None, parquet: str | None = None,
        header: str = CREATED_HEADER) -> Report:
    """The whole pipeline; returns the Report (also written to Parquet / the output topic)."""
    from pyspark.sql import functions as F

    topic_partitions(bootstrap, topic)  # clear error for an unknown topic / unreachable broker
    if output_topic and not topic_exists(bootstrap, output_topic):
        create_topic(bootstrap, output_topic, partitions=1)
    rows = with_latency(read_window(spark, bootstrap, topic, start_ms, end_ms), header).cache()
    try:
        result = aggregate(rows, start_ms, end_ms).cache()
        per_key = [r.asDict() for r in result.collect()]
        overall = rows.agg(F.count(F.lit(1)).alias("n"), F.count("latency_ms").alias("w"),
                           F.percentile("latency_ms", 0.5).alias("p50"),
                           F.percentile("latency_ms", 0.95).alias("p95"),
                           F.percentile("latency_ms", 0.99).alias("p99")).collect()[0]
        if parquet:
            result.coalesce(1).write.mode("overwrite").parquet(parquet)
        if output_topic:
            cols = [c for c in result.columns if c != "key"]
            (result.select(F.col("key"), F.to_json(F.struct(F.col("key"), *cols)).alias("value"))
                   .write.format(FMT).option("kafka.bootstrap.servers", bootstrap)
                   .option("topic", output_topic).mode("append").save())
        result.unpersist()
    finally:
        rows.unpersist()
    return Report(topic, start_ms, end_ms, records=overall["n"], with_created=overall["w"],
                  missing_created=overall["n"] - overall["w"], p50_ms=overall["p50"],
                  p95_ms=overall["p95"], p99_ms=overall["p99"], per_key=per_key)


def spark_session(app: str = "chronolog-latency-report"):
    """A local SparkSession whose Python workers use this interpreter (it has the extra)."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    s = (SparkSession.builder.master(os.environ.get("SPARK_MASTER", "local[2]")).appName(app)
         .config("spark.ui.enabled", "false")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.driver.host", os.environ.get("SPARK_LOCAL_IP", "127.0.0.1"))
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.session.timeZone", "UTC")
         .getOrCreate())
    s.sparkContext.setLogLevel("ERROR")
    return s


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.latency_report",
                                description="Per-key record counts and latency percentiles "
                                            "(Kafka timestamp - created_ms header) over the last N minutes.")
    p.add_argument("--bootstrap-server", default="localhost:9092")
    p.add_argument("--topic", required=True)
    w = p.add_mutually_exclusive_group()
    w.add_argument("--minutes", type=float, default=15, help="window: the last N minutes (default 15)")
    w.add_argument("--start-ms", type=int, help="window start, epoch ms (instead of --minutes)")
    p.add_argument("--end-ms", type=int, help="window end, epoch ms, exclusive (default: latest)")
    p.add_argument("--output-topic", help="write one JSON record per key here (created if missing)")
    p.add_argument("--parquet", help="write the per-key table here (overwritten)")
    p.add_argument("--header", default=CREATED_HEADER, help=f"creation-time header (default {CREATED_HEADER})")
    a = p.parse_args(argv)
    start = a.start_ms if a.start_ms is not None else int(time.time() * 1000) - int(a.minutes * 60_000)
    try:
        topic_partitions(a.bootstrap_server, a.topic)  # fail fast, before starting Spark
        spark = spark_session()
        report = run(spark, a.bootstrap_server, a.topic, start_ms=start, end_ms=a.end_ms,
                     output_topic=a.output_topic, parquet=a.parquet, header=a.header)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report.text())
    if a.parquet:
        print(f"parquet: {a.parquet}")
    if a.output_topic:
        print(f"output topic: {a.output_topic} ({len(report.per_key)} records)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
