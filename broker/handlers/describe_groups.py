"""DescribeGroups (key 15), v0-5: state, protocol and members of each group.

As Kafka's ClassicGroup.describe: a Stable group shows its protocol and each member's
metadata and assignment; a group in another state shows its members without them; an
unknown group is described as state Dead with no error (v0-5).
"""

from protocol.messages import DescribeGroupsResponse as R

from broker.coordinator.group import STABLE
from broker.security import authorizer as A

_AUTHORIZED_OPS_UNSET = -2147483648


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    want_ops = header.api_version >= 3 and getattr(request, "include_authorized_operations", False)
    out = []
    for gid in request.groups:
        if not ctx.authorize(session, A.DESCRIBE, A.GROUP, gid, "DescribeGroups"):
            out.append(R.DescribedGroup(error_code=30, group_id=gid, group_state="", protocol_type="",
                                        protocol_data="", members=[],
                                        authorized_operations=_AUTHORIZED_OPS_UNSET))
            continue
        ops = ctx.authorized_ops(session, A.GROUP, gid) if want_ops else _AUTHORIZED_OPS_UNSET
        g = coord.describe(gid) if coord is not None else None
        if coord is None:
            out.append(R.DescribedGroup(error_code=15, group_id=gid, group_state="", protocol_type="",
                                        protocol_data="", members=[],
                                        authorized_operations=_AUTHORIZED_OPS_UNSET))
            continue
        if g is None or g.kind == "consumer":
            # a consumer-protocol group is not a classic group: Kafka describes it as Dead
            # (DescribeGroups v0-5; ConsumerGroupDescribe describes it)
            out.append(R.DescribedGroup(error_code=0, group_id=gid, group_state="Dead", protocol_type="",
                                        protocol_data="", members=[], authorized_operations=ops))
            continue
        stable = g.state == STABLE
        members = [R.DescribedGroupMember(
            member_id=m.member_id, group_instance_id=m.group_instance_id, client_id=m.client_id,
            client_host=m.client_host,
            member_metadata=m.metadata(g.protocol_name) if stable else b"",
            member_assignment=m.assignment if stable else b"") for m in g.members.values()]
        out.append(R.DescribedGroup(
            error_code=0, group_id=gid, group_state=g.state, protocol_type=g.protocol_type or "",
            protocol_data=(g.protocol_name or "") if stable else "", members=members,
            authorized_operations=ops))
    return R(throttle_time_ms=0, groups=out)
