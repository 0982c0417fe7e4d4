"""storage.validator: SPEC section 2 table, timestamp rules and boundaries."""

import struct
from types import SimpleNamespace

import pytest
from kafka.record.default_records import DefaultRecordBatch as KDefaultBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KDefaultBuilder

from protocol import records as R
from storage import errors as E
from storage.validator import BatchInfo, ValidatedAppend, validate_records

MAX = 2**63 - 1
NOW = 1_700_000_000_000


def cfg(ts_type="CreateTime", before=MAX, after=MAX, max_bytes=1_048_588, **kw):
    return SimpleNamespace(message_timestamp_type=ts_type, message_timestamp_before_max_ms=before,
                           message_timestamp_after_max_ms=after, max_message_bytes=max_bytes, **kw)


def batch(timestamps, codec=0, **kw):
    return R.build_batch([(ts, b"k%d" % i, b"v%d" % i) for i, ts in enumerate(timestamps)],
                         compression=codec, **kw)


def run(buf, config=None, next_offset=0, now=NOW, last=-1, **kw):
    return validate_records(buf, config=config or cfg(), next_offset=next_offset, now_ms=now,
                            last_append_time_ms=last, **kw)


def header(res, i=0):
    return R.parse_batch_header(res.buffer, res.batches[i].position)


# ------------------------------------------------------------------ happy path


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_assigns_offsets_create_time(codec):
    buf = batch([NOW - 5, NOW - 1, NOW - 3], codec)
    res = run(buf, next_offset=100)
    assert isinstance(res, ValidatedAppend)
    assert (res.base_offset, res.last_offset, res.record_count) == (100, 102, 3)
    assert res.max_timestamp == NOW - 1
    assert res.offset_of_max_timestamp == 102  # shallow: last offset of the batch
    assert res.log_append_time == -1
    assert res.batches == [BatchInfo(0, len(buf), 100, 102, NOW - 1, 102)]
    h = header(res)
    assert h.base_offset == 100 and R.verify_crc(res.buffer, 0, h)
    # only the offset changed: the compressed payload is untouched
    assert bytes(res.buffer[8:]) == buf[8:]
    assert [r.offset for r in R.iter_records(res.buffer, 0, h)] == [100, 101, 102]


def test_input_not_mutated_readonly_memoryview():
    buf = batch([NOW])
    mv = memoryview(buf)  # bytes -> read-only view
    res = run(mv, cfg("LogAppendTime"), next_offset=7)
    assert bytes(mv) == buf
    assert isinstance(res.buffer, bytearray)
    ba = bytearray(buf)
    run(ba, cfg("LogAppendTime"), next_offset=7)
    assert bytes(ba) == buf


def test_in_place_patches_the_callers_writable_buffer_without_copying():
    b = batch([NOW])
    frame = bytearray(b"\x00" * 5 + b)
    view = memoryview(frame)[5:]
    copied = run(bytes(b), cfg("LogAppendTime"), next_offset=9)
    res = validate_records(view, config=cfg("LogAppendTime"), next_offset=9, now_ms=NOW, in_place=True)
    assert isinstance(res.buffer, memoryview) and res.buffer.obj is frame
    assert bytes(frame[5:]) == bytes(copied.buffer)  # same result as the copying path
    assert R.parse_batch_header(frame, 5).base_offset == 9
    # a read-only input is still copied, in_place or not
    ro = validate_records(memoryview(b), config=cfg(), next_offset=1, now_ms=NOW, in_place=True)
    assert isinstance(ro.buffer, bytearray)


def test_memoryview_slice_of_frame():
    b = batch([NOW])
    frame = b"\x00" * 17 + b + b"\x01" * 3
    res = run(memoryview(frame)[17:17 + len(b)], next_offset=3)
    assert res.base_offset == 3 and res.last_offset == 3


def test_multiple_batches_consecutive_offsets():
    b1 = batch([NOW - 10, NOW - 2])
    b2 = batch([NOW - 1, NOW - 20, NOW - 4], 1)
    b3 = batch([NOW - 30])
    res = run(b1 + b2 + b3, next_offset=50)
    assert [(b.base_offset, b.last_offset) for b in res.batches] == [(50, 51), (52, 54), (55, 55)]
    assert [b.position for b in res.batches] == [0, len(b1), len(b1) + len(b2)]
    assert res.max_timestamp == NOW - 1 and res.offset_of_max_timestamp == 54
    assert res.record_count == 6
    assert [h.base_offset for _, h in R.iter_batches(res.buffer)] == [50, 52, 55]
    assert all(R.verify_crc(res.buffer, p, h) for p, h in R.iter_batches(res.buffer))


def test_offset_of_max_timestamp_first_batch_on_tie():
    res = run(batch([NOW]) + batch([NOW]), next_offset=0)
    assert res.offset_of_max_timestamp == 0


def test_all_no_timestamps():
    res = run(batch([-1, -1]), cfg(before=1000, after=1000))
    assert res.max_timestamp == -1 and res.offset_of_max_timestamp == -1


def test_partial_trailing_batch_trimmed():
    b = batch([NOW])
    res = run(b + b[:30])
    assert len(res.buffer) == len(b) and res.record_count == 1


def test_producer_fields_and_transactional_pass_through():
    buf = batch([NOW], producer_id=1234, producer_epoch=5, base_sequence=17, is_transactional=True)
    res = run(buf, next_offset=9)
    h = header(res)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (1234, 5, 17)
    assert h.is_transactional and h.crc == R.parse_batch_header(buf).crc


def test_kafka_python_producer_batch_accepted():
    b = KDefaultBuilder(magic=2, compression_type=1, is_transactional=False, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, batch_size=10**6)
    for i in range(5):
        b.append(i, timestamp=NOW - i, key=None, value=b"x" * i, headers=[])
    res = run(bytes(b.build()), cfg(before=3600_000, after=3600_000), next_offset=1000)
    kb = KDefaultBatch(bytearray(res.buffer))
    assert kb.validate_crc() and kb.base_offset == 1000
    assert [r.offset for r in kb] == list(range(1000, 1005))


def test_leader_epoch_stamped_when_given():
    res = run(batch([NOW]), partition_leader_epoch=3)
    assert header(res).partition_leader_epoch == 3
    assert header(run(batch([NOW]))).partition_leader_epoch == -1


def test_magic_hint_accepted():
    assert run(batch([NOW]), magic_hint=2).record_count == 1


# ------------------------------------------------------------------ SPEC table rows


def with_field(buf, fmt, off, value, fix_crc=True):
    b = bytearray(buf)
    struct.pack_into(fmt, b, off, value)
    if fix_crc:
        R._rewrite_crc(b, 0)
    return bytes(b)


def test_base_offset_not_zero_invalid_record():
    with pytest.raises(E.InvalidRecordError, match="baseOffset"):
        run(with_field(batch([NOW]), ">q", 0, 5))


def test_base_offset_checked_on_every_batch():
    with pytest.raises(E.InvalidRecordError):
        run(batch([NOW]) + with_field(batch([NOW]), ">q", 0, 1))


@pytest.mark.parametrize("delta,count", [(0, 2), (2, 2), (-1, 0), (1, 0), (-1, 1)])
def test_records_count_vs_last_offset_delta_invalid_record(delta, count):
    buf = with_field(with_field(batch([NOW, NOW]), ">i", 23, delta), ">i", 57, count)
    with pytest.raises(E.InvalidRecordError):
        run(buf)


def test_bad_crc_corrupt():
    b = bytearray(batch([NOW, NOW]))
    b[-1] ^= 0xFF
    with pytest.raises(E.CorruptRecordError):
        run(bytes(b))


def test_bad_crc_detected_in_second_batch_and_nothing_half_done():
    b2 = bytearray(batch([NOW]))
    b2[-1] ^= 0xFF
    good = batch([NOW])
    with pytest.raises(E.CorruptRecordError):
        run(good + bytes(b2))


def test_message_too_large_boundary():
    buf = batch([NOW] * 10)
    assert run(buf, cfg(max_bytes=len(buf))).record_count == 10
    with pytest.raises(E.MessageTooLargeError):
        run(buf, cfg(max_bytes=len(buf) - 1))


def test_check_order_base_offset_before_size_before_crc():
    b = bytearray(with_field(batch([NOW] * 10), ">q", 0, 3))
    b[-1] ^= 1
    with pytest.raises(E.InvalidRecordError):
        run(bytes(b), cfg(max_bytes=10))
    b = bytearray(batch([NOW] * 10))
    b[-1] ^= 1
    with pytest.raises(E.MessageTooLargeError):
        run(bytes(b), cfg(max_bytes=10))


def test_record_list_too_large_when_segment_bytes_known():
    buf = batch([NOW])
    assert run(buf, cfg(segment_bytes=len(buf))).record_count == 1
    with pytest.raises(E.RecordListTooLargeError):
        run(buf, cfg(segment_bytes=len(buf) - 1))


def test_empty_and_garbage_inputs():
    for bad in (b"", b"\x00" * 5):
        with pytest.raises(E.InvalidRecordError):
            run(bad)
    with pytest.raises(E.InvalidRecordError):
        run(None)
    with pytest.raises(E.CorruptRecordError):
        run(b"\x00" * 8 + struct.pack(">i", 2) + b"\x00" * 20)
    b = bytearray(batch([NOW]))
    b[16] = 7
    with pytest.raises(E.CorruptRecordError):
        run(bytes(b))


def test_mixed_magic_invalid_record():
    legacy = R.build_legacy([(0, NOW, b"k", b"v")], magic=1)
    with pytest.raises(E.InvalidRecordError, match="magic"):
        run(batch([NOW]) + legacy)
    with pytest.raises(E.InvalidRecordError, match="magic"):
        run(R.build_legacy([(0, NOW, b"k", b"v")], magic=0) + legacy)
    with pytest.raises(E.InvalidRecordError, match="magic"):
        run(legacy + batch([NOW]))


def test_control_batch_from_client_rejected():
    ctrl = R.build_batch([(NOW, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                         is_transactional=True, producer_id=1, producer_epoch=0, base_sequence=0)
    with pytest.raises(E.InvalidRecordError, match="control"):
        run(ctrl)


def test_producer_id_without_sequence_rejected():
    with pytest.raises(E.InvalidRecordError, match="baseSequence"):
        run(batch([NOW], producer_id=5, producer_epoch=0, base_sequence=-1))


def test_unknown_codec_corrupt():
    with pytest.raises(E.CorruptRecordError):
        run(with_field(batch([NOW]), ">h", 21, 5))


# ------------------------------------------------------------------ timestamp window (CreateTime)


@pytest.mark.parametrize("codec", [0, 1, 3])
def test_window_before_boundary(codec):
    c = cfg(before=1000, after=MAX)
    assert run(batch([NOW - 1000], codec), c).max_timestamp == NOW - 1000
    with pytest.raises(E.InvalidTimestampError) as ei:
        run(batch([NOW, NOW - 1001, NOW], codec), c)
    assert [i for i, _ in ei.value.record_errors] == [1]
    assert "-1001" not in ei.value.record_errors[0][1] and str(NOW - 1001) in ei.value.record_errors[0][1]


@pytest.mark.parametrize("codec", [0, 2, 4])
def test_window_after_boundary(codec):
    c = cfg(before=MAX, after=500)
    assert run(batch([NOW + 500], codec), c).max_timestamp == NOW + 500
    with pytest.raises(E.InvalidTimestampError) as ei:
        run(batch([NOW + 501, NOW, NOW + 9999], codec), c)
    assert [i for i, _ in ei.value.record_errors] == [0, 2]


def test_minus_one_not_range_checked():
    res = run(batch([-1, NOW, -1]), cfg(before=0, after=0))
    assert res.max_timestamp == NOW


def test_zero_window_exact_now():
    assert run(batch([NOW]), cfg(before=0, after=0)).record_count == 1
    with pytest.raises(E.InvalidTimestampError):
        run(batch([NOW + 1]), cfg(before=0, after=0))
    with pytest.raises(E.InvalidTimestampError):
        run(batch([NOW - 1]), cfg(before=0, after=0))


def test_one_bad_record_rejects_whole_append():
    with pytest.raises(E.InvalidTimestampError) as ei:
        run(batch([NOW]) + batch([NOW, 5, NOW]), cfg(before=1000, after=1000))
    assert ei.value.record_errors and ei.value.record_errors[0][0] == 1  # index within its batch


def test_max_timestamp_corrected_when_producer_lied():
    buf = with_field(batch([NOW - 10, NOW - 5]), ">q", 35, NOW + 10_000_000)
    res = run(buf, cfg(before=10**9, after=10**9))
    h = header(res)
    assert h.max_timestamp == NOW - 5 and res.max_timestamp == NOW - 5
    assert R.verify_crc(res.buffer, 0, h)


def test_max_timestamp_unchanged_keeps_crc():
    buf = batch([NOW - 10, NOW - 5], 1)
    res = run(buf, cfg(before=10**9, after=10**9))
    assert header(res).crc == R.parse_batch_header(buf).crc


@pytest.mark.parametrize("window", [dict(), dict(before=10**12, after=10**12)], ids=["unbounded", "finite"])
def test_records_are_walked_whatever_the_window(window):
    """SPEC 2: the walk is never skipped. A wrecked payload behind a valid CRC is refused,
    and a header that lies about its max timestamp is corrected from the records."""
    buf = bytearray(batch([NOW - 10, NOW - 5], 1))
    for i in range(R.HEADER_SIZE, len(buf)):
        buf[i] = 0xAB
    R._rewrite_crc(buf, 0)
    lie = with_field(bytes(buf), ">q", 35, 77)
    with pytest.raises(E.CorruptRecordError):
        run(lie, cfg(**window))
    for codec in (0, 1):
        lie = with_field(batch([NOW - 10, NOW - 5], codec), ">q", 35, 77)
        res = run(lie, cfg(**window))
        assert res.max_timestamp == NOW - 5 and header(res).max_timestamp == NOW - 5


def test_one_side_finite_decodes():
    buf = batch([NOW - 10, 1])
    with pytest.raises(E.InvalidTimestampError):
        run(buf, cfg(before=1000, after=MAX))


def test_malformed_records_finite_window_invalid_record():
    buf = with_field(batch([NOW, NOW]), ">i", 57, 3)
    buf = with_field(buf, ">i", 23, 2)
    with pytest.raises(E.InvalidRecordError):
        run(buf, cfg(before=10**9, after=10**9))


def test_java_long_overflow_semantics():
    # now - Long.MIN_VALUE wraps negative in Java: it passes a finite "before" check and
    # is judged by "after" instead (Kafka's exact behaviour)
    assert run(batch([-(2**63)]), cfg(before=1000, after=MAX)).record_count == 1
    with pytest.raises(E.InvalidTimestampError):
        run(batch([-(2**63)]), cfg(before=MAX, after=1000))


# ------------------------------------------------------------------ LogAppendTime


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
def test_log_append_time_stamped(codec):
    buf = batch([1, 2, 3], codec)
    res = run(buf, cfg("LogAppendTime"), next_offset=10)
    h = header(res)
    assert h.timestamp_type == 1 and h.max_timestamp == NOW and R.verify_crc(res.buffer, 0, h)
    assert res.log_append_time == NOW and res.max_timestamp == NOW
    assert res.offset_of_max_timestamp == 12
    assert bytes(res.buffer[R.HEADER_SIZE:]) == buf[R.HEADER_SIZE:]  # never recompressed
    assert [r.timestamp for r in R.iter_records(res.buffer, 0, h)] == [NOW] * 3


def test_log_append_time_never_goes_backwards():
    res = run(batch([1]), cfg("LogAppendTime"), now=NOW, last=NOW + 50)
    assert res.log_append_time == NOW + 50 and header(res).max_timestamp == NOW + 50
    res = run(batch([1]), cfg("LogAppendTime"), now=NOW, last=NOW - 50)
    assert res.log_append_time == NOW


def test_log_append_time_ignores_window():
    res = run(batch([1]), cfg("LogAppendTime", before=0, after=0))
    assert res.record_count == 1


def test_lat_bit_from_client_on_lat_topic_rejected():
    buf = batch([NOW, NOW], timestamp_type=1, log_append_time=NOW)
    with pytest.raises(E.InvalidTimestampError) as ei:
        run(buf, cfg("LogAppendTime"))
    assert [i for i, _ in ei.value.record_errors] == [0, 1]


def test_lat_bit_from_client_on_create_time_topic():
    # Kafka: each record reads maxTimestamp; if that is a valid timestamp the batch is
    # accepted and rewritten as CreateTime, if it is -1 the records are rejected.
    buf = batch([NOW - 3, NOW - 2], timestamp_type=1, log_append_time=NOW - 1)
    for c in (cfg(), cfg(before=10, after=10)):
        res = run(buf, c)
        h = header(res)
        assert h.timestamp_type == 0 and h.max_timestamp == NOW - 1 and R.verify_crc(res.buffer, 0, h)
    with pytest.raises(E.InvalidTimestampError):
        run(buf, cfg(before=0, after=0))
    neg = batch([NOW, NOW], timestamp_type=1, log_append_time=-1)
    for c in (cfg(), cfg(before=10, after=10)):
        with pytest.raises(E.InvalidTimestampError) as ei:
            run(neg, c)
        assert [i for i, _ in ei.value.record_errors] == [0, 1]


def test_multi_batch_lat_offset_of_max():
    res = run(batch([1, 2]) + batch([3]), cfg("LogAppendTime"), next_offset=0)
    assert res.offset_of_max_timestamp == 1 and res.max_timestamp == NOW
    assert [b.max_timestamp for b in res.batches] == [NOW, NOW]


# ------------------------------------------------------------------ legacy input


LEG = [(0, NOW - 3, b"k0", b"v0"), (1, NOW - 1, None, b"v1"), (2, NOW - 2, b"k2", None)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", [0, 1, 2, 3])
def test_legacy_up_converted(magic, codec):
    buf = R.build_legacy(LEG, magic=magic, compression=codec)
    res = run(buf, next_offset=500)
    assert len(res.batches) == 1
    h = header(res)
    assert h.compression == codec and h.base_offset == 500 and h.records_count == 3
    assert R.verify_crc(res.buffer, 0, h)
    recs = list(R.iter_records(res.buffer, 0, h))
    assert [(r.offset, r.key, r.value) for r in recs] == [(500 + i, k, v) for i, (_, _, k, v) in enumerate(LEG)]
    exp_ts = [ts for _, ts, _, _ in LEG] if magic else [-1] * 3
    assert [r.timestamp for r in recs] == exp_ts
    assert res.max_timestamp == (NOW - 1 if magic else -1)
    assert (res.base_offset, res.last_offset, res.record_count) == (500, 502, 3)


def test_legacy_lat_topic():
    res = run(R.build_legacy(LEG, magic=0), cfg("LogAppendTime"), next_offset=1)
    h = header(res)
    assert h.timestamp_type == 1 and h.max_timestamp == NOW and res.log_append_time == NOW


def test_legacy_lat_bit_rejected_on_lat_topic():
    buf = R.build_legacy(LEG, magic=1, compression=1, timestamp_type=1, log_append_time=NOW)
    with pytest.raises(E.InvalidTimestampError):
        run(buf, cfg("LogAppendTime"))


def test_legacy_window():
    buf = R.build_legacy([(0, NOW - 2000, b"k", b"v")], magic=1, compression=1)
    with pytest.raises(E.InvalidTimestampError) as ei:
        run(buf, cfg(before=1000, after=1000))
    assert ei.value.record_errors[0][0] == 0


def test_legacy_multiple_compressed_wrappers_rejected():
    w = R.build_legacy(LEG, magic=1, compression=1)
    with pytest.raises(E.InvalidRecordError):
        run(w + w)


def test_legacy_bad_crc():
    b = bytearray(R.build_legacy(LEG, magic=1))
    b[-1] ^= 1
    with pytest.raises(E.CorruptRecordError):
        run(bytes(b))


def test_legacy_too_large():
    buf = R.build_legacy(LEG, magic=1, compression=1)
    with pytest.raises(E.MessageTooLargeError):
        run(buf, cfg(max_bytes=len(buf) - 1))


def test_legacy_inner_bad_crc():
    from protocol import compression as C
    inner = bytearray(R.build_legacy(LEG, magic=1))
    inner[-1] ^= 1
    w = R._legacy_message(2, 1, 1, NOW, None, C.compress(1, bytes(inner)))
    with pytest.raises(E.CorruptRecordError):
        run(w)


def test_errors_are_storage_errors():
    for exc in (E.InvalidRecordError, E.CorruptRecordError, E.MessageTooLargeError,
                E.InvalidTimestampError, E.RecordListTooLargeError):
        assert issubclass(exc, E.StorageError)
    e = E.InvalidTimestampError("m", [(1, "x")])
    assert e.record_errors == [(1, "x")] and str(e) == "m"


# ----------------------------------------------------------------------------- the walk
# (issue: batches whose headers disagree with their records were acknowledged)

from storage.validator import analyze_records  # noqa: E402
from tests.forge import forge_batch, raw_record as _raw_record, set_length_and_crc, zz as _zz  # noqa: E402


def forged(records: bytes, count: int, *, codec=0, max_ts=None, last_offset_delta=None) -> bytes:
    return forge_batch(records, count, base_ts=NOW, max_ts=max_ts, codec=codec,
                       last_offset_delta=last_offset_delta)


THREE = b"".join(_raw_record(i, i) for i in range(3))


@pytest.mark.parametrize("codec", [0, 1, 2, 3, 4])
@pytest.mark.parametrize("count", [1, 2, 4, 2**31 - 1])
def test_count_that_disagrees_with_the_records_is_refused(codec, count):
    with pytest.raises(E.InvalidRecordError):
        run(forged(THREE, count, codec=codec))
    assert run(forged(THREE, 3, codec=codec)).record_count == 3


@pytest.mark.parametrize("bad", [
    _zz(-7) + b"\x00" * 10,                       # negative record length
    _raw_record()[:-1],                            # record cut short
    _zz(4) + b"\x00\x00\x00" + _zz(30),           # key length past the record
])
def test_malformed_record_inside_is_refused(bad):
    with pytest.raises(E.InvalidRecordError):
        run(forged(_raw_record(0, 0) + bad, 2))


def test_batch_length_cut_by_one_byte_under_a_recomputed_crc():
    cut = set_length_and_crc(bytearray(forged(THREE, 3))[:-1])
    with pytest.raises(E.InvalidRecordError):
        run(cut)


@pytest.mark.parametrize("codec", [0, 3])
def test_header_max_timestamp_comes_from_the_records(codec):
    res = run(forged(THREE, 3, codec=codec, max_ts=NOW + 10**9))
    assert res.max_timestamp == NOW + 2 and header(res).max_timestamp == NOW + 2
    assert R.verify_crc(res.buffer, 0, header(res))


@pytest.mark.parametrize("codec", [0, 1, 4])
def test_offset_deltas_not_consecutive_are_rebuilt(codec):
    recs = _raw_record(0, 0, value=b"a") + _raw_record(1, 7, value=b"b") + _raw_record(2, 3, value=b"c")
    res = run(forged(recs, 3, codec=codec), next_offset=100)
    h = header(res)
    assert h.compression == codec and R.verify_crc(res.buffer, 0, h)
    got = list(R.iter_records(res.buffer, 0, h))
    assert [(r.offset, r.timestamp, r.value) for r in got] == [
        (100, NOW, b"a"), (101, NOW + 1, b"b"), (102, NOW + 2, b"c")]
    assert (res.base_offset, res.last_offset, res.record_count) == (100, 102, 3)


def test_compacted_topic_refuses_records_without_a_key():
    recs = _raw_record(0, 0) + _raw_record(1, 1, key=None) + _raw_record(2, 2, key=None)
    with pytest.raises(E.InvalidRecordError) as ei:
        run(forged(recs, 3), cfg(compact=True))
    assert [i for i, _ in ei.value.record_errors] == [1, 2]
    assert run(forged(recs, 3), cfg(compact=False)).record_count == 3
    assert run(forged(THREE, 3), cfg(compact=True)).record_count == 3


@pytest.mark.parametrize("codec", [1, 3, 4])
def test_decompressed_records_over_the_bound_are_too_large(codec):
    big = _raw_record(0, 0, value=b"\0" * (3 << 20))
    data = forged(big, 1, codec=codec)
    assert len(data) < 200_000
    with pytest.raises(E.MessageTooLargeError):
        run(data, max_records_bytes=1 << 20)
    assert run(data, max_records_bytes=4 << 20).record_count == 1


def test_zeros_bomb_is_refused_at_its_first_record():
    data = forged(b"\0" * (64 << 20), 5, codec=4)
    with pytest.raises(E.InvalidRecordError):
        run(data)


def test_budget_leaves_the_rest_of_the_walk_pending():
    recs = b"".join(_raw_record(i, i, value=bytes(1000)) for i in range(3000))
    data = forged(recs, 3000, codec=1)
    a = analyze_records(data, config=cfg(), now_ms=NOW, budget=300_000)
    assert a.pending and 0 < a.decompressed_bytes < len(recs)
    a.complete()
    assert not a.pending and a.decompressed_bytes == len(recs)
    res = a.assign(7)
    assert (res.base_offset, res.last_offset) == (7, 3006)
    # a malformed tail found only after the budget still refuses the batch
    bad = forged(recs + _raw_record(0, 3000), 3000, codec=1)
    a = analyze_records(bad, config=cfg(), now_ms=NOW, budget=300_000)
    assert a.pending
    with pytest.raises(E.InvalidRecordError):
        a.complete()


@pytest.mark.parametrize("codec", [0, 3])
def test_log_append_time_topics_walk_the_records_too(codec):
    with pytest.raises(E.InvalidRecordError):
        run(forged(THREE, 4, codec=codec), cfg("LogAppendTime"))
    res = run(forged(THREE, 3, codec=codec, max_ts=5), cfg("LogAppendTime"), now=NOW + 50)
    assert res.max_timestamp == NOW + 50 and header(res).timestamp_type == 1
