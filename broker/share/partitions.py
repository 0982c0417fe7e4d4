"""The share-partitions of every share group on this broker, and the share sessions of
their members: what ShareFetch and ShareAcknowledge do, Kafka's SharePartitionManager.
It reads the logs (through the LogManager), keeps each share-partition's delivery state
(storage.share_partition) and writes it to ``__share_group_state``
(broker.share.state_store) before a request that changed it is answered.

Share sessions (keyed by group and member): ShareFetch with epoch 0 opens one (replacing
the member's old session; acknowledgements are not allowed there: INVALID_REQUEST), each
later request must carry the session's next epoch (INVALID_SHARE_SESSION_EPOCH) and adds
its partitions to the session and drops the forgotten ones; epoch -1 closes it after its
acknowledgements, releasing what the member still holds. A session missing (never opened,
closed, or its member left the group) is SHARE_SESSION_NOT_FOUND. ShareAcknowledge takes
the same epochs but never 0.

Initialization: a partition gets its share-partition state when the group first assigns
it (broker.share.group calls :meth:`initialize`), at ``share.auto.offset.reset``:
``latest`` (the default) the log end, ``earliest`` the log start, ``by_duration:D`` the
first record at or after now - D. A fetch for a partition the group never had gets
UNKNOWN_TOPIC_OR_PARTITION.

Locks: ``share.record.lock.duration.ms`` (GROUP config, else
``group.share.record.lock.duration.ms``); :meth:`expire_locks` runs on the broker's timer
and releases what passed its lock, waking parked ShareFetch requests. Per group:
``share.delivery.count.limit`` and ``share.partition.max.record.locks``;
``share.isolation.level=read_committed`` reads up to the last stable offset and never
delivers records of aborted transactions (they are archived).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol import records as rec
from protocol.errors import ErrorCode as E

from broker.share import state_store as SS
from storage import share_partition as S

log = logging.getLogger("chronolog.share")

INITIAL_EPOCH, FINAL_EPOCH = 0, -1
PARTITION_READ_BYTES = 1 << 20


class ShareError(Exception):
    def __init__(self, code: int, message: str = ""):
        super().__init__(message)
        self.code = int(code)


@dataclass
class ShareSession:
    group_id: str
    member_id: str
    epoch: int = 1  # the epoch the next request must carry
    owner: object = None  # the connection's session that opened it (closed with it)
    partitions: dict = field(default_factory=dict)  # (topic id, partition) -> None, in order


@dataclass
class PartitionResult:
    topic_id: object
    partition: int
    error: int = 0
    message: str | None = None
    ack_error: int = 0
    ack_message: str | None = None
    records: bytes = b""
    acquired: list = field(default_factory=list)  # [(first, last, delivery count)]


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= 2**31 - 1 else epoch + 1


class SharePartitionManager:
    def __init__(self, log_manager, clock, store, group_config, *, max_sessions: int = 2000,
                 notify=None, ensure_group=None):
        self.lm = log_manager
        self.clock = clock
        self.store = store
        self.group_config = group_config  # group id -> effective GROUP configs
        self.max_sessions = max_sessions
        self.notify = notify or (lambda topic, partition: None)
        self.ensure_group = ensure_group or (lambda group_id: None)
        self.partitions: dict[tuple, S.SharePartition] = {}  # (group, topic id, partition)
        self.meta: dict[tuple, SS.ShareState] = {}             # their epochs and timestamps on disk
        self.sessions: dict[tuple, ShareSession] = {}         # (group, member)
        self._locked: set = set()  # keys of share-partitions holding acquired records
        self._dirty: set = set()   # keys changed but not yet written (within one request)
        self.acquired_total = 0
        # redeliveries and archived records of share-partitions since deleted (the totals stay monotonic)
        self._gone_redelivered = 0
        self._gone_archived = 0

    # ------------------------------------------------------------------ names
    def _names(self):
        """{topic id: topic name} (the log manager's live view, not a copy of every topic)."""
        return self.lm.topic_names_view()

    def _config(self, group_id: str) -> dict:
        return self.group_config(group_id)

    # ------------------------------------------------------------------ state
    def load(self, states: dict) -> None:
        """The state replayed from ``__share_group_state`` at start."""
        for (group, tid, p), st in states.items():
            sp = self._new_partition(self._config(group), st.start_offset)
            sp.load(st.start_offset, st.batches)
            self.partitions[(group, tid, p)] = sp
            self.meta[(group, tid, p)] = st
            self.ensure_group(group)
        if states:
            log.info("loaded the state of %d share-partition(s) of %d share group(s)", len(states),
                     len({k[0] for k in states}))

    def _start_offset(self, group_id: str, plog) -> int:
        reset = str(self._config(group_id)["share.auto.offset.reset"])
        if reset == "earliest":
            return plog.log_start_offset
        if reset.startswith("by_duration:"):
            from config.group_config import by_duration_ms

            found = plog.offset_for_timestamp(max(0, int(self.clock.time_ms()) - (by_duration_ms(reset) or 0)))
            return plog.high_watermark if found is None else found[0]
        return plog.high_watermark

    def initialize(self, group_id: str, tps) -> None:
        """Share-partition state for the group's newly assigned partitions."""
        new = []
        names = self._names()
        for tid, p in tps:
            key = (group_id, tid, p)
            if key in self.partitions:
                continue
            name = names.get(tid)
            if name is None:
                continue
            try:
                plog = self.lm.get_log(name, p)
            except Exception:
                continue
            cfg = self._config(group_id)
            sp = self._new_partition(cfg, self._start_offset(group_id, plog))
            self.partitions[key] = sp
            self.meta[key] = SS.ShareState(sp.start, [])
            new.append(key)
            log.info("share group %s: %s-%d starts at offset %d (share.auto.offset.reset=%s)", group_id, name, p,
                     sp.start, cfg["share.auto.offset.reset"])
        self._persist(new)

    def _persist(self, keys) -> None:
        entries = []
        for key in keys:
            sp = self.partitions.get(key)
            if sp is None:
                entries.append((key, None))
                continue
            start, batches = sp.snapshot()
            meta = self.meta.setdefault(key, SS.ShareState(start, []))
            meta.start_offset, meta.batches = start, batches
            entries.append((key, meta))
        self.store.write(entries)

    @staticmethod
    def _new_partition(cfg: dict, start_offset: int) -> S.SharePartition:
        """A share-partition with its group's limits (``cfg``: the effective GROUP configs)."""
        return S.SharePartition(start_offset, max_in_flight=int(cfg["share.partition.max.record.locks"]),
                                delivery_limit=int(cfg["share.delivery.count.limit"]))

    @staticmethod
    def _apply_group_config(cfg: dict, sp) -> None:
        """The group's limits as they are now (its GROUP configs may have changed)."""
        sp.max_in_flight = int(cfg["share.partition.max.record.locks"])
        sp.delivery_limit = int(cfg["share.delivery.count.limit"])

    # ------------------------------------------------------------------ sessions
    def _session_for_fetch(self, group_id: str, member_id: str, epoch: int, has_acks: bool,
                           owner=None) -> ShareSession | None:
        key = (group_id, member_id)
        if epoch == INITIAL_EPOCH:
            if has_acks:
                raise ShareError(E.INVALID_REQUEST, "Acknowledge data present in the initial ShareFetch request.")
            old = self.sessions.pop(key, None)
            if old is not None:
                self._release_member_partitions(group_id, member_id)
            if len(self.sessions) >= self.max_sessions:
                raise ShareError(E.SHARE_SESSION_LIMIT_REACHED,
                                 f"The share session cache is full ({self.max_sessions} sessions).")
            s = self.sessions[key] = ShareSession(group_id, member_id, owner=owner)
            return s
        s = self.sessions.get(key)
        if s is None:
            raise ShareError(E.SHARE_SESSION_NOT_FOUND, f"No share session for member {member_id} of group {group_id}.")
        if epoch == FINAL_EPOCH:
            return s
        if epoch != s.epoch:
            raise ShareError(E.INVALID_SHARE_SESSION_EPOCH,
                             f"The share session epoch is {epoch}, but {s.epoch} was expected.")
        s.epoch = _next_epoch(s.epoch)
        return s

    def _session_for_ack(self, group_id: str, member_id: str, epoch: int) -> ShareSession:
        if epoch == INITIAL_EPOCH:
            raise ShareError(E.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session (epoch 0).")
        s = self.sessions.get((group_id, member_id))
        if s is None:
            raise ShareError(E.SHARE_SESSION_NOT_FOUND, f"No share session for member {member_id} of group {group_id}.")
        if epoch != FINAL_EPOCH:
            if epoch != s.epoch:
                raise ShareError(E.INVALID_SHARE_SESSION_EPOCH,
                                 f"The share session epoch is {epoch}, but {s.epoch} was expected.")
            s.epoch = _next_epoch(s.epoch)
        return s

    def close_session(self, group_id: str, member_id: str) -> None:
        if self.sessions.pop((group_id, member_id), None) is not None:
            self._release_member_partitions(group_id, member_id)

    def member_gone(self, group_id: str, member_id: str, left: bool = False) -> None:
        """The member was removed from its group (its session timed out): its share
        session ends and its records are released. A member that left on its own keeps
        its session until it closes it (its final acknowledgements may still be on the way
        on another connection) or its connection closes; its locks expire meanwhile."""
        if not left:
            self.close_session(group_id, member_id)

    def connection_closed(self, owner) -> None:
        """A client connection closed: the share sessions it opened end, releasing what
        their members hold (as Kafka's share session cache on disconnect)."""
        for key, s in list(self.sessions.items()):
            if s.owner is owner:
                self.close_session(*key)

    def _release_member_partitions(self, group_id: str, member_id: str) -> None:
        touched = []
        for key in [k for k in self._locked if k[0] == group_id]:
            sp = self.partitions.get(key)
            if sp is not None and sp.release_member(member_id):
                touched.append(key)
        if touched:
            log.info("share group %s: records of member %s released in %d partition(s)", group_id, member_id,
                     len(touched))
            self._after_change(touched)

    def _after_change(self, keys, persist: bool = True) -> None:
        """Bookkeeping after state changed: written to ``__share_group_state`` now, or
        (``persist=False``) with the next write of this request (:meth:`flush`, or the
        acquisition that follows in the same ShareFetch); parked fetches woken where
        records became available."""
        if persist:
            self.flush(keys)
        else:
            self._dirty.update(keys)
        names = self._names()
        for key in keys:
            sp = self.partitions.get(key)
            if sp is not None and not sp.acquired_count():
                self._locked.discard(key)
            if sp is not None and sp.has_available():
                name = names.get(key[1])
                if name is not None:
                    self.notify(name, key[2])

    # ------------------------------------------------------------------ acknowledgements
    def _acknowledge(self, group_id: str, member_id: str, tid, p: int, batches, renew_ok: bool) -> tuple[int, str | None]:
        """One partition's acknowledgement batches: (error code, message)."""
        sp = self.partitions.get((group_id, tid, p))
        if sp is None:
            return int(E.UNKNOWN_TOPIC_OR_PARTITION), "The share-partition is not known to this group."
        lock_ms = int(self._config(group_id)["share.record.lock.duration.ms"])
        now = int(self.clock.time_ms())
        ranges = sorted((b.first_offset, b.last_offset) for b in batches)
        for (a1, b1), (a2, _b2) in zip(ranges, ranges[1:]):
            if a2 <= b1:
                return int(E.INVALID_REQUEST), f"Overlapping acknowledgement batches ({a1}-{b1} and {a2}-{_b2})."
        for b in batches:  # every batch is checked before any is applied: all or nothing
            types = list(b.acknowledge_types)
            if not renew_ok and S.RENEW in types:
                return int(E.INVALID_REQUEST), "Renew acknowledgements need ShareFetch/ShareAcknowledge v2."
            code = sp.check_acknowledge(member_id, b.first_offset, b.last_offset, types)
            if code == S.INVALID_REQUEST:
                return int(E.INVALID_REQUEST), (f"Invalid acknowledgement batch {b.first_offset}-{b.last_offset} "
                                                f"with types {types}.")
            if code == S.INVALID_RECORD_STATE:
                return int(E.INVALID_RECORD_STATE), (f"Offsets {b.first_offset}-{b.last_offset} are not all acquired "
                                                     f"by member {member_id}.")
        for b in batches:
            sp.acknowledge(member_id, b.first_offset, b.last_offset, list(b.acknowledge_types), now, lock_ms)
        return 0, None

    def flush(self, keys=()) -> None:
        """Write ``keys`` and what changed and was left for later (``persist=False``)."""
        pending = self._dirty.union(keys)
        if pending:
            self._persist(pending)
            self._dirty.clear()

    def acknowledge_all(self, group_id: str, member_id: str, items, renew_ok: bool, persist: bool = True) -> dict:
        """``items``: [(topic id, partition, batches)]. Returns {(tid, p): (code, message)}
        and persists what changed (``persist=False``: a ShareFetch writes it with what it
        acquires, one snapshot per partition per request)."""
        out, touched = {}, []
        for tid, p, batches in items:
            if not batches:
                continue
            out[(tid, p)] = self._acknowledge(group_id, member_id, tid, p, batches, renew_ok)
            touched.append((group_id, tid, p))
        if touched:
            self._after_change([k for k in touched if k in self.partitions], persist)
        return out

    def share_acknowledge(self, group_id: str, member_id: str, epoch: int, items, renew_ok: bool) -> dict:
        self._session_for_ack(group_id, member_id, epoch)
        out = self.acknowledge_all(group_id, member_id, items, renew_ok)
        if epoch == FINAL_EPOCH:
            self.close_session(group_id, member_id)
        return out

    # ------------------------------------------------------------------ fetch
    def open_fetch(self, group_id: str, member_id: str, epoch: int, partitions, forgotten, has_acks: bool,
                   owner=None):
        """The session step of a ShareFetch: returns the session (None after a final
        epoch closed it) and the partitions to read, in session order."""
        s = self._session_for_fetch(group_id, member_id, epoch, has_acks, owner)
        for tp in forgotten:
            s.partitions.pop(tp, None)
        if epoch == FINAL_EPOCH:
            return s, []
        for tp in partitions:
            s.partitions.setdefault(tp, None)
        return s, list(s.partitions)

    def acquire(self, group_id: str, member_id: str, tps, max_records: int, max_bytes: int,
                strict: bool = False) -> list[PartitionResult]:
        """Acquire records of ``tps`` for the member, in session order, at most
        ``max_records`` (whole batches; ``strict``: exactly) and about ``max_bytes``;
        persist the change. Partitions with nothing give an empty result."""
        cfg = self._config(group_id)
        lock_ms = int(cfg["share.record.lock.duration.ms"])
        committed = cfg["share.isolation.level"] == "read_committed"
        now = int(self.clock.time_ms())
        results, touched = [], []
        names = self._names()
        budget_records, budget_bytes = max(1, max_records), max_bytes  # MaxBytes 0: nothing is read
        for tid, p in tps:
            res = PartitionResult(tid, p)
            results.append(res)
            key = (group_id, tid, p)
            sp = self.partitions.get(key)
            name = names.get(tid)
            if name is None:
                res.error, res.message = int(E.UNKNOWN_TOPIC_ID), "This server does not host this topic ID."
                continue
            if sp is None:
                res.error = int(E.UNKNOWN_TOPIC_OR_PARTITION)
                res.message = f"The share-partition {name}-{p} was never assigned in group {group_id}."
                continue
            if budget_records <= 0 or budget_bytes <= 0:
                continue
            try:
                plog = self.lm.get_log(name, p)
            except Exception:
                res.error, res.message = int(E.UNKNOWN_TOPIC_OR_PARTITION), f"Unknown partition {name}-{p}."
                continue
            self._apply_group_config(cfg, sp)
            before = sp.start
            sp.log_start_moved(plog.log_start_offset)
            if not sp.can_acquire():
                if sp.start != before:
                    touched.append(key)
                continue
            fetch_offset = sp.next_fetch_offset()
            limit = plog.last_stable_offset if committed else plog.high_watermark
            if fetch_offset >= limit:
                if sp.start != before:
                    touched.append(key)
                continue
            try:
                data = plog.read(fetch_offset, min(PARTITION_READ_BYTES, budget_bytes), min_one_message=True,
                                 max_offset=limit)
            except Exception as exc:  # out of range after a retention race: next time
                log.info("share fetch of %s-%d at %d: %s", name, p, fetch_offset, exc)
                continue
            if data.records is None:
                continue
            buf = data.records.read() if hasattr(data.records, "read") else bytes(data.records)
            found = [(pos, h) for pos, h in rec.iter_batches(buf) if h.last_offset < limit]
            aborted = plog.collect_aborted_txns(fetch_offset, limit) if committed else ()
            batches = [S.Batch(h.base_offset, h.last_offset, h.is_control or _aborted(h, aborted))
                       for _pos, h in found]
            got = sp.acquire(member_id, batches, budget_records, now, lock_ms, strict)
            if sp.start != before or got:
                touched.append(key)
            if not got:
                continue
            res.acquired = got
            n = sum(b - a + 1 for a, b, _c in got)
            budget_records -= n
            self.acquired_total += n
            first, last = got[0][0], got[-1][1]
            res.records = b"".join(bytes(buf[pos:pos + h.size]) for pos, h in found
                                   if h.last_offset >= first and h.base_offset <= last)
            budget_bytes -= len(res.records)
            self._locked.add(key)
        self.flush(touched)
        return results

    # ------------------------------------------------------------------ timers
    def expire_locks(self) -> int:
        """Release every record whose lock passed; returns how many."""
        now = int(self.clock.time_ms())
        touched, n = [], 0
        for key in list(self._locked):
            sp = self.partitions.get(key)
            if sp is None:
                self._locked.discard(key)
                continue
            k = sp.expire(now)
            if k:
                n += k
                touched.append(key)
            elif not sp.acquired_count():
                self._locked.discard(key)
        if touched:
            log.debug("released %d record(s) whose acquisition lock expired", n)
            self._after_change(touched)
        return n

    # ------------------------------------------------------------------ admin
    def group_partitions(self, group_id: str) -> dict:
        """{(topic id, partition): SharePartition} of a group."""
        return {(k[1], k[2]): sp for k, sp in self.partitions.items() if k[0] == group_id}

    def reset(self, group_id: str, offsets: dict) -> None:
        """New start offsets {(topic id, partition): offset} (the group must be empty)."""
        keys = []
        for (tid, p), offset in offsets.items():
            key = (group_id, tid, p)
            sp = self.partitions.get(key)
            if sp is None:
                sp = self._new_partition(self._config(group_id), offset)
                self.partitions[key] = sp
            sp.reset(offset)
            self.meta.setdefault(key, SS.ShareState(offset, [])).state_epoch += 1
            self._locked.discard(key)
            keys.append(key)
        self._persist(keys)

    def delete(self, group_id: str, topic_ids=None) -> list:
        """Drop the group's share-partition state (of ``topic_ids`` only, when given):
        tombstones in ``__share_group_state``. Returns the (topic id, partition) deleted."""
        keys = [k for k in self.partitions if k[0] == group_id and (topic_ids is None or k[1] in topic_ids)]
        for k in keys:
            sp = self.partitions.pop(k)
            self._gone_redelivered += sp.redelivered
            self._gone_archived += sp.archived
            self.meta.pop(k, None)
            self._locked.discard(k)
        self._persist(keys)
        return [(k[1], k[2]) for k in keys]

    def topic_deleted(self, topic_id) -> None:
        """A topic went: every group's state of it goes too (as Kafka's group coordinator
        deletes share-partition state when partitions are deleted)."""
        for group in sorted({k[0] for k in self.partitions if k[1] == topic_id}):
            self.delete(group, {topic_id})

    def redelivered_total(self) -> int:
        return self._gone_redelivered + sum(sp.redelivered for sp in self.partitions.values())

    def archived_total(self) -> int:
        return self._gone_archived + sum(sp.archived for sp in self.partitions.values())


def _aborted(h, aborted) -> bool:
    """A transactional batch inside an aborted transaction (read_committed never delivers it)."""
    if not h.is_transactional or h.is_control:
        return False
    return any(a.producer_id == h.producer_id and a.first_offset <= h.base_offset <= a.last_offset for a in aborted)
