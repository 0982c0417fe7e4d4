"""Share groups (KIP-932): membership and the broker's assignment of partitions to
members, as Kafka's GroupMetadataManager does it for ShareGroupHeartbeat. Logic only:
timers come from the GroupCoordinator's scheduler, time from its clock; the delivery
state of the partitions is broker.share.partitions'.

* A member joins with epoch 0 and the topics it subscribes to (it names itself: v1
  members send a UUID); it leaves with -1. Any change of the members, of their
  subscriptions or of the subscribed topics' partitions bumps the group epoch and the
  assignment is computed again (Kafka's ``simple`` assignor: every partition of the
  subscribed topics goes to a member subscribed to its topic, spread evenly; with more
  members than partitions a partition is shared by several). There is no revocation
  phase: records are locked one by one, so a member takes its new assignment at once and
  its epoch becomes the group's.
* An epoch other than the member's is FENCED_MEMBER_EPOCH, an unknown member
  UNKNOWN_MEMBER_ID; a member that does not heartbeat within
  ``share.session.timeout.ms`` is removed, and its acquired records released.
* Share groups live in the same namespace as classic and consumer groups: a share
  heartbeat for another kind of group is GROUP_ID_NOT_FOUND ("Group x is not a share
  group."), and other kinds' requests for a share group are refused there.
* Membership is not written to disk (members rejoin with epoch 0 after a restart, as
  they do after FENCED/UNKNOWN); a group whose share-partitions have state in
  ``__share_group_state`` exists, empty, after a restart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from protocol.errors import ErrorCode as E

from broker.coordinator.group import DEAD, EMPTY, CoordinatorError

log = logging.getLogger("chronolog.share")

STABLE = "Stable"
LEAVE_EPOCH = -1
PROTOCOL_TYPE = "share"


@dataclass
class ShareMember:
    member_id: str
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list = field(default_factory=list)
    member_epoch: int = 0
    assigned: dict = field(default_factory=dict)  # topic id -> set(partitions)
    session_timer: object = None


class ShareGroup:
    kind = "share"
    protocol_type = PROTOCOL_TYPE

    def __init__(self, group_id: str):
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ShareMember] = {}
        self.subscription_metadata: dict[str, tuple] = {}  # topic -> (topic id, partitions)
        self.dead = False

    @property
    def state(self) -> str:
        if self.dead:
            return DEAD
        return STABLE if self.members else EMPTY

    def subscribed_topics(self) -> set:
        return {t for m in self.members.values() for t in m.subscribed_topic_names}


def simple_assign(members: dict, topics: dict) -> dict:
    """Kafka's share ``simple`` assignor (homogeneous case generalised): per topic, its
    partitions spread over the members subscribed to it; each member gets at least one
    partition while there are partitions, so with more members than partitions a
    partition goes to several. ``members``: {member id: set(topic names)},
    ``topics``: {name: (topic id, partitions)}. Returns {member id: {topic id: set}}."""
    out: dict = {mid: {} for mid in members}
    for name, (tid, n) in sorted(topics.items()):
        subs = sorted(mid for mid, names in members.items() if name in names)
        if not subs or n <= 0:
            continue
        if len(subs) <= n:
            for p in range(n):
                out[subs[p % len(subs)]].setdefault(tid, set()).add(p)
        else:
            for i, mid in enumerate(subs):
                out[mid].setdefault(tid, set()).add(i % n)
    return {mid: a for mid, a in out.items()}


class ShareGroups:
    """The share-group side of a GroupCoordinator (``coord``)."""

    def __init__(self, coord, *, topic_metadata, group_config, max_size: int = 200,
                 on_assigned=None, on_member_gone=None, on_deleted=None):
        self.coord = coord
        self.groups: dict[str, ShareGroup] = {}
        self.topic_metadata = topic_metadata  # topic name -> (topic id, partitions) or None
        self.group_config = group_config      # group id -> effective GROUP configs
        self.max_size = max_size
        # callbacks of the share-partition manager: partitions newly assigned in a group
        # (their state is initialized), and a member gone (left on its own or timed out)
        self.on_assigned = on_assigned or (lambda group_id, tps: None)
        self.on_member_gone = on_member_gone or (lambda group_id, member_id, left: None)
        self.on_deleted = on_deleted or (lambda group_id: None)

    def group(self, group_id: str) -> ShareGroup | None:
        return self.groups.get(group_id)

    def ensure_group(self, group_id: str) -> ShareGroup:
        """The group, made empty if missing (a restart found its share state)."""
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = ShareGroup(group_id)
        return g

    # -- ShareGroupHeartbeat -----------------------------------------------------------
    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, rack_id, subscribed_topic_names,
                  client_id: str, client_host: str):
        """(error code, message, member id, member epoch, heartbeat interval, assignment
        {topic id: set} or None)."""
        try:
            return self._heartbeat(group_id, member_id, member_epoch, rack_id, subscribed_topic_names, client_id,
                                   client_host)
        except CoordinatorError as exc:
            log.info("ShareGroupHeartbeat of member %r (epoch %d) of group %r answered %s: %s", member_id,
                     member_epoch, group_id, E(exc.code).name, exc)
            return int(exc.code), str(exc), None, 0, 0, None

    def _config(self, group_id: str, name: str) -> int:
        return int(self.group_config(group_id)[name])

    def _heartbeat(self, group_id, member_id, member_epoch, rack_id, names, client_id, client_host):
        def invalid(msg):
            raise CoordinatorError(E.INVALID_REQUEST, msg)

        if not group_id or not group_id.strip():
            invalid("GroupId can't be empty.")
        if not member_id or not member_id.strip():
            invalid("MemberId can't be empty.")
        if rack_id is not None and not rack_id.strip():
            invalid("RackId can't be empty.")
        if member_epoch == 0:
            if not names:
                invalid("SubscribedTopicNames must be set in first request.")
        elif member_epoch < LEAVE_EPOCH:
            invalid(f"MemberEpoch is {member_epoch}, but must be greater than or equal to -1.")
        other = self.coord.group(group_id)
        if other is not None:
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a share group.")
        g = self.groups.get(group_id)
        if member_epoch == LEAVE_EPOCH:
            m = g.members.get(member_id) if g is not None else None
            if m is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            self._remove(g, m, "left the group", left=True)
            return 0, None, member_id, LEAVE_EPOCH, 0, None
        interval = self._config(group_id, "share.heartbeat.interval.ms")
        if member_epoch == 0:
            if g is None:
                g = self.ensure_group(group_id)
            m = g.members.get(member_id)
            if m is None:
                if len(g.members) >= self.max_size:
                    raise CoordinatorError(E.GROUP_MAX_SIZE_REACHED,
                                           f"The share group has reached its maximum capacity {self.max_size} "
                                           f"members.")
                m = g.members[member_id] = ShareMember(member_id)
                log.info("member %s (client %s) joined share group %s", member_id, client_id, group_id)
                g.group_epoch += 1
        else:
            m = g.members.get(member_id) if g is not None else None
            if m is None:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            if member_epoch != m.member_epoch:
                raise CoordinatorError(E.FENCED_MEMBER_EPOCH,
                                       f"The share group member has a different epoch ({member_epoch}) than the "
                                       f"one known by the coordinator ({m.member_epoch}).")
        m.client_id, m.client_host = client_id, client_host
        if rack_id is not None:
            m.rack_id = rack_id
        if names is not None and sorted(names) != sorted(m.subscribed_topic_names):
            m.subscribed_topic_names = sorted(set(names))
            g.group_epoch += 1
        metadata = self._subscription_metadata(g)
        if metadata != g.subscription_metadata:
            g.subscription_metadata = metadata
            g.group_epoch += 1
        if g.assignment_epoch < g.group_epoch:
            self._assign(g)
        self._schedule(g, m)
        send = m.member_epoch != g.assignment_epoch or names is not None
        m.member_epoch = g.assignment_epoch
        return 0, None, m.member_id, m.member_epoch, interval, dict(m.assigned) if send else None

    def _subscription_metadata(self, g: ShareGroup) -> dict:
        out = {}
        for topic in sorted(g.subscribed_topics()):
            md = self.topic_metadata(topic)
            if md is not None:
                out[topic] = md
        return out

    def _assign(self, g: ShareGroup) -> None:
        target = simple_assign({mid: set(m.subscribed_topic_names) for mid, m in g.members.items()},
                               g.subscription_metadata)
        new_tps = set()
        for mid, m in g.members.items():
            m.assigned = target.get(mid, {})
            for tid, ps in m.assigned.items():
                new_tps.update((tid, p) for p in ps)
        g.assignment_epoch = g.group_epoch
        log.info("share group %s: epoch %d, %d member(s), %d partition(s) assigned", g.group_id, g.group_epoch,
                 len(g.members), len(new_tps))
        if new_tps:
            self.on_assigned(g.group_id, sorted(new_tps, key=lambda e: (str(e[0]), e[1])))

    def _schedule(self, g: ShareGroup, m: ShareMember) -> None:
        if m.session_timer is not None:
            m.session_timer.cancel()
        timeout = self._config(g.group_id, "share.session.timeout.ms")
        m.session_timer = self.coord.scheduler.call_later(timeout, lambda: self._expired(g, m.member_id, timeout))

    def _expired(self, g: ShareGroup, member_id: str, timeout: int) -> None:
        m = g.members.get(member_id)
        if m is None or self.groups.get(g.group_id) is not g:
            return
        self._remove(g, m, f"has failed (no heartbeat within {timeout} ms)")

    def _remove(self, g: ShareGroup, m: ShareMember, why: str, left: bool = False) -> None:
        if m.session_timer is not None:
            m.session_timer.cancel()
            m.session_timer = None
        g.members.pop(m.member_id, None)
        g.group_epoch += 1
        log.info("member %s of share group %s %s; removed", m.member_id, g.group_id, why)
        if g.members:
            g.subscription_metadata = self._subscription_metadata(g)
            self._assign(g)
        else:
            g.assignment_epoch = g.group_epoch
        self.on_member_gone(g.group_id, m.member_id, left)

    # -- admin ---------------------------------------------------------------------------
    def delete_group(self, group_id: str) -> int:
        """DeleteGroups of a share group: only an empty one; its share state goes too."""
        g = self.groups.get(group_id)
        if g is None:
            return int(E.GROUP_ID_NOT_FOUND)
        if g.members:
            return int(E.NON_EMPTY_GROUP)
        try:
            self.on_deleted(group_id)
        except Exception as exc:
            log.error("could not delete the share state of group %s: %s", group_id, exc)
            return int(E.COORDINATOR_NOT_AVAILABLE)
        del self.groups[group_id]
        g.dead = True
        log.info("share group %s deleted", group_id)
        return 0

    def shutdown(self) -> None:
        for g in self.groups.values():
            for m in g.members.values():
                if m.session_timer is not None:
                    m.session_timer.cancel()
                    m.session_timer = None
