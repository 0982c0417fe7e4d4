"""Metadata (key 3), v0-12: this broker is the only node, leader of every partition.

Topics that do not exist are created when ``auto.create.topics.enable`` is on and the
request allows it (v4+ ``allow_auto_topic_creation``; always for v0-3), as Kafka does.
"""

from __future__ import annotations

import logging
import uuid

from protocol.errors import ErrorCode
from protocol.messages import MetadataResponse

from broker.errors import error_code_for
from storage import errors as se

log = logging.getLogger("chronolog.metadata")

_NULL_UUID = uuid.UUID(int=0)
_UNKNOWN_OPS = -(2**31)


def _topic_entry(ctx, info, version):
    node = ctx.node_id
    partitions = [
        MetadataResponse.MetadataResponsePartition(
            error_code=0,
            partition_index=p,
            leader_id=node,
            leader_epoch=0,
            replica_nodes=[node],
            isr_nodes=[node],
            offline_replicas=[],
        )
        for p in range(info.num_partitions)
    ]
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in _INTERNAL_TOPICS,
        partitions=partitions,
        topic_authorized_operations=_UNKNOWN_OPS,
    )


# Kafka's org.apache.kafka.common.internals.Topic.INTERNAL_TOPICS (the ones we create)
_INTERNAL_TOPICS = frozenset({"__consumer_offsets"})


def _error_entry(name, code, topic_id=_NULL_UUID):
    return MetadataResponse.MetadataResponseTopic(
        error_code=int(code),
        name=name,
        topic_id=topic_id,
        is_internal=False,
        partitions=[],
        topic_authorized_operations=_UNKNOWN_OPS,
    )


def handle(ctx, header, request, session=None):
    version = header.api_version
    lm = ctx.log_manager
    cfg = ctx.config
    topics_out = []
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        for name, info in sorted(lm.topics().items()):
            topics_out.append(_topic_entry(ctx, info, version))
    else:
        allow_auto = cfg.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        by_id = None
        for t in requested:
            name = t.name
            if name is None:
                # v10+: lookup by topic id
                if by_id is None:
                    by_id = {info.topic_id: info for info in lm.topics().values()}
                info = by_id.get(t.topic_id)
                if info is None:
                    topics_out.append(_error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, t.topic_id))
                else:
                    topics_out.append(_topic_entry(ctx, info, version))
                continue
            info = lm.get_topic(name)
            if info is None and allow_auto:
                try:
                    info = lm.create_topic(name, cfg.num_partitions, {})
                    log.info("auto-created topic %s with %d partition(s)", name, cfg.num_partitions)
                except se.TopicExistsError:
                    info = lm.get_topic(name)
                except Exception as exc:  # invalid name and the like
                    topics_out.append(_error_entry(name, error_code_for(exc)))
                    continue
            if info is None:
                topics_out.append(_error_entry(name, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION))
            else:
                topics_out.append(_topic_entry(ctx, info, version))
    host, port = ctx.endpoint(session)  # the endpoints of the listener the client came through
    broker = MetadataResponse.MetadataResponseBroker(node_id=ctx.node_id, host=host, port=port, rack=None)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[broker],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        topics=topics_out,
        cluster_authorized_operations=_UNKNOWN_OPS,
    )
