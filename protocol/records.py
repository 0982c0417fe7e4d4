"""Kafka record formats: v2 record batches and legacy magic 0/1 message sets (sans-IO).

v2 batch (61-byte header, big-endian)::

    0  baseOffset            int64     (not covered by the CRC)
    8  batchLength           int32     bytes after this field
    12 partitionLeaderEpoch  int32     (not covered by the CRC)
    16 magic                 int8 = 2
    17 crc                   uint32    CRC-32C of bytes 21 .. end
    21 attributes            int16     bits 0-2 codec, 3 LogAppendTime, 4 txn, 5 control,
                                       6 delete horizon (KIP-534: baseTimestamp holds it)
    23 lastOffsetDelta       int32
    27 baseTimestamp         int64
    35 maxTimestamp          int64
    43 producerId            int64
    51 producerEpoch         int16
    53 baseSequence          int32
    57 recordsCount          int32
    61 records (one compressed block when a codec is set)

Record: length varint, attributes int8, timestampDelta varlong, offsetDelta varint,
key (varint length, -1 null), value (same), header count varint, headers
(key: varint length + UTF-8, value: varint length, -1 null).

Legacy message (magic 0/1): offset int64, size int32, crc uint32 (CRC-32 of magic..end),
magic int8, attributes int8 (bits 0-2 codec, bit 3 LogAppendTime for v1),
timestamp int64 (v1 only), key (int32 length, -1 null), value (int32 length, -1 null).
A compressed message ("wrapper") holds a compressed message set as its value.

The hot-path functions (:func:`parse_batch_header`, :func:`iter_batches`,
:func:`verify_crc`, :func:`set_base_offset`, :func:`set_log_append_time`,
:func:`set_max_timestamp`) touch only the header bytes and never decode records.
"""

from __future__ import annotations

import struct
import zlib
from typing import Iterable, Iterator, NamedTuple, Sequence

from crc32c import crc32c

from . import compression as _compression
from .compression import CompressionError

__all__ = [
    "RecordFormatError",
    "InvalidRecordError",
    "CorruptRecordError",
    "UnsupportedCompressionTypeError",
    "DecompressedTooLargeError",
    "BatchHeader",
    "Record",
    "LegacyRecord",
    "LegacyEntry",
    "HEADER_SIZE",
    "LOG_OVERHEAD",
    "NO_TIMESTAMP",
    "parse_batch_header",
    "iter_batches",
    "magic_of",
    "verify_crc",
    "compute_crc",
    "set_base_offset",
    "set_partition_leader_epoch",
    "set_log_append_time",
    "set_max_timestamp",
    "iter_records",
    "walk_batch",
    "build_batch",
    "RawRecord",
    "iter_raw_records",
    "encode_raw_records",
    "assemble_batch",
    "build_empty_batch",
    "iter_legacy_entries",
    "parse_legacy",
    "build_legacy",
    "up_convert",
    "down_convert",
    "check_produce_records",
]

# --------------------------------------------------------------------------- errors


class RecordFormatError(ValueError):
    """Base class for record-format problems found while parsing or converting."""


class InvalidRecordError(RecordFormatError):
    """Structurally invalid batch / record (Kafka's InvalidRecordException)."""


class CorruptRecordError(RecordFormatError):
    """CRC mismatch, bad sizes or undecodable bytes (Kafka's CorruptRecordException)."""


class DecompressedTooLargeError(CorruptRecordError):
    """A compressed batch or wrapper decompresses to more than the allowed bytes."""


class UnsupportedCompressionTypeError(RecordFormatError):
    """The requested conversion cannot represent the batch's codec (zstd to magic < 2)."""


# --------------------------------------------------------------------------- constants

NO_TIMESTAMP = -1
LOG_OVERHEAD = 12  # offset int64 + size int32
HEADER_SIZE = 61
MAGIC_OFFSET = 16
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21
MAX_TIMESTAMP_OFFSET = 35
RECORDS_COUNT_OFFSET = 57
PARTITION_LEADER_EPOCH_OFFSET = 12
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD  # 49

COMPRESSION_MASK = 0x07
TIMESTAMP_TYPE_MASK = 0x08
TRANSACTIONAL_MASK = 0x10
CONTROL_MASK = 0x20
#: KIP-534: the log cleaner set a delete horizon, stored in baseTimestamp (record
#: timestamp deltas are relative to it); tombstones and markers of the batch go after it
DELETE_HORIZON_MASK = 0x40

LEGACY_RECORD_OVERHEAD_V0 = 14  # crc 4 + magic 1 + attrs 1 + key len 4 + value len 4
LEGACY_RECORD_OVERHEAD_V1 = 22

_HEADER = struct.Struct(">qiibIhiqqqhii")
_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_IU = struct.Struct(">I")
_H = struct.Struct(">h")
_ATTR_TS = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
_LEGACY_HDR = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1

assert _HEADER.size == HEADER_SIZE


# --------------------------------------------------------------------------- v2 header


class BatchHeader(NamedTuple):
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if self.attributes & TIMESTAMP_TYPE_MASK else 0

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_MASK)

    @property
    def delete_horizon_ms(self) -> int | None:
        """KIP-534: the delete horizon the log cleaner set (baseTimestamp), or None."""
        return self.base_timestamp if self.attributes & DELETE_HORIZON_MASK else None

    @property
    def size(self) -> int:
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta


def parse_batch_header(buf, pos: int = 0) -> BatchHeader:
    """Parse the 61-byte v2 header at ``pos``.

    Raises :class:`CorruptRecordError` for a truncated header, a non-2 magic or a
    ``batchLength`` smaller than the header.
    """
    if len(buf) - pos < HEADER_SIZE:
        raise CorruptRecordError(
            f"batch header at position {pos} is truncated: {len(buf) - pos} bytes < {HEADER_SIZE}")
    h = BatchHeader._make(_HEADER.unpack_from(buf, pos))
    if h.magic != 2:
        raise CorruptRecordError(f"batch magic {h.magic} at position {pos} is not 2")
    if h.batch_length < MIN_BATCH_LENGTH:
        raise CorruptRecordError(
            f"batchLength {h.batch_length} at position {pos} is less than the minimum {MIN_BATCH_LENGTH}")
    return h


def magic_of(buf, pos: int = 0) -> int:
    """The magic byte of the batch / message at ``pos`` (same offset in every format)."""
    if len(buf) - pos <= MAGIC_OFFSET:
        raise CorruptRecordError(f"buffer too short to hold a magic byte at position {pos}")
    m = buf[pos + MAGIC_OFFSET]
    return m - 256 if m > 127 else m


def iter_batches(buf) -> Iterator[tuple[int, BatchHeader]]:
    """Yield ``(position, header)`` for each complete v2 batch in ``buf``.

    Stops cleanly at a partial trailing batch (as Kafka's log input stream does).
    Raises :class:`CorruptRecordError` for an impossible size or magic.
    """
    pos = 0
    end = len(buf)
    unpack = _HEADER.unpack_from
    make = BatchHeader._make
    while end - pos >= LOG_OVERHEAD:
        (length,) = _I.unpack_from(buf, pos + 8)
        if length < MIN_BATCH_LENGTH:
            raise CorruptRecordError(
                f"batchLength {length} at position {pos} is less than the minimum {MIN_BATCH_LENGTH}")
        if end - pos < length + LOG_OVERHEAD:
            return
        h = make(unpack(buf, pos))
        if h.magic != 2:
            raise CorruptRecordError(f"batch magic {h.magic} at position {pos} is not 2")
        yield pos, h
        pos += length + LOG_OVERHEAD


def compute_crc(buf, pos: int, size: int) -> int:
    """CRC-32C of the attributes..end part of the batch at ``pos`` of total ``size``."""
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + size])


def verify_crc(buf, pos: int, header: BatchHeader) -> bool:
    """True when the stored CRC matches the batch bytes."""
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        return False
    return crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:end]) == header.crc


def set_base_offset(buf: bytearray, pos: int, base_offset: int) -> None:
    """Patch baseOffset in place (not covered by the CRC)."""
    _Q.pack_into(buf, pos, base_offset)


def set_partition_leader_epoch(buf: bytearray, pos: int, epoch: int) -> None:
    """Patch partitionLeaderEpoch in place (not covered by the CRC)."""
    _I.pack_into(buf, pos + PARTITION_LEADER_EPOCH_OFFSET, epoch)


def _rewrite_crc(buf: bytearray, pos: int) -> None:
    (length,) = _I.unpack_from(buf, pos + 8)
    _IU.pack_into(buf, pos + CRC_OFFSET,
                  crc32c(memoryview(buf)[pos + ATTRIBUTES_OFFSET:pos + LOG_OVERHEAD + length]))


def set_log_append_time(buf: bytearray, pos: int, ts: int) -> None:
    """Set the LogAppendTime attribute bit and maxTimestamp = ``ts``; recompute the CRC."""
    (attrs,) = _H.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    _H.pack_into(buf, pos + ATTRIBUTES_OFFSET, attrs | TIMESTAMP_TYPE_MASK)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    _rewrite_crc(buf, pos)


def set_max_timestamp(buf: bytearray, pos: int, ts: int, timestamp_type: int | None = None) -> None:
    """Set maxTimestamp (and, if given, the timestamp type bit); recompute the CRC.

    A no-op (CRC untouched) when nothing changes, like Kafka's setMaxTimestamp.
    """
    (attrs,) = _H.unpack_from(buf, pos + ATTRIBUTES_OFFSET)
    (cur,) = _Q.unpack_from(buf, pos + MAX_TIMESTAMP_OFFSET)
    new_attrs = attrs
    if timestamp_type is not None:
        new_attrs = (attrs | TIMESTAMP_TYPE_MASK) if timestamp_type == 1 else (attrs & ~TIMESTAMP_TYPE_MASK)
    if cur == ts and new_attrs == attrs:
        return
    _H.pack_into(buf, pos + ATTRIBUTES_OFFSET, new_attrs)
    _Q.pack_into(buf, pos + MAX_TIMESTAMP_OFFSET, ts)
    _rewrite_crc(buf, pos)


# --------------------------------------------------------------------------- varints


def _read_varint(buf, pos: int) -> tuple[int, int]:
    """Zig-zag varint (up to 10 bytes) -> (value, new_pos). IndexError on underflow."""
    b = buf[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    result = b & 0x7F
    shift = 7
    pos += 1
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            break
        shift += 7
        if shift > 63:
            raise InvalidRecordError("varint is longer than 10 bytes")
    return (result >> 1) ^ -(result & 1), pos


def _write_varint(out: bytearray, value: int) -> None:
    v = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)


# --------------------------------------------------------------------------- records


class Record(NamedTuple):
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list | tuple = ()  # list[tuple[str, bytes | None]]
    attributes: int = 0


def _batch_payload(buf, pos: int, header: BatchHeader, max_size: int | None = None):
    """The batch's records bytes whole: the payload itself (uncompressed) or its
    decompressed output joined (see :func:`_record_pieces`)."""
    pieces = list(_record_pieces(buf, pos, header, max_size))
    return pieces[0] if len(pieces) == 1 else b"".join(pieces)


def _decode(data, count: int, base_offset: int, base_ts: int, lat: int | None,
            want_kv: bool, raw: bool = False) -> Iterator:
    """The one reader of a batch's records bytes: yields :class:`Record` (``want_kv``:
    with keys, values and headers) or, with ``raw``, :class:`RawRecord` (the stored
    bytes of key, value and headers kept whole)."""
    pos = 0
    end = len(data)
    rv = _read_varint
    mv = memoryview(data) if raw else data
    try:
        for _ in range(count):
            length, pos = rv(data, pos)
            start = pos
            if length < 0 or pos + length > end:
                raise InvalidRecordError(f"invalid record length {length}")
            attrs = data[pos]
            pos += 1
            ts_delta, pos = rv(data, pos)
            off_delta, pos = rv(data, pos)
            body_start = pos
            klen, pos = rv(data, pos)
            if klen < 0:
                key = None
            else:
                key = bytes(data[pos:pos + klen]) if want_kv or raw else None
                pos += klen
            vlen, pos = rv(data, pos)
            if vlen < 0:
                value = None
            else:
                value = bytes(data[pos:pos + vlen]) if want_kv else None
                pos += vlen
            nh, pos = rv(data, pos)
            if nh < 0:
                raise InvalidRecordError(f"invalid number of record headers {nh}")
            headers = []
            for _h in range(nh):
                hk, pos = rv(data, pos)
                if hk < 0:
                    raise InvalidRecordError(f"invalid negative header key size {hk}")
                hkey = bytes(data[pos:pos + hk])
                pos += hk
                hv, pos = rv(data, pos)
                if hv < 0:
                    hval = None
                else:
                    hval = bytes(data[pos:pos + hv])
                    pos += hv
                if raw:
                    headers.append((hkey, hval))
                elif want_kv:
                    headers.append((hkey.decode("utf-8", "replace"), hval))
            if pos - start != length:
                raise InvalidRecordError(
                    f"invalid record size: expected {length} bytes in record payload, read {pos - start}")
            ts = lat if lat is not None else base_ts + ts_delta
            if raw:
                yield RawRecord(base_offset + off_delta, ts, attrs, key, vlen >= 0, bytes(mv[body_start:pos]),
                                tuple(headers))
            else:
                yield Record(base_offset + off_delta, ts, key, value, headers, attrs)
    except IndexError:
        raise InvalidRecordError("record data underflow: batch is shorter than its records") from None
    if pos != end:
        raise InvalidRecordError(
            f"incorrect declared batch size, {end - pos} bytes remaining after {count} records")


def iter_records(buf, pos: int = 0, header: BatchHeader | None = None, *,
                 max_decompressed: int | None = None) -> Iterator[Record]:
    """Decode the records of the v2 batch at ``pos`` (decompressing as needed).

    Offsets and timestamps are absolute; in a LogAppendTime batch every record's
    timestamp is the batch maxTimestamp.  Raises :class:`InvalidRecordError` /
    :class:`CorruptRecordError` on malformed input.
    """
    if header is None:
        header = parse_batch_header(buf, pos)
    if header.records_count < 0:
        raise InvalidRecordError(f"invalid recordsCount {header.records_count}")
    data = _batch_payload(buf, pos, header, max_decompressed)
    lat = header.max_timestamp if header.attributes & TIMESTAMP_TYPE_MASK else None
    return _decode(data, header.records_count, header.base_offset, header.base_timestamp, lat, True)


def _record_pieces(buf, pos: int, header: BatchHeader, max_decompressed: int | None):
    """The batch's records bytes: the payload itself, or its decompressed output in
    pieces (bounded memory; errors as CorruptRecordError / DecompressedTooLargeError)."""
    end = pos + header.batch_length + LOG_OVERHEAD
    if end > len(buf):
        raise CorruptRecordError(f"batch at position {pos} is truncated")
    payload = memoryview(buf)[pos + HEADER_SIZE:end]
    codec = header.compression
    if codec == 0:
        yield payload
        return
    if codec > 4:
        raise CorruptRecordError(f"unknown compression codec id {codec} in batch attributes")
    try:
        yield from _compression.iter_decompress(codec, payload, max_size=max_decompressed)
    except _compression.DecompressedSizeError as e:
        raise DecompressedTooLargeError(
            f"{_compression.CODEC_NAMES[codec]} batch at position {pos}: {e}") from None
    except CompressionError as e:
        raise CorruptRecordError(
            f"cannot decompress {_compression.CODEC_NAMES[codec]} batch at position {pos}: {e}") from None


def walk_batch(buf, pos: int, header: BatchHeader, *, max_decompressed: int | None = None):
    """Walk the batch's records with ``protocol.record_walk`` (every length and varint
    checked, the count exact), decompressing in pieces: bounded memory.  Returns
    ``(max_timestamp, index_of_max, deltas_ok)``; a LogAppendTime batch's max is its
    header's.  Raises InvalidRecordError / CorruptRecordError."""
    from protocol.record_walk import WALK_ERRORS, RecordWalker

    lat = bool(header.attributes & TIMESTAMP_TYPE_MASK)
    try:
        walker = RecordWalker(header.records_count, header.base_timestamp, lat)
        for piece in _record_pieces(buf, pos, header, max_decompressed):
            walker.feed(piece)
        max_ts, index_of_max, deltas_ok, _bad, _nulls = walker.finish()
    except WALK_ERRORS as e:
        raise InvalidRecordError(f"batch at position {pos}: {e}") from None
    if lat:
        return header.max_timestamp, 0, deltas_ok
    return max_ts, index_of_max, deltas_ok


def first_record_at_or_after(buf, pos: int, header: BatchHeader, target_ts: int,
                             min_offset: int, *, max_decompressed: int | None = None) -> tuple[int, int] | None:
    """``(offset, timestamp)`` of the first record of the batch at ``pos`` whose
    timestamp >= ``target_ts`` and offset >= ``min_offset``, or None (search by time).

    Reads only each record's length, timestamp delta and offset delta and jumps over
    the rest; LogAppendTime batches answer from the header (every record has
    maxTimestamp).  A compressed batch is read as it decompresses, in pieces, and the
    search stops at the first match.  Malformed records raise InvalidRecordError (a
    batch stored before the produce path walked every record, or damaged behind a
    valid CRC), never loop or over-read."""
    if header.attributes & TIMESTAMP_TYPE_MASK:
        if header.max_timestamp < target_ts:
            return None
        last = header.base_offset + header.last_offset_delta
        if header.compression == 0 and header.records_count == header.last_offset_delta + 1:
            return (max(header.base_offset, min_offset), header.max_timestamp) if min_offset <= last else None
        target_ts = -(1 << 63)  # any record at or past min_offset; offsets may have gaps
        lat = header.max_timestamp
    else:
        lat = None
    base_ts, base_off = header.base_timestamp, header.base_offset
    remaining = header.records_count
    rv = _read_varint
    carry = b""
    for piece in _record_pieces(buf, pos, header, max_decompressed):
        data = carry + bytes(piece) if carry else piece
        end = len(data)
        p = 0
        while remaining > 0 and p < end:
            try:
                b = data[p]
                if b < 0x80:
                    length = (b >> 1) ^ -(b & 1)
                    q = p + 1
                else:
                    length, q = rv(data, p)
            except IndexError:
                break  # the length varint continues in the next piece
            if length < 0:
                raise InvalidRecordError(f"invalid record length {length} at record {header.records_count - remaining}")
            rec_end = q + length
            if rec_end > end:
                break  # the record continues in the next piece
            try:
                b = data[q + 1]  # after the attributes byte
                if b < 0x80:
                    ts_delta = (b >> 1) ^ -(b & 1)
                    r = q + 2
                else:
                    ts_delta, r = rv(data, q + 1)
                b = data[r]
                off_delta = (b >> 1) ^ -(b & 1) if b < 0x80 else rv(data, r)[0]
            except IndexError:
                raise InvalidRecordError(
                    f"record {header.records_count - remaining} is shorter than its fields") from None
            if r >= rec_end:
                raise InvalidRecordError(
                    f"record {header.records_count - remaining} is shorter than its fields")
            ts = base_ts + ts_delta
            off = base_off + off_delta
            if ts >= target_ts and off >= min_offset:
                return off, (ts if lat is None else lat)
            p = rec_end
            remaining -= 1
        if remaining == 0:
            break
        carry = bytes(data[p:])
    if remaining > 0:
        raise InvalidRecordError(
            f"record data underflow: the batch holds fewer records than the {header.records_count} "
            "its header declares")
    return None


def _as_record(item, index: int):
    """Normalise a build_batch input item -> (offset|None, ts, key, value, headers)."""
    if isinstance(item, Record):
        return item.offset, item.timestamp, item.key, item.value, item.headers or ()
    if isinstance(item, dict):
        return (item.get("offset"), item.get("timestamp", NO_TIMESTAMP), item.get("key"),
                item.get("value"), item.get("headers") or ())
    # tuple (timestamp, key, value[, headers])
    ts, key, value, *rest = item
    return None, ts, key, value, (rest[0] if rest else ()) or ()


def _bytes_or_none(v):
    if v is None:
        return None
    if isinstance(v, str):
        return v.encode()
    return bytes(v)


def build_batch(records: Iterable, *, base_offset: int = 0, compression: int = 0,
                timestamp_type: int = 0, log_append_time: int | None = None,
                producer_id: int = -1, producer_epoch: int = -1, base_sequence: int = -1,
                partition_leader_epoch: int = -1, is_transactional: bool = False,
                is_control: bool = False) -> bytes:
    """Build one v2 batch.

    ``records`` items are :class:`Record` (its ``offset`` sets the offset delta
    relative to ``base_offset``; ``None`` means "next"), dicts with keys
    offset/timestamp/key/value/headers, or tuples ``(timestamp, key, value[, headers])``.
    Headers are ``(str|bytes key, bytes|None value)`` pairs.

    For ``timestamp_type=1`` (LogAppendTime) maxTimestamp is ``log_append_time``
    (default: the max record timestamp); the record timestamp deltas are kept.
    """
    items = [_as_record(r, i) for i, r in enumerate(records)]
    if not 0 <= compression <= 4:
        raise ValueError(f"unknown compression codec {compression}")
    base_ts = items[0][1] if items else NO_TIMESTAMP
    max_ts = NO_TIMESTAMP
    body = bytearray()
    rec = bytearray()
    last_delta = -1
    for i, (off, ts, key, value, headers) in enumerate(items):
        delta = (off - base_offset) if off is not None else last_delta + 1
        if delta <= last_delta or delta > 0x7FFFFFFF:
            raise InvalidRecordError(
                f"record offset delta {delta} must be > {last_delta} and fit an int32")
        last_delta = delta
        if ts > max_ts:
            max_ts = ts
        key = _bytes_or_none(key)
        value = _bytes_or_none(value)
        rec.clear()
        rec.append(0)
        _write_varint(rec, ts - base_ts)
        _write_varint(rec, delta)
        if key is None:
            _write_varint(rec, -1)
        else:
            _write_varint(rec, len(key))
            rec += key
        if value is None:
            _write_varint(rec, -1)
        else:
            _write_varint(rec, len(value))
            rec += value
        _write_varint(rec, len(headers))
        for hk, hv in headers:
            hkb = hk.encode() if isinstance(hk, str) else bytes(hk)
            _write_varint(rec, len(hkb))
            rec += hkb
            hv = _bytes_or_none(hv)
            if hv is None:
                _write_varint(rec, -1)
            else:
                _write_varint(rec, len(hv))
                rec += hv
        _write_varint(body, len(rec))
        body += rec
    if compression:
        body = _compression.compress(compression, body)
    attrs = compression
    if timestamp_type == 1:
        attrs |= TIMESTAMP_TYPE_MASK
        if log_append_time is not None:
            max_ts = log_append_time
    if is_transactional:
        attrs |= TRANSACTIONAL_MASK
    if is_control:
        attrs |= CONTROL_MASK
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(body),
                      partition_leader_epoch, 2, 0, attrs, last_delta, base_ts, max_ts,
                      producer_id, producer_epoch, base_sequence, len(items))
    out += body
    _rewrite_crc(out, 0)
    return bytes(out)


# --------------------------------------------------------------------------- raw records
# The log cleaner keeps records byte for byte: a record's key, value and headers are
# copied as stored; only its length, timestamp delta and offset delta are re-encoded
# when the batch gets a new base timestamp (KIP-534's delete horizon, or the first
# retained record's timestamp, as Kafka's MemoryRecordsBuilder sets it).


class RawRecord(NamedTuple):
    offset: int
    timestamp: int  # as read: a LogAppendTime batch's records all read its maxTimestamp
    attributes: int
    key: bytes | None
    has_value: bool
    body: bytes  # keyLength varint .. the last header, verbatim
    headers: tuple  # ((key bytes, value bytes | None), ...)


def iter_raw_records(data, count: int, base_offset: int, base_ts: int, lat: int | None) -> Iterator[RawRecord]:
    """The records of a batch's (decompressed) records bytes, with their stored bytes.
    Raises InvalidRecordError for a malformed record or a count that does not match."""
    return _decode(data, count, base_offset, base_ts, lat, False, raw=True)


def encode_raw_records(records: Iterable[RawRecord], base_offset: int, base_timestamp: int) -> bytes:
    """Records bytes for ``records`` in a batch of ``base_offset`` / ``base_timestamp``:
    each record's stored body (key, value, headers) behind its re-encoded deltas."""
    out = bytearray()
    rec = bytearray()
    for r in records:
        rec.clear()
        rec.append(r.attributes & 0xFF)
        _write_varint(rec, r.timestamp - base_timestamp)
        _write_varint(rec, r.offset - base_offset)
        _write_varint(out, len(rec) + len(r.body))
        out += rec
        out += r.body
    return bytes(out)


def assemble_batch(*, base_offset: int, last_offset_delta: int, partition_leader_epoch: int, attributes: int,
                   base_timestamp: int, max_timestamp: int, producer_id: int, producer_epoch: int,
                   base_sequence: int, records_count: int, records: bytes) -> bytes:
    """A v2 batch from its header fields and its records bytes (compressed already when
    ``attributes`` names a codec); the CRC is computed."""
    out = bytearray(HEADER_SIZE)
    _HEADER.pack_into(out, 0, base_offset, HEADER_SIZE - LOG_OVERHEAD + len(records), partition_leader_epoch, 2, 0,
                      attributes, last_offset_delta, base_timestamp, max_timestamp, producer_id, producer_epoch,
                      base_sequence, records_count)
    out += records
    _rewrite_crc(out, 0)
    return bytes(out)


def build_empty_batch(h: BatchHeader) -> bytes:
    """The header of ``h`` with no records (Kafka's DefaultRecordBatch.writeEmptyHeader):
    what the log cleaner keeps of a producer's last batch, so its sequence and epoch
    survive. Same offsets, producer fields and maxTimestamp; no codec, baseTimestamp -1."""
    attrs = h.attributes & (TIMESTAMP_TYPE_MASK | TRANSACTIONAL_MASK | CONTROL_MASK)
    return assemble_batch(base_offset=h.base_offset, last_offset_delta=h.last_offset_delta,
                          partition_leader_epoch=h.partition_leader_epoch, attributes=attrs,
                          base_timestamp=NO_TIMESTAMP, max_timestamp=h.max_timestamp, producer_id=h.producer_id,
                          producer_epoch=h.producer_epoch, base_sequence=h.base_sequence, records_count=0,
                          records=b"")


# --------------------------------------------------------------------------- control records

# EndTransactionMarker (KIP-98): a control batch (transactional + control attributes) of
# one record; key = version int16 (0) + type int16 (ABORT 0, COMMIT 1); value = version
# int16 (0) + coordinator epoch int32. The batch carries the producer id and epoch and
# base sequence -1.
CONTROL_ABORT, CONTROL_COMMIT = 0, 1
_CONTROL_KEY = struct.Struct(">hh")
_MARKER_VALUE = struct.Struct(">hi")


def build_end_txn_marker(producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int,
                         timestamp: int, base_offset: int = 0, partition_leader_epoch: int = -1,
                         log_append_time: bool = False) -> bytes:
    """The COMMIT or ABORT control batch the transaction coordinator writes
    (``log_append_time``: stamped as a LogAppendTime topic's batches are)."""
    key = _CONTROL_KEY.pack(0, CONTROL_COMMIT if commit else CONTROL_ABORT)
    value = _MARKER_VALUE.pack(0, coordinator_epoch)
    return build_batch([(timestamp, key, value)], base_offset=base_offset, producer_id=producer_id,
                       producer_epoch=producer_epoch, base_sequence=-1,
                       partition_leader_epoch=partition_leader_epoch, is_transactional=True, is_control=True,
                       timestamp_type=1 if log_append_time else 0,
                       log_append_time=timestamp if log_append_time else None)


def parse_control_record(key: bytes | None, value: bytes | None) -> tuple[int, int | None]:
    """(control type, coordinator epoch or None) of a control record; raises
    CorruptRecordError for a key shorter than 4 bytes or an unknown key version."""
    if key is None or len(key) < 4:
        raise CorruptRecordError(f"control record key of {0 if key is None else len(key)} bytes (4 needed)")
    version, ctype = _CONTROL_KEY.unpack_from(key)
    if version != 0:
        raise CorruptRecordError(f"control record key version {version} (0 expected)")
    epoch = None
    if ctype in (CONTROL_ABORT, CONTROL_COMMIT) and value is not None and len(value) >= 6:
        epoch = _MARKER_VALUE.unpack_from(value)[1]
    return ctype, epoch


# --------------------------------------------------------------------------- legacy


class LegacyEntry(NamedTuple):
    """One shallow legacy message (a plain message or a compressed wrapper)."""
    position: int
    offset: int
    size: int          # message size (after the 12-byte offset+size prefix)
    crc: int
    magic: int
    attributes: int
    timestamp: int     # -1 for v0
    key: bytes | None
    value: bytes | None

    @property
    def compression(self) -> int:
        return self.attributes & COMPRESSION_MASK

    @property
    def timestamp_type(self) -> int:
        return 1 if (self.magic > 0 and self.attributes & TIMESTAMP_TYPE_MASK) else 0

    @property
    def total_size(self) -> int:
        return self.size + LOG_OVERHEAD


class LegacyRecord(NamedTuple):
    """A deep (decompressed) legacy message with its absolute offset."""
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    magic: int
    attributes: int
    timestamp_type: int
    wrapper_compression: int   # codec of the enclosing wrapper (0 if none)
    crc: int
    crc_ok: bool


def _legacy_crc_ok(buf, pos: int, size: int, crc: int) -> bool:
    return (zlib.crc32(memoryview(buf)[pos + 16:pos + LOG_OVERHEAD + size]) & 0xFFFFFFFF) == crc


def iter_legacy_entries(buf, *, check_crc: bool = False) -> Iterator[LegacyEntry]:
    """Shallow iteration over a magic 0/1 message set; stops at a partial trailing message.

    Raises :class:`CorruptRecordError` for bad sizes/magic (or CRC with ``check_crc``).
    """
    pos = 0
    end = len(buf)
    mv = memoryview(buf)
    while end - pos >= LOG_OVERHEAD:
        offset, size = struct.unpack_from(">qi", buf, pos)
        if size < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(
                f"message size {size} at position {pos} is less than the minimum {LEGACY_RECORD_OVERHEAD_V0}")
        if end - pos < size + LOG_OVERHEAD:
            return
        _, _, crc, magic, attrs = _LEGACY_HDR.unpack_from(buf, pos)
        if magic not in (0, 1):
            raise CorruptRecordError(f"invalid legacy magic {magic} at position {pos}")
        if magic == 1 and size < LEGACY_RECORD_OVERHEAD_V1:
            raise CorruptRecordError(
                f"message size {size} at position {pos} is less than the v1 minimum {LEGACY_RECORD_OVERHEAD_V1}")
        if check_crc and not _legacy_crc_ok(buf, pos, size, crc):
            raise CorruptRecordError(f"message at position {pos} (offset {offset}) has a bad CRC {crc}")
        p = pos + 18
        msg_end = pos + LOG_OVERHEAD + size
        if magic == 1:
            (ts,) = _Q.unpack_from(buf, p)
            p += 8
        else:
            ts = NO_TIMESTAMP
        try:
            (klen,) = _I.unpack_from(buf, p)
            p += 4
            if klen >= 0:
                if p + klen > msg_end:
                    raise CorruptRecordError(f"key length {klen} overruns message at position {pos}")
                key = bytes(mv[p:p + klen])
                p += klen
            else:
                key = None
            if p + 4 > msg_end:
                raise CorruptRecordError(f"message at position {pos} is truncated")
            (vlen,) = _I.unpack_from(buf, p)
            p += 4
            if vlen >= 0:
                if p + vlen > msg_end:
                    raise CorruptRecordError(f"value length {vlen} overruns message at position {pos}")
                value = bytes(mv[p:p + vlen])
                p += vlen
            else:
                value = None
        except struct.error:
            raise CorruptRecordError(f"message at position {pos} is truncated") from None
        if p != msg_end:
            raise CorruptRecordError(f"message at position {pos} has {msg_end - p} trailing bytes")
        yield LegacyEntry(pos, offset, size, crc, magic, attrs, ts, key, value)
        pos = msg_end


def _deep_entries(entry: LegacyEntry, *, max_decompressed: int | None = None) -> list[LegacyRecord]:
    codec = entry.compression
    lat = entry.timestamp_type == 1
    if codec == 0:
        return [LegacyRecord(entry.offset, entry.timestamp, entry.key, entry.value, entry.magic,
                             entry.attributes, entry.timestamp_type, 0, entry.crc, True)]
    if codec > 3:
        raise InvalidRecordError(f"invalid compression codec {codec} in a magic {entry.magic} wrapper")
    if entry.value is None:
        raise InvalidRecordError(f"compressed message set with null value (magic {entry.magic})")
    try:
        inner = _compression.decompress(codec, entry.value, max_size=max_decompressed)
    except _compression.DecompressedSizeError as e:
        raise DecompressedTooLargeError(f"wrapper at offset {entry.offset}: {e}") from None
    except CompressionError as e:
        raise CorruptRecordError(f"cannot decompress wrapper at offset {entry.offset}: {e}") from None
    out = []
    for e in iter_legacy_entries(inner):
        if e.magic != entry.magic:
            raise InvalidRecordError(
                f"compressed message magic {e.magic} does not match wrapper magic {entry.magic}")
        if e.compression:
            raise InvalidRecordError("inner messages must not be compressed")
        ts = entry.timestamp if lat else e.timestamp
        out.append(LegacyRecord(e.offset, ts, e.key, e.value, e.magic, e.attributes,
                                1 if lat else e.timestamp_type, codec, e.crc,
                                _legacy_crc_ok(inner, e.position, e.size, e.crc)))
    if not out:
        raise InvalidRecordError("compressed message set with no inner messages")
    if entry.magic == 1:
        last_inner = out[-1].offset
        if entry.offset != 0:
            if entry.offset < last_inner:
                raise InvalidRecordError(
                    f"wrapper offset {entry.offset} is less than the last inner offset {last_inner}")
            base = entry.offset - last_inner
            out = [r._replace(offset=base + r.offset) for r in out]
    return out


def parse_legacy(buf, *, verify_crc: bool = True,
                 max_decompressed: int | None = None) -> Iterator[LegacyRecord]:
    """Iterate the deep messages of a magic 0/1 message set (decompressing wrappers).

    With ``verify_crc`` (default) a bad outer or inner CRC raises
    :class:`CorruptRecordError`.  v1 inner offsets are made absolute; under a
    LogAppendTime v1 wrapper every inner message reads the wrapper's timestamp.
    """
    for entry in iter_legacy_entries(buf, check_crc=verify_crc):
        for r in _deep_entries(entry, max_decompressed=max_decompressed):
            if verify_crc and not r.crc_ok:
                raise CorruptRecordError(f"inner message at offset {r.offset} has a bad CRC {r.crc}")
            yield r


def _legacy_message(offset: int, magic: int, attributes: int, timestamp: int,
                    key: bytes | None, value) -> bytes:
    # a v2 batch's base offset or timestamp plus a record's delta can leave int64 (a
    # damaged or hostile batch): a clean format error, not a struct.error
    if not -(2**63) <= offset < 2**63 or not -(2**63) <= timestamp < 2**63:
        raise InvalidRecordError(f"record offset {offset} or timestamp {timestamp} does not fit in 64 bits")
    body = bytearray()
    body.append(magic)
    body.append(attributes & 0xFF)
    if magic == 1:
        body += _Q.pack(timestamp)
    if key is None:
        body += _I.pack(-1)
    else:
        body += _I.pack(len(key))
        body += key
    if value is None:
        body += _I.pack(-1)
    else:
        body += _I.pack(len(value))
        body += value
    crc = zlib.crc32(body) & 0xFFFFFFFF
    return struct.pack(">qiI", offset, len(body) + 4, crc) + bytes(body)


def build_legacy(records: Sequence, *, magic: int, compression: int = 0, timestamp_type: int = 0,
                 log_append_time: int = NO_TIMESTAMP) -> bytes:
    """Build a magic 0/1 message set (as Kafka's MemoryRecordsBuilder does).

    ``records`` items are ``(offset, timestamp, key, value)`` with absolute offsets.
    Uncompressed: one message per record.  Compressed: one wrapper whose offset is the
    last offset; v1 inner offsets are relative (0..n-1), v0 inner offsets absolute; the v1
    wrapper timestamp is the max inner timestamp (CreateTime) or ``log_append_time``.
    """
    if magic not in (0, 1):
        raise ValueError(f"legacy magic must be 0 or 1, not {magic}")
    if compression == 4:
        raise UnsupportedCompressionTypeError("zstd cannot be used with magic 0/1 messages")
    lat = magic == 1 and timestamp_type == 1
    attr_ts = TIMESTAMP_TYPE_MASK if lat else 0
    msgs = []
    max_ts = NO_TIMESTAMP
    base = records[0][0] if records else 0
    for offset, ts, key, value in records:
        if magic == 0:
            ts = NO_TIMESTAMP
        elif lat:
            ts = log_append_time
        if ts > max_ts:
            max_ts = ts
        inner_offset = offset - base if (compression and magic == 1) else offset
        msgs.append(_legacy_message(inner_offset, magic, attr_ts, ts,
                                    _bytes_or_none(key), _bytes_or_none(value)))
    if not compression:
        return b"".join(msgs)
    if not records:
        return b""
    inner = b"".join(msgs)
    value = _compression.compress(compression, inner, legacy_lz4_checksum=(magic == 0))
    wrapper_ts = log_append_time if lat else max_ts
    return _legacy_message(records[-1][0], magic, compression | attr_ts, wrapper_ts, None, value)


def up_convert(message_set, *, base_offset: int | None = None,
               log_append_time: int | None = None, verify_crc: bool = True,
               max_decompressed: int | None = None) -> bytes:
    """Convert a magic 0/1 message set to v2 batches.

    One v2 batch per compressed wrapper (same codec) or per run of consecutive
    uncompressed messages.  Keys, values and timestamps are kept (v0 -> -1).  A v1
    LogAppendTime wrapper/message becomes a LogAppendTime batch.  Offsets are kept
    unless ``base_offset`` is given, in which case they are reassigned consecutively.
    With ``log_append_time`` every batch is stamped LogAppendTime with that time.
    """
    groups: list[tuple[int, list[LegacyRecord]]] = []
    run: list[LegacyRecord] = []
    for entry in iter_legacy_entries(message_set, check_crc=verify_crc):
        deep = _deep_entries(entry, max_decompressed=max_decompressed)
        if verify_crc:
            for r in deep:
                if not r.crc_ok:
                    raise CorruptRecordError(f"inner message at offset {r.offset} has a bad CRC {r.crc}")
        if entry.compression == 0:
            if run and (run[-1].timestamp_type != deep[0].timestamp_type
                        or (base_offset is None and not
                            run[-1].offset < deep[0].offset <= run[0].offset + 0x7FFFFFFF)):
                groups.append((0, run))
                run = []
            run.extend(deep)
        else:
            if run:
                groups.append((0, run))
                run = []
            groups.append((entry.compression, deep))
    if run:
        groups.append((0, run))
    out = []
    next_off = base_offset
    for codec, recs in groups:
        out.append(_records_to_v2(recs, codec, next_off, log_append_time))
        if next_off is not None:
            next_off += len(recs)
    return b"".join(out)


def _records_to_v2(recs: list[LegacyRecord], codec: int, base_offset: int | None,
                   log_append_time: int | None) -> bytes:
    if base_offset is None:
        base = recs[0].offset
        items = [Record(r.offset, r.timestamp, r.key, r.value, []) for r in recs]
    else:
        base = base_offset
        items = [Record(base_offset + i, r.timestamp, r.key, r.value, []) for i, r in enumerate(recs)]
    if log_append_time is not None:
        return build_batch(items, base_offset=base, compression=codec, timestamp_type=1,
                           log_append_time=log_append_time)
    lat = recs[0].timestamp_type == 1 and recs[0].magic == 1
    if lat:
        return build_batch(items, base_offset=base, compression=codec, timestamp_type=1,
                           log_append_time=max(r.timestamp for r in recs))
    return build_batch(items, base_offset=base, compression=codec)


def down_convert(v2_bytes, to_magic: int, *, first_offset: int = 0,
                 max_decompressed: int | None = None) -> bytes:
    """Convert v2 batches to a magic 0/1 message set (Fetch v0-v3), as Kafka's
    ``RecordsUtil.downConvert`` does.

    * control batches are dropped; zstd batches raise
      :class:`UnsupportedCompressionTypeError`;
    * uncompressed batches: records below ``first_offset`` (the fetch offset) are
      dropped; compressed batches are converted whole (one wrapper, same codec);
    * v1 keeps timestamps and the LogAppendTime bit (LogAppendTime batches: every
      message carries the batch's maxTimestamp); headers are dropped.
    * legacy input entries whose magic is <= ``to_magic`` are passed through unchanged.
    A partial trailing batch is ignored.
    """
    if to_magic not in (0, 1):
        raise ValueError(f"to_magic must be 0 or 1, not {to_magic}")
    out = []
    pos = 0
    end = len(v2_bytes)
    mv = memoryview(v2_bytes)
    while end - pos >= LOG_OVERHEAD + 5:
        (length,) = _I.unpack_from(v2_bytes, pos + 8)
        if length < LEGACY_RECORD_OVERHEAD_V0:
            raise CorruptRecordError(f"batch size {length} at position {pos} is too small")
        size = length + LOG_OVERHEAD
        if end - pos < size:
            break
        magic = magic_of(v2_bytes, pos)
        if magic < 2:
            chunk = mv[pos:pos + size]
            if magic <= to_magic:
                out.append(bytes(chunk))
            else:
                for entry in iter_legacy_entries(chunk):
                    deep = _deep_entries(entry, max_decompressed=max_decompressed)
                    if entry.compression == 0:
                        deep = [r for r in deep if r.offset >= first_offset]
                    if deep:
                        out.append(build_legacy([(r.offset, r.timestamp, r.key, r.value) for r in deep],
                                                magic=to_magic, compression=entry.compression))
            pos += size
            continue
        header = parse_batch_header(v2_bytes, pos)
        pos += size
        if header.is_control:
            continue
        codec = header.compression
        if codec == 4:
            raise UnsupportedCompressionTypeError(
                "down-conversion of zstd-compressed batches is not supported")
        if codec:
            # walk the records as they decompress first: a malformed or oversized batch
            # fails here in bounded memory instead of being decoded whole
            walk_batch(v2_bytes, pos - size, header, max_decompressed=max_decompressed)
        recs = list(iter_records(v2_bytes, pos - size, header, max_decompressed=max_decompressed))
        if codec == 0:
            recs = [r for r in recs if r.offset >= first_offset]
        if not recs:
            continue
        lat = header.timestamp_type == 1
        out.append(build_legacy([(r.offset, r.timestamp, r.key, r.value) for r in recs],
                                magic=to_magic, compression=codec,
                                timestamp_type=header.timestamp_type,
                                log_append_time=header.max_timestamp if lat else NO_TIMESTAMP))
    return b"".join(out)


def check_produce_records(api_version: int, buf) -> None:
    """Request-level checks Kafka's ProduceRequest.validateRecords applies (v3+):
    exactly one batch per partition, magic 2, and no zstd before v7.

    Raises :class:`InvalidRecordError` / :class:`UnsupportedCompressionTypeError`.
    """
    if api_version < 3:
        return
    n = len(buf) if buf is not None else 0
    if n < LOG_OVERHEAD + 5:
        raise InvalidRecordError(
            f"produce requests with version {api_version} must have at least one record batch per partition")
    if buf[MAGIC_OFFSET] != 2:
        raise InvalidRecordError(
            f"produce requests with version {api_version} are only allowed to contain record batches "
            f"with magic version 2 (got magic {magic_of(buf, 0)})")
    if api_version < 7 and n >= HEADER_SIZE:
        (attrs,) = _H.unpack_from(buf, ATTRIBUTES_OFFSET)
        if attrs & COMPRESSION_MASK == 4:
            raise UnsupportedCompressionTypeError(
                f"produce requests with version {api_version} are not allowed to use zstd compression")
    (length,) = _I.unpack_from(buf, 8)
    if length >= 0 and n - (length + LOG_OVERHEAD) >= LOG_OVERHEAD:
        raise InvalidRecordError(
            f"produce requests with version {api_version} are only allowed to contain exactly one "
            "record batch per partition")
