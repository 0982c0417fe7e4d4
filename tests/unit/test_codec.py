"""Unit tests of protocol.schema / protocol.codec / protocol.messages.

Oracle comparisons live in test_codec_oracles.py, property tests in
test_codec_roundtrip.py.
"""

from __future__ import annotations

import struct
import time
import uuid

import pytest

from protocol import codec
from protocol import messages
from protocol.codec import DecodeError, EncodeError, UnsupportedVersionError
from protocol.messages import (
    ApiVersionsRequest,
    ApiVersionsResponse,
    ConsumerGroupHeartbeatResponse,
    CreateTopicsRequest,
    FetchRequest,
    FetchResponse,
    JoinGroupRequest,
    MetadataRequest,
    MetadataResponse,
    ProduceRequest,
    ProduceResponse,
    RequestHeader,
)
from protocol.schema import (
    Versions,
    all_messages,
    load_message,
    parse_message,
    snake_case,
    strip_comments,
)


# ---------------------------------------------------------------------------------------
# schema


def test_strip_comments_keeps_slashes_inside_strings():
    text = '{\n  // zz-comment "with quotes"\n  "about": "see http://x.y/z // not a comment", // trailing\n  "a\\"//b": 1\n}'
    stripped = strip_comments(text)
    assert "zz-comment" not in stripped and "trailing" not in stripped
    assert "http://x.y/z // not a comment" in stripped
    assert 'a\\"//b' in stripped


def test_every_schema_parses():
    msgs = all_messages()
    assert len(msgs) >= 180
    assert msgs["ProduceRequest"].api_key == 0
    assert str(msgs["ProduceRequest"].flexible_versions) == "9+"


def test_versions_parse():
    assert Versions.parse("0+") == Versions(0, Versions.OPEN_HI)
    assert 7 in Versions.parse("3-7") and 8 not in Versions.parse("3-7")
    assert Versions.parse("none").empty
    assert list(Versions.parse("5")) == [5]


@pytest.mark.parametrize("name,expected", [
    ("ThrottleTimeMs", "throttle_time_ms"),
    ("TopicData", "topic_data"),
    ("ProducerId", "producer_id"),
    ("IsInternal", "is_internal"),
    ("ClusterId", "cluster_id"),
    ("KRaftVersion", "k_raft_version"),
    ("isKRaftController", "is_k_raft_controller"),
    ("validateOnly", "validate_only"),
    ("TopicID", "topic_id"),
    ("HTTPServer", "http_server"),
    ("Base64Data", "base64_data"),
])
def test_snake_case(name, expected):
    assert snake_case(name) == expected


def test_defaults_parsing():
    spec = parse_message("""{
      "type": "data", "name": "X", "validVersions": "0-1", "flexibleVersions": "1+",
      "fields": [
        {"name": "A", "type": "int32", "versions": "0+", "default": "0x7fffffff"},
        {"name": "B", "type": "int64", "versions": "0+", "default": "-1"},
        {"name": "C", "type": "bool", "versions": "0+", "default": "true"},
        {"name": "D", "type": "string", "versions": "0+", "nullableVersions": "0+", "default": "null"},
        {"name": "E", "type": "int8", "versions": "0+", "default": 3},
        {"name": "F", "type": "int16", "versions": "0+", "default": "010"},
        {"name": "G", "type": "float64", "versions": "0+", "default": "1.5"},
        {"name": "H", "type": "[]int32", "versions": "0+", "nullableVersions": "0+", "default": "null"},
        {"name": "I", "type": "uuid", "versions": "0+"},
        {"name": "J", "type": "int32", "versions": "1+", "taggedVersions": "1+", "tag": 0, "default": -2}
      ]}""")
    d = {f.py_name: f.default for f in spec.fields}
    assert d == {"a": 0x7FFFFFFF, "b": -1, "c": True, "d": None, "e": 3, "f": 8, "g": 1.5,
                 "h": None, "i": uuid.UUID(int=0), "j": -2}


# ---------------------------------------------------------------------------------------
# api keys and header versions


def test_api_keys():
    assert codec.API_KEYS[0] == "Produce"
    assert codec.API_KEYS[18] == "ApiVersions"
    assert codec.ApiKey.PRODUCE == 0 and codec.ApiKey.FETCH == 1
    assert codec.ApiKey.API_VERSIONS == 18 and codec.ApiKey.INIT_PRODUCER_ID == 22
    assert codec.ApiKey.OFFSET_FOR_LEADER_EPOCH == 23


def test_header_versions():
    assert codec.request_header_version(0, 8) == 1
    assert codec.request_header_version(0, 9) == 2
    assert codec.request_header_version(18, 2) == 1
    assert codec.request_header_version(18, 3) == 2
    assert codec.request_header_version(7, 0) == 0
    assert codec.request_header_version(7, 1) == 1
    assert codec.response_header_version(0, 9) == 1
    assert codec.response_header_version(0, 8) == 0
    assert codec.response_header_version(18, 3) == 0  # ApiVersions: always v0
    assert codec.response_header_version(18, 4) == 0


# ---------------------------------------------------------------------------------------
# generated classes


def test_classes_and_defaults():
    assert ProduceResponse.PartitionProduceResponse.__qualname__ == "ProduceResponse.PartitionProduceResponse"
    assert MetadataResponse.MetadataResponseTopic is not None
    # child structs are also attributes of their parent struct class
    assert (ProduceResponse.PartitionProduceResponse.BatchIndexAndErrorMessage
            is ProduceResponse.BatchIndexAndErrorMessage)
    p = ProduceResponse.PartitionProduceResponse()
    assert p.log_append_time_ms == -1 and p.log_start_offset == -1
    assert p.error_message is None and p.record_errors == []
    assert p.current_leader == ProduceResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)
    assert ProduceRequest().transactional_id is None
    assert ProduceRequest().topic_data == [] and ProduceRequest().topic_data is not ProduceRequest().topic_data
    assert MetadataRequest().allow_auto_topic_creation is True
    assert FetchRequest().replica_id == -1 and FetchRequest().max_bytes == 0x7FFFFFFF
    assert FetchResponse.FetchableTopicResponse().topic_id == uuid.UUID(int=0)
    assert ConsumerGroupHeartbeatResponse().assignment is None
    with pytest.raises(AttributeError):
        ProduceRequest().not_a_field = 1  # __slots__
    with pytest.raises(TypeError):
        ProduceRequest(1)  # keyword only
    assert "ProduceRequest(" in repr(ProduceRequest(acks=1))
    assert ProduceRequest(acks=1) == ProduceRequest(acks=1)
    assert ProduceRequest(acks=1) != ProduceRequest(acks=-1)
    assert ProduceRequest.API_KEY == 0 and 11 in ProduceRequest.VALID_VERSIONS
    h = RequestHeader(api_key=3, api_version=12, correlation_id=7, client_id="c")
    assert h.request_api_key == 3 and h.request_api_version == 12
    assert "ProduceRequest" in dir(messages)


def _struct_classes():
    from protocol._codegen import get_class

    for name in sorted(all_messages()):
        top = get_class(name)
        yield top
        for sname in top.SCHEMA.structs:
            yield getattr(top, sname)


def test_new_makes_what_the_class_makes():
    """Every generated class's ``_new`` (for hot paths: protocol/_fastwire.c's compiled one,
    and the generated Python one it replaces, ``_py_new``) builds the object its
    constructor builds: the same defaults, fresh mutable ones and default structs, the
    given values (by name, or by position in the order of ``_fields``, then
    ``_unknown_tags``), and a TypeError for a name that is not a field, a field given twice
    or too many positions."""
    from protocol import _codegen

    assert _codegen.FAST_CODEC, "protocol/_fastwire.c is not built (make venv builds it)"
    checked = 0
    for cls in _struct_classes():
        assert type(cls._new).__name__ == "StructNew", cls
        for new in (cls._new, cls._py_new):
            assert new() == cls(), cls
            fields = cls._fields
            if fields:
                values = {f: getattr(cls(), f) for f in fields}
                first = fields[0]
                values[first] = [] if isinstance(values[first], list) else values[first]
                made = new(**values)
                assert type(made) is cls and made == cls(**values)
                assert all(getattr(made, f) is values[f] for f in fields)
                by_position = new(*[values[f] for f in fields])  # in the order of _fields
                assert by_position == made and all(getattr(by_position, f) is values[f] for f in fields)
                tags = {1: b"x"}
                assert new(*[values[f] for f in fields], tags)._unknown_tags is tags
                assert new(_unknown_tags=tags)._unknown_tags is tags
                with pytest.raises(TypeError, match="multiple values"):
                    new(values[first], **{first: values[first]})
            with pytest.raises(TypeError, match="positional"):
                new(*range(len(fields) + 2))
            for f in fields:
                if isinstance(getattr(cls(), f), (list, _codegen.KafkaStruct)):
                    assert getattr(new(), f) is not getattr(new(), f)
            with pytest.raises(TypeError, match="unexpected keyword argument 'not_a_field'"):
                new(not_a_field=1)
        checked += 1
    assert checked > 500
    p = ProduceResponse.PartitionProduceResponse._new(index=4, base_offset=9)
    assert p == ProduceResponse.PartitionProduceResponse(index=4, base_offset=9)
    assert p.current_leader == ProduceResponse.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1)


# ---------------------------------------------------------------------------------------
# requests


def _produce(records=b"r" * 10, **kw):
    return ProduceRequest(
        acks=-1, timeout_ms=1500,
        topic_data=[ProduceRequest.TopicProduceData(
            name="topic", partition_data=[ProduceRequest.PartitionProduceData(index=3, records=records)])],
        **kw)


def _frame(body, version, api_key=None, client_id="client"):
    header = RequestHeader(api_key=body.API_KEY if api_key is None else api_key,
                           api_version=version, correlation_id=42, client_id=client_id)
    return codec.encode_request(header, body)


def test_produce_request_exact_bytes_v9():
    frame = _frame(_produce(transactional_id=None), 9)
    expected = (
        b"\x00\x00\x00\x09\x00\x00\x00\x2a\x00\x06client\x00"  # header v2
        b"\x00"  # transactional_id: compact null
        b"\xff\xff\x00\x00\x05\xdc"  # acks, timeout
        b"\x02\x06topic"  # 1 topic, name
        b"\x02\x00\x00\x00\x03\x0b" + b"r" * 10 + b"\x00"  # 1 partition, index, records
        b"\x00"  # topic tags
        b"\x00"  # body tags
    )
    assert frame[4:] == expected
    assert struct.unpack(">i", frame[:4])[0] == len(expected)


def test_decode_request_header_any_api():
    frame = _frame(_produce(), 9)[4:]
    header, offset = codec.decode_request_header(frame)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (0, 9, 42, "client")
    assert offset == 2 + 2 + 4 + 2 + 6 + 1
    # unknown api key: header v1 is read
    weird = struct.pack(">hhih", 999, 3, 5, 2) + b"ab" + b"junk"
    header, offset = codec.decode_request_header(weird)
    assert (header.api_key, header.api_version, header.correlation_id, header.client_id) == (999, 3, 5, "ab")
    assert offset == 12
    # null client id
    header, _ = codec.decode_request_header(struct.pack(">hhih", 18, 0, 5, -1))
    assert header.client_id is None
    with pytest.raises(DecodeError):
        codec.decode_request_header(b"\x00\x12\x00")


def test_controlled_shutdown_v0_uses_header_v0():
    from protocol.messages import ControlledShutdownRequest

    body = ControlledShutdownRequest(broker_id=5)
    frame = codec.encode_request(RequestHeader(api_key=7, api_version=0, correlation_id=9, client_id="x"), body)
    assert frame[4:] == struct.pack(">hhii", 7, 0, 9, 5)
    h, b = codec.decode_request(frame[4:])
    assert h.correlation_id == 9 and b.broker_id == 5


def test_unsupported_version_errors():
    frame = _frame(_produce(), 9)[4:]
    bad_version = frame[:2] + struct.pack(">h", 99) + frame[4:]
    with pytest.raises(UnsupportedVersionError) as ei:
        codec.decode_request(bad_version)
    assert ei.value.header.api_key == 0 and ei.value.header.api_version == 99
    assert ei.value.header.correlation_id == 42 and ei.value.header.client_id == "client"
    bad_key = struct.pack(">h", 1999) + frame[2:]
    with pytest.raises(UnsupportedVersionError) as ei:
        codec.decode_request(bad_key)
    assert ei.value.header.api_key == 1999
    # a client probing ApiVersions v127 (KIP-511): header still decodes
    probe = struct.pack(">hhih", 18, 127, 77, 3) + b"cli" + b"\x00\x05whatever"
    with pytest.raises(UnsupportedVersionError) as ei:
        codec.decode_request(probe)
    assert ei.value.header.correlation_id == 77 and ei.value.api_version == 127
    assert not issubclass(UnsupportedVersionError, DecodeError)
    with pytest.raises(UnsupportedVersionError):
        codec.encode_response(0, 99, 1, ProduceResponse())
    with pytest.raises(UnsupportedVersionError):
        codec.decode_response(0, 99, b"\x00\x00\x00\x01")


TRUNCATION_CASES = [
    ("produce-v3", lambda: _frame(_produce(transactional_id="tx"), 3)),
    ("produce-v9", lambda: _frame(_produce(transactional_id="tx"), 9)),
    ("metadata-v12", lambda: _frame(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(
        name="a", topic_id=uuid.uuid4())], include_topic_authorized_operations=True), 12)),
    ("fetch-v12", lambda: _frame(FetchRequest(cluster_id="c", topics=[FetchRequest.FetchTopic(
        topic="t", partitions=[FetchRequest.FetchPartition(partition=1, fetch_offset=5)])],
        rack_id="r"), 12)),
    ("createtopics-v5", lambda: _frame(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
        name="t", num_partitions=3, replication_factor=1,
        configs=[CreateTopicsRequest.CreatableTopicConfig(name="k", value=None)])]), 5)),
    ("joingroup-v6", lambda: _frame(JoinGroupRequest(group_id="g", member_id="m", protocol_type="consumer",
        protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")]), 6)),
    ("apiversions-v3", lambda: _frame(ApiVersionsRequest(client_software_name="n",
                                                         client_software_version="1"), 3)),
]


@pytest.mark.parametrize("name,make", TRUNCATION_CASES, ids=[c[0] for c in TRUNCATION_CASES])
def test_truncation_at_every_position_raises_decode_error(name, make):
    frame = make()[4:]
    codec.decode_request(frame)  # the whole frame is fine
    api = codec.API_KEYS[struct.unpack(">h", frame[:2])[0]]
    for cut in range(len(frame)):
        with pytest.raises(DecodeError) as ei:
            codec.decode_request(frame[:cut])
        if cut >= 4:
            assert api in str(ei.value)


def test_decode_error_names_message_and_field():
    frame = _frame(_produce(), 3)[4:]
    with pytest.raises(DecodeError, match=r"ProduceRequest v3 at field topic_data\[\]\.partition_data\[\]\.records"):
        codec.decode_request(frame[:-3])


def _produce_v3_with_lengths(name_len=None, records_len=None, n_topics=1):
    body = struct.pack(">hhi", -1, 1, 1000)  # transactional_id null, acks, timeout
    body += struct.pack(">i", n_topics)
    body += struct.pack(">h", 1 if name_len is None else name_len) + b"t"
    body += struct.pack(">ii", 1, 0)
    body += struct.pack(">i", 3 if records_len is None else records_len) + b"abc"
    return struct.pack(">hhih", 0, 3, 1, 1) + b"c" + body


def test_negative_and_bad_lengths():
    codec.decode_request(_produce_v3_with_lengths())
    with pytest.raises(DecodeError, match="negative length"):
        codec.decode_request(_produce_v3_with_lengths(name_len=-1))  # non-nullable string
    with pytest.raises(DecodeError, match="invalid records length -2"):
        codec.decode_request(_produce_v3_with_lengths(records_len=-2))
    h, body = codec.decode_request(_produce_v3_with_lengths(records_len=-1))  # nullable: ok
    assert body.topic_data[0].partition_data[0].records is None
    with pytest.raises(DecodeError, match="exceeds"):
        codec.decode_request(_produce_v3_with_lengths(records_len=4))
    with pytest.raises(DecodeError, match="negative length"):
        codec.decode_request(_produce_v3_with_lengths(n_topics=-5))


def test_absurd_array_length_rejected_quickly():
    frame = _produce_v3_with_lengths(n_topics=2**31 - 1)
    t = time.perf_counter()
    with pytest.raises(DecodeError, match="array length"):
        codec.decode_request(frame)
    assert time.perf_counter() - t < 0.05
    # compact array (flexible) with a huge varint count
    hdr = struct.pack(">hhih", 3, 12, 1, 1) + b"c" + b"\x00"
    body = b"\xff\xff\xff\xff\x0f"  # uvarint 2**32-1 topics
    with pytest.raises(DecodeError):
        codec.decode_request(hdr + body)


def test_varint_too_long_and_bad_utf8():
    hdr = struct.pack(">hhih", 3, 12, 1, 1) + b"c" + b"\x00"
    with pytest.raises(DecodeError, match="varint"):
        codec.decode_request(hdr + b"\xff\xff\xff\xff\xff\xff\x01")
    bad = _produce_v3_with_lengths().replace(b"\x00\x01t", b"\x00\x01\xff")
    with pytest.raises(DecodeError, match="UTF-8"):
        codec.decode_request(bad)


def test_trailing_tagged_field_overrun():
    # FetchRequest v12 with a ClusterId tagged field whose declared size is too small
    frame = _frame(FetchRequest(cluster_id="abc"), 12)[4:]
    body_start = codec.decode_request_header(frame)[1]
    # body: tagged fields come last; find "\x01\x00\x04\x04abc" (1 tag, tag 0, size 4, compact "abc")
    i = frame.index(b"\x01\x00\x04\x04abc", body_start)
    broken = frame[:i] + b"\x01\x00\x02\x04abc" + frame[i + 7:]
    with pytest.raises(DecodeError):
        codec.decode_request(broken)


def test_absent_field_is_skipped_not_raised():
    frame = _frame(_produce(transactional_id="tx"), 2)  # TransactionalId is 3+
    h, body = codec.decode_request(frame[4:])
    assert body.transactional_id is None
    # a non-ignorable field absent in v0 of Metadata (allow_auto_topic_creation=False)
    frame = _frame(MetadataRequest(topics=[], allow_auto_topic_creation=False), 3)
    h, body = codec.decode_request(frame[4:])
    assert body.allow_auto_topic_creation is True


def test_tagged_fields_exact_bytes_and_unknown_tags_preserved():
    req = FetchRequest(cluster_id="abc", replica_id=-1, max_wait_ms=500, min_bytes=1)
    frame = _frame(req, 12)
    assert frame.endswith(b"\x01" + b"\x01\x00\x04\x04abc")  # rack_id "" then 1 tag
    h, body = codec.decode_request(frame[4:])
    assert body.cluster_id == "abc"
    # unknown tags survive decode -> encode
    req2 = FetchRequest(cluster_id=None, _unknown_tags={7: b"xyz", 2: b""})
    frame2 = _frame(req2, 12)
    assert frame2.endswith(b"\x02\x02\x00\x07\x03xyz")  # sorted by tag
    _, body2 = codec.decode_request(frame2[4:])
    assert body2._unknown_tags == {2: b"", 7: b"xyz"}
    assert _frame(body2, 12) == frame2
    # a known tag of a newer version read by an older version is unknown there
    # (FetchRequest ReplicaState is tag 1 in v15+)
    assert body2 == req2


def test_nullable_struct_marker():
    resp = ConsumerGroupHeartbeatResponse(member_id="m", assignment=None)
    chunks = codec.encode_response_bytes(68, 0, 1, resp)
    _, dec = codec.decode_response(68, 0, chunks[4:])
    assert dec.assignment is None
    resp.assignment = ConsumerGroupHeartbeatResponse.Assignment(
        topic_partitions=[ConsumerGroupHeartbeatResponse.TopicPartitions(topic_id=uuid.uuid4(), partitions=[1, 2])])
    data = codec.encode_response_bytes(68, 0, 1, resp)
    _, dec = codec.decode_response(68, 0, data[4:])
    assert dec == resp
    assert len(data) - len(chunks) > 16  # marker 0x01 + struct instead of 0xff


def test_encode_error_names_field():
    with pytest.raises(EncodeError, match=r"topic_data\[\]\.name"):
        _frame(ProduceRequest(topic_data=[ProduceRequest.TopicProduceData(name=None)]), 3)
    with pytest.raises(EncodeError, match="acks"):
        _frame(ProduceRequest(acks=1 << 20), 3)
    with pytest.raises(EncodeError, match="expected a ProduceRequest"):
        _frame(FetchRequest(), 3, api_key=0)


# ---------------------------------------------------------------------------------------
# zero copy and chunks


def test_produce_records_are_a_zero_copy_view_of_the_frame():
    payload = bytes(range(256)) * 4096  # 1 MiB
    frame = _frame(_produce(records=payload), 9)[4:]
    t = time.perf_counter()
    header, body = codec.decode_request(frame)
    elapsed = time.perf_counter() - t
    records = body.topic_data[0].partition_data[0].records
    assert isinstance(records, memoryview)
    assert records.obj is frame  # a view over the caller's frame, not a copy
    assert records == payload
    assert records.nbytes == len(payload)
    assert elapsed < 0.05
    # also with a memoryview / bytearray frame
    ba = bytearray(frame)
    _, body = codec.decode_request(memoryview(ba))
    rec = body.topic_data[0].partition_data[0].records
    ba[-3 - len(payload)] ^= 0xFF  # mutate the frame: the view sees it
    assert rec[0] == payload[0] ^ 0xFF


class FakeFileSlice:
    def __init__(self, data: bytes):
        self.data = data

    def __len__(self):
        return len(self.data)

    def read(self):
        return self.data


def _fetch_response(records):
    return FetchResponse(responses=[FetchResponse.FetchableTopicResponse(
        topic="t", partitions=[FetchResponse.PartitionData(partition_index=0, high_watermark=10,
                                                           records=records)])])


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_encode_response_external_chunks(version):
    ext = FakeFileSlice(b"B" * 1000)
    resp = _fetch_response(ext)
    chunks = codec.encode_response(1, version, 99, resp)
    # records is the last field before the tagged fields: a trailing chunk only in
    # flexible versions
    assert len(chunks) == (3 if version >= 12 else 2)
    assert chunks[1] is ext
    assert all(isinstance(c, (bytes, bytearray)) for i, c in enumerate(chunks) if i != 1)
    total = sum(len(c) for c in chunks)
    assert struct.unpack(">i", bytes(chunks[0][:4]))[0] == total - 4
    joined = codec.encode_response_bytes(1, version, 99, resp)
    inline = codec.encode_response_bytes(1, version, 99, _fetch_response(b"B" * 1000))
    assert joined == inline
    corr, dec = codec.decode_response(1, version, joined[4:])
    assert corr == 99 and dec.responses[0].partitions[0].records == b"B" * 1000
    # small bytes records are inlined: one chunk
    assert len(codec.encode_response(1, version, 99, _fetch_response(b"small"))) == 1
    # large bytes-like records are not copied either
    big = b"x" * (codec.INLINE_RECORDS_MAX + 1)
    chunks = codec.encode_response(1, version, 99, _fetch_response(big))
    assert chunks[1] is big


def test_encode_response_external_records_last_field():
    # records is the last field of the partition in v4: the trailing chunk holds the rest
    ext = FakeFileSlice(b"")
    chunks = codec.encode_response(1, 4, 1, _fetch_response(ext))
    assert chunks[1] is ext


def test_api_versions_response_uses_header_v0():
    resp = ApiVersionsResponse(error_code=0, api_keys=[ApiVersionsResponse.ApiVersion(api_key=0, max_version=9)])
    data = codec.encode_response_bytes(18, 3, 5, resp)
    # size, correlation id, then directly the body (no header tagged-field byte)
    assert data[4:8] == b"\x00\x00\x00\x05"
    assert data[8:10] == b"\x00\x00"  # error_code
    assert data[10:11] == b"\x02"  # compact array of 1
    corr, dec = codec.decode_response(18, 3, data[4:])
    assert corr == 5 and dec == resp
    # flexible non-ApiVersions response has the header tag byte
    data = codec.encode_response_bytes(3, 9, 5, MetadataResponse())
    assert data[8] == 0


def test_api_versions_unsupported_fallback_v0():
    resp = ApiVersionsResponse(error_code=35, api_keys=[ApiVersionsResponse.ApiVersion(api_key=18, max_version=3)])
    data = codec.encode_response_bytes(18, 0, 5, resp)
    assert data == struct.pack(">iihihhh", 4 + 2 + 4 + 6, 5, 35, 1, 18, 0, 3)


def test_decode_body_and_encode_body_for_data_messages():
    from protocol.messages import ConsumerProtocolSubscription

    sub = ConsumerProtocolSubscription(topics=["a", "b"], user_data=None)
    data = codec.encode_body(sub, 1)
    dec, end = codec.decode_body("ConsumerProtocolSubscription", 1, data)
    assert end == len(data) and dec.topics == ["a", "b"] and dec.user_data is None


def test_lazy_compilation_is_cached():
    from protocol import _codegen

    a = _codegen.get_decoder("ProduceRequest", 9)
    assert _codegen.get_decoder("ProduceRequest", 9) is a
    assert "def decode(" in _codegen.decoder_source("ProduceRequest", 9)
    assert _codegen.get_class("ProduceRequest") is ProduceRequest
