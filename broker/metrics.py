"""Prometheus metrics: definitions, the scrape-time collector and the ``/metrics`` endpoint.

One :class:`BrokerMetrics` per broker process, with its own ``CollectorRegistry``. It is
created only when ``metrics.port`` is > 0; with ``metrics.port=0`` the broker context and
the dispatcher hold ``None`` and every hook is a single ``is not None`` test.

Two kinds of metrics:

* **Event counters and histograms** updated on the hot path, once per request or per
  appended batch (never per record): bytes in/out and messages in per topic, requests
  and errors per API, request latency per API, produce append delay per topic,
  time-index lookups, retention deletions. They are this module's own lock-free
  Counter/Histogram/Gauge (updates and scrapes both run on the event loop thread), with
  labelled children cached in dicts: an update is a dict lookup and an add (~0.1 µs;
  prometheus-client's own types take a lock per update, ~0.7-1.3 µs).
* **State gauges computed at scrape time** by :class:`BrokerStateCollector` from the
  LogManager and the group coordinator: kafka_exporter's partition offsets and consumer
  group offsets/lag (same names and labels, so its Grafana dashboards work), plus
  ``kafka_consumergroup_lag_seconds``, log size / segment count per partition, and the
  total and usable bytes of each log dir's file system.

The endpoint is an asyncio server on the broker's event loop; each scrape runs in a
worker thread beside it, since with thousands of partitions it takes a quarter of a
second (about a third collecting, the rest prometheus_client's text) that would
otherwise stall every client. The collectors read only values that a read sees whole
(copies of the log and topic tables and of a log's segment list, offsets, sizes): a
scrape is a moment's view, as Kafka's own metrics are. The one read of records, per
lagging group-partition the batch holding the committed offset (cached by (topic,
partition, offset) from one scrape to the next), is handed to the event loop, where every
other read and append of the logs happens.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import struct
import time

from bisect import bisect_left
from functools import partial
from typing import Callable

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.utils import floatToGoString

from storage.log_manager import volume_bytes
from storage.open_files import OPEN_FILES

log = logging.getLogger("chronolog.metrics")

__all__ = ["BrokerMetrics", "BrokerStateCollector", "MetricsServer", "record_timestamp_at"]

LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
                   0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
#: chronolog_event_loop_lag_seconds: libuv's timers run in whole milliseconds, so a tick
#: is up to about 1 ms late with nothing else to do
LOOP_LAG_BUCKETS = (0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
APPEND_DELAY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
                        30.0, 60.0, 300.0, 900.0, 3600.0, 21600.0, 86400.0)

_MAGIC_POS = 16
_MAX_TS_POS = 35
_HEADER_SIZE = 61
_LOG_OVERHEAD = 12
_I32 = struct.Struct(">i")
_I64 = struct.Struct(">q")


def _api_name(api_key: int) -> str:
    from protocol import codec

    return codec.API_KEYS.get(api_key, str(api_key))


def _error_name(code: int) -> str:
    from protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def batch_max_timestamps(records, info, one_batch: bool = False):
    """What the append delay is observed from, once each: the maxTimestamp of each v2
    batch in ``records`` (an append's validated record set, ``info`` its AppendInfo);
    for a legacy (magic 0/1) set, of any size, the append's max timestamp. ``one_batch``:
    the caller knows ``records`` is one v2 batch (every Produce v3+ append is), whose
    maxTimestamp is the append's."""
    n = len(records)
    if one_batch or (n >= _HEADER_SIZE and records[_MAGIC_POS] == 2
                     and _I32.unpack_from(records, 8)[0] + _LOG_OVERHEAD == n):
        return (info.max_timestamp,)  # one v2 batch: its maxTimestamp is the append's, as validated
    return _batch_max_timestamps(records, n, info)


def _batch_max_timestamps(records, n: int, info) -> list:
    """The maxTimestamp of each v2 batch in ``records`` (``n`` bytes); for a legacy
    (magic 0/1) set, of any size, the append's max timestamp; nothing past a length that
    cannot be a batch (the validator would not have let it through)."""
    if n <= _MAGIC_POS:
        return []
    mv = memoryview(records) if not isinstance(records, memoryview) else records
    if mv[_MAGIC_POS] != 2:  # a legacy set (a short one too: one message can be 26 bytes)
        return [info.max_timestamp]
    out = []
    pos = 0
    while pos + _HEADER_SIZE <= n and mv[pos + _MAGIC_POS] == 2:
        (length,) = _I32.unpack_from(mv, pos + 8)
        if length < _HEADER_SIZE - _LOG_OVERHEAD:
            break
        out.append(_I64.unpack_from(mv, pos + _MAX_TS_POS)[0])
        pos += _LOG_OVERHEAD + length
    return out


# --------------------------------------------------------------------------------------
# Lock-free metric types. prometheus-client's Counter/Histogram take a lock per update
# (~0.7 / 1.3 µs); every update here happens on the event loop thread, and so does the
# scrape (MetricsServer), so plain attribute arithmetic is safe and ~10x cheaper. Same
# constructor signature as prometheus-client's; exposed through one collector.
class _CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0  # int + int for the counts (CPython specializes it; float + int it does not)

    def inc(self, amount: float = 1) -> None:
        self.value += amount


class _GaugeChild(_CounterChild):
    __slots__ = ()

    def set(self, value: float) -> None:
        self.value = float(value)


#: observe_ms finds the bucket of a value under this many milliseconds (a producer's linger
#: and the way to the broker) in a table
_MS_TABLE_SIZE = 4096
_ms_tables: dict[tuple, list] = {}


def _ms_table(bounds: tuple) -> list:
    """observe's bucket of each whole number of milliseconds under _MS_TABLE_SIZE, made
    once per bounds by observe's own rule."""
    table = _ms_tables.get(bounds)
    if table is None:
        table = _ms_tables[bounds] = [bisect_left(bounds, ms / 1000.0) for ms in range(_MS_TABLE_SIZE)]
    return table


class _HistogramChild:
    __slots__ = ("bounds", "counts", "sum", "ms_buckets")

    def __init__(self, bounds: tuple) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # last: above the largest bound (+Inf)
        self.sum = 0.0
        self.ms_buckets = _ms_table(bounds)

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1  # first bucket with le >= value
        self.sum += value

    def observe_ms(self, ms: int) -> None:
        """observe(ms / 1000.0) for a whole, non-negative number of milliseconds (the
        append delay per batch): a small one's bucket from the table, without bisecting."""
        value = ms / 1000.0
        self.counts[self.ms_buckets[ms] if ms < _MS_TABLE_SIZE else bisect_left(self.bounds, value)] += 1
        self.sum += value


class _Metric:
    kind = ""

    def __init__(self, name: str, documentation: str, labelnames=(), *, buckets=None, registry=None) -> None:
        self.name = name
        self.documentation = documentation
        self.labelnames = tuple(labelnames)
        self.bounds = tuple(float(b) for b in buckets) if buckets is not None else None
        if self.bounds is not None:
            _ms_table(self.bounds)  # made now, not in the first request that has a new label
        self.children: dict[tuple, object] = {}
        if registry is not None:  # an _EventMetricsCollector
            registry.metrics.append(self)
        if not self.labelnames:
            self.labels()  # an unlabelled metric is exposed (as 0) from the start

    def _new_child(self):
        raise NotImplementedError

    def labels(self, *values):
        key = tuple(str(v) for v in values)
        child = self.children.get(key)
        if child is None:
            if len(key) != len(self.labelnames):
                raise ValueError(f"{self.name}: labels {self.labelnames}, got {key}")
            child = self.children[key] = self._new_child()
        return child

    def remove(self, *values) -> None:
        """Forget one labelled series (absent: nothing to do)."""
        self.children.pop(tuple(str(v) for v in values), None)

    # unlabelled metrics act as their own single child
    def inc(self, amount: float = 1) -> None:
        self.labels().inc(amount)

    def set(self, value: float) -> None:
        self.labels().set(value)

    def observe(self, value: float) -> None:
        self.labels().observe(value)

    def family(self):
        ln = list(self.labelnames)
        items = sorted(self.children.items())
        if self.kind == "counter":
            fam = CounterMetricFamily(self.name, self.documentation, labels=ln)
            for key, c in items:
                fam.add_metric(list(key), c.value)
        elif self.kind == "gauge":
            fam = GaugeMetricFamily(self.name, self.documentation, labels=ln)
            for key, c in items:
                fam.add_metric(list(key), c.value)
        else:
            fam = HistogramMetricFamily(self.name, self.documentation, labels=ln)
            les = [floatToGoString(b) for b in self.bounds] + ["+Inf"]
            for key, c in items:
                acc, buckets = 0, []
                for le, n in zip(les, c.counts):
                    acc += n
                    buckets.append((le, acc))
                fam.add_metric(list(key), buckets, c.sum)
        return fam


class Counter(_Metric):
    kind = "counter"

    def _new_child(self):
        return _CounterChild()


class Gauge(_Metric):
    kind = "gauge"

    def _new_child(self):
        return _GaugeChild()


class Histogram(_Metric):
    kind = "histogram"

    def _new_child(self):
        return _HistogramChild(self.bounds)


class _EventMetricsCollector:
    def __init__(self) -> None:
        self.metrics: list[_Metric] = []

    def describe(self):
        return []

    def collect(self):
        return [m.family() for m in self.metrics]


def _holds_error_code(spec, _seen=None) -> bool:
    """Whether a struct spec has an ``error_code`` field, itself or in a struct below it."""
    seen = _seen if _seen is not None else set()
    if id(spec) in seen:
        return False
    seen.add(id(spec))
    return any(f.py_name == "error_code" or (f.struct is not None and _holds_error_code(f.struct, seen))
               for f in spec.fields)


class _ErrorCodeWalker:
    """Error codes in a response (Kafka's ``AbstractResponse.errorCounts``): every
    non-zero ``error_code`` field anywhere in the response structure. Per generated
    response class, a function is compiled once from its schema: straight-line loops
    over the fields that hold structs or arrays of structs with an ``error_code``
    somewhere below (a produce answer's record errors and leader hints hold none: not
    walked)."""

    def __init__(self) -> None:
        self.walks: dict[type, Callable] = {}
        self.plans: dict[type, tuple] = {}

    def plan_of(self, cls) -> tuple:
        """broker/_metrics.c's walk of responses of class ``cls`` (see _walk_plan)."""
        plan = self.plans.get(cls)
        if plan is None:
            plan = self.plans[cls] = _walk_plan(getattr(cls, "_struct_spec", None), 0)
        return plan

    def walk_of(self, cls) -> Callable:
        """The walk of responses of class ``cls``: ``walk(response, out)`` appends their
        codes to ``out``."""
        walk = self.walks.get(cls)
        if walk is None:
            walk = self.walks[cls] = _compile_walk(getattr(cls, "_struct_spec", None))
        return walk


def _walk_plan(spec, depth: int) -> tuple:
    """What _compile_walk writes as code, as data for broker/_metrics.c's walk:
    (whether the struct has an error_code, ((attr, is_array, plan), ...) for each field,
    in order, holding structs with an error code below)."""
    if depth > 8:  # as _compile_walk
        raise RecursionError("error code walk too deep")
    fields = list(spec.fields) if spec is not None else []
    return (any(f.py_name == "error_code" for f in fields),
            tuple((f.py_name, bool(f.is_array), _walk_plan(f.struct, depth + 1)) for f in fields
                  if f.struct is not None and _holds_error_code(f.struct)))


def _compile_walk(spec) -> Callable:
    lines: list[str] = []

    def emit(spec, var: str, depth: int, indent: str) -> None:
        if depth > 8:  # no Kafka message nests deeper; a cycle would
            raise RecursionError("error code walk too deep")
        fields = list(spec.fields) if spec is not None else []
        if any(f.py_name == "error_code" for f in fields):
            lines.append(f"{indent}c = {var}.error_code")
            lines.append(f"{indent}if c: out.append(c)")
        for f in fields:
            if f.struct is None or not _holds_error_code(f.struct):
                continue
            item = f"x{depth}"
            lines.append(f"{indent}{item} = {var}.{f.py_name}")  # a slot every instance has
            if f.is_array:
                lines.append(f"{indent}for {item} in {item} or ():")
            else:
                lines.append(f"{indent}if {item} is not None:")
            emit(f.struct, item, depth + 1, indent + "    ")

    emit(spec, "obj", 0, "    ")
    source = "def walk(obj, out):\n" + "\n".join(lines or ["    pass"]) + "\n"
    namespace: dict = {}
    exec(compile(source, "<error code walk>", "exec"), namespace)
    return namespace["walk"]


try:  # request_done and produced compiled (broker/_metrics.c); the methods below without it
    from broker import _metrics

    _metrics.setup(_CounterChild, _HistogramChild)
except ImportError:  # pragma: no cover - exercised when the extension is not built
    _metrics = None

#: whether BrokerMetrics uses broker/_metrics.c (the broker warns at start when it does not)
COMPILED = _metrics is not None


class BrokerMetrics:
    """Every metric of one broker process (one registry)."""

    def __init__(self, registry: CollectorRegistry | None = None, *, process_metrics: bool = True) -> None:
        self.registry = reg = registry if registry is not None else CollectorRegistry()
        if process_metrics:
            from prometheus_client import GCCollector, PlatformCollector, ProcessCollector

            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)
            GCCollector(registry=reg)
        reg.register(ev := _EventMetricsCollector())
        # -- BrokerTopicMetrics -------------------------------------------------------
        self.bytes_in = Counter("chronolog_topic_bytes_in", "Record bytes appended by Produce requests "
                                "(BrokerTopicMetrics BytesInPerSec)", ["topic"], registry=ev)
        self.bytes_out = Counter("chronolog_topic_bytes_out", "Record bytes sent in Fetch responses "
                                 "(BrokerTopicMetrics BytesOutPerSec)", ["topic"], registry=ev)
        self.messages_in = Counter("chronolog_topic_messages_in", "Records appended by Produce requests "
                                   "(BrokerTopicMetrics MessagesInPerSec)", ["topic"], registry=ev)
        self.produce_requests = Counter("chronolog_topic_produce_requests", "Produce requests per topic "
                                        "(TotalProduceRequestsPerSec; one per topic in a request)",
                                        ["topic"], registry=ev)
        self.failed_produce_requests = Counter("chronolog_topic_failed_produce_requests",
                                               "Produce requests with at least one failed partition of "
                                               "the topic (FailedProduceRequestsPerSec)", ["topic"], registry=ev)
        self.fetch_requests = Counter("chronolog_topic_fetch_requests", "Fetch requests per topic "
                                      "(TotalFetchRequestsPerSec)", ["topic"], registry=ev)
        self.failed_fetch_requests = Counter("chronolog_topic_failed_fetch_requests",
                                             "Fetch requests with at least one failed partition of the topic "
                                             "(FailedFetchRequestsPerSec)", ["topic"], registry=ev)
        # -- RequestMetrics -----------------------------------------------------------
        self.requests = Counter("chronolog_requests", "Requests answered, per API (RequestsPerSec)",
                                ["api"], registry=ev)
        self.request_errors = Counter("chronolog_request_errors", "Error codes in responses, per API and "
                                      "error name, one per occurrence (RequestMetrics ErrorsPerSec); "
                                      "a handler exception counts as UNKNOWN_SERVER_ERROR",
                                      ["api", "error"], registry=ev)
        self.request_latency = Histogram("chronolog_request_latency_seconds",
                                         "Time from decoding a request to its encoded response, async "
                                         "completion (Fetch long polling) included (TotalTimeMs)",
                                         ["api"], buckets=LATENCY_BUCKETS, registry=ev)
        # -- client quotas (broker.quotas) ----------------------------------------------
        self.throttles = Counter("chronolog_client_throttles", "Responses throttled by a client quota, per API "
                                 "(the throttle-time sensors of Kafka's ClientQuotaManager)", ["api"], registry=ev)
        self.throttle_time = Counter("chronolog_client_throttle_time_ms", "Milliseconds of throttle time given to "
                                     "clients, per API", ["api"], registry=ev)
        # -- KIP-32 append delay ------------------------------------------------------
        self.append_delay = Histogram("chronolog_produce_append_delay_seconds",
                                      "Broker time at append minus the batch's max CreateTime, one "
                                      "observation per appended batch (CreateTime topics only)",
                                      ["topic"], buckets=APPEND_DELAY_BUCKETS, registry=ev)
        self.append_delay_negative = Counter("chronolog_produce_append_delay_negative",
                                             "Appended batches whose max CreateTime is ahead of the broker "
                                             "clock (not observed in the histogram)", ["topic"], registry=ev)
        # -- storage ------------------------------------------------------------------
        self.time_index_lookups = Counter("chronolog_time_index_lookups", "ListOffsets searches by "
                                          "timestamp (one per partition)", registry=ev)
        self.time_index_lookup_latency = Histogram("chronolog_time_index_lookup_seconds",
                                                   "Duration of one ListOffsets search by timestamp",
                                                   buckets=LATENCY_BUCKETS, registry=ev)
        self.retention_segments_deleted = Counter("chronolog_log_retention_segments_deleted",
                                                  "Segments deleted by retention (retention.ms, "
                                                  "retention.bytes, log start offset)", registry=ev)
        self.loop_lag = Histogram("chronolog_event_loop_lag_seconds",
                                  "How late the event loop ran a timer due every 100 ms: how long every "
                                  "request and timer waited then (the loop busy with one piece of work, or "
                                  "the process not scheduled)", buckets=LOOP_LAG_BUCKETS, registry=ev)
        self.recovery_seconds = Gauge("chronolog_log_recovery_seconds", "Duration of loading (and, after "
                                      "a crash, recovering) the logs at the last start", registry=ev)
        # security (Kafka's successful/failed-authentication-total, connection-count,
        # the authorizer's denials): labelled by listener, mechanism, API, resource type
        self.authentications = Counter("chronolog_authentications", "SASL authentications per listener, "
                                       "mechanism and result (success/failure)",
                                       ("listener", "mechanism", "result"), registry=ev)
        self.authorization_denials = Counter("chronolog_authorization_denied", "Authorization denials per "
                                             "API and resource type", ("api", "resource_type"), registry=ev)
        self.connections_rejected = Counter("chronolog_connections_rejected", "Connections closed at accept "
                                            "by max.connections / max.connections.per.ip", ("listener",),
                                            registry=ev)
        self.connections = Gauge("chronolog_connections", "Open connections per listener", ("listener",),
                                 registry=ev)
        self._walker = _ErrorCodeWalker()
        self._walks = self._walker.walks  # {response class: its walk}, read once per request
        self._api_children: dict[int, tuple] = {}
        self._topic_children: dict[str, tuple] = {}
        self._fetch_children: dict[str, tuple] = {}
        self._delay_children: dict[str, tuple] = {}
        self.state_collector: BrokerStateCollector | None = None
        # Per-topic series are created only for topics that exist (checked when a topic's
        # series are first needed): requests naming unknown or just-deleted topics (a
        # Fetch long poll woken by the deletion answers for its topic) would otherwise
        # leave series behind, one per name a client tries. Those requests still count
        # in chronolog_request_errors_total. Set by attach_state.
        self.topic_exists: Callable[[str], bool] = lambda topic: True
        if _metrics is not None:  # the two hot methods compiled (broker/_metrics.c), bound to these children
            self.request_done = _metrics.request_done_hook(self._api_children, self._api, self._walker.plans,
                                                           self._walker.plan_of, self._count_errors)
            self.produced = _metrics.produced_hook(self._topic_children, self._delay_children,
                                                   self._topic_if_exists, self._topic, self._delay)

    # ---------------------------------------------------------------- request hooks
    def _api(self, api_key: int):
        c = self._api_children.get(api_key)
        if c is None:
            name = _api_name(api_key)
            c = (self.requests.labels(name), self.request_latency.labels(name), name)
            self._api_children[api_key] = c
        return c

    def request_done(self, api_key: int, response, seconds: float) -> None:
        """A request answered (``response``, None for none) ``seconds`` after it was
        decoded: its API's count and latency, and each error code in the answer.
        broker/_metrics.c has it compiled: __init__ puts that in its place."""
        req, hist, name = self._api_children.get(api_key) or self._api(api_key)
        req.value += 1
        hist.counts[bisect_left(hist.bounds, seconds)] += 1  # hist.observe(seconds), without the call
        hist.sum += seconds
        if response is not None:
            codes: list[int] = []
            walk = self._walks.get(response.__class__) or self._walker.walk_of(response.__class__)
            walk(response, codes)
            if codes:
                self._count_errors(name, codes)

    def _count_errors(self, name: str, codes: list) -> None:
        for code in codes:
            self.request_errors.labels(name, _error_name(code)).inc()

    def request_failed(self, api_key: int, seconds: float) -> None:
        req, hist, name = self._api(api_key)
        req.inc()
        hist.observe(seconds)
        self.request_errors.labels(name, "UNKNOWN_SERVER_ERROR").inc()

    def throttled(self, api: str, throttle_ms: int) -> None:
        self.throttles.labels(api).inc()
        self.throttle_time.labels(api).inc(throttle_ms)

    def authentication(self, listener: str, mechanism: str, ok: bool) -> None:
        self.authentications.labels(listener, mechanism, "success" if ok else "failure").inc()

    def authorization_denied(self, api: str, resource_type: str) -> None:
        self.authorization_denials.labels(api or "unknown", resource_type).inc()

    def connection_rejected(self, listener: str) -> None:
        self.connections_rejected.labels(listener).inc()

    def connections_changed(self, listener: str, count: int) -> None:
        self.connections.labels(listener).set(count)

    def topic_deleted(self, topic: str) -> None:
        """Drop every per-topic series of a deleted topic (Kafka's BrokerTopicStats
        removeMetrics): a topic created again under the same name starts from zero, and
        scrapes stop reporting a topic that no longer exists."""
        for metric in (self.bytes_in, self.bytes_out, self.messages_in, self.produce_requests,
                       self.failed_produce_requests, self.fetch_requests, self.failed_fetch_requests,
                       self.append_delay, self.append_delay_negative):
            metric.remove(topic)
        for cache in (self._topic_children, self._fetch_children, self._delay_children):
            cache.pop(topic, None)

    # ---------------------------------------------------------------- produce
    def _topic(self, topic: str):
        c = self._topic_children.get(topic)
        if c is None:
            c = (self.bytes_in.labels(topic), self.messages_in.labels(topic), None, None,
                 self.produce_requests.labels(topic), self.failed_produce_requests.labels(topic))
            self._topic_children[topic] = c
        return c

    def _topic_if_exists(self, topic: str):
        """The topic's children, None for a topic this broker does not have (see
        topic_exists)."""
        return self._topic(topic) if topic in self._topic_children or self.topic_exists(topic) else None

    def _delay(self, topic: str):
        c = self._delay_children.get(topic)
        if c is None:  # only CreateTime topics get append delay series
            c = (self.append_delay.labels(topic), self.append_delay_negative.labels(topic))
            self._delay_children[topic] = c
        return c

    def produced(self, responses, tally) -> None:
        """One produce request's per-topic metrics, in one call. ``responses``: the
        request's TopicProduceResponses, each a produce request of its topic, failed
        when any of its partitions failed (a topic this broker does not have gets no
        series: see topic_exists). ``tally``: {topic: [bytes, messages, delays]} of its
        successful, non-duplicate appends (broker.handlers.produce._count): bytes and
        messages in, and for a topic with CreateTime appends (delays not None) the append
        delay in ms of each v2 batch from its header's maxTimestamp, one observation
        each (a negative one counted apart)."""
        children = self._topic_children
        for t in responses:
            c = children.get(t.name) or self._topic_if_exists(t.name)
            if c is None:
                continue
            c[4].value += 1  # the children's inc(), without a call per update
            for p in t.partition_responses:
                if p.error_code:
                    c[5].value += 1
                    break
        for topic, (nbytes, messages, delays) in tally.items():
            c = children.get(topic) or self._topic(topic)
            c[0].value += nbytes
            c[1].value += messages
            if delays is not None:
                hist, neg = self._delay_children.get(topic) or self._delay(topic)
                buckets, counts = hist.ms_buckets, hist.counts
                for delay in delays:
                    if delay < 0:
                        neg.value += 1
                    elif delay < _MS_TABLE_SIZE:  # hist.observe_ms(delay), without the call
                        counts[buckets[delay]] += 1
                        hist.sum += delay / 1000.0
                    else:
                        hist.observe_ms(delay)

    # ---------------------------------------------------------------- fetch
    def fetched(self, response) -> None:
        """Bytes out and fetch requests per topic from a Fetch response about to be sent."""
        for t in response.responses:
            c = self._fetch_children.get(t.topic)
            if c is None:
                if not self.topic_exists(t.topic):
                    continue  # see topic_exists
                c = (self.bytes_out.labels(t.topic), self.fetch_requests.labels(t.topic),
                     self.failed_fetch_requests.labels(t.topic))
                self._fetch_children[t.topic] = c
            size = 0
            failed = False
            for p in t.partitions:
                if p.error_code:
                    failed = True
                r = p.records
                if r is not None:
                    size += len(r)
            if size:
                c[0].inc(size)
            c[1].inc()
            if failed:
                c[2].inc()

    # ---------------------------------------------------------------- storage
    def time_index_lookup(self, seconds: float) -> None:
        self.time_index_lookups.inc()
        self.time_index_lookup_latency.observe(seconds)

    def attach_state(self, log_manager, coordinator_getter, clock) -> "BrokerStateCollector":
        self.state_collector = BrokerStateCollector(log_manager, coordinator_getter, clock)
        self.topic_exists = lambda topic: log_manager.get_topic(topic) is not None
        self.registry.register(self.state_collector)
        return self.state_collector

    def attach_cleaner(self, cleaner) -> "CleanerCollector":
        collector = CleanerCollector(cleaner)
        self.registry.register(collector)
        return collector

    def attach_share(self, log_manager, share_getter) -> "ShareCollector":
        collector = ShareCollector(log_manager, share_getter)
        self.registry.register(collector)
        return collector

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


class ShareCollector:
    """Share groups (KIP-932) at scrape time: members per group; per share-partition its
    start offset, lag (records from the start offset to the high watermark not yet
    acknowledged or archived), records in flight and records acquired now; totals of
    records acquired, redelivered (deliveries after the first) and archived (rejected or
    out of delivery attempts)."""

    def __init__(self, log_manager, share_getter) -> None:
        self.lm = log_manager
        self.share_getter = share_getter  # () -> (ShareGroups, SharePartitionManager) or None

    def describe(self):
        return []

    def collect(self):
        labels = ["sharegroup", "topic", "partition"]
        members = GaugeMetricFamily("chronolog_share_group_members", "Members of a share group", labels=["sharegroup"])
        start = GaugeMetricFamily("chronolog_share_partition_start_offset",
                                  "Share-partition start offset (every record below it is done)", labels=labels)
        lag = GaugeMetricFamily("chronolog_share_group_lag", "Records of the share-partition from its start offset "
                                "to the high watermark not yet acknowledged or archived", labels=labels)
        in_flight = GaugeMetricFamily("chronolog_share_partition_in_flight_records",
                                      "Records between the share-partition start and end offsets", labels=labels)
        acquired = GaugeMetricFamily("chronolog_share_partition_acquired_records",
                                     "Records acquired by a member and locked now", labels=labels)
        acquired_total = CounterMetricFamily("chronolog_share_records_acquired",
                                             "Records acquired by share-group members (every delivery)")
        redelivered = CounterMetricFamily("chronolog_share_records_redelivered",
                                          "Deliveries of share-group records after their first")
        archived = CounterMetricFamily("chronolog_share_records_archived",
                                       "Share-group records archived: rejected or out of delivery attempts")
        found = self.share_getter()
        if found is not None:
            groups, mgr = found
            for gid, g in sorted(groups.groups.items()):
                members.add_metric([gid], len(g.members))
            names = {info.topic_id: name for name, info in self.lm.topics().items()}
            for (gid, tid, p), sp in sorted(mgr.partitions.items(), key=lambda e: (e[0][0], str(e[0][1]), e[0][2])):
                name = names.get(tid)
                if name is None:
                    continue
                lbl = [gid, name, str(p)]
                start.add_metric(lbl, sp.start)
                in_flight.add_metric(lbl, sp.end - sp.start)
                acquired.add_metric(lbl, sp.acquired_count())
                try:
                    hw = self.lm.get_log(name, p).high_watermark
                except Exception:
                    continue
                lag.add_metric(lbl, max(0, hw - sp.start - sp.done_in_flight()))
            acquired_total.add_metric([], mgr.acquired_total)
            redelivered.add_metric([], mgr.redelivered_total())
            archived.add_metric([], mgr.archived_total())
        return [members, start, lag, in_flight, acquired, acquired_total, redelivered, archived]


class CleanerCollector:
    """The log cleaner's state at scrape time: Kafka's LogCleaner and LogCleanerManager
    gauges (max-buffer-utilization-percent, cleaner-recopy-percent, max-clean-time-secs,
    max-compaction-delay-secs, DeadThreadCount, max-dirty-percent, time-since-last-run-ms,
    uncleanable-partitions-count) under chronolog_log_cleaner_* names, plus totals."""

    def __init__(self, cleaner) -> None:
        self.cleaner = cleaner

    def describe(self):
        return []

    def collect(self):
        c = self.cleaner
        m = c.metrics
        now_ms = c.clock.time_ms()
        p = "chronolog_log_cleaner_"

        def counter(name, doc, value):
            fam = CounterMetricFamily(p + name, doc)
            fam.add_metric([], value)
            return fam

        def gauge(name, doc, value):
            fam = GaugeMetricFamily(p + name, doc)
            fam.add_metric([], value)
            return fam

        uncleanable = GaugeMetricFamily(p + "uncleanable_partitions",
                                        "Partitions the cleaner gave up on after an error, per log dir "
                                        "(until restart)", labels=["log_dir"])
        for d, n in sorted(c.uncleanable_partitions().items()):
            uncleanable.add_metric([d], n)
        return [
            counter("runs", "Cleans swapped in", m.runs),
            counter("failures", "Cleans that failed (the partition is then uncleanable)", m.failures),
            counter("bytes_read", "Bytes of log read by the filter phase of cleans", m.bytes_read),
            counter("bytes_written", "Bytes of cleaned segments written", m.bytes_written),
            counter("records_read", "Records read by the filter phase of cleans", m.messages_read),
            counter("records_written", "Records kept in cleaned segments", m.messages_written),
            gauge("last_clean_timestamp_seconds", "Wall-clock time the last clean was swapped in (0: none)",
                  m.last_clean_end_ms / 1000.0),
            gauge("time_since_last_run_ms", "Milliseconds since the cleaner last looked for a log to clean",
                  max(0, now_ms - m.time_of_last_run_ms) if m.time_of_last_run_ms else 0),
            gauge("last_clean_seconds", "Duration of the last clean", m.last_clean_seconds),
            gauge("max_clean_time_seconds", "Longest clean since start", m.max_clean_seconds),
            gauge("max_buffer_utilization_percent", "How full the offset map was in the last clean",
                  100.0 * m.last_buffer_utilization),
            gauge("recopy_percent", "Bytes written / bytes read by the last clean, in percent",
                  100.0 * m.last_recopy_ratio),
            gauge("max_dirty_percent", "The highest dirty ratio among compacted logs at the last look, in percent",
                  100.0 * m.max_dirty_ratio),
            gauge("max_compaction_delay_seconds", "How far past max.compaction.lag.ms the most overdue log was "
                  "at the last look", m.max_compaction_delay_ms / 1000.0),
            gauge("dead_workers", "Cleaner worker processes that died", m.dead_workers),
            gauge("worker_peak_rss_bytes", "Peak resident memory of a cleaner worker process", m.peak_rss_bytes),
            uncleanable,
        ]


def _running_loop():
    """The event loop running in this thread, or None."""
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


def _timestamps_at(wanted: dict) -> dict:
    """{key: record_timestamp_at(log, offset) or None} for ``wanted`` {key: (log, offset)}."""
    out = {}
    for key, (plog, at) in wanted.items():
        try:
            out[key] = record_timestamp_at(plog, at)
        except Exception as exc:
            log.debug("no timestamp at %s-%d offset %d: %s", key[0], key[1], at, exc)
            out[key] = None
    return out


def record_timestamp_at(plog, offset: int) -> int | None:
    """Timestamp of the record at ``offset`` (the first record at or after it), read
    through the log: the batch holding it, decoded only when the offset is not the
    batch's first (LogAppendTime batches: the batch maxTimestamp). Transaction markers
    are not records: a control batch is stepped over. None when no record or no
    timestamp."""
    from protocol import records as rec

    for _ in range(64):  # a run of markers (one per transaction) longer than this: no answer
        data = plog.read(offset, 1, min_one_message=True).records
        if data is None or not len(data):
            return None
        buf = data.read()
        if len(buf) < _HEADER_SIZE:
            return None
        hdr = rec.parse_batch_header(buf, 0)
        if not hdr.is_control:
            break
        offset = hdr.last_offset + 1
    else:
        return None
    if hdr.attributes & rec.TIMESTAMP_TYPE_MASK:
        ts = hdr.max_timestamp
    elif offset <= hdr.base_offset:
        ts = hdr.base_timestamp
    else:
        try:
            found = rec.first_record_at_or_after(buf, 0, hdr, -(1 << 63), offset)
        except rec.RecordFormatError:  # a malformed stored batch: no lag in seconds for it
            found = None
        ts = found[1] if found is not None else None
    if ts is None or ts < 0:
        return None
    return ts


class BrokerStateCollector:
    """Gauges computed at scrape time (kafka_exporter names and labels)."""

    def __init__(self, log_manager, coordinator_getter, clock) -> None:
        self.log_manager = log_manager
        self.coordinator_getter = coordinator_getter
        self.clock = clock
        self._ts_cache: dict[tuple[str, int, int], int | None] = {}
        # the event loop the broker's logs belong to (None: none runs where this was made):
        # a scrape runs in a worker thread (MetricsServer), and reads records of the logs
        # only on the loop, where every other read and append of them happens
        self.loop = _running_loop()

    def _on_loop(self, fn):
        """fn() run on the broker's event loop, waited for from a scrape's thread; called
        at once when there is no loop or this is its thread."""
        loop = self.loop
        if loop is None or _running_loop() is loop or loop.is_closed():
            return fn()
        done: concurrent.futures.Future = concurrent.futures.Future()

        def run():
            if done.set_running_or_notify_cancel():
                try:
                    done.set_result(fn())
                except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
                    done.set_exception(exc)

        loop.call_soon_threadsafe(run)
        try:
            return done.result(timeout=10)
        except concurrent.futures.TimeoutError:
            done.cancel()
            raise

    def describe(self):
        return []  # collected on demand only: no scrape at registration

    def collect(self):
        now_ms = self.clock.time_ms()
        lm = self.log_manager
        tp = ["topic", "partition"]
        gp = ["consumergroup", "topic", "partition"]
        brokers = GaugeMetricFamily("kafka_brokers", "Number of Brokers in the Kafka Cluster.")
        brokers.add_metric([], 1)
        partitions = GaugeMetricFamily("kafka_topic_partitions", "Number of partitions for this Topic",
                                       labels=["topic"])
        current = GaugeMetricFamily("kafka_topic_partition_current_offset",
                                    "Current Offset of a Broker at Topic/Partition", labels=tp)
        oldest = GaugeMetricFamily("kafka_topic_partition_oldest_offset",
                                   "Oldest Offset of a Broker at Topic/Partition", labels=tp)
        size = GaugeMetricFamily("chronolog_log_size_bytes", "Bytes of the partition's .log segment files",
                                 labels=tp)
        segments = GaugeMetricFamily("chronolog_log_segments", "Segments of the partition's log", labels=tp)
        g_current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                      "Current Offset of a ConsumerGroup at Topic/Partition", labels=gp)
        g_current_sum = GaugeMetricFamily("kafka_consumergroup_current_offset_sum",
                                          "Current Offset of a ConsumerGroup at Topic for all partitions",
                                          labels=["consumergroup", "topic"])
        g_lag = GaugeMetricFamily("kafka_consumergroup_lag",
                                  "Current Approximate Lag of a ConsumerGroup at Topic/Partition", labels=gp)
        g_lag_sum = GaugeMetricFamily("kafka_consumergroup_lag_sum",
                                      "Current Approximate Lag of a ConsumerGroup at Topic for all partitions",
                                      labels=["consumergroup", "topic"])
        g_lag_s = GaugeMetricFamily("kafka_consumergroup_lag_seconds",
                                    "Now minus the timestamp of the next unconsumed record (the record at "
                                    "the committed offset) of a ConsumerGroup at Topic/Partition; 0 when "
                                    "caught up", labels=gp)
        g_members = GaugeMetricFamily("kafka_consumergroup_members", "Amount of members in a consumer group",
                                      labels=["consumergroup"])
        dir_total = GaugeMetricFamily("chronolog_log_dir_total_bytes",
                                      "Size of the file system holding the log dir", labels=["log_dir"])
        dir_usable = GaugeMetricFamily("chronolog_log_dir_usable_bytes",
                                       "Bytes still usable on the file system holding the log dir",
                                       labels=["log_dir"])
        for d in lm.log_dirs:
            try:
                total, usable = volume_bytes(d)
            except OSError:  # an offline log dir: no series
                continue
            dir_total.add_metric([d], total)
            dir_usable.add_metric([d], usable)
        open_files = GaugeMetricFamily("chronolog_log_open_files",
                                       "Segment files held open (.log descriptors and index maps; "
                                       "bounded by log.open.files.max)")
        open_files.add_metric([], len(OPEN_FILES))
        reopens = CounterMetricFamily("chronolog_log_file_reopens",
                                      "Segment files opened again after the open-files bound closed them")
        reopens.add_metric([], OPEN_FILES.reopens)
        logs = lm.loaded_logs()  # a partition still loading after start-up appears when loaded
        for name, info in sorted(lm.topics().items()):
            partitions.add_metric([name], info.num_partitions)
        ends: dict[tuple[str, int], object] = {}
        for (t, p), plog in sorted(logs.items()):
            if plog.closed:
                continue
            labels = [t, str(p)]
            try:
                segs = plog.segments
                hw = plog.high_watermark
                start = plog.log_start_offset
                nbytes = sum(s.size for s in segs)
            except Exception:  # a log closing under us (topic deleted): skip it
                continue
            ends[(t, p)] = plog
            current.add_metric(labels, hw)
            oldest.add_metric(labels, start)
            size.add_metric(labels, nbytes)
            segments.add_metric(labels, len(segs))
        coord = self.coordinator_getter()
        cache, new_cache = self._ts_cache, {}
        to_read: dict = {}  # (topic, partition, offset) -> (log, offset): timestamps not known yet
        lagging: list = []  # (labels, key) of each lag in seconds, once its timestamp is known
        if coord is not None:
            for gid, g in sorted(coord.groups.items()):
                if getattr(g, "state", None) == "Dead":
                    continue
                g_members.add_metric([gid], len(g.members))
                sums: dict[str, list[int]] = {}
                for (t, p), entry in sorted(g.offsets.items()):
                    labels = [gid, t, str(p)]
                    committed = entry.offset
                    g_current.add_metric(labels, committed)
                    s = sums.setdefault(t, [0, 0, 0])
                    s[0] += committed
                    plog = ends.get((t, p))
                    if plog is None or committed < 0:
                        continue
                    hw = plog.high_watermark
                    lag = hw - committed
                    g_lag.add_metric(labels, lag)
                    s[1] += lag
                    s[2] = 1
                    if lag <= 0:
                        g_lag_s.add_metric(labels, 0.0)
                        continue
                    at = max(committed, plog.log_start_offset)
                    key = (t, p, at)
                    if key not in new_cache:
                        if key in cache:
                            new_cache[key] = cache[key]
                        else:
                            to_read[key] = (plog, at)
                    lagging.append((labels, key))
                for t, (cur_sum, lag_sum, has_lag) in sorted(sums.items()):
                    g_current_sum.add_metric([gid, t], cur_sum)
                    if has_lag:
                        g_lag_sum.add_metric([gid, t], lag_sum)
        if to_read:
            new_cache.update(self._on_loop(partial(_timestamps_at, to_read)))
        for labels, key in lagging:
            ts = new_cache.get(key)
            if ts is not None:
                g_lag_s.add_metric(labels, max(0.0, (now_ms - ts) / 1000.0))
        self._ts_cache = new_cache
        return [brokers, partitions, current, oldest, size, segments, dir_total, dir_usable, open_files, reopens,
                g_current, g_current_sum, g_lag, g_lag_sum, g_lag_s, g_members]


class MetricsServer:
    """``GET /metrics`` over HTTP/1.x on the event loop (one response per connection)."""

    def __init__(self, metrics: BrokerMetrics, host: str, port: int) -> None:
        self.metrics = metrics
        self.host = host
        self.port = port
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> bool:
        host = self.host or None  # empty: every interface
        try:
            self.server = await asyncio.start_server(self._handle, host=host, port=self.port,
                                                     reuse_address=True)
        except OSError as exc:
            log.error("metrics endpoint not started: cannot listen on %s:%d: %s (the broker runs on "
                      "without it; set metrics.port to a free port, or 0 to disable)",
                      self.host or "*", self.port, exc)
            return False
        bound = self.server.sockets[0].getsockname()
        self.port = bound[1]
        log.info("metrics endpoint on http://%s:%d/metrics", bound[0], bound[1])
        return True

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=10)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, asyncio.TimeoutError):
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            parts = line.split()
            method = parts[0] if parts else ""
            path = parts[1].split("?", 1)[0] if len(parts) > 1 else ""
            if method not in ("GET", "HEAD"):
                status, ctype, body = "405 Method Not Allowed", "text/plain", b"only GET\n"
            elif path == "/metrics":
                started = time.perf_counter()
                try:
                    # in a worker thread: with thousands of partitions a scrape takes a
                    # quarter of a second (the collectors, then prometheus_client's text),
                    # which on the loop would stall every client that long; the thread gives
                    # the loop the GIL back every switch interval. The collectors read the
                    # broker's state as it is meanwhile (a log closing under them is skipped)
                    body = await asyncio.get_running_loop().run_in_executor(None, self.metrics.exposition)
                    status, ctype = "200 OK", CONTENT_TYPE_LATEST
                except Exception:
                    log.exception("metrics scrape failed")
                    status, ctype, body = "500 Internal Server Error", "text/plain", b"scrape failed\n"
                log.debug("metrics scrape: %d bytes in %.1f ms", len(body), (time.perf_counter() - started) * 1e3)
            elif path == "/":
                status, ctype, body = "200 OK", "text/html", b'<a href="/metrics">/metrics</a>\n'
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found; try /metrics\n"
            head_out = (f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                        f"Connection: close\r\n\r\n").encode("latin-1")
            writer.write(head_out if method == "HEAD" else head_out + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def serve_until_cancelled(self) -> None:
        """Runs until cancelled (the broker's stop cancels its tasks), then closes."""
        try:
            await asyncio.Event().wait()
        finally:
            if self.server is not None:
                self.server.close()
                self.server = None

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            try:
                await asyncio.wait_for(self.server.wait_closed(), timeout=2)
            except asyncio.TimeoutError:  # pragma: no cover
                pass
            self.server = None
