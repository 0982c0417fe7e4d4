"""broker/_metrics.c against its reference, BrokerMetrics' Python methods.

Each BrokerMetrics puts the compiled request_done and produced in place of its methods.
The same random calls go to one that does and to one whose instance hooks are removed
(the Python methods, as without the extension); every exposed sample must match, and so
must what each refuses.
"""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from broker import metrics as M
from broker.metrics import BrokerMetrics
from protocol.messages import FetchResponse, MetadataResponse, ProduceResponse
from tests.unit.test_codec_roundtrip import message_strategy

P = ProduceResponse.PartitionProduceResponse
T = ProduceResponse.TopicProduceResponse


def test_the_extension_is_built_and_used():
    m = BrokerMetrics(process_metrics=False)
    assert M.COMPILED
    assert type(m.request_done).__name__ == "Hook" and type(m.produced).__name__ == "Hook"


def _pair():
    compiled, python = BrokerMetrics(process_metrics=False), BrokerMetrics(process_metrics=False)
    del python.request_done, python.produced  # the class's methods: the reference
    assert type(python.request_done).__name__ == "method"
    for m in (compiled, python):
        m.topic_exists = lambda topic: not topic.startswith("gone")
    return compiled, python


def _response(rng):
    kind = rng.randrange(4)
    codes = (0, 0, 0, 3, 6, 32, 87, 12345, -1)
    if kind == 0:
        return rng.choice(range(-2, 1000)), None  # acks=0: no answer
    if kind == 1:
        return 0, ProduceResponse(responses=[
            T(name=f"t{t}", partition_responses=[P(index=p, error_code=rng.choice(codes))
                                                 for p in range(rng.randrange(3))])
            for t in range(rng.randrange(3))], throttle_time_ms=0)
    if kind == 2:
        return 1, FetchResponse(error_code=rng.choice(codes), responses=[
            FetchResponse.FetchableTopicResponse(topic="f", partitions=[
                FetchResponse.PartitionData(partition_index=p, error_code=rng.choice(codes))
                for p in range(rng.randrange(3))])])
    return 3, MetadataResponse(topics=[MetadataResponse.MetadataResponseTopic(name="x", error_code=rng.choice(codes))])


def _seconds(rng):
    return rng.choice((0.0, 0.0001, 0.00025, 0.001, 30.0, 31.0, 1e9, -1.0, float("nan"), rng.random() / 100,
                       rng.random() * 40))


def _produced_args(rng):
    names = ("a", "b", "gone-1")
    responses = [T(name=rng.choice(names), partition_responses=[
        P(index=p, error_code=rng.choice((0, 0, 3, 47))) for p in range(rng.randrange(4))])
        for _ in range(rng.randrange(4))]
    tally = {}
    for topic in rng.sample(("a", "b", "c"), rng.randrange(4)):
        delays = rng.choice((None, [], [rng.choice((-5, 0, 1, 999, 1000, 4095, 4096, 4097, 10**7, 2**70, -2**70))
                                        for _ in range(rng.randrange(1, 4))]))
        tally[topic] = [rng.randrange(10**6), rng.randrange(1, 10**4), delays]
    return responses, tally


def test_random_calls_leave_the_same_samples():
    rng = random.Random(20261127)
    compiled, python = _pair()
    for step in range(3000):
        what = rng.randrange(10)
        if what < 5:
            api_key, response = _response(rng)
            seconds = _seconds(rng)
            for m in (compiled, python):
                m.request_done(api_key, response, seconds)
        elif what < 9:
            responses, tally = _produced_args(rng)
            for m in (compiled, python):
                m.produced(responses, tally)
        else:
            topic = rng.choice(("a", "b", "c"))
            for m in (compiled, python):
                m.topic_deleted(topic)
        if step % 500 == 0:
            assert compiled.exposition() == python.exposition()
    assert compiled.exposition() == python.exposition()
    text = compiled.exposition().decode()
    # every path was taken: errors counted, delays negative and past the table, a series
    # left out for a topic the broker does not have
    for needle in ('chronolog_request_errors_total{api="Produce",error="NOT_LEADER_OR_FOLLOWER"}',
                   'error="12345"', 'chronolog_produce_append_delay_negative_total{topic="a"}',
                   'chronolog_produce_append_delay_seconds_bucket{le="+Inf",topic="b"}',
                   'chronolog_topic_failed_produce_requests_total{topic="a"}'):
        assert needle in text
    assert 'topic="gone-1"' not in text


@pytest.mark.parametrize("tally", [
    {"a": [1, 2]},                       # not three
    {"a": 7},                            # not a sequence
    {"a": [1, 2, 3]},                    # delays not a list
    {"a": [1, 2, ["x"]]},                # a delay not an int
    {"a": ["x", 2, None]},               # bytes that do not add
])
def test_a_bad_tally_is_refused_by_both(tally):
    for m in _pair():
        with pytest.raises((TypeError, ValueError)):
            m.produced([], tally)


def test_a_bad_call_is_refused():
    compiled, _ = _pair()
    with pytest.raises(TypeError):
        compiled.request_done(0, None)
    with pytest.raises(TypeError):
        compiled.produced([], [])
    with pytest.raises(TypeError):
        compiled.request_done(0, None, seconds=1.0)


def _response_cases():
    from protocol.schema import load_message, message_names

    return [(n, max(load_message(n).valid_versions)) for n in sorted(message_names()) if n.endswith("Response")]


@pytest.mark.parametrize("name,version", _response_cases(), ids=lambda v: str(v))
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_compiled_walk_finds_the_codes_the_python_walk_finds(name, version, data):
    """Every response message, random: the error codes broker/_metrics.c's walk finds over
    the class's plan are the ones (in the same order) of the walk compiled in Python."""
    from broker import _metrics
    from broker.metrics import _ErrorCodeWalker

    msg = data.draw(message_strategy(name, version, tagged=True, unknown_tags=False))
    walker = _ErrorCodeWalker()
    expected, got = [], []
    walker.walk_of(type(msg))(msg, expected)
    _metrics.walk(walker.plan_of(type(msg)), msg, got)
    assert got == expected
