"""The compiled decoders and encoders (protocol/_fastwire.c running _codegen's plans)
against the generated Python ones they stand in for: the same objects, field by field and
type by type, and the same bytes and chunks, for every message and version; no hand-over
to Python on valid input; and on malformed input or an object that cannot be written, the
Python code's answer (result or error, message included)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import _codegen, codec
from protocol.codec import DecodeError
from protocol.schema import load_message, message_names
from tests.unit.test_codec_roundtrip import message_strategy

from protocol import _fastwire  # built by make; the suite runs with it

ALL_CASES = [
    (n, v)
    for n in message_names()
    if load_message(n).type in ("request", "response", "data", "header")
    for v in load_message(n).valid_versions
]


def same(a, b, path="") -> None:
    """``a`` and ``b`` equal and of the same types all the way down (bool is not int,
    a records view is not bytes), unknown tags included."""
    assert type(a) is type(b), f"{path}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, _codegen.KafkaStruct):
        for n in a._fields:
            same(getattr(a, n), getattr(b, n), f"{path}.{n}")
        same(a._unknown_tags, b._unknown_tags, f"{path}._unknown_tags")
    elif isinstance(a, list):
        assert len(a) == len(b), path
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), path
        for k in a:
            same(a[k], b[k], f"{path}[{k}]")
    elif isinstance(a, memoryview):
        assert a.tobytes() == b.tobytes() and a.obj is b.obj, path
    elif isinstance(a, float) and a != a:
        assert b != b, path
    else:
        assert a == b, path


def both(name, version, buf, pos=0):
    """(compiled result or exception, Python result or exception)."""
    out = []
    for fn in (_codegen.get_decoder(name, version), _codegen.python_decoder(name, version)):
        try:
            out.append(fn(buf, pos))
        except Exception as exc:  # noqa: BLE001 - compared below
            out.append(exc)
    return out


def test_the_compiled_runners_serve():
    assert _codegen.FAST_CODEC
    fn = _codegen.get_decoder("ProduceRequest", 9)
    assert fn.func is _fastwire.decode and fn is _codegen.get_decoder("ProduceRequest", 9)
    enc = _codegen.get_encoder("ProduceResponse", 9)
    assert enc.func is _fastwire.encode and enc is _codegen.get_encoder("ProduceResponse", 9)
    assert "def decode(" in _codegen.decoder_source("ProduceRequest", 9)
    assert "def encode(" in _codegen.encoder_source("ProduceResponse", 9)
    # traced runs (naming the field of an error) are the Python functions'
    assert _codegen.get_decoder("ProduceRequest", 9, True) is _codegen.python_decoder("ProduceRequest", 9, True)
    assert _codegen.get_encoder("ProduceResponse", 9, True) is _codegen.python_encoder("ProduceResponse", 9, True)


@pytest.mark.parametrize("name,version", ALL_CASES, ids=[f"{n}-v{v}" for n, v in ALL_CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_objects_as_the_python_decoder(name, version, data):
    msg = data.draw(message_strategy(name, version))
    prefix = data.draw(st.binary(max_size=3))
    buf = memoryview(bytearray(prefix + codec.encode_body(msg, version) + b"\x00trailing"))
    before = _fastwire.fallbacks()
    fast, py = both(name, version, buf, len(prefix))
    assert _fastwire.fallbacks() == before, "valid input was handed to the Python decoder"
    same(fast[0], py[0])
    assert fast[1] == py[1]
    assert fast[0] == msg


@pytest.mark.parametrize("name,version", [("ProduceRequest", 3), ("ProduceRequest", 9), ("FetchRequest", 12),
                                          ("FetchRequest", 16), ("MetadataRequest", 12), ("RequestHeader", 2),
                                          ("ConsumerGroupHeartbeatRequest", 0), ("ApiVersionsRequest", 3)])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_malformed_input_gets_the_python_decoders_answer(name, version, data):
    """Every truncation and random byte flips: the compiled decoder returns what the
    Python decoder returns, or raises the same exception with the same message."""
    msg = data.draw(message_strategy(name, version))
    raw = bytearray(codec.encode_body(msg, version))
    for _ in range(data.draw(st.integers(0, 3))):
        if raw:
            raw[data.draw(st.integers(0, len(raw) - 1))] = data.draw(st.integers(0, 255))
    for cut in range(len(raw) + 1):
        buf = memoryview(bytes(raw[:cut]))
        fast, py = both(name, version, buf)
        if isinstance(py, Exception):
            assert type(fast) is type(py) and str(fast) == str(py), (cut, fast, py)
        else:
            same(fast[0], py[0])
            assert fast[1] == py[1]


def test_errors_through_codec_are_unchanged():
    """codec's messages (which name the field) come from the traced Python decoder."""
    body = struct.pack(">hhi", -1, 1, 1000) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t"
    body += struct.pack(">ii", 1, 0) + struct.pack(">i", 4) + b"abc"  # records length past the end
    frame = struct.pack(">hhih", 0, 3, 1, 1) + b"c" + body
    with pytest.raises(DecodeError, match=r"ProduceRequest v3 at field topic_data\[\]\.partition_data\[\]\.records: "
                                          r"records length 4 exceeds the remaining 3 bytes"):
        codec.decode_request(frame)


def test_tagged_fields_unknown_tags_and_defaults():
    from protocol.messages import FetchRequest

    req = FetchRequest(cluster_id="abc", replica_state=FetchRequest.ReplicaState(replica_id=3, replica_epoch=7),
                       topics=[FetchRequest.FetchTopic(topic_id=uuid.uuid4(), partitions=[
                           FetchRequest.FetchPartition(partition=1, fetch_offset=5, _unknown_tags={99: b"x"})])],
                       _unknown_tags={200: b"\x01\x02"})
    enc = codec.encode_body(req, 15)
    fast, py = both("FetchRequest", 15, memoryview(enc))
    same(fast[0], py[0])
    assert fast[0].cluster_id == "abc" and fast[0].replica_state.replica_epoch == 7
    assert fast[0]._unknown_tags == {200: b"\x01\x02"}
    assert fast[0].topics[0].partitions[0]._unknown_tags == {99: b"x"}
    assert fast[0].topics[0].topic == ""  # absent in v15: its default
    # a default struct instance is a fresh one per message
    other = _codegen.get_decoder("FetchRequest", 12)(memoryview(codec.encode_body(FetchRequest(), 12)), 0)[0]
    again = _codegen.get_decoder("FetchRequest", 12)(memoryview(codec.encode_body(FetchRequest(), 12)), 0)[0]
    assert other.replica_state == again.replica_state and other.replica_state is not again.replica_state


def test_records_are_views_of_the_frame():
    from protocol.messages import ProduceRequest

    req = ProduceRequest(acks=1, timeout_ms=10, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"R" * 70)])])
    frame = bytearray(codec.encode_body(req, 9))
    view = memoryview(frame)
    got = _codegen.get_decoder("ProduceRequest", 9)(view, 0)[0].topic_data[0].partition_data[0].records
    assert isinstance(got, memoryview) and got.obj is frame
    frame[-4] = ord("Z")  # the last records byte, before three tagged-field counts
    assert bytes(got).endswith(b"Z")


def test_records_views_are_the_slices_memoryview_makes():
    """The records view is made without memoryview's subscript (protocol/_mvslice.h):
    the same bytes, shape, strides, flags and base as ``view[a:b]``, from a view at any
    offset of its buffer, read-only or not; and it holds its buffer as a slice does (the
    bytearray cannot be resized while it lives, and stays readable)."""
    from protocol.messages import ProduceRequest

    for n in (0, 1, 61, 300):
        records = bytes(i % 251 for i in range(n))
        req = ProduceRequest(acks=1, timeout_ms=10, topic_data=[ProduceRequest.TopicProduceData(
            name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=records)])])
        body = codec.encode_body(req, 9)
        for lead in (0, 3):
            for base in (bytearray(b"\xee" * lead + body), b"\xee" * lead + body):
                outer = memoryview(base)[lead:]
                got = _codegen.get_decoder("ProduceRequest", 9)(outer, 0)[0].topic_data[0].partition_data[0].records
                at = bytes(outer).index(bytes(got)) if len(got) else len(outer)
                ref = outer[at : at + len(got)]
                assert isinstance(got, memoryview) and got.obj is base
                assert (got.tobytes(), got.shape, got.strides, got.format, got.itemsize, got.readonly,
                        got.c_contiguous, got.contiguous, got.nbytes) == \
                       (ref.tobytes(), ref.shape, ref.strides, ref.format, ref.itemsize, ref.readonly,
                        ref.c_contiguous, ref.contiguous, ref.nbytes)
                if isinstance(base, bytearray) and len(got):
                    with pytest.raises(BufferError):
                        base.extend(b"x")  # exported: held by the records view
                    outer.release()  # the records view keeps the buffer, as a slice does
                    assert got.tobytes() == ref.tobytes()
                    ref.release()
                    got.release()
                    base.extend(b"x")  # nothing holds it any more


def test_a_released_view_is_refused_as_python_refuses_it():
    from protocol.messages import ProduceRequest

    req = ProduceRequest(acks=1, timeout_ms=10, topic_data=[ProduceRequest.TopicProduceData(
        name="t", partition_data=[ProduceRequest.PartitionProduceData(index=0, records=b"R" * 70)])])
    view = memoryview(bytearray(codec.encode_body(req, 9)))
    view.release()
    fast, slow = both("ProduceRequest", 9, view)
    assert type(fast) is type(slow) and str(fast) == str(slow)


def test_names_decoded_again_are_the_same_str_objects():
    """Short ASCII strings decoded lately (topic names, client ids) are kept by their
    bytes and handed out again; any other string decodes anew. Thousands of names (more
    than the cache's slots, so slots are shared and replaced) still decode right, and a
    name never comes back for bytes that only hash like it."""
    from protocol.messages import MetadataRequest

    def names(req_names, version=12):
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in req_names],
                              allow_auto_topic_creation=False)
        body = codec.encode_body(req, version)
        fast = _codegen.get_decoder("MetadataRequest", version)(memoryview(body), 0)[0]
        slow = _codegen.python_decoder("MetadataRequest", version)(memoryview(body), 0)[0]
        same(fast, slow)
        return [t.name for t in fast.topics]

    first = names(["orders", "payments"])
    again = names(["orders", "payments"])
    assert again == ["orders", "payments"] and all(a is b for a, b in zip(first, again))
    many = [f"topic-{i}" for i in range(5000)] + ["é-topic", "x" * 128, "y" * 129, "", "orders\x00"]
    assert names(many) == many
    assert names(many[::-1]) == many[::-1]
    assert names(["y" * 129])[0] is not names(["y" * 129])[0]  # longer than the cache keeps: anew
    for version in (0, 4, 9):  # int16 lengths before flexible versions, compact after
        assert names(["orders", "orders\x01", "ordert"], version) == ["orders", "orders\x01", "ordert"]


def both_encoded(name, version, obj, prefix=b"\x00" * 9):
    """(compiled (out, chunks) or exception, Python (out, chunks) or exception)."""
    res = []
    for fn in (_codegen.get_encoder(name, version), _codegen.python_encoder(name, version)):
        out, chunks = bytearray(prefix), []
        try:
            res.append((bytes(fn(obj, out, chunks)), [bytes(c) if isinstance(c, bytearray) else c for c in chunks],
                        bytes(out)))
        except Exception as exc:  # noqa: BLE001 - compared below
            res.append(exc)
    return res


@pytest.mark.parametrize("name,version", ALL_CASES, ids=[f"{n}-v{v}" for n, v in ALL_CASES])
@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_same_bytes_as_the_python_encoder(name, version, data):
    msg = data.draw(message_strategy(name, version))
    before = _fastwire.fallbacks()
    fast, py = both_encoded(name, version, msg)
    assert _fastwire.fallbacks() == before, "a valid message was handed to the Python encoder"
    assert fast == py


class _Slice:
    """Records that are not bytes (a storage.FileSlice stands in the broker)."""

    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


def test_records_chunks_as_the_python_encoder():
    from protocol.messages import FetchResponse as F

    def response(records):
        return F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
            F.PartitionData(partition_index=i, records=r) for i, r in enumerate(records)])])

    cases = [[b"a" * 10, b"b" * (_codegen.INLINE_RECORDS_MAX + 1), None, b"c"],
             [_Slice(100), _Slice(5), bytearray(b"x" * 3)],
             [memoryview(b"y" * (_codegen.INLINE_RECORDS_MAX + 5))], [b""], [None]]
    for version in (4, 11, 12, 16):
        for recs in cases:
            fast, py = both_encoded("FetchResponse", version, response(recs))
            assert fast[0] == py[0] and fast[2] == py[2]
            assert len(fast[1]) == len(py[1])
            for a, b in zip(fast[1], py[1]):
                assert a is b if isinstance(b, (_Slice, memoryview)) else a == b


def test_tagged_fields_written_as_the_python_encoder():
    from protocol.messages import ProduceResponse as R

    def part(**kw):
        return R.PartitionProduceResponse(index=0, base_offset=5, **kw)

    leaders = [R.LeaderIdAndEpoch(), R.LeaderIdAndEpoch(leader_id=1, leader_epoch=2),
               R.LeaderIdAndEpoch(_unknown_tags={5: b"z"}), None]
    for cl in leaders:
        for ut in (None, {}, {3: b"q"}, {0: b"dup"}):
            msg = R(responses=[R.TopicProduceResponse(name="t", partition_responses=[
                part(current_leader=cl, _unknown_tags=ut)])],
                node_endpoints=[R.NodeEndpoint(node_id=1, host="h", port=9, rack=None)] if ut else [])
            for version in (9, 10, 11):
                fast, py = both_encoded("ProduceResponse", version, msg)
                if isinstance(py, Exception):
                    assert type(fast) is type(py) and str(fast) == str(py)
                else:
                    assert fast == py


@pytest.mark.parametrize("field,value", [
    ("index", 2**31), ("index", -(2**31) - 1), ("index", 1.5), ("index", "1"), ("index", None),
    ("error_code", 2**15), ("base_offset", 2**63), ("log_start_offset", True),
    ("record_errors", None), ("record_errors", (1,)), ("record_errors", [None]),
    ("error_message", 7), ("error_message", "\ud800"), ("current_leader", "x"),
])
def test_objects_that_cannot_be_written_get_the_python_encoders_answer(field, value):
    from protocol.messages import ProduceResponse as R

    p = R.PartitionProduceResponse(index=0, base_offset=5)
    setattr(p, field, value)
    msg = R(responses=[R.TopicProduceResponse(name="t", partition_responses=[p])])
    for version in (3, 9, 10):
        fast, py = both_encoded("ProduceResponse", version, msg)
        if isinstance(py, Exception):
            assert type(fast) is type(py) and str(fast) == str(py), (version, fast, py)
        else:
            assert fast == py
    # and through codec, the message names the field
    if field == "index":
        with pytest.raises(codec.EncodeError, match="index"):
            codec.encode_response(0, 9, 1, msg)


# ---- decode_request and encode_response: a pair met before, in one call -------------------
REQUEST_CASES = [(n, v) for n, v in ALL_CASES if load_message(n).type == "request"
                 and load_message(n).api_key is not None and codec._REQ_NAMES.get(load_message(n).api_key) == n]
RESPONSE_CASES = [(n, v) for n, v in ALL_CASES if load_message(n).type == "response"
                  and codec._RESP_NAMES.get(load_message(n).api_key) == n]


def _python_request(frame):
    """What the dispatcher's steps without decode_request give: (header, offset, request
    or the exception)."""
    header, offset = codec.decode_request_header_view(frame)
    try:
        return header, offset, codec.decode_request_body_view(header, frame, offset)
    except DecodeError as exc:
        return header, offset, exc


@pytest.mark.parametrize("name,version", REQUEST_CASES, ids=[f"{n}-v{v}" for n, v in REQUEST_CASES])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_decode_request_in_one_call(name, version, data):
    """decode_request gives the header, offset and request the two steps give, the
    request None where the body is malformed (the steps then name the problem), and None
    for a frame whose header it does not take."""
    from protocol.messages import RequestHeader

    msg = data.draw(message_strategy(name, version))
    header = RequestHeader(api_key=msg.API_KEY, api_version=version, correlation_id=data.draw(st.integers(0, 9)),
                           client_id=data.draw(st.none() | st.text(max_size=5)))
    frame = bytes(codec.encode_request(header, msg))[4:]
    cut = data.draw(st.sampled_from([len(frame), len(frame) - 1, len(frame) // 2, 3]))
    view = memoryview(bytearray(frame[:cut]))
    try:
        expected = _python_request(view)  # meets the pair: in REQUEST_TABLE from now on
    except DecodeError:
        expected = None
    assert codec.REQUEST_TABLE.get(msg.API_KEY << 16 | version) is not None
    got = _fastwire.decode_request(codec.REQUEST_TABLE, view)
    if expected is None:
        assert got is None
        return
    if got is None:  # a header it did not take: only a header the steps refuse too
        pytest.fail(f"decode_request refused a header the steps decode: {frame[:cut]!r}")
    same(got[0], expected[0])
    assert got[1] == expected[1]
    if isinstance(expected[2], Exception):
        assert got[2] is None
    else:
        same(got[2], expected[2])


def test_decode_request_of_a_pair_not_met_or_a_short_frame_is_none():
    assert _fastwire.decode_request({}, memoryview(bytearray(b"\x00\x00\x00\x09\x00\x00\x00\x01\x00\x00"))) is None
    assert _fastwire.decode_request(codec.REQUEST_TABLE, memoryview(bytearray(b"\x00\x00"))) is None


@pytest.mark.parametrize("name,version", RESPONSE_CASES, ids=[f"{n}-v{v}" for n, v in RESPONSE_CASES])
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_encode_response_in_one_call(name, version, data):
    """encode_response's chunks are the ones codec.encode_response makes without it."""
    msg = data.draw(message_strategy(name, version))
    corr = data.draw(st.integers(-(2**31), 2**31 - 1))
    expected = _codec_without_it(msg.API_KEY, version, corr, msg)  # meets the pair
    got = _fastwire.encode_response(codec.RESPONSE_TABLE, msg.API_KEY, version, corr, msg)
    assert got is not None
    assert [type(c) for c in got] == [type(c) for c in expected]
    assert [bytes(c) for c in got] == [bytes(c) for c in expected]


def _codec_without_it(*args):
    """codec.encode_response without protocol/_fastwire.c's encode_response."""
    codec._encode_response_compiled, saved = None, codec._encode_response_compiled
    try:
        return codec.encode_response(*args)
    finally:
        codec._encode_response_compiled = saved


def test_encode_response_chunks_records_as_the_codec():
    from protocol.messages import FetchResponse as F

    big = b"b" * (_codegen.INLINE_RECORDS_MAX + 1)
    resp = F(responses=[F.FetchableTopicResponse(topic="t", partitions=[
        F.PartitionData(partition_index=0, records=b"a" * 10), F.PartitionData(partition_index=1, records=big),
        F.PartitionData(partition_index=2, records=_Slice(70)), F.PartitionData(partition_index=3, records=b"c")])])
    for version in (4, 11, 16):
        expected = _codec_without_it(1, version, 7, resp)
        got = _fastwire.encode_response(codec.RESPONSE_TABLE, 1, version, 7, resp)
        assert len(got) == len(expected) == 5
        for a, b in zip(got, expected):
            assert a is b if isinstance(b, (_Slice, bytes)) else a == b
        assert int.from_bytes(got[0][:4], "big") == sum(len(c) for c in got) - 4


def test_encode_response_leaves_what_it_cannot_write_to_the_codec():
    from protocol.messages import ProduceResponse

    bad = ProduceResponse(responses="not a list", throttle_time_ms=0)
    codec.encode_response(0, 9, 1, ProduceResponse(responses=[], throttle_time_ms=0))  # meets the pair
    assert _fastwire.encode_response(codec.RESPONSE_TABLE, 0, 9, 1, bad) is None
    assert _fastwire.encode_response(codec.RESPONSE_TABLE, 0, 9, 1, object()) is None  # another class
    assert _fastwire.encode_response(codec.RESPONSE_TABLE, 0, 9, 2**31, ProduceResponse()) is None
    with pytest.raises(Exception):
        codec.encode_response(0, 9, 1, bad)


def _fetch_v15(topic_id) -> bytes:
    from protocol.messages import FetchRequest, RequestHeader

    header = RequestHeader(api_key=1, api_version=15, correlation_id=2, client_id="t")
    return codec.encode_request(header, FetchRequest(
        max_wait_ms=100, min_bytes=1, max_bytes=1 << 20, isolation_level=0, session_id=0, session_epoch=-1,
        rack_id="", forgotten_topics_data=[], topics=[FetchRequest.FetchTopic(topic_id=topic_id, partitions=[
            FetchRequest.FetchPartition(partition=0, current_leader_epoch=-1, fetch_offset=5, log_start_offset=-1,
                                        partition_max_bytes=1 << 20)])]))[4:]


def test_a_topic_id_decoded_again_is_the_same_uuid_object():
    """uuid.UUID(bytes=...) is Python code: the compiled decoder keeps the UUID of each
    16 bytes met lately (a UUID is immutable) and hands the same object out again; past
    its bound it starts over, still decoding every id right."""
    tid = uuid.uuid4()
    frame = _fetch_v15(tid)
    first = codec.decode_request(frame)[1].topics[0].topic_id
    again = codec.decode_request(frame)[1].topics[0].topic_id
    assert first == tid and again is first
    ids = [uuid.UUID(int=i * 7919 + 1) for i in range(5000)]  # past the bound (4,096)
    assert [codec.decode_request(_fetch_v15(t))[1].topics[0].topic_id for t in ids] == ids
    assert codec.decode_request(frame)[1].topics[0].topic_id == tid


@pytest.mark.parametrize("topic_id", [uuid.UUID(int=0), uuid.UUID(int=(1 << 128) - 1), uuid.uuid4()])
def test_topic_ids_written_as_the_python_encoder_writes_them(topic_id):
    """A uuid.UUID's 16 bytes taken from its int in C (UUID.bytes is a Python property),
    and a subclass's through .bytes: both as the generated Python encoder writes them."""
    from protocol.messages import FetchResponse

    class Sub(uuid.UUID):
        pass

    for tid in (topic_id, Sub(int=topic_id.int)):
        resp = FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=[
            FetchResponse.FetchableTopicResponse(topic="", topic_id=tid, partitions=[])])
        before = _fastwire.fallbacks()
        fast = _codegen.get_encoder("FetchResponse", 15)(resp, bytearray(), [])
        assert _fastwire.fallbacks() == before
        assert bytes(fast) == bytes(_codegen.python_encoder("FetchResponse", 15)(resp, bytearray(), []))
        assert topic_id.bytes in bytes(fast)
