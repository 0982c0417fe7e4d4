"""ShareGroupDescribe (key 77), v1: share groups (KIP-932) with their state, group and
assignment epochs, assignor (``simple``) and members with their assignments (topic id and
name). A group of another kind or an unknown id answers GROUP_ID_NOT_FOUND with Kafka's
message; DESCRIBE on the group is required.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ShareGroupDescribeResponse as R

from broker.security import authorizer as A

_OPS_UNSET = -(2**31)


def handle(ctx, header, request, session=None):
    share = getattr(ctx, "share_groups", None)
    names = ctx.log_manager.topic_names_view()
    out = []
    for gid in request.group_ids:
        def failed(code, message=None):
            return R.DescribedGroup(error_code=int(code), error_message=message, group_id=gid, group_state="",
                                    group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                                    authorized_operations=_OPS_UNSET)

        if not ctx.authorize(session, A.DESCRIBE, A.GROUP, gid, "ShareGroupDescribe"):
            out.append(failed(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if share is None:
            out.append(failed(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        g = share.group(gid)
        if g is None:
            other = ctx.group_coordinator.group(gid) if ctx.group_coordinator is not None else None
            message = f"Group {gid} is not a share group." if other is not None else f"Group {gid} not found."
            out.append(failed(ErrorCode.GROUP_ID_NOT_FOUND, message))
            continue
        ops = ctx.authorized_ops(session, A.GROUP, gid) if request.include_authorized_operations else _OPS_UNSET
        out.append(R.DescribedGroup(
            error_code=0, error_message=None, group_id=gid, group_state=g.state, group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch, assignor_name="simple",
            members=[R.Member(member_id=m.member_id, rack_id=m.rack_id, member_epoch=m.member_epoch,
                              client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=list(m.subscribed_topic_names),
                              assignment=R.Assignment(topic_partitions=[
                                  R.TopicPartitions(topic_id=tid, topic_name=names.get(tid, ""), partitions=sorted(ps))
                                  for tid, ps in sorted(m.assigned.items(), key=lambda e: str(e[0])) if ps]))
                     for m in sorted(g.members.values(), key=lambda m: m.member_id)],
            authorized_operations=ops))
    return R(throttle_time_ms=0, groups=out)
