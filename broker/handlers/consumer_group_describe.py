"""ConsumerGroupDescribe (key 69), v0-1 (v1: each member's type, 0 classic, 1 consumer
protocol): groups of the consumer protocol (KIP-848) with
their state, group and assignment epochs, assignor, and members with their current and
target assignments (topic id and name). A classic group or an unknown id answers
GROUP_ID_NOT_FOUND with Kafka's message; DESCRIBE on the group is required.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupDescribeResponse as R

from broker.security import authorizer as A

_OPS_UNSET = -(2**31)


def _assignment(lm, assignment: dict):
    return R.Assignment(topic_partitions=[
        R.TopicPartitions(topic_id=tid, topic_name=lm.topic_name(tid) or "", partitions=sorted(ps))
        for tid, ps in sorted(assignment.items(), key=lambda e: str(e[0])) if ps])


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    lm = ctx.log_manager
    out = []
    for gid in request.group_ids:
        def failed(code, message=None):
            return R.DescribedGroup(error_code=int(code), error_message=message, group_id=gid, group_state="",
                                    group_epoch=-1, assignment_epoch=-1, assignor_name="", members=[],
                                    authorized_operations=_OPS_UNSET)

        if not ctx.authorize(session, A.DESCRIBE, A.GROUP, gid, "ConsumerGroupDescribe"):
            out.append(failed(ErrorCode.GROUP_AUTHORIZATION_FAILED))
            continue
        if coord is None:
            out.append(failed(ErrorCode.COORDINATOR_NOT_AVAILABLE))
            continue
        g = coord.group(gid)
        if g is None:
            out.append(failed(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} not found."))
            continue
        if g.kind != "consumer":
            out.append(failed(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {gid} is not a consumer group."))
            continue
        ops = ctx.authorized_ops(session, A.GROUP, gid) if request.include_authorized_operations else _OPS_UNSET
        out.append(R.DescribedGroup(
            error_code=0, error_message=None, group_id=gid, group_state=g.state, group_epoch=g.group_epoch,
            assignment_epoch=g.assignment_epoch, assignor_name=g.preferred_assignor(coord.consumer.assignors[0]),
            members=[R.Member(member_id=m.member_id, instance_id=m.instance_id, rack_id=m.rack_id,
                              member_epoch=m.member_epoch, client_id=m.client_id, client_host=m.client_host,
                              subscribed_topic_names=list(m.subscribed_topic_names),
                              subscribed_topic_regex=m.subscribed_topic_regex,
                              assignment=_assignment(lm, m.assigned),
                              target_assignment=_assignment(lm, g.target.get(m.member_id, {})),
                              member_type=0 if m.classic is not None else 1)  # KIP-1099: classic 0, consumer 1
                     for m in sorted(g.members.values(), key=lambda m: m.member_id)],
            authorized_operations=ops))
    return R(throttle_time_ms=0, groups=out)
