"""ListPartitionReassignments (key 46), v0: the ongoing reassignments, as Kafka's
controller lists them: on a single broker there never is one, so no topics (for the
named topics or for all). DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED
with each named partition listed without replicas (Kafka's getErrorResponse)."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ListPartitionReassignmentsResponse as R

from broker.security import authorizer as A


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "ListPartitionReassignments"):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                 error_message="Cluster authorization failed.", topics=[
                     R.OngoingTopicReassignment(name=t.name, partitions=[
                         R.OngoingPartitionReassignment(partition_index=p, replicas=[], adding_replicas=[],
                                                        removing_replicas=[]) for p in t.partition_indexes])
                     for t in request.topics or []])
    return R(throttle_time_ms=0, error_code=0, error_message=None, topics=[])
