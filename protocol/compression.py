"""Record-batch compression codecs (sans-IO).

Codec ids are Kafka's: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd.

* gzip: RFC 1952 members written with zlib; reading accepts concatenated members.
* snappy: written in the xerial block framing used by Java Kafka producers
  (``\\x82SNAPPY\\x00`` + version 1 + compatible version 1, then
  ``[int32 length][raw snappy block]`` chunks of 32 KiB input).  Reading accepts the
  xerial framing and a bare raw snappy block (librdkafka may send either).
* lz4: LZ4 frame format, 64 KiB independent blocks, no content size, no content
  checksum (as KafkaLZ4BlockOutputStream).  ``legacy_lz4_checksum=True`` writes the
  header checksum the broken way magic 0 messages used (xxh32 over the magic bytes too);
  reading tolerates either header checksum.
* zstd: one zstd frame; reading works when the frame lacks a content size.

All decompression is bounded by ``max_size`` (default :data:`DEFAULT_MAX_DECOMPRESSED`),
checked as the output grows, so a compression bomb raises :class:`CompressionError`
instead of exhausting memory.  :func:`iter_decompress` streams: it yields the output in
pieces of at most ``chunk_size`` bytes and never holds more than one piece (plus, for
snappy, one xerial block, whose size the codec bounds to ~32x its compressed size), so
a caller that consumes the pieces as they come (the record walker) walks a batch of any
size in bounded memory.  :func:`decompress` joins the pieces.
Every failure raises :class:`CompressionError` (a ``ValueError``).
"""

from __future__ import annotations

import struct
import zlib

import cramjam
import lz4.frame
import zstandard

__all__ = [
    "NONE",
    "GZIP",
    "SNAPPY",
    "LZ4",
    "ZSTD",
    "CODEC_NAMES",
    "DEFAULT_MAX_DECOMPRESSED",
    "CompressionError",
    "DecompressedSizeError",
    "compress",
    "decompress",
    "iter_decompress",
]

NONE, GZIP, SNAPPY, LZ4, ZSTD = 0, 1, 2, 3, 4
CODEC_NAMES = {NONE: "none", GZIP: "gzip", SNAPPY: "snappy", LZ4: "lz4", ZSTD: "zstd"}

#: Upper bound on the decompressed size of one batch / wrapper payload.  Kafka itself does
#: not cap this; we do, so a tiny "zip bomb" cannot take the broker's memory.
DEFAULT_MAX_DECOMPRESSED = 256 * 1024 * 1024

XERIAL_MAGIC = b"\x82SNAPPY\x00"
_XERIAL_HEADER = XERIAL_MAGIC + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024

_LZ4_MAGIC = b"\x04\x22\x4d\x18"

_I32 = struct.Struct(">i")
_U32LE = struct.Struct("<I")


class CompressionError(ValueError):
    """Bad compressed data, an unknown codec, or output over the size bound."""


class DecompressedSizeError(CompressionError):
    """The output grew past ``max_size`` (``limit``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(f"decompressed size exceeds {limit} bytes")
        self.limit = limit


# ---------------------------------------------------------------------------- xxh32
_P1, _P2, _P3, _P4, _P5 = 2654435761, 2246822519, 3266489917, 668265263, 374761393
_M32 = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _xxh32_short(data: bytes, seed: int = 0) -> int:
    """xxHash32 (used only on LZ4 frame headers, so inputs are a few bytes)."""
    n = len(data)
    i = 0
    if n >= 16:
        v1 = (seed + _P1 + _P2) & _M32
        v2 = (seed + _P2) & _M32
        v3 = seed & _M32
        v4 = (seed - _P1) & _M32
        while i + 16 <= n:
            a, b, c, d = struct.unpack_from("<4I", data, i)
            v1 = (_rotl((v1 + a * _P2) & _M32, 13) * _P1) & _M32
            v2 = (_rotl((v2 + b * _P2) & _M32, 13) * _P1) & _M32
            v3 = (_rotl((v3 + c * _P2) & _M32, 13) * _P1) & _M32
            v4 = (_rotl((v4 + d * _P2) & _M32, 13) * _P1) & _M32
            i += 16
        h = (_rotl(v1, 1) + _rotl(v2, 7) + _rotl(v3, 12) + _rotl(v4, 18)) & _M32
    else:
        h = (seed + _P5) & _M32
    h = (h + n) & _M32
    while i + 4 <= n:
        (w,) = _U32LE.unpack_from(data, i)
        h = (_rotl((h + w * _P3) & _M32, 17) * _P4) & _M32
        i += 4
    while i < n:
        h = (_rotl((h + data[i] * _P5) & _M32, 11) * _P1) & _M32
        i += 1
    h ^= h >> 15
    h = (h * _P2) & _M32
    h ^= h >> 13
    h = (h * _P3) & _M32
    h ^= h >> 16
    return h


# ---------------------------------------------------------------------------- gzip
def _gzip_compress(data) -> bytes:
    co = zlib.compressobj(6, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def _iter_zlib(data, wbits: int, chunk: int):
    """gzip (or zlib) members; concatenated members are read on, other trailing bytes
    ignored (as Java's GZIPInputStream does).  Input is fed in 64 KiB slices so that
    ``unconsumed_tail`` stays small."""
    buf = memoryview(data)
    pos = 0
    end = len(buf)
    while True:
        d = zlib.decompressobj(wbits)
        while not d.eof:
            if pos >= end:
                tail = d.flush()
                if tail:
                    yield tail
                if not d.eof:
                    raise CompressionError("truncated gzip data")
                break
            piece = buf[pos:pos + 65536]
            pos += len(piece)
            while piece:
                part = d.decompress(piece, chunk)
                if part:
                    yield part
                if d.eof:
                    break
                piece = d.unconsumed_tail
        pos -= len(d.unused_data)
        if end - pos >= 2 and buf[pos] == 0x1F and buf[pos + 1] == 0x8B:
            continue
        return


# ---------------------------------------------------------------------------- snappy
def _snappy_compress(data) -> bytes:
    data = memoryview(data)
    parts = [_XERIAL_HEADER]
    for i in range(0, len(data), _XERIAL_BLOCK) if len(data) else ():
        block = bytes(cramjam.snappy.compress_raw(data[i:i + _XERIAL_BLOCK]))
        parts.append(_I32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_decompress(block, max_size: int, already: int = 0) -> bytes:
    try:
        n = cramjam.snappy.decompress_raw_len(block)
    except Exception as e:  # noqa: BLE001 - cramjam raises its own error types
        raise CompressionError(f"invalid snappy block: {e}") from None
    if already + n > max_size:
        raise DecompressedSizeError(max_size)
    try:
        return bytes(cramjam.snappy.decompress_raw(block))
    except Exception as e:  # noqa: BLE001
        raise CompressionError(f"invalid snappy block: {e}") from None


def _iter_snappy(data, max_size: int):
    data = memoryview(data)
    if bytes(data[:8]) == XERIAL_MAGIC and len(data) >= 16:
        pos = 16
        total = 0
        end = len(data)
        while pos < end:
            if pos + 4 > end:
                raise CompressionError("truncated xerial snappy block length")
            (n,) = _I32.unpack_from(data, pos)
            pos += 4
            if n < 0 or pos + n > end:
                raise CompressionError(f"invalid xerial snappy block length {n}")
            part = _snappy_raw_decompress(data[pos:pos + n], max_size, total)
            total += len(part)
            yield part
            pos += n
        return
    yield _snappy_raw_decompress(data, max_size)


# ---------------------------------------------------------------------------- lz4
def _lz4_compress(data, legacy_checksum: bool = False) -> bytes:
    out = lz4.frame.compress(
        bytes(data),
        block_size=lz4.frame.BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if legacy_checksum:
        # magic 0 (KafkaLZ4BlockOutputStream with useBrokenFlagDescriptorChecksum):
        # header checksum computed over magic + FLG + BD instead of FLG + BD.
        flg_end = 6  # magic(4) FLG BD; no content size since store_size=False
        hc = (_xxh32_short(out[:flg_end]) >> 8) & 0xFF
        out = out[:flg_end] + bytes([hc]) + out[flg_end + 1:]
    return out


def _iter_lz4(data, chunk: int):
    """Decode an LZ4 frame, tolerating Kafka's legacy (magic 0) header checksum."""
    data = bytes(data)
    if len(data) < 7 or data[:4] != _LZ4_MAGIC:
        raise CompressionError("invalid lz4 frame magic")
    flg = data[4]
    hc_pos = 6 + (8 if flg & 0x08 else 0) + (4 if flg & 0x01 else 0)
    if hc_pos >= len(data):
        raise CompressionError("truncated lz4 frame header")
    good = (_xxh32_short(data[4:hc_pos]) >> 8) & 0xFF
    if data[hc_pos] != good:
        legacy = (_xxh32_short(data[:hc_pos]) >> 8) & 0xFF
        if data[hc_pos] != legacy:
            raise CompressionError("lz4 frame header checksum mismatch")
        data = data[:hc_pos] + bytes([good]) + data[hc_pos + 1:]
    d = lz4.frame.LZ4FrameDecompressor()
    piece = data
    while True:
        part = d.decompress(piece, max_length=chunk)
        if part:
            yield part
        if d.eof:
            return
        if d.needs_input:
            raise CompressionError("truncated lz4 frame")
        piece = b""


# ---------------------------------------------------------------------------- zstd
_ZSTD_C = zstandard.ZstdCompressor(level=3)
_ZSTD_D = zstandard.ZstdDecompressor()


_ZSTD_MAGIC = 0xFD2FB528


def _zstd_frame_end(mv, pos: int) -> int:
    """End of the zstd frame (or skippable frame) at ``pos``, from its block headers; so
    that a truncated frame or bytes after the last frame are errors, not silently
    ignored (the streaming reader reports neither)."""
    end = len(mv)
    if end - pos < 8:
        raise CompressionError("truncated zstd frame header")
    (magic,) = _U32LE.unpack_from(mv, pos)
    if magic & 0xFFFFFFF0 == 0x184D2A50:  # skippable frame
        (n,) = _U32LE.unpack_from(mv, pos + 4)
        if pos + 8 + n > end:
            raise CompressionError("truncated zstd skippable frame")
        return pos + 8 + n
    if magic != _ZSTD_MAGIC:
        raise CompressionError(f"invalid zstd frame magic 0x{magic:08x}")
    fhd = mv[pos + 4]
    try:
        p = pos + zstandard.frame_header_size(bytes(mv[pos:pos + 18]))
    except zstandard.ZstdError as e:
        raise CompressionError(f"invalid zstd frame header: {e}") from None
    while True:
        if p + 3 > end:
            raise CompressionError("truncated zstd frame: a block header is missing")
        b = mv[p] | (mv[p + 1] << 8) | (mv[p + 2] << 16)
        btype = (b >> 1) & 3
        if btype == 3:
            raise CompressionError("invalid zstd block type 3")
        p += 3 + (1 if btype == 1 else b >> 3)
        if b & 1:
            break
    if fhd & 0x04:
        p += 4  # content checksum
    if p > end:
        raise CompressionError("truncated zstd frame")
    return p


def _iter_zstd(data, chunk: int):
    mv = memoryview(data)
    pos = 0
    end = len(mv)
    if end == 0:
        raise CompressionError("empty zstd data")
    while pos < end:
        frame_end = _zstd_frame_end(mv, pos)
        (magic,) = _U32LE.unpack_from(mv, pos)
        if magic == _ZSTD_MAGIC:
            yield from _ZSTD_D.read_to_iter(mv[pos:frame_end], read_size=65536, write_size=chunk)
        pos = frame_end


# ---------------------------------------------------------------------------- public
def compress(codec: int, data, *, legacy_lz4_checksum: bool = False) -> bytes:
    """Compress ``data`` with Kafka codec id ``codec``."""
    if codec == GZIP:
        return _gzip_compress(data)
    if codec == SNAPPY:
        return _snappy_compress(data)
    if codec == LZ4:
        return _lz4_compress(data, legacy_lz4_checksum)
    if codec == ZSTD:
        return _ZSTD_C.compress(bytes(data))
    if codec == NONE:
        return bytes(data)
    raise CompressionError(f"unknown compression codec {codec}")


#: size of the pieces :func:`iter_decompress` yields
CHUNK_SIZE = 256 * 1024


def iter_decompress(codec: int, data, *, max_size: int | None = None, chunk_size: int = CHUNK_SIZE):
    """Yield the decompressed bytes of ``data`` in pieces (at most ``chunk_size`` bytes
    each, except snappy: one xerial block at a time).

    The output total is checked as it grows: past ``max_size`` (default
    :data:`DEFAULT_MAX_DECOMPRESSED`) it raises :class:`CompressionError` before the
    next piece is produced.  Malformed or truncated input raises it too.
    """
    if max_size is None:
        max_size = DEFAULT_MAX_DECOMPRESSED
    total = 0
    try:
        if codec == GZIP:
            it = _iter_zlib(data, 47, chunk_size)  # 32+15: gzip or zlib header
        elif codec == SNAPPY:
            it = _iter_snappy(data, max_size)
        elif codec == LZ4:
            it = _iter_lz4(data, chunk_size)
        elif codec == ZSTD:
            it = _iter_zstd(data, chunk_size)
        elif codec == NONE:
            it = iter((bytes(data),))
        else:
            raise CompressionError(f"unknown compression codec {codec}")
        for part in it:
            total += len(part)
            if total > max_size:
                raise DecompressedSizeError(max_size)
            yield part
    except CompressionError:
        raise
    except (zlib.error, ValueError, TypeError, struct.error, RuntimeError, zstandard.ZstdError) as e:
        raise CompressionError(f"invalid {CODEC_NAMES.get(codec, codec)} data: {e}") from None


def decompress_stored(codec: int, data) -> bytes:
    """Decompress a batch read back from a segment, whole and in one call: fast for the
    log cleaner, which reads every batch of a partition. Stored batches were walked in
    full when they were produced (their decompressed size bounded by
    ``socket.request.max.bytes``), so no output bound is kept here; an LZ4 frame with
    Kafka's legacy header checksum and anything one-shot decoding refuses go through
    :func:`decompress` (which raises CompressionError for damaged input)."""
    try:
        if codec == LZ4:
            return lz4.frame.decompress(bytes(data))
        if codec == ZSTD:
            dobj = _ZSTD_D.decompressobj()
            out = dobj.decompress(bytes(data))
            if dobj.eof and not dobj.unused_data:
                return out
        if codec == GZIP:
            return zlib.decompress(bytes(data), 47)
    except (RuntimeError, ValueError, zlib.error, zstandard.ZstdError):
        pass
    return decompress(codec, data)


def decompress(codec: int, data, *, max_size: int | None = None) -> bytes:
    """Decompress ``data`` (bytes-like) with Kafka codec id ``codec``, whole.

    Raises :class:`CompressionError` on malformed input, an unknown codec, or output
    larger than ``max_size`` (default :data:`DEFAULT_MAX_DECOMPRESSED`).
    """
    if codec == NONE:
        return bytes(data)
    return b"".join(iter_decompress(codec, data, max_size=max_size))
