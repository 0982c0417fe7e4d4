"""Per-partition state of idempotent producers and its ``<offset>.snapshot`` files.

What Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo`` / ``ProducerStateEntry`` /
``BatchMetadata`` do for idempotent (non-transactional) producers: for each producer id
seen in the partition, its epoch and the metadata of its last 5 batches (first/last
sequence, first/last offset, max timestamp), so a retried batch is recognised and
answered with the offsets it got the first time, a gap in sequence numbers is refused
and an older epoch is fenced.

Rules (``ProducerAppendInfo.checkProducerEpoch`` / ``checkSequence``), for a batch from a
client with producerId >= 0:

* duplicate: the producer's epoch equals the batch's and one of the cached batches has
  exactly the batch's first and last sequence -> nothing appended, the append answers
  with that batch's first/last offset and max timestamp (``UnifiedLog.append``);
* epoch below the producer's epoch -> :class:`~storage.errors.InvalidProducerEpochError`
  (INVALID_PRODUCER_EPOCH, Kafka 2.7+ answers it instead of PRODUCER_FENCED);
* a new (higher) epoch must start at sequence 0, unless the producer had no epoch
  (unknown producer) -> otherwise :class:`~storage.errors.OutOfOrderSequenceError`;
* same epoch: the first sequence must follow the last one (``last + 1``, or 0 after
  ``Int32.MAX``) -> otherwise OutOfOrderSequenceError;
* an unknown producer id (never seen, expired, or its batches deleted by retention)
  is accepted at any sequence: current Kafka does exactly this ("If there is no current
  producer epoch ... accept writes with any sequence number"); UNKNOWN_PRODUCER_ID is
  no longer answered.

Transactions (``ProducerAppendInfo.appendDataBatch`` / ``appendEndTxnMarker``): a
transactional batch starts the producer's transaction in this partition unless one is
ongoing (its first offset is kept per producer and in ``ongoing``), a non-transactional
batch during one is INVALID_TXN_STATE; a COMMIT/ABORT marker (:meth:`prepare_marker`)
ends it, fenced by an older producer epoch (INVALID_PRODUCER_EPOCH) or coordinator epoch
(TRANSACTION_COORDINATOR_FENCED), and yields the :class:`CompletedTxn` the ``.txnindex``
needs. The first unstable offset is the oldest ongoing transaction's first offset.
Producers with an ongoing transaction never expire. Whether a transactional batch
belongs to a transaction the coordinator knows is checked before the append, by the
broker (KIP-890 verification); ``transactions_enabled = False`` refuses every
transactional batch (a storage used without a coordinator).

Checking is pure (:meth:`ProducerStateManager.prepare` returns the updated entries
without touching the state); :meth:`ProducerStateManager.apply` installs them after the
write succeeded.  Replaying batches from the log (:meth:`load_batch`) skips the checks,
as Kafka's REPLICATION origin does.

Snapshot file ``<offset, 20 digits>.snapshot``: the state of every producer for the log
up to ``offset`` (exclusive).  Kafka's ``ProducerSnapshot`` message, version 1,
big-endian::

    version             int16   = 1
    crc                 uint32  CRC-32C of every byte after this field
    count               int32   number of entries
    count x entry (46 bytes):
        producer_id             int64
        epoch                   int16
        last_sequence           int32
        last_offset             int64   (-1: no batch cached)
        offset_delta            int32   last_offset - first offset of that batch
        timestamp               int64   max timestamp of that batch
        coordinator_epoch       int32   epoch of the coordinator of its last marker (-1: none)
        current_txn_first_offset int64  first offset of its ongoing transaction (-1: none)

Kafka writes one entry per producer (its last batch).  We write one entry per cached
batch, oldest first, so all 5 survive a restart; Kafka's reader keeps the last entry of
each producer id, which is exactly the entry it would have written itself, so the files
stay readable by Kafka.  A file that fails the version, length or CRC check is deleted
and the state is rebuilt from an older snapshot and the log.

File life cycle (as ``UnifiedLog``): a snapshot at the new segment's base offset on
every roll (not fsync'd; fsync'd with the next flush), one at the log end on clean close
and after loading, snapshots of deleted segments deleted with them, snapshots above the
log end deleted on truncation and on load.
"""

from __future__ import annotations

import bisect
import functools
import logging
import os
import re
import struct
from collections import deque
from typing import Iterable, NamedTuple

from crc32c import crc32c

from storage.errors import (InvalidProducerEpochError, InvalidTxnStateError, OutOfOrderSequenceError,
                            TransactionCoordinatorFencedError)

__all__ = [
    "NUM_BATCHES_TO_RETAIN", "DEFAULT_PRODUCER_ID_EXPIRATION_MS", "BatchMetadata", "ProducerStateEntry",
    "ProducerBatch", "ProducerStateManager", "CorruptSnapshotError", "read_snapshot", "write_snapshot",
    "snapshot_file_name", "increment_sequence", "decrement_sequence", "SnapshotEntry", "read_snapshot_entries",
]

logger = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000
INT32_MAX = 2**31 - 1
NO_PRODUCER_EPOCH = -1
NO_SEQUENCE = -1
SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOT_VERSION = 1

_SNAPSHOT_FILE = re.compile(r"^(\d{20})\.snapshot$")
_HEAD = struct.Struct(">hIi")  # version, crc, count
_ENTRY = struct.Struct(">qhiqiqiq")
_CRC_START = 6  # version (2) + crc (4)


class CorruptSnapshotError(Exception):
    pass


def snapshot_file_name(offset: int) -> str:
    return f"{offset:020d}{SNAPSHOT_SUFFIX}"


def increment_sequence(seq: int, inc: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: wraps after Int32.MAX to 0."""
    if seq > INT32_MAX - inc:
        return inc - (INT32_MAX - seq) - 1
    return seq + inc


def decrement_sequence(seq: int, dec: int) -> int:
    if seq < dec:
        return INT32_MAX - (dec - seq) + 1
    return seq - dec


class BatchMetadata(NamedTuple):
    last_seq: int
    last_offset: int
    offset_delta: int
    timestamp: int

    @property
    def first_seq(self) -> int:
        return decrement_sequence(self.last_seq, self.offset_delta)

    @property
    def first_offset(self) -> int:
        return self.last_offset - self.offset_delta


#: BatchMetadata from a tuple of its fields, without the NamedTuple's Python __new__
_new_batch_metadata = functools.partial(tuple.__new__, BatchMetadata)


class ProducerBatch(NamedTuple):
    """What the state needs of one appended batch (offsets already assigned)."""
    producer_id: int
    producer_epoch: int
    base_sequence: int
    first_offset: int
    last_offset: int
    max_timestamp: int
    is_transactional: bool = False

    @property
    def last_sequence(self) -> int:
        return increment_sequence(self.base_sequence, self.last_offset - self.first_offset)

    @classmethod
    def from_header(cls, h) -> "ProducerBatch":
        return cls(h.producer_id, h.producer_epoch, h.base_sequence, h.base_offset,
                   h.base_offset + h.last_offset_delta, h.max_timestamp, bool(h.is_transactional))


class CompletedTxn(NamedTuple):
    """A transaction ended by a marker in this partition (``last_offset``: the marker)."""
    producer_id: int
    first_offset: int
    last_offset: int
    is_aborted: bool


class ProducerStateEntry:
    """One producer id: epoch, last timestamp, its last 5 batches (oldest first), the
    epoch of the coordinator that wrote its last marker and the first offset of its
    ongoing transaction in this partition (-1: none)."""

    __slots__ = ("producer_id", "producer_epoch", "last_timestamp", "batches", "coordinator_epoch",
                 "current_txn_first_offset")

    def __init__(self, producer_id: int, producer_epoch: int = NO_PRODUCER_EPOCH,
                 last_timestamp: int = -1, batches: Iterable[BatchMetadata] = (),
                 coordinator_epoch: int = -1, current_txn_first_offset: int = -1):
        self.producer_id = producer_id
        self.producer_epoch = producer_epoch
        self.last_timestamp = last_timestamp
        self.batches: deque[BatchMetadata] = deque(batches, maxlen=NUM_BATCHES_TO_RETAIN)
        self.coordinator_epoch = coordinator_epoch
        self.current_txn_first_offset = current_txn_first_offset

    def copy(self) -> "ProducerStateEntry":
        return ProducerStateEntry(self.producer_id, self.producer_epoch, self.last_timestamp, self.batches,
                                  self.coordinator_epoch, self.current_txn_first_offset)

    @property
    def is_empty(self) -> bool:
        return not self.batches

    @property
    def first_seq(self) -> int:
        return self.batches[0].first_seq if self.batches else NO_SEQUENCE

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    @property
    def last_data_offset(self) -> int:
        return self.batches[-1].last_offset if self.batches else -1

    def find_duplicate(self, epoch: int, first_seq: int, last_seq: int) -> BatchMetadata | None:
        if epoch != self.producer_epoch:
            return None
        for b in self.batches:
            if b.last_seq == last_seq and b.first_seq == first_seq:  # the field, then the property
                return b
        return None

    def add_batch(self, epoch: int, last_seq: int, last_offset: int, offset_delta: int, timestamp: int) -> None:
        if epoch != self.producer_epoch:
            self.batches.clear()
            self.producer_epoch = epoch
        self.batches.append(_new_batch_metadata((last_seq, last_offset, offset_delta, timestamp)))
        self.last_timestamp = timestamp

    def __eq__(self, other) -> bool:
        return (isinstance(other, ProducerStateEntry) and self.producer_id == other.producer_id
                and self.producer_epoch == other.producer_epoch and self.last_timestamp == other.last_timestamp
                and list(self.batches) == list(other.batches) and self.coordinator_epoch == other.coordinator_epoch
                and self.current_txn_first_offset == other.current_txn_first_offset)

    def __repr__(self) -> str:
        return (f"ProducerStateEntry(producer_id={self.producer_id}, epoch={self.producer_epoch}, "
                f"last_timestamp={self.last_timestamp}, batches={list(self.batches)}, "
                f"coordinator_epoch={self.coordinator_epoch}, "
                f"current_txn_first_offset={self.current_txn_first_offset})")


def _in_sequence(last_seq: int, next_seq: int) -> bool:
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


def check_epoch(producer_id: int, epoch: int, last_epoch: int, offset: int, tp: str) -> None:
    """ProducerAppendInfo.checkProducerEpoch: an epoch older than the producer's last is
    INVALID_PRODUCER_EPOCH (Kafka 2.7+, instead of PRODUCER_FENCED)."""
    if epoch < last_epoch:
        raise InvalidProducerEpochError(
            f"epoch of producer {producer_id} at offset {offset} in {tp} is {epoch}, which is smaller than "
            f"the last seen epoch {last_epoch}")


def check_batch(current: ProducerStateEntry, updated: ProducerStateEntry, b: ProducerBatch, tp: str) -> None:
    """ProducerAppendInfo.checkProducerEpoch + checkSequence for a client append.

    ``current`` is the state before this append, ``updated`` the state including the
    earlier batches of the same append."""
    pid, epoch, first_seq = b.producer_id, b.producer_epoch, b.base_sequence
    check_epoch(pid, epoch, updated.producer_epoch, b.first_offset, tp)
    if epoch != updated.producer_epoch:
        if first_seq != 0 and updated.producer_epoch != NO_PRODUCER_EPOCH:
            raise OutOfOrderSequenceError(
                f"invalid sequence number for new epoch of producer {pid} at offset {b.first_offset} in {tp}: "
                f"{epoch} (request epoch), {first_seq} (seq. number), {updated.producer_epoch} "
                f"(current producer epoch)")
        return
    if updated.batches:  # the properties is_empty and last_seq, read directly
        last = updated.batches[-1].last_seq
    elif epoch == current.producer_epoch:
        last = current.batches[-1].last_seq if current.batches else NO_SEQUENCE
    else:
        last = NO_SEQUENCE
    if current.producer_epoch != NO_PRODUCER_EPOCH and not _in_sequence(last, first_seq):
        raise OutOfOrderSequenceError(
            f"out of order sequence number for producer {pid} at offset {b.first_offset} in {tp}: "
            f"{first_seq} (incoming seq. number), {last} (current end sequence number)")


_SNAP_VERSION = struct.Struct(">h")
_SCHEMA = "Snapshot failed schema validation: "


class SnapshotEntry(NamedTuple):
    """One entry of a ``ProducerSnapshot`` v1 file, as stored."""
    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int


def read_snapshot_entries(data: bytes) -> tuple[list[SnapshotEntry], int]:
    """The entries of a producer snapshot, in file order, and how many bytes follow the
    last one.  The checks and messages of Kafka's ``ProducerStateManager.readSnapshot``
    (schema first, then CRC); unlike :func:`read_snapshot` the entries of one
    producer are not merged (what ``chronolog dump-log`` prints).  Raises CorruptSnapshotError."""
    size = len(data)
    if size < _SNAP_VERSION.size:
        raise CorruptSnapshotError(f"{_SCHEMA}the file ends after {size} byte(s), inside the version (int16)")
    (version,) = _SNAP_VERSION.unpack_from(data, 0)
    if version != SNAPSHOT_VERSION:
        raise CorruptSnapshotError(f"{_SCHEMA}Snapshot contained an unknown file version {version}")
    if size < _HEAD.size:
        raise CorruptSnapshotError(f"{_SCHEMA}the file ends after {size} bytes, inside the header "
                                   f"(version, crc, entry count: {_HEAD.size} bytes)")
    _version, crc, count = _HEAD.unpack_from(data, 0)
    remaining = size - _HEAD.size
    if count < 0:
        raise CorruptSnapshotError(f"{_SCHEMA}non-nullable field producerEntries was serialized as null")
    if count > remaining:
        raise CorruptSnapshotError(f"{_SCHEMA}Tried to allocate a collection of size {count}, "
                                   f"but there are only {remaining} bytes remaining.")
    end = _HEAD.size + count * _ENTRY.size
    if end > size:
        raise CorruptSnapshotError(
            f"{_SCHEMA}the file ends after {size} bytes, inside producer entry "
            f"{remaining // _ENTRY.size + 1} of {count} ({_ENTRY.size} bytes each: "
            f"{end} bytes needed)")
    computed = crc32c(memoryview(data)[_CRC_START:])
    if computed != crc:
        raise CorruptSnapshotError(f"Snapshot is corrupt (CRC is no longer valid). Stored crc: {crc}. "
                                   f"Computed crc: {computed}")
    entries = [SnapshotEntry(*_ENTRY.unpack_from(data, _HEAD.size + i * _ENTRY.size))
               for i in range(count)]
    return entries, size - end


def read_snapshot(path: str) -> list[ProducerStateEntry]:
    """Entries of a snapshot file (one per producer; batches of repeated ids merged).
    Kafka's checks (:func:`read_snapshot_entries`), and no bytes after the last entry."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        raw, trailing = read_snapshot_entries(data)
    except CorruptSnapshotError as exc:
        raise CorruptSnapshotError(f"{path}: {exc}") from None
    if trailing:
        raise CorruptSnapshotError(f"{path}: {trailing} bytes after the last of {len(raw)} entries")
    entries: dict[int, ProducerStateEntry] = {}
    for r in raw:
        e = entries.get(r.producer_id)
        if e is None or e.producer_epoch != r.producer_epoch:
            e = entries[r.producer_id] = ProducerStateEntry(r.producer_id, r.producer_epoch, r.timestamp)
        if r.last_offset >= 0:
            e.batches.append(BatchMetadata(r.last_sequence, r.last_offset, r.offset_delta, r.timestamp))
        e.last_timestamp = r.timestamp
        e.coordinator_epoch = r.coordinator_epoch  # the last entry of a producer is its state
        e.current_txn_first_offset = r.current_txn_first_offset
    return list(entries.values())


def write_snapshot(path: str, producers: Iterable[ProducerStateEntry], sync: bool = True) -> None:
    """Write a snapshot atomically (temp file + rename; fsync'd when ``sync``)."""
    body = bytearray()
    count = 0
    for e in producers:
        batches = list(e.batches) or [None]
        for b in batches:
            if b is None:
                body += _ENTRY.pack(e.producer_id, e.producer_epoch, NO_SEQUENCE, -1, 0, e.last_timestamp,
                                    e.coordinator_epoch, e.current_txn_first_offset)
            else:
                body += _ENTRY.pack(e.producer_id, e.producer_epoch, b.last_seq, b.last_offset, b.offset_delta,
                                    b.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
            count += 1
    count_bytes = struct.pack(">i", count)
    crc = crc32c(count_bytes + bytes(body))
    data = struct.pack(">hI", SNAPSHOT_VERSION, crc) + count_bytes + body
    tmp = path + ".tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if sync:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)


class ProducerStateManager:
    """The producer state of one partition and its snapshot files in ``dir``."""

    def __init__(self, dir_path: str, *, topic_partition: str = "",
                 expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS, listing=None):
        """``listing``: the names of the directory's files, when the caller has listed it."""
        self.dir = os.fspath(dir_path)
        self.tp = topic_partition or os.path.basename(self.dir)
        self.expiration_ms = expiration_ms
        self.producers: dict[int, ProducerStateEntry] = {}
        # producer id -> first offset of its ongoing transaction in this partition
        self.ongoing: dict[int, int] = {}
        # False: transactional batches are refused (no coordinator stands behind them)
        self.transactions_enabled = True
        self.map_end_offset = 0
        self.last_snap_offset = 0
        self._snapshots: list[int] = []
        self._unsynced: set[int] = set()
        self._load_snapshot_list(listing)

    # ------------------------------------------------------------------ snapshot files
    def _path(self, offset: int) -> str:
        return os.path.join(self.dir, snapshot_file_name(offset))

    def _load_snapshot_list(self, listing=None) -> None:
        offsets = []
        for name in os.listdir(self.dir) if listing is None else listing:
            m = _SNAPSHOT_FILE.match(name)
            if m:
                offsets.append(int(m.group(1)))
            elif name.endswith(SNAPSHOT_SUFFIX + ".tmp"):
                _unlink(os.path.join(self.dir, name))
        self._snapshots = sorted(offsets)

    @property
    def snapshot_offsets(self) -> list[int]:
        return list(self._snapshots)

    def latest_snapshot_offset(self) -> int | None:
        return self._snapshots[-1] if self._snapshots else None

    def _remove_snapshot(self, offset: int) -> None:
        i = bisect.bisect_left(self._snapshots, offset)
        if i < len(self._snapshots) and self._snapshots[i] == offset:
            del self._snapshots[i]
        self._unsynced.discard(offset)
        _unlink(self._path(offset))

    def remove_stray_snapshots(self, segment_bases: Iterable[int]) -> None:
        """Delete snapshots without a segment of the same base offset, except the latest
        stray one when it lies above every segment base (the clean-shutdown snapshot)."""
        bases = set(segment_bases)
        strays = [o for o in self._snapshots if o not in bases]
        if not strays:
            return
        keep = strays[-1] if bases and strays[-1] > max(bases) else None
        for o in strays:
            if o != keep:
                self._remove_snapshot(o)

    def delete_snapshots_for(self, offsets: Iterable[int]) -> None:
        for o in offsets:
            self._remove_snapshot(o)

    def take_snapshot(self, sync: bool = True) -> bool:
        """Snapshot at ``map_end_offset`` unless one exists there already."""
        if self.map_end_offset <= self.last_snap_offset:
            return False
        off = self.map_end_offset
        write_snapshot(self._path(off), self.producers.values(), sync)
        if off not in self._snapshots:
            bisect.insort(self._snapshots, off)
        if not sync:
            self._unsynced.add(off)
        self.last_snap_offset = off
        return True

    def mark_synced(self) -> None:
        """The filesystem was synced as a whole (a clean shutdown): no snapshot is left unsynced."""
        self._unsynced.clear()

    def unsynced_snapshot_files(self, up_to: int) -> tuple[list[int], list[tuple[int, str]]]:
        """The snapshots written without fsync at offsets <= ``up_to``: their offsets, and
        a (descriptor, path) of each that still exists, for a caller that fsyncs and closes
        them on another thread, then calls ``snapshots_synced(offsets)``."""
        offsets, files = [], []
        try:
            for off in sorted(self._unsynced):
                if off > up_to:
                    continue
                offsets.append(off)
                path = self._path(off)
                try:
                    files.append((os.open(path, os.O_RDONLY), path))
                except FileNotFoundError:
                    pass
        except BaseException:
            for fd, _path in files:
                os.close(fd)
            raise
        return offsets, files

    def has_unsynced_snapshots(self) -> bool:
        return bool(self._unsynced)

    def snapshots_synced(self, offsets) -> None:
        self._unsynced.difference_update(offsets)

    # ------------------------------------------------------------------ state
    def is_empty(self) -> bool:
        return not self.producers

    def last_entry(self, producer_id: int) -> ProducerStateEntry | None:
        return self.producers.get(producer_id)

    def last_records(self) -> dict[int, tuple[int | None, int]]:
        """Kafka's lastRecordsOfActiveProducers: producer id -> (the last offset of its
        last data batch, or None when it has none cached, its epoch). The log cleaner
        keeps those batches (emptied if need be), so the producer's sequence and epoch
        can be rebuilt from the log."""
        return {pid: (e.last_data_offset if e.last_data_offset >= 0 else None, e.producer_epoch)
                for pid, e in self.producers.items()}

    def _is_expired(self, now_ms: int, e: ProducerStateEntry) -> bool:
        # a producer with an ongoing transaction is kept (Kafka's isProducerExpired)
        return e.current_txn_first_offset < 0 and now_ms - e.last_timestamp >= self.expiration_ms

    def remove_expired(self, now_ms: int) -> int:
        """Forget producers idle for ``producer.id.expiration.ms`` (not those with an
        ongoing transaction); returns how many."""
        gone = [pid for pid, e in self.producers.items() if self._is_expired(now_ms, e)]
        for pid in gone:
            del self.producers[pid]
        return len(gone)

    def prepare(self, batches: Iterable[ProducerBatch], *, coordinator: bool = False):
        """Check a client append (pure).  Returns ``(updates, duplicate)``: the new
        entries to :meth:`apply` after the write, or the cached :class:`BatchMetadata`
        of a batch that was appended before (then nothing is to be written).  Raises
        OutOfOrderSequenceError, InvalidProducerEpochError, InvalidTxnStateError.
        ``coordinator``: an append by the group coordinator (Kafka's
        AppendOrigin.COORDINATOR: transactional offset commits), whose sequence numbers
        are neither checked nor used to find duplicates; the epoch is still checked."""
        updates: dict[int, tuple[ProducerStateEntry, ProducerStateEntry]] = {}
        for b in batches:
            if b.producer_id < 0:
                continue
            last_seq = b.last_sequence
            current = self.producers.get(b.producer_id)
            if current is not None and not coordinator:
                dup = current.find_duplicate(b.producer_epoch, b.base_sequence, last_seq)
                if dup is not None:
                    return {}, dup
            self._check_transactions_enabled(b)
            pair = updates.get(b.producer_id)
            if pair is None:
                cur = current if current is not None else ProducerStateEntry(b.producer_id)
                pair = updates[b.producer_id] = (cur, ProducerStateEntry(
                    b.producer_id, cur.producer_epoch, cur.last_timestamp, (), cur.coordinator_epoch,
                    cur.current_txn_first_offset))
            cur, upd = pair
            if coordinator:
                check_epoch(b.producer_id, b.producer_epoch, upd.producer_epoch, b.first_offset, self.tp)
            else:
                check_batch(cur, upd, b, self.tp)
            upd.add_batch(b.producer_epoch, last_seq, b.last_offset, b.last_offset - b.first_offset, b.max_timestamp)
            _track_transaction(upd, b, self.tp)
        return {pid: upd for pid, (_cur, upd) in updates.items()}, None

    def prepare_one(self, b: ProducerBatch):
        """:meth:`prepare` of one client batch (not the coordinator's), the common append,
        without the entries prepare builds: ``(update, None)`` for :meth:`apply_one`, or
        ``(None, duplicate)``. The same checks in the same order, the same errors."""
        pid = b.producer_id
        last_seq = b.last_sequence
        current = self.producers.get(pid)
        if current is not None:
            dup = current.find_duplicate(b.producer_epoch, b.base_sequence, last_seq)
            if dup is not None:
                return None, dup
        self._check_transactions_enabled(b)
        cur = current if current is not None else ProducerStateEntry(pid)
        # prepare checks a batch against the entry before the append and the one its
        # earlier batches made; for the only batch those two agree on all check_batch reads
        check_batch(cur, cur, b, self.tp)
        txn_first = _txn_first_offset(cur.current_txn_first_offset, b, self.tp)
        meta = _new_batch_metadata((last_seq, b.last_offset, b.last_offset - b.first_offset, b.max_timestamp))
        return (pid, b.producer_epoch, (meta,), b.max_timestamp, cur.coordinator_epoch, txn_first), None

    def apply_one(self, update) -> None:
        """Install what :meth:`prepare_one` returned (after the write succeeded): what
        :meth:`apply` does with the entry prepare would have made."""
        self._install(*update)

    def apply(self, updates: dict[int, ProducerStateEntry], end_offset: int | None = None) -> None:
        """Install what :meth:`prepare` returned (after the write succeeded)."""
        for pid, upd in updates.items():
            self._install(pid, upd.producer_epoch, upd.batches, upd.last_timestamp, upd.coordinator_epoch,
                          upd.current_txn_first_offset)
        if end_offset is not None:
            self.map_end_offset = end_offset

    def _install(self, pid: int, epoch: int, batches, last_timestamp: int, coordinator_epoch: int,
                 txn_first: int) -> None:
        """A producer's state after an append: its epoch (a new one drops the batches of
        the old), the appended ``batches`` added to its last five, and the rest as given."""
        cur = self.producers.get(pid)
        if cur is None:
            self.producers[pid] = ProducerStateEntry(pid, epoch, last_timestamp, batches, coordinator_epoch, txn_first)
        else:
            if cur.producer_epoch != epoch:
                cur.batches.clear()
                cur.producer_epoch = epoch
            cur.batches.extend(batches)
            cur.last_timestamp = last_timestamp
            cur.coordinator_epoch = coordinator_epoch
            cur.current_txn_first_offset = txn_first
        if txn_first >= 0:
            self.ongoing[pid] = txn_first

    def _check_transactions_enabled(self, b: ProducerBatch) -> None:
        if b.is_transactional and not self.transactions_enabled:
            # no transaction coordinator: no transaction can have been started on this
            # partition (UnifiedLog: "Record was not part of an ongoing transaction")
            raise InvalidTxnStateError(
                f"transactional batch of producer {b.producer_id} in {self.tp} is not part of an ongoing "
                f"transaction: this broker has no transaction coordinator")

    def load_batch(self, b: ProducerBatch) -> None:
        """Replay one batch read back from the log (no checks)."""
        if b.producer_id < 0:
            return
        e = self.producers.get(b.producer_id)
        if e is None:
            e = self.producers[b.producer_id] = ProducerStateEntry(b.producer_id)
        e.add_batch(b.producer_epoch, b.last_sequence, b.last_offset, b.last_offset - b.first_offset, b.max_timestamp)
        if b.is_transactional and e.current_txn_first_offset < 0:
            e.current_txn_first_offset = b.first_offset
            self.ongoing[b.producer_id] = b.first_offset

    # ------------------------------------------------------------------ transactions
    def prepare_marker(self, producer_id: int, producer_epoch: int, offset: int, is_abort: bool,
                       coordinator_epoch: int, timestamp: int, check: bool = True):
        """ProducerAppendInfo.appendEndTxnMarker (pure): the producer's entry after a
        COMMIT/ABORT marker at ``offset`` and the transaction it completes (None when the
        producer wrote nothing in this partition since its last marker). ``check``
        (a coordinator's append): an older producer epoch raises InvalidProducerEpochError,
        an older coordinator epoch TransactionCoordinatorFencedError."""
        cur = self.producers.get(producer_id) or ProducerStateEntry(producer_id)
        if check:
            check_epoch(producer_id, producer_epoch, cur.producer_epoch, offset, self.tp)
            if cur.coordinator_epoch > coordinator_epoch:
                raise TransactionCoordinatorFencedError(
                    f"invalid coordinator epoch for producer {producer_id} at offset {offset} in {self.tp}: "
                    f"{coordinator_epoch} (zombie), {cur.coordinator_epoch} (current)")
        completed = None
        if cur.current_txn_first_offset >= 0:
            completed = CompletedTxn(producer_id, cur.current_txn_first_offset, offset, is_abort)
        upd = cur.copy()
        if upd.producer_epoch != producer_epoch:
            upd.batches.clear()
            upd.producer_epoch = producer_epoch
        upd.coordinator_epoch = coordinator_epoch
        upd.current_txn_first_offset = -1
        upd.last_timestamp = timestamp
        return upd, completed

    def apply_marker(self, entry: ProducerStateEntry, end_offset: int | None = None) -> None:
        """Install what :meth:`prepare_marker` returned (after the marker was written);
        the caller records the completed transaction first (:meth:`last_stable_offset_after`,
        the ``.txnindex`` for an abort), then calls this."""
        self.producers[entry.producer_id] = entry
        self.ongoing.pop(entry.producer_id, None)
        if end_offset is not None:
            self.map_end_offset = end_offset

    def load_marker(self, producer_id: int, producer_epoch: int, offset: int, is_abort: bool,
                    coordinator_epoch: int, timestamp: int):
        """Replay a marker read back from the log: returns ``(completed, last stable
        offset after it)`` (completed None for a marker of an empty transaction)."""
        entry, completed = self.prepare_marker(producer_id, producer_epoch, offset, is_abort, coordinator_epoch,
                                               timestamp, check=False)
        lso = self.last_stable_offset_after(completed) if completed is not None else None
        self.apply_marker(entry)
        return completed, lso

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest ongoing transaction (the last stable offset
        when the log is fully replicated, as here), or None."""
        return min(self.ongoing.values()) if self.ongoing else None

    def last_stable_offset_after(self, completed: CompletedTxn) -> int:
        """ProducerStateManager.lastStableOffset(completedTxn): the first offset of the
        oldest other ongoing transaction, else the offset after the marker."""
        others = [first for pid, first in self.ongoing.items() if pid != completed.producer_id]
        return min(others) if others else completed.last_offset + 1

    # ------------------------------------------------------------------ reload / truncation
    def _load_from_snapshot(self, log_start_offset: int, now_ms: int) -> None:
        while self._snapshots:
            off = self._snapshots[-1]
            path = self._path(off)
            try:
                entries = read_snapshot(path)
            except (CorruptSnapshotError, OSError) as e:
                logger.warning("%s: failed to load producer snapshot %s: %s; deleting it", self.tp, path, e)
                self._remove_snapshot(off)
                continue
            for e in entries:
                if not self._is_expired(now_ms, e):
                    self.producers[e.producer_id] = e
                    if e.current_txn_first_offset >= 0:
                        self.ongoing[e.producer_id] = e.current_txn_first_offset
            logger.debug("%s: loaded producer state of %d producer(s) from %s", self.tp, len(self.producers), path)
            self.last_snap_offset = self.map_end_offset = off
            return
        self.last_snap_offset = self.map_end_offset = log_start_offset

    def truncate_and_reload(self, log_start_offset: int, log_end_offset: int, now_ms: int) -> None:
        """Drop snapshots above the log end or at/below the log start; reload the
        latest remaining one unless the state already ends at the log end."""
        for off in list(self._snapshots):
            if off > log_end_offset or off <= log_start_offset:
                self._remove_snapshot(off)
        if log_end_offset != self.map_end_offset:
            self.producers.clear()
            self.ongoing.clear()
            self._load_from_snapshot(log_start_offset, now_ms)
        else:
            self.on_log_start_offset_incremented(log_start_offset)

    def truncate_fully_and_start_at(self, offset: int) -> None:
        self.producers.clear()
        self.ongoing.clear()
        for off in list(self._snapshots):
            self._remove_snapshot(off)
        self.last_snap_offset = 0
        self.map_end_offset = offset

    def on_log_start_offset_incremented(self, log_start_offset: int) -> None:
        if self.map_end_offset < log_start_offset:
            self.map_end_offset = log_start_offset
        latest = self.latest_snapshot_offset()
        self.last_snap_offset = latest if latest is not None else log_start_offset


def _track_transaction(entry: ProducerStateEntry, b: ProducerBatch, tp: str) -> None:
    entry.current_txn_first_offset = _txn_first_offset(entry.current_txn_first_offset, b, tp)


def _txn_first_offset(first: int, b: ProducerBatch, tp: str) -> int:
    """ProducerAppendInfo.appendDataBatch: a transactional batch starts a transaction
    unless one is ongoing; a non-transactional one during a transaction is refused.
    ``first``: the first offset of the producer's ongoing transaction (-1: none); returns
    it after ``b``."""
    if first >= 0 and not b.is_transactional:
        raise InvalidTxnStateError(f"expected a transactional write from producer {b.producer_id} at offset "
                                   f"{b.first_offset} in {tp}: its transaction is still ongoing")
    if first < 0 and b.is_transactional:
        return b.first_offset
    return first


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
