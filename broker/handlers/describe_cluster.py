"""DescribeCluster (key 60), v0-2: this node is the cluster, its controller and its one
broker, never fenced (v2's IsFenced false; IncludeFencedBrokers changes nothing). Cluster
authorized operations: -2147483648 unless asked; when asked, the principal's (without an
authorizer, as Kafka: every operation the CLUSTER resource supports). v1 asking for
controller endpoints answers MISMATCHED_ENDPOINT_TYPE, an unknown endpoint type
UNSUPPORTED_ENDPOINT_TYPE, as a Kafka broker does (AuthHelper.computeDescribeClusterResponse)."""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import DescribeClusterResponse

_UNKNOWN_OPS = -(2**31)
BROKER_ENDPOINT = 1


def handle(ctx, header, request, session=None):
    endpoint_type = getattr(request, "endpoint_type", BROKER_ENDPOINT) if header.api_version >= 1 else BROKER_ENDPOINT
    if endpoint_type not in (1, 2):
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.UNSUPPORTED_ENDPOINT_TYPE),
            error_message=f"Unsupported endpoint type {endpoint_type}",
            endpoint_type=BROKER_ENDPOINT, cluster_id=ctx.cluster_id, controller_id=-1, brokers=[],
            cluster_authorized_operations=_UNKNOWN_OPS)
    if endpoint_type != BROKER_ENDPOINT:
        return DescribeClusterResponse(
            throttle_time_ms=0, error_code=int(ErrorCode.MISMATCHED_ENDPOINT_TYPE),
            error_message="The request was sent to an endpoint of type BROKER, but we wanted an endpoint of type CONTROLLER",
            endpoint_type=BROKER_ENDPOINT, cluster_id=ctx.cluster_id, controller_id=-1, brokers=[],
            cluster_authorized_operations=_UNKNOWN_OPS)
    host, port = ctx.endpoint(session)
    ops = (ctx.authorized_ops(session, 4, "kafka-cluster")  # CLUSTER
           if request.include_cluster_authorized_operations else _UNKNOWN_OPS)
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        brokers=[DescribeClusterResponse.DescribeClusterBroker(broker_id=ctx.node_id, host=host, port=port, rack=None)],
        cluster_authorized_operations=ops,
    )
