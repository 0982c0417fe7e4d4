"""The transaction coordinator on a manual clock, wired as the broker wires it
(broker.coordinator.txn_service) over a real LogManager: state in __transaction_state,
markers in the partitions, transactional offsets in __consumer_offsets. Time only moves
when a test moves it."""

import struct
from types import SimpleNamespace

import pytest

from broker.coordinator import txn_records as TR
from broker.coordinator.group import GroupCoordinator
from broker.coordinator.store import OffsetsTopicStore, replay as replay_offsets
from broker.coordinator.txn_service import start_transaction_coordinator
from broker.coordinator.txn_store import TXN_STATE_TOPIC
from broker.handlers.init_producer_id import ProducerIdManager
from config import load_broker_config
from protocol import records as rec
from protocol.errors import ErrorCode as E
from storage.clock import ManualClock
from storage.log_manager import LogManager

NOW = 1_700_000_000_000


class _Scheduler:
    def call_later(self, delay_ms, fn):
        return SimpleNamespace(cancel=lambda: None)


class Broker:
    """The coordinators of one broker over ``tmp_path`` (a new instance = a restart)."""

    def __init__(self, tmp_path, clock=None, *overrides):
        self.clock = clock or ManualClock(NOW)
        cfg = load_broker_config(None, [f"log.dirs={tmp_path}", "transaction.state.log.num.partitions=3",
                                        "offsets.topic.num.partitions=3", *overrides], env={}, warn=False)
        self.lm = LogManager(cfg, self.clock)
        self.lm.startup()
        self.notified = []
        store = OffsetsTopicStore(self.lm, self.clock, 3)
        self.groups = GroupCoordinator(clock=self.clock, store=store, scheduler=_Scheduler(),
                                       topic_partitions=lambda t: (self.lm.get_topic(t) or SimpleNamespace(
                                           num_partitions=None)).num_partitions)
        replay_offsets(self.lm, self.groups)
        ctx = SimpleNamespace(config=cfg, log_manager=self.lm, clock=self.clock, group_coordinator=self.groups,
                              producer_ids=ProducerIdManager(str(tmp_path / "pid-block")),
                              notify_append=lambda t, p: self.notified.append((t, p)))
        self.txn = start_transaction_coordinator(ctx)

    def topic(self, name="t", partitions=2):
        if self.lm.get_topic(name) is None:
            self.lm.create_topic(name, partitions, {})
        return name

    def produce_txn(self, topic, partition, pid, epoch, seq=0, n=2):
        batch = rec.build_batch([(NOW, None, b"v%d" % i) for i in range(n)], producer_id=pid, producer_epoch=epoch,
                                base_sequence=seq, is_transactional=True)
        return self.lm.get_log(topic, partition).append(bytearray(batch), in_place=True)

    def control_records(self, topic, partition):
        """[(control type, producer id, producer epoch, coordinator epoch)] of the partition."""
        plog = self.lm.get_log(topic, partition)
        buf = plog.read(plog.log_start_offset, 1 << 20).records
        out = []
        if buf is None:
            return out
        data = buf.read()
        for pos, h in rec.iter_batches(data):
            if h.is_control:
                for r in rec.iter_records(data, pos, h):
                    kind, cepoch = rec.parse_control_record(r.key, r.value)
                    out.append((kind, h.producer_id, h.producer_epoch, cepoch))
        return out

    def close(self):
        self.lm.shutdown()


@pytest.fixture
def broker(tmp_path):
    b = Broker(tmp_path)
    yield b
    b.close()


def begin(b, tid="tx", parts=(("t", 0),), timeout_ms=60000):
    b.topic()
    err, pid, epoch = b.txn.init_producer_id(tid, timeout_ms)
    assert err == 0
    assert b.txn.add_partitions(tid, pid, epoch, list(parts)) == 0
    return pid, epoch


def test_init_producer_id_bumps_the_epoch_and_keeps_the_producer_id(broker):
    err, pid, epoch = broker.txn.init_producer_id("tx", 60000)
    assert (err, epoch) == (0, 0) and pid >= 0
    assert broker.txn.init_producer_id("tx", 60000) == (0, pid, 1)
    assert broker.txn.txns["tx"].state_name == "Empty"
    # another id gets another producer id
    err, pid2, epoch2 = broker.txn.init_producer_id("other", 60000)
    assert err == 0 and pid2 != pid and epoch2 == 0


@pytest.mark.parametrize("timeout", [0, -1, 900001])
def test_a_timeout_outside_the_broker_maximum_is_refused(broker, timeout):
    assert broker.txn.init_producer_id("tx", timeout)[0] == E.INVALID_TRANSACTION_TIMEOUT
    assert "tx" not in broker.txn.txns


def test_an_empty_transactional_id_is_an_invalid_request(broker):
    assert broker.txn.init_producer_id("", 1000)[0] == E.INVALID_REQUEST
    assert broker.txn.end_txn("", 1, 0, True)[0] == E.INVALID_REQUEST


def test_commit_writes_a_commit_marker_to_every_partition_and_moves_the_lso(broker):
    pid, epoch = begin(broker, parts=[("t", 0), ("t", 1)])
    broker.produce_txn("t", 0, pid, epoch)
    broker.produce_txn("t", 1, pid, epoch)
    log0 = broker.lm.get_log("t", 0)
    assert log0.last_stable_offset == 0 and log0.high_watermark == 2
    assert broker.txn.end_txn("tx", pid, epoch, True) == (0, pid, epoch)
    for p in (0, 1):
        assert broker.control_records("t", p) == [(rec.CONTROL_COMMIT, pid, epoch, 0)]
        assert broker.lm.get_log("t", p).last_stable_offset == 3
    m = broker.txn.txns["tx"]
    assert m.state_name == "CompleteCommit" and not m.partitions
    assert ("t", 0) in broker.notified and ("t", 1) in broker.notified
    # a retried EndTxn(commit) succeeds; an abort now is a state error
    assert broker.txn.end_txn("tx", pid, epoch, True)[0] == 0
    assert broker.txn.end_txn("tx", pid, epoch, False)[0] == E.INVALID_TXN_STATE


def test_abort_writes_an_abort_marker_and_a_txnindex_entry(broker):
    pid, epoch = begin(broker)
    broker.produce_txn("t", 0, pid, epoch, n=3)
    assert broker.txn.end_txn("tx", pid, epoch, False)[0] == 0
    plog = broker.lm.get_log("t", 0)
    assert broker.control_records("t", 0) == [(rec.CONTROL_ABORT, pid, epoch, 0)]
    aborted = plog.collect_aborted_txns(0, plog.last_stable_offset)
    assert [(a.producer_id, a.first_offset, a.last_offset) for a in aborted] == [(pid, 0, 3)]
    assert broker.txn.txns["tx"].state_name == "CompleteAbort"


def test_end_txn_errors(broker):
    err, pid, epoch = broker.txn.init_producer_id("tx", 60000)
    # nothing was added: Empty cannot end
    assert broker.txn.end_txn("tx", pid, epoch, True)[0] == E.INVALID_TXN_STATE
    assert broker.txn.end_txn("nobody", pid, epoch, True)[0] == E.INVALID_PRODUCER_ID_MAPPING
    assert broker.txn.end_txn("tx", pid + 100, epoch, True)[0] == E.INVALID_PRODUCER_ID_MAPPING
    broker.topic()
    assert broker.txn.add_partitions("tx", pid, epoch, [("t", 0)]) == 0
    assert broker.txn.end_txn("tx", pid, epoch - 1, True)[0] == E.PRODUCER_FENCED
    assert broker.txn.add_partitions("tx", pid, epoch + 1, [("t", 1)]) == E.PRODUCER_FENCED
    assert broker.txn.add_partitions("tx", pid + 1, epoch, [("t", 1)]) == E.INVALID_PRODUCER_ID_MAPPING


def test_init_during_a_transaction_fences_and_aborts_it(broker):
    pid, epoch = begin(broker)
    broker.produce_txn("t", 0, pid, epoch)
    # the new instance: the open transaction is aborted under epoch+1, the client retries
    assert broker.txn.init_producer_id("tx", 60000)[0] == E.CONCURRENT_TRANSACTIONS
    assert broker.control_records("t", 0) == [(rec.CONTROL_ABORT, pid, epoch + 1, 0)]
    assert broker.lm.get_log("t", 0).last_stable_offset == 3
    assert broker.txn.init_producer_id("tx", 60000) == (0, pid, epoch + 2)
    # the zombie is fenced everywhere
    assert broker.txn.end_txn("tx", pid, epoch, True)[0] == E.PRODUCER_FENCED
    assert broker.txn.add_partitions("tx", pid, epoch, [("t", 0)]) == E.PRODUCER_FENCED
    assert broker.txn.verify_partitions("tx", pid, epoch, [("t", 0)]) == {("t", 0): E.PRODUCER_FENCED}


def test_verify_partitions(broker):
    pid, epoch = begin(broker)
    assert broker.txn.verify_partitions("tx", pid, epoch, [("t", 0), ("t", 1)]) == {
        ("t", 0): 0, ("t", 1): E.TRANSACTION_ABORTABLE}
    assert broker.txn.verify_partitions("nobody", pid, epoch, [("t", 0)]) == {("t", 0): E.INVALID_PRODUCER_ID_MAPPING}
    broker.txn.end_txn("tx", pid, epoch, True)
    # after the end the partition is no longer in a transaction
    assert broker.txn.verify_partitions("tx", pid, epoch, [("t", 0)]) == {("t", 0): E.TRANSACTION_ABORTABLE}


def test_a_transaction_older_than_its_timeout_is_aborted_with_the_epoch_bumped(broker):
    pid, epoch = begin(broker, timeout_ms=10_000)
    broker.produce_txn("t", 0, pid, epoch)
    broker.clock.advance(10_000)
    assert broker.txn.abort_timed_out() == 0  # not older than the timeout yet
    broker.clock.advance(1)
    assert broker.txn.abort_timed_out() == 1
    assert broker.control_records("t", 0) == [(rec.CONTROL_ABORT, pid, epoch + 1, 0)]
    m = broker.txn.txns["tx"]
    assert m.state_name == "CompleteAbort" and m.producer_epoch == epoch + 1
    assert broker.txn.end_txn("tx", pid, epoch, True)[0] == E.PRODUCER_FENCED
    assert broker.txn.abort_timed_out() == 0


def test_transactional_ids_expire_after_their_last_use(tmp_path):
    b = Broker(tmp_path, None, "transactional.id.expiration.ms=60000")
    pid, epoch = begin(b)
    b.clock.advance(120_000)
    assert b.txn.expire_transactional_ids() == 0  # Ongoing never expires
    b.txn.end_txn("tx", pid, epoch, True)
    b.clock.advance(59_999)
    assert b.txn.expire_transactional_ids() == 0
    b.clock.advance(1)
    assert b.txn.expire_transactional_ids() == 1
    assert "tx" not in b.txn.txns
    b.close()
    # the tombstone is replayed: the id stays gone, and a new init starts over at epoch 0
    b2 = Broker(tmp_path, b.clock)
    assert "tx" not in b2.txn.txns
    err, pid2, epoch2 = b2.txn.init_producer_id("tx", 60000)
    assert err == 0 and epoch2 == 0 and pid2 != pid
    b2.close()


def test_kip_360_recovery(broker):
    err, pid, epoch = broker.txn.init_producer_id("tx", 60000)
    # the producer names its current id and epoch: bumped
    assert broker.txn.init_producer_id("tx", 60000, (pid, epoch)) == (0, pid, epoch + 1)
    # a retry of that call (its answer was lost) names the older epoch: the same epoch again
    assert broker.txn.init_producer_id("tx", 60000, (pid, epoch)) == (0, pid, epoch + 1)
    # another producer id, or an epoch that is neither: fenced
    assert broker.txn.init_producer_id("tx", 60000, (pid + 7, 0))[0] == E.PRODUCER_FENCED
    assert broker.txn.init_producer_id("tx", 60000, (pid, epoch + 5))[0] == E.PRODUCER_FENCED


def test_an_exhausted_epoch_rotates_the_producer_id(broker):
    err, pid, epoch = broker.txn.init_producer_id("tx", 60000)
    broker.txn.txns["tx"].producer_epoch = 32766  # Short.MaxValue - 1: kept for fencing
    err, pid2, epoch2 = broker.txn.init_producer_id("tx", 60000)
    assert err == 0 and pid2 != pid and epoch2 == 0
    assert broker.txn.txns["tx"].previous_producer_id == pid


def test_state_is_replayed_at_start_and_prepared_transactions_are_completed(tmp_path):
    b = Broker(tmp_path)
    pid, epoch = begin(b, parts=[("t", 0), ("t", 1)])
    b.produce_txn("t", 0, pid, epoch)
    b.produce_txn("t", 1, pid, epoch)
    # the decision is written, then the broker dies before the markers
    m = b.txn.txns["tx"].copy()
    m.state = TR.PREPARE_COMMIT
    b.txn.store.write("tx", m.to_value())
    clock = b.clock
    b.close()
    b2 = Broker(tmp_path, clock)
    m2 = b2.txn.txns["tx"]
    assert m2.state_name == "CompleteCommit" and (m2.producer_id, m2.producer_epoch) == (pid, epoch)
    for p in (0, 1):
        assert b2.control_records("t", p) == [(rec.CONTROL_COMMIT, pid, epoch, 0)]
        assert b2.lm.get_log("t", p).last_stable_offset == 3
    b2.close()
    # an Ongoing transaction comes back Ongoing (its timeout still runs)
    b3 = Broker(tmp_path, clock)
    pid3, epoch3 = b3.txn.init_producer_id("tx", 60000)[1:]
    assert b3.txn.add_partitions("tx", pid3, epoch3, [("t", 0)]) == 0
    b3.close()
    b4 = Broker(tmp_path, clock)
    assert b4.txn.txns["tx"].state_name == "Ongoing" and b4.txn.txns["tx"].partitions == {("t", 0)}
    b4.close()


def test_transactional_offsets_are_visible_only_after_commit(tmp_path):
    b = Broker(tmp_path)
    b.topic("in", 1)
    part = b.groups.store.partition_for("g")
    pid, epoch = begin(b, parts=[("__consumer_offsets", part)])
    res = b.groups.txn_commit_offsets(group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                                      member_id="", group_instance_id=None,
                                      offsets=[("in", 0, 42, -1, "m", None)])
    assert res == {("in", 0): 0}
    assert b.groups.fetch_offsets("g", [("in", 0)])[1] == [("in", 0, -1, -1, "", 0)]
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == [
        ("in", 0, -1, -1, "", E.UNSTABLE_OFFSET_COMMIT)]
    b.close()
    # pending across a restart, committed by the marker
    b = Broker(tmp_path, b.clock)
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1][0][5] == E.UNSTABLE_OFFSET_COMMIT
    assert b.txn.end_txn("tx", pid, epoch, True)[0] == 0
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == [("in", 0, 42, -1, "m", 0)]
    b.close()
    b = Broker(tmp_path, b.clock)
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == [("in", 0, 42, -1, "m", 0)]
    # an aborted transaction's offsets are dropped
    pid, epoch = b.txn.init_producer_id("tx", 60000)[1:]
    assert b.txn.add_partitions("tx", pid, epoch, [("__consumer_offsets", part)]) == 0
    b.groups.txn_commit_offsets(group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                                member_id="", group_instance_id=None, offsets=[("in", 0, 99, -1, "", None)])
    assert b.txn.end_txn("tx", pid, epoch, False)[0] == 0
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == [("in", 0, 42, -1, "m", 0)]
    b.close()
    b = Broker(tmp_path, b.clock)
    assert b.groups.fetch_offsets("g", [("in", 0)], require_stable=True)[1] == [("in", 0, 42, -1, "m", 0)]
    b.close()


def test_a_regular_commit_written_after_a_transactional_one_wins(broker):
    broker.topic("in", 1)
    part = broker.groups.store.partition_for("g")
    pid, epoch = begin(broker, parts=[("__consumer_offsets", part)])
    broker.groups.txn_commit_offsets(group_id="g", producer_id=pid, producer_epoch=epoch, generation_id=-1,
                                     member_id="", group_instance_id=None, offsets=[("in", 0, 5, -1, "", None)])
    assert broker.groups.commit_offsets(group_id="g", generation_id=-1, member_id="", group_instance_id=None,
                                        version=8, offsets=[("in", 0, 7, -1, "", None)]) == {("in", 0): 0}
    broker.txn.end_txn("tx", pid, epoch, True)
    assert broker.groups.fetch_offsets("g", [("in", 0)])[1][0][2] == 7


def test_txn_offset_commit_fences_stale_generations(broker):
    broker.topic("in", 1)
    args = dict(producer_id=1, producer_epoch=0, group_instance_id=None, offsets=[("in", 0, 1, -1, "", None)])
    # an unknown group with a generation: ILLEGAL_GENERATION (KIP-447)
    assert broker.groups.txn_commit_offsets(group_id="nope", generation_id=3, member_id="m", **args) == {
        ("in", 0): E.ILLEGAL_GENERATION}
    # an empty group with an unknown member
    broker.groups.commit_offsets(group_id="g2", generation_id=-1, member_id="", group_instance_id=None, version=8,
                                 offsets=[("in", 0, 0, -1, "", None)])
    assert broker.groups.txn_commit_offsets(group_id="g2", generation_id=1, member_id="ghost", **args) == {
        ("in", 0): E.UNKNOWN_MEMBER_ID}


def test_list_and_describe(broker):
    pid, epoch = begin(broker, "a")
    broker.txn.init_producer_id("b", 60000)
    broker.clock.advance(5000)
    unknown, found = broker.txn.list()
    assert [m.transactional_id for m in found] == ["a", "b"] and unknown == []
    unknown, found = broker.txn.list(states=["Ongoing", "Bogus"])
    assert [m.transactional_id for m in found] == ["a"] and unknown == ["Bogus"]
    assert [m.transactional_id for m in broker.txn.list(producer_ids=[pid])[1]] == ["a"]
    assert [m.transactional_id for m in broker.txn.list(states=["Ongoing"], min_duration_ms=4999)[1]] == ["a"]
    assert broker.txn.list(states=["Ongoing"], min_duration_ms=5000)[1] == []
    err, m = broker.txn.describe("a")
    assert err == 0 and m.state_name == "Ongoing" and m.partitions == {("t", 0)} and m.start_ms == NOW
    assert broker.txn.describe("zzz")[0] == E.TRANSACTIONAL_ID_NOT_FOUND


def test_transaction_log_value_formats():
    v = TR.TxnLogValue(7, 3, 60000, TR.ONGOING, {"b": [2, 0], "a": [1]}, NOW, NOW - 5)
    raw = TR.value(v)
    # v0: version, producer id, epoch, timeout, state, partitions (sorted), timestamps
    assert raw[:2] == b"\x00\x00" and struct.unpack_from(">qhib", raw, 2) == (7, 3, 60000, 1)
    back = TR.decode_value(raw)
    assert back.partitions == {"a": [1], "b": [0, 2]} and (back.last_update_ms, back.start_ms) == (NOW, NOW - 5)
    assert TR.decode_key(TR.key("tx-1")) == "tx-1"
    # a flexible v1 value (Kafka 4.x, transactions V2), with tagged fields
    v1 = (struct.pack(">hqhib", 1, 9, 4, 1000, TR.PREPARE_COMMIT) + bytes([2]) + bytes([2]) + b"t"
          + bytes([2]) + struct.pack(">i", 5) + b"\x00" + struct.pack(">qq", NOW, NOW - 1)
          + bytes([2]) + bytes([0, 8]) + struct.pack(">q", 8) + bytes([2, 2]) + struct.pack(">h", 2))
    d = TR.decode_value(v1)
    assert (d.producer_id, d.producer_epoch, d.state, d.partitions) == (9, 4, TR.PREPARE_COMMIT, {"t": [5]})
    assert (d.previous_producer_id, d.client_transaction_version) == (8, 2)
    with pytest.raises(ValueError):
        TR.decode_value(struct.pack(">h", 7))
    with pytest.raises(ValueError):
        TR.decode_value(raw[:10])


def test_state_lives_in_transaction_state_partitions(broker):
    begin(broker, "placed")
    info = broker.lm.get_topic(TXN_STATE_TOPIC)
    assert info is not None and info.num_partitions == 3
    part = broker.txn.store.partition_for("placed")
    assert broker.lm.get_log(TXN_STATE_TOPIC, part).log_end_offset == 2  # Empty, then Ongoing



def test_a_marker_completes_the_offsets_of_its_producer_in_every_group_and_no_other(broker):
    """A transaction's offsets in several groups (on different ``__consumer_offsets``
    partitions) are committed by its markers, each group's by the marker on its own
    partition; another producer's pending offsets stay pending, as do the groups that
    never heard of either. The coordinator finds the groups through the producer
    (Kafka's openGroupsForProducer), not by visiting every group."""
    broker.topic("in", 1)
    store = broker.groups.store
    a = "g"
    b = next(f"g{i}" for i in range(1000) if store.partition_for(f"g{i}") != store.partition_for(a))
    bystanders = [f"idle-{i}" for i in range(50)]
    for gid in bystanders:
        assert broker.groups.commit_offsets(group_id=gid, generation_id=-1, member_id="", group_instance_id=None,
                                            version=8, offsets=[("in", 0, 1, -1, "", None)]) == {("in", 0): 0}
    parts = sorted({store.partition_for(a), store.partition_for(b), store.partition_for("other")})
    pid, epoch = begin(broker, parts=[("__consumer_offsets", p) for p in parts])
    other_pid, other_epoch = begin(broker, tid="tx2", parts=[("__consumer_offsets", store.partition_for("other"))])
    for gid, offset in ((a, 10), (b, 20)):
        assert broker.groups.txn_commit_offsets(group_id=gid, producer_id=pid, producer_epoch=epoch, generation_id=-1,
                                                member_id="", group_instance_id=None,
                                                offsets=[("in", 0, offset, -1, "", None)]) == {("in", 0): 0}
    assert broker.groups.txn_commit_offsets(group_id="other", producer_id=other_pid, producer_epoch=other_epoch,
                                            generation_id=-1, member_id="", group_instance_id=None,
                                            offsets=[("in", 0, 30, -1, "", None)]) == {("in", 0): 0}
    visited = []
    real_get = broker.groups.groups.get

    class Counting(dict):
        def get(self, key, default=None):
            visited.append(key)
            return real_get(key, default)

    groups = broker.groups.groups
    broker.groups.groups = Counting(groups)
    try:
        assert broker.txn.end_txn("tx", pid, epoch, True)[0] == 0
    finally:
        broker.groups.groups = groups
    assert set(visited) == {a, b}  # none of the bystanders, not the other producer's group
    stable = lambda gid: broker.groups.fetch_offsets(gid, [("in", 0)], require_stable=True)[1][0]  # noqa: E731
    assert stable(a)[2] == 10 and stable(b)[2] == 20
    assert stable("other")[5] == E.UNSTABLE_OFFSET_COMMIT  # still its own transaction's
    assert all(stable(gid)[2] == 1 for gid in bystanders)
    assert broker.txn.end_txn("tx2", other_pid, other_epoch, False)[0] == 0  # aborted: dropped
    assert stable("other")[2] == -1 and stable("other")[5] == 0
    assert broker.groups._txn_groups == {}
