"""The bound on open segment files (storage.open_files): an LRU of descriptors and index
maps that reopen on demand, so a broker with more partitions than the open-files limit
allows keeps working, with every read, search and write unchanged."""

import os
import random

import pytest

from storage.clock import ManualClock
from storage.log import Log
from storage.open_files import MIN_CAPACITY, OPEN_FILES, OpenFiles, auto_capacity
from tests.unit.test_log_helpers import Oracle, append, build_batch, parse_batches, topic_config


class Handle:
    def __init__(self, name):
        self.name = name
        self.released = 0

    def _release(self):
        self.released += 1


def test_lru_releases_the_least_recently_used_past_the_capacity():
    lru = OpenFiles(MIN_CAPACITY)
    hs = [Handle(i) for i in range(MIN_CAPACITY)]
    for h in hs:
        lru.opened(h)
    lru.touch(hs[0])  # now the most recent: hs[1] is the oldest
    extra = Handle("x")
    lru.opened(extra)
    assert [h.name for h in hs if h.released] == [1]
    assert len(lru) == MIN_CAPACITY and lru.evictions == 1
    lru.closed(hs[2])  # closed by its owner: no longer counted, never released
    lru.opened(Handle("y"))
    assert hs[2].released == 0 and len(lru) == MIN_CAPACITY
    lru.configure(MIN_CAPACITY)  # shrinking to the same bound releases nothing more
    assert sum(h.released for h in hs) == 1


def test_a_touched_handle_gets_one_second_chance():
    """Second chance (CLOCK): past the bound the oldest handles are visited in turn; one
    used since the last pass loses its mark and goes to the newest end, the first
    unmarked one is released; so a handle touched once outlives one pass, not two."""
    lru = OpenFiles(MIN_CAPACITY)
    hs = [Handle(i) for i in range(MIN_CAPACITY)]
    for h in hs:
        lru.opened(h)
    for h in hs[:3]:
        lru.touch(h)
    lru.opened(Handle("a"))  # 0, 1, 2 get their second chance: 3 goes
    assert [h.name for h in hs if h.released] == [3]
    lru.touch(hs[5])
    for name in "bcd":
        lru.opened(Handle(name))  # 4, then 5's second chance, 6, 7
    assert [h.name for h in hs if h.released] == [3, 4, 6, 7]
    # the ring now: 8-15, a, 0, 1, 2 (their marks spent), b, c, 5 (its mark spent), d
    for name in "efghijklmnop":
        lru.opened(Handle(name))
    assert [h.name for h in hs if h.released] == [0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15]
    for name in "qrs":  # b, c, then 5
        lru.opened(Handle(name))
    assert [h.name for h in hs if h.released] == list(range(16))
    assert lru.evictions == 19 and len(lru) == MIN_CAPACITY


def test_auto_capacity_leaves_a_quarter_of_the_limit():
    import resource

    soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    assert auto_capacity() == max(MIN_CAPACITY, soft * 3 // 4)
    assert OpenFiles(-1).capacity == auto_capacity()


def _fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.fixture
def bound():
    before = OPEN_FILES.capacity
    OPEN_FILES.configure(MIN_CAPACITY)
    yield OPEN_FILES
    OPEN_FILES.configure(before)


def _new_log(path, **cfg):
    cfg.setdefault("index_interval_bytes", 100)
    cfg.setdefault("segment_index_bytes", 1200)
    cfg.setdefault("segment_bytes", 2000)
    return Log(str(path), topic_config(**cfg), ManualClock(1_700_000_000_000))


def _read_all(log):
    out, off = [], log.log_start_offset
    while off < log.log_end_offset:
        batches = parse_batches(log.read(off, 10**7).records.read())
        out.extend(batches)
        off = batches[-1][1] + 1
    return out


def test_many_logs_stay_within_the_bound_and_lose_nothing(tmp_path, bound):
    """30 partitions of several segments each (hundreds of files) written round robin,
    read back, searched by time and by offset, flushed, closed and reopened, with the
    process never holding more than the bound of segment files."""
    rng = random.Random(7)
    base_fds = _fds()
    logs = [_new_log(tmp_path / f"t-{i}") for i in range(30)]
    oracles = [Oracle() for _ in logs]
    peak = 0
    t = 10_000
    for _round in range(40):
        for log, oracle in zip(logs, oracles):
            t += rng.randint(0, 5)
            recs = [(t + k, b"v" * rng.randint(10, 80)) for k in range(rng.randint(1, 4))]
            oracle.add(append(log, [build_batch(recs)]))
            peak = max(peak, _fds() - base_fds)
    assert all(len(log._segments) > 3 for log in logs)  # several segments each: ~500 files
    assert peak <= MIN_CAPACITY
    assert bound.evictions > 0 and bound.reopens > 0
    for log, oracle in zip(logs, oracles):
        assert [b[3] for b in _read_all(log)] == [b[2] for b in oracle.batches]
        for ts in (0, 10_050, 10_400, t + 100):
            expect = oracle.offset_for_timestamp(ts)
            got = log.offset_for_timestamp(ts)
            assert (got[0] if got else None) == (expect[0] if expect else None), ts
        mid = oracle.batches[len(oracle.batches) // 2]
        assert parse_batches(log.read(mid[0], 1).records.read())[0][3] == mid[2]
        log.flush()
        assert _fds() - base_fds <= MIN_CAPACITY
    for log in logs:
        log.close()
    assert _fds() <= base_fds + MIN_CAPACITY
    reopened = [_new_log(tmp_path / f"t-{i}") for i in range(30)]
    for log, oracle in zip(reopened, oracles):
        assert log.log_end_offset == oracle.batches[-1][1] + 1
        assert [b[3] for b in _read_all(log)] == [b[2] for b in oracle.batches]
        log.close()


def test_a_file_slice_reads_its_bytes_after_its_descriptor_was_released(tmp_path, bound):
    a = _new_log(tmp_path / "a-0", segment_bytes=10**6)
    va = append(a, [build_batch([(1, b"payload-%d" % i) for i in range(5)])])
    want = va.buffer[va.batches[0].position:va.batches[0].position + va.batches[0].size]
    info = a.read(0, 10**6)
    others = [_new_log(tmp_path / f"b-{i}", segment_bytes=10**6) for i in range(MIN_CAPACITY)]
    for o in others:  # each opens 3 handles: a's .log and indexes are released
        append(o, [build_batch([(1, b"x")])])
    assert a._segments[-1]._file.fd < 0
    a._segments[-1].rename_to_deleted()  # retention's rename: the path follows it
    assert info.records.read() == want
    for log in [a, *others]:
        log.close()


def test_batch_walk_survives_other_files_opening_between_batches(tmp_path, bound):
    a = _new_log(tmp_path / "a-0", segment_bytes=10**6)
    for i in range(20):
        append(a, [build_batch([(i, b"r%d" % i)])])
    seg = a._segments[-1]
    others = []
    seen = []
    # a read per batch (chunk of 64 bytes): the walk asks for the descriptor each time
    for pos, hdr, _buf, _rel in seg._walk_batches(0, seg.size, 64):
        seen.append(hdr.base_offset)
        o = _new_log(tmp_path / f"o-{len(others)}", segment_bytes=10**6)
        append(o, [build_batch([(1, b"x")])])
        others.append(o)
    assert seen == list(range(20))
    for log in [a, *others]:
        log.close()
