"""Issue 5 configuration checks not covered elsewhere: the lifecycle/logging properties
(``controlled.shutdown.timeout.ms``, ``logging.format``, ``logging.levels``), Kafka's own
``controlled.shutdown.*`` properties accepted as ignored, one property set in all three
sources, and unknown properties as warnings (not a crash) in ``config --describe``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from config import ConfigError, load_broker_config

ROOT = Path(__file__).resolve().parents[2]


def _env():
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_controlled_shutdown_timeout_default_and_range():
    assert load_broker_config(None, [], env={}).controlled_shutdown_timeout_ms == 8000
    assert load_broker_config(None, ["controlled.shutdown.timeout.ms=3000"], env={}).controlled_shutdown_timeout_ms == 3000
    for bad in ("99", "600001", "-1", "soon"):
        with pytest.raises(ConfigError) as e:
            load_broker_config(None, [f"controlled.shutdown.timeout.ms={bad}"], env={})
        assert str(e.value).startswith(f"Invalid value {bad} for configuration controlled.shutdown.timeout.ms: ")


def test_kafka_controlled_shutdown_properties_are_ignored_not_unknown():
    cfg = load_broker_config(None, ["controlled.shutdown.enable=true", "controlled.shutdown.max.retries=3",
                                    "controlled.shutdown.retry.backoff.ms=5000"], env={})
    assert not cfg.unknown_properties
    assert set(cfg.ignored_properties) == {"controlled.shutdown.enable", "controlled.shutdown.max.retries",
                                           "controlled.shutdown.retry.backoff.ms"}


def test_file_then_env_then_override_for_one_property(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("controlled.shutdown.timeout.ms=1000\nlogging.format=json\n")
    env = {"CHRONOLOG_CONTROLLED_SHUTDOWN_TIMEOUT_MS": "2000"}
    cfg = load_broker_config(str(f), [], env=env)
    assert (cfg.controlled_shutdown_timeout_ms, cfg.source_of("controlled.shutdown.timeout.ms")) == (2000, "env")
    assert (cfg.logging_format, cfg.source_of("logging.format")) == ("json", "file")
    cfg = load_broker_config(str(f), ["controlled.shutdown.timeout.ms=3000"], env=env)
    assert (cfg.controlled_shutdown_timeout_ms, cfg.source_of("controlled.shutdown.timeout.ms")) == (3000, "override")


def test_serve_invalid_new_property_exits_2_with_one_line():
    p = subprocess.run([sys.executable, "-m", "broker", "serve", "--override", "logging.format=xml"],
                       cwd=ROOT, env=_env(), capture_output=True, text=True, timeout=60)
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        "Invalid value xml for configuration logging.format: String must be one of: text, json"]


def test_describe_lists_new_properties_with_sources_and_warns_on_unknown(tmp_path):
    f = tmp_path / "server.properties"
    f.write_text("logging.levels=INFO,storage=DEBUG\nmade.up.property=1\n")
    env = _env()
    env["CHRONOLOG_CONTROLLED_SHUTDOWN_TIMEOUT_MS"] = "5000"
    p = subprocess.run([sys.executable, "-m", "broker", "config", "--describe", "--config", str(f)],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "controlled.shutdown.timeout.ms=5000 (env)" in lines
    assert "logging.levels=INFO,storage=DEBUG (file)" in lines
    assert "logging.format=text (default)" in lines
    assert p.stderr.strip() == "warning: unknown property made.up.property=1 (file)"
