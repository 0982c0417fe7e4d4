"""Property tests of Log against a naive model: rolls, reads, search by time, reopen."""

import os
import shutil

from hypothesis import HealthCheck, given, settings, strategies as st

from storage.clock import ManualClock
from storage.log import Log
from tests.unit.test_log_helpers import GZIP, Oracle, append, build_batch, parse_batches, topic_config

batch_st = st.tuples(st.lists(st.integers(0, 5000), min_size=1, max_size=6), st.booleans(),
                     st.integers(0, 120))


def _check(log, oracle, targets):
    leo = oracle.records[-1][0] + 1 if oracle.records else 0
    assert log.log_end_offset == leo == log.high_watermark
    for ts in targets:
        assert log.offset_for_timestamp(ts) == oracle.offset_for_timestamp(ts)
    assert log.offset_of_max_timestamp() == oracle.max_timestamp()
    # every offset reads back from the batch that holds it
    for off in range(0, leo, max(1, leo // 25)):
        got = parse_batches(log.read(off, 10**6).records.read())
        base, last, raw = oracle.batch_for(off)
        assert got[0][0] == base and got[0][3] == raw


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(appends=st.lists(st.lists(batch_st, min_size=1, max_size=3), min_size=1, max_size=30),
       segment_bytes=st.integers(300, 3000), interval=st.sampled_from([0, 100, 4096]),
       index_bytes=st.sampled_from([36, 120, 4096]),
       targets=st.lists(st.integers(0, 5001), min_size=1, max_size=12))
def test_log_model(tmp_path_factory, appends, segment_bytes, interval, index_bytes, targets):
    d = tmp_path_factory.mktemp("plog")
    cfg = topic_config(segment_bytes=segment_bytes, index_interval_bytes=interval,
                       segment_index_bytes=index_bytes)
    log = Log(str(d / "p-0"), cfg, ManualClock(1_000))
    oracle = Oracle()
    for batches in appends:
        raws = [build_batch([(t, b"v" * size) for t in stamps], compression=GZIP if comp else 0)
                for stamps, comp, size in batches]
        if sum(len(r) for r in raws) > segment_bytes:
            continue
        oracle.add(append(log, raws))
    _check(log, oracle, targets)
    # simulated kill: copy the open log's files, reopen the copy
    shutil.copytree(d / "p-0", d / "k-0")
    killed = Log(str(d / "k-0"), cfg, ManualClock(1_000))
    _check(killed, oracle, targets)
    killed.close_handlers()
    # clean close and reopen
    log.close()
    for seg_file in os.listdir(d / "p-0"):
        if seg_file.endswith(".index"):
            assert os.path.getsize(d / "p-0" / seg_file) % 8 == 0
    reopened = Log(str(d / "p-0"), cfg, ManualClock(1_000))
    _check(reopened, oracle, targets)
    reopened.close()
