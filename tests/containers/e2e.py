"""The end-to-end container check (`make test-containers`; README, "Running in containers").

Builds the images from the repository's Dockerfile, starts the broker and Prometheus
with the repository's docker-compose.yml, waits for the broker's health check, runs
the `tests` service (the integration tests against the broker), produces and consumes
from the host through the published port, checks that Prometheus scrapes the broker and
that every PromQL expression of the Grafana dashboard and every alert rule evaluates
without error and returns series, stops the broker (exit 0, clean-shutdown marker in
its volume), starts it again and finds its data and the group's offsets intact; then
removes the stack. It prints each step and what it found; exit 0 when all passed.

Engine: docker when its daemon answers, else podman (installed from Debian's packages,
with podman-compose, when missing). What this needs on machines without a registry or
systemd stays here, not in the Dockerfile or compose file users see:

* no registry: the base image is built locally (debootstrap --variant=minbase bookworm
  with python3, venv, pip and the host's extra CA certificates, so pip inside a build
  can verify the package index), imported as localhost/chronolog-base:bookworm and
  passed as the BASE_IMAGE build argument; Prometheus' image is made from Debian's
  prometheus package (the binary `make tools` unpacks) and tagged as the image the
  compose file names. Grafana cannot be obtained: its service is not started.
* podman: a containers.conf of its own (runc, cgroupfs, file events, raised ulimits;
  through CONTAINERS_CONF, the system's is not touched), `--format docker` builds (else
  HEALTHCHECK is dropped), and the health check run by this script (`podman
  healthcheck run`), since podman runs none by itself without systemd.

Environment: CHRONOLOG_E2E_ENGINE=docker|podman forces an engine; CHRONOLOG_E2E_BASE_IMAGE
uses that base image instead of building one; CHRONOLOG_E2E_KEEP=1 leaves the stack up.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

PROJECT = "chronolog-e2e"
WORK = ROOT / ".tools" / "containers"
BASE_TAG = "localhost/chronolog-base:bookworm"
HOST_BOOTSTRAP = "localhost:9092"
PROMETHEUS_URL = "http://localhost:9090"
CONTAINERS_CONF = """[containers]
default_ulimits = ["nofile=20000:20000", "nproc=32768:32768"]

[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
"""

failures: list[str] = []


def step(msg: str) -> None:
    print(f"\n== {msg}", flush=True)


def ok(msg: str) -> None:
    print(f"   ok: {msg}", flush=True)


def fail(msg: str) -> None:
    print(f"   FAILED: {msg}", flush=True)
    failures.append(msg)


def run(cmd, *, check=True, timeout=1800, capture=False, env=None, input=None, cwd=ROOT):
    shown = " ".join(str(c) for c in cmd)
    print(f"   $ {shown}", flush=True)
    p = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, timeout=timeout, input=input,
                       capture_output=capture, text=True)
    if check and p.returncode != 0:
        detail = (p.stdout or "")[-3000:] + (p.stderr or "")[-3000:] if capture else ""
        raise SystemExit(f"command failed ({p.returncode}): {shown}\n{detail}")
    return p


# ------------------------------------------------------------------------- the engine
class Engine:
    def __init__(self):
        forced = os.environ.get("CHRONOLOG_E2E_ENGINE")
        self.env = dict(os.environ)
        if forced == "docker" or (forced is None and self._docker_works()):
            self.name = "docker"
            v2 = subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0
            self.compose = ["docker", "compose"] if v2 else ["docker-compose"]
        else:
            self.name = "podman"
            if shutil.which("podman") is None or shutil.which("podman-compose") is None:
                self._install(["podman", "podman-compose", "uidmap", "slirp4netns", "fuse-overlayfs"])
            WORK.mkdir(parents=True, exist_ok=True)
            conf = WORK / "containers.conf"
            conf.write_text(CONTAINERS_CONF)
            self.env["CONTAINERS_CONF"] = str(conf)
            self.compose = ["podman-compose"]
        self.compose = [*self.compose, "-p", PROJECT, "-f", str(ROOT / "docker-compose.yml")]

    @staticmethod
    def _docker_works() -> bool:
        if shutil.which("docker") is None:
            return False
        return subprocess.run(["docker", "info"], capture_output=True, timeout=60).returncode == 0

    @staticmethod
    def _install(packages):
        sudo = [] if os.geteuid() == 0 else ["sudo"]
        run([*sudo, "apt-get", "update", "-qq"])
        run([*sudo, "apt-get", "install", "-y", "-qq", *packages])

    def __call__(self, *args, **kw):
        return run([self.name, *args], env=self.env, **kw)

    def compose_cmd(self, *args, **kw):
        return run([*self.compose, *args], env=self.env, **kw)

    def has_image(self, ref: str) -> bool:
        return subprocess.run([self.name, "image", "inspect", ref], capture_output=True,
                              env=self.env).returncode == 0

    def build(self, *args):
        fmt = ["--format", "docker"] if self.name == "podman" else []
        return self("build", *fmt, *args, timeout=3600)

    def container(self, service: str) -> str:
        names = self("ps", "-a", "--format", "{{.Names}}", capture=True).stdout.split()
        pattern = re.compile(rf"^{re.escape(PROJECT)}[-_]{service}[-_]1$")
        found = [n for n in names if pattern.match(n)]
        if not found:
            raise SystemExit(f"no container for service {service} among {names}")
        return found[0]

    def healthy(self, ctr: str) -> bool:
        if self.name == "podman":  # no systemd timers here: run the check ourselves
            return subprocess.run(["podman", "healthcheck", "run", ctr], capture_output=True,
                                  env=self.env).returncode == 0
        out = subprocess.run(["docker", "inspect", "--format", "{{.State.Health.Status}}", ctr],
                             capture_output=True, text=True).stdout.strip()
        return out == "healthy"


# ------------------------------------------------------------------------- images
def base_image(engine: Engine) -> str:
    given = os.environ.get("CHRONOLOG_E2E_BASE_IMAGE")
    if given:
        return given
    if engine.has_image(BASE_TAG):
        ok(f"local base image {BASE_TAG} exists")
        return BASE_TAG
    pulled = subprocess.run([engine.name, "pull", "python:3.11-slim"], capture_output=True, timeout=120,
                            env=engine.env)
    if pulled.returncode == 0:
        ok("python:3.11-slim pulled from the registry")
        return "python:3.11-slim"
    print("   no registry: building a local base image with debootstrap", flush=True)
    if shutil.which("debootstrap") is None:
        Engine._install(["debootstrap"])
    with tempfile.TemporaryDirectory(prefix="chronolog-base-", dir="/var/tmp") as tmp:
        rootfs = Path(tmp) / "rootfs"
        run(["debootstrap", "--variant=minbase",
             "--include=python3,python3-venv,python3-pip,python-is-python3,ca-certificates",
             "bookworm", rootfs, "http://deb.debian.org/debian"], timeout=1800)
        extra = Path("/usr/local/share/ca-certificates")
        if extra.is_dir():
            for crt in extra.glob("*.crt"):
                shutil.copy2(crt, rootfs / "usr/local/share/ca-certificates" / crt.name)
            run(["chroot", rootfs, "update-ca-certificates"])
        # like the python images: pip may install into the system interpreter (PEP 668)
        for marker in rootfs.glob("usr/lib/python3*/EXTERNALLY-MANAGED"):
            marker.unlink()
        run(["chroot", rootfs, "apt-get", "clean"])
        tar = subprocess.Popen(["tar", "-C", rootfs, "-c", "."], stdout=subprocess.PIPE)
        p = subprocess.run([engine.name, "import", "-", BASE_TAG], stdin=tar.stdout, env=engine.env)
        tar.wait()
        if p.returncode != 0 or tar.returncode != 0:
            raise SystemExit("importing the base image failed")
    ok(f"base image {BASE_TAG} imported")
    return BASE_TAG


def prometheus_image(engine: Engine, base: str) -> None:
    compose = (ROOT / "docker-compose.yml").read_text()
    ref = re.search(r"image:\s*(prom/prometheus:\S+)", compose).group(1)
    if engine.has_image(ref):
        ok(f"{ref} exists")
        return
    pulled = subprocess.run([engine.name, "pull", ref], capture_output=True, timeout=120, env=engine.env)
    if pulled.returncode == 0:
        ok(f"{ref} pulled")
        return
    binary = ROOT / ".tools" / "prometheus" / "usr" / "bin" / "prometheus"
    if not binary.is_file():
        run(["make", "-C", ROOT, "tools"])
    with tempfile.TemporaryDirectory() as ctx:
        shutil.copy2(binary, Path(ctx) / "prometheus")
        (Path(ctx) / "Dockerfile").write_text(
            f"FROM {base}\nCOPY prometheus /bin/prometheus\nRUN mkdir -p /prometheus /etc/prometheus\n"
            "EXPOSE 9090\nENTRYPOINT [\"/bin/prometheus\"]\n"
            "CMD [\"--config.file=/etc/prometheus/prometheus.yml\", \"--storage.tsdb.path=/prometheus\"]\n")
        engine.build("-t", ref, ctx)
    ok(f"{ref} built from Debian's prometheus package")


# ------------------------------------------------------------------------- checks
def wait_healthy(engine: Engine, ctr: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if engine.healthy(ctr):
            ok(f"{ctr} is healthy")
            return
        time.sleep(2)
    engine("logs", "--tail", "50", ctr, check=False)
    raise SystemExit(f"{ctr} did not become healthy in {timeout:.0f} s")


def host_traffic(topic: str, group: str) -> tuple[int, dict]:
    """Produce 100 records (one with a CreateTime an hour ahead) from the host, consume
    them with a group that commits half way; returns (records, committed offsets)."""
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": HOST_BOOTSTRAP})
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[topic].result(30)
    p = Producer({"bootstrap.servers": HOST_BOOTSTRAP, "linger.ms": 5})
    now = int(time.time() * 1000)
    for i in range(99):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, partition=i % 2)
    p.produce(topic, key=b"future", value=b"from the future", partition=0, timestamp=now + 3_600_000)
    assert p.flush(30) == 0, "records left unsent"
    try:  # a request the broker answers with an error: the error panels get a series
        p2 = Producer({"bootstrap.servers": HOST_BOOTSTRAP, "message.timeout.ms": 3000})
        p2.produce("no-such-topic-" + uuid.uuid4().hex[:6], value=b"x")
        p2.flush(5)
    except KafkaException:
        pass
    c = Consumer({"bootstrap.servers": HOST_BOOTSTRAP, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    seen, deadline = 0, time.time() + 60
    while seen < 100 and time.time() < deadline:
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            seen += 1
    # commit the middle of each partition: the group lags (records and seconds)
    commits = {0: 25, 1: 25}
    c.commit(offsets=[TopicPartition(topic, part, off) for part, off in commits.items()], asynchronous=False)
    c.close()
    return seen, commits


def committed(topic: str, group: str) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": HOST_BOOTSTRAP, "group.id": group})
    try:
        return {tp.partition: tp.offset for tp in c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)],
                                                              timeout=30)}
    finally:
        c.close()


def end_offsets(topic: str) -> dict:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": HOST_BOOTSTRAP, "group.id": "e2e-watermarks"})
    try:
        return {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in (0, 1)}
    finally:
        c.close()


def prom_query(expr: str) -> dict:
    url = f"{PROMETHEUS_URL}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.load(r)


def grafana_to_promql(expr: str) -> str:
    expr = expr.replace("$__rate_interval", "1m").replace("$__interval", "1m")
    return re.sub(r"\$\w+", ".*", expr)


def comparison_lhs(expr: str) -> str:
    """An alert expression without its threshold: what it compares (returns series
    whether or not the alert fires)."""
    m = re.search(r"\s(==|!=|>=|<=|>|<)\s*[-0-9.e]+\s*$", expr)
    return expr[:m.start()] if m else expr


def check_prometheus() -> None:
    deadline = time.time() + 90
    health = None
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{PROMETHEUS_URL}/api/v1/targets", timeout=10) as r:
                targets = json.load(r)["data"]["activeTargets"]
            health = {t["labels"].get("job"): t["health"] for t in targets}
            if health.get("chronolog") == "up":
                break
        except OSError:
            pass
        time.sleep(3)
    if health is None or health.get("chronolog") != "up":
        fail(f"Prometheus does not scrape the broker: targets {health}")
        return
    ok("Prometheus scrapes chronolog:9404 (target up)")
    from tests.unit.test_deploy_files import ALERTS

    import yaml

    wanted = {r["alert"] for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]}
    with urllib.request.urlopen(f"{PROMETHEUS_URL}/api/v1/rules", timeout=10) as r:
        loaded = {rule["name"] for g in json.load(r)["data"]["groups"] for rule in g["rules"]}
    (ok if loaded == wanted else fail)(f"Prometheus loaded the alert rules: {sorted(loaded)}")
    time.sleep(20)  # a few scrapes after the traffic, for the rate() windows
    from tests.unit.test_deploy_files import dashboard_exprs

    dash = json.loads((ROOT / "deploy" / "grafana" / "dashboards" / "chronolog.json").read_text())
    exprs = [(where, grafana_to_promql(e)) for where, e in dashboard_exprs(dash)]
    for group in yaml.safe_load(ALERTS.read_text())["groups"]:
        for rule in group["rules"]:
            exprs.append((f"alert {rule['alert']}", comparison_lhs(rule["expr"])))
    for where, expr in exprs:
        try:
            ans = prom_query(expr)
        except OSError as exc:
            fail(f"{where}: {expr}: {exc}")
            continue
        n = len(ans.get("data", {}).get("result", []))
        if ans.get("status") != "success":
            fail(f"{where}: {expr}: {ans.get('error')}")
        elif n == 0:
            fail(f"{where}: {expr}: no series")
        else:
            ok(f"{where}: {n} series  [{expr}]")


# ------------------------------------------------------------------------- the run
def ports_free() -> None:
    import socket

    busy = []
    for port in (9092, 9404, 9090):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                busy.append(port)
    if busy:
        raise SystemExit(f"ports {busy} are in use on this host: the compose stack publishes 9092, 9404 and 9090 "
                         f"(stop what listens there, e.g. a `make run` broker)")


def main() -> int:
    os.chdir(ROOT)
    ports_free()
    step("engine")
    engine = Engine()
    engine("--version")
    step("images")
    base = base_image(engine)
    engine.build("--build-arg", f"BASE_IMAGE={base}", "-t", "chronolog:latest", ".")
    engine.build("--build-arg", f"BASE_IMAGE={base}", "--target", "tests", "-t", "chronolog-tests:latest", ".")
    prometheus_image(engine, base)
    labels = engine("image", "inspect", "--format", "{{json .Config.Healthcheck}} {{json .Config.Volumes}}",
                    "chronolog-tests:latest", capture=True).stdout.strip()
    if labels.replace("null", "").replace("{}", "").strip():
        fail(f"the tests image has a health check or a volume: {labels}")
    else:
        ok("the tests image has no health check and no volume")
    engine.compose_cmd("down", "-v", check=False, capture=True)
    try:
        step("compose up: chronolog, prometheus")
        engine.compose_cmd("up", "-d", "chronolog", "prometheus", timeout=600)
        broker = engine.container("chronolog")
        wait_healthy(engine, broker)
        step("the tests service against chronolog:9092")
        p = engine.compose_cmd("run", "--rm", "tests", check=False, timeout=1800)
        (ok if p.returncode == 0 else fail)(f"tests service exit {p.returncode}")
        step("produce and consume from the host through the published port")
        topic, group = "e2e-" + uuid.uuid4().hex[:6], "e2e-group"
        seen, commits = host_traffic(topic, group)
        (ok if seen == 100 else fail)(f"consumed {seen}/100 records from {HOST_BOOTSTRAP}")
        step("Prometheus: the scrape, the dashboard's queries and the alert rules")
        check_prometheus()
        step("stop: clean shutdown")
        engine.compose_cmd("stop", "chronolog", timeout=120)
        code = engine("inspect", "--format", "{{.State.ExitCode}}", broker, capture=True).stdout.strip()
        (ok if code == "0" else fail)(f"broker exit code {code}")
        vol = next(v for v in engine("volume", "ls", "--format", "{{.Name}}", capture=True).stdout.split()
                   if v.startswith(PROJECT) and v.endswith("chronolog-data"))
        listing = engine("run", "--rm", "--entrypoint", "ls", "-v", f"{vol}:/data", "chronolog:latest", "-a", "/data",
                         capture=True).stdout.split()
        if ".kafka_cleanshutdown" in listing:
            ok(f"clean-shutdown marker .kafka_cleanshutdown in volume {vol}")
        else:
            fail(f"no clean-shutdown marker in volume {vol}: {listing}")
        step("start again: data and group offsets intact")
        engine.compose_cmd("start", "chronolog", timeout=120)
        wait_healthy(engine, broker)
        ends = end_offsets(topic)
        (ok if sum(ends.values()) == 100 else fail)(f"end offsets after restart {ends}")
        got = committed(topic, group)
        (ok if got == commits else fail)(f"committed offsets after restart {got} (committed {commits})")
    finally:
        if os.environ.get("CHRONOLOG_E2E_KEEP") != "1":
            step("compose down -v")
            engine.compose_cmd("down", "-v", check=False, timeout=300)
    step("result")
    if failures:
        print(f"   {len(failures)} check(s) FAILED:\n   - " + "\n   - ".join(failures))
        return 1
    print("   all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
