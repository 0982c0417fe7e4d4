"""ElectLeaders (key 43), v0-2, as a single-broker KRaft cluster answers it
(ReplicationControlManager.electLeaders): this broker leads every partition and is its
preferred replica, so no election is ever needed.

* ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top (v1+) and for every
  named partition.
* Election type (v1+) 0 PREFERRED or 1 UNCLEAN; another is INVALID_REQUEST
  "Unknown election type N" the same way.
* Named partitions: ELECTION_NOT_NEEDED each ("Leader election not needed for topic
  partition."), an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION "No such topic
  as t" / "No such partition as t-9".
* Null partitions (every partition): each topic with no partition results, since the
  ones that need no election are left out.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import ElectLeadersResponse as R

from broker.security import authorizer as A

NOT_NEEDED = "Leader election not needed for topic partition."


def _all_failed(request, code, message):
    results = [R.ReplicaElectionResult(topic=t.topic, partition_result=[
        R.PartitionResult(partition_id=p, error_code=int(code), error_message=message) for p in t.partitions])
        for t in request.topic_partitions or []]
    return R(throttle_time_ms=0, error_code=int(code), replica_election_results=results)


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "ElectLeaders"):
        return _all_failed(request, ErrorCode.CLUSTER_AUTHORIZATION_FAILED, "Cluster authorization failed.")
    election_type = request.election_type if header.api_version >= 1 else 0
    if election_type not in (0, 1):
        return _all_failed(request, ErrorCode.INVALID_REQUEST, f"Unknown election type {election_type}")
    lm = ctx.log_manager
    if request.topic_partitions is None:
        return R(throttle_time_ms=0, error_code=0, replica_election_results=[
            R.ReplicaElectionResult(topic=name, partition_result=[]) for name in sorted(lm.topics())])
    results = []
    for t in request.topic_partitions:
        info = lm.get_topic(t.topic)
        parts = []
        for p in t.partitions:
            if info is None:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such topic as {t.topic}"
            elif not 0 <= p < info.num_partitions:
                code, message = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"No such partition as {t.topic}-{p}"
            else:
                code, message = ErrorCode.ELECTION_NOT_NEEDED, NOT_NEEDED
            parts.append(R.PartitionResult(partition_id=p, error_code=int(code), error_message=message))
        results.append(R.ReplicaElectionResult(topic=t.topic, partition_result=parts))
    return R(throttle_time_ms=0, error_code=0, replica_election_results=results)
