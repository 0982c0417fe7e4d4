"""Share groups (KIP-932, issue 18) with confluent-kafka's ShareConsumer: consumers share
a topic and together see every record once; a consumer killed mid-batch has its records
redelivered to another; rejected records never come back; the delivery-count limit
archives a record that keeps failing; acknowledged records stay acknowledged across a
clean restart and a SIGKILL while records held unacknowledged come back. Then the bad
input a client can send, with raw requests on one connection (a share session lives on
its connection)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from protocol import codec
from protocol import messages as T
from protocol.errors import ErrorCode
from tests.integration.helpers import REPO_ROOT, RawConn, create_topic, unique_topic, wait_for
from tests.integration.helpers import raw_request as raw

pytestmark = pytest.mark.timeout(240)

SHORT_LOCKS = {"group.share.record.lock.duration.ms": "2000", "group.share.min.record.lock.duration.ms": "1000"}


@pytest.fixture
def sbroker(broker_factory):
    return broker_factory(SHORT_LOCKS, name="share")


def set_group(bootstrap, group, **configs):
    a = AdminClient({"bootstrap.servers": bootstrap})
    res = ConfigResource(ConfigResource.Type.GROUP, group, incremental_configs=[
        ConfigEntry(k.replace("_", "."), str(v), incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()])
    for f in a.incremental_alter_configs([res]).values():
        f.result()


def new_group(bootstrap, **configs):
    group = "sg-" + uuid.uuid4().hex[:10]
    set_group(bootstrap, group, share_auto_offset_reset="earliest", **configs)
    return group


def produce(bootstrap, topic, n, partitions=1, prefix="v"):
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for i in range(n):
        p.produce(topic, value=f"{prefix}{i}".encode(), partition=i % partitions)
    assert p.flush(30) == 0


def consumer(bootstrap, group, explicit=False):
    conf = {"bootstrap.servers": bootstrap, "group.id": group, "log_level": 0}
    if explicit:
        conf["share.acknowledgement.mode"] = "explicit"
    return ShareConsumer(conf)


def drain(consumers, want, timeout=30.0, ack=None):
    """Poll the consumers in turn until ``want`` records came or time runs out; with
    ``ack`` (consumer, message) -> AcknowledgeType or None each record is acknowledged
    so (None: left unacknowledged)."""
    got = [[] for _ in consumers]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and sum(map(len, got)) < want:
        for i, c in enumerate(consumers):
            for m in c.poll(timeout=0.3):
                if m.error():
                    continue
                got[i].append(m)
                verdict = ack(c, m) if ack is not None else None
                if verdict is not None:
                    c.acknowledge(m, verdict)
    return got


def keys(msgs):
    return [(m.partition(), m.offset()) for m in msgs]


def test_three_consumers_together_see_every_record_once(sbroker):
    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("share3"), partitions=3)
    group = new_group(bs)
    cs = [consumer(bs, group) for _ in range(3)]
    try:
        for c in cs:
            c.subscribe([topic])
        drain(cs, 1, timeout=3)  # everybody joins
        produce(bs, topic, 300, partitions=3)
        got = drain(cs, 300)
        seen = [k for msgs in got for k in keys(msgs)]
        assert len(seen) == 300 and len(set(seen)) == 300
        assert {m.value() for msgs in got for m in msgs} == {f"v{i}".encode() for i in range(300)}
        assert all(m.delivery_count() == 1 for msgs in got for m in msgs)
        # ListGroups and ShareGroupDescribe see the three members
        listed = raw(sbroker.port, 16, 5, T.ListGroupsRequest(states_filter=[], types_filter=["share"]))
        assert [(g.group_id, g.group_type, g.protocol_type) for g in listed.groups] == [(group, "share", "share")]
        desc = raw(sbroker.port, 77, 1, T.ShareGroupDescribeRequest(group_ids=[group],
                                                                    include_authorized_operations=False))
        d = desc.groups[0]
        assert d.error_code == 0 and d.group_state == "Stable" and len(d.members) == 3
        assigned = sorted(p for m in d.members for tp in m.assignment.topic_partitions for p in tp.partitions)
        assert assigned == [0, 1, 2]
        # DescribeGroups v6 (KIP-1043): a share group is not a classic group
        (dg,) = raw(sbroker.port, 15, 6, T.DescribeGroupsRequest(groups=[group],
                                                                  include_authorized_operations=False)).groups
        assert (dg.error_code, dg.error_message) == (ErrorCode.GROUP_ID_NOT_FOUND,
                                                     f"Group {group} is not a classic group.")
    finally:
        for c in cs:
            c.close()


def _member_process(bootstrap, group, topic):
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    proc = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "share_member.py"),
                             bootstrap, group, topic], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    state = {"held": []}

    def read():
        for line in proc.stdout:
            try:
                state.update(json.loads(line))
            except ValueError:
                pass

    threading.Thread(target=read, daemon=True).start()
    return proc, state


def test_a_killed_consumer_has_its_records_redelivered_to_another(sbroker):
    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharekill"), partitions=1)
    group = new_group(bs)
    produce(bs, topic, 20)
    proc, state = _member_process(bs, group, topic)
    try:
        wait_for(lambda: state["held"], 30, "the first member holding records")
        held = {tuple(k) for k in state["held"]}
        survivor = consumer(bs, group)
        survivor.subscribe([topic])
        # while the first member lives and holds them, nobody else gets its records
        early = drain([survivor], 20, timeout=1.0)[0]
        assert not held & set(keys(early))
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        got = early + drain([survivor], 20 - len(early), timeout=30)[0]
        assert sorted(keys(got)) == [(0, o) for o in range(20)]
        again = [m for m in got if (m.partition(), m.offset()) in held]
        assert again and all(m.delivery_count() == 2 for m in again)
        survivor.close()
    finally:
        if proc.poll() is None:
            proc.kill()


def test_rejected_records_never_come_back_and_released_ones_do(sbroker):
    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharereject"), partitions=1)
    group = new_group(bs)
    produce(bs, topic, 30)
    c = consumer(bs, group, explicit=True)
    c.subscribe([topic])

    def verdict(_c, m):
        if m.offset() % 3 == 0:
            return AcknowledgeType.REJECT
        if m.offset() % 3 == 1 and m.delivery_count() == 1:
            return AcknowledgeType.RELEASE
        return AcknowledgeType.ACCEPT

    try:
        got = drain([c], 40, timeout=20, ack=verdict)[0]
        c.commit_sync()
        deliveries = {}
        for m in got:
            deliveries.setdefault(m.offset(), []).append(m.delivery_count())
        assert sorted(deliveries) == list(range(30))
        for off, counts in deliveries.items():
            assert counts == ([1, 2] if off % 3 == 1 else [1]), (off, counts)
        assert drain([c], 1, timeout=3)[0] == []  # nothing left: rejected records stay archived
    finally:
        c.close()
    # a new member of the group gets nothing either
    c2 = consumer(bs, group)
    c2.subscribe([topic])
    try:
        assert drain([c2], 1, timeout=4)[0] == []
    finally:
        c2.close()


def _metrics(port) -> dict:
    import urllib.request

    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
        text = resp.read().decode()
    out = {}
    for line in text.splitlines():
        if line.startswith("chronolog_share"):
            name, value = line.rsplit(" ", 1)
            out[name] = float(value)
    return out


def test_delivery_count_limit_archives_a_record_that_keeps_failing(broker_factory):
    from tests.integration.helpers import free_port

    mport = free_port()
    sbroker = broker_factory({**SHORT_LOCKS, "metrics.port": str(mport)}, name="share-metrics")
    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharelimit"), partitions=1)
    group = new_group(bs, share_delivery_count_limit=3)
    produce(bs, topic, 2)
    c = consumer(bs, group, explicit=True)
    c.subscribe([topic])
    try:
        got = drain([c], 4, timeout=25,
                    ack=lambda _c, m: AcknowledgeType.RELEASE if m.offset() == 0 else AcknowledgeType.ACCEPT)[0]
        c.commit_sync()
        assert [m.delivery_count() for m in got if m.offset() == 0] == [1, 2, 3]
        assert [m.delivery_count() for m in got if m.offset() == 1] == [1]
        assert drain([c], 1, timeout=3)[0] == []
    finally:
        c.close()
    offsets = raw(sbroker.port, 90, 0, T.DescribeShareGroupOffsetsRequest(groups=[
        T.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
    parts = offsets.groups[0].topics[0].partitions
    assert [(p.partition_index, p.start_offset) for p in parts] == [(0, 2)]  # both done
    m = _metrics(mport)
    lbl = f'{{partition="0",sharegroup="{group}",topic="{topic}"}}'
    assert m["chronolog_share_partition_start_offset" + lbl] == 2
    assert m["chronolog_share_group_lag" + lbl] == 0
    assert m["chronolog_share_partition_acquired_records" + lbl] == 0
    assert m["chronolog_share_records_acquired_total"] == 4  # offset 0 three times, offset 1 once
    assert m["chronolog_share_records_redelivered_total"] == 2
    assert m["chronolog_share_records_archived_total"] == 1
    assert m[f'chronolog_share_group_members{{sharegroup="{group}"}}'] == 0


@pytest.mark.parametrize("graceful", [True, False], ids=["clean-restart", "sigkill"])
def test_share_state_survives_a_broker_restart(sbroker, graceful):
    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharerestart"), partitions=1)
    group = new_group(bs)
    produce(bs, topic, 40)
    c = consumer(bs, group, explicit=True)
    c.subscribe([topic])
    got = drain([c], 40, timeout=20,
                ack=lambda _c, m: AcknowledgeType.ACCEPT if m.offset() < 25 else None)[0]
    assert sorted(keys(got)) == [(0, o) for o in range(40)]
    # records 25..39 stay acquired and unacknowledged; the acknowledgements are sent
    c.commit_sync()
    sbroker.restart(graceful=graceful)
    c.close()
    c2 = consumer(bs, group)
    c2.subscribe([topic])
    try:
        again = drain([c2], 15, timeout=40)[0]
        assert sorted(keys(again)) == [(0, o) for o in range(25, 40)]
        assert all(m.delivery_count() == 2 for m in again)
        assert drain([c2], 1, timeout=3)[0] == []
    finally:
        c2.close()


# --------------------------------------------------------------------------- raw requests
class Share:
    """Raw share-group requests on one connection."""

    def __init__(self, port):
        self.conn = RawConn(port)
        self.cid = 0

    def call(self, key, version, body):
        self.cid += 1
        hdr = T.RequestHeader(api_key=key, api_version=version, correlation_id=self.cid, client_id="raw-share")
        self.conn.send(codec.encode_request(hdr, body))
        cid, resp = codec.decode_response(key, version, self.conn.recv_frame())
        assert cid == self.cid
        return resp

    def heartbeat(self, group, member, epoch, topics=None):
        return self.call(76, 1, T.ShareGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=epoch,
                                                             rack_id=None, subscribed_topic_names=topics))

    def fetch(self, group, member, epoch, tid, acks=(), forget=False, max_wait=0, version=1, mode=0,
              max_records=100, max_bytes=1 << 20):
        R = T.ShareFetchRequest
        batches = [R.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=list(t)) for a, b, t in acks]
        return self.call(78, version, R(group_id=group, member_id=member, share_session_epoch=epoch,
                                        max_wait_ms=max_wait, min_bytes=1, max_bytes=max_bytes, max_records=max_records,
                                        batch_size=100, share_acquire_mode=mode,
                                        topics=[] if forget else [R.FetchTopic(topic_id=tid, partitions=[
                                            R.FetchPartition(partition_index=0, acknowledgement_batches=batches)])],
                                        forgotten_topics_data=[]))

    def ack(self, group, member, epoch, tid, acks, version=1, renew=False):
        R = T.ShareAcknowledgeRequest
        return self.call(79, version, R(group_id=group, member_id=member, share_session_epoch=epoch,
                                        is_renew_ack=renew, topics=[
            R.AcknowledgeTopic(topic_id=tid, partitions=[R.AcknowledgePartition(partition_index=0, acknowledgement_batches=[
                R.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=list(t)) for a, b, t in acks])])]))

    def close(self):
        self.conn.close()


def _part(resp):
    return resp.responses[0].partitions[0]


def test_bad_share_requests_get_kafka_errors_and_lose_nothing(sbroker):
    bs, port = sbroker.bootstrap, sbroker.port
    topic = create_topic(bs, unique_topic("sharebad"), partitions=1)
    tid = next(t.topic_id for t in raw(port, 3, 12, T.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                                                       include_topic_authorized_operations=False))
               .topics if t.name == topic)
    group = new_group(bs)
    produce(bs, topic, 10)
    a, b = Share(port), Share(port)
    try:
        ma, mb = str(uuid.uuid4()), str(uuid.uuid4())
        hb = a.heartbeat(group, ma, 0, [topic])
        assert hb.error_code == 0 and hb.member_epoch >= 1
        # heartbeats: a wrong epoch is fenced, an unknown member unknown, no topics invalid
        assert a.heartbeat(group, ma, hb.member_epoch + 5).error_code == ErrorCode.FENCED_MEMBER_EPOCH
        assert a.heartbeat(group, str(uuid.uuid4()), 3).error_code == ErrorCode.UNKNOWN_MEMBER_ID
        assert a.heartbeat(group, str(uuid.uuid4()), 0, []).error_code == ErrorCode.INVALID_REQUEST
        assert b.heartbeat(group, mb, 0, [topic]).error_code == 0
        # a session must be opened first, and without acknowledgements
        assert a.fetch(group, ma, 1, tid).error_code == ErrorCode.SHARE_SESSION_NOT_FOUND
        assert a.fetch(group, ma, 0, tid, acks=[(0, 0, [1])]).error_code == ErrorCode.INVALID_REQUEST
        nothing = a.fetch(group, ma, 0, tid, max_wait=200, max_bytes=0)  # nothing fits in 0 bytes
        assert nothing.error_code == 0 and _part(nothing).acquired_records == []
        r = a.fetch(group, ma, 0, tid, max_wait=2000)
        assert r.error_code == 0 and r.acquisition_lock_timeout_ms == 2000
        assert [(x.first_offset, x.last_offset, x.delivery_count) for x in _part(r).acquired_records] == [(0, 9, 1)]
        # a stale or skipped epoch
        assert a.fetch(group, ma, 5, tid).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # b cannot acknowledge a's records, nor may ranges overlap; nothing changes
        assert b.fetch(group, mb, 0, tid).error_code == 0
        bad = b.ack(group, mb, 1, tid, [(0, 4, [1])])
        assert bad.error_code == 0 and _part(bad).error_code == ErrorCode.INVALID_RECORD_STATE
        overlap = a.ack(group, ma, 1, tid, [(0, 4, [1]), (3, 6, [1])])
        assert _part(overlap).error_code == ErrorCode.INVALID_REQUEST
        assert a.ack(group, ma, 0, tid, [(0, 0, [1])]).error_code == ErrorCode.INVALID_SHARE_SESSION_EPOCH
        # a's own acknowledgement of 0-4 works (its records were untouched by the bad ones)
        ok = a.ack(group, ma, 2, tid, [(0, 4, [1])])
        assert ok.error_code == 0 and _part(ok).error_code == 0
        # acknowledged twice: refused; reject 5, release 6-9
        assert _part(a.ack(group, ma, 3, tid, [(0, 0, [1])])).error_code == ErrorCode.INVALID_RECORD_STATE
        done = a.fetch(group, ma, 4, tid, acks=[(5, 9, [3, 2, 2, 2, 2])])
        assert _part(done).acknowledge_error_code == 0
        assert [(x.first_offset, x.last_offset, x.delivery_count)
                for x in _part(done).acquired_records] == [(6, 9, 2)]
        # other kinds of group refuse the share group's id and the other way round
        join = raw(port, 11, 5, T.JoinGroupRequest(group_id=group, session_timeout_ms=10000,
                                                   rebalance_timeout_ms=10000, member_id="", group_instance_id=None,
                                                   protocol_type="consumer", protocols=[]))
        assert join.error_code == ErrorCode.INCONSISTENT_GROUP_PROTOCOL
        assert a.heartbeat("classic-" + group, ma, 0, [topic]).error_code == 0  # a fresh id is a share group
    finally:
        a.close()
        b.close()
    # closing a's connection released its records: another member gets 6-9 at once
    c = Share(port)
    try:
        mc = str(uuid.uuid4())
        c.heartbeat(group, mc, 0, [topic])
        r = c.fetch(group, mc, 0, tid, max_wait=2000)
        assert [(x.first_offset, x.last_offset, x.delivery_count) for x in _part(r).acquired_records] == [(6, 9, 3)]
    finally:
        c.close()


# --------------------------------------------------------------------------- the tool
def _tool(*args):
    from tests.integration.test_cli_tools import tool

    return tool("share-groups", *args)


def _rows(p):
    from tests.integration.test_cli_tools import ok

    return [line.split() for line in ok(p) if line.strip()][1:]


def test_share_groups_tool_lists_describes_resets_by_time_and_deletes(sbroker):
    from tests.integration.test_cli_tools import fails, iso

    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharetool"), partitions=1)
    group = new_group(bs)
    base = int(time.time() * 1000) - 3_600_000
    p = Producer({"bootstrap.servers": bs})
    for i in range(10):  # one record a minute, an hour ago
        p.produce(topic, value=f"t{i}".encode(), partition=0, timestamp=base + i * 60_000)
    assert p.flush(30) == 0
    c = consumer(bs, group)
    c.subscribe([topic])
    got = drain([c], 10)[0]
    assert len(got) == 10
    c.commit_sync()  # the implicit acknowledgements go now
    assert _tool("--bootstrap-server", bs, "--list").stdout.split() == [group]
    members = _rows(_tool("--bootstrap-server", bs, "--describe", "--group", group, "--members"))
    assert len(members) == 1 and members[0][0] == group and members[0][-1] == f"{topic}:0"
    assert _rows(_tool("--bootstrap-server", bs, "--describe", "--group", group)) == [
        [group, topic, "0", "10", "10", "0"]]
    # a reset needs the group empty
    fails(_tool("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--all-topics", "--to-earliest",
                "--execute"), 1, "active member")
    c.close()
    wait_for(lambda: "Empty" in _tool("--bootstrap-server", bs, "--describe", "--group", group, "--state").stdout,
             30, "the group empty")
    # by time: the record of minute 4 is the first at or after base + 3.5 minutes
    plan = _rows(_tool("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--topic", topic,
                       "--to-datetime", iso(base + 210_000), "--execute"))
    assert plan == [[group, topic, "0", "4"]]
    assert _rows(_tool("--bootstrap-server", bs, "--describe", "--group", group)) == [
        [group, topic, "0", "4", "10", "6"]]
    c2 = consumer(bs, group)
    c2.subscribe([topic])
    again = drain([c2], 6)[0]
    assert sorted(m.offset() for m in again) == [4, 5, 6, 7, 8, 9]
    c2.commit_sync()
    c2.close()
    wait_for(lambda: "Empty" in _tool("--bootstrap-server", bs, "--describe", "--group", group, "--state").stdout,
             30, "the group empty")
    # delete the group: its share state goes with it
    assert "successful" in _tool("--bootstrap-server", bs, "--delete", "--group", group).stdout
    assert _tool("--bootstrap-server", bs, "--list").stdout.split() == []
    fails(_tool("--bootstrap-server", bs, "--describe", "--group", group), 1, "not found")
    fails(_tool("--bootstrap-server", bs, "--reset-offsets", "--group", group, "--to-earliest"), 2, "--topic")


def test_read_committed_share_groups_never_see_aborted_records(sbroker):
    bs, port = sbroker.bootstrap, sbroker.port
    topic = create_topic(bs, unique_topic("sharetxn"), partitions=1)
    group = new_group(bs, share_isolation_level="read_committed")
    p = Producer({"bootstrap.servers": bs, "transactional.id": "share-txn-" + uuid.uuid4().hex[:6]})
    p.init_transactions(30)
    for outcome in ("commit", "abort", "commit"):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic, value=f"{outcome}-{i}".encode(), partition=0)
        assert p.flush(30) == 0  # written before the outcome, the aborted ones too
        if outcome == "commit":
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    del p
    # offsets: 0-4 committed, 5 marker, 6-10 aborted, 11 marker, 12-16 committed, 17 marker
    c = consumer(bs, group)
    try:
        c.subscribe([topic])
        got = drain([c], 10, timeout=20)[0]
        assert sorted(m.value() for m in got) == sorted([f"commit-{i}".encode() for i in range(5)] * 2)
        assert sorted(m.offset() for m in got) == [0, 1, 2, 3, 4, 12, 13, 14, 15, 16]
        c.commit_sync()
        assert drain([c], 1, timeout=2)[0] == []
    finally:
        c.close()
    # the aborted records and the markers were archived by the broker, never delivered: all 18 done
    offsets = raw(port, 90, 0, T.DescribeShareGroupOffsetsRequest(groups=[
        T.DescribeShareGroupOffsetsRequest.DescribeShareGroupOffsetsRequestGroup(group_id=group, topics=None)]))
    assert [p.start_offset for p in offsets.groups[0].topics[0].partitions] == [18]


def _tid(port, topic):
    md = raw(port, 3, 12, T.MetadataRequest(topics=None, allow_auto_topic_creation=False,
                                            include_topic_authorized_operations=False))
    return next(t.topic_id for t in md.topics if t.name == topic)


def test_share_fetch_v2_record_limit_and_renewed_locks(sbroker):
    bs, port = sbroker.bootstrap, sbroker.port
    topic = create_topic(bs, unique_topic("sharev2"), partitions=1)
    tid = _tid(port, topic)
    group = new_group(bs, share_record_lock_duration_ms=5000)  # margins of 2 s either side of the checks
    p = Producer({"bootstrap.servers": bs, "linger.ms": 50})
    for i in range(10):  # one batch
        p.produce(topic, value=b"x%d" % i, partition=0)
    assert p.flush(30) == 0
    del p
    a, b = Share(port), Share(port)
    try:
        ma, mb = str(uuid.uuid4()), str(uuid.uuid4())
        a.heartbeat(group, ma, 0, [topic])
        b.heartbeat(group, mb, 0, [topic])
        # record-limit: 4 records out of the 10-record batch
        r = a.fetch(group, ma, 0, tid, version=2, mode=1, max_records=4, max_wait=2000)
        assert [(x.first_offset, x.last_offset) for x in _part(r).acquired_records] == [(0, 3)]
        assert b.fetch(group, mb, 0, tid, version=2, mode=1, max_records=4).error_code == 0
        # renew without saying so is refused; with IsRenewAck the lock is extended
        assert a.ack(group, ma, 1, tid, [(0, 3, [4])], version=2).error_code == ErrorCode.INVALID_REQUEST
        time.sleep(3)
        renewed = a.ack(group, ma, 1, tid, [(0, 3, [4])], version=2, renew=True)
        assert renewed.error_code == 0 and _part(renewed).error_code == 0
        assert renewed.acquisition_lock_timeout_ms == 5000
        time.sleep(4)  # 7 s after the acquisition: without the renewal the lock (5 s) would be gone
        taken = b.fetch(group, mb, 1, tid, version=2, mode=1, max_records=10)
        got = [(x.first_offset, x.last_offset) for t in taken.responses for x in t.partitions[0].acquired_records]
        assert got and all(first > 3 for first, _ in got), got  # b gets the rest, never 0-3
        # renew-only fetch: acknowledges (accepts 0-3) and acquires nothing
        only = a.fetch(group, ma, 2, tid, acks=[(0, 3, [1])], version=2, mode=-1)  # 255 as an int8
        assert only.error_code == 0 and _part(only).acknowledge_error_code == 0
        assert _part(only).acquired_records == []
        assert a.fetch(group, ma, 3, tid, version=2, mode=7).error_code == ErrorCode.INVALID_REQUEST
    finally:
        a.close()
        b.close()


def test_two_share_groups_and_a_consumer_group_each_get_every_record(sbroker):
    from confluent_kafka import Consumer

    bs = sbroker.bootstrap
    topic = create_topic(bs, unique_topic("sharemulti"), partitions=2)
    g1, g2 = new_group(bs), new_group(bs)
    produce(bs, topic, 50, partitions=2)
    a, b = consumer(bs, g1), consumer(bs, g2)
    classic = Consumer({"bootstrap.servers": bs, "group.id": "classic-" + g1, "auto.offset.reset": "earliest"})
    try:
        a.subscribe([topic])
        b.subscribe([topic])
        classic.subscribe([topic])
        got_a, got_b = drain([a], 50)[0], drain([b], 50)[0]
        seen = []
        deadline = time.monotonic() + 30
        while len(seen) < 50 and time.monotonic() < deadline:
            m = classic.poll(0.5)
            if m is not None and not m.error():
                seen.append((m.partition(), m.offset()))
        expected = sorted((p, o) for p in (0, 1) for o in range(25))
        assert sorted(keys(got_a)) == expected and sorted(keys(got_b)) == expected and sorted(seen) == expected
    finally:
        a.close()
        b.close()
        classic.close()
