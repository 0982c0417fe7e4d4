"""JoinGroup (key 11), v0-9: the classic rebalance protocol (broker/coordinator/group.py).

v0 has no rebalance timeout (the session timeout is used, as Kafka does); v4+ clients
joining without a member id get MEMBER_ID_REQUIRED and a member id to come back with
(KIP-394); v5+ carry group.instance.id (static membership, KIP-345). The response waits
(without blocking anything else) until the rebalance completes. v8+ carry the client's
reason (KIP-800), logged with the rebalance; v9 tells a static leader rejoining a stable
group to skip the assignment (KIP-814).
"""

from protocol.errors import ErrorCode
from protocol.messages import JoinGroupResponse

from broker.security import authorizer as A


def _response(version, res):
    return JoinGroupResponse(
        throttle_time_ms=0,
        error_code=int(res.error),
        generation_id=res.generation_id,
        protocol_type=res.protocol_type,
        protocol_name=(res.protocol_name or "") if version < 7 else res.protocol_name,
        leader=res.leader,
        skip_assignment=res.skip_assignment,
        member_id=res.member_id,
        members=[JoinGroupResponse.JoinGroupResponseMember(member_id=mid, group_instance_id=iid, metadata=meta)
                 for mid, iid, meta in res.members],
    )


async def handle(ctx, header, request, session=None):
    version = header.api_version
    coord = getattr(ctx, "group_coordinator", None)
    if session is not None and not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "JoinGroup"):
        from broker.coordinator.group import JoinResult

        return _response(version, JoinResult(ErrorCode.GROUP_AUTHORIZATION_FAILED, member_id=request.member_id))
    if coord is None:
        from broker.coordinator.group import JoinResult

        return _response(version, JoinResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, member_id=request.member_id))
    rebalance_timeout = request.rebalance_timeout_ms if version >= 1 else request.session_timeout_ms
    fut = coord.join(
        group_id=request.group_id,
        member_id=request.member_id or "",
        group_instance_id=request.group_instance_id if version >= 5 else None,
        protocol_type=request.protocol_type,
        protocols=[(p.name, p.metadata) for p in request.protocols],
        session_timeout_ms=request.session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout,
        client_id=header.client_id or "",
        client_host=session.client_host if session is not None else coord.client_host,
        require_known_member_id=version >= 4,
        reason=request.reason if version >= 8 else None,
    )
    res = await fut
    if res.skip_assignment and version < 9:
        # A static leader that rejoined a Stable group without a rebalance. Before KIP-814
        # (JoinGroup v9) it cannot be told to skip the assignment, so Kafka
        # (updateStaticMemberThenRebalanceOrCompleteJoin) names the leader as it was
        # before the member id changed and sends no members: the client acts as a
        # follower and SyncGroup gives it its current assignment.
        res.skip_assignment = False
        res.members = []
        res.leader = res.previous_leader or ""
    return _response(version, res)
