"""Structured logs (issue 5, Lifecycle): plain text by default, JSON lines with a flag or
the ``logging.format`` property, a level per logger with ``--log-level`` or
``logging.levels``."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker import cli
from broker.logging_setup import JsonFormatter, setup_logging
from config import ConfigError, load_broker_config
from config.broker_config import parse_level_spec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def restore_logging():
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    setup_logging("INFO", stream=io.StringIO())  # resets our per-logger levels
    for h in list(root.handlers):
        if getattr(h, "_chronolog", False):
            root.removeHandler(h)
    for h in handlers:
        if h not in root.handlers:
            root.addHandler(h)
    root.setLevel(level)


def test_text_is_the_default():
    buf = io.StringIO()
    setup_logging(stream=buf)
    logging.getLogger("chronolog.test").info("hello %s", "world")
    line = buf.getvalue().strip()
    assert line.endswith(" INFO chronolog.test hello world")
    with pytest.raises(json.JSONDecodeError):
        json.loads(line)


def test_json_lines_with_time_level_logger_message_exception():
    buf = io.StringIO()
    setup_logging("INFO", stream=buf, fmt="json")
    lg = logging.getLogger("chronolog.produce")
    lg.warning("two\nlines %d", 2)
    try:
        raise ValueError("boom")
    except ValueError:
        lg.exception("it failed")
    lines = buf.getvalue().splitlines()
    assert len(lines) == 2, "one JSON object per line, even with newlines and tracebacks"
    first, second = (json.loads(x) for x in lines)
    assert set(first) == {"time", "level", "logger", "message"}
    assert first["level"] == "WARNING" and first["logger"] == "chronolog.produce"
    assert first["message"] == "two\nlines 2"
    assert first["time"].endswith("Z") and "T" in first["time"]
    assert second["message"] == "it failed" and second["level"] == "ERROR"
    assert "Traceback" in second["exception"] and "ValueError: boom" in second["exception"]


def test_json_formatter_handles_unserialisable_args():
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "obj %s", (object(),), None)
    assert json.loads(JsonFormatter().format(rec))["message"].startswith("obj <object")


def test_level_per_logger():
    buf = io.StringIO()
    setup_logging("WARNING,chronolog.produce=DEBUG,storage=ERROR", stream=buf)
    logging.getLogger("chronolog.produce").debug("produce debug")
    logging.getLogger("chronolog.fetch").info("fetch info")  # root WARNING: dropped
    logging.getLogger("storage.log").warning("storage warning")  # storage=ERROR: dropped
    logging.getLogger("storage.log").error("storage error")
    out = buf.getvalue()
    assert "produce debug" in out and "storage error" in out
    assert "fetch info" not in out and "storage warning" not in out


def test_a_second_setup_resets_earlier_per_logger_levels():
    setup_logging("INFO,chronolog.x=ERROR", stream=io.StringIO())
    assert logging.getLogger("chronolog.x").level == logging.ERROR
    setup_logging("INFO", stream=io.StringIO())
    assert logging.getLogger("chronolog.x").level == logging.NOTSET
    root = logging.getLogger()
    assert sum(1 for h in root.handlers if getattr(h, "_chronolog", False)) == 1


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("INFO", ("INFO", {})),
        ("debug", ("DEBUG", {})),
        ("warn", ("WARNING", {})),
        ("chronolog.produce=DEBUG,storage=INFO", (None, {"chronolog.produce": "DEBUG", "storage": "INFO"})),
        (" ERROR , root=INFO , a_b.c-d=critical ", ("INFO", {"a_b.c-d": "CRITICAL"})),
    ],
)
def test_parse_level_spec(spec, expected):
    assert parse_level_spec("x", spec) == expected


@pytest.mark.parametrize("spec", ["", ",", "LOUD", "storage=", "=INFO", "storage=LOUD", "a b=INFO"])
def test_bad_level_spec_names_the_property(spec):
    with pytest.raises(ConfigError) as e:
        parse_level_spec("logging.levels", spec)
    assert "logging.levels" in str(e.value) and "\n" not in str(e.value)


def test_properties_and_env():
    cfg = load_broker_config(None, [], env={"CHRONOLOG_LOGGING_FORMAT": "json",
                                            "CHRONOLOG_LOGGING_LEVELS": "WARN,storage=DEBUG"})
    assert cfg.logging_format == "json" and cfg.logging_levels == "WARN,storage=DEBUG"
    assert cfg.source_of("logging.format") == "env"
    assert load_broker_config(None, [], env={}).logging_format == "text"
    with pytest.raises(ConfigError, match="logging.format"):
        load_broker_config(None, ["logging.format=xml"], env={})
    with pytest.raises(ConfigError, match="logging.levels"):
        load_broker_config(None, ["logging.levels=storage=LOUD"], env={})


def test_bad_log_format_in_setup():
    with pytest.raises(ConfigError):
        setup_logging("INFO", stream=io.StringIO(), fmt="xml")


def test_serve_flag_validation_exits_2(capsys):
    assert cli.main(["serve", "--log-level", "storage=LOUD"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--log-level" in err[0] and "storage=LOUD" in err[0]
    with pytest.raises(SystemExit) as e:
        cli.main(["serve", "--log-format", "xml"])
    assert e.value.code == 2


# -------------------------------------------------------------- the real command


def _run_serve(tmp_path: Path, args: list[str], env_extra: dict | None = None) -> str:
    """Start ``python -m broker serve`` on an ephemeral port, wait for the listening line,
    SIGTERM it and return everything it wrote (stderr)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(REPO)
    cmd = [sys.executable, "-m", "broker", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
           "--override", f"log.dirs={tmp_path / 'data'}", "--override", "metrics.port=0",
           "--override", "no.such.property=1", *args]
    proc = subprocess.Popen(cmd, cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if "Chronolog listening on" in line:
                break
        proc.terminate()
        rest, _ = proc.communicate(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, "".join(lines) + rest
    return "".join(lines) + rest


@pytest.mark.timeout(60)
def test_cli_json_logs(tmp_path):
    out = _run_serve(tmp_path, ["--log-format", "json", "--log-level", "INFO,chronolog.server=DEBUG"])
    objs = [json.loads(line) for line in out.splitlines() if line.strip()]  # every line is JSON
    assert any("Chronolog listening on" in o["message"] and o["logger"] == "chronolog.server" for o in objs)
    assert any("Chronolog stopped" in o["message"] for o in objs)
    unknown = [o for o in objs if "no.such.property" in o["message"]]
    assert unknown and unknown[0]["level"] == "WARNING", "the unknown-property warning is JSON too"
    assert all({"time", "level", "logger", "message"} <= set(o) for o in objs)


@pytest.mark.timeout(60)
def test_cli_json_logs_from_the_env_and_levels_from_the_property(tmp_path):
    out = _run_serve(tmp_path, ["--override", "logging.levels=WARNING,chronolog.server=INFO"],
                     env_extra={"CHRONOLOG_LOGGING_FORMAT": "json"})
    objs = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert {o["logger"] for o in objs if o["level"] == "INFO"} <= {"chronolog.server"}, objs
    assert any("Chronolog listening on" in o["message"] for o in objs)


@pytest.mark.timeout(60)
def test_cli_text_logs_by_default(tmp_path):
    out = _run_serve(tmp_path, [])
    listening = [line for line in out.splitlines() if "Chronolog listening on" in line]
    assert listening and " INFO chronolog.server Chronolog listening on" in listening[0]
    assert not listening[0].startswith("{")
