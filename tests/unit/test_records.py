"""protocol.records against kafka-python / aiokafka record builders as oracles."""

import struct
import zlib

import pytest
from aiokafka.record.default_records import DefaultRecordBatch as ADefaultBatch
from aiokafka.record.default_records import DefaultRecordBatchBuilder as ADefaultBuilder
from aiokafka.record.legacy_records import LegacyRecordBatch as ALegacyBatch
from aiokafka.record.legacy_records import LegacyRecordBatchBuilder as ALegacyBuilder
from kafka.record.default_records import DefaultRecordBatch as KDefaultBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KDefaultBuilder
from kafka.record.legacy_records import LegacyRecordBatch as KLegacyBatch
from kafka.record.legacy_records import LegacyRecordBatchBuilder as KLegacyBuilder
from kafka.record.memory_records import MemoryRecords as KMemoryRecords

from protocol import compression as C
from protocol import records as R

ALL_CODECS = [0, 1, 2, 3, 4]
# kafka-python here has no snappy module (python-snappy missing) -> aiokafka for snappy
K_CODECS = [0, 1, 3, 4]
LEGACY_CODECS = [0, 1, 2, 3]

SAMPLE = [
    (1_700_000_000_000, b"k0", b"v0", [("h1", b"x"), ("h2", None)]),
    (1_700_000_000_005, None, b"v1" * 100, []),
    (1_699_999_999_000, b"k2", None, [("", b"")]),
    (1_700_000_000_003, b"", b"", [("\u00e9t\u00e9", b"\x00\xff")]),
]


def k_build(codec, recs, base_offset=0, pid=-1, epoch=-1, seq=-1, txn=False):
    b = KDefaultBuilder(magic=2, compression_type=codec, is_transactional=txn, producer_id=pid,
                        producer_epoch=epoch, base_sequence=seq, batch_size=10**7)
    for i, (ts, k, v, h) in enumerate(recs):
        assert b.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    out = bytearray(b.build())
    if base_offset:
        struct.pack_into(">q", out, 0, base_offset)
    return bytes(out)


def a_build(codec, recs):
    b = ADefaultBuilder(magic=2, compression_type=codec, is_transactional=False, producer_id=-1,
                        producer_epoch=-1, base_sequence=-1, batch_size=10**7)
    for i, (ts, k, v, h) in enumerate(recs):
        assert b.append(i, timestamp=ts, key=k, value=v, headers=h) is not None
    return bytes(b.build())


def ours(recs, **kw):
    return R.build_batch([(ts, k, v, h) for ts, k, v, h in recs], **kw)


def as_tuples(records):
    return [(r.timestamp, r.key, r.value, list(r.headers)) for r in records]


# ------------------------------------------------------------------ header / hot path


def test_header_struct_is_61_bytes():
    assert R._HEADER.size == 61 == R.HEADER_SIZE


@pytest.mark.parametrize("codec", K_CODECS)
def test_parse_kafka_python_batch(codec):
    buf = k_build(codec, SAMPLE, pid=77, epoch=3, seq=11)
    h = R.parse_batch_header(buf)
    kb = KDefaultBatch(bytearray(buf))
    assert h.base_offset == 0
    assert h.size == len(buf)
    assert h.magic == 2
    assert h.crc == kb.crc
    assert h.compression == codec
    assert h.timestamp_type == 0
    assert h.last_offset_delta == len(SAMPLE) - 1
    assert h.records_count == len(SAMPLE)
    assert h.base_timestamp == SAMPLE[0][0]
    assert h.max_timestamp == max(r[0] for r in SAMPLE)
    assert (h.producer_id, h.producer_epoch, h.base_sequence) == (77, 3, 11)
    assert R.verify_crc(buf, 0, h)
    assert as_tuples(R.iter_records(buf, 0, h)) == [(ts, k, v, h_) for ts, k, v, h_ in SAMPLE]
    assert [r.offset for r in R.iter_records(buf, 0, h)] == [0, 1, 2, 3]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_parse_aiokafka_batch(codec):
    buf = a_build(codec, SAMPLE)
    h = R.parse_batch_header(buf)
    assert R.verify_crc(buf, 0, h)
    assert h.compression == codec
    assert as_tuples(R.iter_records(buf, 0, h)) == [(ts, k, v, h_) for ts, k, v, h_ in SAMPLE]


@pytest.mark.parametrize("codec", ALL_CODECS)
def test_ours_read_by_aiokafka(codec):
    buf = ours(SAMPLE, compression=codec, base_offset=100)
    ab = ADefaultBatch(buf)
    assert ab.validate_crc()
    assert ab.base_offset == 100
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in ab]
    assert got == [(100 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(SAMPLE)]


@pytest.mark.parametrize("codec", K_CODECS)
def test_ours_read_by_kafka_python(codec):
    buf = ours(SAMPLE, compression=codec, base_offset=5, producer_id=9, producer_epoch=1,
               base_sequence=4, is_transactional=True)
    kb = KDefaultBatch(bytearray(buf))
    assert kb.validate_crc()
    assert kb.is_transactional
    assert (kb.producer_id, kb.producer_epoch, kb.base_sequence) == (9, 1, 4)
    assert kb.max_timestamp == max(r[0] for r in SAMPLE)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in kb]
    assert got == [(5 + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(SAMPLE)]


def test_uncompressed_build_is_byte_identical_to_kafka_python():
    recs = [(1000 + i, b"k%d" % i, b"v" * i, [("a", b"b")]) for i in range(20)]
    # kafka-python/aiokafka write partitionLeaderEpoch 0 (Java producers write -1)
    assert ours(recs, partition_leader_epoch=0) == k_build(0, recs)
    assert ours(recs) == a_build(0, recs)


def test_set_base_offset_keeps_crc():
    buf = bytearray(ours(SAMPLE))
    crc_before = R.parse_batch_header(buf).crc
    R.set_base_offset(buf, 0, 123456789)
    R.set_partition_leader_epoch(buf, 0, 7)
    h = R.parse_batch_header(buf)
    assert h.base_offset == 123456789 and h.partition_leader_epoch == 7
    assert h.crc == crc_before and R.verify_crc(buf, 0, h)
    assert [r.offset for r in R.iter_records(buf, 0, h)] == [123456789 + i for i in range(4)]


def test_set_log_append_time():
    buf = bytearray(ours(SAMPLE, compression=1))
    R.set_log_append_time(buf, 0, 42)
    h = R.parse_batch_header(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 42 and h.compression == 1
    assert R.verify_crc(buf, 0, h)
    assert all(r.timestamp == 42 for r in R.iter_records(buf, 0, h))
    kb = KDefaultBatch(bytearray(buf))
    assert kb.validate_crc() and kb.timestamp_type == 1
    assert [r.timestamp for r in kb] == [42] * 4


def test_set_max_timestamp():
    buf = bytearray(ours(SAMPLE))
    orig = bytes(buf)
    R.set_max_timestamp(buf, 0, R.parse_batch_header(buf).max_timestamp)
    assert bytes(buf) == orig  # no-op
    R.set_max_timestamp(buf, 0, 99)
    h = R.parse_batch_header(buf)
    assert h.max_timestamp == 99 and h.timestamp_type == 0 and R.verify_crc(buf, 0, h)
    R.set_log_append_time(buf, 0, 5)
    R.set_max_timestamp(buf, 0, 7, 0)
    h = R.parse_batch_header(buf)
    assert h.max_timestamp == 7 and h.timestamp_type == 0 and R.verify_crc(buf, 0, h)


def test_iter_batches_multi_and_partial():
    b1 = ours(SAMPLE, base_offset=0)
    b2 = ours(SAMPLE[:2], base_offset=4, compression=3)
    buf = b1 + b2
    got = list(R.iter_batches(buf))
    assert [p for p, _ in got] == [0, len(b1)]
    assert [h.base_offset for _, h in got] == [0, 4]
    # partial trailing batch is ignored
    for cut in (1, 11, 12, 60, len(b2) - 1):
        assert len(list(R.iter_batches(buf + b2[:cut]))) == 2
    assert list(R.iter_batches(b"")) == []


def test_iter_batches_rejects_bad_length_and_magic():
    buf = bytearray(ours(SAMPLE))
    bad = bytearray(buf)
    struct.pack_into(">i", bad, 8, 10)
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(bad))
    bad = bytearray(buf)
    bad[16] = 1
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_batches(bad))
    with pytest.raises(R.CorruptRecordError):
        R.parse_batch_header(buf[:60])


def test_magic_of():
    assert R.magic_of(ours(SAMPLE)) == 2
    lb = KLegacyBuilder(magic=1, compression_type=0, batch_size=10**6)
    lb.append(0, timestamp=1, key=b"k", value=b"v")
    assert R.magic_of(bytes(lb.build())) == 1


def test_verify_crc_detects_flip():
    buf = bytearray(ours(SAMPLE))
    h = R.parse_batch_header(buf)
    for i in range(21, len(buf)):
        b = bytearray(buf)
        b[i] ^= 0x01
        assert not R.verify_crc(b, 0, R.parse_batch_header(b)), i
    assert R.verify_crc(buf, 0, h)


def test_lat_record_timestamps_from_max_timestamp():
    buf = ours(SAMPLE, timestamp_type=1, log_append_time=555)
    h = R.parse_batch_header(buf)
    assert h.timestamp_type == 1 and h.max_timestamp == 555
    assert [r.timestamp for r in R.iter_records(buf, 0, h)] == [555] * 4
    assert R.walk_batch(buf, 0, h)[0] == 555


def test_record_structure_errors():
    buf = bytearray(ours(SAMPLE))
    # declared count larger than the data
    struct.pack_into(">i", buf, 57, 5)
    with pytest.raises(R.InvalidRecordError):
        list(R.iter_records(buf, 0, R.parse_batch_header(buf)))
    # declared count smaller than the data -> bytes remaining
    struct.pack_into(">i", buf, 57, 3)
    with pytest.raises(R.InvalidRecordError):
        list(R.iter_records(buf, 0, R.parse_batch_header(buf)))


def test_compressed_garbage_is_corrupt():
    buf = bytearray(ours(SAMPLE, compression=1))
    for i in range(R.HEADER_SIZE, len(buf)):
        buf[i] = 0
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_records(buf, 0, R.parse_batch_header(buf)))


def test_unknown_codec_in_attributes():
    buf = bytearray(ours(SAMPLE))
    struct.pack_into(">h", buf, 21, 6)
    with pytest.raises(R.CorruptRecordError):
        list(R.iter_records(buf, 0, R.parse_batch_header(buf)))


def test_build_batch_record_objects_and_offsets():
    recs = [R.Record(10, 1, b"a", b"b"), R.Record(12, 3, None, None, [("x", b"y")])]
    buf = R.build_batch(recs, base_offset=10)
    h = R.parse_batch_header(buf)
    assert h.last_offset_delta == 2 and h.records_count == 2 and h.last_offset == 12
    got = list(R.iter_records(buf, 0, h))
    assert [r.offset for r in got] == [10, 12]
    assert got[1].headers == [("x", b"y")]


def test_control_batch_flag():
    buf = R.build_batch([(1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                        is_transactional=True, producer_id=1, producer_epoch=0)
    h = R.parse_batch_header(buf)
    assert h.is_control and h.is_transactional


# ------------------------------------------------------------------ legacy


def k_legacy(magic, codec, recs, builder=KLegacyBuilder):
    b = builder(magic=magic, compression_type=codec, batch_size=10**7)
    for off, ts, k, v in recs:
        assert b.append(off, timestamp=ts, key=k, value=v) is not None
    return bytes(b.build())


LEGACY_SAMPLE = [(0, 1_700_000_000_000, b"k0", b"v0"), (1, 1_700_000_000_009, None, b"v1"),
                 (2, 1_700_000_000_001, b"k2", None)]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_parse_legacy_oracle(magic, codec):
    if magic == 0 and codec == 3:
        # the oracles need xxhash for magic-0 lz4 (Kafka's broken header checksum): use ours
        buf = R.build_legacy(LEGACY_SAMPLE, magic=0, compression=3)
    else:
        builder = ALegacyBuilder if codec == 2 else KLegacyBuilder
        buf = k_legacy(magic, codec, LEGACY_SAMPLE, builder)
    got = list(R.parse_legacy(buf))
    assert [(r.offset, r.key, r.value) for r in got] == [(o, k, v) for o, _, k, v in LEGACY_SAMPLE]
    exp_ts = [ts if magic == 1 else -1 for _, ts, _, _ in LEGACY_SAMPLE]
    assert [r.timestamp for r in got] == exp_ts
    assert all(r.magic == magic for r in got)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_build_legacy_read_by_oracle(magic, codec):
    recs = [(o + 50, ts, k, v) for o, ts, k, v in LEGACY_SAMPLE]
    buf = R.build_legacy(recs, magic=magic, compression=codec)
    if magic == 0 and codec == 3:
        # magic 0 lz4 carries Kafka's broken header checksum
        (inner,) = list(R.iter_legacy_entries(buf))
        raw = inner.value
        assert raw[6] == (C._xxh32_short(raw[:6]) >> 8) & 0xFF
        assert [r.offset for r in R.parse_legacy(buf)] == [50, 51, 52]
        return
    batch_cls = ALegacyBatch if codec == 2 else KLegacyBatch
    if codec == 0:
        msgs = []
        for e in R.iter_legacy_entries(buf):
            msgs.extend(batch_cls(bytearray(buf[e.position:e.position + e.total_size]), magic))
    else:
        msgs = list(batch_cls(bytearray(buf), magic))
    assert [(m.offset, m.key, m.value) for m in msgs] == [(o, k, v) for o, _, k, v in recs]
    if magic == 1:
        assert [m.timestamp for m in msgs] == [ts for _, ts, _, _ in recs]
    if codec:
        (wrapper,) = list(R.iter_legacy_entries(buf))
        assert wrapper.offset == 52
        if magic == 1:
            assert wrapper.timestamp == max(ts for _, ts, _, _ in recs)


def test_build_legacy_uncompressed_identical_to_kafka_python():
    for magic in (0, 1):
        assert R.build_legacy(LEGACY_SAMPLE, magic=magic) == k_legacy(magic, 0, LEGACY_SAMPLE)


def test_build_legacy_v1_compressed_inner_identical_to_kafka_python():
    # producers (kafka-python) write wrapper offset 0; the broker writes the last offset.
    ours_w, = list(R.iter_legacy_entries(R.build_legacy(LEGACY_SAMPLE, magic=1, compression=1)))
    theirs_w, = list(R.iter_legacy_entries(k_legacy(1, 1, LEGACY_SAMPLE)))
    assert C.decompress(1, ours_w.value) == C.decompress(1, theirs_w.value)
    assert (ours_w.offset, theirs_w.offset) == (2, 0)


def test_parse_legacy_bad_crc():
    buf = bytearray(k_legacy(1, 0, LEGACY_SAMPLE))
    buf[-1] ^= 0xFF
    with pytest.raises(R.CorruptRecordError):
        list(R.parse_legacy(buf))
    assert len(list(R.parse_legacy(buf, verify_crc=False))) == 3


def test_parse_legacy_inner_bad_crc():
    inner = bytearray(R.build_legacy(LEGACY_SAMPLE, magic=1))
    inner[-1] ^= 0xFF
    value = C.compress(1, bytes(inner))
    wrapper = R._legacy_message(2, 1, 1, 5, None, value)
    with pytest.raises(R.CorruptRecordError):
        list(R.parse_legacy(wrapper))


def test_parse_legacy_v1_wrapper_offset_zero_keeps_inner_offsets():
    inner = R.build_legacy([(0, 1, b"a", b"b"), (1, 2, b"c", b"d")], magic=1)
    wrapper = R._legacy_message(0, 1, 1, 2, None, C.compress(1, inner))
    assert [r.offset for r in R.parse_legacy(wrapper)] == [0, 1]
    wrapper = R._legacy_message(10, 1, 1, 2, None, C.compress(1, inner))
    assert [r.offset for r in R.parse_legacy(wrapper)] == [9, 10]


def test_parse_legacy_v1_lat_wrapper():
    buf = R.build_legacy(LEGACY_SAMPLE, magic=1, compression=1, timestamp_type=1, log_append_time=777)
    got = list(R.parse_legacy(buf))
    assert [r.timestamp for r in got] == [777] * 3
    assert all(r.timestamp_type == 1 for r in got)
    msgs = list(KLegacyBatch(bytearray(buf), 1))
    assert [m.timestamp for m in msgs] == [777] * 3 and msgs[0].timestamp_type == 1


def test_legacy_inner_magic_mismatch_and_nested_compression():
    inner = R.build_legacy([(0, -1, b"a", b"b")], magic=0)
    wrapper = R._legacy_message(0, 1, 1, 2, None, C.compress(1, inner))
    with pytest.raises(R.InvalidRecordError):
        list(R.parse_legacy(wrapper))
    nested = R.build_legacy([(0, 1, b"a", b"b")], magic=1, compression=1)
    wrapper = R._legacy_message(0, 1, 1, 2, None, C.compress(1, nested))
    with pytest.raises(R.InvalidRecordError):
        list(R.parse_legacy(wrapper))
    empty = R._legacy_message(0, 1, 1, 2, None, C.compress(1, b""))
    with pytest.raises(R.InvalidRecordError):
        list(R.parse_legacy(empty))
    null = R._legacy_message(0, 1, 1, 2, None, None)
    with pytest.raises(R.InvalidRecordError):
        list(R.parse_legacy(null))


def test_legacy_partial_trailing_message_ignored():
    buf = k_legacy(1, 0, LEGACY_SAMPLE)
    assert len(list(R.parse_legacy(buf + buf[:20]))) == 3


# ------------------------------------------------------------------ up / down conversion


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_up_convert(magic, codec):
    legacy = R.build_legacy(LEGACY_SAMPLE, magic=magic, compression=codec)
    v2 = R.up_convert(legacy)
    ((pos, h),) = list(R.iter_batches(v2))
    assert h.compression == codec and R.verify_crc(v2, 0, h)
    got = list(R.iter_records(v2, 0, h))
    assert [(r.offset, r.key, r.value, r.headers) for r in got] == \
        [(o, k, v, []) for o, _, k, v in LEGACY_SAMPLE]
    assert [r.timestamp for r in got] == [ts if magic else -1 for _, ts, _, _ in LEGACY_SAMPLE]
    if codec != 2:
        kb = KDefaultBatch(bytearray(v2))
        assert kb.validate_crc()
    # reassigned offsets
    v2b = R.up_convert(legacy, base_offset=1000)
    assert [r.offset for r in R.iter_records(v2b, 0)] == [1000, 1001, 1002]


def test_up_convert_groups_wrappers_and_runs():
    a = R.build_legacy([(0, 1, b"a", b"a")], magic=1)
    b = R.build_legacy([(1, 2, b"b", b"b")], magic=1)
    w = R.build_legacy([(2, 3, b"c", b"c"), (3, 4, b"d", b"d")], magic=1, compression=1)
    d = R.build_legacy([(4, 5, b"e", b"e")], magic=1)
    v2 = R.up_convert(a + b + w + d)
    hs = [h for _, h in R.iter_batches(v2)]
    assert [(h.base_offset, h.records_count, h.compression) for h in hs] == [(0, 2, 0), (2, 2, 1), (4, 1, 0)]


def test_up_convert_lat():
    legacy = R.build_legacy(LEGACY_SAMPLE, magic=1, compression=1, timestamp_type=1, log_append_time=99)
    h = R.parse_batch_header(R.up_convert(legacy))
    assert h.timestamp_type == 1 and h.max_timestamp == 99
    h = R.parse_batch_header(R.up_convert(R.build_legacy(LEGACY_SAMPLE, magic=1), log_append_time=5))
    assert h.timestamp_type == 1 and h.max_timestamp == 5


@pytest.mark.parametrize("to_magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS)
def test_down_convert_round_trip(to_magic, codec):
    v2 = ours(SAMPLE, compression=codec, base_offset=40)
    legacy = R.down_convert(v2, to_magic)
    got = list(R.parse_legacy(legacy))
    assert [(r.offset, r.key, r.value) for r in got] == \
        [(40 + i, k, v) for i, (_, k, v, _) in enumerate(SAMPLE)]
    assert [r.timestamp for r in got] == [ts if to_magic else -1 for ts, _, _, _ in SAMPLE]
    if not (to_magic == 0 and codec == 3):
        cls = ALegacyBatch if codec == 2 else KLegacyBatch
        if codec:
            msgs = list(cls(bytearray(legacy), to_magic))
            (wrapper,) = list(R.iter_legacy_entries(legacy))
            assert wrapper.offset == 43 and wrapper.compression == codec
        else:
            msgs = [m for e in R.iter_legacy_entries(legacy)
                    for m in cls(bytearray(legacy[e.position:e.position + e.total_size]), to_magic)]
        assert [(m.offset, m.key, m.value) for m in msgs] == [(r.offset, r.key, r.value) for r in got]
    # back up to v2
    back = R.up_convert(legacy)
    assert [(r.offset, r.key, r.value) for r in R.iter_records(back, 0)] == \
        [(r.offset, r.key, r.value) for r in got]


def test_down_convert_v1_keeps_lat():
    v2 = bytearray(ours(SAMPLE, compression=1))
    R.set_log_append_time(v2, 0, 12345)
    for codec_buf in (bytes(v2),):
        legacy = R.down_convert(codec_buf, 1)
        (w,) = list(R.iter_legacy_entries(legacy))
        assert w.timestamp_type == 1 and w.timestamp == 12345
        assert [r.timestamp for r in R.parse_legacy(legacy)] == [12345] * 4
    v2 = bytearray(ours(SAMPLE))
    R.set_log_append_time(v2, 0, 12345)
    legacy = R.down_convert(bytes(v2), 1)
    es = list(R.iter_legacy_entries(legacy))
    assert len(es) == 4 and all(e.timestamp_type == 1 and e.timestamp == 12345 for e in es)
    msgs = [m for e in es for m in KLegacyBatch(bytearray(legacy[e.position:e.position + e.total_size]), 1)]
    assert all(m.timestamp_type == 1 for m in msgs)


def test_down_convert_drops_below_fetch_offset_only_uncompressed():
    plain = ours(SAMPLE, base_offset=10)
    out = R.down_convert(plain, 1, first_offset=12)
    assert [r.offset for r in R.parse_legacy(out)] == [12, 13]
    comp = ours(SAMPLE, base_offset=10, compression=1)
    out = R.down_convert(comp, 1, first_offset=12)
    assert [r.offset for r in R.parse_legacy(out)] == [10, 11, 12, 13]
    assert R.down_convert(plain, 1, first_offset=100) == b""


def test_down_convert_zstd_and_control():
    with pytest.raises(R.UnsupportedCompressionTypeError):
        R.down_convert(ours(SAMPLE, compression=4), 1)
    ctrl = R.build_batch([(1, b"\x00\x00\x00\x00", b"\x00\x00\x00\x00\x00\x00")], is_control=True,
                         is_transactional=True, producer_id=1, producer_epoch=0, base_offset=4)
    data = ours(SAMPLE) + ctrl + ours(SAMPLE[:1], base_offset=5)
    out = R.down_convert(data, 1)
    assert [r.offset for r in R.parse_legacy(out)] == [0, 1, 2, 3, 5]


def test_down_convert_headers_dropped_and_partial_ignored():
    v2 = ours(SAMPLE)
    out = R.down_convert(v2 + v2[:30], 0)
    assert len(list(R.parse_legacy(out))) == 4


def test_down_convert_via_kafka_memory_records():
    out = R.down_convert(ours(SAMPLE, compression=1, base_offset=3), 1)
    mr = KMemoryRecords(out)
    batch = mr.next_batch()
    assert [r.offset for r in batch] == [3, 4, 5, 6]


# ------------------------------------------------------------------ produce request checks


def test_check_produce_records():
    R.check_produce_records(2, R.build_legacy(LEGACY_SAMPLE, magic=1))
    R.check_produce_records(3, ours(SAMPLE))
    with pytest.raises(R.InvalidRecordError):
        R.check_produce_records(3, R.build_legacy(LEGACY_SAMPLE, magic=1))
    with pytest.raises(R.InvalidRecordError):
        R.check_produce_records(3, ours(SAMPLE) + ours(SAMPLE))
    with pytest.raises(R.InvalidRecordError):
        R.check_produce_records(3, b"")
    with pytest.raises(R.UnsupportedCompressionTypeError):
        R.check_produce_records(6, ours(SAMPLE, compression=4))
    R.check_produce_records(7, ours(SAMPLE, compression=4))


def test_legacy_crc_is_plain_crc32():
    buf = R.build_legacy([(0, 5, b"k", b"v")], magic=1)
    (e,) = list(R.iter_legacy_entries(buf))
    assert e.crc == zlib.crc32(buf[16:]) & 0xFFFFFFFF
