"""LeaveGroup (key 13), v0-5: v0-2 name one member; v3+ a batch of members, each by
member id and/or group.instance.id (KIP-345), with a result per member; v5 each
member's reason (KIP-800), logged."""

from protocol.errors import ErrorCode
from protocol.messages import LeaveGroupResponse

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    version = header.api_version
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "LeaveGroup"):
        return LeaveGroupResponse(throttle_time_ms=0, error_code=int(ErrorCode.GROUP_AUTHORIZATION_FAILED), members=[])
    coord = getattr(ctx, "group_coordinator", None)
    if version >= 3:
        members = [(m.member_id or "", m.group_instance_id, m.reason if version >= 5 else None)
                   for m in request.members]
    else:
        members = [(request.member_id, None)]
    if coord is None:
        top, results = int(ErrorCode.COORDINATOR_NOT_AVAILABLE), []
    else:
        top, results = coord.leave(request.group_id, members)
    if version < 3:
        if top == 0 and results:
            top = results[0][2]
        return LeaveGroupResponse(throttle_time_ms=0, error_code=top)
    return LeaveGroupResponse(
        throttle_time_ms=0,
        error_code=top,
        members=[LeaveGroupResponse.MemberResponse(member_id=mid, group_instance_id=iid, error_code=code)
                 for mid, iid, code in results] if top == 0 else [],
    )
