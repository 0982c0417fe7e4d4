"""DescribeLogDirs (key 35), v0-5, as Kafka's ReplicaManager.describeLogDirs answers it
(v5's IsCordoned, KIP-1066, is always false: log dirs are never cordoned here).

Needs DESCRIBE on the cluster (else no results, and CLUSTER_AUTHORIZATION_FAILED at the
top level from v3). Every log dir (absolute path) is listed, with the partitions it holds
that the request names (null topics: every partition, internal topics included): size in
bytes of the partition's segments, offset lag 0 (the log end is the high watermark on a
single broker); a partition being copied to another log dir (AlterReplicaLogDirs) is also
listed in that dir as a future replica, with the bytes copied so far and the records its
copy may still miss as its lag; v4 adds the volume's total and usable bytes.
As Kafka, a topic of the dir is listed even when none of its partitions was asked for
(with no partitions). A dir that cannot be read answers KAFKA_STORAGE_ERROR for itself.
"""

from __future__ import annotations

import logging
import os

from protocol.errors import ErrorCode
from protocol.messages import DescribeLogDirsResponse as R

from broker.security import authorizer as A
from storage.log_manager import volume_bytes

log = logging.getLogger("chronolog.describe_log_dirs")



def describe_log_dirs(lm, wanted) -> list:
    """``wanted``: a set of (topic, partition), or None for every partition."""
    by_dir: dict[str, dict[str, list]] = {}
    for (topic, partition), lg in sorted(lm.logs().items()):
        parent = os.path.dirname(os.path.abspath(lg.dir))
        by_dir.setdefault(parent, {}).setdefault(topic, []).append((partition, lg))
    # partitions being copied to another log dir: listed there as future replicas, their
    # size what is copied so far, their lag the records the copy may still miss
    futures: dict[str, dict[str, list]] = {}
    for (topic, partition), move in sorted(lm.moves.items()):
        lag = max(0, lm.get_log(topic, partition).log_end_offset - move.copied_leo)
        futures.setdefault(move.dest_root, {}).setdefault(topic, []).append(
            R.DescribeLogDirsPartition(partition_index=partition, partition_size=move.future_bytes(), offset_lag=lag,
                                       is_future_key=True))
    results = []
    for d in lm.log_dirs:
        path = os.path.abspath(d)
        try:
            total, usable = volume_bytes(path)
            topics = []
            for topic in sorted(set(by_dir.get(path, {})) | set(futures.get(path, {}))):
                logs = by_dir.get(path, {}).get(topic, [])
                parts = [R.DescribeLogDirsPartition(partition_index=p, partition_size=lg.size_in_bytes, offset_lag=0,
                                                    is_future_key=False)
                         for p, lg in logs if wanted is None or (topic, p) in wanted]
                parts += [f for f in futures.get(path, {}).get(topic, [])
                          if wanted is None or (topic, f.partition_index) in wanted]
                topics.append(R.DescribeLogDirsTopic(name=topic, partitions=parts))
            results.append(R.DescribeLogDirsResult(error_code=0, log_dir=path, topics=topics, total_bytes=total,
                                                   usable_bytes=usable))
        except OSError as exc:
            log.warning("log dir %s cannot be described: %s", path, exc)
            results.append(R.DescribeLogDirsResult(error_code=int(ErrorCode.KAFKA_STORAGE_ERROR), log_dir=path,
                                                   topics=[], total_bytes=-1, usable_bytes=-1))
    return results


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "DescribeLogDirs"):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), results=[])
    wanted = None
    if request.topics is not None:
        wanted = {(t.topic, p) for t in request.topics for p in t.partitions}
    return R(throttle_time_ms=0, error_code=0, results=describe_log_dirs(ctx.log_manager, wanted))
