"""Byte-for-byte comparison with independent Kafka protocol implementations.

Oracles:

* **kafka-python 3 (JSON)** - ``kafka.protocol.{producer,consumer,metadata,admin}``:
  schema-driven classes generated from (a newer copy of) Kafka's JSON files, with their
  own encoder/decoder; they model tagged fields, so random tagged fields are used.
  Their JSON is from a newer Kafka, so only versions both sides support are compared
  (wire formats of released versions never change).
* **kafka-python legacy** - ``kafka.protocol.old``: hand-written Struct schemas.
* **aiokafka** - ``aiokafka.protocol``: hand-written Struct schemas (a fork of the legacy
  kafka-python ones).

The legacy Struct oracles do not model tagged fields (each flexible struct ends with a
raw ``TaggedFields`` dict), so their comparisons use messages whose known tagged fields
are at their defaults and without unknown tags.  Moreover aiokafka's
``TaggedFields.encode`` is known broken for a non-empty dict (it writes tag and value
but not the value's size varint), so aiokafka is never asked to *encode* non-empty
tagged fields; its decoder, which is correct, is checked against our non-empty unknown
tags in ``test_aiokafka_decodes_our_unknown_tags``.

Conversion between our objects and the legacy Structs is positional (field order of the
version), so differences in field naming between the implementations do not matter.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import codec
from protocol._codegen import get_class
from protocol.messages import RequestHeader
from protocol.schema import StructSpec, load_message

from tests.unit.test_codec_roundtrip import message_strategy

ORACLE_APIS = [
    "ApiVersions", "Metadata", "Produce", "Fetch", "ListOffsets", "CreateTopics",
    "DeleteTopics", "FindCoordinator", "JoinGroup", "SyncGroup", "Heartbeat", "LeaveGroup",
    "OffsetCommit", "OffsetFetch", "DescribeGroups", "ListGroups", "InitProducerId",
]

CLIENT_ID = "oracle-client"
SETTINGS = settings(max_examples=6, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])


def _regular(sspec: StructSpec, v: int):
    return [f for f in sspec.fields if f.present_in(v) and not f.tagged_in(v)]


def _tagged(sspec: StructSpec, v: int):
    return [f for f in sspec.fields if f.tagged_in(v)]


def _oracle_fixups(msg):
    """Both kafka-python flavours decode an ApiVersionsResponse whose error_code is not 0
    with the v0 schema (the client side of the KIP-511 fallback), whatever the version;
    so the oracles are only given error_code 0 (our v0 fallback encoding is tested in
    test_codec.py)."""
    if type(msg).__name__ == "ApiVersionsResponse":
        msg.error_code = 0


# =======================================================================================
# kafka-python 3 (JSON schema classes)

def _kp_classes() -> dict[str, type]:
    out = {}
    for modname in ("kafka.protocol.producer", "kafka.protocol.consumer",
                    "kafka.protocol.metadata", "kafka.protocol.admin"):
        mod = importlib.import_module(modname)
        for name in dir(mod):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and hasattr(obj, "_struct") and getattr(obj, "_json", None):
                if obj._json.get("type") in ("request", "response"):
                    out[obj._json["name"]] = obj
    return out


KP = _kp_classes()


def _kp_versions(name: str):
    ours = load_message(name).valid_versions
    theirs = KP[name]._json["validVersions"]
    lo, hi = (int(x) for x in theirs.split("-")) if "-" in theirs else (int(theirs), int(theirs))
    return [v for v in ours if lo <= v <= hi]


def _to_kp(obj, sspec: StructSpec, kfield, v: int, top_cls=None):
    """Our struct instance -> kafka-python DataContainer (positional + by tag)."""
    untagged = kfield.untagged_fields(v)
    ours = _regular(sspec, v)
    assert [f.name for f in untagged] == [f.py_name for f in ours] or len(untagged) == len(ours), (
        sspec.name, [f.name for f in untagged], [f.py_name for f in ours])
    kwargs = {}
    for kf, of in zip(untagged, ours):
        kwargs[kf.name] = _to_kp_value(getattr(obj, of.py_name), of, kf, v)
    ktagged = {f.tag: f for f in kfield._fields if f.for_version_q(v) and f.tagged_field_q(v)}
    defaults = type(obj)()
    for of in _tagged(sspec, v):
        kf = ktagged[of.tag]
        val = getattr(obj, of.py_name)
        # kafka-python writes every tagged field given to the constructor; Kafka (and
        # we) write only those that differ from the default
        if val != getattr(defaults, of.py_name):
            kwargs[kf.name] = _to_kp_value(val, of, kf, v)
    cls = top_cls or kfield.data_class
    return cls(version=v, **kwargs)


def _is_bitfield(kf) -> bool:
    return getattr(getattr(kf, "_type", None), "__name__", "") == "BitField"


def _to_kp_value(val, of, kf, v):
    if _is_bitfield(kf):
        # kafka-python models *AuthorizedOperations int32 bit fields as sets of bit
        # numbers ({31}, i.e. INT32_MIN, is None)
        return None if val == -(2**31) else {b for b in range(32) if val & (1 << b)}
    if val is None:
        return None
    if of.is_array and of.is_struct:
        return [_to_kp(x, of.struct, kf.array_of, v) for x in val]
    if of.is_struct:
        return _to_kp(val, of.struct, kf, v)
    if isinstance(val, memoryview):
        return bytes(val)
    return val


def _from_kp(kobj, cls, sspec: StructSpec, kfield, v: int):
    """kafka-python DataContainer -> our struct instance."""
    obj = cls()
    for kf, of in zip(kfield.untagged_fields(v), _regular(sspec, v)):
        setattr(obj, of.py_name, _from_kp_value(getattr(kobj, kf.name), of, kf, v, cls))
    ktagged = {f.tag: f for f in kfield._fields if f.for_version_q(v) and f.tagged_field_q(v)}
    for of in _tagged(sspec, v):
        kf = ktagged[of.tag]
        setattr(obj, of.py_name, _from_kp_value(getattr(kobj, kf.name), of, kf, v, cls))
    return obj


def _from_kp_value(val, of, kf, v, owner):
    top = get_class(owner.__qualname__.split(".")[0])
    if _is_bitfield(kf):
        if val is None:
            return -(2**31)
        x = sum(1 << b for b in val)
        return x - 2**32 if x >= 2**31 else x
    if val is None:
        if of.type == "uuid":
            return uuid.UUID(int=0)  # kafka-python decodes the all-zero UUID to None
        if of.is_struct and not of.is_array and not of.nullable_in(v) and of.tagged_in(v):
            # kafka-python leaves an absent tagged struct as None; Kafka (and we) use
            # a default instance
            return getattr(top, of.struct.name)()
        return None
    if of.is_array and of.is_struct:
        sub = getattr(top, of.struct.name)
        return [_from_kp(x, sub, of.struct, kf.array_of, v) for x in val]
    if of.is_struct:
        return _from_kp(val, getattr(top, of.struct.name), of.struct, kf, v)
    return val


KP_REQUEST_CASES = [
    (api + "Request", v) for api in ORACLE_APIS if api + "Request" in KP
    for v in _kp_versions(api + "Request")
]
KP_RESPONSE_CASES = [
    (api + "Response", v) for api in ORACLE_APIS if api + "Response" in KP
    for v in _kp_versions(api + "Response")
]


def test_kafka_python_oracle_covers_all_apis():
    for api in ORACLE_APIS:
        assert api + "Request" in KP and api + "Response" in KP, api
    assert len(KP_REQUEST_CASES) > 100


@pytest.mark.parametrize("name,version", KP_REQUEST_CASES, ids=[f"{n}-v{v}" for n, v in KP_REQUEST_CASES])
@SETTINGS
@given(data=st.data())
def test_request_bytes_match_kafka_python(name, version, data):
    msg = data.draw(message_strategy(name, version, unknown_tags=False))
    _oracle_fixups(msg)
    corr = data.draw(st.integers(0, 2**31 - 1))
    ours = codec.encode_request(
        RequestHeader(api_key=msg.API_KEY, api_version=version, correlation_id=corr, client_id=CLIENT_ID), msg)
    kcls = KP[name]
    kobj = _to_kp(msg, load_message(name).struct, kcls._struct, version, top_cls=kcls)
    kobj.with_header(correlation_id=corr, client_id=CLIENT_ID)
    theirs = kobj.encode(header=True, framed=True)
    assert ours == theirs
    # and they decode what we wrote to the same message
    kdec = kcls.decode(ours[4:], version=version, header=True)
    assert kdec.header.correlation_id == corr
    assert _from_kp(kdec, type(msg), load_message(name).struct, kcls._struct, version) == msg
    # and we decode what they wrote
    h, body = codec.decode_request(theirs[4:])
    assert (h.api_key, h.api_version, h.correlation_id, h.client_id) == (msg.API_KEY, version, corr, CLIENT_ID)
    assert body == msg


@pytest.mark.parametrize("name,version", KP_RESPONSE_CASES, ids=[f"{n}-v{v}" for n, v in KP_RESPONSE_CASES])
@SETTINGS
@given(data=st.data())
def test_response_bytes_match_kafka_python(name, version, data):
    msg = data.draw(message_strategy(name, version, unknown_tags=False))
    _oracle_fixups(msg)
    corr = data.draw(st.integers(0, 2**31 - 1))
    ours = codec.encode_response_bytes(msg.API_KEY, version, corr, msg)
    kcls = KP[name]
    sspec = load_message(name).struct
    # ours -> theirs decoder
    if name == "ApiVersionsResponse" and msg.error_code != 0:
        # kafka-python decodes any ApiVersionsResponse with an error as v0 (KIP-511
        # fallback); compare on the v0 fields only
        kdec = kcls.decode(ours[4:], version=0, header=True)
    else:
        kdec = kcls.decode(ours[4:], version=version, header=True)
        assert _from_kp(kdec, type(msg), sspec, kcls._struct, version) == msg
    assert kdec.header.correlation_id == corr
    # theirs encoder -> bytes identical, and our decoder
    kobj = _to_kp(msg, sspec, kcls._struct, version, top_cls=kcls)
    kobj.with_header(correlation_id=corr)
    theirs = kobj.encode(header=True, framed=True)
    assert ours == theirs
    corr2, body = codec.decode_response(msg.API_KEY, version, theirs[4:])
    assert corr2 == corr and body == msg


# =======================================================================================
# Legacy Struct oracles (kafka-python kafka.protocol.old and aiokafka.protocol)

def _legacy_classes(package: str):
    """{(kind, api_key, api_version): class} for every Struct request/response class."""
    pkg = importlib.import_module(package)
    out = {}
    for info in pkgutil.iter_modules(pkg.__path__):
        try:
            mod = importlib.import_module(f"{package}.{info.name}")
        except Exception:  # pragma: no cover - optional modules
            continue
        for name, obj in vars(mod).items():
            if not inspect.isclass(obj) or inspect.isabstract(obj):
                continue
            key, ver = getattr(obj, "API_KEY", None), getattr(obj, "API_VERSION", None)
            if not isinstance(key, int) or not isinstance(ver, int) or not hasattr(obj, "SCHEMA"):
                continue
            kind = "Request" if "Request" in name else "Response" if "Response" in name else None
            if kind:
                out.setdefault((kind, key, ver), obj)
    return out


AIO = _legacy_classes("aiokafka.protocol")
KPOLD = _legacy_classes("kafka.protocol.old")
LEGACY = {"aiokafka": AIO, "kafka-python-legacy": KPOLD}


def _to_tuple(obj, sspec: StructSpec, v: int, flexible: bool):
    vals = []
    for f in _regular(sspec, v):
        vals.append(_to_tuple_value(getattr(obj, f.py_name), f, v, flexible))
    if flexible:
        vals.append(dict(obj._unknown_tags or {}))
    return tuple(vals)


def _to_tuple_value(val, f, v, flexible):
    if val is None:
        return None
    if f.is_array and f.is_struct:
        return [_to_tuple(x, f.struct, v, flexible) for x in val]
    if f.is_struct:
        return _to_tuple(val, f.struct, v, flexible)
    if isinstance(val, memoryview):
        return bytes(val)
    return val


def _legacy_tree(value, typ):
    """Normalise a decoded legacy Struct value into plain tuples/lists."""
    from aiokafka.protocol import types as aio_types
    from kafka.protocol.old import types as kp_types

    schemas = (aio_types.Schema, kp_types.Schema)
    arrays = (aio_types.Array, kp_types.Array)
    if _is_legacy_bitfield(typ):
        if value is None:
            return -(2**31)
        if isinstance(value, int):
            return value
        x = sum(1 << b for b in value)
        return x - 2**32 if x >= 2**31 else x
    if isinstance(typ, schemas):
        if isinstance(value, (tuple, list)):
            value = tuple(value)
            if len(value) == len(typ.fields) - 1 and typ.names[-1] == "tags":
                value = value + ({},)  # kafka-python legacy drops empty trailing tags
            return tuple(_legacy_tree(value[i], t) for i, t in enumerate(typ.fields))
        return tuple(_legacy_tree(getattr(value, n), t) for n, t in zip(typ.names, typ.fields))
    if isinstance(typ, arrays):
        if value is None:
            return None
        return [_legacy_tree(x, typ.array_of) for x in value]
    return value


def _is_legacy_bitfield(typ) -> bool:
    # kafka-python legacy models *AuthorizedOperations as a BitField (set of bit numbers)
    return getattr(typ, "__name__", "") == "BitField"


# Oracle bugs found by these tests (verified against Kafka's JSON schemas); those
# (oracle, message, version) combinations are left out of the parametrization (the other
# oracles still cover them), the rest of each oracle is used.
KNOWN_ORACLE_BUGS = {
    # aiokafka OffsetRequest_v4/v5 declare current_leader_epoch as Int64; Kafka's
    # ListOffsetsPartition.CurrentLeaderEpoch is int32
    ("aiokafka", "ListOffsetsRequest", 4): "current_leader_epoch declared Int64 (Kafka: int32)",
    ("aiokafka", "ListOffsetsRequest", 5): "current_leader_epoch declared Int64 (Kafka: int32)",
    # DescribeAcls v2 is the first flexible version, but both legacy Struct libraries
    # reuse the v1 (non-flexible) schema for it
    ("aiokafka", "DescribeAclsRequest", 2): "v2 reuses the non-flexible v1 schema",
    ("aiokafka", "DescribeAclsResponse", 2): "v2 reuses the non-flexible v1 schema",
    ("kafka-python-legacy", "DescribeAclsRequest", 2): "v2 reuses the non-flexible v1 schema",
    ("kafka-python-legacy", "DescribeAclsResponse", 2): "v2 reuses the non-flexible v1 schema",
}


def _adapt(tree, typ):
    """Shape our positional tree like a legacy Schema: Kafka may turn an array of
    primitives into an array of one-field structs (same wire format, e.g.
    MetadataRequest.Topics), which the legacy Structs still model as primitives."""
    from aiokafka.protocol import types as aio_types
    from kafka.protocol.old import types as kp_types

    if isinstance(typ, (aio_types.Schema, kp_types.Schema)):
        assert isinstance(tree, tuple) and len(tree) == len(typ.fields), (typ.names, tree)
        return tuple(_adapt(x, t) for x, t in zip(tree, typ.fields))
    if isinstance(typ, (aio_types.Array, kp_types.Array)):
        return None if tree is None else [_adapt(x, typ.array_of) for x in tree]
    if _is_legacy_bitfield(typ):
        return None if tree == -(2**31) else {b for b in range(32) if tree & (1 << b)}
    if isinstance(tree, tuple) and len(tree) == 1:
        return tree[0]
    return tree


# aiokafka has no flexible version of the APIs above; these four add flexible-version
# (compact types + empty tagged fields) coverage against it
LEGACY_EXTRA_APIS = ["DeleteRecords", "DescribeAcls", "AlterPartitionReassignments",
                     "ListPartitionReassignments"]


def _legacy_cases(api_suffix: str):
    cases = []
    for oracle, classes in LEGACY.items():
        for api in ORACLE_APIS + LEGACY_EXTRA_APIS:
            name = api + api_suffix
            spec = load_message(name)
            for v in spec.valid_versions:
                if (api_suffix, spec.api_key, v) in classes and (oracle, name, v) not in KNOWN_ORACLE_BUGS:
                    cases.append((oracle, name, v))
    return cases


LEGACY_REQUEST_CASES = _legacy_cases("Request")
LEGACY_RESPONSE_CASES = _legacy_cases("Response")


def _ids(cases):
    return [f"{o}-{n}-v{v}" for o, n, v in cases]


def test_legacy_oracles_found():
    assert len(AIO) > 50 and len(KPOLD) > 50
    assert len(LEGACY_REQUEST_CASES) > 50


def _legacy_request_bytes(kcls, oracle, tree, corr):
    req = kcls(*tree)
    if oracle == "aiokafka":
        header = req.build_request_header(correlation_id=corr, client_id=CLIENT_ID)
        data = header.encode() + req.encode()
    else:
        req.with_header(correlation_id=corr, client_id=CLIENT_ID)
        data = req.encode(header=True)
    return len(data).to_bytes(4, "big") + data


@pytest.mark.parametrize("oracle,name,version", LEGACY_REQUEST_CASES, ids=_ids(LEGACY_REQUEST_CASES))
@SETTINGS
@given(data=st.data())
def test_request_bytes_match_legacy(oracle, name, version, data):
    spec = load_message(name)
    flexible = spec.is_flexible(version)
    # legacy Structs do not model known tagged fields and aiokafka cannot encode
    # non-empty tagged fields (see module docstring): defaults only, no unknown tags
    msg = data.draw(message_strategy(name, version, tagged=False, unknown_tags=False))
    _oracle_fixups(msg)
    corr = data.draw(st.integers(0, 2**31 - 1))
    ours = codec.encode_request(
        RequestHeader(api_key=spec.api_key, api_version=version, correlation_id=corr, client_id=CLIENT_ID), msg)
    kcls = LEGACY[oracle][("Request", spec.api_key, version)]
    tree = _adapt(_to_tuple(msg, spec.struct, version, flexible), kcls.SCHEMA)
    theirs = _legacy_request_bytes(kcls, oracle, tree, corr)
    assert ours == theirs
    h, body = codec.decode_request(theirs[4:])
    assert body == msg and h.correlation_id == corr


@pytest.mark.parametrize("oracle,name,version", LEGACY_RESPONSE_CASES, ids=_ids(LEGACY_RESPONSE_CASES))
@SETTINGS
@given(data=st.data())
def test_response_bytes_match_legacy(oracle, name, version, data):
    spec = load_message(name)
    flexible = spec.is_flexible(version)
    msg = data.draw(message_strategy(name, version, tagged=False, unknown_tags=False))
    _oracle_fixups(msg)
    corr = data.draw(st.integers(0, 2**31 - 1))
    ours = codec.encode_response_bytes(spec.api_key, version, corr, msg)
    kcls = LEGACY[oracle][("Response", spec.api_key, version)]
    tree = _adapt(_to_tuple(msg, spec.struct, version, flexible), kcls.SCHEMA)
    hv = codec.response_header_version(spec.api_key, version)
    body_bytes = ours[4 + 4 + hv:]
    # their decoder on our bytes
    decoded = kcls.decode(body_bytes)
    assert _legacy_tree(decoded, kcls.SCHEMA) == _legacy_tree(tree, kcls.SCHEMA)
    # their encoder -> identical bytes
    theirs = kcls(*tree).encode()
    assert theirs == body_bytes
    corr2, body = codec.decode_response(spec.api_key, version, ours[4:])
    assert body == msg


@given(data=st.data())
@SETTINGS
def test_aiokafka_decodes_our_unknown_tags(data):
    """aiokafka's TaggedFields *decoder* is right; check it on non-empty unknown tags
    at every struct level of a flexible response."""
    name, version = "DeleteRecordsResponse", 2
    spec = load_message(name)
    msg = data.draw(message_strategy(name, version, tagged=False, unknown_tags=True))
    msg._unknown_tags = data.draw(st.dictionaries(st.integers(5, 200), st.binary(max_size=5),
                                                  min_size=1, max_size=3))
    ours = codec.encode_response_bytes(spec.api_key, version, 1, msg)
    kcls = AIO[("Response", spec.api_key, version)]
    hv = codec.response_header_version(spec.api_key, version)
    decoded = kcls.decode(ours[8 + hv:])
    tree = _adapt(_to_tuple(msg, spec.struct, version, True), kcls.SCHEMA)
    assert _legacy_tree(decoded, kcls.SCHEMA) == _legacy_tree(tree, kcls.SCHEMA)
