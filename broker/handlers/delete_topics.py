"""DeleteTopics (key 20), v0-6: by name (v0-5) or by name or topic id (v6)."""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import DeleteTopicsResponse
from protocol.schema import ZERO_UUID

from broker.errors import error_code_for
from broker.quotas import ThrottlingQuotaExceeded, mutation_quota_for
from broker.security import authorizer as A

log = logging.getLogger("chronolog.delete_topics")

Result = DeleteTopicsResponse.DeletableTopicResult


def handle(ctx, header, request, session=None):
    lm = ctx.log_manager
    version = header.api_version
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(n, ZERO_UUID) for n in request.topic_names]
    mutations = mutation_quota_for(ctx, header, session, strict_since=5)
    results = []
    for name, topic_id in wanted:
        if name is None:
            name = lm.topic_name(topic_id)
            info = lm.get_topic(name) if name is not None else None
            if info is None:
                results.append(Result(name=None, topic_id=topic_id, error_code=int(ErrorCode.UNKNOWN_TOPIC_ID), error_message=f"Topic id {topic_id} not found"))
                continue
            name = info.name
            if not ctx.authorize(session, A.DESCRIBE, A.TOPIC, name, "DeleteTopics"):
                # asked by id without DESCRIBE: the name is not disclosed
                results.append(Result(name=None, topic_id=topic_id, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                      error_message=None))
                continue
        if not ctx.authorize(session, A.DELETE, A.TOPIC, name, "DeleteTopics"):
            results.append(Result(name=name, topic_id=topic_id, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                  error_message=None))
            continue
        info = lm.get_topic(name)
        if info is None:
            results.append(Result(name=name, topic_id=topic_id, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), error_message=f"Topic {name} not found"))
            continue
        try:
            mutations.record(info.num_partitions)  # controller_mutation_rate
            lm.delete_topic(name)
        except ThrottlingQuotaExceeded as exc:
            results.append(Result(name=name, topic_id=info.topic_id, error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED),
                                  error_message=str(exc)))
            continue
        except Exception as exc:
            results.append(Result(name=name, topic_id=info.topic_id, error_code=error_code_for(exc), error_message=str(exc)))
            continue
        for p in range(info.num_partitions):
            ctx.notify_append(name, p)
        if ctx.metrics is not None:
            ctx.metrics.topic_deleted(name)
        if ctx.share_partitions is not None:  # share groups forget the topic (tombstones)
            ctx.share_partitions.topic_deleted(info.topic_id)
        log.info("deleted topic %s", name)
        results.append(Result(name=name, topic_id=info.topic_id, error_code=0, error_message=None))
    return DeleteTopicsResponse(throttle_time_ms=mutations.throttle_ms, responses=results)
