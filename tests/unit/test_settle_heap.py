"""The broker process's heap settling (broker.server.settle_heap, gc.freeze): what the
broker is made of goes out of the cyclic collector's reach once it has started and
loaded its partitions, and again whenever SETTLE_AGAIN_AFTER more partitions have been
made, so that no full collection walks every partition's objects on the event loop."""

from __future__ import annotations

import time

from broker import server as server_mod
from tests.integration.helpers import create_topic
from tests.unit.inprocess_broker import in_process_broker


def _wait(cond, what, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, what
        time.sleep(0.02)


def test_the_heap_is_settled_once_started_and_again_as_a_large_topic_is_made(tmp_path, monkeypatch):
    """Settled at start; a topic of 200 partitions, made in the background, settles it
    again each time 50 more have been made (SETTLE_AGAIN_AFTER here), not for every
    slice; a topic of a few partitions does not, but 50 partitions of small topics do."""
    settled = []  # LogManager.logs_opened at each settle (the test process's own heap stays as it is)
    monkeypatch.setattr(server_mod, "SETTLE_AGAIN_AFTER", 50)
    holder = []
    monkeypatch.setattr(server_mod, "settle_heap", lambda: settled.append(holder[0].log_manager.logs_opened) or 0)
    with in_process_broker(tmp_path, settle_heap=True, before_start=holder.append) as (server, port):
        bootstrap = f"127.0.0.1:{port}"
        _wait(lambda: settled == [0], "not settled once started")
        create_topic(bootstrap, "large", partitions=200)
        _wait(lambda: server.log_manager.logs_opened >= 200 and server.log_manager.logs_opened - settled[-1] < 50,
              "the large topic's partitions were not settled while made")
        assert len(settled) >= 4, settled
        assert all(b - a >= 50 for a, b in zip(settled, settled[1:])), settled  # not for every slice
        before = list(settled)
        create_topic(bootstrap, "small", partitions=3)
        time.sleep(0.3)
        if server.log_manager.logs_opened - before[-1] < 50:
            assert settled == before  # 3 more partitions, not yet 50 since the last settle
        else:
            assert settled == before + [server.log_manager.logs_opened]
        before = list(settled)
        # many small topics, each made at once (not in the background), add up the same way
        for i in range(20):
            create_topic(bootstrap, f"small-{i}", partitions=3)
        _wait(lambda: len(settled) > len(before), "60 partitions of small topics were not settled")
        assert all(b - a >= 50 for a, b in zip(settled, settled[1:])), settled


def test_an_in_process_broker_leaves_its_process_heap_alone(tmp_path, monkeypatch):
    """Tests run brokers in their own process: those do not freeze it."""
    calls = []
    monkeypatch.setattr(server_mod, "settle_heap", lambda: calls.append(1) or 0)
    monkeypatch.setattr(server_mod, "SETTLE_AGAIN_AFTER", 50)
    with in_process_broker(tmp_path) as (server, port):
        bootstrap = f"127.0.0.1:{port}"
        create_topic(bootstrap, "large", partitions=100)
        _wait(lambda: server.log_manager.logs_opened >= 100, "the large topic was not made")
        time.sleep(0.2)
        assert calls == []


def test_settle_heap_moves_what_exists_and_later_garbage_is_still_collected():
    """broker.server.settle_heap (the broker process calls it once loaded, then as it grows): every object
    tracked then is out of the cyclic collector's reach; a cycle made later is collected
    as before."""
    import gc
    import weakref

    from broker.server import settle_heap

    class Node:
        pass

    before = Node()
    before.self = before
    early = weakref.ref(before)
    try:
        assert settle_heap() > 0
        del before
        gc.collect()
        assert early() is not None  # frozen: a full collection does not walk it
        later = Node()
        later.self = later
        late = weakref.ref(later)
        del later
        gc.collect()
        assert late() is None
    finally:
        gc.unfreeze()  # this test process as it was
        gc.collect()
    assert early() is None
