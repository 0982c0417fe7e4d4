"""The PySpark Python Data Source ``kafka-compatible``: batch and streaming read, batch
and streaming write, with the options and schema of Spark's own Kafka source."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from typing import Iterator

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from pyspark_kafka_compatible import offsets as _off
from pyspark_kafka_compatible.options import (
    EARLIEST,
    LATEST,
    KafkaSourceError,
    SinkOptions,
    SourceOptions,
    parse_sink_options,
    parse_source_options,
)

try:  # PySpark >= 4.2
    from pyspark.sql.streaming.datasource import (
        ReadAllAvailable,
        ReadMaxRows,
        ReadMinRows,
        SupportsTriggerAvailableNow,
    )
except ImportError:  # pragma: no cover
    ReadAllAvailable = ReadMaxRows = ReadMinRows = None

    class SupportsTriggerAvailableNow:  # type: ignore[no-redef]
        pass


HEADERS_TYPE = ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())]))


def kafka_schema(include_headers: bool) -> StructType:
    """Spark's Kafka source schema."""
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


class KafkaCompatibleDataSource(DataSource):
    """``spark.read.format("kafka-compatible")`` - Spark's Kafka source options, read
    through the Kafka protocol by Python tasks (no JVM connector)."""

    @classmethod
    def name(cls) -> str:
        return "kafka-compatible"

    def _include_headers(self) -> bool:
        v = {k.lower(): v for k, v in self.options.items()}.get("includeheaders", "false")
        return str(v).strip().lower() == "true"

    def schema(self) -> StructType:
        return kafka_schema(self._include_headers())

    def reader(self, schema: StructType) -> "KafkaBatchReader":
        opts = parse_source_options(self.options, streaming=False)
        # PySpark refuses a reader that implements pushFilters unless
        # spark.sql.python.filterPushdown.enabled is true: opt in per read
        return (KafkaPushdownBatchReader if opts.filter_pushdown else KafkaBatchReader)(opts)

    def streamReader(self, schema: StructType) -> "KafkaStreamReader":
        return KafkaStreamReader(parse_source_options(self.options, streaming=True))

    def writer(self, schema: StructType, overwrite: bool) -> "KafkaBatchWriter":
        if overwrite:
            raise KafkaSourceError("kafka-compatible: save mode Overwrite is not allowed; use "
                                   ".mode(\"append\") (records are appended to the topic)")
        return KafkaBatchWriter(parse_sink_options(self.options), schema)

    def streamWriter(self, schema: StructType, overwrite: bool) -> "KafkaStreamWriter":
        return KafkaStreamWriter(parse_sink_options(self.options), schema)


# --------------------------------------------------------------------------- reading


class KafkaRange(InputPartition):
    """Offsets [start, end) of one topic partition: one Spark task."""

    def __init__(self, topic: str, partition: int, start: int, end: int):
        super().__init__((topic, partition, start, end))
        self.topic, self.partition, self.start, self.end = topic, partition, start, end


def _driver_io(opts: SourceOptions):
    from pyspark_kafka_compatible.kafka_io import KafkaIO

    return KafkaIO(opts.bootstrap, opts.timeout_ms, 1 if opts.isolation_level == "read_committed" else 0)


def _read(opts: SourceOptions, part: KafkaRange) -> Iterator:
    from pyspark_kafka_compatible.kafka_io import read_range

    if not isinstance(part, KafkaRange):
        return  # PySpark plans one placeholder partition when partitions() is empty

    yield from read_range(opts.bootstrap, part.topic, part.partition, part.start, part.end,
                          include_headers=opts.include_headers,
                          fail_on_data_loss=opts.fail_on_data_loss, timeout_ms=opts.timeout_ms,
                          fetch_max_bytes=opts.fetch_max_bytes,
                          isolation=1 if opts.isolation_level == "read_committed" else 0)


def plan_batch(opts: SourceOptions, kio, only_partitions: set | None = None,
               min_timestamp: int | None = None) -> list[tuple[str, int, int, int]]:
    """Driver side: subscribed partitions, offsets resolved, ranges split.  Pushed
    filters: ``only_partitions`` drops other partitions; ``min_timestamp`` (timestamp >=)
    moves each start up to the first offset whose timestamp is >= it (ListOffsets: every
    record before it is older, whatever the timestamp type), or to the end if none."""
    leaders = kio.subscribed(opts.subscription)
    tps = sorted((t, p) for t, ps in leaders.items() for p in ps
                 if only_partitions is None or p in only_partitions)
    if not tps:
        return []

    def lo(req):
        return kio.list_offsets(req, leaders)

    start = _off.resolve(opts.starting, tps, lo, which="starting", strategy=opts.strategy)
    end = _off.resolve(opts.ending, tps, lo, which="ending")
    earliest = _off.resolve(_spec("earliest"), tps, lo, which="starting")
    latest = _off.resolve(_spec("latest"), tps, lo, which="ending")
    ranges = _off.plan_ranges(start, end, earliest, latest, fail_on_data_loss=opts.fail_on_data_loss)
    if min_timestamp is not None:
        by_ts = lo({tp: min_timestamp for tp in tps})
        pruned = []
        for t, p, s, e in ranges:
            off = by_ts[(t, p)][1]
            s = e if off is None or off < 0 else min(max(s, off), e)
            pruned.append((t, p, s, e))
        ranges = pruned
    return _off.split_ranges(ranges, opts.min_partitions)


def _spec(kind: str):
    from pyspark_kafka_compatible.options import OffsetSpec

    return OffsetSpec(kind)


class KafkaBatchReader(DataSourceReader):
    def __init__(self, opts: SourceOptions):
        self.opts = opts

    def partitions(self):
        with _driver_io(self.opts) as kio:
            ranges = plan_batch(self.opts, kio)
        return [KafkaRange(*r) for r in ranges]

    def read(self, partition: KafkaRange):
        return _read(self.opts, partition)


def _epoch_ms(v) -> int | None:
    import datetime as _dt

    if isinstance(v, _dt.datetime):
        return int(v.timestamp() * 1000)  # naive: local time, as PySpark hands timestamps
    return None


class KafkaPushdownBatchReader(KafkaBatchReader):
    """With ``filterPushdown=true`` (and spark.sql.python.filterPushdown.enabled):
    ``partition = n`` / ``partition IN (...)`` prune partitions and ``timestamp >= t`` /
    ``timestamp > t`` start each partition at ListOffsets(t).  Every filter is still
    handed back to Spark, which evaluates it on the rows: with CreateTime timestamps in
    any order the result is exact; an upper time bound never cuts the end offset."""

    def __init__(self, opts: SourceOptions):
        super().__init__(opts)
        self._partitions: set | None = None
        self._min_ts: int | None = None

    def pushFilters(self, filters):
        from pyspark.sql.datasource import EqualTo, GreaterThan, GreaterThanOrEqual, In

        for f in filters:
            attr = getattr(f, "attribute", None)
            if attr == ("partition",) and isinstance(f, (EqualTo, In)):
                vals = {f.value} if isinstance(f, EqualTo) else set(f.value)
                vals = {v for v in vals if isinstance(v, int)}
                self._partitions = vals if self._partitions is None else self._partitions & vals
            elif attr == ("timestamp",) and isinstance(f, (GreaterThan, GreaterThanOrEqual)):
                ms = _epoch_ms(f.value)
                if ms is not None:
                    ms = max(ms, 0)
                    self._min_ts = ms if self._min_ts is None else max(self._min_ts, ms)
            yield f

    def partitions(self):
        with _driver_io(self.opts) as kio:
            ranges = plan_batch(self.opts, kio, self._partitions, self._min_ts)
        return [KafkaRange(*r) for r in ranges]


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over Kafka offsets; offsets are Spark's ``{topic: {"p": offset}}``."""

    def __init__(self, opts: SourceOptions):
        self.opts = opts
        self._target: dict | None = None
        self._last_trigger_ms = 0  # when the last micro-batch was released (maxTriggerDelay)

    # state on the driver only; nothing here holds a socket between calls

    def _latest(self, kio, known: dict) -> dict:
        leaders = kio.subscribed(self.opts.subscription)
        tps = sorted((t, p) for t, ps in leaders.items() for p in ps)
        latest = kio.list_offsets({tp: LATEST for tp in tps}, leaders)
        out = {}
        for tp in tps:
            err, off, _ = latest[tp]
            if err:
                raise KafkaSourceError(f"kafka-compatible: latest offset of {tp[0]}-{tp[1]}: "
                                       f"{_off.error_name(err)}")
            out[tp] = off
        new = [tp for tp in tps if tp not in known]
        if new:  # new partitions start at their earliest offset (as Spark)
            first = kio.list_offsets({tp: EARLIEST for tp in new}, leaders)
            for tp in new:
                known[tp] = first[tp][1]
        return out

    def initialOffset(self) -> dict:
        with _driver_io(self.opts) as kio:
            leaders = kio.subscribed(self.opts.subscription)
            tps = sorted((t, p) for t, ps in leaders.items() for p in ps)

            def lo(req):
                return kio.list_offsets(req, leaders)

            start = _off.resolve(self.opts.starting, tps, lo, which="starting", strategy=self.opts.strategy)
        return _off.to_spark_json(start)

    def prepareForTriggerAvailableNow(self) -> None:
        with _driver_io(self.opts) as kio:
            self._target = self._latest(kio, {})

    def getDefaultReadLimit(self):
        if self.opts.max_offsets_per_trigger and ReadMaxRows is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger and ReadMinRows is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable() if ReadAllAvailable is not None else None

    def latestOffset(self, start: dict | None = None, limit=None) -> dict:
        begin = _off.from_spark_json(start or {})
        with _driver_io(self.opts) as kio:
            latest = self._latest(kio, begin)
        if self._target is not None:
            latest = {tp: min(off, self._target.get(tp, begin.get(tp, off))) for tp, off in latest.items()}
        if ReadMaxRows is not None and isinstance(limit, ReadMaxRows):
            latest = _off.rate_limit(begin, latest, limit.max_rows)
        elif ReadMinRows is not None and isinstance(limit, ReadMinRows) and self._target is None:
            available = sum(max(latest[tp] - begin.get(tp, latest[tp]), 0) for tp in latest)
            now_ms = int(time.time() * 1000)
            if _off.delay_batch(available, limit.min_rows, now_ms, self._last_trigger_ms,
                                self.opts.max_trigger_delay_ms):
                latest = {tp: begin.get(tp, off) for tp, off in latest.items()}
            else:
                self._last_trigger_ms = now_ms
        for tp, off in begin.items():  # vanished partitions keep their offset
            latest.setdefault(tp, off)
        return _off.to_spark_json(latest)

    def partitions(self, start: dict, end: dict):
        s, e = _off.from_spark_json(start), _off.from_spark_json(end)
        with _driver_io(self.opts) as kio:
            tps = sorted(tp for tp in e if e[tp] > s.get(tp, 0) or tp not in s)
            if not tps:
                return []
            leaders = kio.leaders(sorted({t for t, _ in tps}))
            first = kio.list_offsets({tp: EARLIEST for tp in tps}, leaders)
        ranges = []
        for tp in tps:
            lo = first[tp][1]
            b = s.get(tp, lo)
            if b < lo:
                if self.opts.fail_on_data_loss:
                    raise KafkaSourceError(
                        f"kafka-compatible: {tp[0]}-{tp[1]}: offsets {b} to {lo - 1} were deleted before "
                        f"they were read; set failOnDataLoss=false to skip them")
                b = lo
            if e[tp] < b:
                if self.opts.fail_on_data_loss:
                    raise KafkaSourceError(f"kafka-compatible: {tp[0]}-{tp[1]}: offset went back from {b} "
                                           f"to {e[tp]}; some data may have been missed")
                continue
            ranges.append((tp[0], tp[1], b, e[tp]))
        return [KafkaRange(*r) for r in _off.split_ranges(ranges, self.opts.min_partitions)]

    def read(self, partition: KafkaRange):
        return _read(self.opts, partition)

    def commit(self, end: dict) -> None:
        pass

    def stop(self) -> None:
        pass


# --------------------------------------------------------------------------- writing


@dataclass
class KafkaCommit(WriterCommitMessage):
    records: int


def _field_names(schema: StructType) -> set[str]:
    return {f.name for f in schema.fields}


def _check_sink_schema(opts: SinkOptions, schema: StructType) -> None:
    names = _field_names(schema)
    if "value" not in names:
        raise KafkaSourceError("kafka-compatible sink: required attribute 'value' not found")
    types = {f.name: f.dataType for f in schema.fields}
    for col in ("key", "value"):
        if col in types and not isinstance(types[col], (BinaryType, StringType)):
            raise KafkaSourceError(f"kafka-compatible sink: {col} attribute type must be a string or binary, "
                                   f"not {types[col].simpleString()}")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise KafkaSourceError("kafka-compatible sink: topic attribute type must be a string")
    if "partition" in types and not isinstance(types["partition"], IntegerType):
        raise KafkaSourceError("kafka-compatible sink: partition attribute type must be an int")
    if opts.topic is None and "topic" not in names:
        raise KafkaSourceError("kafka-compatible sink: topic option required when no 'topic' attribute "
                               "is present; use the topic option for setting a topic")


def _b(v):
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode("utf-8")
    return bytes(v)


def write_rows(opts: SinkOptions, rows) -> int:
    """Produce rows (value, key, headers, topic, partition) at least once; returns the count."""
    from protocol.records import build_batch

    from pyspark_kafka_compatible.kafka_io import KafkaIO, default_partition

    pending: dict[tuple[str, int], list] = {}
    sizes: dict[tuple[str, int], int] = {}
    n = 0
    rr = random.randrange(1 << 30)
    with KafkaIO(opts.bootstrap, opts.timeout_ms) as kio:
        leaders: dict[str, dict[int, int]] = {}

        def parts_of(topic: str) -> dict[int, int]:
            if topic not in leaders:
                leaders.update(kio.leaders([topic]))
            return leaders[topic]

        def flush(tp) -> None:
            recs = pending.pop(tp, None)
            sizes.pop(tp, None)
            if recs:
                batch = build_batch(recs)
                kio.produce(tp[0], tp[1], parts_of(tp[0])[tp[1]], batch, opts.acks, opts.timeout_ms)

        for row in rows:
            d = row.asDict() if hasattr(row, "asDict") else dict(row)
            topic = opts.topic or d.get("topic")
            if not topic:
                raise KafkaSourceError("kafka-compatible sink: a row has a null topic and no topic option is set")
            parts = parts_of(topic)
            key = _b(d.get("key"))
            value = _b(d.get("value"))
            part = d.get("partition")
            if part is None:
                if key is not None:
                    part = default_partition(key, len(parts))
                else:
                    rr += 1
                    part = sorted(parts)[rr % len(parts)]
            elif part not in parts:
                raise KafkaSourceError(f"kafka-compatible sink: partition {part} of topic {topic!r} does not exist")
            headers = []
            if opts.include_headers and d.get("headers"):
                for h in d["headers"]:
                    hd = h.asDict() if hasattr(h, "asDict") else dict(h)
                    headers.append((hd["key"], _b(hd.get("value"))))
            tp = (topic, part)
            pending.setdefault(tp, []).append((int(time.time() * 1000), key, value, headers))
            sizes[tp] = sizes.get(tp, 0) + len(value or b"") + len(key or b"") + 32
            n += 1
            if sizes[tp] >= opts.batch_size or len(pending[tp]) >= 10_000:
                flush(tp)
        for tp in list(pending):
            flush(tp)
    return n


class KafkaBatchWriter(DataSourceWriter):
    def __init__(self, opts: SinkOptions, schema: StructType):
        _check_sink_schema(opts, schema)
        self.opts = opts

    def write(self, iterator) -> KafkaCommit:
        return KafkaCommit(write_rows(self.opts, iterator))


class KafkaStreamWriter(DataSourceStreamWriter):
    def __init__(self, opts: SinkOptions, schema: StructType):
        _check_sink_schema(opts, schema)
        self.opts = opts

    def write(self, iterator) -> KafkaCommit:
        return KafkaCommit(write_rows(self.opts, iterator))

    def commit(self, messages, batchId) -> None:
        pass

    def abort(self, messages, batchId) -> None:
        pass
