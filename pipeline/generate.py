"""Demo data for :mod:`pipeline.latency_report`.

    python -m pipeline.generate --bootstrap-server localhost:9092 --topic events \
        --seconds 20 --rate 200

creates the topic if needed (``message.timestamp.type=LogAppendTime`` by default, so the
broker stamps each record when it appends it) and produces ``--rate`` records a second for
``--seconds`` seconds, keyed ``sensor-0`` .. ``sensor-{keys-1}``.  Each record carries the
header ``created_ms`` = its simulated creation time (epoch ms, ASCII digits): now minus a
simulated per-key delay (sensor-k: about (k+1) * 20 ms plus a random tail), so the report
finds different percentiles per key.  ``--missing-ratio`` of the records are sent without
the header (the report counts them separately).

With ``--timestamp-type CreateTime --minutes 30`` the records are back-filled instead: their
Kafka timestamps are spread over the last 30 minutes (the broker keeps CreateTime stamps),
and ``created_ms`` is each timestamp minus the simulated delay.

Only our own protocol code is used (no third-party Kafka client).
"""

from __future__ import annotations

import argparse
import random
import sys
import time

from pipeline import CREATED_HEADER, PipelineError, create_topic, topic_partitions


def now_ms() -> int:
    return int(time.time() * 1000)


def simulated_delay_ms(rng: random.Random, key_index: int) -> int:
    return int((key_index + 1) * 20 + rng.expovariate(1 / 15.0))


def make_record(rng: random.Random, i: int, keys: int, ts: int, missing_ratio: float):
    k = i % keys
    key = f"sensor-{k}".encode()
    value = f'{{"seq":{i},"reading":{rng.random():.4f}}}'.encode()
    headers = []
    if rng.random() >= missing_ratio:
        headers.append((CREATED_HEADER, str(ts - simulated_delay_ms(rng, k)).encode()))
    return key, (ts, key, value, headers)


def produce(bootstrap: str, topic: str, records: list[tuple[bytes, tuple]]) -> None:
    """Send ``(key, (ts, key, value, headers))`` items, one batch per partition, acks=all."""
    from protocol.records import build_batch

    from pyspark_kafka_compatible.kafka_io import KafkaIO, default_partition
    from pyspark_kafka_compatible.options import KafkaSourceError

    leaders = topic_partitions(bootstrap, topic)
    by_part: dict[int, list] = {}
    for key, rec in records:
        by_part.setdefault(default_partition(key, len(leaders)), []).append(rec)
    try:
        with KafkaIO(bootstrap, 15_000) as kio:
            for part, recs in sorted(by_part.items()):
                for i in range(0, len(recs), 5000):
                    kio.produce(topic, part, leaders[part], build_batch(recs[i:i + 5000]), -1, 15_000)
    except KafkaSourceError as exc:
        raise PipelineError(str(exc)) from None


def generate(bootstrap: str, topic: str, *, rate: float = 200, seconds: float = 10, minutes: float | None = None,
             keys: int = 5, missing_ratio: float = 0.02, timestamp_type: str = "LogAppendTime",
             partitions: int = 2, seed: int | None = None, quiet: bool = False) -> int:
    rng = random.Random(seed)
    created = create_topic(bootstrap, topic, {"message.timestamp.type": timestamp_type}, partitions)
    if not quiet:
        print(f"created topic {topic} (message.timestamp.type={timestamp_type})" if created else
              f"topic {topic} exists (its own message.timestamp.type applies)")
    n = 0
    if minutes is not None:
        total = int(rate * minutes * 60)
        end = now_ms()
        start = end - int(minutes * 60_000)
        recs = [make_record(rng, i, keys, start + (end - start) * i // max(total, 1), missing_ratio)
                for i in range(total)]
        produce(bootstrap, topic, recs)
        n = total
    else:
        deadline = time.monotonic() + seconds
        tick = 0.1
        while time.monotonic() < deadline:
            t0 = time.monotonic()
            batch = [make_record(rng, n + j, keys, now_ms(), missing_ratio) for j in range(max(1, int(rate * tick)))]
            produce(bootstrap, topic, batch)
            n += len(batch)
            time.sleep(max(0.0, tick - (time.monotonic() - t0)))
    if not quiet:
        print(f"produced {n} records to {topic}")
    return n


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m pipeline.generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--bootstrap-server", default="localhost:9092")
    p.add_argument("--topic", default="events")
    p.add_argument("--rate", type=float, default=200, help="records per second (default 200)")
    p.add_argument("--seconds", type=float, default=10, help="live mode: produce for this long (default 10)")
    p.add_argument("--minutes", type=float, default=None,
                   help="back-fill mode: spread rate*minutes*60 record timestamps over the last N minutes "
                        "(kept only on a CreateTime topic)")
    p.add_argument("--keys", type=int, default=5)
    p.add_argument("--partitions", type=int, default=2, help="when the topic is created (default 2)")
    p.add_argument("--missing-ratio", type=float, default=0.02, help="share of records without the header")
    p.add_argument("--timestamp-type", choices=["LogAppendTime", "CreateTime"], default="LogAppendTime")
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args(argv)
    if a.minutes is not None and a.timestamp_type == "LogAppendTime":
        p.error("--minutes back-fills Kafka timestamps, which a LogAppendTime topic replaces with the "
                "append time: add --timestamp-type CreateTime, or use --seconds for live LogAppendTime data")
    try:
        generate(a.bootstrap_server, a.topic, rate=a.rate, seconds=a.seconds, minutes=a.minutes, keys=a.keys,
                 missing_ratio=a.missing_ratio, timestamp_type=a.timestamp_type, partitions=a.partitions,
                 seed=a.seed)
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
