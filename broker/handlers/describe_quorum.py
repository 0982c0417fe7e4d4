"""DescribeQuorum (key 55), v0-2: the metadata quorum (Admin's describeMetadataQuorum,
``kafka-metadata-quorum.sh``), as a single combined KRaft node answers it.

Chronolog keeps its metadata in files beside the logs, not in a ``__cluster_metadata``
Raft log, and it is one node: the quorum it describes has this node as its only voter
and its leader, epoch 1, no observers, and an empty metadata log (high watermark and log
end offset 0). The leader reports itself fetched and caught up now, as Kafka's leader
does for itself (RaftUtil.toReplicaStates). v2 lists the voter's node with this broker's
listeners (advertised endpoints); its directory id is the zero Uuid (no KIP-853 voter
directory ids here).

As Kafka (ControllerApis / KafkaRaftClient.handleDescribeQuorumRequest):
- needs DESCRIBE on the cluster, else the top-level CLUSTER_AUTHORIZATION_FAILED;
- a request naming anything but exactly ``__cluster_metadata`` partition 0 gets every
  partition it names back with UNKNOWN_TOPIC_OR_PARTITION.
"""

from __future__ import annotations

from protocol.errors import ErrorCode
from protocol.messages import DescribeQuorumResponse as R
from protocol.schema import ZERO_UUID

from broker.security import authorizer as A

METADATA_TOPIC = "__cluster_metadata"
LEADER_EPOCH = 1


def handle(ctx, header, request, session=None):
    if not ctx.authorize(session, A.DESCRIBE, A.CLUSTER, A.CLUSTER_NAME, "DescribeQuorum"):
        return R(error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), error_message="Cluster authorization failed.",
                 topics=[], nodes=[])
    topics = request.topics or []
    if not (len(topics) == 1 and topics[0].topic_name == METADATA_TOPIC and len(topics[0].partitions) == 1
            and topics[0].partitions[0].partition_index == 0):
        return R(error_code=0, error_message=None, nodes=[], topics=[
            R.TopicData(topic_name=t.topic_name, partitions=[
                R.PartitionData(partition_index=p.partition_index,
                                error_code=int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
                                error_message="This server does not host this topic-partition.",
                                leader_id=0, leader_epoch=0, high_watermark=0, current_voters=[], observers=[])
                for p in t.partitions])
            for t in topics])
    now = ctx.clock.time_ms()
    node = ctx.node_id
    voter = R.ReplicaState(replica_id=node, replica_directory_id=ZERO_UUID, log_end_offset=0,
                           last_fetch_timestamp=now, last_caught_up_timestamp=now)
    return R(error_code=0, error_message=None, topics=[
        R.TopicData(topic_name=METADATA_TOPIC, partitions=[
            R.PartitionData(partition_index=0, error_code=0, error_message=None, leader_id=node,
                            leader_epoch=LEADER_EPOCH, high_watermark=0, current_voters=[voter], observers=[])])],
        nodes=[R.Node(node_id=node, listeners=_listeners(ctx))])


def _listeners(ctx) -> list:
    out = []
    for lst in ctx.listeners:
        host, port = lst.endpoint()
        out.append(R.Listener(name=lst.name, host=host, port=port))
    if not out:  # a context made without listeners (in-process use): its one endpoint
        host, port = ctx.endpoint()
        out.append(R.Listener(name="PLAINTEXT", host=host, port=port))
    return out
