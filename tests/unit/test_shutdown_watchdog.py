"""``broker.server.serve``'s signal handling and the controlled-shutdown watchdog, in
process with a stand-in server (the real shutdown: tests/integration/test_shutdown.py)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from types import SimpleNamespace

import pytest

import broker.server as srv


@pytest.fixture
def keep_signal_handlers():
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, h in saved.items():
        signal.signal(s, h)


def _fake_server(stop_seconds: float, calls: list):
    class FakeServer:
        def __init__(self, config, settle_heap=False):  # BrokerServer's signature
            self.config = config
            self.settle_heap = settle_heap

        async def start(self):
            calls.append("start")
            os.kill(os.getpid(), signal.SIGTERM)  # as if `kill <pid>` right after start

        async def stop(self, timeout_ms):
            calls.append(("stop", timeout_ms))
            os.kill(os.getpid(), signal.SIGINT)  # a second signal while stopping
            await asyncio.sleep(stop_seconds)
            calls.append("stopped")

    return FakeServer


def test_signal_stops_once_and_a_second_signal_is_only_logged(monkeypatch, keep_signal_handlers, caplog):
    calls: list = []
    monkeypatch.setattr(srv, "BrokerServer", _fake_server(0.05, calls))
    exits: list = []
    monkeypatch.setattr(srv.os, "_exit", exits.append)
    with caplog.at_level(logging.INFO, logger="chronolog.server"):
        asyncio.run(srv.serve(SimpleNamespace(controlled_shutdown_timeout_ms=5000)))
    assert calls == ["start", ("stop", 5000), "stopped"]
    assert exits == []
    assert "SIGTERM received: shutting down" in caplog.text
    assert "SIGINT received while shutting down" in caplog.text
    # after serve returns, late signals are ignored rather than killing the process
    assert signal.getsignal(signal.SIGTERM) == signal.SIG_IGN


def test_watchdog_exits_1_when_the_shutdown_overruns(monkeypatch, keep_signal_handlers, caplog):
    calls: list = []
    monkeypatch.setattr(srv, "BrokerServer", _fake_server(1.0, calls))
    exited = threading.Event()
    exits: list = []
    monkeypatch.setattr(srv.os, "_exit", lambda code: (exits.append(code), exited.set()))
    with caplog.at_level(logging.ERROR, logger="chronolog.server"):
        asyncio.run(srv.serve(SimpleNamespace(controlled_shutdown_timeout_ms=200)))
    assert exited.wait(2)
    assert exits == [1]
    assert "did not finish within controlled.shutdown.timeout.ms=200" in caplog.text


def test_a_shutdown_within_the_bound_cancels_the_watchdog(monkeypatch, keep_signal_handlers):
    calls: list = []
    monkeypatch.setattr(srv, "BrokerServer", _fake_server(0.0, calls))
    exits: list = []
    monkeypatch.setattr(srv.os, "_exit", exits.append)
    asyncio.run(srv.serve(SimpleNamespace(controlled_shutdown_timeout_ms=300)))
    threading.Event().wait(0.5)
    assert exits == []
