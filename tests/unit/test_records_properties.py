"""Hypothesis property tests for protocol.records / protocol.compression / storage.validator."""

from types import SimpleNamespace

from aiokafka.record.default_records import DefaultRecordBatch as ADefaultBatch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import compression as C
from protocol import records as R
from storage import errors as E
from storage.validator import validate_records

INT64 = st.integers(-(2**63), 2**63 - 1)
TS = st.one_of(st.just(-1), st.integers(0, 2**42))
BYTES = st.one_of(st.none(), st.binary(max_size=64))
HEADERS = st.lists(st.tuples(st.text(max_size=8), BYTES), max_size=3)
RECORD = st.tuples(TS, BYTES, BYTES, HEADERS)
RECORDS = st.lists(RECORD, min_size=1, max_size=20)
CODEC = st.sampled_from([0, 1, 2, 3, 4])

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(RECORDS, CODEC, st.integers(0, 2**40), st.sampled_from([0, 1]))
def test_build_iter_round_trip(records, codec, base_offset, ts_type):
    buf = R.build_batch(records, compression=codec, base_offset=base_offset, timestamp_type=ts_type,
                        log_append_time=12345 if ts_type else None)
    h = R.parse_batch_header(buf)
    assert h.size == len(buf) and R.verify_crc(buf, 0, h)
    assert h.records_count == len(records) == h.last_offset_delta + 1
    got = list(R.iter_records(buf, 0, h))
    assert [r.offset for r in got] == list(range(base_offset, base_offset + len(records)))
    exp_ts = [12345] * len(records) if ts_type else [ts for ts, _, _, _ in records]
    assert [r.timestamp for r in got] == exp_ts
    assert [(r.key, r.value, r.headers) for r in got] == [(k, v, list(hs)) for _, k, v, hs in records]
    if not ts_type:
        assert h.max_timestamp == max(ts for ts, _, _, _ in records)
    # aiokafka reads what we write
    ab = ADefaultBatch(buf)
    assert ab.validate_crc()
    assert [(r.offset, r.key, r.value) for r in ab] == [(r.offset, r.key, r.value) for r in got]


@SETTINGS
@given(st.lists(st.tuples(TS, BYTES, BYTES), min_size=1, max_size=10), st.sampled_from([0, 1, 2, 3]),
       st.sampled_from([0, 1]), st.integers(0, 2**40))
def test_down_up_round_trip(records, codec, to_magic, base):
    v2 = R.build_batch(records, compression=codec, base_offset=base)
    legacy = R.down_convert(v2, to_magic)
    back = R.up_convert(legacy)
    got = [r for _, h in R.iter_batches(back) for r in R.iter_records(back, _, h)]
    assert [(r.offset, r.key, r.value) for r in got] == \
        [(base + i, k, v) for i, (_, k, v) in enumerate(records)]
    assert [r.timestamp for r in got] == [ts if to_magic else -1 for ts, _, _ in records]


@SETTINGS
@given(INT64)
def test_varint_round_trip(v):
    out = bytearray()
    R._write_varint(out, v)
    assert R._read_varint(bytes(out), 0) == (v, len(out))


@SETTINGS
@given(st.binary(max_size=2000), CODEC)
def test_compression_round_trip(data, codec):
    assert C.decompress(codec, C.compress(codec, data)) == data


@SETTINGS
@given(st.binary(max_size=300), st.sampled_from([1, 2, 3, 4]))
def test_decompress_garbage_never_crashes(data, codec):
    try:
        C.decompress(codec, data, max_size=1 << 20)
    except C.CompressionError:
        pass


@st.composite
def corrupted_batch(draw):
    records = draw(RECORDS)
    codec = draw(CODEC)
    buf = bytearray(R.build_batch(records, compression=codec))
    n = draw(st.integers(1, 8))
    for _ in range(n):
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] = draw(st.integers(0, 255))
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(buf)))
        buf = buf[:cut]
    return bytes(buf)


@SETTINGS
@given(corrupted_batch())
def test_corruption_clean_errors(buf):
    # protocol level: either the CRC fails or parsing raises a RecordFormatError
    try:
        for pos, h in R.iter_batches(buf):
            if not R.verify_crc(buf, pos, h):
                continue
            list(R.iter_records(buf, pos, h))
    except R.RecordFormatError:
        pass
    # even when the CRC is ignored, decoding only raises RecordFormatError
    try:
        if len(buf) >= R.HEADER_SIZE:
            h = R.parse_batch_header(buf)
            list(R.iter_records(buf, 0, h, max_decompressed=1 << 20))
    except R.RecordFormatError:
        pass
    try:
        R.down_convert(buf, 1)
    except R.RecordFormatError:
        pass


CFGS = [
    SimpleNamespace(message_timestamp_type="CreateTime", message_timestamp_before_max_ms=2**63 - 1,
                    message_timestamp_after_max_ms=2**63 - 1, max_message_bytes=1 << 20),
    SimpleNamespace(message_timestamp_type="CreateTime", message_timestamp_before_max_ms=10**12,
                    message_timestamp_after_max_ms=10**12, max_message_bytes=1 << 20),
    SimpleNamespace(message_timestamp_type="LogAppendTime", message_timestamp_before_max_ms=1,
                    message_timestamp_after_max_ms=1, max_message_bytes=1 << 20),
]


@SETTINGS
@given(corrupted_batch(), st.sampled_from(CFGS))
def test_validator_corruption_only_storage_errors(buf, config):
    try:
        res = validate_records(buf, config=config, next_offset=10, now_ms=1_700_000_000_000,
                               last_append_time_ms=-1)
    except E.StorageError:
        return
    for pos, h in R.iter_batches(res.buffer):
        assert R.verify_crc(res.buffer, pos, h)


@st.composite
def corrupted_legacy(draw):
    recs = draw(st.lists(st.tuples(TS, BYTES, BYTES), min_size=1, max_size=8))
    magic = draw(st.sampled_from([0, 1]))
    codec = draw(st.sampled_from([0, 1, 2, 3]))
    buf = bytearray(R.build_legacy([(i, max(ts, 0), k, v) for i, (ts, k, v) in enumerate(recs)],
                                   magic=magic, compression=codec))
    for _ in range(draw(st.integers(0, 6))):
        i = draw(st.integers(0, len(buf) - 1))
        buf[i] = draw(st.integers(0, 255))
    return bytes(buf)


@SETTINGS
@given(corrupted_legacy(), st.sampled_from(CFGS))
def test_legacy_corruption_clean_errors(buf, config):
    try:
        list(R.parse_legacy(buf, verify_crc=False))
    except R.RecordFormatError:
        pass
    try:
        R.up_convert(buf)
    except R.RecordFormatError:
        pass
    try:
        validate_records(buf, config=config, next_offset=0, now_ms=1_700_000_000_000,
                         last_append_time_ms=-1)
    except E.StorageError:
        pass


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stamps=st.lists(st.integers(min_value=0, max_value=10**13), min_size=1, max_size=40),
       codec=st.sampled_from([0, 1, 3, 4]), lat=st.booleans(),
       gaps=st.lists(st.integers(min_value=0, max_value=3), min_size=40, max_size=40),
       base=st.integers(min_value=0, max_value=10**9), data=st.data())
def test_first_record_at_or_after_matches_full_decode(stamps, codec, lat, gaps, base, data):
    """The lean search walk answers exactly what decoding every record answers."""
    offsets, off = [], 0
    for i in range(len(stamps)):
        offsets.append(off)
        off += 1 + gaps[i]
    recs = [R.Record(base + offsets[i], ts, None, b"v%d" % i * (i % 5), ()) for i, ts in enumerate(stamps)]
    raw = R.build_batch(recs, base_offset=base, compression=codec, timestamp_type=1 if lat else 0,
                        log_append_time=max(stamps) + 7 if lat else None)
    hdr = R.parse_batch_header(raw, 0)
    decoded = list(R.iter_records(raw, 0, hdr))
    target = data.draw(st.one_of(st.sampled_from(stamps), st.integers(min_value=-1, max_value=10**13 + 10)))
    min_off = data.draw(st.integers(min_value=base - 2, max_value=base + off + 2))
    want = next(((r.offset, r.timestamp) for r in decoded if r.timestamp >= target and r.offset >= min_off), None)
    assert R.first_record_at_or_after(raw, 0, hdr, target, min_off) == want
