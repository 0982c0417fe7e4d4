"""Option parsing for the ``kafka-compatible`` source and sink (pure: no Spark, no sockets).

Option names and rules follow Spark's own Kafka source (``KafkaSourceProvider``);
PySpark hands the options to a Python data source with lower-cased keys, so every
lookup here is case-insensitive.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

EARLIEST = -2
LATEST = -1


class KafkaSourceError(Exception):
    """Every error of the source and sink: one line naming what went wrong (topic,
    partition, offset, timestamp, broker address)."""


class KafkaOptionError(KafkaSourceError, ValueError):
    """An invalid or missing option (raised on the driver before any job runs)."""


# --------------------------------------------------------------------------- offset specs


@dataclass(frozen=True)
class OffsetSpec:
    """Where a read starts or ends.

    kind: "earliest" | "latest" | "offsets" (``offsets``: {topic: {partition: offset}},
    -2 earliest, -1 latest) | "timestamp" (``timestamp`` for every partition) |
    "by_timestamp" (``timestamps``: {topic: {partition: ms}}).
    """

    kind: str
    offsets: dict = field(default_factory=dict)
    timestamp: int | None = None
    timestamps: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Subscription:
    kind: str  # "subscribe" | "pattern" | "assign"
    topics: tuple = ()  # subscribe
    pattern: str = ""  # pattern
    assign: dict = field(default_factory=dict)  # {topic: [partitions]}


@dataclass(frozen=True)
class SourceOptions:
    bootstrap: str
    subscription: Subscription
    starting: OffsetSpec
    ending: OffsetSpec
    strategy: str = "error"  # startingOffsetsByTimestampStrategy
    min_partitions: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_ms: int = 15 * 60 * 1000  # maxTriggerDelay (with minOffsetsPerTrigger)
    isolation_level: str = "read_uncommitted"
    timeout_ms: int = 30_000
    fetch_max_bytes: int = 8 * 1024 * 1024
    filter_pushdown: bool = False


@dataclass(frozen=True)
class SinkOptions:
    bootstrap: str
    topic: str | None
    include_headers: bool = False
    timeout_ms: int = 30_000
    acks: int = -1
    batch_size: int = 1 << 20


def _lower(options: Mapping[str, Any]) -> dict[str, str]:
    return {str(k).lower(): ("" if v is None else str(v)) for k, v in dict(options).items()}


def _bool(opts: dict, name: str, default: bool) -> bool:
    v = opts.get(name.lower())
    if v is None:
        return default
    s = v.strip().lower()
    if s in ("true", "1", "yes"):
        return True
    if s in ("false", "0", "no"):
        return False
    raise KafkaOptionError(f"option {name}: expected true or false, got {v!r}")


def _int(opts: dict, name: str, *, minimum: int | None = None) -> int | None:
    v = opts.get(name.lower())
    if v is None or v.strip() == "":
        return None
    try:
        n = int(v.strip())
    except ValueError:
        raise KafkaOptionError(f"option {name}: expected an integer, got {v!r}") from None
    if minimum is not None and n < minimum:
        raise KafkaOptionError(f"option {name}: must be >= {minimum}, got {n}")
    return n


_TIME_UNITS_MS = {"ms": 1, "s": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "d": 86_400_000}


def _duration_ms(opts: dict, name: str, default_ms: int) -> int:
    """A Spark time string (``15m``, ``30s``, ``500ms``, ``2h``, ``1d``; a bare number is
    milliseconds, as JavaUtils.timeStringAsMs reads it)."""
    raw = opts.get(name.lower())
    if raw is None:
        return default_ms
    text = str(raw).strip().lower()
    m = re.fullmatch(r"(\d+)\s*(ms|s|m|min|h|d)?", text)
    if not m:
        raise KafkaOptionError(f"option {name}: expected a duration like 15m, 30s or 500ms, got {raw!r}")
    return int(m.group(1)) * _TIME_UNITS_MS[m.group(2) or "ms"]


def _json_obj(name: str, text: str) -> dict:
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise KafkaOptionError(f"option {name}: invalid JSON ({exc.msg}) in {text!r}") from None
    if not isinstance(obj, dict):
        raise KafkaOptionError(f"option {name}: expected a JSON object like "
                               f'{{"topic":{{"0":23}}}}, got {text!r}')
    return obj


def parse_partition_json(name: str, text: str) -> dict[str, dict[int, int]]:
    """``{"topicA":{"0":23,"1":-1}}`` -> ``{"topicA": {0: 23, 1: -1}}``."""
    obj = _json_obj(name, text)
    out: dict[str, dict[int, int]] = {}
    for topic, parts in obj.items():
        if not isinstance(parts, dict):
            raise KafkaOptionError(f"option {name}: topic {topic!r} must map partitions to numbers")
        d = {}
        for p, v in parts.items():
            try:
                pi = int(p)
            except (TypeError, ValueError):
                raise KafkaOptionError(f"option {name}: {topic!r} partition {p!r} is not an integer") from None
            if isinstance(v, bool) or not isinstance(v, int):
                raise KafkaOptionError(f"option {name}: {topic}-{pi}: {v!r} is not an integer")
            d[pi] = v
        out[str(topic)] = d
    return out


def parse_assign(text: str) -> dict[str, list[int]]:
    obj = _json_obj("assign", text)
    out = {}
    for topic, parts in obj.items():
        if not isinstance(parts, list) or not all(isinstance(p, int) and not isinstance(p, bool) for p in parts):
            raise KafkaOptionError(f'option assign: expected {{"topic":[0,1]}}, got {text!r}')
        out[str(topic)] = sorted(set(parts))
    return out


def _offset_spec(opts: dict, which: str, default: str, streaming: bool) -> OffsetSpec:
    """``which`` is "starting" or "ending"; precedence as Spark: ...Timestamp >
    ...OffsetsByTimestamp > ...Offsets."""
    ts = opts.get(f"{which}timestamp")
    if ts is not None and ts.strip() != "":
        try:
            t = int(ts.strip())
        except ValueError:
            raise KafkaOptionError(f"option {which}Timestamp: expected milliseconds since the epoch, "
                                   f"got {ts!r}") from None
        if t < 0:
            raise KafkaOptionError(f"option {which}Timestamp: must be >= 0, got {t}")
        return OffsetSpec("timestamp", timestamp=t)
    by_ts = opts.get(f"{which}offsetsbytimestamp")
    if by_ts is not None and by_ts.strip() != "":
        name = f"{which}OffsetsByTimestamp"
        m = parse_partition_json(name, by_ts)
        for topic, parts in m.items():
            for p, t in parts.items():
                if t < 0:
                    raise KafkaOptionError(f"option {name}: {topic}-{p}: timestamp must be >= 0, got {t}")
        return OffsetSpec("by_timestamp", timestamps=m)
    raw = opts.get(f"{which}offsets")
    name = f"{which}Offsets"
    if raw is None or raw.strip() == "":
        raw = default
    s = raw.strip()
    if s.lower() == "earliest":
        if which == "ending":
            raise KafkaOptionError("option endingOffsets: 'earliest' is not allowed for a read")
        return OffsetSpec("earliest")
    if s.lower() == "latest":
        if which == "starting" and not streaming:
            raise KafkaOptionError("option startingOffsets: 'latest' is not allowed for a batch read")
        return OffsetSpec("latest")
    if not s.startswith("{"):
        raise KafkaOptionError(f"option {name}: expected earliest, latest or a JSON object, got {raw!r}")
    m = parse_partition_json(name, s)
    for topic, parts in m.items():
        for p, off in parts.items():
            if off < EARLIEST:
                raise KafkaOptionError(f"option {name}: {topic}-{p}: invalid offset {off}")
            if which == "starting" and off == LATEST and not streaming:
                raise KafkaOptionError(f"option {name}: {topic}-{p}: latest (-1) is not allowed "
                                       f"as a batch starting offset")
            if which == "ending" and off == EARLIEST:
                raise KafkaOptionError(f"option {name}: {topic}-{p}: earliest (-2) is not allowed "
                                       f"as an ending offset")
    return OffsetSpec("offsets", offsets=m)


def _bootstrap(opts: dict) -> str:
    b = opts.get("kafka.bootstrap.servers", "").strip()
    if not b:
        raise KafkaOptionError("option kafka.bootstrap.servers is required (host:port[,host:port])")
    return b


def parse_source_options(options: Mapping[str, Any], *, streaming: bool = False) -> SourceOptions:
    opts = _lower(options)
    bootstrap = _bootstrap(opts)
    given = [k for k in ("subscribe", "subscribepattern", "assign") if opts.get(k, "").strip()]
    if len(given) != 1:
        raise KafkaOptionError("exactly one of the options subscribe, subscribePattern, assign is required"
                               + (f" (got {', '.join(given)})" if given else ""))
    kind = given[0]
    if kind == "subscribe":
        topics = tuple(t.strip() for t in opts["subscribe"].split(",") if t.strip())
        if not topics:
            raise KafkaOptionError("option subscribe: no topic given")
        sub = Subscription("subscribe", topics=topics)
    elif kind == "subscribepattern":
        pat = opts["subscribepattern"].strip()
        try:
            re.compile(pat)
        except re.error as exc:
            raise KafkaOptionError(f"option subscribePattern: invalid regular expression {pat!r}: {exc}") from None
        sub = Subscription("pattern", pattern=pat)
    else:
        sub = Subscription("assign", assign=parse_assign(opts["assign"]))
    starting = _offset_spec(opts, "starting", "latest" if streaming else "earliest", streaming)
    ending = OffsetSpec("latest")
    if not streaming:
        ending = _offset_spec(opts, "ending", "latest", streaming)
    else:
        for k in ("endingoffsets", "endingtimestamp", "endingoffsetsbytimestamp"):
            if opts.get(k):
                raise KafkaOptionError(f"option {k}: ending offsets are for batch reads only")
    strategy = opts.get("startingoffsetsbytimestampstrategy", "error").strip().lower() or "error"
    if strategy not in ("error", "latest"):
        raise KafkaOptionError(f"option startingOffsetsByTimestampStrategy: expected error or latest, "
                               f"got {strategy!r}")
    iso = opts.get("kafka.isolation.level", "read_uncommitted").strip().lower()
    if iso not in ("read_uncommitted", "read_committed"):
        raise KafkaOptionError(f"option kafka.isolation.level: expected read_uncommitted or "
                               f"read_committed, got {iso!r}")
    for bad in ("kafka.group.id", "kafka.auto.offset.reset", "kafka.key.deserializer",
                "kafka.value.deserializer", "kafka.enable.auto.commit", "kafka.interceptor.classes"):
        if bad in opts:
            raise KafkaOptionError(f"option {bad} is not supported (as in Spark's Kafka source)")
    return SourceOptions(
        bootstrap=bootstrap,
        subscription=sub,
        starting=starting,
        ending=ending,
        strategy=strategy,
        min_partitions=_int(opts, "minPartitions", minimum=1),
        fail_on_data_loss=_bool(opts, "failOnDataLoss", True),
        include_headers=_bool(opts, "includeHeaders", False),
        max_offsets_per_trigger=_int(opts, "maxOffsetsPerTrigger", minimum=1),
        min_offsets_per_trigger=_int(opts, "minOffsetsPerTrigger", minimum=1),
        max_trigger_delay_ms=_duration_ms(opts, "maxTriggerDelay", 15 * 60 * 1000),
        isolation_level=iso,
        timeout_ms=_int(opts, "kafka.request.timeout.ms", minimum=1) or 30_000,
        fetch_max_bytes=_int(opts, "kafka.fetch.max.bytes", minimum=1024) or 8 * 1024 * 1024,
        filter_pushdown=_bool(opts, "filterPushdown", False),
    )


def parse_sink_options(options: Mapping[str, Any]) -> SinkOptions:
    opts = _lower(options)
    acks = opts.get("kafka.acks", "all").strip().lower()
    acks_n = {"all": -1, "-1": -1, "1": 1, "0": 0}.get(acks)
    if acks_n is None:
        raise KafkaOptionError(f"option kafka.acks: expected all, -1, 1 or 0, got {acks!r}")
    return SinkOptions(
        bootstrap=_bootstrap(opts),
        topic=(opts.get("topic") or "").strip() or None,
        include_headers=_bool(opts, "includeHeaders", False),
        timeout_ms=_int(opts, "kafka.request.timeout.ms", minimum=1) or 30_000,
        acks=acks_n,
        batch_size=_int(opts, "kafka.batch.size", minimum=1) or (1 << 20),
    )
