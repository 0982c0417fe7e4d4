"""Fixtures for the integration suite: real broker processes, real clients.

* ``broker``: one broker for the whole session (auto topic creation off: every test
  creates its own uniquely named topics with CreateTopics).
* ``new_topic(configs=None, partitions=1)``: create a unique topic on that broker.
* ``start_broker`` / ``broker_factory``: a private broker for tests that need special
  broker settings, a kill or a restart; stopped at the end of the test.

When a test fails, the broker log lines written while it ran are attached to the report
("broker log" sections), so a failure shows what the broker said.
"""

from __future__ import annotations

import logging
import os

import pytest

from tests.integration import helpers
from tests.integration.helpers import ALL_BROKERS, start_broker  # noqa: F401  (re-export)

# The clients log every disconnect and failed fetch at ERROR, thousands of lines for one
# failing test; their exceptions reach the tests anyway, and the broker log is attached.
for _name in ("kafka", "aiokafka"):
    logging.getLogger(_name).setLevel(logging.CRITICAL)

SESSION_BROKER_OVERRIDES = {
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
}


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: takes more than a few seconds (still run by default)")
    config.addinivalue_line("markers", "kcat: drives the kcat command-line client")
    config.addinivalue_line("markers", "allow_broker_tracebacks: do not fail on tracebacks in the broker log")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    item._chronolog_log_pos = {id(b): b.log_size() for b in ALL_BROKERS}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if not rep.failed or "integration" not in str(item.fspath):
        return
    starts = getattr(item, "_chronolog_log_pos", {})
    for b in ALL_BROKERS:
        since = starts.get(id(b), 0)
        if b.log_size() <= since:
            continue
        text = b.log_tail(200, since=since)
        status = "running" if b.running else f"not running, exit codes {b.exit_codes}"
        rep.sections.append((f"broker log ({b.workdir.name}, port {b.port}, {status})", text or "(empty)"))


@pytest.fixture(autouse=True)
def no_broker_tracebacks(request):
    """Fail (at teardown) a test during which any broker logged a Python traceback: an
    unexpected exception inside the broker is a bug even when the client coped."""
    starts = {id(b): b.log_size() for b in ALL_BROKERS}
    yield
    if request.node.get_closest_marker("allow_broker_tracebacks"):
        return
    problems = []
    for b in ALL_BROKERS:
        text = b.log_text(since=starts.get(id(b), 0))
        if "Traceback (most recent call last)" in text:
            i = text.index("Traceback (most recent call last)")
            start = text.rfind("\n", 0, max(0, i - 1)) + 1
            problems.append(f"{b.workdir.name} (port {b.port}):\n{text[start:start + 3000]}")
    if problems:
        pytest.fail("the broker logged a traceback during this test:\n" + "\n".join(problems), pytrace=False)


#: ``EXTERNAL_BROKER=host:port`` points the session ``broker`` fixture at a broker that is
#: already running (the docker-compose ``tests`` service sets it to the ``chronolog``
#: service). Only the tests that reach the broker through ``broker.bootstrap`` with stock
#: clients make sense then: ``EXTERNAL_BROKER_TESTS`` lists them (README, "Running in
#: containers"); tests that start, kill or inspect their own brokers need a local one.
EXTERNAL_BROKER_ENV = "EXTERNAL_BROKER"
EXTERNAL_BROKER_TESTS = (
    "tests/integration/test_roundtrip.py",
    "tests/integration/test_offsets_for_times.py",
    "tests/integration/test_log_append_time.py",
)


class ExternalBroker:
    """The session broker when EXTERNAL_BROKER is set: nothing to start, stop or read."""

    running = True
    exit_codes: list = []

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        host, _, port = bootstrap.rpartition(":")
        self.host, self.port = host, int(port)

    def log_size(self) -> int:
        return 0

    def log_text(self, since: int = 0) -> str:
        return ""


@pytest.fixture(scope="session")
def broker(tmp_path_factory):
    external = os.environ.get(EXTERNAL_BROKER_ENV)
    if external:
        helpers.wait_for_bootstrap(external, timeout=60)
        yield ExternalBroker(external)
        return
    b = start_broker(tmp_path_factory.mktemp("session-broker"), SESSION_BROKER_OVERRIDES)
    yield b
    rc = b.stop()
    if rc != 0:
        pytest.fail(f"session broker: SIGTERM gave exit code {rc}, expected a clean 0; log tail:\n"
                    f"{b.log_tail(40)}", pytrace=False)


@pytest.fixture
def new_topic(broker, request):
    def make(configs: dict | None = None, partitions: int = 1, suffix: str = "") -> str:
        name = helpers.unique_topic(request.node.name + suffix)
        return helpers.create_topic(broker.bootstrap, name, configs, partitions)

    return make


@pytest.fixture
def broker_factory(tmp_path):
    """Start private brokers: ``broker_factory(overrides, name="b")``; all are stopped
    (SIGTERM, then SIGKILL) at the end of the test."""
    started: list[helpers.Broker] = []

    def make(overrides: dict | None = None, name: str = "broker") -> helpers.Broker:
        b = start_broker(tmp_path, overrides, name=name)
        started.append(b)
        return b

    yield make
    for b in started:
        if b.running:
            b.stop()
