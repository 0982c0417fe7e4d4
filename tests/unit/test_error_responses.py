"""protocol.error_responses: for every API the broker serves, at every version, the error
response to a request naming one topic / partition / group / resource in each of its
lists encodes, and carries UNKNOWN_SERVER_ERROR everywhere the response has an error
code, one entry per entry of the request (Kafka's getErrorResponse)."""

from __future__ import annotations

import uuid

import pytest

from broker.dispatcher import SUPPORTED
from protocol import codec
from protocol.error_responses import error_response
from protocol.messages import get_class

UNKNOWN = -1


def _sample(cls, spec, version, top):
    kwargs = {}
    for f in spec.fields:
        if version not in f.versions:
            continue
        if f.is_array and f.struct is not None:
            kwargs[f.py_name] = [_sample(getattr(top, f.struct.name), f.struct, version, top)]
        elif f.is_array:
            kwargs[f.py_name] = {"[]string": ["x"], "[]int32": [3], "[]int64": [3], "[]int16": [3],
                                 "[]uuid": [uuid.uuid4()]}.get(f.type, [])
        elif f.struct is not None:
            kwargs[f.py_name] = _sample(getattr(top, f.struct.name), f.struct, version, top)
        elif f.type == "string":
            kwargs[f.py_name] = "x"
    return cls(**kwargs)


def _errors(obj, spec, version, out):
    """Every error_code of ``obj`` that its version carries on the wire."""
    for f in spec.fields:
        if version not in f.versions:
            continue
        v = getattr(obj, f.py_name)
        if f.py_name == "error_code" or f.py_name.endswith("_error_code"):
            out.append(v)
        elif f.is_array and f.struct is not None:
            for item in v:
                _errors(item, f.struct, version, out)
        elif f.struct is not None:
            _errors(v, f.struct, version, out)
    return out


CASES = [(k, v) for k, (lo, hi, h) in sorted(SUPPORTED.items()) if h is not None and k != 18
         for v in range(lo, hi + 1)]


@pytest.mark.parametrize("api_key,version", CASES, ids=[f"{codec.API_KEYS[k]}-v{v}" for k, v in CASES])
def test_every_served_api_has_an_error_response(api_key, version):
    req_cls = codec.request_class(api_key)
    request = _sample(req_cls, req_cls._struct_spec, version, req_cls)
    codec.encode_body(request, version)  # a valid request of that version
    resp = error_response(api_key, version, request, message="boom")
    data = codec.encode_body(resp, version)
    back, _ = codec.decode_body(codec.response_class(api_key), version, data)
    errors = _errors(back, back._struct_spec, version, [])
    assert errors, f"{codec.API_KEYS[api_key]} v{version}: no error code in {back}"
    assert set(errors) == {UNKNOWN}, back


def test_partitions_and_names_are_answered_one_for_one():
    from protocol.messages import FetchRequest, ProduceRequest

    req = ProduceRequest(acks=-1, timeout_ms=100, topic_data=[
        ProduceRequest.TopicProduceData(name="a", partition_data=[ProduceRequest.PartitionProduceData(index=0),
                                                                   ProduceRequest.PartitionProduceData(index=4)]),
        ProduceRequest.TopicProduceData(name="b", partition_data=[ProduceRequest.PartitionProduceData(index=1)])])
    resp = error_response(0, 9, req)
    assert [(t.name, [(p.index, p.error_code) for p in t.partition_responses]) for t in resp.responses] == [
        ("a", [(0, UNKNOWN), (4, UNKNOWN)]), ("b", [(1, UNKNOWN)])]
    fid = uuid.uuid4()
    req = FetchRequest(topics=[FetchRequest.FetchTopic(topic="t", topic_id=fid, partitions=[
        FetchRequest.FetchPartition(partition=2)])])
    old = error_response(1, 12, req)
    assert [(r.topic, [(p.partition_index, p.error_code) for p in r.partitions]) for r in old.responses] == [
        ("t", [(2, UNKNOWN)])]
    new = error_response(1, 13, req)
    assert new.responses[0].topic_id == fid


def test_groups_named_by_string_are_answered_by_name():
    req = get_class("DescribeGroupsRequest")(groups=["g1", "g2"])
    resp = error_response(15, 5, req)
    assert [(g.group_id, g.error_code) for g in resp.groups] == [("g1", UNKNOWN), ("g2", UNKNOWN)]
    req = get_class("DeleteGroupsRequest")(groups_names=["x"])
    assert [(r.group_id, r.error_code) for r in error_response(42, 2, req).results] == [("x", UNKNOWN)]
