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


class Authorizer:
    def __init__(self, store, super_users: str = "", allow_if_no_acl: bool = False, metrics=None) -> None:
        self.store = store
        self.super_users = parse_super_users(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self.metrics = metrics
        self._snapshot = None
        self._by_type: dict = {}

    def _acls_of(self, rtype: int):
        acls = self.store.all()
        if acls is not self._snapshot:
            by_type: dict = {}
            for a in acls:
                by_type.setdefault(a.resource_type, []).append(a)
            self._by_type, self._snapshot = by_type, acls
        return self._by_type.get(rtype, ())

    def allowed(self, principal: str, host: str, op: int, rtype: int, name: str) -> bool:
        if principal in self.super_users:
            return True
        principals = _principals(principal)
        allow = False
        any_acl = False
        for acl in self._acls_of(rtype):
            if not applies_to(acl, rtype, name):
                continue
            any_acl = True
            r = _result(acl, principals, host, op)
            if r == DENY:
                return False
            if r == ALLOW:
                allow = True
        if allow:
            return True
        return self.allow_if_no_acl and not any_acl

    def authorize(self, session, op: int, rtype: int, name: str, api: str = "") -> bool:
        ok = self.allowed(session.principal, session.client_ip, op, rtype, name)
        if not ok:
            log.debug("Principal = %s is Denied operation = %s from host = %s on resource = %s:%s for request = %s",
                      session.principal, op, session.client_ip, RESOURCE_NAMES.get(rtype, rtype), name, api)
            if self.metrics is not None:
                self.metrics.authorization_denied(api, RESOURCE_NAMES.get(rtype, str(rtype)))
        return ok

    def authorized_ops(self, session, rtype: int, name: str) -> int:
        """Kafka's authorized-operations bitfield (bit n = AclOperation code n)."""
        bits = 0
        for op in SUPPORTED_OPS.get(rtype, ()):
            if self.allowed(session.principal, session.client_ip, op, rtype, name):
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
        for acl in self._acls_of(rtype):
            r = _result(acl, principals, session.client_ip, op)
            if r == DENY and acl.pattern_type == LITERAL and acl.resource_name == WILDCARD:
                return False
            if r == ALLOW:
                allowed = True
        return allowed or (self.allow_if_no_acl and not self._acls_of(rtype))


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
