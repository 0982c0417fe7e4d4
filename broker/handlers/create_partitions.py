"""CreatePartitions (key 37), v0-3: raise a topic's partition count, as Kafka's
controller does (ReplicationControlManager.createPartitions): unknown topic
UNKNOWN_TOPIC_OR_PARTITION; the same count INVALID_PARTITIONS "Topic already has N
partition(s)."; fewer "... would not be an increase."; assignments must be null or name
one entry per new partition (INVALID_REPLICA_ASSIGNMENT otherwise), each listing only this
broker; a topic named twice INVALID_REQUEST; validate_only changes nothing. The new
partitions get logs at once and Metadata lists them."""

from __future__ import annotations

import logging
from collections import Counter

from protocol.errors import ErrorCode
from protocol.messages import CreatePartitionsResponse

from broker.errors import error_code_for
from broker.quotas import ThrottlingQuotaExceeded, mutation_quota_for
from broker.security import authorizer as A

log = logging.getLogger("chronolog.create_partitions")

Result = CreatePartitionsResponse.CreatePartitionsTopicResult


def handle(ctx, header, request, session=None):
    lm = ctx.log_manager
    counts = Counter(t.name for t in request.topics)
    mutations = mutation_quota_for(ctx, header, session, strict_since=3)
    results = []
    for t in request.topics:
        name = t.name
        if counts[name] > 1:
            results.append(Result(name=name, error_code=int(ErrorCode.INVALID_REQUEST), error_message="Duplicate topic name."))
            continue
        if not ctx.authorize(session, A.ALTER, A.TOPIC, name, "CreatePartitions"):
            results.append(Result(name=name, error_code=int(ErrorCode.TOPIC_AUTHORIZATION_FAILED),
                                  error_message="The topic authorization failed."))
            continue
        info = lm.get_topic(name)
        if info is None:
            results.append(Result(name=name, error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                  error_message="This server does not host this topic-partition."))
            continue
        current = info.num_partitions
        try:
            if t.count > current and t.assignments is not None:
                additional = t.count - current
                if len(t.assignments) != additional:
                    raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                   f"Attempted to add {additional} additional partition(s), but only "
                                   f"{len(t.assignments)} assignment(s) were specified.")
                for a in t.assignments:
                    ids = list(a.broker_ids)
                    if len(ids) != 1:
                        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"The manual partition assignment includes a partition with {len(ids)} replica(s), "
                                       f"but this is not consistent with previous partitions, which have 1 replica(s).")
                    if ids[0] != ctx.node_id:
                        raise _Refused(ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                                       f"The manual partition assignment includes broker {ids[0]}, but no such broker is registered.")
            if request.validate_only:
                lm.create_partitions(name, t.count, validate_only=True)
            else:
                lm.create_partitions(name, t.count, validate_only=True)
                mutations.record(t.count - current)  # controller_mutation_rate, after validation
                lm.create_partitions(name, t.count, validate_only=False)
        except ThrottlingQuotaExceeded as exc:
            results.append(Result(name=name, error_code=int(ErrorCode.THROTTLING_QUOTA_EXCEEDED), error_message=str(exc)))
            continue
        except _Refused as exc:
            results.append(Result(name=name, error_code=exc.code, error_message=str(exc)))
            continue
        except Exception as exc:
            results.append(Result(name=name, error_code=error_code_for(exc), error_message=str(exc)))
            continue
        results.append(Result(name=name, error_code=0, error_message=None))
    return CreatePartitionsResponse(throttle_time_ms=mutations.throttle_ms, results=results)


class _Refused(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = int(code)
