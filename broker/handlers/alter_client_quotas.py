"""AlterClientQuotas (key 49), v0-1: set or remove quotas of user, client-id and ip
entities (named or default), as Kafka's ClientQuotaControlManager (broker.quotas): a
result per entry, in order, with Kafka's INVALID_REQUEST messages (unknown entity types
and keys, ip combined with user or client-id, values not above 0, fractions for the
integral byte rates, duplicate keys or entities); the valid entries are applied and
persisted before the answer, ``validate_only`` applies nothing. ALTER_CONFIGS on the
cluster is required (CLUSTER_AUTHORIZATION_FAILED for every entry).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import AlterClientQuotasResponse as R

from broker.quotas import entity_parts
from broker.security import authorizer as A


def _entity(pairs):
    """The entry's entity as Kafka answers it: its parts in HashMap order (client-id
    before user), whatever the request's order."""
    return [R.EntityData(entity_type=t, entity_name=n) for t, n in entity_parts(pairs)]


def handle(ctx, header, request, session=None):
    entries = [([(e.entity_type, e.entity_name) for e in entry.entity],
                [(op.key, op.value, bool(op.remove)) for op in entry.ops]) for entry in request.entries]
    if not ctx.authorize(session, A.ALTER_CONFIGS, A.CLUSTER, A.CLUSTER_NAME, "AlterClientQuotas"):
        return R(throttle_time_ms=0, entries=[
            R.EntryData(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message=None,
                        entity=_entity(entity)) for entity, _ops in entries])
    results = ctx.client_quotas.alter(entries, bool(request.validate_only))
    return R(throttle_time_ms=0, entries=[
        R.EntryData(error_code=code, error_message=message, entity=_entity(entity))
        for entity, code, message in results])
