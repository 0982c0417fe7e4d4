"""AlterReplicaLogDirs (key 34), v0-2: move partitions between this broker's log dirs
(Admin's alterReplicaLogDirs, ``kafka-reassign-partitions.sh`` with log dirs), as
Kafka's ReplicaManager.alterReplicaLogDirs answers it.

Needs ALTER on the cluster, else every partition answers CLUSTER_AUTHORIZATION_FAILED.
Per partition: a path that is not one of ``log.dirs`` (as an absolute path) answers
LOG_DIR_NOT_FOUND, a partition this broker does not host UNKNOWN_TOPIC_OR_PARTITION, a
partition already in that dir NONE (a move of it elsewhere still under way is
cancelled). Otherwise NONE, and the partition moves (``LogManager.move_partition``): on
the same filesystem by one rename before the answer; on another by a copy in the
background, switched over once it has caught up (storage.partition_move), as Kafka
answers before its future replica has caught up. A move refused while the cleaner works
on the partition answers KAFKA_STORAGE_ERROR with the reason in the broker log; nothing
is moved then.
"""

from __future__ import annotations

import logging

from protocol.errors import ErrorCode
from protocol.messages import AlterReplicaLogDirsResponse as R

from broker.errors import error_code_for
from broker.security import authorizer as A
from storage import errors as se

log = logging.getLogger("chronolog.alter_replica_log_dirs")


def handle(ctx, header, request, session=None):
    allowed = ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "AlterReplicaLogDirs")
    results: dict[str, list] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                if not allowed:
                    code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
                else:
                    code = _move(ctx, t.name, p, d.path)
                results.setdefault(t.name, []).append(R.AlterReplicaLogDirPartitionResult(partition_index=p,
                                                                                          error_code=code))
    return R(throttle_time_ms=0, results=[R.AlterReplicaLogDirTopicResult(topic_name=name, partitions=parts)
                                          for name, parts in results.items()])


def _move(ctx, topic, partition, path) -> int:
    try:
        ctx.log_manager.move_partition(topic, partition, path)
        return 0
    except (se.LogDirNotFoundError, se.UnknownTopicOrPartitionError, se.KafkaStorageError) as exc:
        log.warning("unable to alter the log dir of %s-%d to %s: %s", topic, partition, path, exc)
        return error_code_for(exc)
