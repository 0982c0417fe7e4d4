import os
import zlib

import lz4.frame
import pytest
import zstandard
from aiokafka import codec as ac
from kafka import codec as kc

from protocol import compression as C
from protocol.compression import CompressionError, compress, decompress

DATA = [b"", b"x", b"hello world" * 1000, os.urandom(70_000) + b"a" * 200_000]
CODECS = [C.GZIP, C.SNAPPY, C.LZ4, C.ZSTD]


@pytest.mark.parametrize("codec", CODECS)
@pytest.mark.parametrize("data", DATA, ids=lambda d: f"len{len(d)}")
def test_round_trip(codec, data):
    assert decompress(codec, compress(codec, data)) == data
    assert decompress(codec, memoryview(compress(codec, data))) == data


def test_none_codec():
    assert compress(0, b"abc") == b"abc"
    assert decompress(0, memoryview(b"abc")) == b"abc"


@pytest.mark.parametrize("bad", [5, 6, 7, -1])
def test_unknown_codec(bad):
    with pytest.raises(CompressionError):
        compress(bad, b"x")
    with pytest.raises(CompressionError):
        decompress(bad, b"x")


@pytest.mark.parametrize("data", DATA[1:], ids=lambda d: f"len{len(d)}")
def test_gzip_interop(data):
    assert decompress(C.GZIP, kc.gzip_encode(data)) == data
    assert decompress(C.GZIP, ac.gzip_encode(data)) == data
    assert kc.gzip_decode(compress(C.GZIP, data)) == data


def test_gzip_concatenated_members():
    a = compress(C.GZIP, b"abc")
    b = compress(C.GZIP, b"def")
    assert decompress(C.GZIP, a + b) == b"abcdef"


@pytest.mark.parametrize("data", DATA[1:], ids=lambda d: f"len{len(d)}")
def test_snappy_xerial_written_like_java(data):
    out = compress(C.SNAPPY, data)
    assert out.startswith(b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01")
    # byte-identical to aiokafka's xerial writer (32 KiB blocks, same framing)
    assert out == ac.snappy_encode(data)
    assert ac.snappy_decode(out) == data


@pytest.mark.parametrize("data", DATA[1:], ids=lambda d: f"len{len(d)}")
def test_snappy_reads_raw_and_xerial(data):
    assert decompress(C.SNAPPY, ac.snappy_encode(data, xerial_compatible=False)) == data
    assert decompress(C.SNAPPY, ac.snappy_encode(data, xerial_compatible=True, xerial_blocksize=1000)) == data


def test_snappy_empty_xerial():
    assert decompress(C.SNAPPY, C._XERIAL_HEADER) == b""


@pytest.mark.parametrize("data", DATA[1:], ids=lambda d: f"len{len(d)}")
def test_lz4_interop(data):
    ours = compress(C.LZ4, data)
    assert lz4.frame.decompress(ours) == data
    assert ac.lz4_decode(ours) == data
    assert kc.lz4_decode(ours) == data
    assert decompress(C.LZ4, lz4.frame.compress(data)) == data
    assert decompress(C.LZ4, ac.lz4_encode(data)) == data
    assert decompress(C.LZ4, lz4.frame.compress(
        data, block_linked=True, block_checksum=True, content_checksum=True)) == data


def test_lz4_frame_layout_matches_kafka():
    out = compress(C.LZ4, b"abc")
    assert out[:4] == b"\x04\x22\x4d\x18"
    assert out[4] == 0x60  # version 01, independent blocks, no checksums, no size
    assert out[5] == 0x40  # 64 KiB blocks
    assert (C._xxh32_short(out[4:6]) >> 8) & 0xFF == out[6]


def test_xxh32_known_vectors():
    # reference values of xxHash32 (seed 0)
    assert C._xxh32_short(b"") == 0x02CC5D05
    assert C._xxh32_short(b"a") == 0x550D7456
    assert C._xxh32_short(b"abc") == 0x32D153FF
    assert C._xxh32_short(b"Nobody inspects the spammish repetition") == 0xE2293B2F


def test_lz4_legacy_broken_header_checksum():
    data = b"legacy kafka 0.8 lz4" * 100
    broken = compress(C.LZ4, data, legacy_lz4_checksum=True)
    good = compress(C.LZ4, data)
    assert broken[6] == (C._xxh32_short(broken[:6]) >> 8) & 0xFF
    assert broken[6] != good[6]
    with pytest.raises(RuntimeError):
        lz4.frame.decompress(broken)  # a strict reader rejects it ...
    assert decompress(C.LZ4, broken) == data  # ... we accept it


def test_lz4_legacy_checksum_with_content_size():
    data = b"q" * 1000
    out = bytearray(lz4.frame.compress(data, store_size=True))
    assert out[4] & 0x08
    out[14] = (C._xxh32_short(bytes(out[:14])) >> 8) & 0xFF  # broken (magic-inclusive) checksum
    assert decompress(C.LZ4, bytes(out)) == data


def test_lz4_wrong_header_checksum_rejected():
    out = bytearray(compress(C.LZ4, b"abc"))
    out[6] ^= 0x5A
    with pytest.raises(CompressionError):
        decompress(C.LZ4, bytes(out))


@pytest.mark.parametrize("data", DATA[1:], ids=lambda d: f"len{len(d)}")
def test_zstd_interop(data):
    assert decompress(C.ZSTD, kc.zstd_encode(data)) == data
    assert kc.zstd_decode(compress(C.ZSTD, data)) == data


def test_zstd_without_content_size():
    data = b"streamed " * 50_000
    co = zstandard.ZstdCompressor().compressobj()
    frame = co.compress(data) + co.flush()
    assert zstandard.get_frame_parameters(frame).content_size == zstandard.CONTENTSIZE_UNKNOWN
    assert decompress(C.ZSTD, frame) == data


@pytest.mark.parametrize("codec", CODECS)
def test_size_bomb_capped(codec):
    bomb = compress(codec, b"\0" * 5_000_000)
    with pytest.raises(CompressionError, match="exceeds"):
        decompress(codec, bomb, max_size=1_000_000)
    assert len(decompress(codec, bomb, max_size=5_000_000)) == 5_000_000


@pytest.mark.parametrize("codec", CODECS)
def test_truncated_and_garbage(codec):
    data = os.urandom(5000) * 4
    out = compress(codec, data)
    for bad in (out[: len(out) // 2], out[:-3], b"\x00" * 20, os.urandom(64)):
        try:
            got = decompress(codec, bad)
        except CompressionError:
            continue
        assert got != data or bad == out


def test_gzip_invalid():
    with pytest.raises(CompressionError):
        decompress(C.GZIP, b"\x1f\x8b" + b"\x00" * 30)
    assert zlib  # keep import used


def test_decompress_stored_is_one_shot_and_falls_back_for_kafkas_quirks():
    """What the log cleaner reads back: every codec whole, an LZ4 frame with Kafka's
    legacy header checksum, two concatenated zstd frames, and damaged input refused."""
    import os

    from protocol import compression as C

    for codec in (1, 2, 3, 4):
        for n in (0, 10, 100_000, 3_000_000):
            data = os.urandom(n // 2) + b"a" * (n - n // 2)
            assert C.decompress_stored(codec, C.compress(codec, data)) == data
    legacy = C.compress(3, b"hello" * 100, legacy_lz4_checksum=True)
    assert C.decompress_stored(3, legacy) == b"hello" * 100
    assert C.decompress_stored(4, C.compress(4, b"x" * 1000) + C.compress(4, b"y" * 10)) == b"x" * 1000 + b"y" * 10
    with pytest.raises(C.CompressionError):
        C.decompress_stored(3, b"garbage-garbage")
    with pytest.raises(C.CompressionError):
        C.decompress_stored(4, C.compress(4, b"z" * 5000)[:-3])
