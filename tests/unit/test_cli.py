"""The `chronolog` CLI: serve (config errors -> exit 2), config --describe."""

import logging
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

from broker import cli

ROOT = Path(__file__).resolve().parents[2]


def _clean_env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture(autouse=True)
def _restore_logging():
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield
    for h in list(root.handlers):
        if h not in handlers:
            root.removeHandler(h)
    root.setLevel(level)


@pytest.fixture
def no_chronolog_env(monkeypatch):
    for k in list(os.environ):
        if k.startswith("CHRONOLOG_"):
            monkeypatch.delenv(k)


def test_python_m_broker_serve_bad_value_exits_2():
    p = subprocess.run(
        [sys.executable, "-m", "broker", "serve", "--override", "log.segment.bytes=abc"],
        cwd=ROOT,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert lines == ["Invalid value abc for configuration log.segment.bytes: Not a number of type INT"]
    assert p.stdout == ""


def test_python_m_broker_serve_range_error_from_env_exits_2():
    env = _clean_env()
    env["CHRONOLOG_LOG_SEGMENT_BYTES"] = "13"
    p = subprocess.run(
        [sys.executable, "-m", "broker", "serve"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert p.returncode == 2
    assert p.stderr.strip() == "Invalid value 13 for configuration log.segment.bytes: Value must be at least 14"


def test_python_m_broker_config_describe(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("num.partitions=3\nlog.segment.bytes=1000\n")
    env = _clean_env()
    env["CHRONOLOG_LOG_SEGMENT_BYTES"] = "2000"
    p = subprocess.run(
        [sys.executable, "-m", "broker", "config", "--describe", "--config", str(f), "--override", "node.id=4"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "num.partitions=3 (file)" in lines
    assert "log.segment.bytes=2000 (env)" in lines
    assert "node.id=4 (override)" in lines
    assert "log.dirs=./data (default)" in lines
    assert "listeners=PLAINTEXT://127.0.0.1:9092 (default)" in lines


def test_serve_calls_server_run(monkeypatch, tmp_path, no_chronolog_env):
    calls = []
    fake = types.ModuleType("broker.server")
    fake.run = lambda cfg: calls.append(cfg) or 0
    monkeypatch.setitem(sys.modules, "broker.server", fake)
    rc = cli.main(["serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0", "-o", f"log.dirs={tmp_path}", "--log-level", "debug"])
    assert rc == 0
    assert len(calls) == 1
    cfg = calls[0]
    assert cfg.listener() == ("127.0.0.1", 0)
    assert cfg.log_dirs == [str(tmp_path)]
    assert logging.getLogger().level == logging.DEBUG


def test_serve_propagates_run_exit_code(monkeypatch, no_chronolog_env):
    fake = types.ModuleType("broker.server")
    fake.run = lambda cfg: 3
    monkeypatch.setitem(sys.modules, "broker.server", fake)
    assert cli.main(["serve"]) == 3


def test_serve_config_error_does_not_import_server(monkeypatch, capsys, no_chronolog_env):
    fake = types.ModuleType("broker.server")
    fake.run = lambda cfg: pytest.fail("server must not run")
    monkeypatch.setitem(sys.modules, "broker.server", fake)
    assert cli.main(["serve", "--override", "log.message.timestamp.type=Now"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "Invalid value Now for configuration log.message.timestamp.type: String must be one of: CreateTime, LogAppendTime"
    ]


def test_serve_missing_config_file(capsys, no_chronolog_env):
    assert cli.main(["serve", "--config", "/nonexistent/server.properties"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent/server.properties" in err and len(err.strip().splitlines()) == 1


def test_serve_malformed_override(capsys, no_chronolog_env):
    assert cli.main(["serve", "--override", "log.segment.bytes"]) == 2
    assert "key=value" in capsys.readouterr().err


def test_serve_unknown_property_warns_in_log(monkeypatch, capsys, no_chronolog_env):
    fake = types.ModuleType("broker.server")
    fake.run = lambda cfg: 0
    monkeypatch.setitem(sys.modules, "broker.server", fake)
    assert cli.main(["serve", "--override", "no.such.prop=1"]) == 0
    err = capsys.readouterr().err
    assert "WARNING chronolog.config" in err and "no.such.prop" in err


def test_config_describe_output(tmp_path, capsys, monkeypatch, no_chronolog_env):
    f = tmp_path / "s.properties"
    f.write_text("log.retention.hours=1\nzookeeper.connect=zk:2181\nmystery=1\n")
    monkeypatch.setenv("CHRONOLOG_NUM_PARTITIONS", "6")
    assert cli.main(["config", "--describe", "--config", str(f), "-o", "log.roll.ms=100"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert "log.retention.hours=1 (file)" in lines
    assert "num.partitions=6 (env)" in lines
    assert "log.roll.ms=100 (override)" in lines
    assert "log.retention.ms=null (default)" in lines
    assert "auto.create.topics.enable=true (default)" in lines
    assert "zookeeper.connect=zk:2181 (file, ignored)" in lines
    assert "mystery=1" in err and "mystery" not in out
    props = [l.split("=", 1)[0] for l in lines if not l.endswith(", ignored)")]
    assert props == sorted(props)
    for line in lines:
        assert line.endswith(")") and "=" in line


def test_config_describe_error_exit_2(capsys, no_chronolog_env):
    assert cli.main(["config", "--describe", "-o", "num.partitions=0"]) == 2
    assert capsys.readouterr().err.strip() == "Invalid value 0 for configuration num.partitions: Value must be at least 1"


def test_config_without_describe_is_usage_error(capsys):
    assert cli.main(["config"]) == 2


def test_no_subcommand_is_usage_error(capsys):
    assert cli.main([]) == 2
    assert "serve" in capsys.readouterr().err


def test_unknown_subcommand_exits_2():
    with pytest.raises(SystemExit) as ei:
        cli.main(["frobnicate"])
    assert ei.value.code == 2


def test_log_format(capsys):
    import io

    buf = io.StringIO()
    cli.setup_logging("INFO", stream=buf)
    logging.getLogger("chronolog.test").info("hello")
    line = buf.getvalue().strip()
    # time level logger message
    assert line.endswith(" INFO chronolog.test hello")
    assert line[:4].isdigit()


def test_console_script_declared():
    """setup.py declares it (pyproject.toml marks scripts dynamic): broker.cli:main in the
    repository's layout, chronolog.broker.cli:main in a wheel (tests/integration/test_wheel.py)."""
    assert 'dynamic = ["scripts"]' in (ROOT / "pyproject.toml").read_text()
    assert '"console_scripts": [f"chronolog = {PREFIX}broker.cli:main"]' in (ROOT / "setup.py").read_text()
    import shutil

    exe = shutil.which("chronolog", path=str(Path(sys.executable).parent))
    assert exe and "from broker.cli import main" in Path(exe).read_text()
