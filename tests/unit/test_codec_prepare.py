"""What a pair (api key, version) needs before its first request: protocol.codec.prepare
builds the plans of every version of the keys it is given, one pair per step, and the
broker takes those steps for FIRST_SECONDS_API_KEYS between requests once it listens;
the generated Python function behind a compiled runner (its fallback) is generated only
when some input needs it.

The codec's caches are the process's, which other tests fill: each test runs in a fresh
interpreter, whose caches are empty."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _fresh(code: str) -> dict:
    """``code`` run in a new interpreter, which prints one JSON object."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_prepare_makes_every_version_of_each_key_one_step_each():
    out = _fresh("""
import json
from protocol import codec, schema
keys = (0, 1)  # Produce, Fetch
versions = {k: list(schema.load_message(codec._REQ_NAMES[k]).valid_versions) for k in keys}
before = sorted(p for p in codec._REQ_PLANS if p[0] in keys)
steps = codec.prepare(keys)
next(steps)
after_one = sorted(p for p in codec._REQ_PLANS if p[0] in keys)
rest = sum(1 for _ in steps)
print(json.dumps({"versions": versions, "before": before, "after_one": after_one, "steps": 1 + rest,
                  "req": sorted(p for p in codec._REQ_PLANS if p[0] in keys),
                  "resp": sorted(p for p in codec._RESP_PLANS if p[0] in keys),
                  "compiled": sorted(k for k in codec.REQUEST_TABLE if k >> 16 in keys) if codec.FAST_CODEC else None,
                  "fast": codec.FAST_CODEC}))
""")
    pairs = [[k, v] for k in (0, 1) for v in out["versions"][str(k)]]
    assert out["before"] == []
    assert out["after_one"] == [pairs[0]]  # a step is one pair
    assert out["steps"] == len(pairs)
    assert out["req"] == pairs and out["resp"] == pairs
    assert out["fast"], "protocol/_fastwire.c is not built"
    assert out["compiled"] == sorted(k << 16 | v for k, v in pairs)


def test_an_unknown_api_key_is_named():
    out = _fresh("""
import json
from protocol import codec
try:
    list(codec.prepare([0, 9999]))
    print(json.dumps({"error": None}))
except ValueError as exc:
    print(json.dumps({"error": str(exc)}))
""")
    assert out["error"] == "unknown api key 9999"


def test_the_python_fallback_is_generated_by_the_first_input_that_needs_it():
    out = _fresh("""
import json
from protocol import _codegen, codec
from protocol.messages import ProduceRequest, RequestHeader
from protocol.records import build_batch
list(codec.prepare([0]))
made_by_prepare = sorted(k for k in _codegen._dec_cache if k[0] == "ProduceRequest")
header = RequestHeader(api_key=0, api_version=9, correlation_id=7, client_id="t")
frame = codec.encode_request(header, ProduceRequest(transactional_id=None, acks=1, timeout_ms=1000, topic_data=[
    ProduceRequest.TopicProduceData(name="t", partition_data=[
        ProduceRequest.PartitionProduceData(index=0, records=build_batch([(1, None, b"v")]))])]))[4:]
h, req = codec.decode_request(frame)
after_valid = sorted(k for k in _codegen._dec_cache if k[0] == "ProduceRequest")
try:
    codec.decode_request(frame[:30])  # cut inside the body
    error = None
except codec.DecodeError as exc:
    error = str(exc)
after_bad = sorted(k for k in _codegen._dec_cache if k[0] == "ProduceRequest")
print(json.dumps({"prepare": made_by_prepare, "valid": after_valid, "bad": after_bad, "error": error,
                  "topic": req.topic_data[0].name}))
""")
    assert out["prepare"] == [] and out["valid"] == []  # compiled plans only, so far
    assert out["topic"] == "t"
    assert out["error"] and "ProduceRequest" in out["error"]  # the generated decoder's message
    assert ["ProduceRequest", 9, False] in out["bad"]  # the fallback, generated now


def test_the_broker_prepares_between_loop_turns_after_it_listens():
    out = _fresh("""
import asyncio, json
from broker import server
from protocol import codec, schema
total = sum(len(list(schema.load_message(codec._REQ_NAMES[k]).valid_versions)) for k in server.FIRST_SECONDS_API_KEYS)
seen = []

async def main():
    task = asyncio.ensure_future(server._prepare_codec())
    await asyncio.sleep(0)
    while not task.done():  # what a request arriving now would find: some pairs made, not all
        seen.append(len(codec._REQ_PLANS))
        await asyncio.sleep(0)
    await task

asyncio.run(main())
print(json.dumps({"total": total, "seen": seen,
                  "missing": [[k, v] for k in server.FIRST_SECONDS_API_KEYS
                              for v in schema.load_message(codec._REQ_NAMES[k]).valid_versions
                              if (k, v) not in codec._REQ_PLANS or (k, v) not in codec._RESP_PLANS]}))
""")
    assert out["missing"] == []
    assert len(out["seen"]) >= out["total"] - 1  # the loop turned between pairs
    assert out["seen"][0] < out["total"]
