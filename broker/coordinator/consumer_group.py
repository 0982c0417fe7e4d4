"""The consumer group protocol of KIP-848: ConsumerGroupHeartbeat and ConsumerGroupDescribe
over groups whose assignment the broker computes, as Kafka's GroupMetadataManager,
ConsumerGroup and CurrentAssignmentBuilder do it. Logic only: the clock, timers and
record store are the GroupCoordinator's (broker.coordinator.group), which also keeps
the committed offsets of both kinds of group.

* A member joins with epoch 0 and its subscription; any change of the group's
  subscriptions, of its members or of the subscribed topics' partitions bumps the group
  epoch; the next heartbeat then computes a new target assignment with the server
  assignor (``uniform``: balanced and sticky; ``range``: per topic ranges;
  ``group.consumer.assignors``, first one the default) and the assignment epoch catches
  up with the group epoch.
* Each member moves to its target on its own heartbeats (Kafka's
  CurrentAssignmentBuilder): partitions it must give up are revoked first (state
  UNREVOKED_PARTITIONS, its epoch unchanged) until it heartbeats without them; a
  partition still owned by another member is held back (UNRELEASED_PARTITIONS) until
  released; then the member gets the target epoch.
* Fencing: an epoch above the member's, or below it other than its previous epoch with
  owned partitions it still holds, is FENCED_MEMBER_EPOCH; an unknown member id
  UNKNOWN_MEMBER_ID. A member that does not heartbeat within the session timeout, or
  does not revoke within its rebalance timeout, is removed.
* Static members (instance id) leave with epoch -2 and keep their assignment for the
  session timeout; a new member id with the same instance id takes it over.
* Every change is written to ``__consumer_offsets`` as Kafka's records
  (broker.coordinator.consumer_records) before the answer and replayed at start.
* Offsets: OffsetCommit v9+ with the member's id and current epoch (else
  STALE_MEMBER_EPOCH / UNKNOWN_MEMBER_ID; older versions UNSUPPORTED_VERSION for a
  member of this protocol), OffsetFetch v9 checks the epoch it is given; admin clients
  (epoch -1) commit only while the group is empty.

Regular-expression subscriptions (SubscribedTopicRegex, v1): the topics whose whole
name matches (RE2, as Kafka's RE2/J: broker.coordinator.regex), internal topics
excluded. A regex new to the group is resolved asynchronously, as Kafka does (literal
topics are assigned first, the matched ones after the resolution bumps the group epoch);
a topic created later that matches joins the subscription at the next heartbeat. What a
regex matches is kept until the topics change (ConsumerGroups._matching), not matched
again at each heartbeat. An empty regex clears it; one that does not compile is
INVALID_REGULAR_EXPRESSION.

Members of the classic protocol inside a consumer group, and the online upgrade and
downgrade between the two kinds of group, are broker.coordinator.classic_members'.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass, field

from protocol import messages as M
from protocol.errors import ErrorCode as E

from broker.coordinator import consumer_records as CR
from broker.coordinator.group import DEAD, EMPTY, ClassicGroup, CoordinatorError
from broker.coordinator.regex import ClientRegexError, compile_client_regex

log = logging.getLogger("chronolog.coordinator")

ASSIGNING, RECONCILING, STABLE_STATE = "Assigning", "Reconciling", "Stable"
# MemberState
M_STABLE, M_UNREVOKED, M_UNRELEASED, M_UNKNOWN = 0, 1, 2, 127
LEAVE_EPOCH, STATIC_LEAVE_EPOCH = -1, -2

def assignor_names(configured) -> list[str]:
    """``group.consumer.assignors`` -> assignor names, Kafka's class names mapped through
    the table the config validates against (config.broker_config.CONSUMER_ASSIGNORS)."""
    from config.broker_config import CONSUMER_ASSIGNORS

    out = []
    for item in configured:
        name = CONSUMER_ASSIGNORS.get(item.strip())
        if name is None:
            raise ValueError(f"group.consumer.assignors: unknown assignor {item!r} (uniform, range, or Kafka's "
                             "UniformAssignor / RangeAssignor class names)")
        if name not in out:
            out.append(name)
    if not out:
        raise ValueError("group.consumer.assignors: at least one assignor is needed")
    return out


@dataclass
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    subscribed_topic_names: list = field(default_factory=list)
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    rebalance_timeout_ms: int = -1
    member_epoch: int = 0
    previous_member_epoch: int = -1
    state: int = M_STABLE
    assigned: dict = field(default_factory=dict)            # topic id -> set(partitions)
    pending_revocation: dict = field(default_factory=dict)  # topic id -> set(partitions)
    session_timer: object = None
    rebalance_timer: object = None
    # a member of the classic protocol (JoinGroup/SyncGroup/Heartbeat) inside this group:
    # broker.coordinator.classic_members.ClassicMetadata, else None
    classic: object = None
    join_timer: object = None
    sync_timer: object = None


class ConsumerGroup(ClassicGroup):
    """A group of the consumer protocol. It is a ClassicGroup for everything the two
    kinds share (committed offsets, transactional offsets, expiration)."""

    kind = "consumer"

    def __init__(self, group_id: str, now_ms: int):
        self._dead = False
        super().__init__(group_id, now_ms)
        self.protocol_type = "consumer"
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, dict] = {}              # member id -> {topic id: set}
        self.subscription_metadata: dict[str, tuple] = {}  # topic -> (topic id, partitions)
        self.resolved_regexes: set[str] = set()   # regex subscriptions resolved for this group
        self.resolving_regexes: set[str] = set()
        # (topics version, distinct subscriptions, subscription metadata) last made
        # (ConsumerGroups._subscription_metadata)
        self.metadata_made: tuple | None = None

    @property
    def state(self) -> str:
        if self._dead:
            return DEAD
        if not self.members:
            return EMPTY
        if self.assignment_epoch < self.group_epoch:
            return ASSIGNING
        for m in self.members.values():
            if m.member_epoch != self.assignment_epoch or m.state != M_STABLE:
                return RECONCILING
        return STABLE_STATE

    @state.setter
    def state(self, value: str) -> None:
        self._dead = value == DEAD

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for m in self.members.values():
            if m.instance_id == instance_id:
                return m
        return None

    def preferred_assignor(self, default: str) -> str:
        counts: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        return max(sorted(counts), key=lambda n: counts[n]) if counts else default


# ----------------------------------------------------------------------------- assignors
def _uniform(members: dict, topics: dict, current: dict) -> dict:
    """Balanced and sticky: every member subscribed to a partition's topic may take it;
    partitions stay with their current target owner while it has fewer than its share,
    the rest go to the eligible member with the fewest partitions."""
    out = {mid: {} for mid in members}
    partitions = []
    eligible = {}
    for name, (tid, n) in sorted(topics.items()):
        subscribers = [mid for mid in sorted(members) if name in members[mid]]
        for p in range(n):
            partitions.append((tid, p))
            eligible[(tid, p)] = subscribers
    counts = {mid: 0 for mid in members}
    total = len([tp for tp in partitions if eligible[tp]])
    n = max(1, len(members))
    share = -(-total // n)  # ceil: no member keeps more than this
    free = []
    for tp in partitions:
        owner = next((mid for mid in eligible[tp] if tp[1] in current.get(mid, {}).get(tp[0], ())), None)
        if owner is not None and counts[owner] < share:
            out[owner].setdefault(tp[0], set()).add(tp[1])
            counts[owner] += 1
        elif eligible[tp]:
            free.append(tp)
    for tp in free:
        mid = min(eligible[tp], key=lambda m: (counts[m], m))
        out[mid].setdefault(tp[0], set()).add(tp[1])
        counts[mid] += 1
    # even out what stickiness left unbalanced (a member over the floor share gives to one
    # two below it), moving as few partitions as possible
    changed = True
    while changed:
        changed = False
        for mid in sorted(members, key=lambda m: -counts[m]):
            for tid in sorted(out[mid], key=str):
                for p in sorted(out[mid][tid]):
                    cands = [m for m in eligible[(tid, p)] if counts[m] + 1 < counts[mid]]
                    if cands:
                        to = min(cands, key=lambda m: (counts[m], m))
                        out[mid][tid].discard(p)
                        out[to].setdefault(tid, set()).add(p)
                        counts[mid] -= 1
                        counts[to] += 1
                        changed = True
                        break
                if changed:
                    break
            if changed:
                break
    return {mid: {t: ps for t, ps in a.items() if ps} for mid, a in out.items()}


def _range(members: dict, topics: dict, current: dict) -> dict:
    """Per topic, its subscribers in member-id order get consecutive ranges, the first
    ``partitions % subscribers`` one more (Kafka's RangeAssignor)."""
    out = {mid: {} for mid in members}
    for name, (tid, n) in sorted(topics.items()):
        subs = sorted(mid for mid in members if name in members[mid])
        if not subs:
            continue
        per, extra = divmod(n, len(subs))
        start = 0
        for i, mid in enumerate(subs):
            count = per + (1 if i < extra else 0)
            if count:
                out[mid][tid] = set(range(start, start + count))
            start += count
    return out


ASSIGNORS = {"uniform": _uniform, "range": _range}
# regexes whose matched topics are kept (ConsumerGroups._matching), and the names kept
# over all of them; past either they start again
_MATCHED_MAX = 1000
_MATCHED_NAMES_MAX = 1_000_000


# ----------------------------------------------------------------------------- the protocol
class ConsumerGroups:
    """The KIP-848 side of a GroupCoordinator (``coord``)."""

    def __init__(self, coord, *, topic_metadata, topic_names=None, topics_version=None,
                 assignors=("uniform", "range"), session_timeout_ms: int = 45000, heartbeat_interval_ms: int = 5000,
                 max_size: int = 2**31 - 1, group_config=None, migration_policy: str = "bidirectional"):
        self.coord = coord
        # the topic names regex subscriptions are matched against (internal ones left out)
        self.topic_names = topic_names or (lambda: [])
        # a number that changes whenever the topics do (LogManager.topics_version), or None:
        # what a regex matched is kept until it changes (_matching), instead of being
        # matched against every topic at every heartbeat of every member
        self.topics_version = topics_version
        self._matched: dict[str, tuple[int, frozenset]] = {}
        self._matched_names = 0
        # topic name -> (topic id, partitions) or None; topic id -> name via topic_names
        self.topic_metadata = topic_metadata
        self.assignors = list(assignors)
        self.session_timeout_ms = session_timeout_ms
        self.heartbeat_interval_ms = heartbeat_interval_ms
        self.max_size = max_size
        # group id -> {"consumer.session.timeout.ms": .., "consumer.heartbeat.interval.ms": ..}
        self.group_config = group_config or (lambda group_id: {})
        # classic members inside consumer groups, and the migration between the kinds
        from broker.coordinator.classic_members import ClassicMembers

        self.classic = ClassicMembers(self, migration_policy)

    # -- helpers ---------------------------------------------------------------------------
    def _now(self) -> int:
        return self.coord._now()

    def _session_timeout(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("consumer.session.timeout.ms", self.session_timeout_ms))

    def _heartbeat_interval(self, group_id: str) -> int:
        return int(self.group_config(group_id).get("consumer.heartbeat.interval.ms", self.heartbeat_interval_ms))

    def _write(self, group_id: str, pairs: list) -> None:
        if pairs:
            self.coord.store.write_records(group_id, pairs)

    @staticmethod
    def _member_record(g, m: ConsumerMember):
        V = M.ConsumerGroupMemberMetadataValue
        classic = None
        if m.classic is not None:
            classic = V.ClassicMemberMetadata(session_timeout_ms=m.classic.session_timeout_ms, supported_protocols=[
                V.ClassicProtocol(name=n, metadata=meta) for n, meta in m.classic.protocols])
        return (CR.key(CR.MEMBER_METADATA, g.group_id, m.member_id), CR.value(0, V(
            instance_id=m.instance_id, rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names), subscribed_topic_regex=m.subscribed_topic_regex,
            rebalance_timeout_ms=m.rebalance_timeout_ms, server_assignor=m.server_assignor,
            classic_member_metadata=classic)))

    @staticmethod
    def _current_record(g, m: ConsumerMember):
        V = M.ConsumerGroupCurrentMemberAssignmentValue
        return (CR.key(CR.CURRENT_ASSIGNMENT, g.group_id, m.member_id), CR.value(0, V(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_member_epoch, state=m.state,
            assigned_partitions=CR.topic_partitions(V.TopicPartitions, m.assigned),
            partitions_pending_revocation=CR.topic_partitions(V.TopicPartitions, m.pending_revocation))))

    @staticmethod
    def _epoch_record(g):
        return (CR.key(CR.GROUP_METADATA, g.group_id),
                CR.value(0, M.ConsumerGroupMetadataValue(epoch=g.group_epoch)))

    @staticmethod
    def _target_records(g, targets: dict, metadata: bool = True) -> list:
        """Target assignment records of ``targets`` ({member id: {topic id: set}}), and
        the assignment epoch's."""
        V = M.ConsumerGroupTargetAssignmentMemberValue
        records = [(CR.key(CR.TARGET_MEMBER, g.group_id, mid),
                    CR.value(0, V(topic_partitions=CR.topic_partitions(V.TopicPartition, assignment))))
                   for mid, assignment in targets.items()]
        if metadata:
            records.append((CR.key(CR.TARGET_METADATA, g.group_id), CR.value(
                0, M.ConsumerGroupTargetAssignmentMetadataValue(assignment_epoch=g.assignment_epoch))))
        return records

    @staticmethod
    def _member_tombstones(g, member_id: str) -> list:
        return [(CR.key(CR.CURRENT_ASSIGNMENT, g.group_id, member_id), None),
                (CR.key(CR.TARGET_MEMBER, g.group_id, member_id), None),
                (CR.key(CR.MEMBER_METADATA, g.group_id, member_id), None)]

    def group_tombstones(self, g: ConsumerGroup) -> list:
        out = []
        for mid in g.members:
            out += [(CR.key(CR.CURRENT_ASSIGNMENT, g.group_id, mid), None)]
        for mid in g.target:
            out += [(CR.key(CR.TARGET_MEMBER, g.group_id, mid), None)]
        out.append((CR.key(CR.TARGET_METADATA, g.group_id), None))
        for mid in g.members:
            out += [(CR.key(CR.MEMBER_METADATA, g.group_id, mid), None)]
        out.append((CR.key(CR.GROUP_METADATA, g.group_id), None))
        return out

    def subscribed(self, m: ConsumerMember, g: ConsumerGroup | None = None) -> set:
        """The member's topics: its names and the topics its regex matches. As in Kafka, a
        regex new to the group is resolved asynchronously: until then it matches
        nothing, and its resolution bumps the group epoch (so literal topics are
        assigned at once, the matched ones a heartbeat later). A resolved regex's topics
        are those it matches now (:meth:`_matching`), so topics created later join the
        subscription at the next heartbeat."""
        topics = set(m.subscribed_topic_names)
        regex = m.subscribed_topic_regex
        if regex:
            if g is not None and regex not in g.resolved_regexes:
                self._resolve_later(g, regex)
                return topics
            try:
                topics.update(self._matching(regex))
            except ClientRegexError:
                return topics
        return topics

    def _matching(self, regex: str) -> frozenset:
        """The topics ``regex`` matches, matched once for each state of the topics (while
        ``topics_version`` gives the same number) and shared by every member and group
        subscribing with it: Kafka too resolves a regex when the topics change, not at
        every heartbeat. Raises ClientRegexError for one that does not compile."""
        version = self.topics_version() if self.topics_version is not None else None
        kept = self._matched.get(regex)
        if kept is not None and kept[0] == version:
            return kept[1]
        pattern = compile_client_regex(regex)
        topics = frozenset(t for t in self.topic_names() if pattern.fullmatch(t))
        if version is not None:
            if len(self._matched) >= _MATCHED_MAX or self._matched_names + len(topics) > _MATCHED_NAMES_MAX:
                self._matched.clear()
                self._matched_names = 0
            old = self._matched.get(regex)
            self._matched_names += len(topics) - (len(old[1]) if old is not None else 0)
            self._matched[regex] = (version, topics)
        return topics

    @staticmethod
    def _forget_unused_regex(g: ConsumerGroup, regex) -> None:
        """A regex no member subscribes with any more is dropped from the group's resolved
        ones (Kafka removes its ConsumerGroupRegularExpression record)."""
        if regex and not any(m.subscribed_topic_regex == regex for m in g.members.values()):
            g.resolved_regexes.discard(regex)

    def _resolve_later(self, g: ConsumerGroup, regex: str) -> None:
        if regex in g.resolving_regexes:
            return
        g.resolving_regexes.add(regex)

        def resolved():
            g.resolving_regexes.discard(regex)
            if self.coord.groups.get(g.group_id) is not g or regex in g.resolved_regexes:
                return
            g.resolved_regexes.add(regex)
            if any(m.subscribed_topic_regex == regex for m in g.members.values()):
                g.subscription_metadata = self._subscription_metadata(g)
                g.group_epoch += 1
                self._write(g.group_id, [self._epoch_record(g)])
                log.info("consumer group %s: regex %r resolved; group epoch %d", g.group_id, regex, g.group_epoch)

        self.coord.scheduler.call_later(0, resolved)

    def _subscription_metadata(self, g: ConsumerGroup) -> dict:
        """{topic: (topic id, partitions)} of the topics the members subscribe to, asked
        at every heartbeat to see whether they changed. Computed from each distinct
        subscription once (the members of a group mostly share one), and made again
        only when those subscriptions or the topics (``topics_version``) changed: else
        the dict made before."""
        distinct = {}
        for m in g.members.values():
            regex = m.subscribed_topic_regex
            key = (tuple(m.subscribed_topic_names), regex, regex in g.resolved_regexes)
            if key not in distinct:
                distinct[key] = m
        version = self.topics_version() if self.topics_version is not None else None
        made = g.metadata_made
        if version is not None and made is not None and made[0] == version and made[1] == distinct.keys():
            return made[2]
        names = set()
        for m in distinct.values():
            names.update(self.subscribed(m, g))
        out = {}
        for name in sorted(names):
            md = self.topic_metadata(name)
            if md is not None:
                out[name] = md
        if version is not None:
            g.metadata_made = (version, frozenset(distinct), out)
        return out

    # -- ConsumerGroupHeartbeat ------------------------------------------------------------
    def heartbeat(self, *, group_id: str, member_id: str, member_epoch: int, instance_id, rack_id,
                  rebalance_timeout_ms: int, subscribed_topic_names, subscribed_topic_regex, server_assignor,
                  owned, client_id: str, client_host: str, version: int):
        """Returns (error code, message, member id, member epoch, heartbeat interval,
        assignment {topic id: set} or None)."""
        try:
            self._validate(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                           subscribed_topic_names, subscribed_topic_regex, server_assignor, owned, version)
            return self._heartbeat(group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                                   subscribed_topic_names, subscribed_topic_regex, server_assignor, owned, client_id,
                                   client_host)
        except CoordinatorError as exc:
            log.info("ConsumerGroupHeartbeat of member %r (epoch %d) of group %r answered %s: %s", member_id,
                     member_epoch, group_id, E(exc.code).name, exc)
            return int(exc.code), str(exc), None, 0, 0, None

    def _validate(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                  names, regex, assignor, owned, version):
        """Kafka's throwIfConsumerGroupHeartbeatRequestIsInvalid."""
        def invalid(msg):
            raise CoordinatorError(E.INVALID_REQUEST, msg)

        def blank(value):
            return value is not None and value.strip() == ""

        if (version >= 1 or member_epoch > 0 or member_epoch == LEAVE_EPOCH) and blank(member_id or ""):
            invalid("MemberId can't be empty.")
        if blank(group_id):
            invalid("GroupId can't be empty.")
        if blank(instance_id):
            invalid("InstanceId can't be empty.")
        if blank(rack_id):
            invalid("RackId can't be empty.")
        if member_epoch == 0:
            if rebalance_timeout_ms == -1:
                invalid("RebalanceTimeoutMs must be provided in first request.")
            if owned is None or len(owned) != 0:
                invalid("TopicPartitions must be empty when (re-)joining.")
            # members may join with no topic names or an empty regex: in the group, subscribed to nothing
            if names is None and regex is None:
                invalid("Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when (re-)joining.")
        elif member_epoch == STATIC_LEAVE_EPOCH:
            if instance_id is None:
                invalid("InstanceId can't be null.")
        elif member_epoch < STATIC_LEAVE_EPOCH:
            invalid("MemberEpoch is invalid.")
        if regex:
            try:
                compile_client_regex(regex)
            except ClientRegexError as exc:
                raise CoordinatorError(E.INVALID_REGULAR_EXPRESSION, f"SubscribedTopicRegex `{regex}` is not a "
                                                                     f"valid regular expression: {exc}.") from None
        if assignor is not None and assignor not in self.assignors:
            raise CoordinatorError(E.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {assignor} is not supported. "
                                                           f"Supported assignors: {', '.join(self.assignors)}.")

    def _group_for(self, group_id: str, create: bool) -> ConsumerGroup:
        coord = self.coord
        if coord.is_share_group(group_id):
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
        g = coord.group(group_id)
        if isinstance(g, ConsumerGroup):
            return g
        if g is not None:
            if not create:
                raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")
            if g.members:  # online upgrade (broker.coordinator.classic_members)
                return self.classic.upgrade(g)
            # an empty classic group (offsets only) becomes a consumer group, keeping them
            new = ConsumerGroup(group_id, self._now())
            new.adopt_offsets(g)
            coord.retire(g)
            coord.store.write_group(group_id, None)
            coord.groups[group_id] = new
            return new
        if not create:
            raise CoordinatorError(E.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        g = ConsumerGroup(group_id, self._now())
        coord.groups[group_id] = g
        return g

    def _heartbeat(self, group_id, member_id, member_epoch, instance_id, rack_id, rebalance_timeout_ms,
                   names, regex, assignor, owned, client_id, client_host):
        g = self._group_for(group_id, create=member_epoch == 0)
        if not member_id:
            member_id = str(uuid.uuid4())  # v0: the coordinator names the member
        records = []
        if member_epoch in (LEAVE_EPOCH, STATIC_LEAVE_EPOCH):
            return self._leave(g, member_id, member_epoch, instance_id)
        member = g.members.get(member_id)
        new_member = member is None
        if instance_id is not None and member_epoch == 0:
            old = g.static_member(instance_id)
            if old is not None and old.member_id != member_id:
                if old.member_epoch != STATIC_LEAVE_EPOCH and old.classic is None:
                    raise CoordinatorError(E.UNRELEASED_INSTANCE_ID,
                                           f"Static member {member_id} with instance id {instance_id} cannot join "
                                           f"the group because the instance id is owned by {old.member_id} member.")
                # the new member id takes over the instance's assignment (KIP-848 static membership)
                self._remove(g, old, write=True, bump=False)
                member = ConsumerMember(member_id=member_id, instance_id=instance_id,
                                        member_epoch=old.previous_member_epoch, previous_member_epoch=-1,
                                        assigned=old.assigned, pending_revocation=old.pending_revocation,
                                        subscribed_topic_names=old.subscribed_topic_names,
                                        server_assignor=old.server_assignor, rack_id=old.rack_id,
                                        rebalance_timeout_ms=old.rebalance_timeout_ms)
                g.target[member_id] = g.target.pop(old.member_id, {})
                g.members[member_id] = member
                new_member = False
                log.info("static member %s of consumer group %s rejoined as %s", instance_id, group_id, member_id)
        if member is None:
            if member_epoch != 0:
                raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
            if len(g.members) >= self.max_size:
                raise CoordinatorError(E.GROUP_MAX_SIZE_REACHED,
                                       f"The consumer group has reached its maximum capacity of {self.max_size} "
                                       f"members.")
            member = ConsumerMember(member_id=member_id)
            g.members[member_id] = member
            log.info("member %s joined consumer group %s", member_id, group_id)
        elif member_epoch != 0:
            self._check_epoch(member, member_epoch, owned)
        before = self._described(member)
        if instance_id is not None:
            member.instance_id = instance_id
        if rack_id is not None:
            member.rack_id = rack_id
        if rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = rebalance_timeout_ms
        if assignor is not None:
            member.server_assignor = assignor
        if names is not None:
            member.subscribed_topic_names = sorted(set(names))
        if regex is not None:
            old_regex, member.subscribed_topic_regex = member.subscribed_topic_regex, regex or None
            self._forget_unused_regex(g, old_regex)
        member.client_id, member.client_host = client_id, client_host
        before_assigned = self._apply(g, member, new_member, before, records,
                                      None if owned is None else {tp.topic_id: set(tp.partitions) for tp in owned})
        self._schedule(g, member)
        full = member_epoch == 0 or (rebalance_timeout_ms != -1 and (names is not None or regex is not None)
                                     and owned is not None)
        assignment = dict(member.assigned) if full or member.assigned != before_assigned else None
        return 0, None, member_id, member.member_epoch, self._heartbeat_interval(group_id), assignment

    @staticmethod
    def _described(m: ConsumerMember) -> tuple:
        """What a member's metadata record holds; its first four items, changed, change
        the group's assignment (a new group epoch)."""
        return (list(m.subscribed_topic_names), m.subscribed_topic_regex, m.server_assignor, m.rack_id,
                m.instance_id, m.rebalance_timeout_ms, m.client_id, m.client_host, m.classic)

    def _apply(self, g: ConsumerGroup, member: ConsumerMember, new_member: bool, before: tuple, records: list,
               owned_map: dict | None) -> dict:
        """After a heartbeat or a classic JoinGroup updated ``member`` (``before``: its
        :meth:`_described` until then): the member record, a new group epoch when its
        subscription or the subscribed topics changed, the target assignment of that
        epoch, the member reconciled toward it; all written with ``records``. Returns the
        member's assigned partitions before the reconciliation."""
        after = self._described(member)
        bump = new_member or before[:4] != after[:4]
        if new_member or before != after:
            records.append(self._member_record(g, member))
        metadata = self._subscription_metadata(g)
        if metadata is not g.subscription_metadata and metadata != g.subscription_metadata:
            g.subscription_metadata = metadata
            bump = True
        if bump:
            records.append(self._bump_epoch(g))
        if g.group_epoch > g.assignment_epoch:
            records += self._new_target(g)
        previous = (member.member_epoch, member.state, {t: set(p) for t, p in member.assigned.items()},
                    {t: set(p) for t, p in member.pending_revocation.items()})
        self._reconcile(g, member, owned_map)
        if (member.member_epoch, member.state, member.assigned, member.pending_revocation) != previous or new_member:
            records.append(self._current_record(g, member))
        self._write(g.group_id, records)
        return previous[2]

    @staticmethod
    def _check_epoch(member: ConsumerMember, received: int, owned) -> None:
        if received > member.member_epoch:
            raise CoordinatorError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member epoch "
                                                          f"({received}) than the one known by the group coordinator "
                                                          f"({member.member_epoch}). The member must abandon all its "
                                                          f"partitions and rejoin.")
        if received < member.member_epoch:
            owned_map = {tp.topic_id: set(tp.partitions) for tp in owned or []} if owned is not None else None
            subset = owned_map is not None and all(ps <= member.assigned.get(t, set()) for t, ps in owned_map.items())
            if received != member.previous_member_epoch or not subset:
                raise CoordinatorError(E.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member epoch "
                                                              f"({received}) than the one known by the group "
                                                              f"coordinator ({member.member_epoch}). The member must "
                                                              f"abandon all its partitions and rejoin.")

    def _new_target(self, g: ConsumerGroup) -> list:
        name = g.preferred_assignor(self.assignors[0])
        subs = {mid: self.subscribed(m, g) for mid, m in g.members.items()}
        target = ASSIGNORS.get(name, _uniform)(subs, g.subscription_metadata, g.target)
        changed = {mid: a for mid, a in target.items() if g.target.get(mid) != a}
        gone = [(CR.key(CR.TARGET_MEMBER, g.group_id, mid), None) for mid in set(g.target) - set(target)]
        g.target = target
        g.assignment_epoch = g.group_epoch
        records = gone + self._target_records(g, changed)
        log.info("consumer group %s: target assignment of epoch %d computed with the %s assignor", g.group_id,
                 g.assignment_epoch, name)
        return records

    def _owners(self, g: ConsumerGroup, exclude: str) -> set:
        out = set()
        for mid, m in g.members.items():
            if mid == exclude:
                continue
            for source in (m.assigned, m.pending_revocation):
                for tid, ps in source.items():
                    out.update((tid, p) for p in ps)
        return out

    def _reconcile(self, g: ConsumerGroup, m: ConsumerMember, owned_map: dict | None) -> None:
        """Kafka's CurrentAssignmentBuilder.build. ``owned_map``: {topic id: partitions}
        the member says it owns, None when it did not say."""
        target_epoch = g.assignment_epoch
        target = g.target.get(m.member_id, {})

        def owns_any(revoking: dict) -> bool:
            if owned_map is None:
                return True
            return any(owned_map.get(t, set()) & ps for t, ps in revoking.items())

        if m.state == M_STABLE and m.member_epoch == target_epoch:
            return
        if m.state == M_UNREVOKED and owns_any(m.pending_revocation):
            return
        others = self._owners(g, m.member_id)
        assigned, revoking, adding, unreleased = {}, {}, {}, False
        for tid in set(target) | set(m.assigned):
            want = target.get(tid, set())
            have = m.assigned.get(tid, set())
            keep = have & want
            if keep:
                assigned[tid] = set(keep)
            if have - keep:
                revoking[tid] = have - keep
            pending = {p for p in want - keep if (tid, p) not in others}
            if len(pending) != len(want - keep):
                unreleased = True
            if pending:
                adding[tid] = pending
        if revoking and owns_any(revoking):
            m.state = M_UNREVOKED
            m.assigned, m.pending_revocation = assigned, revoking
            return
        for tid, ps in adding.items():
            assigned.setdefault(tid, set()).update(ps)
        if m.member_epoch != target_epoch:
            m.previous_member_epoch = m.member_epoch
        m.member_epoch = target_epoch
        m.state = M_UNRELEASED if unreleased else M_STABLE
        m.assigned, m.pending_revocation = assigned, {}

    # -- leaving and timers ----------------------------------------------------------------
    def _leave(self, g: ConsumerGroup, member_id: str, epoch: int, instance_id):
        m = g.members.get(member_id)
        if m is None and instance_id is not None:
            m = g.static_member(instance_id)
        if m is None:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {g.group_id}.")
        if epoch == STATIC_LEAVE_EPOCH:
            # the instance keeps its partitions until its session times out or it returns
            log.info("static member %s (instance %s) of consumer group %s left temporarily", member_id,
                     m.instance_id, g.group_id)
            m.previous_member_epoch = m.member_epoch
            m.member_epoch = STATIC_LEAVE_EPOCH
            self._write(g.group_id, [self._current_record(g, m)])
            self._schedule(g, m)
            return 0, None, member_id, STATIC_LEAVE_EPOCH, 0, None
        log.info("member %s left consumer group %s", member_id, g.group_id)
        self._fence(g, m)
        return 0, None, member_id, LEAVE_EPOCH, 0, None

    def _fence(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        """A member leaves or is fenced: removed, the group epoch bumped; or the group
        becomes a classic one when only classic members remain (Kafka's
        consumerGroupFenceMember)."""
        if self.classic.can_downgrade(g, m) and self.classic.downgrade(g, m):
            return
        self._remove(g, m, write=True, bump=True)

    @staticmethod
    def _cancel_timers(m: ConsumerMember, *names: str) -> None:
        """Cancel the member's timers named (all of them when none is)."""
        for name in names or ("session_timer", "rebalance_timer", "join_timer", "sync_timer"):
            timer = getattr(m, name)
            if timer is not None:
                timer.cancel()
                setattr(m, name, None)

    def _bump_epoch(self, g: ConsumerGroup):
        """A new group epoch; its record, to write."""
        g.group_epoch += 1
        log.info("consumer group %s: group epoch %d", g.group_id, g.group_epoch)
        return self._epoch_record(g)

    def _remove(self, g: ConsumerGroup, m: ConsumerMember, *, write: bool, bump: bool) -> None:
        self._cancel_timers(m)
        g.members.pop(m.member_id, None)
        g.target.pop(m.member_id, None)
        self._forget_unused_regex(g, m.subscribed_topic_regex)
        records = self._member_tombstones(g, m.member_id)
        if bump:
            g.subscription_metadata = self._subscription_metadata(g)
            records.append(self._bump_epoch(g))
        if write:
            self._write(g.group_id, records)

    def _schedule(self, g: ConsumerGroup, m: ConsumerMember) -> None:
        if m.session_timer is not None:
            m.session_timer.cancel()
        timeout = m.classic.session_timeout_ms if m.classic is not None else self._session_timeout(g.group_id)
        m.session_timer = self.coord.scheduler.call_later(timeout, lambda: self._session_expired(g, m.member_id, timeout))
        if m.state == M_UNREVOKED and m.classic is None:  # classic members have join and sync timers instead
            if m.rebalance_timer is None:
                epoch = m.member_epoch
                limit = m.rebalance_timeout_ms if m.rebalance_timeout_ms > 0 else timeout
                m.rebalance_timer = self.coord.scheduler.call_later(
                    limit, lambda: self._rebalance_expired(g, m.member_id, epoch, limit))
        elif m.rebalance_timer is not None:
            m.rebalance_timer.cancel()
            m.rebalance_timer = None

    def _alive(self, g, member_id):
        m = g.members.get(member_id)
        return m if m is not None and self.coord.groups.get(g.group_id) is g else None

    def _session_expired(self, g: ConsumerGroup, member_id: str, timeout: int) -> None:
        m = self._alive(g, member_id)
        if m is None:
            return
        log.info("member %s of consumer group %s has failed (no heartbeat within %d ms); removing it",
                 member_id, g.group_id, timeout)
        self._fence(g, m)

    def _rebalance_expired(self, g: ConsumerGroup, member_id: str, epoch: int, limit: int) -> None:
        m = self._alive(g, member_id)
        if m is None or m.state != M_UNREVOKED or m.member_epoch != epoch:
            return
        log.info("member %s of consumer group %s did not revoke its partitions within its rebalance timeout "
                 "(%d ms); fencing it", member_id, g.group_id, limit)
        self._fence(g, m)

    def start_loaded_timers(self) -> None:
        for g in list(self.coord.groups.values()):
            if isinstance(g, ConsumerGroup):
                for m in list(g.members.values()):
                    self._schedule(g, m)

    # -- offsets ---------------------------------------------------------------------------
    @staticmethod
    def validate_commit(g: ConsumerGroup, member_id: str, epoch: int, version: int, transactional: bool) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit."""
        if epoch < 0 and not g.members:
            return
        m = g.members.get(member_id)
        if m is None:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID, None)
        if not transactional and version < 9 and m.classic is None:
            raise CoordinatorError(E.UNSUPPORTED_VERSION, "OffsetCommit version 9 or above must be used by members "
                                                          "using the modern group protocol")
        ConsumerGroups._check_member_epoch(m, epoch)

    @staticmethod
    def _check_member_epoch(m: ConsumerMember, epoch: int) -> None:
        """Kafka's validateMemberEpoch: a classic member's generation is its epoch."""
        if epoch != m.member_epoch:
            raise CoordinatorError(E.ILLEGAL_GENERATION if m.classic is not None else E.STALE_MEMBER_EPOCH, None)

    @staticmethod
    def validate_fetch(g: ConsumerGroup, member_id: str | None, epoch: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetFetch (OffsetFetch v9)."""
        if epoch < 0 and member_id is None:
            return
        m = g.members.get(member_id or "")
        if m is None:
            raise CoordinatorError(E.UNKNOWN_MEMBER_ID, None)
        ConsumerGroups._check_member_epoch(m, epoch)

    # -- replay ------------------------------------------------------------------------------
    def load(self, version: int, group_id: str, member_id, value) -> None:
        coord = self.coord
        g = coord.groups.get(group_id)
        if value is None:  # tombstones
            if not isinstance(g, ConsumerGroup):
                return
            if version == CR.GROUP_METADATA:
                if not g.offsets and not g.pending_txn_offsets:
                    del coord.groups[group_id]
                else:  # its offsets stay, as an empty classic group's
                    plain = ClassicGroup(group_id, self._now())
                    plain.adopt_offsets(g)
                    coord.groups[group_id] = plain
            elif version == CR.MEMBER_METADATA:
                g.members.pop(member_id, None)
            elif version == CR.TARGET_MEMBER:
                g.target.pop(member_id, None)
            return
        if not isinstance(g, ConsumerGroup):
            new = ConsumerGroup(group_id, self._now())
            if g is not None:
                new.adopt_offsets(g)
            coord.groups[group_id] = g = new
        if version == CR.GROUP_METADATA:
            g.group_epoch = value.epoch
        elif version == CR.TARGET_METADATA:
            g.assignment_epoch = value.assignment_epoch
        elif version == CR.TARGET_MEMBER:
            g.target[member_id] = CR.from_topic_partitions(value.topic_partitions)
        else:
            m = g.members.get(member_id)
            if m is None:
                m = g.members[member_id] = ConsumerMember(member_id=member_id)
            if version == CR.MEMBER_METADATA:
                m.instance_id, m.rack_id = value.instance_id, value.rack_id
                m.client_id, m.client_host = value.client_id, value.client_host
                m.subscribed_topic_names = list(value.subscribed_topic_names or [])
                m.subscribed_topic_regex = value.subscribed_topic_regex
                m.rebalance_timeout_ms, m.server_assignor = value.rebalance_timeout_ms, value.server_assignor
                c = value.classic_member_metadata
                if c is not None:
                    from broker.coordinator.classic_members import ClassicMetadata

                    m.classic = ClassicMetadata(c.session_timeout_ms, [(p.name, bytes(p.metadata or b""))
                                                                       for p in c.supported_protocols or []])
                else:
                    m.classic = None
            elif version == CR.CURRENT_ASSIGNMENT:
                m.member_epoch, m.previous_member_epoch = value.member_epoch, value.previous_member_epoch
                m.state = value.state
                m.assigned = CR.from_topic_partitions(value.assigned_partitions)
                m.pending_revocation = CR.from_topic_partitions(value.partitions_pending_revocation)

    def finish_load(self) -> None:
        """After the replay: the subscription metadata the groups were computed from."""
        for g in self.coord.groups.values():
            if isinstance(g, ConsumerGroup):
                g.subscription_metadata = self._subscription_metadata(g)
