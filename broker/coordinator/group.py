"""The classic group protocol (JoinGroup/SyncGroup/Heartbeat/LeaveGroup) and committed
offsets, as Kafka's group coordinator runs them (group-coordinator/.../classic/
ClassicGroup.java, GroupMetadataManager.java, OffsetMetadataManager.java).

No sockets and no asyncio timers here: time comes from an injected clock
(``time_ms()``), delays from an injected scheduler (``call_later(delay_ms, fn) ->
handle`` with ``handle.cancel()``) and parked requests are futures made by an injected
factory, so the unit tests drive everything with a manual clock.  Records for
``__consumer_offsets`` go to an injected ``store`` (``write_offsets(group, {(topic,
partition): OffsetValue | None})``, ``write_group(group, GroupValue | None)``).

States: Empty -> PreparingRebalance -> CompletingRebalance -> Stable (-> Dead on
deletion).  A rebalance waits for every known member to rejoin (at most the largest
rebalance timeout; a brand-new group waits ``group.initial.rebalance.delay.ms`` more
while members keep arriving), then picks the protocol every member supports with the
most first-choice votes, bumps the generation and answers the joins (the leader gets
every member's metadata).  The leader's SyncGroup carries the assignments, which every
parked SyncGroup then receives.  A member that sends nothing for its session timeout
is removed (a rebalance follows); members parked in JoinGroup/SyncGroup are kept alive.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass, field
from typing import Callable

from protocol.errors import ErrorCode as E

from broker.coordinator.records import GroupValue, MemberValue, OffsetValue

log = logging.getLogger("chronolog.coordinator")

EMPTY = "Empty"
PREPARING_REBALANCE = "PreparingRebalance"
COMPLETING_REBALANCE = "CompletingRebalance"
STABLE = "Stable"
DEAD = "Dead"

CONSUMER_PROTOCOL = "consumer"


@dataclass
class JoinResult:
    error: int
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    member_id: str = ""
    members: list = field(default_factory=list)  # [(member_id, group_instance_id, metadata)]
    skip_assignment: bool = False
    # a static leader's rejoin answered without a rebalance: the leader id before its
    # member id was replaced (what Kafka names as leader to JoinGroup v0-8)
    previous_leader: str | None = None


@dataclass
class SyncResult:
    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""


class CoordinatorError(Exception):
    def __init__(self, code: int, message: str = ""):
        super().__init__(message or E(code).name)
        self.code = int(code)


@dataclass
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list  # [(name, metadata bytes)]
    assignment: bytes = b""
    join_futures: list = field(default_factory=list)
    sync_futures: list = field(default_factory=list)
    heartbeat: object = None
    is_new: bool = False

    def metadata(self, protocol: str | None) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        return b""

    def protocol_names(self) -> list[str]:
        return [n for n, _ in self.protocols]

    def matches(self, protocols) -> bool:
        return [(n, bytes(m)) for n, m in protocols] == [(n, bytes(m)) for n, m in self.protocols]

    @property
    def awaiting_join(self) -> bool:
        return bool(self.join_futures)

    @property
    def awaiting_sync(self) -> bool:
        return bool(self.sync_futures)


@dataclass
class OffsetEntry:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int
    # offset of the record in __consumer_offsets (-1 unknown): of a regular and a
    # transactional commit of one partition, the one written later wins
    record_offset: int = -1


def _number(entries: dict, base) -> None:
    """Give the entries the record offsets they were written at (``base`` is the offset
    of the batch's first record; the store writes them in dict order)."""
    if isinstance(base, int) and base >= 0:
        for i, e in enumerate(entries.values()):
            e.record_offset = base + i


class ClassicGroup:
    kind = "classic"  # broker.coordinator.consumer_group.ConsumerGroup: "consumer"

    def __init__(self, group_id: str, now_ms: int):
        self.group_id = group_id
        self.state = EMPTY
        self.state_timestamp = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        self.pending_members: dict[str, object] = {}  # member id -> timer handle
        self.join_timer = None
        self.initial_delay = False  # the join timer is an initial delayed join
        self.new_member_added = False
        self.rebalance_deadline_ms = 0
        self.pending_sync: set[str] = set()  # members that have not sent SyncGroup yet
        self.sync_timer = None
        self.offsets: dict[tuple[str, int], OffsetEntry] = {}
        # TxnOffsetCommit offsets waiting for their transaction's marker: producer id ->
        # {(topic, partition): OffsetEntry} (None: a tombstone)
        self.pending_txn_offsets: dict[int, dict[tuple[str, int], OffsetEntry | None]] = {}
        self.empty_since_ms = now_ms  # for offsets.retention.minutes

    def adopt_offsets(self, other: "ClassicGroup") -> None:
        """Take over the committed and pending transactional offsets of the group this
        one replaces (a group changing kind keeps them)."""
        self.offsets, self.pending_txn_offsets = other.offsets, other.pending_txn_offsets

    def transition(self, state: str, now_ms: int) -> None:
        self.state = state
        self.state_timestamp = now_ms
        if state == EMPTY:
            self.empty_since_ms = now_ms

    def is_empty(self) -> bool:
        return not self.members

    def has_all_members_joined(self) -> bool:
        return all(m.awaiting_join for m in self.members.values()) and not self.pending_members

    def max_rebalance_timeout(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def supported_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for n in set(m.protocol_names()):
                counts[n] = counts.get(n, 0) + 1
        return counts

    def supports_protocols(self, protocol_type: str, protocols, member_id: str | None = None) -> bool:
        names = [n for n, _ in protocols]
        others = [m for mid, m in self.members.items() if mid != member_id]
        if not others:
            return bool(protocol_type) and bool(names)
        if protocol_type != self.protocol_type and self.protocol_type is not None:
            return False
        common = set(others[0].protocol_names())
        for m in others[1:]:
            common &= set(m.protocol_names())
        return any(n in common for n in names)

    def select_protocol(self) -> str:
        members = list(self.members.values())
        common = None
        for m in members:
            names = set(m.protocol_names())
            common = names if common is None else common & names
        if not common:
            raise CoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, "no protocol supported by every member")
        votes: dict[str, int] = {}
        order: list[str] = []
        for m in members:
            for n in m.protocol_names():
                if n in common:
                    votes[n] = votes.get(n, 0) + 1
                    if n not in order:
                        order.append(n)
                    break
        best = max(order, key=lambda n: (votes[n], -order.index(n)))
        return best

    def current_members_for_leader(self) -> list:
        return [(m.member_id, m.group_instance_id, m.metadata(self.protocol_name)) for m in self.members.values()]

    def to_value(self, now_ms: int) -> GroupValue:
        return GroupValue(
            protocol_type=self.protocol_type or "",
            generation=self.generation_id,
            protocol=self.protocol_name,
            leader=self.leader_id,
            current_state_timestamp=now_ms,
            members=[
                MemberValue(m.member_id, m.group_instance_id, m.client_id, m.client_host,
                            m.rebalance_timeout_ms, m.session_timeout_ms,
                            m.metadata(self.protocol_name), m.assignment)
                for m in self.members.values()
            ],
        )


class _LoopScheduler:
    def call_later(self, delay_ms: float, fn: Callable[[], None]):
        return asyncio.get_running_loop().call_later(max(0.0, delay_ms) / 1000.0, fn)


def _loop_future():
    return asyncio.get_running_loop().create_future()


class _NullStore:
    def write_offsets(self, group, offsets, producer=None):
        pass

    def write_group(self, group, value):
        pass

    def write_records(self, group, pairs):
        pass


class GroupCoordinator:
    """Every group of this broker (the only coordinator of every group)."""

    def __init__(self, *, clock, scheduler=None, future_factory=None, store=None,
                 initial_rebalance_delay_ms: int = 3000, min_session_timeout_ms: int = 6000,
                 max_session_timeout_ms: int = 1800000, offsets_retention_ms: int = 7 * 24 * 3600 * 1000,
                 topic_partitions: Callable[[str], int | None] | None = None,
                 max_metadata_size: int = 4096, group_max_size: int = 2**31 - 1, consumer_groups=None):
        self.clock = clock
        self.scheduler = scheduler or _LoopScheduler()
        self.new_future = future_factory or _loop_future
        self.store = store or _NullStore()
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.offsets_retention_ms = offsets_retention_ms
        self.topic_partitions = topic_partitions or (lambda topic: None)
        self.max_metadata_size = max_metadata_size
        self.group_max_size = group_max_size
        self.groups: dict[str, ClassicGroup] = {}
        # producer id -> ids of the groups holding offsets it committed in a transaction
        # not yet ended (Kafka's GroupMetadataManager.openGroupsForProducer): a marker
        # visits those groups, not every group. It may name a group that no longer holds
        # any (deleted, or its offsets completed through another marker's partition).
        self._txn_groups: dict[int, set[str]] = {}
        self.loaded = True
        # the handlers do not see the connection: Kafka reports "/<client ip>"
        self.client_host = "/127.0.0.1"
        # the consumer group protocol (KIP-848): broker.coordinator.consumer_group.ConsumerGroups
        from broker.coordinator.consumer_group import ConsumerGroups

        if consumer_groups is None:
            consumer_groups = dict(topic_metadata=lambda topic: None)

        self.consumer = ConsumerGroups(self, **consumer_groups)
        # share groups (KIP-932): broker.share.group.ShareGroups, set by broker.share.service
        self.share = None

    # ------------------------------------------------------------------ helpers
    def _now(self) -> int:
        return int(self.clock.time_ms())

    def _done(self, value):
        f = self.new_future()
        f.set_result(value)
        return f

    @staticmethod
    def _complete(futures: list, value) -> None:
        for f in futures:
            if not f.done():
                f.set_result(value)
        futures.clear()

    def is_share_group(self, group_id: str) -> bool:
        return self.share is not None and self.share.group(group_id) is not None

    def group(self, group_id: str) -> ClassicGroup | None:
        g = self.groups.get(group_id)
        if g is not None and g.state == DEAD:
            return None
        return g

    def _join_response(self, g: ClassicGroup, member: Member, error: int = 0) -> JoinResult:
        is_leader = member.member_id == g.leader_id
        return JoinResult(
            error=error,
            generation_id=g.generation_id,
            protocol_type=g.protocol_type,
            protocol_name=g.protocol_name,
            leader=g.leader_id or "",
            member_id=member.member_id,
            members=g.current_members_for_leader() if is_leader else [],
        )

    # ------------------------------------------------------------------ heartbeats
    def _schedule_heartbeat(self, g: ClassicGroup, member: Member, timeout_ms: int | None = None) -> None:
        if member.heartbeat is not None:
            member.heartbeat.cancel()
        gen = g.generation_id
        member.heartbeat = self.scheduler.call_later(
            timeout_ms if timeout_ms is not None else member.session_timeout_ms,
            lambda: self._heartbeat_expired(g, member.member_id, gen))

    def _heartbeat_expired(self, g: ClassicGroup, member_id: str, gen: int) -> None:
        member = g.members.get(member_id)
        if member is None or self.groups.get(g.group_id) is not g:
            return
        if member.awaiting_join or member.awaiting_sync:
            # a parked JoinGroup/SyncGroup keeps the member alive
            self._schedule_heartbeat(g, member)
            return
        log.info("member %s of group %s has failed (no heartbeat within %d ms); removing it",
                 member_id, g.group_id, member.session_timeout_ms)
        self._remove_member_and_update(g, member, "session timeout")

    def _pending_expired(self, g: ClassicGroup, member_id: str) -> None:
        if g.pending_members.pop(member_id, None) is not None:
            log.info("pending member %s of group %s never rejoined; removed", member_id, g.group_id)
            if g.state == PREPARING_REBALANCE:
                self._maybe_complete_join(g)

    # ------------------------------------------------------------------ JoinGroup
    def join(self, *, group_id: str, member_id: str, group_instance_id: str | None,
             protocol_type: str, protocols, session_timeout_ms: int, rebalance_timeout_ms: int,
             client_id: str, client_host: str, require_known_member_id: bool, reason: str | None = None):
        """Returns a future of a JoinResult. ``reason``: the client's (JoinGroup v8+,
        KIP-800), added to the rebalance's logged reason."""
        protocols = [(n, bytes(m) if m is not None else b"") for n, m in protocols]
        if not group_id:
            return self._done(JoinResult(E.INVALID_GROUP_ID, member_id=member_id))
        if not (self.min_session_timeout_ms <= session_timeout_ms <= self.max_session_timeout_ms):
            return self._done(JoinResult(E.INVALID_SESSION_TIMEOUT, member_id=member_id))
        if rebalance_timeout_ms is None or rebalance_timeout_ms < 0:
            rebalance_timeout_ms = session_timeout_ms
        if self.is_share_group(group_id):
            return self._done(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
        g = self.group(group_id)
        if g is not None and g.kind == "consumer":
            if g.members:  # a classic member of a consumer group (broker.coordinator.classic_members)
                return self._done(self.consumer.classic.join(
                    g, member_id=member_id, instance_id=group_instance_id, protocol_type=protocol_type,
                    protocols=protocols, session_timeout_ms=session_timeout_ms,
                    rebalance_timeout_ms=rebalance_timeout_ms, client_id=client_id, client_host=client_host,
                    require_known_member_id=require_known_member_id))
            # an empty consumer group becomes a classic one, keeping its offsets
            g = self._classic_from_empty(g)
        now = self._now()
        created = False
        if g is None:
            if member_id:
                return self._done(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))
            g = ClassicGroup(group_id, now)
            self.groups[group_id] = g
            created = True
        if not self._accept_joining_member(g, member_id):
            self._reject_over_capacity(g, member_id)
            return self._done(JoinResult(E.GROUP_MAX_SIZE_REACHED, member_id=""))
        fut = self.new_future()
        args = dict(group_instance_id=group_instance_id, protocol_type=protocol_type, protocols=protocols,
                    session_timeout_ms=session_timeout_ms, rebalance_timeout_ms=rebalance_timeout_ms,
                    client_id=client_id, client_host=client_host,
                    client_reason=f"; client reason: {reason}" if reason else "")
        if not member_id:
            self._join_unknown(g, fut, require_known_member_id, **args)
        else:
            self._join_known(g, fut, member_id, **args)
        if created and g.is_empty() and not g.pending_members and not g.offsets and fut.done():
            # a failed first join leaves no group behind
            if self.groups.get(group_id) is g:
                del self.groups[group_id]
        return fut

    def _classic_from_empty(self, g: ClassicGroup) -> ClassicGroup:
        self._write_group_tombstones(g)
        g.state = DEAD
        new = ClassicGroup(g.group_id, self._now())
        new.adopt_offsets(g)
        self.groups[g.group_id] = new
        log.info("empty consumer group %s becomes a classic group", g.group_id)
        return new

    def retire(self, g: ClassicGroup) -> None:
        """The classic group ``g`` is being replaced by a consumer group (online upgrade):
        requests parked in its rebalance are answered REBALANCE_IN_PROGRESS, so that the
        members rejoin, and its timers stop."""
        for m in g.members.values():
            self._complete(m.join_futures, JoinResult(E.REBALANCE_IN_PROGRESS, member_id=m.member_id))
            self._complete(m.sync_futures, SyncResult(E.REBALANCE_IN_PROGRESS))
            if m.heartbeat is not None:
                m.heartbeat.cancel()
        for timer in [*g.pending_members.values(), g.join_timer, g.sync_timer]:
            if timer is not None:
                timer.cancel()
        g.state = DEAD

    def _accept_joining_member(self, g: ClassicGroup, member_id: str) -> bool:
        """``group.max.size`` (Kafka's acceptJoiningMember, GroupMetadataManager.java;
        GroupCoordinator.scala before 3.7): an Empty group takes anyone; while preparing a
        rebalance a member already waiting in JoinGroup is kept and anyone else is taken
        while fewer than the limit are waiting (the group may be over the limit after the
        limit was lowered: the last members to rejoin are the ones left out); in
        CompletingRebalance and Stable a member of the group is kept and a new one (a new
        dynamic member, a pending member coming back with its id, a static member whose
        instance id has no member yet, or any join without a member id) is taken while the
        group is below the limit."""
        if g.state in (EMPTY, DEAD):
            return True
        m = g.members.get(member_id) if member_id else None
        if g.state == PREPARING_REBALANCE:
            awaiting = sum(1 for x in g.members.values() if x.awaiting_join)
            return (m is not None and m.awaiting_join) or awaiting < self.group_max_size
        return m is not None or len(g.members) < self.group_max_size

    def _reject_over_capacity(self, g: ClassicGroup, member_id: str) -> None:
        """A refused join takes its member out of the group (as Kafka's group.remove):
        a known member is dropped, a pending member id forgotten. Nothing else happens
        (no rebalance: the rebalance in progress completes without it)."""
        log.info("group %s is at its maximum size (group.max.size=%d): refusing member %s in state %s",
                 g.group_id, self.group_max_size, member_id or "(new)", g.state)
        if not member_id:
            return
        m = g.members.get(member_id)
        if m is not None:
            self._remove_member(g, m)
        timer = g.pending_members.pop(member_id, None)
        if timer is not None:
            timer.cancel()
        g.pending_sync.discard(member_id)

    def _new_member(self, member_id, a) -> Member:
        return Member(member_id=member_id, group_instance_id=a["group_instance_id"], client_id=a["client_id"],
                      client_host=a["client_host"], rebalance_timeout_ms=a["rebalance_timeout_ms"],
                      session_timeout_ms=a["session_timeout_ms"], protocol_type=a["protocol_type"],
                      protocols=a["protocols"])

    def _join_unknown(self, g: ClassicGroup, fut, require_known_member_id: bool, **a) -> None:
        if g.state == DEAD:
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE))
            return
        if not g.supports_protocols(a["protocol_type"], a["protocols"]):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance = a["group_instance_id"]
        new_id = f"{instance if instance is not None else a['client_id']}-{uuid.uuid4()}"
        if instance is not None:
            old_id = g.static_members.get(instance)
            if old_id is not None and old_id in g.members:
                self._update_static_member_and_rebalance(g, fut, old_id, new_id, a)
            else:
                self._add_member_and_rebalance(g, fut, new_id, a)
            return
        if require_known_member_id:
            # KIP-394: the client must come back with this id
            g.pending_members[new_id] = self.scheduler.call_later(
                a["session_timeout_ms"], lambda: self._pending_expired(g, new_id))
            fut.set_result(JoinResult(E.MEMBER_ID_REQUIRED, member_id=new_id))
            return
        self._add_member_and_rebalance(g, fut, new_id, a)

    def _join_known(self, g: ClassicGroup, fut, member_id: str, **a) -> None:
        if g.state == DEAD:
            fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=member_id))
            return
        if not g.supports_protocols(a["protocol_type"], a["protocols"], member_id):
            fut.set_result(JoinResult(E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id))
            return
        if member_id in g.pending_members:
            timer = g.pending_members.pop(member_id)
            timer.cancel()
            if a["group_instance_id"] is not None:
                fut.set_result(JoinResult(E.FENCED_INSTANCE_ID, member_id=member_id))
                return
            self._add_member_and_rebalance(g, fut, member_id, a)
            return
        try:
            self._validate_member(g, member_id, a["group_instance_id"])
        except CoordinatorError as e:
            fut.set_result(JoinResult(e.code, member_id=member_id))
            return
        member = g.members[member_id]
        if g.state == PREPARING_REBALANCE:
            self._update_member_and_rebalance(g, member, fut, a)
        elif g.state == COMPLETING_REBALANCE:
            if member.matches(a["protocols"]):
                # a retried join: answer with the current generation
                fut.set_result(self._join_response(g, member))
            else:
                self._update_member_and_rebalance(g, member, fut, a)
        elif g.state == STABLE:
            if member.member_id == g.leader_id or not member.matches(a["protocols"]):
                self._update_member_and_rebalance(g, member, fut, a)
            else:
                fut.set_result(self._join_response(g, member))
        else:
            fut.set_result(JoinResult(E.UNKNOWN_MEMBER_ID, member_id=member_id))

    def _validate_member(self, g: ClassicGroup, member_id: str, group_instance_id: str | None) -> None:
        if group_instance_id is not None:
            existing = g.static_members.get(group_instance_id)
            if existing is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID)
            if existing != member_id:
                raise CoordinatorError(E.FENCED_INSTANCE_ID)
        if member_id not in g.members:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID)

    def _add_member_and_rebalance(self, g: ClassicGroup, fut, member_id: str, a) -> None:
        member = self._new_member(member_id, a)
        member.is_new = True
        member.join_futures.append(fut)
        if not g.members:
            g.protocol_type = a["protocol_type"]
        g.members[member_id] = member
        if member.group_instance_id is not None:
            g.static_members[member.group_instance_id] = member_id
        if g.leader_id is None:
            g.leader_id = member_id
        g.new_member_added = True
        # a new member that never comes back is removed after its session timeout
        self._schedule_heartbeat(g, member)
        self._maybe_prepare_rebalance_or_complete_join(g, f"member {member_id} joined{a.get('client_reason', '')}")

    def _update_member_and_rebalance(self, g: ClassicGroup, member: Member, fut, a) -> None:
        member.protocols = a["protocols"]
        member.protocol_type = a["protocol_type"]
        member.session_timeout_ms = a["session_timeout_ms"]
        member.rebalance_timeout_ms = a["rebalance_timeout_ms"]
        member.client_id = a["client_id"]
        member.client_host = a["client_host"]
        member.join_futures.append(fut)
        self._maybe_prepare_rebalance_or_complete_join(
            g, f"member {member.member_id} rejoined{a.get('client_reason', '')}")

    def _update_static_member_and_rebalance(self, g: ClassicGroup, fut, old_id: str, new_id: str, a) -> None:
        """Kafka's updateStaticMemberThenRebalanceOrCompleteJoin: a static member that
        joins without a member id takes over its instance's member (new member id, the
        old one fenced) with the request's protocols and timeouts.  In Stable there is no
        rebalance unless the protocol the group would select changes (KIP-345): the
        member gets the current generation and keeps its assignment.  That is what makes
        a restarted static member come back without a rebalance after a broker restart
        too: a member loaded from ``__consumer_offsets`` only knows the group's selected
        protocol, so its full protocol list would not match."""
        old = g.members.pop(old_id)
        # the old incarnation is fenced
        self._complete(old.join_futures, JoinResult(E.FENCED_INSTANCE_ID, member_id=old_id))
        self._complete(old.sync_futures, SyncResult(E.FENCED_INSTANCE_ID))
        if old.heartbeat is not None:
            old.heartbeat.cancel()
            old.heartbeat = None
        member = old
        saved = (member.protocols, member.protocol_type, member.session_timeout_ms, member.rebalance_timeout_ms)
        member.member_id = new_id
        g.members[new_id] = member
        g.static_members[member.group_instance_id] = new_id
        previous_leader = g.leader_id
        was_leader = previous_leader == old_id
        if was_leader:
            g.leader_id = new_id
        if old_id in g.pending_sync:
            g.pending_sync.discard(old_id)
            g.pending_sync.add(new_id)
        member.protocols = a["protocols"]
        member.protocol_type = a["protocol_type"]
        member.session_timeout_ms = a["session_timeout_ms"]
        member.rebalance_timeout_ms = a["rebalance_timeout_ms"]
        # (client id and host stay those of the replaced member, as in Kafka's replaceStaticMember)
        self._schedule_heartbeat(g, member)
        log.info("static member %s of group %s rejoined: member id %s replaces %s",
                 member.group_instance_id, g.group_id, new_id, old_id)
        if g.state == STABLE:
            try:
                selected = g.select_protocol()
            except CoordinatorError:
                selected = None
            if selected is not None and selected == g.protocol_name:
                log.info("static member %s joins stable group %s without changing its selected protocol %s: "
                         "no rebalance", member.group_instance_id, g.group_id, g.protocol_name)
                try:
                    self._persist_group(g)
                except Exception as exc:
                    # as Kafka: the replacement is undone and the member told to retry
                    log.error("could not store the new member id of static member %s of group %s: %s",
                              member.group_instance_id, g.group_id, exc)
                    (member.protocols, member.protocol_type, member.session_timeout_ms,
                     member.rebalance_timeout_ms) = saved
                    del g.members[new_id]
                    member.member_id = old_id
                    g.members[old_id] = member
                    g.static_members[member.group_instance_id] = old_id
                    if was_leader:
                        g.leader_id = old_id
                    if new_id in g.pending_sync:
                        g.pending_sync.discard(new_id)
                        g.pending_sync.add(old_id)
                    self._schedule_heartbeat(g, member)
                    fut.set_result(JoinResult(E.COORDINATOR_NOT_AVAILABLE, generation_id=g.generation_id,
                                              protocol_type=g.protocol_type, protocol_name=g.protocol_name,
                                              leader=previous_leader or "", member_id=""))
                    return
                res = self._join_response(g, member)
                res.skip_assignment = was_leader  # KIP-814 (JoinGroup v9+)
                res.previous_leader = previous_leader
                fut.set_result(res)
                return
            member.join_futures.append(fut)
            self._maybe_prepare_rebalance_or_complete_join(
                g, f"static member {member.group_instance_id} rejoined with a change of the selected protocol")
            return
        member.join_futures.append(fut)
        if g.state == COMPLETING_REBALANCE:
            # the leader may already have the old member id: the assignment would miss the new one
            self._prepare_rebalance(g, f"static member {member.group_instance_id} rejoined during "
                                       f"{COMPLETING_REBALANCE}")
            return
        self._maybe_complete_join(g)

    def _maybe_prepare_rebalance_or_complete_join(self, g: ClassicGroup, reason: str) -> None:
        if g.state in (STABLE, COMPLETING_REBALANCE, EMPTY):
            self._prepare_rebalance(g, reason)
        elif g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    def _prepare_rebalance(self, g: ClassicGroup, reason: str) -> None:
        now = self._now()
        if g.state == COMPLETING_REBALANCE:
            for m in g.members.values():
                m.assignment = b""
                if m.sync_futures:
                    # the answer counts as activity: the member gets a full session to rejoin
                    self._complete(m.sync_futures, SyncResult(E.REBALANCE_IN_PROGRESS))
                    self._schedule_heartbeat(g, m)
        if g.join_timer is not None:
            g.join_timer.cancel()
        rebalance_timeout = g.max_rebalance_timeout()
        was_empty = g.state == EMPTY
        g.transition(PREPARING_REBALANCE, now)
        log.info("preparing to rebalance group %s in state %s with old generation %d (reason: %s)",
                 g.group_id, PREPARING_REBALANCE, g.generation_id, reason)
        if was_empty:
            g.initial_delay = True
            g.new_member_added = False
            g.rebalance_deadline_ms = now + rebalance_timeout
            delay = min(self.initial_rebalance_delay_ms, rebalance_timeout)
            g.join_timer = self.scheduler.call_later(delay, lambda: self._initial_delay_expired(g))
        else:
            g.initial_delay = False
            g.rebalance_deadline_ms = now + rebalance_timeout
            g.join_timer = self.scheduler.call_later(rebalance_timeout, lambda: self._join_timeout(g))
            self._maybe_complete_join(g)

    def _initial_delay_expired(self, g: ClassicGroup) -> None:
        if g.state != PREPARING_REBALANCE or not g.initial_delay:
            return
        now = self._now()
        remaining = g.rebalance_deadline_ms - now
        if g.new_member_added and remaining > 0 and self.initial_rebalance_delay_ms > 0:
            g.new_member_added = False
            g.join_timer = self.scheduler.call_later(min(self.initial_rebalance_delay_ms, remaining),
                                                     lambda: self._initial_delay_expired(g))
            return
        g.join_timer = None
        self._complete_join(g)

    def _join_timeout(self, g: ClassicGroup) -> None:
        if g.state != PREPARING_REBALANCE or g.initial_delay:
            return
        g.join_timer = None
        self._complete_join(g)

    def _maybe_complete_join(self, g: ClassicGroup) -> None:
        if g.state == PREPARING_REBALANCE and not g.initial_delay and g.has_all_members_joined():
            if g.join_timer is not None:
                g.join_timer.cancel()
                g.join_timer = None
            self._complete_join(g)

    def _complete_join(self, g: ClassicGroup) -> None:
        if g.state != PREPARING_REBALANCE:
            return
        now = self._now()
        g.initial_delay = False
        for m in [m for m in g.members.values() if not m.awaiting_join]:
            log.info("group %s: member %s did not rejoin in time; removed", g.group_id, m.member_id)
            self._remove_member(g, m)
        g.generation_id += 1
        if not g.members:
            g.protocol_name = None
            g.transition(EMPTY, now)
            log.info("group %s with generation %d is now empty", g.group_id, g.generation_id)
            self._persist_group(g)
            return
        try:
            g.protocol_name = g.select_protocol()
        except CoordinatorError:
            g.protocol_name = None
        g.transition(COMPLETING_REBALANCE, now)
        log.info("stabilized group %s generation %d (protocol %s) with %d members",
                 g.group_id, g.generation_id, g.protocol_name, len(g.members))
        g.pending_sync = set(g.members)
        if g.sync_timer is not None:
            g.sync_timer.cancel()
        gen = g.generation_id
        g.sync_timer = self.scheduler.call_later(g.max_rebalance_timeout(),
                                                 lambda: self._pending_sync_expired(g, gen))
        for m in g.members.values():
            res = self._join_response(g, m)
            m.is_new = False
            self._complete(m.join_futures, res)
            self._schedule_heartbeat(g, m)

    def _pending_sync_expired(self, g: ClassicGroup, gen: int) -> None:
        """Kafka's pending-sync timeout: members that did not send SyncGroup within the
        rebalance timeout after the join completed are removed and the group rebalances
        (otherwise the members parked in SyncGroup would wait for ever)."""
        g.sync_timer = None
        if g.generation_id != gen or g.state not in (COMPLETING_REBALANCE, STABLE) or not g.pending_sync:
            return
        late = [g.members[mid] for mid in g.pending_sync if mid in g.members]
        g.pending_sync = set()
        if not late:
            return
        for m in late:
            log.info("group %s: member %s did not send SyncGroup in time; removed", g.group_id, m.member_id)
            self._remove_member(g, m)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, "members failed to sync within the rebalance timeout")

    def _remove_member(self, g: ClassicGroup, m: Member) -> None:
        g.members.pop(m.member_id, None)
        if m.group_instance_id is not None and g.static_members.get(m.group_instance_id) == m.member_id:
            del g.static_members[m.group_instance_id]
        if m.heartbeat is not None:
            m.heartbeat.cancel()
            m.heartbeat = None
        self._complete(m.join_futures, JoinResult(E.UNKNOWN_MEMBER_ID, member_id=m.member_id))
        self._complete(m.sync_futures, SyncResult(E.UNKNOWN_MEMBER_ID))
        if g.leader_id == m.member_id:
            g.leader_id = next(iter(g.members), None)

    def _remove_member_and_update(self, g: ClassicGroup, m: Member, reason: str) -> None:
        self._remove_member(g, m)
        if g.state in (STABLE, COMPLETING_REBALANCE):
            self._prepare_rebalance(g, f"removing member {m.member_id} on {reason}")
        elif g.state == PREPARING_REBALANCE:
            self._maybe_complete_join(g)

    # ------------------------------------------------------------------ SyncGroup
    def sync(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None,
             protocol_type: str | None, protocol_name: str | None, assignments: dict):
        g = self.group(group_id)
        if g is not None and g.kind == "consumer" and g.members:
            return self._done(self.consumer.classic.sync(
                g, member_id=member_id, instance_id=group_instance_id, generation_id=generation_id,
                protocol_type=protocol_type, protocol_name=protocol_name))
        if g is None or g.is_empty() or g.kind == "consumer":
            return self._done(SyncResult(E.UNKNOWN_MEMBER_ID))
        try:
            self._validate_member(g, member_id, group_instance_id)
        except CoordinatorError as e:
            return self._done(SyncResult(e.code))
        if generation_id != g.generation_id:
            return self._done(SyncResult(E.ILLEGAL_GENERATION))
        if (protocol_type is not None and protocol_type != g.protocol_type) or (
                protocol_name is not None and protocol_name != g.protocol_name):
            return self._done(SyncResult(E.INCONSISTENT_GROUP_PROTOCOL))
        member = g.members[member_id]
        g.pending_sync.discard(member_id)
        if g.state == PREPARING_REBALANCE:
            return self._done(SyncResult(E.REBALANCE_IN_PROGRESS))
        if g.state == STABLE:
            self._schedule_heartbeat(g, member)
            return self._done(SyncResult(0, g.protocol_type, g.protocol_name, member.assignment))
        if g.state != COMPLETING_REBALANCE:
            return self._done(SyncResult(E.UNKNOWN_MEMBER_ID))
        fut = self.new_future()
        member.sync_futures.append(fut)
        self._schedule_heartbeat(g, member)
        if member_id == g.leader_id:
            for m in g.members.values():
                m.assignment = bytes(assignments.get(m.member_id) or b"")
            try:
                self._persist_group(g)
            except Exception as exc:  # storage failure: every member rejoins
                log.error("could not store the assignment of group %s: %s", g.group_id, exc)
                for m in g.members.values():
                    m.assignment = b""
                    self._complete(m.sync_futures, SyncResult(E.COORDINATOR_NOT_AVAILABLE))
                self._prepare_rebalance(g, "storing the assignment failed")
                return fut
            g.transition(STABLE, self._now())
            for m in g.members.values():
                self._complete(m.sync_futures, SyncResult(0, g.protocol_type, g.protocol_name, m.assignment))
        return fut

    # ------------------------------------------------------------------ Heartbeat
    def heartbeat(self, *, group_id: str, generation_id: int, member_id: str, group_instance_id: str | None) -> int:
        g = self.group(group_id)
        if g is not None and g.kind == "consumer":
            return self.consumer.classic.heartbeat(g, member_id=member_id, instance_id=group_instance_id,
                                                   generation_id=generation_id)
        if g is None:
            return int(E.UNKNOWN_MEMBER_ID)
        try:
            self._validate_member(g, member_id, group_instance_id)
        except CoordinatorError as e:
            return e.code
        if generation_id != g.generation_id:
            return int(E.ILLEGAL_GENERATION)
        member = g.members[member_id]
        if g.state == EMPTY:
            return int(E.UNKNOWN_MEMBER_ID)
        self._schedule_heartbeat(g, member)
        if g.state == PREPARING_REBALANCE:
            return int(E.REBALANCE_IN_PROGRESS)
        return 0

    # ------------------------------------------------------------------ LeaveGroup
    def leave(self, group_id: str, members: list) -> tuple[int, list]:
        """``members``: [(member_id, group_instance_id)] or with the client's reason
        (LeaveGroup v5+, KIP-800) as a third item. Returns (top-level error,
        [(member_id, group_instance_id, error)])."""
        g = self.group(group_id)
        if g is not None and g.kind == "consumer":
            return self.consumer.classic.leave(g, members)
        if g is None:
            return int(E.UNKNOWN_MEMBER_ID), [(mid, iid, int(E.UNKNOWN_MEMBER_ID)) for mid, iid, *_ in members]
        results = []
        changed = False
        reasons = []
        for mid, iid, *why in members:
            if why and why[0]:
                reasons.append(why[0])
            if iid is None and mid in g.pending_members:
                g.pending_members.pop(mid).cancel()
                results.append((mid, iid, 0))
                changed = True
                continue
            if iid is not None:
                existing = g.static_members.get(iid)
                if existing is None:
                    results.append((mid, iid, int(E.UNKNOWN_MEMBER_ID)))
                    continue
                if mid and mid != existing:
                    results.append((mid, iid, int(E.FENCED_INSTANCE_ID)))
                    continue
                mid = existing
            m = g.members.get(mid)
            if m is None:
                results.append((mid, iid, int(E.UNKNOWN_MEMBER_ID)))
                continue
            log.info("member %s (instance %s) is leaving group %s%s", mid, iid, g.group_id,
                     f"; client reason: {why[0]}" if why and why[0] else "")
            self._remove_member(g, m)
            results.append((mid, iid, 0))
            changed = True
        if changed:
            if g.state in (STABLE, COMPLETING_REBALANCE):
                self._prepare_rebalance(g, "member(s) left the group" + "".join(
                    f"; client reason: {r}" for r in dict.fromkeys(reasons)))
            elif g.state == PREPARING_REBALANCE:
                self._maybe_complete_join(g)
        return 0, results

    # ------------------------------------------------------------------ offsets
    def validate_commit(self, g: ClassicGroup | None, group_id: str, generation_id: int, member_id: str,
                        group_instance_id: str | None, version: int) -> ClassicGroup:
        if g is None and self.is_share_group(group_id):
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a classic or consumer group.")
        if g is None:
            if generation_id < 0:
                g = ClassicGroup(group_id, self._now())
                self.groups[group_id] = g
                return g
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND if version >= 9 else E.ILLEGAL_GENERATION)
        if g.state == DEAD:
            raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE)
        if g.kind == "consumer":  # the generation is the member epoch (OffsetCommit v9)
            self.consumer.validate_commit(g, member_id, generation_id, version, transactional=False)
            return g
        if generation_id < 0 and g.state == EMPTY:
            return g
        if generation_id >= 0 or member_id or group_instance_id is not None:
            self._validate_member(g, member_id, group_instance_id)
            if generation_id != g.generation_id:
                raise CoordinatorError(E.ILLEGAL_GENERATION)
        elif g.state != EMPTY:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID)
        if g.state == COMPLETING_REBALANCE:
            raise CoordinatorError(E.REBALANCE_IN_PROGRESS)
        return g

    def commit_offsets(self, *, group_id: str, generation_id: int, member_id: str,
                       group_instance_id: str | None, version: int, offsets: list) -> dict:
        """``offsets``: [(topic, partition, offset, leader_epoch, metadata, commit_ts)].
        Returns {(topic, partition): error code}."""
        keys = [(t, p) for t, p, *_ in offsets]
        if not group_id:
            return {k: int(E.INVALID_GROUP_ID) for k in keys}
        g = self.group(group_id)
        try:
            g = self.validate_commit(g, group_id, generation_id, member_id, group_instance_id, version)
        except CoordinatorError as e:
            return {k: e.code for k in keys}
        if g.kind == "classic" and g.members and member_id in g.members:
            self._schedule_heartbeat(g, g.members[member_id])
        now = self._now()
        results: dict = {}
        accepted: dict = {}
        for topic, partition, offset, epoch, metadata, ts in offsets:
            n = self.topic_partitions(topic)
            if n is None or not 0 <= partition < n:
                results[(topic, partition)] = int(E.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if metadata is not None and len(metadata) > self.max_metadata_size:
                results[(topic, partition)] = int(E.OFFSET_METADATA_TOO_LARGE)
                continue
            entry = OffsetEntry(offset, epoch if epoch is not None else -1, metadata or "",
                                ts if ts is not None and ts >= 0 else now)
            accepted[(topic, partition)] = entry
            results[(topic, partition)] = 0
        if accepted:
            try:
                base = self.store.write_offsets(group_id, {k: OffsetValue(e.offset, e.leader_epoch, e.metadata,
                                                                          e.commit_timestamp)
                                                           for k, e in accepted.items()})
                _number(accepted, base)
            except Exception as exc:
                log.error("could not store offsets of group %s: %s", group_id, exc)
                code = E.COORDINATOR_NOT_AVAILABLE
                if type(exc).__name__ in ("MessageTooLargeError", "RecordListTooLargeError"):
                    code = E.INVALID_COMMIT_OFFSET_SIZE  # as Kafka maps a too-large append
                for k in accepted:
                    results[k] = int(code)
                accepted = {}
            g.offsets.update(accepted)
        if (g.kind == "classic" and not g.offsets and g.is_empty() and g.state == EMPTY and g.generation_id == 0
                and not g.pending_members and not g.pending_txn_offsets):
            self.groups.pop(group_id, None)
        return results

    def fetch_offsets(self, group_id: str, partitions: list | None, require_stable: bool = False):
        """``partitions``: [(topic, partition)] or None for all. Returns (error,
        [(topic, partition, offset, leader_epoch, metadata, error)]). ``require_stable``
        (OffsetFetch v7+, KIP-447): a partition with a transactional commit still waiting
        for its marker answers UNSTABLE_OFFSET_COMMIT, so the consumer retries."""
        g = self.group(group_id)
        offsets = g.offsets if g is not None else {}
        pending: set = set()
        if require_stable and g is not None:
            for per_producer in g.pending_txn_offsets.values():
                pending.update(per_producer)

        def row(t, p, e):
            if (t, p) in pending:
                return (t, p, -1, -1, "", int(E.UNSTABLE_OFFSET_COMMIT))
            if e is None:
                return (t, p, -1, -1, "", 0)
            return (t, p, e.offset, e.leader_epoch, e.metadata, 0)

        if partitions is None:
            keys = sorted(set(offsets) | pending)
            return 0, [row(t, p, offsets.get((t, p))) for t, p in keys]
        return 0, [row(t, p, offsets.get((t, p))) for t, p in partitions]

    # ------------------------------------------------------------------ transactional offsets
    def txn_commit_offsets(self, *, group_id: str, producer_id: int, producer_epoch: int, generation_id: int,
                           member_id: str, group_instance_id: str | None, offsets: list) -> dict:
        """TxnOffsetCommit: validated as Kafka's validateTransactionalOffsetCommit
        (KIP-447: a stale generation or unknown member is fenced), written to
        ``__consumer_offsets`` as a transactional batch of the producer, and held as
        pending until the transaction's marker commits (:meth:`complete_txn`) or drops
        them. ``offsets`` as :meth:`commit_offsets`. Returns {(topic, partition): error}."""
        keys = [(t, p) for t, p, *_ in offsets]
        if not group_id:
            return {k: int(E.INVALID_GROUP_ID) for k in keys}
        g = self.group(group_id)
        if g is None:
            if generation_id >= 0:
                return {k: int(E.ILLEGAL_GENERATION) for k in keys}
            g = self.groups[group_id] = ClassicGroup(group_id, self._now())
        try:
            if g.state == DEAD:
                raise CoordinatorError(E.COORDINATOR_NOT_AVAILABLE)
            if g.kind == "consumer":
                self.consumer.validate_commit(g, member_id, generation_id, 9, transactional=True)
            elif not (generation_id < 0 and g.state == EMPTY) and (
                    generation_id >= 0 or member_id or group_instance_id is not None):
                self._validate_member(g, member_id, group_instance_id)
                if generation_id != g.generation_id:
                    raise CoordinatorError(E.ILLEGAL_GENERATION)
        except CoordinatorError as e:
            return {k: e.code for k in keys}
        now = self._now()
        results: dict = {}
        accepted: dict = {}
        for topic, partition, offset, epoch, metadata, ts in offsets:
            n = self.topic_partitions(topic)
            if n is None or not 0 <= partition < n:
                results[(topic, partition)] = int(E.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            if metadata is not None and len(metadata) > self.max_metadata_size:
                results[(topic, partition)] = int(E.OFFSET_METADATA_TOO_LARGE)
                continue
            accepted[(topic, partition)] = OffsetEntry(offset, epoch if epoch is not None else -1, metadata or "",
                                                       ts if ts is not None and ts >= 0 else now)
            results[(topic, partition)] = 0
        if accepted:
            try:
                base = self.store.write_offsets(
                    group_id, {k: OffsetValue(e.offset, e.leader_epoch, e.metadata, e.commit_timestamp)
                               for k, e in accepted.items()}, producer=(producer_id, producer_epoch))
                _number(accepted, base)
            except Exception as exc:
                code = E.COORDINATOR_NOT_AVAILABLE
                name = type(exc).__name__
                if name in ("InvalidProducerEpochError", "ProducerFencedError"):
                    code = E.PRODUCER_FENCED  # an older epoch than the producer's last write here
                elif name in ("MessageTooLargeError", "RecordListTooLargeError"):
                    code = E.INVALID_COMMIT_OFFSET_SIZE
                else:
                    log.error("could not store transactional offsets of group %s: %s", group_id, exc)
                return {k: (int(code) if k in accepted else v) for k, v in results.items()}
            g.pending_txn_offsets.setdefault(producer_id, {}).update(accepted)
            self._txn_groups.setdefault(producer_id, set()).add(group_id)
        return results

    def complete_txn(self, producer_id: int, commit: bool, offsets_partition: int | None = None,
                     num_partitions: int | None = None) -> int:
        """A COMMIT/ABORT marker of ``producer_id`` reached ``__consumer_offsets``
        (partition ``offsets_partition``, None: any): its pending offsets of the groups
        placed there become committed (unless a later regular commit of the same
        partition was written after them) or are dropped. Returns how many were applied."""
        from broker.coordinator.records import partition_for

        applied = 0
        gids = self._txn_groups.get(producer_id)
        if not gids:
            return 0
        for gid in list(gids):
            if offsets_partition is not None and num_partitions and partition_for(gid, num_partitions) != offsets_partition:
                continue
            gids.discard(gid)
            g = self.groups.get(gid)
            pending = None if g is None else g.pending_txn_offsets.get(producer_id)
            if pending is None:
                continue
            del g.pending_txn_offsets[producer_id]
            if not commit:
                continue
            for k, e in pending.items():
                cur = g.offsets.get(k)
                if e is None:
                    g.offsets.pop(k, None)
                elif cur is None or cur.record_offset < e.record_offset or e.record_offset < 0:
                    g.offsets[k] = e
                    applied += 1
        if not gids:
            del self._txn_groups[producer_id]
        return applied

    def subscribed_topics(self, g: ClassicGroup) -> set[str] | None:
        """Topics the members subscribe to (consumer protocol), None if unknown."""
        if g.kind == "consumer":
            return {t for m in g.members.values() for t in self.consumer.subscribed(m, g)}
        if g.protocol_type != CONSUMER_PROTOCOL or not g.members:
            return set()
        from broker.coordinator.consumer_protocol import subscription_topics

        topics: set[str] = set()
        for m in g.members.values():
            try:
                topics |= set(subscription_topics(m.metadata(g.protocol_name)))
            except Exception:
                return None
        return topics

    def delete_offsets(self, group_id: str, partitions: list):
        """OffsetDelete: returns (group error, {(topic, partition): error})."""
        g = self.group(group_id)
        if g is None:
            return int(E.GROUP_ID_NOT_FOUND), {}
        if g.state not in (EMPTY,) and g.protocol_type != CONSUMER_PROTOCOL:
            return int(E.NON_EMPTY_GROUP), {}
        subscribed = set() if g.state == EMPTY else self.subscribed_topics(g)
        results = {}
        deleted = {}
        for t, p in partitions:
            if subscribed is None or t in subscribed:
                results[(t, p)] = int(E.GROUP_SUBSCRIBED_TO_TOPIC)
                continue
            if self.topic_partitions(t) is None:
                results[(t, p)] = int(E.UNKNOWN_TOPIC_OR_PARTITION)
                continue
            results[(t, p)] = 0
            if (t, p) in g.offsets:
                deleted[(t, p)] = None
        if deleted:
            self.store.write_offsets(group_id, deleted)
            for k in deleted:
                g.offsets.pop(k, None)
        return 0, results

    # ------------------------------------------------------------------ admin
    def list_groups(self, states: list[str] | None = None, types: list[str] | None = None) -> list[tuple]:
        """[(group id, protocol type, state, group type)] filtered by states and types
        (case-insensitive, as Kafka's ListGroups v4/v5)."""
        out = []
        wanted_types = {t.lower() for t in types} if types else None
        for gid, g in sorted(self.groups.items()):
            if g.state == DEAD:
                continue
            if states and g.state.lower() not in {s.lower() for s in states}:
                continue
            if wanted_types is not None and g.kind not in wanted_types:
                continue
            out.append((gid, g.protocol_type or "", g.state, g.kind))
        if self.share is not None:
            for gid, g in self.share.groups.items():
                if states and g.state.lower() not in {s.lower() for s in states}:
                    continue
                if wanted_types is not None and g.kind not in wanted_types:
                    continue
                out.append((gid, g.protocol_type, g.state, g.kind))
            out.sort()
        return out

    def describe(self, group_id: str) -> ClassicGroup | None:
        return self.group(group_id)

    def delete_group(self, group_id: str) -> int:
        g = self.group(group_id)
        if g is None and self.is_share_group(group_id):
            return self.share.delete_group(group_id)
        if g is None:
            return int(E.GROUP_ID_NOT_FOUND)
        if g.state != EMPTY or g.members:
            return int(E.NON_EMPTY_GROUP)
        tombstones = {k: None for k in g.offsets}
        try:
            if tombstones:
                self.store.write_offsets(group_id, tombstones)
            self._write_group_tombstones(g)
        except Exception as exc:
            log.error("could not delete group %s: %s", group_id, exc)
            return int(E.COORDINATOR_NOT_AVAILABLE)
        g.transition(DEAD, self._now())
        if g.join_timer is not None:
            g.join_timer.cancel()
        for t in g.pending_members.values():
            t.cancel()
        del self.groups[group_id]
        log.info("group %s deleted", group_id)
        return 0

    def expire_offsets(self) -> int:
        """offsets.retention.minutes: drop the offsets of groups that have been empty
        for longer than the retention (Kafka 2.1+, KIP-211), and the group itself once
        it has none.  Returns the number of offsets removed."""
        now = self._now()
        removed = 0
        for gid, g in list(self.groups.items()):
            if g.state != EMPTY or g.members:
                continue
            expired = {k: None for k, e in g.offsets.items()
                       if now - max(e.commit_timestamp, g.empty_since_ms) >= self.offsets_retention_ms}
            if expired:
                try:
                    self.store.write_offsets(gid, expired)
                except Exception as exc:
                    log.error("could not expire offsets of group %s: %s", gid, exc)
                    continue
                for k in expired:
                    del g.offsets[k]
                removed += len(expired)
                log.info("removed %d expired offset(s) of group %s", len(expired), gid)
            if not g.offsets and not g.pending_members and not g.pending_txn_offsets:
                try:
                    self._write_group_tombstones(g)
                except Exception:
                    continue
                g.transition(DEAD, now)
                del self.groups[gid]
        return removed

    # ------------------------------------------------------------------ persistence
    def _write_group_tombstones(self, g: ClassicGroup) -> None:
        if g.kind == "consumer":
            self.store.write_records(g.group_id, self.consumer.group_tombstones(g))
        else:
            self.store.write_group(g.group_id, None)

    def _persist_group(self, g: ClassicGroup) -> None:
        self.store.write_group(g.group_id, g.to_value(self._now()))

    def load_offset(self, group_id: str, topic: str, partition: int, value: OffsetValue | None,
                    record_offset: int = -1, producer_id: int | None = None) -> None:
        """Replay one offset record; ``producer_id``: it came in a transactional batch
        and waits for that producer's marker (:meth:`complete_txn`)."""
        g = self.groups.get(group_id)
        if producer_id is not None:
            if g is None:
                g = self.groups[group_id] = ClassicGroup(group_id, self._now())
            g.pending_txn_offsets.setdefault(producer_id, {})[(topic, partition)] = None if value is None else \
                OffsetEntry(value.offset, value.leader_epoch, value.metadata, value.commit_timestamp, record_offset)
            self._txn_groups.setdefault(producer_id, set()).add(group_id)
            return
        if value is None:
            if g is not None:
                g.offsets.pop((topic, partition), None)
            return
        if g is None:
            g = self.groups[group_id] = ClassicGroup(group_id, self._now())
        g.offsets[(topic, partition)] = OffsetEntry(value.offset, value.leader_epoch, value.metadata,
                                                    value.commit_timestamp, record_offset)

    def load_group(self, group_id: str, value: GroupValue | None) -> None:
        """Replay of a GroupMetadata record: generation, protocol and (for static
        members) the member ids survive a restart.  The loaded members get a session
        timeout to come back; those that do not are removed (Kafka does the same)."""
        g = self.groups.get(group_id)
        if g is not None and g.kind == "consumer":
            return  # a classic record left from before the group moved to the consumer protocol
        if value is None:
            if g is not None:
                g.members.clear()
                g.static_members.clear()
                if not g.offsets:
                    del self.groups[group_id]
            return
        if g is None:
            g = self.groups[group_id] = ClassicGroup(group_id, self._now())
        g.generation_id = value.generation
        g.protocol_type = value.protocol_type or None
        g.protocol_name = value.protocol
        g.leader_id = value.leader
        g.members = {}
        g.static_members = {}
        for mv in value.members:
            m = Member(mv.member_id, mv.group_instance_id, mv.client_id, mv.client_host,
                       mv.rebalance_timeout if mv.rebalance_timeout >= 0 else mv.session_timeout,
                       mv.session_timeout, value.protocol_type,
                       [(value.protocol, mv.subscription)] if value.protocol else [], mv.assignment)
            g.members[m.member_id] = m
            if m.group_instance_id is not None:
                g.static_members[m.group_instance_id] = m.member_id
        if g.members:
            g.transition(STABLE, self._now())
        else:
            g.leader_id = None
            g.transition(EMPTY, value.current_state_timestamp if value.current_state_timestamp > 0 else self._now())

    def start_loaded_timers(self) -> None:
        """After the replay (Kafka's onLoaded): every loaded member gets a session
        timeout to come back, and a group with more members than ``group.max.size`` (the
        limit was lowered since) starts a rebalance, so that its members can commit and
        rejoin; the members beyond the limit are refused (GROUP_MAX_SIZE_REACHED) when
        they rejoin, or removed when they do not rejoin in time."""
        self.consumer.start_loaded_timers()
        for g in self.groups.values():
            if g.kind == "consumer":
                continue
            for m in g.members.values():
                self._schedule_heartbeat(g, m)
            if g.state == STABLE and len(g.members) > self.group_max_size:
                self._prepare_rebalance(
                    g, f"freshly-loaded group (size {len(g.members)}) is over capacity "
                       f"group.max.size={self.group_max_size}: rebalancing to give the consumers a "
                       f"chance to commit offsets")

    def shutdown(self) -> None:
        if self.share is not None:
            self.share.shutdown()
        for g in self.groups.values():
            if g.kind == "consumer":
                for m in g.members.values():
                    self.consumer._cancel_timers(m)
                continue
            if g.sync_timer is not None:
                g.sync_timer.cancel()
            if g.join_timer is not None:
                g.join_timer.cancel()
            for t in g.pending_members.values():
                t.cancel()
            for m in g.members.values():
                if m.heartbeat is not None:
                    m.heartbeat.cancel()
                self._complete(m.join_futures, JoinResult(E.COORDINATOR_NOT_AVAILABLE, member_id=m.member_id))
                self._complete(m.sync_futures, SyncResult(E.COORDINATOR_NOT_AVAILABLE))
