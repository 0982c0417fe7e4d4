"""Fetch rules of SPEC section 8 over a raw connection: long polling (min_bytes /
max_wait_ms), the v3+ max_bytes rule (at least one whole batch for the first partition
with data), OFFSET_OUT_OF_RANGE, and an empty record set at the log end.

Requests are built with Chronolog's codec, which is tested byte-for-byte against
kafka-python and aiokafka; the bounds on elapsed time are behaviour (a parked request
must wait, an append must wake it), not speed targets, so they are wide."""

import threading
import time

import pytest

from protocol import codec
from protocol.messages import FetchRequest, RequestHeader

from tests.integration.helpers import RawConn, make_records, now_ms, produce

pytestmark = pytest.mark.timeout(120)

FETCH = 1


def fetch(conn, topic, offset, *, version=11, min_bytes=1, max_wait_ms=0, max_bytes=50 * 1024 * 1024,
          partition_max_bytes=1024 * 1024, correlation_id=1):
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            FetchRequest.FetchTopic(
                topic=topic,
                partitions=[
                    FetchRequest.FetchPartition(
                        partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    header = RequestHeader(api_key=FETCH, api_version=version, correlation_id=correlation_id, client_id="t")
    conn.send(codec.encode_request(header, req))
    cid, resp = codec.decode_response(FETCH, version, conn.recv_frame())
    assert cid == correlation_id
    (part,) = resp.responses[0].partitions
    return part


def test_fetch_at_log_end_waits_for_max_wait_then_returns_empty(broker, new_topic):
    topic = new_topic()
    produce("kp", broker.bootstrap, topic, make_records(3, now_ms()))
    with RawConn(broker.port) as conn:
        t0 = time.monotonic()
        part = fetch(conn, topic, 3, max_wait_ms=1500)
        waited = time.monotonic() - t0
    assert part.error_code == 0 and part.high_watermark == 3
    assert len(part.records) == 0, "nothing past the log end: an empty record set"
    assert waited >= 1.4, f"a fetch with nothing to read must be parked for max_wait_ms, returned after {waited:.2f} s"


def test_parked_fetch_is_woken_by_an_append(broker, new_topic):
    topic = new_topic()
    produce("kp", broker.bootstrap, topic, make_records(2, now_ms()))
    timer = threading.Timer(1.0, lambda: produce("kp", broker.bootstrap, topic, make_records(1, now_ms())))
    timer.start()
    try:
        with RawConn(broker.port, timeout=40) as conn:
            t0 = time.monotonic()
            part = fetch(conn, topic, 2, max_wait_ms=30_000)
            waited = time.monotonic() - t0
    finally:
        timer.join()
    assert part.error_code == 0
    assert len(part.records) > 0 and part.high_watermark == 3
    assert waited < 25, f"the append should wake the parked fetch long before max_wait_ms (waited {waited:.1f} s)"


def test_min_bytes_not_reached_keeps_waiting_until_max_wait(broker, new_topic):
    topic = new_topic()
    produce("kp", broker.bootstrap, topic, make_records(1, now_ms()))
    with RawConn(broker.port) as conn:
        t0 = time.monotonic()
        part = fetch(conn, topic, 0, min_bytes=10 * 1024 * 1024, max_wait_ms=1200)
        waited = time.monotonic() - t0
    assert part.error_code == 0 and len(part.records) > 0, "after max_wait_ms the available bytes are returned"
    assert waited >= 1.1, f"min_bytes was not reached, the fetch must wait for max_wait_ms (returned after {waited:.2f} s)"



def test_an_append_short_of_min_bytes_parks_the_fetch_again_until_one_reaches_it(broker, new_topic):
    """A woken fetch still short of min_bytes waits again, to the same deadline; a later
    append that brings min_bytes answers it at once, with both batches."""
    topic = new_topic()
    small = threading.Timer(0.5, lambda: produce("kp", broker.bootstrap, topic, make_records(1, now_ms())))
    enough = threading.Timer(1.5, lambda: produce("kp", broker.bootstrap, topic, make_records(
        1, now_ms(), value_size=3000)))
    small.start()
    enough.start()
    try:
        with RawConn(broker.port, timeout=40) as conn:
            t0 = time.monotonic()
            part = fetch(conn, topic, 0, min_bytes=2000, max_wait_ms=30_000)
            waited = time.monotonic() - t0
    finally:
        small.join()
        enough.join()
    assert part.error_code == 0 and part.high_watermark == 2
    assert len(part.records) > 3000, "both batches are answered"
    assert 1.3 < waited < 20, f"answered by the second append (after {waited:.2f} s)"

def test_first_batch_returned_whole_even_above_max_bytes(broker, new_topic):
    topic = new_topic()
    recs = make_records(1, now_ms(), value_size=20_000)
    produce("kp", broker.bootstrap, topic, recs)
    with RawConn(broker.port) as conn:
        part = fetch(conn, topic, 0, max_bytes=100, partition_max_bytes=100)
    assert part.error_code == 0
    size = len(part.records)
    assert size > 20_000, f"v3+ must return the first batch whole (got {size} bytes)"
    batch_length = int.from_bytes(bytes(part.records[8:12]), "big")
    assert size == batch_length + 12, "exactly one whole batch"


def test_offset_out_of_range_both_sides(broker, new_topic):
    topic = new_topic()
    produce("kp", broker.bootstrap, topic, make_records(2, now_ms()))
    with RawConn(broker.port) as conn:
        beyond = fetch(conn, topic, 3, correlation_id=2)
        below = fetch(conn, topic, -5, correlation_id=3)
    assert beyond.error_code == 1 and beyond.high_watermark == 2
    assert below.error_code == 1
