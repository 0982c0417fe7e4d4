"""AlterPartitionReassignments (key 45), v0-1, as a single-broker KRaft cluster answers it
(ReplicationControlManager.alterPartitionReassignments).

v1 (Kafka 4.1) carries AllowReplicationFactorChange, echoed in the answer. Kafka checks it
after the assignment is validated, and on one broker the only valid assignment is the
current one (replication factor 1), so it never refuses anything here.

* ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED at the top and per partition.
* Per partition: an unknown topic or partition UNKNOWN_TOPIC_OR_PARTITION ("Unable to
  find a topic named t." / "Unable to find partition t:9."); null replicas (cancel)
  NO_REASSIGNMENT_IN_PROGRESS, as none ever is; target replicas checked as Kafka's
  validateManualPartitionAssignment (empty, a broker that is not this one, a broker
  twice: INVALID_REPLICA_ASSIGNMENT with Kafka's message); ``[this broker]`` is the
  assignment already, nothing to move: success.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import AlterPartitionReassignmentsResponse as R

from broker.security import authorizer as A


def _check_replicas(replicas, node_id):
    """-> (code, message) of validateManualPartitionAssignment, or None when valid."""
    if not replicas:
        return ErrorCode.INVALID_REPLICA_ASSIGNMENT, "The manual partition assignment includes an empty replica list."
    prev = None
    for b in sorted(replicas):
        if b != node_id:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes broker {b}, but no such broker is registered.")
        if b == prev:
            return (ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"The manual partition assignment includes the broker {prev} more than once.")
        prev = b
    return None


def handle(ctx, header, request, session=None):
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)  # v1: echoed
    if not ctx.authorize(session, A.ALTER, A.CLUSTER, A.CLUSTER_NAME, "AlterPartitionReassignments"):
        code, msg = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), "Cluster authorization failed."
        return R(throttle_time_ms=0, allow_replication_factor_change=allow_rf_change, error_code=code,
                 error_message=msg, responses=[
            R.ReassignableTopicResponse(name=t.name, partitions=[
                R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=code, error_message=msg)
                for p in t.partitions]) for t in request.topics])
    lm = ctx.log_manager
    out = []
    for t in request.topics:
        info = lm.get_topic(t.name)
        parts = []
        for p in t.partitions:
            if info is None:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find a topic named {t.name}."
            elif not 0 <= p.partition_index < info.num_partitions:
                err = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"Unable to find partition {t.name}:{p.partition_index}."
            elif p.replicas is None:
                err = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS, "No partition reassignment is in progress."
            else:
                err = _check_replicas(p.replicas, ctx.node_id)
            code, msg = err if err is not None else (0, None)
            parts.append(R.ReassignablePartitionResponse(partition_index=p.partition_index, error_code=int(code),
                                                         error_message=msg))
        out.append(R.ReassignableTopicResponse(name=t.name, partitions=parts))
    return R(throttle_time_ms=0, allow_replication_factor_change=allow_rf_change, error_code=0, error_message=None,
             responses=out)
