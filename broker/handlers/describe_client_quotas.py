"""DescribeClientQuotas (key 48), v0-1: the quotas of the entities matching the filter,
as Kafka's ClientQuotasImage.describe (broker.quotas): exact, default and "specified"
matches per entity type, ``strict`` for entities with no other types; entries, entity
parts and keys in the order Kafka's HashMaps give them. A bad filter
answers its error (INVALID_REQUEST, UNSUPPORTED_VERSION for an unknown entity type) with
Kafka's message and no entries; DESCRIBE_CONFIGS on the cluster is required
(CLUSTER_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import DescribeClientQuotasResponse as R

from broker.quotas import QuotaRequestError, entity_parts, value_order
from broker.security import authorizer as A


def _error(code, message):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, entries=None)


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE_CONFIGS, A.CLUSTER, A.CLUSTER_NAME, "DescribeClientQuotas"):
        return _error(ErrorCode.CLUSTER_AUTHORIZATION_FAILED, None)
    try:
        found = ctx.client_quotas.describe(
            [(c.entity_type, c.match_type, c.match) for c in request.components], bool(request.strict))
    except QuotaRequestError as exc:
        return _error(exc.code, str(exc))
    entries = [R.EntryData(
        entity=[R.EntityData(entity_type=t, entity_name=n) for t, n in entity_parts(entity)],
        values=[R.ValueData(key=k, value=props[k]) for k in value_order(props)])
        for entity, props in found]
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)
