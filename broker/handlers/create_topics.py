"""CreateTopics (key 19), v0-7, with per-topic configs and validate_only."""

from __future__ import annotations

import logging
from collections import Counter

from protocol.errors import ErrorCode
from protocol.messages import CreateTopicsResponse

from broker.errors import error_code_for
from broker.quotas import ThrottlingQuotaExceeded, mutation_quota_for
from broker.security import authorizer as A
from config.describe import BrokerLayers, topic_entries

log = logging.getLogger("chronolog.create_topics")

#: partitions from which CreateTopics makes the topic's logs after answering (on first use
#: and in the background): making each costs a few file creations, 10,000 of them seconds
DEFER_CREATE_AT = 64

Result = CreateTopicsResponse.CreatableTopicResult


def _error(name, code, message):
    return Result(name=name, error_code=int(code), error_message=message, num_partitions=-1, replication_factor=-1)


def handle(ctx, header, request, session=None):
    lm = ctx.log_manager
    cfg = ctx.config
    # the configs echoed for each created topic, with their sources, as DescribeConfigs
    # reports them (Kafka builds both from the same ConfigHelper entries)
    per_broker, default = lm.dynamic_broker_configs()
    layers = BrokerLayers(lm.static_broker_config, default, per_broker)
    counts = Counter(t.name for t in request.topics)
    may_create_any = ctx.authorize(session, A.CREATE, A.CLUSTER, A.CLUSTER_NAME, "CreateTopics")
    mutations = mutation_quota_for(ctx, header, session, strict_since=6)
    results = []
    for t in request.topics:
        name = t.name
        if counts[name] > 1:
            results.append(_error(name, ErrorCode.INVALID_REQUEST, f"Create topics request from client contains topic {name} more than once"))
            continue
        if not may_create_any and not ctx.authorize(session, A.CREATE, A.TOPIC, name, "CreateTopics"):
            results.append(_error(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed."))
            continue
        if t.assignments:
            if t.num_partitions != -1 or t.replication_factor != -1:
                results.append(_error(name, ErrorCode.INVALID_REQUEST, "Both numPartitions or replicationFactor and replicasAssignments were set. Both cannot be used at the same time."))
                continue
            bad = [a for a in t.assignments if list(a.broker_ids) != [ctx.node_id]]
            if bad:
                results.append(_error(name, ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"Replica assignment must name only broker {ctx.node_id}, got {list(bad[0].broker_ids)}"))
                continue
            partitions = len(t.assignments)
            rf = 1
        else:
            partitions = cfg.num_partitions if t.num_partitions == -1 else t.num_partitions
            rf = cfg.default_replication_factor if t.replication_factor == -1 else t.replication_factor
        if partitions <= 0:
            results.append(_error(name, ErrorCode.INVALID_PARTITIONS, f"Number of partitions must be larger than 0, got {partitions}."))
            continue
        if rf <= 0:
            results.append(_error(name, ErrorCode.INVALID_REPLICATION_FACTOR, f"Replication factor must be larger than 0, got {rf}."))
            continue
        if rf > 1:
            results.append(_error(name, ErrorCode.INVALID_REPLICATION_FACTOR, f"Unable to replicate the partition {rf} time(s): The target replication factor of {rf} cannot be reached because only 1 broker(s) are registered."))
            continue
        configs = {}
        for c in t.configs:
            if c.value is None:
                continue
            configs[c.name] = c.value
        try:
            info = lm.validate_new_topic(name, partitions, configs)
            if not request.validate_only:
                mutations.record(partitions)  # controller_mutation_rate, after validation as Kafka
                # a large topic's partitions are made behind the answer, as Kafka's
                # brokers make them after the controller has created the topic
                info = lm.create_topic(name, partitions, configs, defer=partitions >= DEFER_CREATE_AT)
        except ThrottlingQuotaExceeded as exc:
            results.append(_error(name, ErrorCode.THROTTLING_QUOTA_EXCEEDED, str(exc)))
            continue
        except Exception as exc:
            code = error_code_for(exc)
            results.append(_error(name, code, str(exc)))
            continue
        if not request.validate_only:
            log.info("created topic %s (%d partition(s), configs %s)", name, partitions, configs or "{}")
        if not ctx.authorize(session, A.DESCRIBE_CONFIGS, A.TOPIC, name, "CreateTopics"):
            # created, but its configs are not shown (KafkaApis: topicConfigErrorCode)
            r = Result(name=name, topic_id=info.topic_id, error_code=0, error_message=None,
                       num_partitions=partitions, replication_factor=1, configs=[])
            r.topic_config_error_code = int(ErrorCode.TOPIC_AUTHORIZATION_FAILED)
            results.append(r)
            continue
        results.append(
            Result(
                name=name,
                topic_id=info.topic_id,
                error_code=0,
                error_message=None,
                num_partitions=partitions,
                replication_factor=1,
                configs=[
                    CreateTopicsResponse.CreatableTopicConfigs(
                        name=e.name, value=e.value, read_only=e.read_only, config_source=e.source,
                        is_sensitive=e.is_sensitive,
                    )
                    for e in topic_entries(info.config, info.overrides, layers)
                ],
            )
        )
    return CreateTopicsResponse(throttle_time_ms=mutations.throttle_ms, topics=results)

