"""broker.handlers.metadata: the partition entries shared between responses."""

import uuid
from types import SimpleNamespace

from broker.handlers import metadata as M
from protocol import codec
from protocol.messages import MetadataResponse


def entry(node, name, count):
    return M._topic_entry(SimpleNamespace(node_id=node), SimpleNamespace(name=name, topic_id=uuid.uuid4(),
                                                                         num_partitions=count), 12)


def described(e):
    return [(p.partition_index, p.leader_id, p.leader_epoch, list(p.replica_nodes), list(p.isr_nodes),
             list(p.offline_replicas), p.error_code) for p in e.partitions]


def test_each_topic_lists_its_own_partitions_on_its_node():
    small = entry(0, "a", 3)
    large = entry(0, "b", 7)
    other = entry(5, "c", 2)
    assert described(small) == [(p, 0, M.LEADER_EPOCH, [0], [0], [], 0) for p in range(3)]
    assert described(large) == [(p, 0, M.LEADER_EPOCH, [0], [0], [], 0) for p in range(7)]
    assert described(other) == [(p, 5, M.LEADER_EPOCH, [5], [5], [], 0) for p in range(2)]
    assert len(small.partitions) == 3 and len(entry(0, "a", 0).partitions) == 0


def test_a_response_with_shared_entries_encodes_and_decodes():
    topics = [entry(0, "a", 2), entry(0, "b", 4)]
    resp = MetadataResponse(throttle_time_ms=0, brokers=[], cluster_id="x", controller_id=0, topics=topics)
    frame = codec.encode_response_bytes(3, 12, 9, resp)
    cid, back = codec.decode_response(3, 12, frame[4:])
    assert cid == 9
    assert [(t.name, [p.partition_index for p in t.partitions]) for t in back.topics] == [
        ("a", [0, 1]), ("b", [0, 1, 2, 3])]
