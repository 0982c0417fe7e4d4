"""storage.validator's compiled paths (protocol/_recwalk.c ``scan_v2``, ``assign_v2`` and
``validate_v2``) against the validator's own Python steps: the same outcome for every
input, valid or not.

``scan_v2`` takes the common case in one call (v2, uncompressed, no LogAppendTime
attribute, every check passing) and answers None for anything else, leaving it to the
reference steps; ``assign_v2`` is the reference's offset-assignment loop; ``validate_v2``
(``validate_common``, the produce path's) is both in one call for a writable buffer. Each
case runs the validator twice, once as the broker runs it and once with the compiled
paths switched off, and compares the appended bytes and fields, or the error's type,
message and per-record errors."""

import platform
import struct
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocol import records as R
from protocol import record_walk
from storage import errors as E
from storage import validator as V
from tests.unit.test_validator import with_field

MAX = 2**63 - 1
NOW = 1_700_000_000_000


def cfg(ts_type="CreateTime", before=MAX, after=MAX, max_bytes=1_048_588, compact=False, segment_bytes=1 << 30):
    return SimpleNamespace(message_timestamp_type=ts_type, message_timestamp_before_max_ms=before,
                           message_timestamp_after_max_ms=after, max_message_bytes=max_bytes, compact=compact,
                           segment_bytes=segment_bytes)


def outcome(buf, config, *, next_offset=5, last=-1, epoch=3, in_place=True):
    """What the validator makes of ``buf``: the appended bytes and fields, or the error."""
    data = bytearray(buf)
    try:
        va = V.validate_records(data, config=config, next_offset=next_offset, now_ms=NOW, last_append_time_ms=last,
                                partition_leader_epoch=epoch, in_place=in_place)
    except E.StorageError as exc:
        return ("error", type(exc).__name__, str(exc), list(getattr(exc, "record_errors", None) or ()))
    return ("ok", bytes(va.buffer), va.base_offset, va.last_offset, va.max_timestamp, va.offset_of_max_timestamp,
            va.log_append_time, va.record_count, list(va.batches), bytes(data))


def reference(monkeypatch, *args, **kw):
    with monkeypatch.context() as m:
        m.setattr(V, "scan_v2", None)
        m.setattr(V, "assign_v2", None)
        m.setattr(V, "validate_v2", None)
        m.setattr(V, "validate_common", V._not_compiled)
        return outcome(*args, **kw)


def scanned(buf, config):
    return V._V2Analysis.scanned(memoryview(bytearray(buf)), config, NOW, True) is not None


def one_call(buf, config):
    """What validate_common makes of ``buf`` (None: not taken), and whether it left
    ``buf`` as it was."""
    data = bytearray(buf)
    va = V.validate_common(data, V.rules_of(config), NOW, 5, -1, 3)
    return va, bytes(data) == bytes(buf)


def test_the_compiled_paths_are_built_and_used():
    assert record_walk.COMPILED and None not in (V.scan_v2, V.assign_v2, V.validate_v2)
    assert scanned(R.build_batch([(NOW, b"k", b"v")]), cfg())
    assert one_call(R.build_batch([(NOW, b"k", b"v")]), cfg())[0] is not None


def batch(timestamps, codec=0, keys=True, **kw):
    return R.build_batch([(ts, b"k%d" % i if keys else None, b"v%d" % i) for i, ts in enumerate(timestamps)],
                         compression=codec, **kw)


def patched(buf, at, fmt, value, crc=True):
    return with_field(buf, fmt, at, value, fix_crc=crc)


GOOD = batch([NOW - 5, NOW - 1, NOW - 3])
# over the 2 KiB below which the compiled paths sum the CRC with their own table (above
# it: the crc32c package)
BIG = R.build_batch([(NOW - i, b"k%d" % i, bytes(range(256)) * 4) for i in range(3)])
assert len(BIG) > 3000

# (name, bytes, config, whether scan_v2 takes it in one call)
CASES = [
    ("one batch", GOOD, cfg(), True),
    ("three batches", GOOD + batch([NOW]) + batch([NOW - 9, NOW - 8]), cfg(), True),
    ("partial trailing batch", GOOD + batch([NOW])[:30], cfg(), True),
    ("idempotent", batch([NOW], producer_id=7, producer_epoch=1, base_sequence=4), cfg(), True),
    ("transactional", batch([NOW], producer_id=7, producer_epoch=1, base_sequence=0, is_transactional=True),
     cfg(), True),
    ("headers", R.build_batch([R.Record(None, NOW, b"k", b"v", [("h", b"x"), ("g", None)])]), cfg(), True),
    ("LogAppendTime topic", GOOD + batch([NOW - 50]), cfg("LogAppendTime"), True),
    ("inside the window", batch([NOW - 1000, NOW + 1000]), cfg(before=1000, after=1000), True),
    ("compacted with keys", GOOD, cfg(compact=True), True),
    ("no timestamps", batch([-1, -1]), cfg(before=10, after=10), True),
    ("wrong maxTimestamp corrected", patched(GOOD, 35, ">q", NOW - 100), cfg(), True),
    # anything else goes to the reference steps
    ("outside the window", batch([NOW - 1001, NOW]), cfg(before=1000), False),
    ("in the future", batch([NOW + 5000]), cfg(after=1000), False),
    ("compacted without keys", batch([NOW, NOW], keys=False), cfg(compact=True), False),
    ("LogAppendTime bit from a client", batch([NOW], timestamp_type=1, log_append_time=NOW - 1), cfg(), False),
    ("LogAppendTime bit on a LogAppendTime topic", batch([NOW], timestamp_type=1, log_append_time=NOW),
     cfg("LogAppendTime"), False),
    ("compressed", batch([NOW, NOW], codec=1), cfg(), False),
    ("control batch", patched(GOOD, 21, ">h", R.CONTROL_MASK), cfg(), False),
    ("bad crc", patched(GOOD, 17, ">I", 12345, crc=False), cfg(), False),
    ("base offset", patched(GOOD, 0, ">q", 3, crc=False), cfg(), False),
    ("too large", GOOD, cfg(max_bytes=len(GOOD) - 1), False),
    ("count differs", patched(GOOD, 57, ">i", 2), cfg(), False),
    ("last offset delta", patched(GOOD, 23, ">i", 5), cfg(), False),
    ("producer without sequence", batch([NOW], producer_id=7, producer_epoch=1, base_sequence=-1), cfg(), False),
    ("unknown codec", patched(GOOD, 21, ">h", 6), cfg(), False),
    ("offset deltas to rebuild", R.build_batch([R.Record(0, NOW, b"a", b"1"), R.Record(2, NOW, b"b", b"2")]),
     cfg(), False),
    ("record cut short", patched(GOOD, 8, ">i", len(GOOD) - 12 - 3, crc=False)[:-3], cfg(), False),
    ("magic 3", patched(GOOD, 16, ">b", 3, crc=False), cfg(), False),
    ("batch length under the minimum", patched(GOOD, 8, ">i", 10, crc=False), cfg(), False),
    ("second batch bad", GOOD + patched(batch([NOW]), 17, ">I", 1, crc=False), cfg(), False),
    ("longer than the segment", GOOD, cfg(segment_bytes=len(GOOD) - 1), True),
    ("large batch", BIG, cfg(), True),
    ("large batch, wrong maxTimestamp corrected", patched(BIG, 35, ">q", NOW - 100), cfg(), True),
    ("large batch on a LogAppendTime topic", BIG, cfg("LogAppendTime"), True),
    ("large batch, bad crc", patched(BIG, 17, ">I", 12345, crc=False), cfg(), False),
    ("large batch, one flipped value byte", BIG[:2000] + bytes([BIG[2000] ^ 1]) + BIG[2001:], cfg(), False),
    ("small batch, one flipped value byte", GOOD[:-2] + bytes([GOOD[-2] ^ 0x40]) + GOOD[-1:], cfg(), False),
]


#: taken by scan_v2 but not by validate_v2 (which then leaves them to the two-call path)
NOT_ONE_CALL = {"partial trailing batch", "longer than the segment"}


@pytest.mark.parametrize("name,buf,config,fast", CASES, ids=[c[0] for c in CASES])
@pytest.mark.parametrize("in_place", [True, False])
def test_compiled_matches_reference(monkeypatch, name, buf, config, fast, in_place):
    assert scanned(buf, config) is fast
    va, untouched = one_call(buf, config)
    assert (va is not None) is (fast and name not in NOT_ONE_CALL)
    assert untouched or va is not None  # what it does not take, it leaves as it was
    got = outcome(buf, config, in_place=in_place)
    assert got == reference(monkeypatch, buf, config, in_place=in_place)
    if fast and name != "longer than the segment":
        assert got[0] == "ok"


def test_one_call_takes_up_to_16_batches(monkeypatch):
    for n, taken in ((16, True), (17, False)):
        buf = b"".join(batch([NOW - i]) for i in range(n))
        va, untouched = one_call(buf, cfg())
        assert (va is not None) is taken and untouched is not taken
        assert outcome(buf, cfg()) == reference(monkeypatch, buf, cfg())


def test_one_call_takes_at_most_max_batches():
    """Produce v3+ passes max_batches=1: a partition of more batches is then left whole to
    the path that names ProduceRequest.validateRecords' error."""
    for n in (1, 2, 5):
        buf = b"".join(batch([NOW - i]) for i in range(n))
        for most in (1, 2, 16):
            data = bytearray(buf)
            va = V.validate_common(data, V.rules_of(cfg()), NOW, 5, -1, 3, most)
            assert (va is not None) is (n <= most)
            assert (bytes(data) == buf) is (va is None)
            if va is not None:
                assert va.last_offset == 5 + n - 1 and len(va.batches) == n
    for bad in (0, 17, -1):
        with pytest.raises(ValueError, match="max_batches"):
            V.validate_common(bytearray(GOOD), V.rules_of(cfg()), NOW, 0, -1, 3, bad)
    rules = V.rules_of(cfg())
    for bad_rules in (rules[:6], list(rules), None):
        with pytest.raises(TypeError, match="rules"):
            V.validate_common(bytearray(GOOD), bad_rules, NOW, 0)
    with pytest.raises(OverflowError):
        V.validate_common(bytearray(GOOD), rules, NOW, 1 << 64)


def test_ints_read_at_every_width():
    """The compiled code reads Python ints inline (protocol/_pyint.h) by their 30-bit
    digits, and through the C API otherwise: every width, sign, subclass and __index__
    object gives the value PyLong_AsLongLong gives, and past 64 bits OverflowError."""
    rules = V.rules_of(cfg())

    class Sub(int):
        pass

    class Index:
        def __index__(self):
            return 2**40 + 3

    for value, expected in [(0, 0), (1, 1), (2**30 - 1, 2**30 - 1), (2**30, 2**30), (2**31 + 7, 2**31 + 7),
                            (2**60 - 1, 2**60 - 1), (2**60, 2**60), (2**61 + 12345, 2**61 + 12345),
                            (2**63 - 3, 2**63 - 3), (Sub(2**45 + 1), 2**45 + 1), (True, 1), (Index(), 2**40 + 3)]:
        va = V.validate_common(bytearray(GOOD), rules, NOW, value)
        assert va.last_offset == expected + 2, value
    # the timestamp bounds at each width (GOOD's oldest record is 5 ms old): refused only
    # below 5, then left to the Python path, which reports the error
    for before in (5, 2**30 + 1, 2**61, 2**63 - 1):
        assert V.validate_common(bytearray(GOOD), V.rules_of(cfg(before=before)), NOW, 0) is not None
    assert V.validate_common(bytearray(GOOD), V.rules_of(cfg(before=4)), NOW, 0) is None
    for too_wide in (2**63, 2**64 + 1, -(2**63) - 1, -(2**90)):
        with pytest.raises(OverflowError):
            V.validate_common(bytearray(GOOD), rules, NOW, too_wide)


def test_one_call_leaves_a_read_only_buffer_to_the_copying_path():
    assert V.validate_common(GOOD, V.rules_of(cfg()), NOW, 0) is None
    va = V.validate_records(GOOD, config=cfg(), next_offset=0, now_ms=NOW, in_place=True)
    assert isinstance(va.buffer, bytearray) and va.record_count == 3


def test_log_append_time_never_goes_back(monkeypatch):
    got = outcome(GOOD, cfg("LogAppendTime"), last=NOW + 500)
    assert got == reference(monkeypatch, GOOD, cfg("LogAppendTime"), last=NOW + 500)
    assert got[4] == NOW + 500 and got[6] == NOW + 500


def test_no_leader_epoch_leaves_it(monkeypatch):
    got = outcome(GOOD, cfg(), epoch=None)
    assert got == reference(monkeypatch, GOOD, cfg(), epoch=None)
    assert R.parse_batch_header(got[1], 0).partition_leader_epoch == -1


rec_st = st.tuples(st.one_of(st.just(-1), st.integers(NOW - 3000, NOW + 3000)),
                   st.one_of(st.none(), st.binary(max_size=8)), st.one_of(st.none(), st.binary(max_size=20)))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.lists(rec_st, min_size=1, max_size=5), min_size=1, max_size=3),
       st.sampled_from(["CreateTime", "LogAppendTime"]), st.sampled_from([MAX, 2000]), st.booleans(),
       st.integers(0, 10), st.lists(st.tuples(st.integers(0, 200), st.integers(0, 255)), max_size=2))
def test_generated_and_mutated_batches(monkeypatch, batches, ts_type, window, compact, max_fix, flips):
    buf = bytearray(b"".join(R.build_batch(recs) for recs in batches))
    if max_fix:  # a client's maxTimestamp that is not its records' maximum
        struct.pack_into(">q", buf, 35, NOW - max_fix)
        R._rewrite_crc(buf, 0)
    for at, value in flips:  # corrupt bytes (mostly caught by the CRC, some in the length or offset)
        if at < len(buf):
            buf[at] = value
    config = cfg(ts_type, before=window, after=window, compact=compact)
    assert outcome(bytes(buf), config) == reference(monkeypatch, bytes(buf), config)


@given(st.binary(max_size=3000))
@settings(max_examples=300, deadline=None)
def test_small_crc_table_is_crc32c(data):
    import crc32c

    from protocol import _recwalk

    assert _recwalk.crc32c_small(data) == crc32c.crc32c(data)  # the CPU's instruction where it has one
    assert _recwalk.crc32c_table(data) == crc32c.crc32c(data)
    # every alignment and tail length of the 8-byte steps
    for start in range(min(9, len(data))):
        assert _recwalk.crc32c_small(data[start:]) == _recwalk.crc32c_table(data[start:])


def test_small_crc_table_known_value():
    from protocol import _recwalk

    for fn in (_recwalk.crc32c_small, _recwalk.crc32c_table):
        assert fn(b"123456789") == 0xE3069283  # the CRC-32C check value
        assert fn(b"") == 0
    # an x86-64 CPU of the last 15 years has SSE4.2 (this machine's EPYC does)
    assert _recwalk.CRC_HW == (platform.machine() in ("x86_64", "AMD64"))
