"""SyncGroup (key 14), v0-5: the leader hands in the assignment, every member gets its
own (the response waits until the leader's SyncGroup arrived)."""

from protocol.errors import ErrorCode
from protocol.messages import SyncGroupResponse

from broker.security import authorizer as A


async def handle(ctx, header, request, session=None):
    version = header.api_version
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "SyncGroup"):
        return SyncGroupResponse(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), assignment=b"")
    coord = getattr(ctx, "group_coordinator", None)
    if coord is None:
        return SyncGroupResponse(throttle_time_ms=0, error_code=int(ErrorCode.COORDINATOR_NOT_AVAILABLE),
                                 assignment=b"")
    fut = coord.sync(
        group_id=request.group_id,
        generation_id=request.generation_id,
        member_id=request.member_id,
        group_instance_id=request.group_instance_id if version >= 3 else None,
        protocol_type=request.protocol_type if version >= 5 else None,
        protocol_name=request.protocol_name if version >= 5 else None,
        assignments={a.member_id: bytes(a.assignment) if a.assignment is not None else b""
                     for a in request.assignments},
    )
    res = await fut
    return SyncGroupResponse(
        throttle_time_ms=0,
        error_code=int(res.error),
        protocol_type=res.protocol_type,
        protocol_name=res.protocol_name,
        assignment=res.assignment if res.error == 0 else b"",
    )
