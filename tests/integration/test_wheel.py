"""The installed wheel shadows nothing: built from the repository's files, installed into
a fresh virtualenv, it adds only ``chronolog`` and ``pyspark_kafka_compatible`` as
top-level names (no ``broker``, ``protocol``, ``storage``, ``config``), its
``chronolog`` command runs a broker, and PySpark finds the data source by its format
name ``kafka-compatible`` with no registration call.

The fresh virtualenv takes the wheel's dependencies from this test environment's
site-packages (a path in a .pth file, whose own .pth files, such as the editable
install's, are not processed), so the test needs no package index."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest

from tests.integration.helpers import REPO_ROOT, Rec, free_port, produce_kp

pytestmark = pytest.mark.timeout(600)

GENERIC = ("broker", "protocol", "storage", "config", "pipeline")


def _sources(dest: Path) -> Path:
    """The repository's tracked files (what a fresh clone has), copied to ``dest``; without
    git, the tree less what the build and the tests leave in it."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True)
    if listed.returncode != 0:
        shutil.copytree(REPO_ROOT, dest, ignore=shutil.ignore_patterns(
            ".git", ".venv", ".tools", "build", "data", "node_modules", "__pycache__", "*.so", "*.egg-info"))
        return dest
    for rel in filter(None, listed.stdout.decode().split("\0")):
        src = REPO_ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("wheel")
    src = _sources(tmp / "src")
    dist = tmp / "dist"
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation",
                            "-w", str(dist)], capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    (wheel,) = dist.glob("chronolog-*.whl")
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    installed = subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps",
                                "--no-index", str(wheel)], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]
    purelib = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    (Path(purelib) / "zz_test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return venv, Path(purelib), tmp


def test_the_wheel_installs_two_top_level_names(fresh_venv):
    venv, purelib, tmp = fresh_venv
    (info,) = purelib.glob("chronolog-*.dist-info")
    top = set()
    for line in (info / "RECORD").read_text().splitlines():
        first = line.split(",")[0].split("/")[0]
        if first != ".." and not first.endswith(".dist-info"):
            top.add(first)
    assert top == {"chronolog", "pyspark_kafka_compatible"}
    assert set((info / "top_level.txt").read_text().split()) == {"chronolog", "pyspark_kafka_compatible"}
    # from a directory with nothing of ours: the generic names are not importable, the
    # namespaced ones are (their compiled record walker too), and loading them (and the
    # data source) imports no generic name
    probe = ("import importlib, sys\n"
             f"for name in {GENERIC!r}:\n"
             "    try:\n"
             "        importlib.import_module(name)\n"
             "        print('SHADOWS', name)\n"
             "    except ImportError:\n"
             "        pass\n"
             "import chronolog.broker.server, chronolog.protocol._recwalk, chronolog.protocol._fastwire\n"
             "import chronolog.storage._append, chronolog.storage._cleaner, chronolog.broker._produce\n"
             "import chronolog.broker._metrics\n"
             "import pyspark_kafka_compatible.kafka_io\n"
             "from chronolog.protocol import messages\n"
             "print(messages.FetchRequest.__module__)\n"
             f"print(sorted(m for m in sys.modules if m.split('.')[0] in {GENERIC!r}))\n")
    out = subprocess.run([str(venv / "bin" / "python"), "-c", probe], cwd=tmp, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[:2] == ["chronolog.protocol.messages", "[]"], out.stdout


def test_the_installed_command_serves_and_pyspark_finds_the_source(fresh_venv):
    venv, purelib, tmp = fresh_venv
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    log = open(tmp / "broker.log", "w")
    proc = subprocess.Popen([str(venv / "bin" / "chronolog"), "serve", "--override",
                             f"listeners=PLAINTEXT://127.0.0.1:{port}", "--override", f"log.dirs={tmp / 'data'}",
                             "--override", "metrics.port=0"], cwd=tmp, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert proc.poll() is None and time.time() < deadline, (tmp / "broker.log").read_text()
                time.sleep(0.2)
        bootstrap = f"127.0.0.1:{port}"
        produce_kp(bootstrap, "wheel-topic", [Rec(b"k%d" % i, b"v%d" % i) for i in range(7)])
        from tests.integration.test_spark_source import _java_home

        script = (
            "import os, sys\n"
            "os.environ['PYSPARK_PYTHON'] = os.environ['PYSPARK_DRIVER_PYTHON'] = sys.executable\n"
            "from pyspark.sql import SparkSession\n"
            "s = (SparkSession.builder.master('local[1]').config('spark.ui.enabled', 'false')\n"
            "     .config('spark.driver.host', '127.0.0.1').config('spark.driver.bindAddress', '127.0.0.1')\n"
            f"     .config('spark.local.dir', {str(tmp / 'spark')!r}).getOrCreate())\n"
            "s.sparkContext.setLogLevel('ERROR')\n"
            f"df = s.read.format('kafka-compatible').option('kafka.bootstrap.servers', {bootstrap!r})"
            ".option('subscribe', 'wheel-topic').load()\n"
            "print('VALUES', sorted(bytes(r.value).decode() for r in df.select('value').collect()))\n"
            "s.stop()\n")
        out = subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=tmp, capture_output=True, text=True,
                             timeout=300, env={**env, "JAVA_HOME": _java_home()})
        values = [line for line in out.stdout.splitlines() if line.startswith("VALUES")]
        assert values == ["VALUES " + str(sorted(f"v{i}" for i in range(7)))], out.stdout[-2000:] + out.stderr[-4000:]
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    assert proc.returncode == 0, (tmp / "broker.log").read_text()
