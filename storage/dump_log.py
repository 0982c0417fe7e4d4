"""``chronolog dump-log``: print the contents of segment files, as Kafka's
``kafka-dump-log.sh`` (``kafka.tools.DumpLogSegments``) does.

Every file given is opened read-only (``os.open(O_RDONLY)`` + ``os.pread``; index files
are read as plain bytes, and the sanity check maps them read-only), so dumping never
creates, resizes or writes anything.  Output per file, in Kafka's words:

``Dumping <path>`` (stdout), then by suffix:

``.log``
    ``Log starting offset: <base offset from the file name>``, then one line per batch.
    A v2 batch::

        baseOffset: 0 lastOffset: 2 count: 3 baseSequence: -1 lastSequence: -1
        producerId: -1 producerEpoch: -1 partitionLeaderEpoch: 0 isTransactional: false
        isControl: false deleteHorizonMs: OptionalLong.empty position: 0
        CreateTime: 1700000000002 size: 96 magic: 2 compresscodec: none crc: 123456
        isvalid: true

    (one line; ``crc`` is the stored CRC-32C, ``isvalid`` whether it matches the bytes,
    the timestamp label is ``CreateTime`` or ``LogAppendTime`` followed by the batch's
    maxTimestamp).  A legacy magic 0/1 message (a plain message or a compressed
    wrapper) prints ``offset: <offset> position: ... NoTimestampType|CreateTime|
    LogAppendTime: <timestamp> size: ... magic: 0|1 compresscodec: ... crc: ... isvalid: ...``.
    With ``--deep-iteration`` (implied by ``--print-data-log``) each record follows as::

        | offset: 0 CreateTime: 1700000000000 keySize: 1 valueSize: 2 sequence: -1 headerKeys: [h1]

    (legacy records print ``isValid: <bool> crc: <crc>`` instead of sequence/headerKeys;
    control records add ``endTxnMarker: COMMIT coordinatorEpoch: N`` or
    ``controlType: NAME(id)``) and with ``--print-data-log`` `` key: <k> payload: <v>``
    (UTF-8, undecodable bytes replaced; omitted when null; not for control records).
    Records are decompressed (gzip, snappy, lz4, zstd).  When the walk stops before the
    end of the file (a torn last batch, or bytes that are not a batch) it prints
    ``Found <n> invalid bytes at the end of <file name>``; unless ``--max-bytes`` cut
    the read short.  Why the walk stopped, when it was not just a torn tail, and batches
    whose records cannot be decoded are reported on stderr; the dump goes on.

``.index``
    ``offset: <absolute offset> position: <position>`` per entry (``<path> is empty.``
    for an empty file), stopping at the zero-filled preallocated tail of an index not
    closed cleanly (an entry whose offset is the base offset, past slot 0).  Each entry
    is checked against the ``.log`` beside it: the batch at ``position`` must end at
    ``offset``.  Mismatches go to stderr after all files, as Kafka prints them::

        Mismatches in :/abs/path/00000000000000000000.index
          Index offset: 7, log offset: 5

    (``log offset: -1`` when no batch can be read at that position).

``.timeindex``
    ``timestamp: <T> offset: <O>`` per entry (same zero-tail stop).  Kafka's checks,
    reported on stderr after all files: the batch found through the ``.index`` lookup
    must end exactly at O (else ``The following indexed offsets are not found in the
    log.`` / ``Indexed offset: O, found log offset: L``), the max record timestamp of
    that batch must be T (``Found timestamp mismatch in :<abs path>`` /
    ``  Index timestamp: T, log timestamp: L``), and T must be greater than the previous
    entry's timestamp (``Found out of order timestamp in :<abs path>`` /
    ``  Index timestamp: T, Previously indexed timestamp: P``).

``.snapshot``
    A producer-state snapshot (:mod:`storage.producer_state`, Kafka's ``ProducerSnapshot``
    v1), decoded as Kafka's ``ProducerStateManager.readSnapshot`` does: one line per
    entry, in file order (Chronolog writes one entry per cached batch, oldest first, so
    a producer can have up to 5 lines; Kafka's own broker writes one)::

        producerId: 1000 producerEpoch: 0 coordinatorEpoch: -1 currentTxnFirstOffset:
        OptionalLong.empty lastTimestamp: 1700000000001 firstSequence: 0 lastSequence: 1
        lastOffset: 1 offsetDelta: 1 timestamp: 1700000000001

    (one line; ``currentTxnFirstOffset`` is ``OptionalLong[<offset>]`` when the entry
    has one; ``lastTimestamp`` and ``timestamp`` are both the entry's timestamp;
    ``firstSequence`` is ``lastSequence - offsetDelta``, wrapping like Kafka's
    ``decrementSequence``; an entry without a batch, ``lastOffset`` < 0, ends after
    ``lastTimestamp``).  A snapshot that fails Kafka's checks prints nothing but, on
    stderr, ``<path>: `` and Kafka's message: ``Snapshot is corrupt (CRC is no longer
    valid). Stored crc: <stored>. Computed crc: <computed>`` or ``Snapshot failed schema
    validation: <why>`` (unknown version, negative or impossible entry count, file
    truncated).  Like Kafka, this is not an error for the exit status and the other
    files are still dumped.  The base offset is not taken from the file name, and
    the dump options do not apply.

``.txnindex``
    A segment's aborted transactions (:mod:`storage.transaction_index`), one line per
    entry as Kafka's ``dumpTxnIndex``::

        version: 0 producerId: 7 firstOffset: 10 lastOffset: 14 lastStableOffset: 10

    The file is only read (a torn last entry is reported on stderr, not cut off).

``--verify-index-only``: index entries are checked but not printed (only the problems).
``--index-sanity-check``: only the sanity check Chronolog itself runs on startup
(:meth:`OffsetIndex.sanity_check` / :meth:`TimeIndex.sanity_check` with ``full=True``
against the ``.log`` beside), printing ``<path> passed sanity check.`` or, on stderr,
``<path> failed sanity check: <reason>``.

Any other suffix: ``Ignoring unknown file <path>`` (stderr).  Non-consecutive offsets
seen during deep iteration are reported as ``Non-consecutive offsets in <abs path>`` /
``  X is followed by Y``.

Exit status of :func:`dump_files` (the CLI's): 0 when every file could be dumped -- like
Kafka, data problems (bad CRCs, torn tails, index mismatches) are reported, not fatal;
1 when a file is missing, unreadable, has no base offset in its name, an index fails
``--index-sanity-check``, or an index cannot be checked because its ``.log`` is missing.

Deliberate differences from Kafka: a missing file or a corrupt batch does not end the
run with a stack trace (the other files are still dumped); mismatch lists print in
file order (Kafka prints the offset-index list reversed); the legacy record line has no
stray ``}`` after the crc; a corrupt producer snapshot's message is prefixed with its
path, and where Kafka's says ``Snapshot failed schema validation: null`` (a Java
buffer underflow: the file is truncated) ours says where the file ends; bytes after the
last entry of a snapshot whose CRC is valid, which Kafka ignores (Chronolog's own
reader refuses the file), are reported on stderr; the KRaft snapshot (``.checkpoint``)
and transaction-index (``.txnindex``) decoders are not offered (Chronolog writes
neither file).
"""

from __future__ import annotations

import os
import struct
import sys
import zlib
from dataclasses import dataclass, field
from typing import Iterable, Iterator, NamedTuple, Optional, TextIO

from protocol import records as R
from protocol.compression import CODEC_NAMES
from storage.index import CorruptIndexError
from storage.offset_index import OffsetIndex
from storage.producer_state import (
    SNAPSHOT_SUFFIX,
    CorruptSnapshotError,
    SnapshotEntry,
    decrement_sequence,
    increment_sequence,
    read_snapshot_entries,
)
from storage.time_index import TimeIndex

__all__ = [
    "DumpOptions",
    "DumpReport",
    "dump_files",
    "dump_log_file",
    "dump_index_file",
    "dump_time_index_file",
    "dump_producer_snapshot_file",
    "read_snapshot_entries",
    "snapshot_entry_line",
    "SnapshotEntry",
    "LOG_SUFFIX",
    "INDEX_SUFFIX",
    "TIME_INDEX_SUFFIX",
    "SNAPSHOT_SUFFIX",
    "RECORD_INDENT",
]

LOG_SUFFIX = ".log"
INDEX_SUFFIX = ".index"
TIME_INDEX_SUFFIX = ".timeindex"
RECORD_INDENT = "|"
INT32_MAX = (1 << 31) - 1
DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024

EXIT_OK = 0
EXIT_FAILURE = 1

_LOG_OVERHEAD = 12
_HEADER_SIZE_UP_TO_MAGIC = 17  # offset, size, leader epoch / crc, magic
_MIN_RECORD_OVERHEAD = 14  # a magic 0 message: the smallest thing a .log can hold
_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_HEAD = struct.Struct(">qi")
_TIMESTAMP_TYPES = {-1: "NoTimestampType", 0: "CreateTime", 1: "LogAppendTime"}
_CONTROL_TYPES = {0: "ABORT", 1: "COMMIT", 2: "LEADER_CHANGE", 3: "SNAPSHOT_HEADER",
                  4: "SNAPSHOT_FOOTER", 5: "KRAFT_VERSION", 6: "KRAFT_VOTERS"}


def _b(v: bool) -> str:
    return "true" if v else "false"


def _codec_name(codec: int) -> str:
    return CODEC_NAMES.get(codec, f"unknown({codec})")


# --------------------------------------------------------------------------- options / report


@dataclass
class DumpOptions:
    print_data_log: bool = False
    deep_iteration: bool = False
    verify_index_only: bool = False
    index_sanity_check: bool = False
    max_bytes: int = INT32_MAX
    max_message_size: int = DEFAULT_MAX_MESSAGE_SIZE
    skip_record_metadata: bool = False

    @property
    def deep(self) -> bool:
        return self.deep_iteration or self.print_data_log


@dataclass
class DumpReport:
    """Problems collected over a run; printed (stderr) after the last file, as Kafka does.

    Keys are absolute paths; values keep discovery (file) order.
    """
    index_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    time_mismatches: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    out_of_order: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    offsets_not_found: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    non_consecutive: dict[str, list[tuple[int, int]]] = field(default_factory=dict)
    failed: int = 0  # files that could not be dumped / checked (exit status 1)

    @staticmethod
    def _add(table: dict, path: str, pair: tuple[int, int]) -> None:
        table.setdefault(os.path.abspath(path), []).append(pair)

    def write(self, err: TextIO) -> None:
        for path, pairs in self.index_mismatches.items():
            err.write(f"Mismatches in :{path}\n")
            for index_offset, log_offset in pairs:
                err.write(f"  Index offset: {index_offset}, log offset: {log_offset}\n")
        for path, pairs in self.time_mismatches.items():
            err.write(f"Found timestamp mismatch in :{path}\n")
            for index_ts, log_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, log timestamp: {log_ts}\n")
        for path, pairs in self.out_of_order.items():
            err.write(f"Found out of order timestamp in :{path}\n")
            for index_ts, prev_ts in pairs:
                err.write(f"  Index timestamp: {index_ts}, Previously indexed timestamp: {prev_ts}\n")
        for pairs in self.offsets_not_found.values():
            err.write("The following indexed offsets are not found in the log.\n")
            for index_offset, log_offset in pairs:
                err.write(f"Indexed offset: {index_offset}, found log offset: {log_offset}\n")
        for path, pairs in self.non_consecutive.items():
            err.write(f"Non-consecutive offsets in {path}\n")
            for first, second in pairs:
                err.write(f"  {first} is followed by {second}\n")


class DumpFileError(Exception):
    """A file cannot be dumped at all (missing, unreadable, no base offset in its name)."""


# --------------------------------------------------------------------------- reading the .log


class _Batch(NamedTuple):
    """One shallow entry of a .log: a v2 batch or a legacy message / wrapper."""
    position: int
    data: bytes  # the whole entry, 12-byte offset+size prefix included
    magic: int
    header: Optional[R.BatchHeader]  # v2
    legacy: Optional[R.LegacyEntry]  # magic 0/1

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def last_offset(self) -> int:
        return self.header.last_offset if self.header is not None else self.legacy.offset

    @property
    def timestamp_type(self) -> int:
        if self.header is not None:
            return self.header.timestamp_type
        return -1 if self.magic == 0 else self.legacy.timestamp_type

    @property
    def max_timestamp(self) -> int:
        return self.header.max_timestamp if self.header is not None else self.legacy.timestamp

    @property
    def crc(self) -> int:
        return self.header.crc if self.header is not None else self.legacy.crc

    @property
    def is_valid(self) -> bool:
        if self.header is not None:
            return R.verify_crc(self.data, 0, self.header)
        return (zlib.crc32(memoryview(self.data)[16:]) & 0xFFFFFFFF) == self.legacy.crc

    @property
    def compression(self) -> int:
        return self.header.compression if self.header is not None else self.legacy.compression


class _Scan:
    """Shallow walk over the entries of a .log between ``start`` and ``end``, with the
    rules of Kafka's FileLogInputStream: stop quietly at a torn tail; stop with
    :attr:`error` set at a size or magic that cannot be a batch.  After the walk
    :attr:`position` is where the last whole entry ended."""

    def __init__(self, fd: int, start: int, end: int):
        self.fd = fd
        self.position = start
        self.end = end
        self.error: Optional[str] = None

    def __iter__(self) -> Iterator[_Batch]:
        fd, end = self.fd, self.end
        while True:
            pos = self.position
            if pos >= end - _HEADER_SIZE_UP_TO_MAGIC:
                return
            head = os.pread(fd, _HEADER_SIZE_UP_TO_MAGIC, pos)
            if len(head) < _HEADER_SIZE_UP_TO_MAGIC:
                return
            _offset, size = _HEAD.unpack_from(head)
            if size < _MIN_RECORD_OVERHEAD:
                self.error = (f"found record size {size} smaller than the minimum record "
                              f"overhead ({_MIN_RECORD_OVERHEAD}) at position {pos}")
                return
            if pos > end - _LOG_OVERHEAD - size:
                return  # torn: the batch runs past the end
            magic = head[16] - 256 if head[16] > 127 else head[16]
            if magic not in (0, 1, 2):
                self.error = f"unknown magic {magic} at position {pos}"
                return
            data = os.pread(fd, size + _LOG_OVERHEAD, pos)
            if len(data) < size + _LOG_OVERHEAD:
                return  # the file shrank under us
            header = legacy = None
            try:
                if magic == 2:
                    header = R.parse_batch_header(data)
                else:
                    legacy = next(R.iter_legacy_entries(data), None)
                    if legacy is None:
                        raise R.CorruptRecordError(f"magic {magic} message at position {pos} is truncated")
            except R.RecordFormatError as e:
                self.error = f"{e} (position {pos})" if f"position {pos}" not in str(e) else str(e)
                return
            self.position = pos + len(data)
            yield _Batch(pos, data, magic, header, legacy)


class _Rec(NamedTuple):
    offset: int
    timestamp: int
    key: Optional[bytes]
    value: Optional[bytes]
    metadata: str  # what follows valueSize on the record line


def _records(batch: _Batch) -> list[_Rec]:
    """Deep records of one entry (decompressing). Raises on undecodable data."""
    out = []
    if batch.header is not None:
        h = batch.header
        for r in R.iter_records(batch.data, 0, h):
            seq = -1 if h.base_sequence < 0 else increment_sequence(h.base_sequence, r.offset - h.base_offset)
            meta = f" sequence: {seq} headerKeys: [{','.join(k for k, _v in r.headers)}]"
            if h.is_control:
                meta += _control_description(r)
            out.append(_Rec(r.offset, r.timestamp, r.key, r.value, meta))
    else:
        for r in R.parse_legacy(batch.data, verify_crc=False):
            out.append(_Rec(r.offset, r.timestamp, r.key, r.value, f" isValid: {_b(r.crc_ok)} crc: {r.crc}"))
    return out


def _control_description(r: R.Record) -> str:
    key = r.key or b""
    if len(key) < 4:
        return " controlType: UNKNOWN(-1)"
    (type_id,) = struct.unpack_from(">h", key, 2)
    name = _CONTROL_TYPES.get(type_id, "UNKNOWN")
    if type_id in (0, 1) and r.value is not None and len(r.value) >= 6:
        (epoch,) = struct.unpack_from(">i", r.value, 2)
        return f" endTxnMarker: {name} coordinatorEpoch: {epoch}"
    return f" controlType: {name}({type_id})"


def _batch_line(b: _Batch, position: int) -> str:
    if b.header is not None:
        h = b.header
        last_seq = -1 if h.base_sequence < 0 else increment_sequence(h.base_sequence, h.last_offset_delta)
        horizon = "OptionalLong.empty" if h.delete_horizon_ms is None else f"OptionalLong[{h.delete_horizon_ms}]"
        head = (f"baseOffset: {h.base_offset} lastOffset: {h.last_offset} count: {h.records_count} "
                f"baseSequence: {h.base_sequence} lastSequence: {last_seq} "
                f"producerId: {h.producer_id} producerEpoch: {h.producer_epoch} "
                f"partitionLeaderEpoch: {h.partition_leader_epoch} "
                f"isTransactional: {_b(h.is_transactional)} isControl: {_b(h.is_control)} "
                f"deleteHorizonMs: {horizon}")
    else:
        head = f"offset: {b.last_offset}"
    return (f"{head} position: {position} {_TIMESTAMP_TYPES[b.timestamp_type]}: {b.max_timestamp} "
            f"size: {b.size} magic: {b.magic} compresscodec: {_codec_name(b.compression)} "
            f"crc: {b.crc} isvalid: {_b(b.is_valid)}")


def _text(v: bytes) -> str:
    return v.decode("utf-8", "replace")


# --------------------------------------------------------------------------- files


def _base_offset(path: str) -> int:
    stem = os.path.basename(path).split(".")[0]
    try:
        return int(stem)
    except ValueError:
        raise DumpFileError(f"{path}: cannot take a base offset from the file name "
                            f"(expected <20-digit offset>{os.path.splitext(path)[1]})") from None


def _sibling(path: str, suffix: str) -> str:
    d, name = os.path.split(os.path.abspath(path))
    return os.path.join(d, name.split(".")[0] + suffix)


def _open_ro(path: str) -> int:
    try:
        return os.open(path, os.O_RDONLY)
    except OSError as e:
        raise DumpFileError(f"{path}: {e.strerror or e}") from None


def _read_bytes(path: str) -> bytes:
    fd = _open_ro(path)
    try:
        chunks = []
        while True:
            c = os.read(fd, 1 << 20)
            if not c:
                break
            chunks.append(c)
        return b"".join(chunks)
    finally:
        os.close(fd)


def dump_log_file(path: str, out: TextIO, err: TextIO, options: DumpOptions, report: DumpReport) -> None:
    """Print a .log's batches (and records with deep iteration). Raises DumpFileError."""
    base = _base_offset(path)
    fd = _open_ro(path)
    try:
        out.write(f"Log starting offset: {base}\n")
        file_size = os.fstat(fd).st_size
        end = min(file_size, max(0, options.max_bytes))
        scan = _Scan(fd, 0, end)
        deep = options.deep
        last_offset = -1
        indent = RECORD_INDENT + " "
        for b in scan:
            out.write(_batch_line(b, b.position) + "\n")
            if not deep:
                continue
            try:
                recs = _records(b)
            except Exception as e:  # garbage in a batch must not end the dump
                first = f" (offset {b.header.base_offset})" if b.header is not None else ""
                err.write(f"Could not read the records of the batch at position {b.position}{first} "
                          f"of {path}: {e}\n")
                continue
            ts_name = _TIMESTAMP_TYPES[b.timestamp_type]
            control = b.header is not None and b.header.is_control
            for r in recs:
                if last_offset != -1 and r.offset != last_offset + 1:
                    report._add(report.non_consecutive, path, (last_offset, r.offset))
                last_offset = r.offset
                prefix = indent
                line = []
                if not options.skip_record_metadata:
                    line.append(f"{prefix}offset: {r.offset} {ts_name}: {r.timestamp} "
                                f"keySize: {-1 if r.key is None else len(r.key)} "
                                f"valueSize: {-1 if r.value is None else len(r.value)}{r.metadata}")
                    prefix = " "
                if options.print_data_log and not control:
                    if r.key is not None:
                        line.append(f"{prefix}key: {_text(r.key)}")
                        prefix = " "
                    if r.value is not None:
                        line.append(f" payload: {_text(r.value)}")
                out.write("".join(line) + "\n")
        if scan.error is not None:
            err.write(f"Stopped reading {path} at position {scan.position}: {scan.error}\n")
        trailing = file_size - scan.position
        if trailing > 0 and end == file_size:
            out.write(f"Found {trailing} invalid bytes at the end of {os.path.basename(path)}\n")
    finally:
        os.close(fd)


def _index_entries(data: bytes, entry: struct.Struct) -> list[tuple[int, int]]:
    return [e for e in entry.iter_unpack(data[:len(data) - len(data) % entry.size])]


def _batch_at(fd: int, position: int, file_size: int, max_size: int) -> Optional[_Batch]:
    """The entry at ``position`` (within ``max_size`` bytes, like Kafka's slice), or None."""
    if position < 0 or position >= file_size:
        return None
    return next(iter(_Scan(fd, position, min(file_size, position + max_size))), None)


def dump_index_file(path: str, out: TextIO, err: TextIO, options: DumpOptions, report: DumpReport) -> None:
    """Print (or just check) an offset index against the .log beside it."""
    base = _base_offset(path)
    data = _read_bytes(path)
    entries = _index_entries(data, _OFFSET_ENTRY)
    if not entries:
        out.write(f"{path} is empty.\n")
        return
    log_path = _sibling(path, LOG_SUFFIX)
    log_exists = os.path.isfile(log_path)
    if options.index_sanity_check:
        log_size = os.path.getsize(log_path) if log_exists else None
        _sanity(path, out, err, report, lambda: OffsetIndex(path, base, writable=False),
                lambda idx: idx.sanity_check(log_size=log_size, full=True))
        return
    fd = _open_ro(log_path) if log_exists else None
    if fd is None:
        err.write(f"Cannot check {path}: its log {log_path} does not exist\n")
        report.failed += 1
    try:
        file_size = os.fstat(fd).st_size if fd is not None else 0
        for i, (rel, position) in enumerate(entries):
            offset = base + rel
            if offset == base and i > 0:
                return  # zero-filled preallocated tail
            if fd is not None:
                b = _batch_at(fd, position, file_size, options.max_message_size)
                log_offset = b.last_offset if b is not None else -1
                if log_offset != offset:
                    report._add(report.index_mismatches, path, (offset, log_offset))
            if not options.verify_index_only:
                out.write(f"offset: {offset} position: {position}\n")
    finally:
        if fd is not None:
            os.close(fd)


def _sanity(path, out, err, report, open_index, check) -> None:
    try:
        idx = open_index()
    except (OSError, ValueError) as e:
        err.write(f"{path} failed sanity check: {e}\n")
        report.failed += 1
        return
    try:
        check(idx)
    except CorruptIndexError as e:
        err.write(f"{path} failed sanity check: {e}\n")
        report.failed += 1
        return
    finally:
        idx.close_handler()
    out.write(f"{path} passed sanity check.\n")


def _log_last_offset(log_path: str, base: int) -> Optional[int]:
    """The last offset in a .log (base - 1 when it has no batch), None if it is missing."""
    if not os.path.isfile(log_path):
        return None
    fd = _open_ro(log_path)
    try:
        last = base - 1
        for b in _Scan(fd, 0, os.fstat(fd).st_size):
            last = b.last_offset
        return last
    finally:
        os.close(fd)


def _lookup_position(entries: list[tuple[int, int]], base: int, offset: int) -> int:
    """Offset-index lookup: position of the largest entry with offset <= ``offset``."""
    rel = offset - base
    lo, hi = 0, len(entries)
    while lo < hi:
        mid = (lo + hi) // 2
        if entries[mid][0] <= rel:
            lo = mid + 1
        else:
            hi = mid
    return entries[lo - 1][1] if lo > 0 else 0


def dump_time_index_file(path: str, out: TextIO, err: TextIO, options: DumpOptions,
                         report: DumpReport) -> None:
    """Print (or just check) a time index against the .index and .log beside it."""
    base = _base_offset(path)
    log_path = _sibling(path, LOG_SUFFIX)
    if options.index_sanity_check:
        last = _log_last_offset(log_path, base)
        max_offset = None if last is None else max(last, base)
        _sanity(path, out, err, report, lambda: TimeIndex(path, base, writable=False),
                lambda idx: idx.sanity_check(max_offset=max_offset, full=True))
        return
    entries = _index_entries(_read_bytes(path), _TIME_ENTRY)
    index_path = _sibling(path, INDEX_SUFFIX)
    offset_entries: list[tuple[int, int]] = []
    if os.path.isfile(index_path):
        for i, (rel, pos) in enumerate(_index_entries(_read_bytes(index_path), _OFFSET_ENTRY)):
            if rel == 0 and i > 0:
                break
            offset_entries.append((rel, pos))
    fd = _open_ro(log_path) if os.path.isfile(log_path) else None
    if fd is None:
        err.write(f"Cannot check {path}: its log {log_path} does not exist\n")
        report.failed += 1
    try:
        file_size = os.fstat(fd).st_size if fd is not None else 0
        prev_ts = -1
        for i, (ts, rel) in enumerate(entries):
            offset = base + rel
            if offset == base and i > 0:
                return  # zero-filled preallocated tail
            if fd is not None:
                _check_time_entry(path, err, report, fd, file_size, offset_entries, base, ts, offset, prev_ts)
            if not options.verify_index_only:
                out.write(f"timestamp: {ts} offset: {offset}\n")
            prev_ts = ts
    finally:
        if fd is not None:
            os.close(fd)


def _check_time_entry(path, err, report, fd, file_size, offset_entries, base, ts, offset, prev_ts) -> None:
    position = _lookup_position(offset_entries, base, offset)
    found = None
    for b in _Scan(fd, position, file_size):
        if b.last_offset >= offset:
            found = b
            break
    if found is None:
        report._add(report.offsets_not_found, path, (offset, -1))
        return
    if found.last_offset != offset:
        report._add(report.offsets_not_found, path, (offset, found.last_offset))
        return
    try:
        if found.header is not None:
            max_ts = R.walk_batch(found.data, 0, found.header)[0]
        else:
            max_ts = max((r.timestamp for r in R.parse_legacy(found.data, verify_crc=False)), default=-1)
    except Exception as e:
        err.write(f"Could not read the records of the batch at position {found.position} "
                  f"to check {path}: {e}\n")
        return
    if max_ts < -1:
        max_ts = -1
    if max_ts != ts:
        report._add(report.time_mismatches, path, (ts, max_ts))
    if prev_ts >= ts:
        report._add(report.out_of_order, path, (ts, prev_ts))


# --------------------------------------------------------------------------- producer snapshots

def _int32(v: int) -> int:
    return ((v + (1 << 31)) & 0xFFFFFFFF) - (1 << 31)


def _decrement_sequence(seq: int, dec: int) -> int:
    """Kafka's DefaultRecordBatch.decrementSequence, with Java's int overflow (a
    damaged file may hold any values)."""
    return _int32(decrement_sequence(seq, dec))


def snapshot_entry_line(e: SnapshotEntry) -> str:
    """Kafka's line for one snapshot entry (DumpLogSegments.dumpProducerIdSnapshot)."""
    txn = (f"OptionalLong[{e.current_txn_first_offset}]" if e.current_txn_first_offset >= 0
           else "OptionalLong.empty")
    line = (f"producerId: {e.producer_id} producerEpoch: {e.producer_epoch} "
            f"coordinatorEpoch: {e.coordinator_epoch} currentTxnFirstOffset: {txn} "
            f"lastTimestamp: {e.timestamp}")
    if e.last_offset >= 0:  # Kafka keeps no batch metadata for an entry without a last offset
        line += (f" firstSequence: {_decrement_sequence(e.last_sequence, e.offset_delta)} "
                 f"lastSequence: {e.last_sequence} lastOffset: {e.last_offset} "
                 f"offsetDelta: {e.offset_delta} timestamp: {e.timestamp}")
    return line


def dump_producer_snapshot_file(path: str, out: TextIO, err: TextIO, options: DumpOptions,
                                report: DumpReport) -> None:
    """Print a producer-state snapshot's entries; a corrupt one is reported on stderr
    (not a failure, as in Kafka).  Raises DumpFileError when it cannot be read."""
    data = _read_bytes(path)
    try:
        entries, trailing = read_snapshot_entries(data)
    except CorruptSnapshotError as e:
        err.write(f"{path}: {e}\n")
        return
    for e in entries:
        out.write(snapshot_entry_line(e) + "\n")
    if trailing:
        err.write(f"Found {trailing} bytes after the last producer entry of {path} "
                  f"(Chronolog's broker would not load this snapshot)\n")


def dump_txn_index_file(path: str, out: TextIO, err: TextIO, options: DumpOptions, report: DumpReport) -> None:
    """Print a ``.txnindex``'s entries (read-only: a torn tail is reported, not cut)."""
    from storage.transaction_index import _ENTRY, ENTRY_SIZE, VERSION

    data = _read_bytes(path)
    whole = len(data) - len(data) % ENTRY_SIZE
    for pos in range(0, whole, ENTRY_SIZE):
        version, pid, first, last, lso = _ENTRY.unpack_from(data, pos)
        if version > VERSION:
            err.write(f"{path}: unexpected aborted transaction version {version} at byte {pos}\n")
            return
        out.write(f"version: {version} producerId: {pid} firstOffset: {first} lastOffset: {last} "
                  f"lastStableOffset: {lso}\n")
    if whole != len(data):
        err.write(f"Found {len(data) - whole} bytes after the last aborted transaction of {path} (a torn append; "
                  f"the broker drops them at start)\n")


class _AfterOut:
    """The error stream, flushing the output stream before each write so that a
    terminal (or a 2>&1 pipe) shows the two in the order they were written."""

    def __init__(self, out: TextIO, err: TextIO):
        self._out = out
        self._err = err

    def write(self, text: str) -> int:
        self._out.flush()
        return self._err.write(text)

    def flush(self) -> None:
        self._err.flush()


_DUMPERS = {
    LOG_SUFFIX: dump_log_file,
    INDEX_SUFFIX: dump_index_file,
    TIME_INDEX_SUFFIX: dump_time_index_file,
    SNAPSHOT_SUFFIX: dump_producer_snapshot_file,
    ".txnindex": dump_txn_index_file,
}


def dump_files(paths: Iterable[str], out: Optional[TextIO] = None, err: Optional[TextIO] = None,
               options: Optional[DumpOptions] = None) -> int:
    """Dump every file in turn, then print the collected problems; returns the exit status."""
    out = sys.stdout if out is None else out
    err = _AfterOut(out, sys.stderr if err is None else err)
    options = options or DumpOptions()
    report = DumpReport()
    for path in paths:
        if not os.path.exists(path):
            err.write(f"chronolog dump-log: {path}: no such file\n")
            report.failed += 1
            continue
        if os.path.isdir(path):
            err.write(f"chronolog dump-log: {path}: is a directory\n")
            report.failed += 1
            continue
        out.write(f"Dumping {path}\n")
        name = os.path.basename(path)
        suffix = name[name.rfind("."):] if "." in name else ""
        dumper = _DUMPERS.get(suffix)
        if dumper is None:
            err.write(f"Ignoring unknown file {path}\n")
            continue
        try:
            dumper(path, out, err, options, report)
        except DumpFileError as e:
            err.write(f"chronolog dump-log: {e}\n")
            report.failed += 1
    out.flush()
    report.write(err)
    err.flush()
    return EXIT_FAILURE if report.failed else EXIT_OK
