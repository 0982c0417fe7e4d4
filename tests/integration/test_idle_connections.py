"""Many idle connections: each keeps working and costs the broker little memory (its
receive buffer is anonymous memory made resident only where a read reaches, not a 256
KiB zero-filled bytearray: 1,000 such connections took 250 MiB)."""

from __future__ import annotations

import socket
import struct

import pytest

from tests.integration.helpers import create_topic, produce_ck, make_records, start_broker, unique_topic, consume

pytestmark = [pytest.mark.timeout(180)]

N = 300


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _api_versions(s: socket.socket, correlation_id: int) -> int:
    client = b"idle-test"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client)) + client
    s.sendall(struct.pack(">i", len(body)) + body)
    size = struct.unpack(">i", _recv(s, 4))[0]
    resp = _recv(s, size)
    return struct.unpack_from(">i", resp)[0]


def _recv(s, n):
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        assert chunk, "connection closed by the broker"
        buf += chunk
    return buf


def test_idle_connections_cost_little_and_keep_working(tmp_path):
    b = start_broker(tmp_path)
    socks = []
    try:
        topic = unique_topic("idle")
        create_topic(b.bootstrap, topic)
        before = _rss_kib(b.proc.pid)
        host, port = b.bootstrap.rsplit(":", 1)
        for i in range(N):
            s = socket.create_connection((host, int(port)), timeout=10)
            assert _api_versions(s, i) == i
            socks.append(s)
        grown = _rss_kib(b.proc.pid) - before
        # 256 KiB zero-filled per connection would be 75 MiB; allow 64 KiB each
        assert grown < N * 64, f"RSS grew by {grown} KiB for {N} idle connections"
        recs = make_records(50, base_ts=None)
        produce_ck(b.bootstrap, topic, recs)
        assert [g.value for g in consume("ck", b.bootstrap, topic, 50)] == [r.value for r in recs]
        for i, s in enumerate(socks):  # every idle connection still answers
            assert _api_versions(s, 1000 + i) == 1000 + i
    finally:
        for s in socks:
            s.close()
        b.stop()
