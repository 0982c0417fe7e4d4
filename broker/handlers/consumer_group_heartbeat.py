"""ConsumerGroupHeartbeat (key 68), v0-1: the consumer group protocol of KIP-848
(broker.coordinator.consumer_group): join with epoch 0, heartbeat with the member epoch,
leave with -1 (-2 for a static member's temporary leave); each answer carries the
member's epoch, the heartbeat interval and, when it changed or the request was a full
one, its assignment by topic id. v1 members name themselves (a UUID they generate).

READ on the group is required (GROUP_AUTHORIZATION_FAILED) and DESCRIBE on every
subscribed topic (TOPIC_AUTHORIZATION_FAILED naming them), as Kafka 4's KafkaApis.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ConsumerGroupHeartbeatResponse as R

from broker.security import authorizer as A


def _error(code, message=None):
    return R(throttle_time_ms=0, error_code=int(code), error_message=message, member_id=None, member_epoch=0,
             heartbeat_interval_ms=0, assignment=None)


def handle(ctx, header, request, session=None):
    coord = getattr(ctx, "group_coordinator", None)
    if not ctx.authorize(session, A.READ, A.GROUP, request.group_id, "ConsumerGroupHeartbeat"):
        return _error(ErrorCode.GROUP_AUTHORIZATION_FAILED)
    if request.subscribed_topic_names:
        denied = ctx.unauthorized(session, A.DESCRIBE, A.TOPIC, request.subscribed_topic_names,
                                  "ConsumerGroupHeartbeat")
        if denied:
            return _error(ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                          "The group is not authorized to describe the topics: " + ", ".join(sorted(denied)) + ".")
    if coord is None:
        return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
    code, message, member_id, epoch, interval, assignment = coord.consumer.heartbeat(
        group_id=request.group_id, member_id=request.member_id, member_epoch=request.member_epoch,
        instance_id=request.instance_id, rack_id=request.rack_id, rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=request.subscribed_topic_names,
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor, owned=request.topic_partitions,
        client_id=header.client_id or "",
        client_host=("/" + session.client_ip) if session is not None else coord.client_host,
        version=header.api_version)
    if code:
        return _error(code, message)
    return R(throttle_time_ms=0, error_code=0, error_message=None, member_id=member_id, member_epoch=epoch,
             heartbeat_interval_ms=interval,
             assignment=None if assignment is None else R.Assignment(topic_partitions=[
                 R.TopicPartitions(topic_id=tid, partitions=sorted(ps))
                 for tid, ps in sorted(assignment.items(), key=lambda e: str(e[0])) if ps]))
