"""``kafka-compatible``: a PySpark (4.x) Python Data Source with the options and schema
of Spark's Kafka source, speaking the Kafka protocol to any Kafka-compatible broker.

PySpark registers it by itself: its data-source lookup imports every top-level module
named ``pyspark_*`` and registers the ``DefaultSource`` it exposes, so
``spark.read.format("kafka-compatible")`` works once this package is installed.

``DefaultSource`` is resolved lazily so that the pure parts (``options``, ``offsets``)
import without PySpark.
"""

from __future__ import annotations

__all__ = ["DefaultSource", "KafkaCompatibleDataSource"]


def __getattr__(name: str):
    if name in ("DefaultSource", "KafkaCompatibleDataSource"):
        from pyspark_kafka_compatible.source import KafkaCompatibleDataSource

        return KafkaCompatibleDataSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
