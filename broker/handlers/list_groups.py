"""ListGroups (key 16), v0-5: every group of this coordinator (v3+ with its state;
v4 filters on states, case-insensitively as Kafka does; v5 gives each group's type,
"classic" or "consumer" (KIP-848), and filters on types, names matched
case-insensitively as Kafka's Group.GroupType.parse, an unknown name matching no
group)."""

from protocol.errors import ErrorCode
from protocol.messages import ListGroupsResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    if coord is None:
        return R(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE), groups=[])
    states = list(request.states_filter or []) if header.api_version >= 4 else None
    types = list(request.types_filter or []) if header.api_version >= 5 else None
    # DESCRIBE on the cluster lists every group; else the groups the principal may describe
    everything = ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "ListGroups")
    return R(throttle_time_ms=0, error_code=0, groups=[
        R.ListedGroup(group_id=gid, protocol_type=ptype, group_state=state, group_type=kind)
        for gid, ptype, state, kind in coord.list_groups(states, types or None)
        if everything or ctx.authorize(session, A.DESCRIBE, A.GROUP, gid, "ListGroups")])
