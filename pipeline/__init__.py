"""Example pipeline on top of the ``kafka-compatible`` PySpark data source.

* :mod:`pipeline.generate` - produce demo records carrying a ``created_ms`` header.
* :mod:`pipeline.latency_report` - read the last N minutes of a topic by time, per key:
  record count and latency percentiles (Kafka timestamp minus the ``created_ms`` header),
  written to Parquet and to an output topic.

The small helpers below talk to the broker with our own protocol client
(:mod:`broker.tools.client`), so the pipeline needs nothing beyond the ``spark`` extra.
"""

from __future__ import annotations

from broker.tools import ToolError
from broker.tools.client import Client, error_name

#: Header the producer sets: the record's creation time, epoch milliseconds as ASCII digits.
CREATED_HEADER = "created_ms"


class PipelineError(RuntimeError):
    """A one-line, user-facing error (unknown topic, unreachable broker, bad flags)."""


def _client(bootstrap: str, timeout_ms: int = 10_000) -> Client:
    try:
        return Client(bootstrap, timeout_ms)
    except ToolError as exc:
        raise PipelineError(f"broker unreachable: {exc}") from None


def topic_partitions(bootstrap: str, topic: str) -> dict[int, int]:
    """``{partition: leader}`` of ``topic``; PipelineError if it does not exist."""
    with _client(bootstrap) as c:
        try:
            return c.topic_partitions([topic])[topic]
        except ToolError as exc:
            if "does not exist" in str(exc):
                raise PipelineError(f"topic {topic!r} does not exist (broker {bootstrap})") from None
            raise PipelineError(f"topic {topic!r} on {bootstrap}: {exc}") from None


def topic_exists(bootstrap: str, topic: str) -> bool:
    try:
        topic_partitions(bootstrap, topic)
        return True
    except PipelineError as exc:
        if "does not exist" in str(exc):
            return False
        raise


def create_topic(bootstrap: str, topic: str, configs: dict[str, str] | None = None,
                 partitions: int = 1, if_not_exists: bool = True) -> bool:
    """CreateTopics; returns False when it already existed (and ``if_not_exists``)."""
    from protocol.errors import ErrorCode
    from protocol.messages import CreateTopicsRequest

    with _client(bootstrap) as c:
        try:
            c.metadata([])
            conn = c.node(c.controller_id) if c.controller_id in c.brokers else c.any()
            req = CreateTopicsRequest(
                topics=[CreateTopicsRequest.CreatableTopic(
                    name=topic, num_partitions=partitions, replication_factor=1,
                    configs=[CreateTopicsRequest.CreatableTopicConfig(name=k, value=v)
                             for k, v in (configs or {}).items()])],
                timeout_ms=10_000)
            _, resp = conn.request(req, conn.version_for(19))
        except ToolError as exc:
            raise PipelineError(f"create topic {topic!r}: {exc}") from None
    for t in resp.topics:
        if t.error_code == ErrorCode.TOPIC_ALREADY_EXISTS and if_not_exists:
            return False
        if t.error_code:
            detail = f": {t.error_message}" if getattr(t, "error_message", None) else ""
            raise PipelineError(f"create topic {t.name!r}: {error_name(t.error_code)}{detail}")
    return True
