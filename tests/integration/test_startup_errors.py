"""Start-up failures end the broker with one clear line and exit code 1, never a Python
traceback, and leave the log dir as it was: a listener port already in use, a log dir
that cannot be created, a log dir another broker holds (.lock, as Kafka: two brokers on
one data dir must be impossible), an invalid property, a TLS keystore that cannot be
loaded."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.helpers import REPO_ROOT, Broker, BrokerStartError


def _serve(*overrides, timeout=60):
    cmd = [sys.executable, "-m", "broker", "serve", "-o", "metrics.port=0"]
    for o in overrides:
        cmd += ["-o", o]
    return subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, timeout=timeout)


def _one_line_failure(proc, expected: str) -> None:
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-2000:]
    assert "Traceback" not in out, out[-3000:]
    lines = [line for line in out.splitlines() if "could not start" in line]
    assert len(lines) == 1 and expected in lines[0], out[-2000:]


def test_a_listener_port_in_use_is_one_line(tmp_path):
    b = Broker(tmp_path / "first").start()
    try:
        proc = _serve(f"listeners=PLAINTEXT://127.0.0.1:{b.port}", f"log.dirs={tmp_path / 'second'}")
        _one_line_failure(proc, f"cannot listen on 127.0.0.1:{b.port} for listener PLAINTEXT: the address is "
                                "already in use")
        assert "listeners" in proc.stderr
    finally:
        b.stop()


def test_a_log_dir_held_by_another_broker_is_refused(tmp_path):
    b = Broker(tmp_path / "first").start()
    try:
        proc = _serve("listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={b.log_dir}")
        _one_line_failure(proc, f"Failed to acquire lock on file .lock in {b.log_dir}. A Kafka instance in another "
                                "process or thread is using this directory.")
        # the first broker is untouched: it still serves and stops cleanly
        assert b.running
    finally:
        assert b.stop() == 0
    # once it is gone the dir can be used again
    again = Broker(tmp_path / "first").start()
    assert again.stop() == 0


def test_a_log_dir_that_cannot_be_created(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    proc = _serve("listeners=PLAINTEXT://127.0.0.1:0", f"log.dirs={blocker}/data")
    _one_line_failure(proc, f"log.dirs: cannot create the log dir {blocker}/data")


def test_a_tls_keystore_that_cannot_be_loaded_is_one_line(tmp_path):
    """The listeners' TLS files are read at start: a keystore OpenSSL refuses (here not a
    PEM at all) ends the start with the property, the value and the reason."""
    bad = tmp_path / "broker.pem"
    bad.write_text("-----BEGIN CERTIFICATE-----\nnot base64\n-----END CERTIFICATE-----\n")
    proc = _serve("listeners=SSL://127.0.0.1:0", f"log.dirs={tmp_path / 'data'}", "ssl.keystore.type=PEM",
                  f"ssl.keystore.location={bad}")
    _one_line_failure(proc, f"Invalid value {bad} for configuration ssl.keystore.location: cannot load")
    # the log dir's lock was released: a broker can start on it at once
    again = Broker(tmp_path / "data").start()
    assert again.stop() == 0


@pytest.mark.parametrize("prop,expected", [
    ("log.segment.bytes=abc", "Invalid value abc for configuration log.segment.bytes"),
    ("num.partitions=0", "num.partitions"),
])
def test_an_invalid_property_is_one_line(tmp_path, prop, expected):
    proc = _serve(f"log.dirs={tmp_path}", prop)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "Traceback" not in out and expected in out, out[-2000:]
    assert len(out.strip().splitlines()) <= 2, out


def test_the_helper_reports_a_failed_start(tmp_path):
    b = Broker(tmp_path / "x", {"log.segment.bytes": "-5"})
    with pytest.raises(BrokerStartError):
        b.start()
