"""ShareGroupHeartbeat (key 76), v1: membership of a share group (KIP-932,
broker.share.group): join with epoch 0 and the subscribed topics, heartbeat with the
member epoch, leave with -1; each answer carries the member's epoch, the heartbeat
interval and, when it changed or the request named its topics, its assignment by topic
id.

READ on the group is required (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
subscribed topic (TOPIC_AUTHORIZATION_FAILED naming them), as Kafka's KafkaApis.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ShareGroupHeartbeatResponse as R

from broker.security import authorizer as A


def _error(code, message=None):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, member_id=None, member_epoch=0,
             heartbeat_interval_ms=0, assignment=None)


def handle(ctx, header, request, session=None):
    share = getattr(ctx, "share_groups", None)
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "ShareGroupHeartbeat"):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if request.subscribed_topic_names:
        denied = ctx.unauthorized(session, A.DESCRIBE, A.TOPIC, request.subscribed_topic_names, "ShareGroupHeartbeat")
        if denied:
            return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          "The group is not authorized to describe the topics: " + ", ".join(sorted(denied)) + ".")
    if share is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code, message, member_id, epoch, interval, assignment = share.heartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        rack_id=request.rack_id, subscribed_topic_names=request.subscribed_topic_names,
        client_id=header.client_id or "",
        client_host=("/" + session.client_ip) if session is not None else "/127.0.0.1")
    if code:
        return _error(code, message)
    return R(throttle_time_ms=0, error_code=0, error_message=None, member_id=member_id, member_epoch=epoch,
             heartbeat_interval_ms=interval,
             assignment=None if assignment is None else R.Assignment(topic_partitions=[
                 R.TopicPartitions(topic_id=tid, partitions=sorted(ps))
                 for tid, ps in sorted(assignment.items(), key=lambda e: str(e[0])) if ps]))
