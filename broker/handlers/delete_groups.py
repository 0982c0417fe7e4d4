"""DeleteGroups (key 42), v0-2: delete empty groups with their committed offsets
(tombstones in ``__consumer_offsets``). NON_EMPTY_GROUP while members remain,
GROUP_ID_NOT_FOUND for an unknown group."""

from protocol.errors import ErrorCode
from protocol.messages import DeleteGroupsResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    results = []
    for gid in request.groups_names:
        if not ctx.authorize(session, A.DELETE, A.GROUP, gid, "DeleteGroups"):
            code = int(ErrorCode.GROUP_AUTHORIZATION_FAILED)
        else:
            code = int(ErrorCode.COORDINATOR_NOT_AVAILABLE) if coord is None else coord.delete_group(gid)
        results.append(R.DeletableGroupResult(group_id=gid, error_code=code))
    return R(throttle_time_ms=0, results=results)
