"""Metadata (key 3), v0-13: this broker is the only node, leader of every partition.
v13's top-level error code (KIP-1102's REBOOTSTRAP_REQUIRED) is always 0 here: the
cluster is this one node.

Topics that do not exist are created when ``auto.create.topics.enable`` is on and the
request allows it (v4+ ``allow_auto_topic_creation``; always for v0-3), as Kafka does.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import MetadataResponse
from protocol.schema import ZERO_UUID

from broker.errors import error_code_for
from broker.security import authorizer as A
from storage import errors as se
from storage.log_manager import INTERNAL_TOPICS as _INTERNAL_TOPICS, LEADER_EPOCH

log = logging.getLogger("chronolog.metadata")

_UNKNOWN_OPS = -(2**31)


#: node id -> partition entries 0, 1, ... (every partition of every topic reads the same on
#: a single node: led here, one replica, in sync). Shared between responses and never
#: changed after they are made, so a topic of 10,000 partitions is not 10,000 new
#: objects per Metadata request.
_PARTITION_ENTRIES: dict[int, list] = {}


def _partition_entries(node: int, count: int) -> list:
    made = _PARTITION_ENTRIES.setdefault(node, [])
    for p in range(len(made), count):
        made.append(MetadataResponse.MetadataResponsePartition(
            error_code=0,
            partition_index=p,
            leader_id=node,
            leader_epoch=LEADER_EPOCH,
            replica_nodes=[node],
            isr_nodes=[node],
            offline_replicas=[],
        ))
    return made[:count]


def _topic_entry(ctx, info, version):
    return MetadataResponse.MetadataResponseTopic(
        error_code=0,
        name=info.name,
        topic_id=info.topic_id,
        is_internal=info.name in _INTERNAL_TOPICS,
        partitions=_partition_entries(ctx.node_id, info.num_partitions),
        topic_authorized_operations=_UNKNOWN_OPS,
    )


def _error_entry(name, code, topic_id=ZERO_UUID):
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
    want_topic_ops = version >= 8 and getattr(request, "include_topic_authorized_operations", False)
    want_cluster_ops = 8 <= version <= 10 and getattr(request, "include_cluster_authorized_operations", False)

    def entry(info):
        e = _topic_entry(ctx, info, version)
        if want_topic_ops:
            e.topic_authorized_operations = ctx.authorized_ops(session, A.TOPIC, info.name)
        return e

    def may_describe(name):
        return ctx.authorize(session, A.DESCRIBE, A.TOPIC, name, "Metadata")

    if requested is None or (version == 0 and not requested):
        # all topics: the ones the principal may not describe are left out
        for name, info in sorted(lm.topics().items()):
            if may_describe(name):
                topics_out.append(entry(info))
    else:
        allow_auto = cfg.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        may_create_any = None
        for t in requested:
            name = t.name
            if name is None:
                # v10+: lookup by topic id
                found = lm.topic_name(t.topic_id)
                info = lm.get_topic(found) if found is not None else None
                if info is None or not may_describe(info.name):
                    topics_out.append(_error_entry(None, ErrorCode.UNKNOWN_TOPIC_ID, t.topic_id))
                else:
                    topics_out.append(entry(info))
                continue
            if not may_describe(name):
                # never tell whether it exists
                topics_out.append(_error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            info = lm.get_topic(name)
            if info is None and allow_auto:
                if may_create_any is None:
                    may_create_any = ctx.authorize(session, A.CREATE, A.CLUSTER, A.CLUSTER_NAME, "Metadata")
                if not may_create_any and not ctx.authorize(session, A.CREATE, A.TOPIC, name, "Metadata"):
                    topics_out.append(_error_entry(name, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                    continue
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
                topics_out.append(entry(info))
    host, port = ctx.endpoint(session)  # the endpoints of the listener the client came through
    broker = MetadataResponse.MetadataResponseBroker(node_id=ctx.node_id, host=host, port=port, rack=None)
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[broker],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.node_id,
        topics=topics_out,
        cluster_authorized_operations=(ctx.authorized_ops(session, A.CLUSTER, A.CLUSTER_NAME)
                                       if want_cluster_ops else _UNKNOWN_OPS),
    )
