"""Hand-forged record bytes for the tests of the produce path: records and v2 batches
that say whatever the test wants (a header count that lies, a negative length, a max
timestamp from nowhere), with a correct CRC, as a buggy or hostile client can send them.
Written independently of protocol.records' encoder."""

from __future__ import annotations

import struct

from crc32c import crc32c

from protocol import compression as C


def zz(v: int) -> bytes:
    """Zig-zag varint (Kafka's record fields)."""
    u = ((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while u >= 0x80:
        out.append((u & 0x7F) | 0x80)
        u >>= 7
    out.append(u)
    return bytes(out)


def raw_record(ts_delta: int = 0, off_delta: int = 0, key: bytes | None = b"k", value: bytes | None = b"v",
               headers=(), attrs: int = 0) -> bytes:
    """One record: length, attributes, timestamp delta, offset delta, key, value, headers."""
    body = bytearray([attrs])
    body += zz(ts_delta) + zz(off_delta)
    body += zz(-1) if key is None else zz(len(key)) + key
    body += zz(-1) if value is None else zz(len(value)) + value
    body += zz(len(headers))
    for hk, hv in headers:
        body += zz(len(hk)) + hk
        body += zz(-1) if hv is None else zz(len(hv)) + hv
    return zz(len(body)) + bytes(body)


def forge_batch(records: bytes, count: int, *, base_ts: int, max_ts: int | None = None, codec: int = 0,
                compressed: bytes | None = None, last_offset_delta: int | None = None) -> bytes:
    """A v2 batch around ``records`` (compressed with ``codec``, or the given
    ``compressed`` payload as is) whose header says ``count`` records, CRC correct."""
    payload = compressed if compressed is not None else (C.compress(codec, records) if codec else records)
    body = struct.pack(">hiqqqhii", codec, count - 1 if last_offset_delta is None else last_offset_delta,
                       base_ts, base_ts if max_ts is None else max_ts, -1, -1, -1, count) + payload
    return struct.pack(">qiibI", 0, len(body) + 9, -1, 2, crc32c(body)) + body


def set_length_and_crc(batch: bytearray) -> bytes:
    """After cutting or growing a batch: its batchLength and CRC made right again."""
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)
