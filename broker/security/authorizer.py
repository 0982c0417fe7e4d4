"""The one place deciding authorization: Kafka's StandardAuthorizer semantics over the
ACLs of ``storage.acl_store``.

Selected by ``authorizer.class.name`` (Kafka's StandardAuthorizer, or the older
AclAuthorizer, class name); empty means no authorizer and everything is allowed, as in
Kafka. For an action (principal, client host, operation, resource):

1. a principal listed in ``super.users`` (``User:admin;User:ops``) may do anything;
2. the ACLs that apply to the resource are the LITERAL ones with its name, LITERAL ``*``
   and the PREFIXED ones whose prefix starts the name; of those, the ones for the
   principal or ``User:*``, for the host or ``*``, and for the operation or ALL count;
3. an ALLOW ACL for READ, WRITE, DELETE or ALTER also allows DESCRIBE, one for
   ALTER_CONFIGS also allows DESCRIBE_CONFIGS (DENY ACLs imply nothing);
4. any matching DENY wins; else any matching ALLOW allows; else, when no ACL at all
   applies to the resource, ``allow.everyone.if.no.acl.found`` decides; else denied.

Handlers ask through ``BrokerContext.authorize`` / ``authorized_ops``; denials are
counted per API and resource type (``chronolog_authorization_denied_total``).
"""

from __future__ import annotations

import logging

from storage.acl_store import AclBinding

log = logging.getLogger("chronolog.authorizer")

# Kafka's enums (org.apache.kafka.common.acl / resource)
ANY_TYPE, TOPIC, GROUP, CLUSTER, TRANSACTIONAL_ID, DELEGATION_TOKEN, USER = 1, 2, 3, 4, 5, 6, 7
ANY_PATTERN, MATCH, LITERAL, PREFIXED = 1, 2, 3, 4
ANY_OP, ALL, READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE = 1, 2, 3, 4, 5, 6, 7, 8
CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, CREATE_TOKENS, DESCRIBE_TOKENS = 9, 10, 11, 12, 13, 14
ANY_PERMISSION, DENY, ALLOW = 1, 2, 3
WILDCARD = "*"
CLUSTER_NAME = "kafka-cluster"
RESOURCE_NAMES = {TOPIC: "Topic", GROUP: "Group", CLUSTER: "Cluster", TRANSACTIONAL_ID: "TransactionalId",
                  DELEGATION_TOKEN: "DelegationToken", USER: "User"}

_IMPLIES_DESCRIBE = frozenset({DESCRIBE, READ, WRITE, DELETE, ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({DESCRIBE_CONFIGS, ALTER_CONFIGS})

# the operations each resource type supports (Kafka's AclEntry.supportedOperations),
# what the authorized-operations bitfields are made of
SUPPORTED_OPS = {
    TOPIC: (READ, WRITE, CREATE, DESCRIBE, DELETE, ALTER, DESCRIBE_CONFIGS, ALTER_CONFIGS),
    GROUP: (READ, DESCRIBE, DELETE, DESCRIBE_CONFIGS, ALTER_CONFIGS),  # configs: KIP-848 group configs (4.0)
    CLUSTER: (CREATE, CLUSTER_ACTION, DESCRIBE_CONFIGS, ALTER_CONFIGS, IDEMPOTENT_WRITE, ALTER, DESCRIBE),
    TRANSACTIONAL_ID: (DESCRIBE, WRITE),
    DELEGATION_TOKEN: (DESCRIBE,),
    USER: (CREATE_TOKENS, DESCRIBE_TOKENS),
}


def parse_super_users(text: str) -> frozenset[str]:
    return frozenset(u.strip() for u in (text or "").split(";") if u.strip())


def _principals(principal: str) -> tuple[str, str]:
    """The principal and its type's wildcard (``User:alice`` -> also ``User:*``)."""
    return principal, principal.split(":", 1)[0] + ":*"


def _result(acl: AclBinding, principals, host: str, op: int):
    """ALLOW / DENY when ``acl`` matches the action, else None (StandardAuthorizerData.findResult)."""
    if acl.principal not in principals:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    if acl.operation != ALL:
        if acl.permission == ALLOW:
            if op == DESCRIBE:
                if acl.operation not in _IMPLIES_DESCRIBE:
                    return None
            elif op == DESCRIBE_CONFIGS:
                if acl.operation not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != acl.operation:
                return None
        elif op != acl.operation:
            return None
    return acl.permission


def applies_to(acl: AclBinding, rtype: int, name: str) -> bool:
    """Whether ``acl``'s resource pattern covers the resource (type, name)."""
    if acl.resource_type != rtype:
        return False
    if acl.pattern_type == LITERAL:
        return acl.resource_name == name or acl.resource_name == WILDCARD
    return acl.pattern_type == PREFIXED and name.startswith(acl.resource_name)


# allowed decisions remembered (over every principal, host and operation) before the
# memory of them starts again: a bound on what a broker with many principals, hosts and
# topics keeps
REMEMBERED_MAX = 100_000


class _Index:
    """One snapshot of the ACL store, kept the way a decision reads it (Kafka's
    StandardAuthorizerData keeps its ACLs sorted by resource for the same reason): per
    resource type, the LITERAL ACLs by name (``*`` among them) and the PREFIXED ones by
    prefix with the lengths of those prefixes, so that a decision reads only the ACLs
    that apply to its resource, however many others there are.

    It also remembers the allowed decisions made on this snapshot, per (principal, host,
    operation, resource type): a set of resource names. A decision depends on nothing but
    those, the resource and the snapshot (``super.users`` and
    ``allow.everyone.if.no.acl.found`` are static), so it stands for as long as the
    snapshot does; any change of the ACLs makes a new snapshot and so a new index.
    Denials are not remembered: each is decided, logged and counted again."""

    __slots__ = ("acls", "by_type", "literal", "prefixed", "lengths", "allowed", "remembered")

    def __init__(self, acls: frozenset) -> None:
        self.acls = acls
        self.by_type: dict[int, list] = {}
        self.literal: dict[tuple, list] = {}
        self.prefixed: dict[tuple, list] = {}
        for a in acls:
            self.by_type.setdefault(a.resource_type, []).append(a)
            if a.pattern_type == LITERAL:
                self.literal.setdefault((a.resource_type, a.resource_name), []).append(a)
            elif a.pattern_type == PREFIXED:
                self.prefixed.setdefault((a.resource_type, a.resource_name), []).append(a)
        lengths: dict[int, set] = {}
        for rtype, prefix in self.prefixed:
            lengths.setdefault(rtype, set()).add(len(prefix))
        self.lengths = {rtype: sorted(n) for rtype, n in lengths.items()}
        self.allowed: dict[tuple, set] = {}
        self.remembered = 0

    def applying(self, rtype: int, name: str) -> list:
        """The ACLs whose pattern covers the resource (what ``applies_to`` selects)."""
        out = list(self.literal.get((rtype, name), ()))
        if name != WILDCARD:
            out += self.literal.get((rtype, WILDCARD), ())
        prefixed = self.prefixed
        for n in self.lengths.get(rtype, ()):
            if n > len(name):
                break
            out += prefixed.get((rtype, name[:n]), ())
        return out

    def names(self, key: tuple) -> set:
        """The resource names an allowed decision was made for under ``key``."""
        names = self.allowed.get(key)
        if names is None:
            names = self.allowed[key] = set()
        return names

    def remember(self, key: tuple, name: str) -> None:
        if self.remembered >= REMEMBERED_MAX:
            # start again: the sets handed out before are left to their holders (a
            # produce request being answered), no longer added to
            self.allowed = {}
            self.remembered = 0
        self.names(key).add(name)
        self.remembered += 1


class Authorizer:
    def __init__(self, store, super_users: str = "", allow_if_no_acl: bool = False, metrics=None) -> None:
        self.store = store
        self.super_users = parse_super_users(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.metrics = metrics
        self._index = _Index(frozenset())

    def _current(self) -> _Index:
        """The index of the store's current snapshot (made anew when the ACLs changed)."""
        acls = self.store.all()
        index = self._index
        if index.acls is not acls:
            index = self._index = _Index(acls)
        return index

    def _decide(self, index: _Index, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        principals = _principals(principal)
        allow = False
        applying = index.applying(rtype, name)
        for acl in applying:
            r = _result(acl, principals, host, op)
            if r == DENY:
                return False
            if r == ALLOW:
                allow = True
        if allow:
            return True
        return self.allow_if_no_acl and not applying

    def allowed(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        return self._decide(self._current(), principal, host, op, rtype, name)

    def authorize(self, session, op: int, rtype: int, name: str, api: str = "") -> bool:
        index = self._current()
        principal, host = session.principal, session.client_ip
        names = index.allowed.get((principal, host, op, rtype))
        if names is not None and name in names:
            return True
        if self._decide(index, principal, host, op, rtype, name):
            index.remember((principal, host, op, rtype), name)
            return True
        log.debug("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s for request = %s",
                  principal, op, host, RESOURCE_NAMES.get(rtype, rtype), name, api)
        if self.metrics is not None:
            self.metrics.authorization_denied(api, RESOURCE_NAMES.get(rtype, str(rtype)))
        return False

    def allowed_names(self, session, op: int, rtype: int) -> set:
        """The names of the ``rtype`` resources ``authorize`` allowed this session's
        principal, from its host, to do ``op`` on, under the ACLs as they are now: a set
        that ``authorize`` adds to, for a caller that reads it instead of asking again
        for each resource (the compiled produce path, broker/_produce.c). A name not in
        it is one to ask ``authorize`` about, not one denied. After any change of the
        ACLs this hands out a new, empty set. (Asked for every read of a producer's
        connection: _current and names written out.)"""
        index = self._index
        if index.acls is not self.store.all():
            index = self._current()
        key = (session.principal, session.client_ip, op, rtype)
        names = index.allowed.get(key)
        return names if names is not None else index.names(key)

    def authorized_ops(self, session, rtype: int, name: str) -> int:
        """Kafka's authorized-operations bitfield (bit n = AclOperation code n)."""
        index = self._current()
        bits = 0
        for op in SUPPORTED_OPS.get(rtype, ()):
            if self._decide(index, session.principal, session.client_ip, op, rtype, name):
                bits |= 1 << op
        return bits

    def any_allowed(self, session, op: int, rtype: int) -> bool:
        """Whether some resource of ``rtype`` may be acted on with ``op``: Kafka's
        ``authorizeByResourceType`` (used for idempotent producers without
        IDEMPOTENT_WRITE, KIP-679). A DENY of the whole type (LITERAL ``*``) wins."""
        if session.principal in self.super_users:
            return True
        principals = _principals(session.principal)
        allowed = False
        acls = self._current().by_type.get(rtype, ())
        for acl in acls:
            r = _result(acl, principals, session.client_ip, op)
            if r == DENY and acl.pattern_type == LITERAL and acl.resource_name == WILDCARD:
                return False
            if r == ALLOW:
                allowed = True
        return allowed or (self.allow_if_no_acl and not acls)


# ---------------------------------------------------------------------- filters

def filter_matches(f, acl: AclBinding) -> bool:
    """Kafka's AclBindingFilter.matches: ``f`` has resource_type_filter,
    resource_name_filter, pattern_type_filter, principal_filter, host_filter,
    operation, permission_type (DescribeAcls request fields / DeleteAcls filters)."""
    rtype = f.resource_type_filter
    if rtype != ANY_TYPE and rtype != acl.resource_type:
        return False
    ptype = f.pattern_type_filter
    if ptype not in (ANY_PATTERN, MATCH) and ptype != acl.pattern_type:
        return False
    name = f.resource_name_filter
    if name is not None:
        if ptype == ANY_PATTERN or ptype == acl.pattern_type:
            if name != acl.resource_name:
                return False
        elif not applies_to(acl, acl.resource_type, name):  # MATCH: the ACL covers the name
            return False
    if f.principal_filter is not None and f.principal_filter != acl.principal:
        return False
    if f.host_filter is not None and f.host_filter != acl.host:
        return False
    if f.operation != ANY_OP and f.operation != acl.operation:
        return False
    return f.permission_type == ANY_PERMISSION or f.permission_type == acl.permission


def filter_error(f) -> str | None:
    """Why a filter cannot match anything (Kafka answers INVALID_REQUEST), or None."""
    if f.resource_type_filter == 0:
        return "Invalid resource type filter UNKNOWN"
    if f.pattern_type_filter == 0:
        return "Invalid pattern type filter UNKNOWN"
    if f.operation == 0:
        return "Invalid operation filter UNKNOWN"
    if f.permission_type == 0:
        return "Invalid permission type filter UNKNOWN"
    return None
