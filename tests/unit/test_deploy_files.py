"""The container files, checked without Docker (none on the development machines):
``Dockerfile``, ``docker-compose.yml``, ``deploy/prometheus/prometheus.yml`` and the
Grafana provisioning + dashboard under ``deploy/grafana``; and the ``chronolog
healthcheck`` subcommand the HEALTHCHECK runs.

The dashboard's PromQL may only use metric names that exist: the names are scraped from
a live broker's ``/metrics`` (started here with ``metrics.port``), not copied into this
file, so a renamed metric fails the test."""

from __future__ import annotations

import json
import os
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

yaml = pytest.importorskip("yaml", reason="PyYAML is in the test extra (pyproject.toml)")

from config import load_broker_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
PROMETHEUS = ROOT / "deploy" / "prometheus" / "prometheus.yml"
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "dashboards" / "chronolog.json"


# ------------------------------------------------------------------ helpers


def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


GLOBAL = "(global)"


def dockerfile_stages() -> dict[str, list[tuple[str, str]]]:
    """{stage name: [(INSTRUCTION, arguments)]}, continuation lines joined, comments dropped."""
    lines, cur = [], ""
    for raw in DOCKERFILE.read_text().splitlines():
        s = raw.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        lines.append(cur + s)
        cur = ""
    stages: dict[str, list[tuple[str, str]]] = {GLOBAL: []}  # GLOBAL: the ARGs before the first FROM
    name = GLOBAL
    for line in lines:
        instr, _, args = line.partition(" ")
        instr = instr.upper()
        if instr == "FROM":
            m = re.match(r"(\S+)(?:\s+AS\s+(\S+))?", args.strip(), re.I)
            name = m.group(2) or m.group(1)
            stages[name] = []
        stages[name].append((instr, args.strip()))
    return stages


def dockerfile_env(instrs: list[tuple[str, str]]) -> dict[str, str]:
    env = {}
    for instr, args in instrs:
        if instr == "ENV":
            for tok in shlex.split(args):
                k, _, v = tok.partition("=")
                env[k] = v
    return env


def compose_env(service: dict) -> dict[str, str]:
    """The service's environment with ${VAR:-default} substituted by the default."""
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: re.sub(r"\$\{[A-Za-z_]+:-([^}]*)\}", r"\1", str(v)) for k, v in env.items()}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_cli(*args, timeout=30) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "broker", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout)


# ------------------------------------------------------------------ a live broker


@pytest.fixture(scope="module")
def live_broker(tmp_path_factory):
    """A broker with the metrics endpoint: -> (kafka port, metrics port)."""
    tmp = tmp_path_factory.mktemp("deploy-broker")
    metrics_port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("CHRONOLOG_")}
    env["PYTHONPATH"] = str(ROOT)
    log = open(tmp / "broker.log", "wb")
    proc = subprocess.Popen(
        [sys.executable, "-m", "broker", "serve", "--override", "listeners=PLAINTEXT://127.0.0.1:0",
         "--override", f"log.dirs={tmp / 'data'}", "--override", f"metrics.port={metrics_port}"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        port = None
        while port is None:
            m = re.search(r"Chronolog listening on 127\.0\.0\.1:(\d+)", (tmp / "broker.log").read_text())
            if m:
                port = int(m.group(1))
            elif proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail("broker did not start:\n" + (tmp / "broker.log").read_text())
            else:
                time.sleep(0.05)
        yield port, metrics_port
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        finally:
            if proc.poll() is None:
                proc.kill()
            log.close()


@pytest.fixture(scope="module")
def exposed_metric_names(live_broker) -> set[str]:
    """Every series name the live broker's /metrics can produce (from its # TYPE lines:
    counters as <name>_total, histograms as _bucket/_sum/_count), after a produce and a
    group commit so that the per-topic and per-group families have samples too."""
    port, metrics_port = live_broker
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    p = KafkaProducer(bootstrap_servers=f"127.0.0.1:{port}", request_timeout_ms=15000)
    for i in range(5):
        p.send("deploy-check", value=b"v%d" % i)
    p.flush(15)
    p.close()
    c = KafkaConsumer(bootstrap_servers=f"127.0.0.1:{port}", group_id="deploy-check-group",
                      enable_auto_commit=False, request_timeout_ms=15000)
    c.commit({TopicPartition("deploy-check", 0): OffsetAndMetadata(2, "", -1)})
    c.close()
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read().decode()
    names = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(None, 3)
            names.add(name)
            if kind == "counter":
                names |= {name + "_total", name + "_created"}
            elif kind in ("histogram", "summary"):
                names |= {name + "_bucket", name + "_sum", name + "_count", name + "_created"}
        elif line and not line.startswith("#"):
            names.add(re.match(r"[a-zA-Z_:][a-zA-Z0-9_:]*", line).group(0))
    assert "kafka_topic_partition_current_offset" in names, text[:2000]
    return names


# ------------------------------------------------------------------ PromQL


_PROMQL_WORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "offset", "bool",
    "inf", "nan",
}


def promql_metric_names(expr: str) -> set[str]:
    """The metric names an expression selects (function names, label names in
    by/without/on/ignoring lists, label matchers, strings and Grafana $variables are not)."""
    s = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    s = re.sub(r"\{[^}]*\}", "", s)  # label matchers
    s = re.sub(r"\[[^\]]*\]", "", s)  # ranges
    s = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", s)
    s = re.sub(r"\$\w+", " ", s)
    names = set()
    for m in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", s):
        word = m.group(0)
        rest = s[m.end():].lstrip()
        if rest.startswith("(") or word.lower() in _PROMQL_WORDS:
            continue  # a function or a keyword
        if m.start() > 0 and (s[m.start() - 1].isdigit() or s[m.start() - 1] == "."):
            continue  # 1e3, 0.99
        names.add(word)
    return names


def test_promql_name_extraction():
    assert promql_metric_names(
        'histogram_quantile(0.99, sum by (le, api) (rate(chronolog_request_latency_seconds_bucket'
        '{topic=~"$topic"}[$__rate_interval])))') == {"chronolog_request_latency_seconds_bucket"}
    assert promql_metric_names("a_total / on (topic) group_left b + 2 * c") == {"a_total", "b", "c"}


def dashboard_exprs(dash: dict) -> list[tuple[str, str]]:
    """[(where, PromQL)] for every panel target and every query variable."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p.get('title')!r}", t["expr"]))
            walk(p.get("panels", []))

    walk(dash.get("panels", []))
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        if var.get("type") == "query" and q:
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\)\s*", q)
            out.append((f"variable {var['name']!r}", m.group(1) if m else q))
    return out


# ------------------------------------------------------------------ the dashboard


def test_dashboard_is_valid_json_with_the_required_panels():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"]
    panels = [p for p in dash["panels"] if p["type"] != "row"]
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"]), "panel ids must be unique"
    for p in panels:
        assert p["targets"], p["title"]
        assert p["datasource"]["uid"] == "prometheus"
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24 and g["h"] > 0
    text = {p["title"]: " ".join(t["expr"] for t in p["targets"]) for p in panels}
    everything = " ".join(text.values())
    required = {
        "throughput: bytes in": "chronolog_topic_bytes_in_total",
        "throughput: messages in": "chronolog_topic_messages_in_total",
        "request latency": "chronolog_request_latency_seconds_bucket",
        "partition offsets": "kafka_topic_partition_current_offset",
        "group lag in records": "kafka_consumergroup_lag{",
        "group lag in seconds": "kafka_consumergroup_lag_seconds",
        "produce append delay": "chronolog_produce_append_delay_seconds_bucket",
    }
    missing = [what for what, needle in required.items() if needle not in everything]
    assert not missing, f"no panel for {missing}"


def test_dashboard_queries_use_only_metrics_the_broker_exposes(exposed_metric_names):
    dash = json.loads(DASHBOARD.read_text())
    exprs = dashboard_exprs(dash)
    assert len(exprs) >= 10
    unknown = [(where, name) for where, expr in exprs for name in promql_metric_names(expr)
               if name not in exposed_metric_names]
    assert not unknown, f"dashboard queries name metrics the broker does not expose: {unknown}"


def test_grafana_provisioning_matches_compose():
    ds = yaml.safe_load((GRAFANA / "provisioning" / "datasources" / "prometheus.yml").read_text())
    (source,) = ds["datasources"]
    assert source["type"] == "prometheus" and source["uid"] == "prometheus"
    assert source["url"] == "http://prometheus:9090"
    prov = yaml.safe_load((GRAFANA / "provisioning" / "dashboards" / "chronolog.yml").read_text())
    (provider,) = prov["providers"]
    dash_path = provider["options"]["path"]
    vols = compose()["services"]["grafana"]["volumes"]
    mounts = {v.split(":")[1]: v.split(":")[0] for v in vols}
    assert mounts[dash_path] == "./deploy/grafana/dashboards"
    assert mounts["/etc/grafana/provisioning"] == "./deploy/grafana/provisioning"
    assert (ROOT / mounts[dash_path] / "chronolog.json").is_file()


# ------------------------------------------------------------------ compose


def test_compose_file_is_accepted_by_docker_compose_1_29():
    """Debian's docker-compose 1.29 (installed by `make tools`) rejects a top-level `name:`."""
    import shutil

    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: `make tools` installs Debian's"
    p = subprocess.run([exe, "-f", str(COMPOSE), "config", "-q"], capture_output=True, text=True, timeout=120,
                       cwd=ROOT)
    assert p.returncode == 0, p.stderr
    assert "name" not in compose()


def test_compose_services_ports_volumes_healthcheck():
    c = compose()
    services = c["services"]
    assert {"chronolog", "prometheus", "grafana", "tests"} <= set(services)
    broker = services["chronolog"]
    assert broker["build"]["target"] == "broker"
    # the host's 9092 is the EXTERNAL listener (advertised as localhost:9092)
    assert {"9092:29092", "9404:9404"} <= set(broker["ports"])
    vol_name, _, mount = broker["volumes"][0].partition(":")
    assert mount == "/data" and vol_name in c["volumes"]
    hc = broker["healthcheck"]
    assert hc["test"][:3] == ["CMD", "chronolog", "healthcheck"]
    assert "--bootstrap-server" in hc["test"]
    assert services["prometheus"]["depends_on"]["chronolog"]["condition"] == "service_healthy"
    assert "9090:9090" in services["prometheus"]["ports"] and "3000:3000" in services["grafana"]["ports"]
    prom_mounts = {v.split(":")[1]: v.split(":")[0] for v in services["prometheus"]["volumes"]}
    assert prom_mounts["/etc/prometheus/prometheus.yml"] == "./deploy/prometheus/prometheus.yml"


def test_compose_broker_environment_is_a_valid_config():
    env = compose_env(compose()["services"]["chronolog"])
    cfg = load_broker_config(None, [], env=env, warn=False)  # raises ConfigError if invalid
    assert not cfg.unknown_properties, cfg.unknown_properties
    assert cfg.log_dirs == ["/data"]
    assert cfg.listener() == ("0.0.0.0", 9092)
    assert cfg.advertised_listener() == ("chronolog", 9092)
    specs = {spec.name: spec for spec in cfg.listener_specs()}
    assert (specs["EXTERNAL"].port, specs["EXTERNAL"].advertised_host, specs["EXTERNAL"].advertised_port) == \
        (29092, "localhost", 9092)
    assert cfg.metrics_port == 9404


def test_compose_tests_service_points_at_the_broker_service():
    c = compose()
    tests = c["services"]["tests"]
    assert tests["build"]["target"] == "tests" and "tests" in dockerfile_stages()
    assert tests["depends_on"]["chronolog"]["condition"] == "service_healthy"
    host, _, port = compose_env(tests)["EXTERNAL_BROKER"].partition(":")
    assert host == "chronolog" and port == "9092"
    # the suite reads that variable, and runs only the tests that make sense against it
    conftest = (ROOT / "tests" / "integration" / "conftest.py").read_text()
    assert 'EXTERNAL_BROKER_ENV = "EXTERNAL_BROKER"' in conftest
    cmd = " ".join(dict(dockerfile_stages()["tests"])["CMD"].split())
    from tests.integration.conftest import EXTERNAL_BROKER_TESTS

    for path in EXTERNAL_BROKER_TESTS:
        assert path in cmd and (ROOT / path).is_file()


# ------------------------------------------------------------------ Dockerfile


def test_dockerfile_slim_nonroot_volume_expose_healthcheck():
    stages = dockerfile_stages()
    broker = stages["broker"]
    instrs = dict(broker) | dict(stages["base"])  # last of each, the broker's over its base's
    # the broker is the last stage (a plain `docker build .` gives it), built on the
    # shared base, whose image is a build argument defaulting to the slim Python image
    assert list(stages)[-1] == "broker" and broker[0] == ("FROM", "base AS broker")
    assert stages["base"][0] == ("FROM", "${BASE_IMAGE} AS base")
    assert ("ARG", "BASE_IMAGE=python:3.11-slim") in stages[GLOBAL]
    for name, stage in stages.items():
        if name == GLOBAL:
            continue
        users = [a for i, a in stage if i == "USER"]
        parent = stage[0][1].split()[0]
        if not users and parent in stages:  # inherited from the stage it is built on
            users = [a for i, a in stages[parent] if i == "USER"]
        assert users and users[-1].split(":")[0] not in ("root", "0"), f"stage {name} ends as root"
    # the test runner runs no broker: neither it nor its base has a volume or a health check
    for name in ("base", "tests"):
        assert not {"VOLUME", "HEALTHCHECK", "ENTRYPOINT"} & {i for i, _ in stages[name]}, name
    broker = stages["base"] + broker[1:]
    assert json.loads(instrs["VOLUME"]) == ["/data"]
    assert set(instrs["EXPOSE"].split()) == {"9092", "9404"}
    hc = instrs["HEALTHCHECK"]
    cmd = json.loads(hc[hc.index("CMD") + 3:].strip())
    assert cmd[:2] == ["chronolog", "healthcheck"] and "127.0.0.1:9092" in cmd
    env = dockerfile_env(broker)
    cfg = load_broker_config(None, [], env=env, warn=False)
    assert not cfg.unknown_properties
    assert cfg.log_dirs == ["/data"] and cfg.listener() == ("0.0.0.0", 9092) and cfg.metrics_port == 9404
    assert "CHRONOLOG_ADVERTISED_LISTENERS" in env
    assert cfg.controlled_shutdown_timeout_ms < 10_000, "must finish within docker stop's 10 s grace"


def test_dockerfile_copies_exist_and_are_not_dockerignored():
    ignored = [line.strip() for line in (ROOT / ".dockerignore").read_text().splitlines()
               if line.strip() and not line.startswith("#")]
    for stage in dockerfile_stages().values():
        for instr, args in stage:
            if instr == "COPY" and not args.startswith("--from"):
                *sources, _dest = args.split()
                for src in sources:
                    assert (ROOT / src).exists(), src
                    assert src not in ignored, f"{src} is copied but .dockerignore excludes it"


def test_prometheus_scrapes_the_broker_metrics_port():
    prom = yaml.safe_load(PROMETHEUS.read_text())
    targets = [t for job in prom["scrape_configs"] for sc in job["static_configs"] for t in sc["targets"]]
    port = compose_env(compose()["services"]["chronolog"])["CHRONOLOG_METRICS_PORT"]
    assert f"chronolog:{port}" in targets
    job = next(j for j in prom["scrape_configs"] if f"chronolog:{port}" in j["static_configs"][0]["targets"])
    assert job.get("metrics_path", "/metrics") == "/metrics"


# ------------------------------------------------------------------ alert rules

ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"


def promtool() -> str:
    """Debian's promtool: on the PATH, or unpacked by `make tools` into .tools/."""
    import shutil

    found = shutil.which("promtool") or ROOT / ".tools" / "prometheus" / "usr" / "bin" / "promtool"
    assert Path(found).is_file(), "promtool is missing: `make tools` unpacks Debian's prometheus package into .tools/"
    return str(found)


def run_promtool(*args) -> str:
    p = subprocess.run([promtool(), *args], cwd=PROMETHEUS.parent, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    return p.stdout + p.stderr


def test_alert_rules_pass_promtool_check_and_their_unit_tests():
    out = run_promtool("check", "rules", ALERTS.name)
    assert "SUCCESS: 5 rules found" in out
    assert "SUCCESS" in run_promtool("test", "rules", "alerts_test.yml")
    # prometheus.yml loads them (the file compose mounts beside it)
    assert "1 rule files found" in run_promtool("check", "config", PROMETHEUS.name)
    prom_mounts = {v.split(":")[1]: v.split(":")[0] for v in compose()["services"]["prometheus"]["volumes"]}
    assert prom_mounts["/etc/prometheus/alerts.yml"] == "./deploy/prometheus/alerts.yml"


def test_alert_rule_unit_tests_can_fail(tmp_path):
    """The rule tests are not vacuous: a threshold moved past the synthetic series fails them."""
    (tmp_path / "alerts.yml").write_text(ALERTS.read_text().replace("> 300", "> 500"))
    (tmp_path / "alerts_test.yml").write_text((PROMETHEUS.parent / "alerts_test.yml").read_text())
    p = subprocess.run([promtool(), "test", "rules", "alerts_test.yml"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode != 0 and "ChronologConsumerGroupLagging" in p.stdout + p.stderr


def test_alert_rules_cover_what_an_operator_expects_with_metrics_the_broker_exposes(exposed_metric_names):
    rules = {r["alert"]: r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    assert {"ChronologBrokerDown", "ChronologConsumerGroupLagging", "ChronologRecordsFromTheFuture",
            "ChronologLogDirNearlyFull"} <= set(rules)
    unknown = [(name, m) for name, r in rules.items() for m in promql_metric_names(r["expr"])
               if m not in exposed_metric_names and m != "up"]  # up: Prometheus' own
    assert not unknown, f"alert rules name metrics the broker does not expose: {unknown}"
    assert all(r["labels"]["severity"] in ("warning", "critical") and r["annotations"]["summary"]
               for r in rules.values())


# ------------------------------------------------------------------ healthcheck subcommand


def test_healthcheck_ok_against_a_live_broker(live_broker):
    port, _ = live_broker
    p = run_cli("healthcheck", "--bootstrap-server", f"127.0.0.1:{port}")
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith(f"ok: 127.0.0.1:{port} answered ApiVersions")
    q = run_cli("healthcheck", "--quiet", "--bootstrap-server", f"127.0.0.1:{port}")
    assert q.returncode == 0 and q.stdout == ""


def test_healthcheck_fails_when_nothing_listens():
    p = run_cli("healthcheck", "--bootstrap-server", f"127.0.0.1:{free_port()}", "--timeout", "2")
    assert p.returncode == 1
    assert p.stderr.startswith("unhealthy: ")


def test_healthcheck_fails_on_a_server_that_does_not_speak_kafka():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer_garbage():
        conn, _ = srv.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")

    t = threading.Thread(target=answer_garbage, daemon=True)
    t.start()
    try:
        p = run_cli("healthcheck", "--bootstrap-server", f"127.0.0.1:{srv.getsockname()[1]}", "--timeout", "3")
    finally:
        srv.close()
    assert p.returncode == 1, p
    assert "unhealthy" in p.stderr


def test_healthcheck_times_out_on_a_silent_server():
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    try:
        t0 = time.monotonic()
        p = run_cli("healthcheck", "--bootstrap-server", f"127.0.0.1:{srv.getsockname()[1]}", "--timeout", "1")
        assert p.returncode == 1 and time.monotonic() - t0 < 15
    finally:
        srv.close()


def test_healthcheck_bad_address_is_usage_error():
    p = run_cli("healthcheck", "--bootstrap-server", "localhost:notaport")
    assert p.returncode == 2
