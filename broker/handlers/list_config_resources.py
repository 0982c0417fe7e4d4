"""ListConfigResources (key 74), v0-1: the resources that have configs (KIP-1142, Admin's
listConfigResources; v0 is Kafka 3.7's ListClientMetricsResources).

As Kafka 4.1's KafkaApis answers it:
- needs DESCRIBE_CONFIGS on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED;
- v0 lists CLIENT_METRICS resources only; v1 lists the types asked for, every supported
  type when none is asked; asking for a type outside them answers UNSUPPORTED_VERSION;
- listed, in Kafka's order: the groups that have group configs of their own (GROUP),
  the client-metrics subscriptions (CLIENT_METRICS: none, Chronolog takes no KIP-714
  subscriptions), this broker's id (BROKER) and every topic, internal ones included
  (TOPIC).
BROKER_LOGGER is not among the supported types: Chronolog has no runtime-configurable
loggers, and DescribeConfigs refuses that type too.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ListConfigResourcesResponse as R

from broker.handlers.describe_configs import BROKER, GROUP, TOPIC
from broker.security import authorizer as A

CLIENT_METRICS = 16
_SUPPORTED = {0: (CLIENT_METRICS,), 1: (TOPIC, BROKER, CLIENT_METRICS, GROUP)}


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE_CONFIGS, A.CLUSTER, A.CLUSTER_NAME, "ListConfigResources"):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), config_resources=[])
    supported = _SUPPORTED[min(header.api_version, 1)]
    wanted = set(getattr(request, "resource_types", None) or ()) or set(supported)
    if not wanted <= set(supported):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.UNSUPPORTED_VERSION), config_resources=[])
    out = []
    if GROUP in wanted and ctx.group_configs is not None:
        out += [R.ConfigResource(resource_name=g, resource_type=GROUP)
                for g, props in sorted(ctx.group_configs.all().items()) if props]
    if BROKER in wanted:
        out.append(R.ConfigResource(resource_name=str(ctx.node_id), resource_type=BROKER))
    if TOPIC in wanted:
        out += [R.ConfigResource(resource_name=t, resource_type=TOPIC) for t in sorted(ctx.log_manager.topics())]
    return R(throttle_time_ms=0, error_code=0, config_resources=out)
