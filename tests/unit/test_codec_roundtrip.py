"""Property tests: decode(encode(x)) == x for random messages generated from the schemas.

The strategies here (``message_strategy``) are also used by the oracle tests in
``test_codec_oracles.py``.
"""

from __future__ import annotations

import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol._codegen import get_class
from protocol.schema import FIXED_FORMATS, FieldSpec, StructSpec, load_message, message_names

_INT_BOUNDS = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)


def _scalar(draw, typ: str, nullable: bool, for_oracle: bool):
    if nullable and draw(st.integers(0, 4)) == 0:
        return None
    if typ in _INT_BOUNDS:
        lo, hi = _INT_BOUNDS[typ]
        return draw(st.integers(lo, hi) | st.sampled_from([lo, hi, 0, -1 if lo < 0 else 1]))
    if typ == "bool":
        return draw(st.booleans())
    if typ == "float64":
        return draw(st.floats(allow_nan=False))
    if typ == "string":
        return draw(_text)
    if typ in ("bytes", "records"):
        return draw(st.binary(max_size=24))
    if typ == "uuid":
        return uuid.UUID(int=draw(st.integers(0, 2**128 - 1)))
    raise AssertionError(typ)


def draw_struct(draw, cls: type, sspec: StructSpec, version: int, flexible: bool, *,
                tagged: bool = True, unknown_tags: bool = True, depth: int = 0,
                for_oracle: bool = False):
    """A random instance of ``cls`` valid for ``version``: fields absent in the version
    keep their defaults; tagged fields (when ``tagged``) and unknown tags (when
    ``unknown_tags``) are random in flexible versions."""
    obj = cls()
    for f in sspec.fields:
        if not f.present_in(version):
            continue
        if f.tagged_in(version) and not tagged:
            continue
        setattr(obj, f.py_name, draw_field(draw, cls, f, version, flexible, tagged=tagged,
                                            unknown_tags=unknown_tags, depth=depth,
                                            for_oracle=for_oracle))
    if flexible and unknown_tags and draw(st.integers(0, 3)) == 0:
        known = {f.tag for f in sspec.fields if f.tagged_in(version)}
        tags = draw(st.dictionaries(st.integers(0, 300).filter(lambda t: t not in known),
                                    st.binary(max_size=6), max_size=3))
        obj._unknown_tags = tags or None
    return obj


def draw_field(draw, owner: type, f: FieldSpec, version: int, flexible: bool, **kw):
    nullable = f.nullable_in(version)
    depth = kw["depth"]
    if f.is_array:
        if nullable and draw(st.integers(0, 4)) == 0:
            return None
        n = draw(st.integers(0, 3 if depth < 2 else 1))
        if f.is_struct:
            sub = getattr(_top_class(owner), f.struct.name)
            return [draw_struct(draw, sub, f.struct, version, flexible, **{**kw, "depth": depth + 1})
                    for _ in range(n)]
        return [_scalar(draw, f.elem_type, False, kw["for_oracle"]) for _ in range(n)]
    if f.is_struct:
        if nullable and draw(st.integers(0, 3)) == 0:
            return None
        sub = getattr(_top_class(owner), f.struct.name)
        return draw_struct(draw, sub, f.struct, version, flexible, **{**kw, "depth": depth + 1})
    return _scalar(draw, f.type, nullable, kw["for_oracle"])


def _top_class(cls: type) -> type:
    name = cls.__qualname__.split(".")[0]
    return get_class(name)


@st.composite
def message_strategy(draw, name: str, version: int, *, tagged: bool = True,
                     unknown_tags: bool = True, for_oracle: bool = False):
    spec = load_message(name)
    cls = get_class(name)
    return draw_struct(draw, cls, spec.struct, version, spec.is_flexible(version),
                       tagged=tagged, unknown_tags=unknown_tags, for_oracle=for_oracle)


# ---------------------------------------------------------------------------------------

SAMPLE_APIS = [
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "CreateTopics",
    "DeleteTopics", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
    "OffsetCommit", "OffsetFetch", "DescribeGroups", "ListGroups", "InitProducerId",
    "ConsumerGroupHeartbeat", "DescribeTopicPartitions", "DescribeConfigs",
    "IncrementalAlterConfigs", "AddPartitionsToTxn", "TxnOffsetCommit", "DescribeCluster",
    "OffsetForLeaderEpoch", "DescribeQuorum", "ShareFetch", "UpdateMetadata", "LeaderAndIsr",
]

CASES = [
    (api + suffix, v)
    for api in SAMPLE_APIS
    for suffix in ("Request", "Response")
    for v in load_message(api + suffix).valid_versions
]


@pytest.mark.parametrize("name,version", CASES, ids=[f"{n}-v{v}" for n, v in CASES])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_body(name, version, data):
    msg = data.draw(message_strategy(name, version))
    encoded = codec.encode_body(msg, version)
    decoded, end = codec.decode_body(name, version, encoded)
    assert end == len(encoded)
    assert decoded == msg
    # re-encoding the decoded message gives the same bytes (unknown tags written back)
    assert codec.encode_body(decoded, version) == encoded


REQUEST_CASES = [(n, v) for n, v in CASES if n.endswith("Request")]


@pytest.mark.parametrize("name,version", REQUEST_CASES, ids=[f"{n}-v{v}" for n, v in REQUEST_CASES])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_request_frame(name, version, data):
    from protocol.messages import RequestHeader

    msg = data.draw(message_strategy(name, version))
    client_id = data.draw(st.none() | _text)
    header = RequestHeader(api_key=msg.API_KEY, api_version=version,
                           correlation_id=data.draw(st.integers(-(2**31), 2**31 - 1)),
                           client_id=client_id)
    frame = codec.encode_request(header, msg)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    h2, body = codec.decode_request(frame[4:])
    expected_header = RequestHeader(api_key=header.api_key, api_version=version,
                                    correlation_id=header.correlation_id,
                                    client_id=client_id if codec.request_header_version(
                                        header.api_key, version) > 0 else "")
    assert h2 == expected_header
    assert body == msg


RESPONSE_CASES = [(n, v) for n, v in CASES if n.endswith("Response")]


@pytest.mark.parametrize("name,version", RESPONSE_CASES, ids=[f"{n}-v{v}" for n, v in RESPONSE_CASES])
@settings(max_examples=5, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_response_frame(name, version, data):
    msg = data.draw(message_strategy(name, version))
    corr = data.draw(st.integers(-(2**31), 2**31 - 1))
    frame = codec.encode_response_bytes(msg.API_KEY, version, corr, msg)
    assert int.from_bytes(frame[:4], "big", signed=True) == len(frame) - 4
    corr2, body = codec.decode_response(msg.API_KEY, version, frame[4:])
    assert corr2 == corr
    assert body == msg


ALL_CASES = [
    (n, v)
    for n in message_names()
    if load_message(n).type in ("request", "response", "data", "header")
    for v in load_message(n).valid_versions
]


@pytest.mark.parametrize("name,version", ALL_CASES, ids=[f"{n}-v{v}" for n, v in ALL_CASES])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_roundtrip_every_message(name, version, data):
    """Every message of every schema file, every version (fewer examples each)."""
    msg = data.draw(message_strategy(name, version))
    encoded = codec.encode_body(msg, version)
    decoded, end = codec.decode_body(name, version, encoded)
    assert end == len(encoded)
    assert decoded == msg
