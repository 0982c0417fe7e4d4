"""Every API that Kafka's KafkaApis authorizes, over the wire: refused without the ACL it
needs (with Kafka's *_AUTHORIZATION_FAILED code, in the field where Kafka puts it) and
served once the ACL exists, the ACLs added one at a time where an API checks several.

alice authenticates with SASL/PLAIN on a raw connection and sends requests built by the
codec; admin (a super user) creates the fixtures and the ACLs through confluent-kafka's
admin client, and removes alice's ACLs after each API.
"""

from __future__ import annotations

import struct
import time

import pytest

from protocol import codec
from protocol import records as R
from protocol import messages as M
from tests.integration.helpers import RawConn, start_broker, unique_topic

TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED = 29, 30, 31, 53
DENIED = (TOPIC_DENIED, GROUP_DENIED, CLUSTER_DENIED, TXN_DENIED)
ANY_ALLOWED = "served"  # any answer but an authorization failure
ALICE_PW, ADMIN_PW = "alice-secret", "admin-secret"
JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
        f'user_admin="{ADMIN_PW}" user_alice="{ALICE_PW}";')


class Alice:
    """A raw connection authenticated as alice (SaslHandshake v1 + SaslAuthenticate v1)."""

    def __init__(self, port: int) -> None:
        self.conn = RawConn(port)
        self.cid = 0
        mech = b"PLAIN"
        resp = self.conn.request(17, 1, struct.pack(">h", len(mech)) + mech, self._next())
        assert struct.unpack_from(">h", resp)[0] == 0
        token = b"\0alice\0" + ALICE_PW.encode()
        resp = self.conn.request(36, 1, struct.pack(">i", len(token)) + token, self._next())
        assert struct.unpack_from(">h", resp)[0] == 0, resp

    def _next(self) -> int:
        self.cid += 1
        return self.cid

    def call(self, api_key: int, version: int, body):
        cid = self._next()
        self.conn.send(codec.encode_request(M.RequestHeader(api_key=api_key, api_version=version,
                                                            correlation_id=cid, client_id="acl-matrix"), body))
        got, resp = codec.decode_response(api_key, version, self.conn.recv_frame())
        assert got == cid
        return resp

    def close(self) -> None:
        self.conn.sock.close()


def _batch() -> bytes:
    return R.build_batch([(int(time.time() * 1000), None, b"v")])


def _cases(topic, doomed, group, new_topic, topic_id=None):
    """(label, api key, version, request, error of the response, steps). A step is
    (ACLs added before it, the code expected). ACLs: (resource type, name, operation)."""
    T = M
    c = ("cluster", "kafka-cluster")
    return [
        ("Produce", 0, 9, T.ProduceRequest(transactional_id=None, acks=-1, timeout_ms=5000, topic_data=[
            T.ProduceRequest.TopicProduceData(name=topic, partition_data=[
                T.ProduceRequest.PartitionProduceData(index=0, records=_batch())])]),
         lambda r: r.responses[0].partition_responses[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "WRITE")], 0)]),
        ("Fetch", 1, 12, T.FetchRequest(replica_id=-1, max_wait_ms=0, min_bytes=0, topics=[
            T.FetchRequest.FetchTopic(topic=topic, partitions=[T.FetchRequest.FetchPartition(
                partition=0, fetch_offset=0, partition_max_bytes=1 << 16)])], forgotten_topics_data=[]),
         lambda r: r.responses[0].partitions[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("ListOffsets", 2, 7, T.ListOffsetsRequest(replica_id=-1, topics=[T.ListOffsetsRequest.ListOffsetsTopic(
            name=topic, partitions=[T.ListOffsetsRequest.ListOffsetsPartition(partition_index=0, timestamp=-1)])]),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("Metadata", 3, 12, T.MetadataRequest(topics=[T.MetadataRequest.MetadataRequestTopic(name=topic)],
                                              allow_auto_topic_creation=False),
         lambda r: r.topics[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("OffsetCommit", 8, 8, T.OffsetCommitRequest(group_id=group, generation_id_or_member_epoch=-1, member_id="",
                                                     topics=[T.OffsetCommitRequest.OffsetCommitRequestTopic(
                                                         name=topic, partitions=[
                                                             T.OffsetCommitRequest.OffsetCommitRequestPartition(
                                                                 partition_index=0, committed_offset=0)])]),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "READ")], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("OffsetFetch", 9, 8, T.OffsetFetchRequest(groups=[T.OffsetFetchRequest.OffsetFetchRequestGroup(
            group_id=group, topics=[T.OffsetFetchRequest.OffsetFetchRequestTopics(name=topic, partition_indexes=[0])])]),
         lambda r: r.groups[0].error_code or r.groups[0].topics[0].partitions[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DESCRIBE")], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("FindCoordinator", 10, 4, T.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]),
         lambda r: r.coordinators[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DESCRIBE")], 0)]),
        ("JoinGroup", 11, 7, T.JoinGroupRequest(group_id=group, session_timeout_ms=10000, rebalance_timeout_ms=10000,
                                                member_id="", protocol_type="consumer", protocols=[
                                                    T.JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=b"")]),
         lambda r: r.error_code,
         [([], GROUP_DENIED), ([("group", group, "READ")], 79)]),  # MEMBER_ID_REQUIRED: it got in
        ("Heartbeat", 12, 4, T.HeartbeatRequest(group_id=group, generation_id=1, member_id="m"),
         lambda r: r.error_code, [([], GROUP_DENIED), ([("group", group, "READ")], ANY_ALLOWED)]),
        ("LeaveGroup", 13, 4, T.LeaveGroupRequest(group_id=group, members=[T.LeaveGroupRequest.MemberIdentity(member_id="m")]),
         lambda r: r.error_code, [([], GROUP_DENIED), ([("group", group, "READ")], ANY_ALLOWED)]),
        ("SyncGroup", 14, 5, T.SyncGroupRequest(group_id=group, generation_id=1, member_id="m", assignments=[]),
         lambda r: r.error_code, [([], GROUP_DENIED), ([("group", group, "READ")], ANY_ALLOWED)]),
        ("DescribeGroups", 15, 5, T.DescribeGroupsRequest(groups=[group]), lambda r: r.groups[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DESCRIBE")], 0)]),
        # ListGroups filters: a group alice may not describe is left out (no error code)
        ("ListGroups", 16, 4, T.ListGroupsRequest(states_filter=[]),
         lambda r: 0 if group in [g.group_id for g in r.groups] else GROUP_DENIED,
         [([], GROUP_DENIED), ([("group", group, "DESCRIBE")], 0)]),
        ("OffsetDelete", 47, 0, T.OffsetDeleteRequest(group_id=group, topics=[T.OffsetDeleteRequest.OffsetDeleteRequestTopic(
            name=topic, partitions=[T.OffsetDeleteRequest.OffsetDeleteRequestPartition(partition_index=0)])]),
         lambda r: r.error_code or r.topics[0].partitions[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DELETE")], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("DeleteGroups", 42, 2, T.DeleteGroupsRequest(groups_names=[group]), lambda r: r.results[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DELETE")], 0)]),
        ("CreateTopics", 19, 7, T.CreateTopicsRequest(topics=[T.CreateTopicsRequest.CreatableTopic(
            name=new_topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5000, validate_only=True),
         lambda r: r.topics[0].error_code,
         [([], TOPIC_DENIED), ([("topic", new_topic, "CREATE")], 0)]),
        ("CreateTopics (cluster CREATE)", 19, 7, T.CreateTopicsRequest(topics=[T.CreateTopicsRequest.CreatableTopic(
            name=new_topic, num_partitions=1, replication_factor=1, assignments=[], configs=[])],
            timeout_ms=5000, validate_only=True),
         lambda r: r.topics[0].error_code,
         [([], TOPIC_DENIED), ([(*c, "CREATE")], 0)]),
        ("DeleteRecords", 21, 2, T.DeleteRecordsRequest(topics=[T.DeleteRecordsRequest.DeleteRecordsTopic(
            name=topic, partitions=[T.DeleteRecordsRequest.DeleteRecordsPartition(partition_index=0, offset=0)])],
            timeout_ms=5000),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "DELETE")], 0)]),
        ("DeleteTopics", 20, 6, T.DeleteTopicsRequest(topics=[T.DeleteTopicsRequest.DeleteTopicState(name=doomed)],
                                                      timeout_ms=5000),
         lambda r: r.responses[0].error_code,
         [([], TOPIC_DENIED), ([("topic", doomed, "DELETE")], 0)]),
        ("InitProducerId", 22, 4, T.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60000,
                                                          producer_id=-1, producer_epoch=-1),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "IDEMPOTENT_WRITE")], 0)]),
        ("InitProducerId (transactional)", 22, 4, T.InitProducerIdRequest(
            transactional_id="tx-matrix", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=-1),
         lambda r: r.error_code, [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "WRITE")], ANY_ALLOWED)]),
        ("AddPartitionsToTxn", 24, 3, T.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id="tx-matrix", v3_and_below_producer_id=0, v3_and_below_producer_epoch=0,
            v3_and_below_topics=[T.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])]),
         lambda r: r.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code,
         [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "WRITE")], TOPIC_DENIED),
          ([("topic", topic, "WRITE")], ANY_ALLOWED)]),
        ("AddPartitionsToTxn v4 (broker to broker)", 24, 4, T.AddPartitionsToTxnRequest(transactions=[]),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "CLUSTER_ACTION")], 0)]),
        ("AddOffsetsToTxn", 25, 3, T.AddOffsetsToTxnRequest(transactional_id="tx-matrix", producer_id=0,
                                                            producer_epoch=0, group_id=group),
         lambda r: r.error_code,
         [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "WRITE")], GROUP_DENIED),
          ([("group", group, "READ")], ANY_ALLOWED)]),
        ("EndTxn", 26, 3, T.EndTxnRequest(transactional_id="tx-matrix", producer_id=0, producer_epoch=0,
                                          committed=True),
         lambda r: r.error_code, [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "WRITE")], ANY_ALLOWED)]),
        ("TxnOffsetCommit", 28, 3, T.TxnOffsetCommitRequest(
            transactional_id="tx-matrix", group_id=group, producer_id=0, producer_epoch=0, generation_id=-1,
            member_id="", group_instance_id=None, topics=[T.TxnOffsetCommitRequest.TxnOffsetCommitRequestTopic(
                name=topic, partitions=[T.TxnOffsetCommitRequest.TxnOffsetCommitRequestPartition(
                    partition_index=0, committed_offset=0, committed_leader_epoch=-1, committed_metadata="")])]),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "WRITE")], GROUP_DENIED),
          ([("group", group, "READ")], TOPIC_DENIED), ([("topic", topic, "READ")], ANY_ALLOWED)]),
        ("DescribeTransactions", 65, 0, T.DescribeTransactionsRequest(transactional_ids=["tx-matrix"]),
         lambda r: r.transaction_states[0].error_code,
         [([], TXN_DENIED), ([("transactional_id", "tx-matrix", "DESCRIBE")], ANY_ALLOWED)]),
        ("DescribeProducers", 61, 0, T.DescribeProducersRequest(topics=[
            T.DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[0])]),
         lambda r: r.topics[0].partitions[0].error_code, [([], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("WriteTxnMarkers", 27, 1, T.WriteTxnMarkersRequest(markers=[T.WriteTxnMarkersRequest.WritableTxnMarker(
            producer_id=999999, producer_epoch=0, transaction_result=False, coordinator_epoch=0,
            topics=[T.WriteTxnMarkersRequest.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])])]),
         lambda r: r.markers[0].topics[0].partitions[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "CLUSTER_ACTION")], 0)]),
        ("DescribeConfigs (topic)", 32, 4, T.DescribeConfigsRequest(resources=[
            T.DescribeConfigsRequest.DescribeConfigsResource(resource_type=2, resource_name=topic, configuration_keys=None)]),
         lambda r: r.results[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "DESCRIBE_CONFIGS")], 0)]),
        ("DescribeConfigs (broker)", 32, 4, T.DescribeConfigsRequest(resources=[
            T.DescribeConfigsRequest.DescribeConfigsResource(resource_type=4, resource_name="0", configuration_keys=None)]),
         lambda r: r.results[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "DESCRIBE_CONFIGS")], 0)]),
        ("AlterConfigs (topic)", 33, 2, T.AlterConfigsRequest(resources=[T.AlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name=topic, configs=[T.AlterConfigsRequest.AlterableConfig(
                name="retention.ms", value="86400000")])], validate_only=True),
         lambda r: r.responses[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "ALTER_CONFIGS")], 0)]),
        ("IncrementalAlterConfigs (broker)", 44, 1, T.IncrementalAlterConfigsRequest(resources=[
            T.IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=4, resource_name="0", configs=[
                T.IncrementalAlterConfigsRequest.AlterableConfig(name="log.retention.ms", config_operation=0,
                                                                 value="86400000")])], validate_only=True),
         lambda r: r.responses[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "ALTER_CONFIGS")], 0)]),
        ("DescribeConfigs (group)", 32, 4, T.DescribeConfigsRequest(resources=[
            T.DescribeConfigsRequest.DescribeConfigsResource(resource_type=32, resource_name=group,
                                                             configuration_keys=None)]),
         lambda r: r.results[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "DESCRIBE_CONFIGS")], 0)]),
        ("IncrementalAlterConfigs (group)", 44, 1, T.IncrementalAlterConfigsRequest(resources=[
            T.IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=32, resource_name=group, configs=[
                T.IncrementalAlterConfigsRequest.AlterableConfig(name="consumer.session.timeout.ms",
                                                                 config_operation=0, value="50000")])],
            validate_only=True),
         lambda r: r.responses[0].error_code,
         [([], GROUP_DENIED), ([("group", group, "ALTER_CONFIGS")], 0)]),
        ("CreatePartitions", 37, 3, T.CreatePartitionsRequest(topics=[T.CreatePartitionsRequest.CreatePartitionsTopic(
            name=topic, count=2, assignments=None)], timeout_ms=5000, validate_only=True),
         lambda r: r.results[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "ALTER")], 0)]),
        # Kafka serves DescribeCluster to anyone; the authorized operations it reports are
        # empty (0) without DESCRIBE on the cluster, and hold DESCRIBE (bit 8) with it
        ("DescribeCluster", 60, 1, T.DescribeClusterRequest(include_cluster_authorized_operations=True),
         lambda r: r.error_code or (0 if r.cluster_authorized_operations & (1 << 8) else CLUSTER_DENIED),
         [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        ("DescribeTopicPartitions", 75, 0, T.DescribeTopicPartitionsRequest(
            topics=[T.DescribeTopicPartitionsRequest.TopicRequest(name=topic)], response_partition_limit=10,
            cursor=None),
         lambda r: r.topics[0].error_code, [([], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("ElectLeaders", 43, 2, T.ElectLeadersRequest(election_type=0, timeout_ms=1000, topic_partitions=[
            T.ElectLeadersRequest.TopicPartitions(topic=topic, partitions=[0])]),
         lambda r: r.replica_election_results[0].partition_result[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "ALTER")], 84)]),
        ("AlterPartitionReassignments", 45, 0, T.AlterPartitionReassignmentsRequest(timeout_ms=1000, topics=[
            T.AlterPartitionReassignmentsRequest.ReassignableTopic(name=topic, partitions=[
                T.AlterPartitionReassignmentsRequest.ReassignablePartition(partition_index=0, replicas=[0])])]),
         lambda r: r.error_code or r.responses[0].partitions[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "ALTER")], 0)]),
        ("ListPartitionReassignments", 46, 0, T.ListPartitionReassignmentsRequest(timeout_ms=1000, topics=None),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        # brokers ask with CLUSTER_ACTION, consumers (KIP-320 validation) with DESCRIBE on the topic
        ("OffsetForLeaderEpoch", 23, 4, T.OffsetForLeaderEpochRequest(replica_id=-2, topics=[
            T.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
                T.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                                       leader_epoch=0)])]),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("OffsetForLeaderEpoch (broker)", 23, 4, T.OffsetForLeaderEpochRequest(replica_id=0, topics=[
            T.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(topic=topic, partitions=[
                T.OffsetForLeaderEpochRequest.OffsetForLeaderPartition(partition=0, current_leader_epoch=-1,
                                                                       leader_epoch=0)])]),
         lambda r: r.topics[0].partitions[0].error_code,
         [([], TOPIC_DENIED), ([(*c, "CLUSTER_ACTION")], 0)]),
        ("ConsumerGroupHeartbeat", 68, 1, T.ConsumerGroupHeartbeatRequest(
            group_id=group, member_id="matrix-member", member_epoch=0, instance_id=None, rack_id=None,
            rebalance_timeout_ms=30000, subscribed_topic_names=[topic], subscribed_topic_regex=None,
            server_assignor=None, topic_partitions=[]),
         lambda r: r.error_code,
         [([], GROUP_DENIED), ([("group", group, "READ")], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("ConsumerGroupDescribe", 69, 0, T.ConsumerGroupDescribeRequest(group_ids=[group],
                                                                        include_authorized_operations=False),
         lambda r: r.groups[0].error_code, [([], GROUP_DENIED), ([("group", group, "DESCRIBE")], ANY_ALLOWED)]),
        ("ShareGroupHeartbeat", 76, 1, T.ShareGroupHeartbeatRequest(
            group_id=group + "-share", member_id="matrix-share-member", member_epoch=0, rack_id=None,
            subscribed_topic_names=[topic]),
         lambda r: r.error_code,
         [([], GROUP_DENIED), ([("group", group + "-share", "READ")], TOPIC_DENIED), ([("topic", topic, "DESCRIBE")], 0)]),
        ("ShareGroupDescribe", 77, 1, T.ShareGroupDescribeRequest(group_ids=[group + "-share2"],
                                                                  include_authorized_operations=False),
         lambda r: r.groups[0].error_code,
         [([], GROUP_DENIED), ([("group", group + "-share2", "DESCRIBE")], ANY_ALLOWED)]),
        ("ShareFetch", 78, 1, T.ShareFetchRequest(
            group_id=group + "-share3", member_id="matrix-share-member", share_session_epoch=0, max_wait_ms=0,
            min_bytes=1, max_bytes=1 << 16, max_records=10, batch_size=10, topics=[T.ShareFetchRequest.FetchTopic(
                topic_id=topic_id, partitions=[T.ShareFetchRequest.FetchPartition(partition_index=0,
                                                                                  acknowledgement_batches=[])])],
            forgotten_topics_data=[]),
         lambda r: r.error_code or r.responses[0].partitions[0].error_code,
         # served: this group never had the partition assigned (UNKNOWN_TOPIC_OR_PARTITION after authorization)
         [([], GROUP_DENIED), ([("group", group + "-share3", "READ")], TOPIC_DENIED), ([("topic", topic, "READ")], 3)]),
        ("ShareAcknowledge", 79, 1, T.ShareAcknowledgeRequest(
            group_id=group + "-share4", member_id="matrix-share-member", share_session_epoch=1, topics=[]),
         lambda r: r.error_code,
         [([], GROUP_DENIED), ([("group", group + "-share4", "READ")], ANY_ALLOWED)]),
        ("DescribeShareGroupOffsets", 90, 0, T.DescribeShareGroupOffsetsRequest(groups=[
            T.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group + "-share",
                                                                                     topics=None)]),
         lambda r: r.groups[0].error_code, [([], GROUP_DENIED), ([("group", group + "-share", "DESCRIBE")], 0)]),
        ("AlterShareGroupOffsets", 91, 0, T.AlterShareGroupOffsetsRequest(group_id=group + "-share5", topics=[
            T.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestTopic(topic_name=topic, partitions=[
                T.AlterShareGroupOffsetsRequest.AlterShareGroupOffsetsRequestPartition(partition_index=0,
                                                                                       start_offset=0)])]),
         lambda r: r.responses[0].partitions[0].error_code,
         [([], GROUP_DENIED), ([("group", group + "-share5", "READ")], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("DeleteShareGroupOffsets", 92, 0, T.DeleteShareGroupOffsetsRequest(group_id=group + "-share5", topics=[
            T.DeleteShareGroupOffsetsRequest.DeleteShareGroupOffsetsRequestTopic(topic_name=topic)]),
         lambda r: r.error_code or r.responses[0].partitions[0].error_code,
         [([], GROUP_DENIED), ([("group", group + "-share5", "DELETE")], TOPIC_DENIED), ([("topic", topic, "READ")], 0)]),
        ("DescribeClientQuotas", 48, 1, T.DescribeClientQuotasRequest(components=[], strict=False),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "DESCRIBE_CONFIGS")], 0)]),
        ("AlterClientQuotas", 49, 1, T.AlterClientQuotasRequest(entries=[T.AlterClientQuotasRequest.EntryData(
            entity=[T.AlterClientQuotasRequest.EntityData(entity_type="client-id", entity_name="matrix")],
            ops=[T.AlterClientQuotasRequest.OpData(key="producer_byte_rate", value=1e9, remove=False)])],
            validate_only=True),
         lambda r: r.entries[0].error_code, [([], CLUSTER_DENIED), ([(*c, "ALTER_CONFIGS")], 0)]),
        ("DescribeLogDirs", 35, 4, T.DescribeLogDirsRequest(topics=None),
         lambda r: r.error_code or (0 if r.results else CLUSTER_DENIED), [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        ("AlterReplicaLogDirs", 34, 2, T.AlterReplicaLogDirsRequest(dirs=[T.AlterReplicaLogDirsRequest.AlterReplicaLogDir(
            path="/no/such/log/dir", topics=[T.AlterReplicaLogDirsRequest.AlterReplicaLogDirTopic(
                name=topic, partitions=[0])])]),
         lambda r: r.results[0].partitions[0].error_code,
         # allowed: then refused for the path (LOG_DIR_NOT_FOUND), nothing moves
         [([], CLUSTER_DENIED), ([(*c, "ALTER")], 57)]),
        ("DescribeQuorum", 55, 2, T.DescribeQuorumRequest(topics=[T.DescribeQuorumRequest.TopicData(
            topic_name="__cluster_metadata", partitions=[T.DescribeQuorumRequest.PartitionData(partition_index=0)])]),
         lambda r: r.error_code or r.topics[0].partitions[0].error_code,
         [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        ("ListConfigResources", 74, 1, T.ListConfigResourcesRequest(resource_types=[]),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "DESCRIBE_CONFIGS")], 0)]),
        ("DescribeAcls", 29, 3, T.DescribeAclsRequest(resource_type_filter=1, resource_name_filter=None,
                                                      pattern_type_filter=1, principal_filter=None, host_filter=None,
                                                      operation=1, permission_type=1),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        ("CreateAcls", 30, 3, T.CreateAclsRequest(creations=[T.CreateAclsRequest.AclCreation(
            resource_type=2, resource_name="matrix-x", resource_pattern_type=3, principal="User:nobody", host="*",
            operation=3, permission_type=3)]),
         lambda r: r.results[0].error_code, [([], CLUSTER_DENIED), ([(*c, "ALTER")], 0)]),
        ("DeleteAcls", 31, 3, T.DeleteAclsRequest(filters=[T.DeleteAclsRequest.DeleteAclsFilter(
            resource_type_filter=2, resource_name_filter="matrix-x", pattern_type_filter=3, principal_filter=None,
            host_filter=None, operation=1, permission_type=1)]),
         lambda r: r.filter_results[0].error_code, [([], CLUSTER_DENIED), ([(*c, "ALTER")], 0)]),
        ("DescribeUserScramCredentials", 50, 0, T.DescribeUserScramCredentialsRequest(users=None),
         lambda r: r.error_code, [([], CLUSTER_DENIED), ([(*c, "DESCRIBE")], 0)]),
        ("AlterUserScramCredentials", 51, 0, T.AlterUserScramCredentialsRequest(deletions=[], upsertions=[
            T.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                name="matrix-user", mechanism=1, iterations=4096, salt=b"s" * 16, salted_password=b"p" * 32)]),
         lambda r: r.results[0].error_code, [([], CLUSTER_DENIED), ([(*c, "ALTER")], 0)]),
    ]


@pytest.fixture(scope="module")
def acl_broker(tmp_path_factory):
    b = start_broker(tmp_path_factory.mktemp("aclmatrix"), {
        "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
        "sasl.enabled.mechanisms": "PLAIN",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
        "auto.create.topics.enable": "false",
    })
    yield b
    b.stop()


def test_every_api_refused_without_its_acl_and_served_with_it(acl_broker):
    from confluent_kafka import Producer
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AdminClient,
                                       NewTopic, ResourcePatternType, ResourceType)

    port = acl_broker.port
    admin_conf = {"bootstrap.servers": f"127.0.0.1:{port}", "security.protocol": "SASL_PLAINTEXT",
                  "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": ADMIN_PW}
    admin = AdminClient(admin_conf)
    topic, doomed, new_topic = unique_topic("matrix"), unique_topic("matrix-doomed"), unique_topic("matrix-new")
    group = unique_topic("matrix-group")
    for f in admin.create_topics([NewTopic(topic, 1), NewTopic(doomed, 1)]).values():
        f.result(20)
    p = Producer(admin_conf)
    p.produce(topic, b"seed", partition=0)
    assert p.flush(20) == 0
    types = {"topic": ResourceType.TOPIC, "group": ResourceType.GROUP, "cluster": ResourceType.BROKER,
             "transactional_id": ResourceType.TRANSACTIONAL_ID}
    everything_of_alice = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:alice", None,
                                           AclOperation.ANY, AclPermissionType.ANY)
    failures = []
    import uuid

    described = admin.describe_topics(TopicCollection([topic]))[topic].result(20).topic_id
    topic_id = uuid.UUID(int=((described.get_most_significant_bits() & (2**64 - 1)) << 64)
                         | (described.get_least_significant_bits() & (2**64 - 1)))
    for label, key, version, body, error_of, steps in _cases(topic, doomed, group, new_topic, topic_id):
        for added, expected in steps:
            if added:
                for f in admin.create_acls([
                        AclBinding(types[rtype], name, ResourcePatternType.LITERAL, "User:alice", "*",
                                   getattr(AclOperation, op), AclPermissionType.ALLOW)
                        for rtype, name, op in added]).values():
                    f.result(20)
            alice = Alice(port)
            try:
                got = error_of(alice.call(key, version, body))
            finally:
                alice.close()
            ok = got not in DENIED if expected == ANY_ALLOWED else got == expected
            if not ok:
                failures.append(f"{label} with {added or 'no ACL'}: error {got}, expected {expected}")
        admin.delete_acls([everything_of_alice])[everything_of_alice].result(20)
    assert not failures, "\n".join(failures)
    # the allowed requests really did their work
    md = admin.list_topics(timeout=20)
    assert doomed not in md.topics and new_topic not in md.topics  # deleted; created with validate_only
