#!/usr/bin/env python3
"""What TLS costs: produce and consume throughput of one Chronolog broker over its
PLAINTEXT, SSL and SASL_SSL listeners, in the same run.

One broker process serves three listeners on 127.0.0.1 (certificates from a throw-away
``openssl`` CA made in a temporary directory; SASL_SSL authenticates with SASL/PLAIN, a
user from the JAAS text). Each run creates one fresh one-partition topic per listener and
goes through the listeners in turn (PLAINTEXT, SSL, SASL_SSL, then the next run), so
that drift of the shared machine spreads over all three. The produce and consume phases
are bench/throughput.py's (confluent-kafka, linger.ms=5, acks=all, random values; the
consumer reads from offset 0 with assign()), with the listener's security settings added
to the client configuration; the client verifies the broker's certificate against the CA.
Medians over ``--runs`` are reported, with each listener's throughput as a fraction of
PLAINTEXT's and the broker's CPU per record.

    .venv/bin/python bench/tls.py                        # or: make bench-tls
    .venv/bin/python bench/tls.py --records 100000 --runs 5 --json-out /tmp/tls.json

See bench/README.md.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

try:  # run as a script (bench/ is sys.path[0]) or imported as bench.tls
    from bench import _machine, throughput as T
except ImportError:
    import _machine
    import throughput as T

LISTENERS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD = "bench", "bench-secret"


def make_certs(d: Path) -> None:
    """A CA, and a broker certificate for localhost/127.0.0.1 signed by it (PEM)."""
    def run(*args):
        out = subprocess.run(["openssl", *args], cwd=d, capture_output=True, text=True)
        if out.returncode:
            raise T.BenchError(f"openssl {args[0]} failed: {out.stderr.strip()}")

    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", "ca.key", "-out", "ca.pem",
        "-days", "2", "-subj", "/CN=Chronolog bench CA")
    (d / "san.ext").write_text("subjectAltName=DNS:localhost,IP:127.0.0.1\n")
    run("req", "-newkey", "rsa:2048", "-nodes", "-keyout", "broker.key", "-out", "broker.csr",
        "-subj", "/CN=localhost")
    run("x509", "-req", "-in", "broker.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "broker.crt", "-days", "2", "-extfile", "san.ext")
    (d / "broker.pem").write_text((d / "broker.key").read_text() + (d / "broker.crt").read_text())


def broker_properties(d: Path, ports: dict[str, int], log_dir: Path) -> str:
    listeners = ",".join(f"{name}://{T.HOST}:{ports[name]}" for name in LISTENERS)
    return "\n".join([
        f"listeners={listeners}",
        f"log.dirs={log_dir}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={d / 'broker.pem'}",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms=PLAIN",
        "listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
        f'PlainLoginModule required user_{USER}="{PASSWORD}";',
        "",
    ])


def client_conf(listener: str, d: Path) -> dict[str, Any]:
    if listener == "PLAINTEXT":
        return {}
    conf = {"security.protocol": listener, "ssl.ca.location": str(d / "ca.pem")}
    if listener == "SASL_SSL":
        conf.update({"sasl.mechanism": "PLAIN", "sasl.username": USER, "sasl.password": PASSWORD})
    return conf


def start(args: argparse.Namespace, workdir: Path) -> tuple[T.BrokerProc, dict[str, int]]:
    ports = {name: T.free_port() for name in LISTENERS}
    log_dir = Path(tempfile.mkdtemp(prefix="bench-tls-data-", dir=workdir))
    props = workdir / "broker.properties"
    props.write_text(broker_properties(workdir, ports, log_dir))
    exe = T.REPO / ".venv" / "bin" / "chronolog"
    cmd = ([str(exe)] if exe.exists() else [sys.executable, "-m", "broker"]) + ["serve", "--config", str(props)]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(T.REPO), os.environ.get("PYTHONPATH")])))
    log_path = workdir / "chronolog.log"
    with open(log_path, "wb") as log_file:
        proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=log_file,
                                stderr=subprocess.STDOUT, start_new_session=True, cwd=workdir)
    bp = T.BrokerProc("chronolog", cmd, ports["PLAINTEXT"], proc, log_path, [log_dir])
    with T._LIVE_LOCK:
        T._LIVE_BROKERS.append(bp)
    T.wait_ready(bp, args.startup_timeout)
    return bp, ports


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out = {}
    for listener in LISTENERS:
        rows = [r[listener] for r in runs]
        out[listener] = {phase: {key: statistics.median(r[phase][key] for r in rows)
                                 for key in ("records_per_s", "mb_per_s", "broker_cpu_us_per_record")}
                         for phase in ("produce", "consume")}
    return out


def render_markdown(result: dict[str, Any]) -> str:
    cfg = result["config"]
    med = result["median"]
    base = med["PLAINTEXT"]
    out = [f"### TLS cost: median of {cfg['runs']} runs, {cfg['records']:,} records x {cfg['size']} B, "
           f"1 partition, linger.ms={cfg['linger_ms']:g}, acks=all, one broker, listeners in turn", "",
           "| listener | produce rec/s | vs PLAINTEXT | broker CPU µs/record | consume rec/s "
           "| vs PLAINTEXT | broker CPU µs/record |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for listener in LISTENERS:
        p, c = med[listener]["produce"], med[listener]["consume"]
        out.append(f"| {listener} | {p['records_per_s']:,.0f} | "
                   f"{p['records_per_s'] / base['produce']['records_per_s']:.0%} | "
                   f"{p['broker_cpu_us_per_record']:.2f} | {c['records_per_s']:,.0f} | "
                   f"{c['records_per_s'] / base['consume']['records_per_s']:.0%} | "
                   f"{c['broker_cpu_us_per_record']:.2f} |")
    out += ["", "Per run (records/s):", "",
            "| run | " + " | ".join(f"{listener} produce | {listener} consume" for listener in LISTENERS) + " |",
            "|---:|" + "---:|" * (2 * len(LISTENERS))]
    for i, r in enumerate(result["runs"], 1):
        out.append(f"| {i} | " + " | ".join(
            f"{r[listener]['produce']['records_per_s']:,.0f} | {r[listener]['consume']['records_per_s']:,.0f}"
            for listener in LISTENERS) + " |")
    m = result["machine"]
    out += ["", "### Machine", ""]
    out.extend(_machine.markdown_lines(
        m, python_extra=f"; confluent-kafka {m.get('confluent_kafka')}, librdkafka {m.get('librdkafka')}",
        extra_keys=("openssl", "chronolog", "chronolog_git")))
    return "\n".join(out)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Chronolog throughput over PLAINTEXT, SSL and SASL_SSL.")
    ap.add_argument("--records", type=int, default=200_000, help="records per phase (200000)")
    ap.add_argument("--size", type=int, default=100, help="record value size in bytes (100)")
    ap.add_argument("--runs", type=int, default=3, help="runs; the table shows medians (3)")
    ap.add_argument("--linger-ms", type=float, default=5.0, help="producer linger.ms (5)")
    ap.add_argument("--phase-timeout", type=float, default=120.0, help="seconds per phase (120)")
    ap.add_argument("--startup-timeout", type=float, default=60.0, help="seconds to start (60)")
    ap.add_argument("--json-out", type=Path, help="also write every number to this JSON file")
    args = ap.parse_args(argv)
    if args.records < 1 or args.size < 0 or args.runs < 1:
        ap.error("--records and --runs must be >= 1, --size >= 0")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if shutil.which("openssl") is None:
        T.log("openssl is needed to make the certificates (apt-get install openssl)")
        return 2
    watchdog = T._watchdog(args.startup_timeout + 60 + args.runs * len(LISTENERS) * (3 * args.phase_timeout + 10))
    payloads = T.random_payloads(args.records, args.size)
    info = _machine.base_info()
    info.update(_machine.chronolog_info(T.REPO))
    info.update(T.client_info())
    info["openssl"] = subprocess.run(["openssl", "version"], capture_output=True, text=True).stdout.strip()
    result: dict[str, Any] = {
        "config": {"records": args.records, "size": args.size, "runs": args.runs, "linger_ms": args.linger_ms,
                   "listeners": list(LISTENERS), "sasl": "PLAIN"},
        "machine": info, "runs": [], "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    workdir = Path(tempfile.mkdtemp(prefix="chronolog-bench-tls-"))
    bp = None
    try:
        make_certs(workdir)
        bp, ports = start(args, workdir)
        result["command"] = shlex.join(bp.cmd)

        def cpu() -> float:
            return T.process_tree_cpu_seconds(bp.proc.pid)

        for run in range(1, args.runs + 1):
            row = {}
            for listener in LISTENERS:
                bootstrap, conf = f"{T.HOST}:{ports[listener]}", client_conf(listener, workdir)
                topic = f"bench-tls-{run}-{listener.lower()}-{uuid.uuid4().hex[:6]}"
                T.create_topic(bp.bootstrap, topic, args.phase_timeout)
                prod = T.produce_phase(bootstrap, topic, payloads, "none", args.linger_ms,
                                       args.phase_timeout, cpu, client_conf=conf)
                cons = T.consume_phase(bootstrap, topic, args.records, args.size, args.phase_timeout,
                                       cpu, client_conf=conf)
                T.log(f"run {run} {listener}: produce {prod.records / prod.seconds:,.0f} rec/s, "
                      f"consume {cons.records / cons.seconds:,.0f} rec/s")
                row[listener] = {"topic": topic, "produce": prod.as_dict(), "consume": cons.as_dict()}
            result["runs"].append(row)
        result["median"] = summarize(result["runs"])
    except (T.BenchError, T.KafkaException) as e:
        tail = f"\n--- log tail ---\n{bp.log_tail()}" if bp is not None else ""
        T.log(f"FAILED: {e}{tail}")
        return 1
    finally:
        if bp is not None:
            T.stop_broker(bp)
        shutil.rmtree(workdir, ignore_errors=True)
        watchdog.cancel()
    T.emit(render_markdown(result), result, args.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
