"""Instructions the broker executes per produce request, counted by callgrind.

CPU time per record swings by tens of percent from run to run on a shared VM (page
cache, the other core, frequency), which hides changes of a few percent; an
instruction count does not move at all between runs of the same code. This counts,
under ``valgrind --tool=callgrind``, the instructions of produce requests dispatched
in-process (the dispatcher, the codec, the produce handler, validation, the append and
its ``pwrite`` call, the answer; no sockets), and only those: counting starts after
start-up and a warm-up and stops after the last request (callgrind client requests
from a small shim compiled here with ``cc``).

    .venv/bin/python bench/instructions.py [--requests 2000] [--root DIR] [--json-out F]
    make bench-instructions

Shapes: ``one-record`` (one v2 batch of one 100 B record per request, metrics off and
on), ``one-record-idempotent`` (the same from an idempotent producer: a producer id and
the next sequence number in each batch, as the Java client sends by default) and
``100-partitions`` (one record in each of 100 partitions per request; reported per
partition). ``one-record-connection`` is ``one-record-metrics`` read by a connection
(broker/connection.py's KafkaConnection, each request in a read of its own, its answer
written to a transport that keeps nothing): the framing, the compiled lane or the
dispatcher, and the write, as a live broker runs them for a producer that waits for each
answer (without the event loop and the sockets). ``one-record-authorizer`` is that shape
on a broker with an authorizer (``StandardAuthorizer``) holding 1,000 ACLs of other
principals (a PREFIXED WRITE each) and the LITERAL one that lets the producer's
principal write its topic. ``fetch-at-end`` counts Fetch requests instead (v11, as librdkafka 2.0
sends them, metrics on): a consumer at the log's end, each fetch from the offset where
the one-record batch appended just before it (not counted) begins, answered with it.
``--root`` measures another checkout with this virtualenv (for example a ``git
worktree`` of an older commit, its C extensions built), so two commits
compare on one machine. The counts are instructions, not time: the kernel's share of
the ``pwrite`` is not in them, and an instruction that misses the cache costs more
than one that does not.

Needs valgrind (Debian's package, which also has the header the shim includes) and a
C compiler.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SHIM = r"""
#include <valgrind/callgrind.h>
void cg_start(void) { CALLGRIND_ZERO_STATS; CALLGRIND_START_INSTRUMENTATION; }
void cg_stop(void) { CALLGRIND_STOP_INSTRUMENTATION; CALLGRIND_DUMP_STATS; }
void cg_toggle(void) { CALLGRIND_TOGGLE_COLLECT; }
"""

SHAPES = {  # name: (partitions per request, metrics on, share of --requests counted, idempotent)
    "one-record": (1, False, 1, False),
    "one-record-metrics": (1, True, 1, False),
    "one-record-idempotent": (1, False, 1, True),
    "100-partitions": (100, False, 0.1, False),  # a tenth as many requests: ten times the partitions
    "fetch-at-end": (1, True, 1, False),  # Fetch requests (FETCH_SHAPES), each after an uncounted produce
    "one-record-connection": (1, True, 1, False),  # read by a connection (CONNECTION_SHAPES), one per read
    "one-record-authorizer": (1, True, 1, False),  # the same with an authorizer and its ACLs (AUTHORIZER_SHAPES)
}
FETCH_SHAPES = {"fetch-at-end"}
CONNECTION_SHAPES = {"one-record-connection", "one-record-authorizer"}
AUTHORIZER_SHAPES = {"one-record-authorizer"}
AUTHORIZER_ACLS = 1000  # one-record-authorizer: the ACLs of other principals beside the producer's own


def _child(root: str, shim: str, partitions: int, metrics_on: bool, requests: int, idempotent: bool,
           fetch: bool = False, connection: bool = False, authorizer: bool = False) -> None:
    """Runs under valgrind: a broker context in this process, ``requests`` produce
    requests dispatched between the shim's start and stop."""
    import ctypes

    sys.path.insert(0, root)
    sys.path.insert(0, str(Path(root) / "bench"))
    from metrics_overhead import _Conn, in_process_log_manager  # noqa: E402

    from broker.context import BrokerContext
    from broker.dispatcher import Dispatcher
    from broker.metrics import BrokerMetrics
    from protocol import codec
    from protocol.messages import ProduceRequest, RequestHeader
    from protocol.records import build_batch

    cg = ctypes.CDLL(shim)
    # the wall clock stands still: under valgrind a run takes long enough for the append
    # delay of the frames made up front to pass the histogram's ms table (another path),
    # by how much depending on the machine's load; the monotonic clock still moves
    import storage.clock as clock_module

    still = clock_module.SystemClock().time_ms()
    clock_module.SystemClock.time_ms = lambda self: still
    tmp = tempfile.mkdtemp(prefix="bench-instructions-")
    try:
        cfg, clock, lm = in_process_log_manager(tmp, partitions)
        metrics = BrokerMetrics() if metrics_on else None
        ctx = BrokerContext(config=cfg, log_manager=lm, clock=clock, node_id=0, host="127.0.0.1", port=9092,
                            cluster_id="bench", metrics=metrics)
        if metrics is not None:
            metrics.attach_state(lm, lambda: None, clock)
        session = None
        if authorizer:
            from broker.security import authorizer as A
            from broker.security.authenticator import COMPLETE, Session
            from storage.acl_store import AclBinding, AclStore

            store = AclStore(tmp)
            store.change(add=[AclBinding(A.TOPIC, f"team-{i}-", A.PREFIXED, f"User:team-{i}", "*", A.WRITE, A.ALLOW)
                              for i in range(AUTHORIZER_ACLS)]
                         + [AclBinding(A.TOPIC, "bench", A.LITERAL, "User:bench", "*", A.WRITE, A.ALLOW)])
            ctx.authorizer = A.Authorizer(store, "", False, metrics)
            session = Session(listener=None, client_ip="127.0.0.1", principal="User:bench", state=COMPLETE)
        dispatcher = Dispatcher(ctx)
        ts = clock.time_ms() - 1000
        value = bytes(range(100))
        header = RequestHeader(api_key=0, api_version=9, correlation_id=1, client_id="bench")

        def frame(seq: int) -> bytes:  # seq: the idempotent producer's sequence number
            producer = dict(producer_id=4242, producer_epoch=0, base_sequence=seq) if idempotent else {}
            req = ProduceRequest(transactional_id=None, acks=1, timeout_ms=30000, topic_data=[
                ProduceRequest.TopicProduceData(name="bench", partition_data=[
                    ProduceRequest.PartitionProduceData(index=p, records=build_batch([(ts, None, value)], **producer))
                    for p in range(partitions)])])
            return codec.encode_request(header, req)[4:]

        conn = _Conn()
        # patched in place: one each; an idempotent producer's each with its next sequence
        frames = ([memoryview(bytearray(frame(i))) for i in range(requests + 50)] if idempotent
                  else [memoryview(bytearray(frame(0))) for _ in range(requests + 50)])
        if fetch:
            _fetch_at_end(cg, dispatcher, conn, frames, lm)
        elif connection:
            _through_connection(cg, dispatcher, frames, session)
        else:
            for view in frames[:50]:  # warm-up: caches, labelled children, specialised bytecode
                assert dispatcher.dispatch(conn, view)
            work = frames[50:]
            cg.cg_start()
            for view in work:
                dispatcher.dispatch(conn, view)
            cg.cg_stop()
        appended = lm.get_log("bench", 0).log_end_offset
        if appended != len(frames):  # every request appended (none refused, none a duplicate)
            raise SystemExit(f"{appended} of {len(frames)} produce requests appended")
        lm.shutdown()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _fetch_at_end(cg, dispatcher, conn, frames, lm) -> None:
    """Each produce frame appended (not counted), then a Fetch from where it begins
    (counted, callgrind's collection toggled around it), answered with its batch."""
    from protocol import codec
    from protocol.messages import FetchRequest, RequestHeader

    header = RequestHeader(api_key=1, api_version=11, correlation_id=2, client_id="bench")
    log = lm.get_log("bench", 0)

    def fetch(offset: int) -> memoryview:
        req = FetchRequest(replica_id=-1, max_wait_ms=100, min_bytes=1, max_bytes=52428800, isolation_level=0,
                           session_id=0, session_epoch=-1, rack_id="", forgotten_topics_data=[], topics=[
                               FetchRequest.FetchTopic(topic="bench", partitions=[FetchRequest.FetchPartition(
                                   partition=0, current_leader_epoch=-1, fetch_offset=offset, log_start_offset=-1,
                                   partition_max_bytes=1048576)])])
        return memoryview(bytearray(codec.encode_request(header, req)[4:]))

    def one(view, counted: bool) -> None:
        offset = log.log_end_offset
        assert dispatcher.dispatch(conn, view)
        request = fetch(offset)
        if counted:
            cg.cg_toggle()
        answer = dispatcher.dispatch(conn, request)
        if counted:
            cg.cg_toggle()
        if not isinstance(answer, list) or sum(len(c) for c in answer) < 100:
            raise SystemExit(f"the fetch at offset {offset} was not answered with its record: {answer!r}")

    for view in frames[:50]:
        one(view, False)
    cg.cg_start()
    cg.cg_toggle()  # collection off until the first fetch
    for view in frames[50:]:
        one(view, True)
    cg.cg_stop()


class _Transport:
    """Keeps nothing of what the connection writes."""

    def write(self, data) -> None:
        pass

    def writelines(self, chunks) -> None:
        pass

    def get_write_buffer_size(self) -> int:
        return 0


def _through_connection(cg, dispatcher, frames, session=None) -> None:
    """Each produce frame (its size in front) read by a KafkaConnection (of ``session``),
    one per read."""
    from broker.connection import KafkaConnection

    conn = KafkaConnection(dispatcher, None)
    conn._transport = _Transport()
    conn.session = session
    whole = [len(view).to_bytes(4, "big") + bytes(view) for view in frames]

    def read(data: bytes) -> None:
        buf = conn.get_buffer(len(data))
        buf[: len(data)] = data
        conn.buffer_updated(len(data))

    for data in whole[:50]:
        read(data)
    cg.cg_start()
    for data in whole[50:]:
        read(data)
    cg.cg_stop()


def _count(root: str, shim: str, shape: str, requests: int, workdir: str) -> int:
    partitions, metrics_on, _share, idempotent = SHAPES[shape]
    out = os.path.join(workdir, "cg.out")
    for f in Path(workdir).glob("cg.out*"):
        f.unlink()
    # without address space randomisation (setarch -R): dicts keyed by objects (their
    # addresses) probe the same way in every run
    cmd = (["setarch", platform.machine(), "-R"] if shutil.which("setarch") else []) + [
        "valgrind", "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
        sys.executable, __file__, "--child", root, shim, str(partitions), "1" if metrics_on else "0",
        str(requests), "1" if idempotent else "0", "1" if shape in FETCH_SHAPES else "0",
        "1" if shape in CONNECTION_SHAPES else "0", "1" if shape in AUTHORIZER_SHAPES else "0"]
    # one hash seed: dict and set layouts (and so a few hundred instructions per request)
    # are the same from run to run and from checkout to checkout
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=dict(os.environ, PYTHONHASHSEED="0"))
    dumps = sorted(p for p in Path(workdir).glob("cg.out.*"))
    if proc.returncode != 0 or not dumps:
        raise SystemExit(f"callgrind run of {shape!r} failed (exit {proc.returncode}):\n{proc.stderr[-2000:]}")
    totals = [line for line in dumps[0].read_text().splitlines() if line.startswith("totals:")]
    if not totals:
        raise SystemExit(f"no totals in {dumps[0]}")
    return int(totals[-1].split()[1])


def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        root, shim, partitions, metrics_on, requests, idempotent, fetch, connection, authorizer = sys.argv[2:11]
        _child(root, shim, int(partitions), metrics_on == "1", int(requests), idempotent == "1", fetch == "1",
               connection == "1", authorizer == "1")
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--requests", type=int, default=2000,
                    help="counted requests of one record (2000; a tenth as many of 100 partitions)")
    ap.add_argument("--root", default=str(REPO), help="the checkout to measure (default: this one)")
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma list of " + ", ".join(SHAPES))
    ap.add_argument("--json-out", help="also write the counts as JSON")
    args = ap.parse_args()
    for tool in ("valgrind", "cc"):
        if shutil.which(tool) is None:
            raise SystemExit(f"{tool} is not installed (Debian: apt-get install valgrind gcc)")
    shapes = [s.strip() for s in args.shapes.split(",") if s.strip()]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shape(s) {unknown}: choose from {list(SHAPES)}")
    root = str(Path(args.root).resolve())
    commit = subprocess.run(["git", "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip() or "?"
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-instructions-") as workdir:
        shim = os.path.join(workdir, "cgshim.so")
        src = os.path.join(workdir, "cgshim.c")
        Path(src).write_text(_SHIM)
        subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", shim, src], check=True)
        for shape in shapes:
            t = time.perf_counter()
            partitions, _metrics, share, _idempotent = SHAPES[shape]
            requests = max(1, int(args.requests * share))
            total = _count(root, shim, shape, requests, workdir)
            results[shape] = {"requests": requests, "instructions": total, "per_request": total / requests,
                              "per_partition": total / requests / partitions}
            print(f"[bench] {shape}: {total:,} instructions in {time.perf_counter() - t:.0f} s", file=sys.stderr)
    print(f"Instructions per request (produce; fetch for fetch-at-end), callgrind, checkout {root} at {commit}, "
          f"CPython {sys.version.split()[0]}")
    print("| shape | instructions per request | per partition |")
    print("|---|---:|---:|")
    for shape, r in results.items():
        print(f"| {shape} | {r['per_request']:,.0f} | {r['per_partition']:,.0f} |")
    if args.json_out:
        Path(args.json_out).write_text(json.dumps({"root": root, "commit": commit, "requests": args.requests,
                                                   "python": sys.version, "results": results}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
