"""DescribeGroups (key 15), v0-6: state, protocol and members of each group.

As Kafka's ClassicGroup.describe: a Stable group shows its protocol and each member's
metadata and assignment; a group in another state shows its members without them. An
unknown group, or one that is not a classic group (a consumer-protocol or share group,
which ConsumerGroupDescribe or ShareGroupDescribe describes), is described as state Dead
with no error in v0-5 and as GROUP_ID_NOT_FOUND with a message in v6 (KIP-1043), as
Kafka's GroupMetadataManager.describeGroups. From v6 every error carries a message.
"""

from protocol.errors import ErrorCode
from protocol.messages import DescribeGroupsResponse as R

from broker.coordinator.group import STABLE
from broker.security import authorizer as A

_AUTHORIZED_OPS_UNSET = -2147483648


def _failed(gid, code, message, v6):
    return R.DescribedGroup(error_code=int(code), error_message=message if v6 else None, group_id=gid,
                            group_state="", protocol_type="", protocol_data="", members=[],
                            authorized_operations=_AUTHORIZED_OPS_UNSET)


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    want_ops = header.api_version >= 3 and getattr(request, "include_authorized_operations", False)
    v6 = header.api_version >= 6
    out = []
    for gid in request.groups:
        if not ctx.authorize(session, A.DESCRIBE, A.GROUP, gid, "DescribeGroups"):
            out.append(_failed(gid, ErrorCode.GROUP_AUTHORIZATION_FAILED, "Group authorization failed.", v6))
            continue
        if coord is None:
            out.append(_failed(gid, ErrorCode.COORDINATOR_NOT_AVAILABLE, "The coordinator is not available.", v6))
            continue
        g = coord.describe(gid)
        classic = g is not None and g.kind != "consumer"
        if not classic and v6:
            exists = g is not None or coord.is_share_group(gid)
            out.append(_failed(gid, ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a classic group." if exists
                               else f"Group {gid} not found.", v6))
            continue
        ops = ctx.authorized_ops(session, A.GROUP, gid) if want_ops else _AUTHORIZED_OPS_UNSET
        if not classic:
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
