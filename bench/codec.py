"""The message codec alone: CPU per decode and encode of the messages the hot paths
handle, with the compiled runner (protocol/_fastwire.c) and with the generated Python
functions it stands in for. In one process, no sockets: `make bench-codec`.

Messages: a one-record Produce request (v9) and its response, a Fetch request of 100
partitions (v12) and a Metadata response of one topic with 10,000 partitions (v12), the
largest thing a client commonly asks a broker to encode."""

from __future__ import annotations

import argparse
import os
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from protocol import _codegen, codec  # noqa: E402
from protocol.messages import FetchRequest, MetadataResponse, ProduceRequest, ProduceResponse  # noqa: E402


def _produce_request():
    from protocol.records import Record, build_batch

    batch = build_batch([Record(0, int(time.time() * 1000), None, os.urandom(100), [])])
    return ProduceRequest(acks=-1, timeout_ms=30000, topic_data=[ProduceRequest.TopicProduceData(
        name="bench", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=batch)])])


def _produce_response():
    R = ProduceResponse
    return R(responses=[R.TopicProduceResponse(name="bench", partition_responses=[R.PartitionProduceResponse(
        index=0, error_code=0, base_offset=5, log_append_time_ms=-1, log_start_offset=0)])])


def _fetch_request():
    return FetchRequest(max_wait_ms=500, min_bytes=1, max_bytes=50 << 20, session_epoch=-1, topics=[
        FetchRequest.FetchTopic(topic="bench", partitions=[FetchRequest.FetchPartition(
            partition=p, fetch_offset=1000 + p, partition_max_bytes=1 << 20) for p in range(100)])])


def _metadata_response(partitions: int):
    M = MetadataResponse
    parts = [M.MetadataResponsePartition(partition_index=p, leader_id=0, leader_epoch=0, replica_nodes=[0],
                                         isr_nodes=[0], offline_replicas=[]) for p in range(partitions)]
    return M(brokers=[M.MetadataResponseBroker(node_id=0, host="127.0.0.1", port=9092)], cluster_id="c",
             controller_id=0, topics=[M.MetadataResponseTopic(name="bench", topic_id=uuid.uuid4(),
                                                              partitions=parts)])


def _time(fn, seconds: float) -> float:
    """CPU µs per call, repeated for about ``seconds``."""
    n = 1
    while True:
        t = time.thread_time()
        for _ in range(n):
            fn()
        dt = time.thread_time() - t
        if dt >= seconds:
            return dt / n * 1e6
        n *= 2


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=0.5, help="CPU time per measurement (0.5)")
    ap.add_argument("--partitions", type=int, default=10000, help="Metadata response partitions (10000)")
    args = ap.parse_args(argv)
    if not _codegen.FAST_CODEC:
        print("protocol/_fastwire.c is not built (make venv builds it)", file=sys.stderr)
        return 1
    cases = [("ProduceRequest", 9, _produce_request()), ("ProduceResponse", 9, _produce_response()),
             ("FetchRequest", 12, _fetch_request()), ("MetadataResponse", 12, _metadata_response(args.partitions))]
    print(f"| message | decode compiled µs | decode Python µs | encode compiled µs | encode Python µs |")
    print("|---|---:|---:|---:|---:|")
    for name, version, msg in cases:
        raw = memoryview(bytearray(codec.encode_body(msg, version)))
        row = []
        for get in (_codegen.get_decoder, _codegen.python_decoder):
            fn = get(name, version)
            row.append(_time(lambda: fn(raw, 0), args.seconds))
        for get in (_codegen.get_encoder, _codegen.python_encoder):
            fn = get(name, version)
            row.append(_time(lambda: fn(msg, bytearray(), []), args.seconds))
        label = f"{name} v{version}" + (f" ({args.partitions:,} partitions)" if name == "MetadataResponse" else "")
        print(f"| {label} | " + " | ".join(f"{x:,.2f}" for x in row) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
