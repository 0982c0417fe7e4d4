"""Heartbeat (key 12), v0-4: keeps a member alive for its session timeout; tells it
when a rebalance is under way (REBALANCE_IN_PROGRESS) or when it has been removed
(UNKNOWN_MEMBER_ID, ILLEGAL_GENERATION, FENCED_INSTANCE_ID)."""

from protocol.errors import ErrorCode
from protocol.messages import HeartbeatResponse

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "Heartbeat"):
        return HeartbeatResponse(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED))
    coord = getattr(ctx, "group_coordinator", None)
    if coord is None:
        return HeartbeatResponse(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE))
    code = coord.heartbeat(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if header.api_version >= 3 else None,
    )
    return HeartbeatResponse(throttle_time_ms=0, error_code=int(code))
