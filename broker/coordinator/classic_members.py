"""Members of the classic protocol inside consumer groups, and the online migration of a
group between the two protocols (KIP-848's upgrade and downgrade path), as Kafka 4's
GroupMetadataManager does it (classicGroupJoinToConsumerGroup and its Sync, Heartbeat
and Leave siblings, ConsumerGroup.fromClassicGroup, ClassicGroup.fromConsumerGroup).
Logic only, like the rest of broker.coordinator: the GroupCoordinator's clock, timers
and record store; the consumer-group state and reconciliation of
broker.coordinator.consumer_group.

* Upgrade: the first ConsumerGroupHeartbeat into a classic group that has members turns
  it into a consumer group, when ``group.consumer.migration.policy`` allows it
  (``upgrade`` or ``bidirectional``, Kafka 4's default) and the group's protocol type is
  ``consumer``; otherwise the heartbeat gets GROUP_ID_NOT_FOUND saying why. Each
  classic member becomes a member of the consumer group at the group's generation,
  with the subscription it sent and the partitions its leader gave it as its current
  and target assignment; JoinGroup and SyncGroup requests parked in the classic
  rebalance are answered REBALANCE_IN_PROGRESS.
* Classic members of a consumer group keep speaking JoinGroup/SyncGroup/Heartbeat/
  LeaveGroup; the server assignor decides for them. JoinGroup decodes the member's
  subscription (its first protocol's metadata), updates the group as a heartbeat would
  and reconciles the member at once: partitions it still owns but must give up are held
  back until it rejoins without them, partitions another member still owns are handed
  over when released. The answer names no leader and lists no members (the client acts
  as a follower); its generation is the member epoch. SyncGroup gives the member its
  current assignment in the consumer protocol at the version the member speaks.
  Heartbeat answers REBALANCE_IN_PROGRESS when the group epoch has passed the member's,
  when it must revoke partitions, or when partitions it waits for have been released.
  Timers: session (the member's classic session timeout), join (its rebalance timeout,
  once told to rejoin) and sync (its rebalance timeout, after a JoinGroup answer); one
  that fires fences the member.
* Downgrade: when the last member of the consumer protocol leaves or is fenced and
  members remain, all of them classic, and the policy allows it (``downgrade`` or
  ``bidirectional``), the group becomes a classic group at generation = group epoch,
  each member holding its target assignment, and a rebalance starts at once.

Committed offsets go with the group either way. The records written are Kafka's: the
old group's tombstones, then the new group's records.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass

from protocol.errors import ErrorCode as E

from broker.coordinator import consumer_protocol as CP
from broker.coordinator.consumer_group import M_STABLE, M_UNRELEASED, M_UNREVOKED, ConsumerGroup, ConsumerMember
from broker.coordinator.group import (
    CONSUMER_PROTOCOL,
    STABLE,
    ClassicGroup,
    CoordinatorError,
    JoinResult,
    Member,
    SyncResult,
)

log = logging.getLogger("chronolog.coordinator")

# group.consumer.migration.policy (Kafka's ConsumerGroupMigrationPolicy)
POLICIES = ("disabled", "downgrade", "upgrade", "bidirectional")


@dataclass
class ClassicMetadata:
    """What a classic member of a consumer group joined with (Kafka's
    ClassicMemberMetadata in ConsumerGroupMemberMetadataValue)."""

    session_timeout_ms: int
    protocols: list  # [(name, metadata bytes)], the member's order

    @property
    def protocol_name(self) -> str:
        return self.protocols[0][0] if self.protocols else ""

    @property
    def subscription(self) -> bytes:
        return self.protocols[0][1] if self.protocols else b""


class ClassicMembers:
    """The classic-protocol side of a ConsumerGroups (``groups``)."""

    def __init__(self, groups, policy: str = "bidirectional"):
        self.groups = groups
        self.policy = str(policy).lower()

    @property
    def coord(self):
        return self.groups.coord

    # -- topic names and ids -------------------------------------------------------------
    def _ids(self, by_name: dict) -> dict:
        """{topic name: partitions} -> {topic id: partitions}, existing topics and
        partitions only."""
        out = {}
        for name, ps in by_name.items():
            md = self.groups.topic_metadata(name)
            if md is None:
                continue
            tid, count = md
            keep = {p for p in ps if 0 <= p < count}
            if keep:
                out[tid] = keep
        return out

    def _names(self, g: ConsumerGroup, by_id: dict) -> dict:
        names = {md[0]: name for name, md in g.subscription_metadata.items()}
        if any(t not in names for t in by_id):
            for name in self.groups.topic_names():
                md = self.groups.topic_metadata(name)
                if md is not None:
                    names.setdefault(md[0], name)
        return {names[t]: set(ps) for t, ps in by_id.items() if t in names and ps}

    # -- upgrade -------------------------------------------------------------------------
    def upgrade(self, old: ClassicGroup) -> ConsumerGroup:
        """A classic group with members -> a consumer group (or GROUP_ID_NOT_FOUND)."""
        gid = old.group_id

        def refuse(why: str, detail: str):
            log.info("cannot upgrade classic group %s to consumer group because %s (%s)", gid, why, detail)
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                                         f"because {why}.")

        if self.policy not in ("upgrade", "bidirectional"):
            refuse("online upgrade is disabled", f"group.consumer.migration.policy={self.policy}")
        if old.protocol_type != CONSUMER_PROTOCOL:
            refuse("the group does not use the consumer embedded protocol", f"protocol type {old.protocol_type}")
        if len(old.members) > self.groups.max_size:
            refuse("the group size exceeds the consumer group maximum size",
                   f"{len(old.members)} members, group.consumer.max.size={self.groups.max_size}")
        new = ConsumerGroup(gid, self.groups._now())
        new.adopt_offsets(old)
        new.group_epoch = new.assignment_epoch = old.generation_id
        for m in old.members.values():
            meta = m.metadata(old.protocol_name) if old.protocol_name else (m.protocols[0][1] if m.protocols else b"")
            try:
                topics, _, rack = CP.decode_subscription(meta)
                assigned = self._ids(CP.decode_assignment(m.assignment))
            except ValueError as exc:
                log.warning("cannot upgrade classic group %s: member %s: %s", gid, m.member_id, exc)
                raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer "
                                                             f"group because the embedded consumer protocol is "
                                                             f"malformed.") from None
            cm = ConsumerMember(member_id=m.member_id, instance_id=m.group_instance_id, rack_id=rack,
                                client_id=m.client_id, client_host=m.client_host,
                                subscribed_topic_names=sorted(set(topics)), rebalance_timeout_ms=m.rebalance_timeout_ms,
                                member_epoch=old.generation_id, previous_member_epoch=old.generation_id,
                                state=M_STABLE, assigned=assigned,
                                classic=ClassicMetadata(m.session_timeout_ms, list(m.protocols)))
            new.members[cm.member_id] = cm
            new.target[cm.member_id] = {t: set(ps) for t, ps in assigned.items()}
        self.coord.retire(old)
        self.coord.store.write_group(gid, None)
        self.coord.groups[gid] = new
        new.subscription_metadata = self.groups._subscription_metadata(new)
        gs = self.groups
        records = [gs._member_record(new, m) for m in new.members.values()]
        records.append(gs._epoch_record(new))
        records += gs._target_records(new, new.target)
        records += [gs._current_record(new, m) for m in new.members.values()]
        gs._write(gid, records)
        for m in new.members.values():
            gs._schedule(new, m)
        log.info("classic group %s upgraded to a consumer group at epoch %d with %d classic member(s)", gid,
                 new.group_epoch, len(new.members))
        return new

    # -- downgrade -----------------------------------------------------------------------
    def can_downgrade(self, g: ConsumerGroup, leaving: ConsumerMember) -> bool:
        """Kafka's validateOnlineDowngradeWithFencedMember."""
        others = [m for m in g.members.values() if m is not leaving]
        if leaving.classic is not None or not others or any(m.classic is None for m in others):
            return False
        if self.policy not in ("downgrade", "bidirectional"):
            log.info("consumer group %s is not downgraded to a classic group: the online downgrade is disabled "
                     "(group.consumer.migration.policy=%s)", g.group_id, self.policy)
            return False
        if len(others) > self.coord.group_max_size:
            log.info("consumer group %s is not downgraded to a classic group: its %d members exceed "
                     "group.max.size=%d", g.group_id, len(others), self.coord.group_max_size)
            return False
        return True

    def downgrade(self, g: ConsumerGroup, leaving: ConsumerMember) -> bool:
        """The consumer group without ``leaving`` -> a classic group, rebalancing. False
        (nothing changed) when its members share no protocol."""
        gs, coord, gid = self.groups, self.coord, g.group_id
        new = ClassicGroup(gid, gs._now())
        new.generation_id = g.group_epoch
        new.protocol_type = CONSUMER_PROTOCOL
        for m in g.members.values():
            if m is leaving:
                continue
            cm = Member(member_id=m.member_id, group_instance_id=m.instance_id, client_id=m.client_id,
                        client_host=m.client_host, rebalance_timeout_ms=m.rebalance_timeout_ms,
                        session_timeout_ms=m.classic.session_timeout_ms, protocol_type=CONSUMER_PROTOCOL,
                        protocols=list(m.classic.protocols))
            new.members[cm.member_id] = cm
            if cm.group_instance_id is not None:
                new.static_members[cm.group_instance_id] = cm.member_id
            if new.leader_id is None:
                new.leader_id = cm.member_id
        try:
            new.protocol_name = new.select_protocol()
        except CoordinatorError:
            log.info("consumer group %s is not downgraded to a classic group: its members share no protocol", gid)
            return False
        for cm in new.members.values():
            cm.assignment = CP.encode_assignment(CP.version_of(cm.metadata(new.protocol_name)),
                                                 self._names(g, g.target.get(cm.member_id, {})))
        for m in g.members.values():
            gs._cancel_timers(m)
        new.adopt_offsets(g)
        gs._write(gid, gs.group_tombstones(g))
        g.state = "Dead"
        new.transition(STABLE, gs._now())
        coord.groups[gid] = new
        coord._persist_group(new)
        for cm in new.members.values():
            coord._schedule_heartbeat(new, cm)
        log.info("consumer group %s downgraded to a classic group at generation %d: member %s of the consumer "
                 "protocol left", gid, new.generation_id, leaving.member_id)
        coord._prepare_rebalance(new, f"Downgrade group {gid} from consumer to classic.")
        return True

    # -- the classic requests ------------------------------------------------------------
    def _member(self, g: ConsumerGroup, member_id: str, instance_id) -> ConsumerMember:
        """Kafka's validateConsumerGroupMember and throwIfMemberDoesNotUseClassicProtocol."""
        if instance_id is None:
            m = g.members.get(member_id)
            if m is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group "
                                                            f"{g.group_id}.")
        else:
            m = g.static_member(instance_id)
            if m is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member with instance id {instance_id} is not a "
                                                            f"member of group {g.group_id}.")
            if m.member_id != member_id:
                raise CoordinatorError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                             f"{instance_id} is fenced by member {m.member_id}.")
        if m.classic is None:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {m.member_id} does not use the classic protocol.")
        return m

    def _supports(self, g: ConsumerGroup, member_id: str, protocol_type: str, protocols) -> bool:
        """Kafka's ConsumerGroup.supportsClassicProtocols: the consumer protocol type, and
        a protocol every other classic member supports."""
        if protocol_type != CONSUMER_PROTOCOL or not protocols:
            return False
        others = [m for mid, m in g.members.items() if m.classic is not None and mid != member_id]
        return not others or any(all(n in {p for p, _ in m.classic.protocols} for m in others) for n, _ in protocols)

    def join(self, g: ConsumerGroup, *, member_id: str, instance_id, protocol_type: str, protocols,
             session_timeout_ms: int, rebalance_timeout_ms: int, client_id: str, client_host: str,
             require_known_member_id: bool) -> JoinResult:
        try:
            return self._join(g, member_id, instance_id, protocol_type, protocols, session_timeout_ms,
                              rebalance_timeout_ms, client_id, client_host, require_known_member_id)
        except CoordinatorError as exc:
            log.info("JoinGroup of member %r to consumer group %s answered %s: %s", member_id, g.group_id,
                     E(exc.code).name, exc)
            return JoinResult(exc.code, member_id=member_id)

    def _join(self, g, member_id, instance_id, protocol_type, protocols, session_timeout_ms, rebalance_timeout_ms,
              client_id, client_host, require_known_member_id) -> JoinResult:
        gs, gid = self.groups, g.group_id
        unknown = not member_id
        if unknown:
            member_id = str(uuid.uuid4())
        if member_id not in g.members and len(g.members) >= gs.max_size:
            raise CoordinatorError(E.GROUP_MAX_SIZE_REACHED, f"The consumer group has reached its maximum "
                                                             f"capacity of {gs.max_size} members.")
        if not self._supports(g, member_id, protocol_type, protocols):
            raise CoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not "
                                                                  f"supported.")
        if unknown and require_known_member_id and instance_id is None:
            log.info("a classic member with no member id joins consumer group %s: asked to rejoin as %s", gid,
                     member_id)
            return JoinResult(E.MEMBER_ID_REQUIRED, member_id=member_id)
        try:
            topics, owned, rack = CP.decode_subscription(protocols[0][1])
        except ValueError as exc:
            raise CoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s subscription in protocol "
                                                                  f"{protocols[0][0]} is malformed: {exc}") from None
        records: list = []
        member = None
        if instance_id is None:
            member = g.members.get(member_id)
        else:
            existing = g.static_member(instance_id)
            if unknown:
                if existing is not None:
                    member = self._replace_static(g, existing, member_id, records)
            elif existing is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
            elif existing.member_id != member_id:
                raise CoordinatorError(E.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                                             f"{instance_id} is fenced by {existing.member_id}.")
            else:
                member = existing
        new_member = member is None
        if new_member:
            member = ConsumerMember(member_id=member_id, instance_id=instance_id)
            g.members[member_id] = member
            log.info("member %s joined consumer group %s with the classic protocol", member_id, gid)

        before = gs._described(member)
        if rack is not None:
            member.rack_id = rack
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.server_assignor = None
        member.subscribed_topic_names = sorted(set(topics))
        member.client_id, member.client_host = client_id, client_host
        member.classic = ClassicMetadata(session_timeout_ms, [(n, bytes(m or b"")) for n, m in protocols])
        gs._apply(g, member, new_member, before, records, self._ids(owned))
        gs._cancel_timers(member, "join_timer", "sync_timer")
        gs._schedule(g, member)
        member.sync_timer = self.coord.scheduler.call_later(
            member.rebalance_timeout_ms,
            lambda: self._expired(g, member_id, "sync_timer", "the member failed to sync within its rebalance "
                                                              "timeout"))
        return JoinResult(0, generation_id=member.member_epoch, protocol_type=CONSUMER_PROTOCOL,
                          protocol_name=member.classic.protocol_name, leader="", member_id=member_id, members=[])

    def _replace_static(self, g: ConsumerGroup, old: ConsumerMember, member_id: str, records: list):
        """A static member rejoining under a new member id takes over its instance's
        member (Kafka's replaceMember): same subscription and assignment, epoch 0."""
        gs = self.groups
        gs._cancel_timers(old)
        new = ConsumerMember(member_id=member_id, instance_id=old.instance_id, rack_id=old.rack_id,
                             client_id=old.client_id, client_host=old.client_host,
                             subscribed_topic_names=list(old.subscribed_topic_names),
                             subscribed_topic_regex=old.subscribed_topic_regex, server_assignor=old.server_assignor,
                             rebalance_timeout_ms=old.rebalance_timeout_ms, member_epoch=0, previous_member_epoch=0,
                             state=old.state, assigned=old.assigned, pending_revocation=old.pending_revocation,
                             classic=old.classic)
        del g.members[old.member_id]
        g.members[member_id] = new
        target = g.target.pop(old.member_id, None)
        records += gs._member_tombstones(g, old.member_id)
        records.append(gs._member_record(g, new))
        if target is not None:
            g.target[member_id] = target
            records += gs._target_records(g, {member_id: target}, metadata=False)
        records.append(gs._current_record(g, new))
        log.info("static member %s of consumer group %s rejoined with the classic protocol as %s (was %s)",
                 old.instance_id, g.group_id, member_id, old.member_id)
        return new

    def _must_rejoin(self, g: ConsumerGroup, m: ConsumerMember) -> bool:
        return (m.member_epoch < g.group_epoch or m.state == M_UNREVOKED
                or (m.state == M_UNRELEASED and not self._waiting_on_unreleased(g, m)))

    def _waiting_on_unreleased(self, g: ConsumerGroup, m: ConsumerMember) -> bool:
        owned = self.groups._owners(g, m.member_id)
        for tid, ps in g.target.get(m.member_id, {}).items():
            have = m.assigned.get(tid, set())
            if any(p not in have and (tid, p) in owned for p in ps):
                return True
        return False

    def sync(self, g: ConsumerGroup, *, member_id: str, instance_id, generation_id: int, protocol_type,
             protocol_name) -> SyncResult:
        try:
            m = self._member(g, member_id, instance_id)
            if generation_id != m.member_epoch:
                raise CoordinatorError(E.ILLEGAL_GENERATION, f"The request generation id {generation_id} is not "
                                                             f"equal to the member epoch {m.member_epoch}.")
            if protocol_type is not None and protocol_type != CONSUMER_PROTOCOL:
                raise CoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"Protocol type {protocol_type} is not "
                                                                      f"{CONSUMER_PROTOCOL}.")
            if protocol_name is not None and protocol_name != m.classic.protocol_name:
                raise CoordinatorError(E.INCONSISTENT_GROUP_PROTOCOL, f"Protocol name {protocol_name} is not the "
                                                                      f"one of the join response, "
                                                                      f"{m.classic.protocol_name}.")
            if g.group_epoch > m.member_epoch and m.state != M_UNREVOKED:
                self._schedule_join(g, m)
                raise CoordinatorError(E.REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group "
                                                                f"{g.group_id}: member {member_id} rejoins.")
        except CoordinatorError as exc:
            log.debug("SyncGroup of member %r of consumer group %s: %s", member_id, g.group_id, exc)
            return SyncResult(exc.code)
        self.groups._cancel_timers(m, "sync_timer")
        self.groups._schedule(g, m)
        assignment = CP.encode_assignment(CP.version_of(m.classic.subscription), self._names(g, m.assigned))
        return SyncResult(0, protocol_type, protocol_name, assignment)

    def heartbeat(self, g: ConsumerGroup, *, member_id: str, instance_id, generation_id: int) -> int:
        try:
            m = self._member(g, member_id, instance_id)
            if generation_id != m.member_epoch:
                raise CoordinatorError(E.ILLEGAL_GENERATION)
        except CoordinatorError as exc:
            return exc.code
        self.groups._schedule(g, m)
        if self._must_rejoin(g, m):
            self._schedule_join(g, m)
            return int(E.REBALANCE_IN_PROGRESS)
        return 0

    def leave(self, g: ConsumerGroup, members: list) -> tuple[int, list]:
        """Kafka's classicGroupLeaveToConsumerGroup: only classic members can leave this
        way; the group epoch is bumped once for all of them."""
        results, left = [], 0
        for mid, iid, *why in members:
            try:
                if iid is None:
                    m = g.members.get(mid)
                    if m is None or m.classic is None:
                        raise CoordinatorError(E.UNKNOWN_MEMBER_ID)
                else:
                    m = g.static_member(iid)
                    if m is None:
                        raise CoordinatorError(E.UNKNOWN_MEMBER_ID)
                    if mid and mid != m.member_id:
                        raise CoordinatorError(E.FENCED_INSTANCE_ID)
                    if m.classic is None:
                        raise CoordinatorError(E.UNKNOWN_MEMBER_ID)
                    mid = m.member_id
            except CoordinatorError as exc:
                results.append((mid, iid, exc.code))
                continue
            log.info("member %s (instance %s) left consumer group %s with LeaveGroup%s", mid, iid, g.group_id,
                     f"; client reason: {why[0]}" if why and why[0] else "")
            self.groups._remove(g, m, write=True, bump=False)
            results.append((mid, iid, 0))
            left += 1
        if left:
            g.subscription_metadata = self.groups._subscription_metadata(g)
            self.groups._write(g.group_id, [self.groups._bump_epoch(g)])
        return 0, results

    # -- timers --------------------------------------------------------------------------
    def _schedule_join(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        if m.join_timer is None:
            mid = m.member_id
            m.join_timer = self.coord.scheduler.call_later(
                m.rebalance_timeout_ms,
                lambda: self._expired(g, mid, "join_timer", "the classic member failed to rejoin within its "
                                                            "rebalance timeout"))

    def _expired(self, g: ConsumerGroup, member_id: str, which: str, why: str) -> None:
        m = self.groups._alive(g, member_id)
        if m is None:
            return
        setattr(m, which, None)
        log.info("member %s of consumer group %s is fenced: %s", member_id, g.group_id, why)
        self.groups._fence(g, m)
