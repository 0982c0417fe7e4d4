"""The record walker: every record of a v2 batch checked, nothing copied (sans-IO).

Kafka's LogValidator reads every record of every produced batch before anything is
appended; so does Chronolog (SPEC section 2).  :class:`RecordWalker` does that walk for
one batch over its (decompressed) records bytes, which may be fed in any number of
pieces (a streaming decompressor's output), and checks:

* each record's length is >= 0 and the record ends exactly where its length says;
* every varint stays inside its record (32-bit varints at most 5 bytes, the timestamp
  delta at most 10), key, value, header keys and values stay inside the record, the
  header count is >= 0 and no larger than the bytes left, header key lengths >= 0;
* the batch holds exactly ``count`` records: no bytes before a record is complete and
  none after the last one.

and reports, from the records themselves: the largest timestamp (``baseTimestamp +
delta`` with Java's long wrap-around; Kafka's rule: strictly greater than the running
max, starting at -1) and the index of the first record holding it, whether the offset
deltas run 0..count-1, the ``(index, timestamp)`` of records outside the CreateTime
window (``now - ts > before`` or ``ts - now > after``, computed as Java longs; -1 is not
checked), and the indexes of records with a null key (compacted topics refuse them).

Two implementations with one interface:

* ``protocol._recwalk.RecordWalker``, compiled from ``protocol/_recwalk.c`` by the
  project's normal install (``pip install .``; ``setup.py`` declares it).  It walks a
  100-byte record in a few tens of nanoseconds.
* :class:`PyRecordWalker` below, the reference: plain Python, the same semantics.  The
  tests cross-check the two on generated and mutated batches split at every kind of
  boundary.  It is used only when the compiled module could not be built (no C
  compiler); the broker then logs a warning at start.

Usage::

    w = RecordWalker(count, base_timestamp, log_append_time=False,
                     now=now_ms, before=before_ms, after=after_ms,
                     check_window=True, collect_null_keys=False)
    w.feed(chunk)            # any number of times; raises WalkError when malformed
    max_ts, index_of_max, deltas_ok, bad_timestamps, null_keys = w.finish()

``bad_timestamps`` and ``null_keys`` are None when there are none.  ``WalkError`` is a
``ValueError``; its message names the record index and the field.

The compiled module also has ``scan_v2``, the produce validator's steps 1-4 in one call
for the common case (every batch v2, uncompressed, without the LogAppendTime attribute,
every check passing): it returns what the validator's own steps would compute, or None
for anything else, and the validator then runs those steps, which name the problem
(``storage/validator.py``; the tests cross-check the two).  ``assign_v2`` is the
validator's step 5 (offsets, leader epoch, LogAppendTime or corrected maxTimestamp, CRCs)
as its Python loop does it; ``validate_v2`` is both in one call, for a writable buffer
of batches ``scan_v2`` takes whole (the produce path's common case).  Without the
compiled module the three are None.
"""

from __future__ import annotations

__all__ = ["RecordWalker", "PyRecordWalker", "WalkError", "COMPILED", "scan_v2", "assign_v2", "validate_v2",
           "validate_v2_setup"]

_MASK64 = (1 << 64) - 1


def _s64(v: int) -> int:
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v


class PyWalkError(ValueError):
    """A malformed record (the message names the record index and the field)."""


class _Incomplete(Exception):
    """The record is not entirely in the bytes given (internal)."""


def _varint(buf, p: int, end: int, max_bytes: int, index: int, what: str, limit_what=None):
    raw = 0
    for i in range(max_bytes):
        if p >= end:
            if limit_what is not None:
                raise PyWalkError(f"record {index}: {what} runs past the record's length {limit_what}")
            raise _Incomplete()
        b = buf[p]
        p += 1
        raw |= (b & 0x7F) << (7 * i)
        if b < 0x80:
            if max_bytes == 5:
                raw &= 0xFFFFFFFF
                v = (raw >> 1) ^ -(raw & 1)
                v &= 0xFFFFFFFF
                return (v - (1 << 32) if v >> 31 else v), p
            raw &= _MASK64
            return _s64((raw >> 1) ^ -(raw & 1)), p
    raise PyWalkError(f"record {index}: {what} varint is longer than {max_bytes} bytes")


def _skip(p: int, rend: int, n: int, index: int, what: str, length: int) -> int:
    """Past a field of ``n`` bytes (none when ``n`` <= 0: null) that must end in the record."""
    if n > 0:
        if rend - p < n:
            raise PyWalkError(f"record {index}: {what} length {n} runs past the record's length {length}")
        p += n
    return p


class PyRecordWalker:
    """Reference implementation of the record walk (see the module docstring)."""

    def __init__(self, count: int, base_timestamp: int, log_append_time: bool = False, now: int = 0,
                 before: int = 0, after: int = 0, check_window: bool = False,
                 collect_null_keys: bool = False) -> None:
        if count < 0:
            raise PyWalkError(f"invalid record count {count} in the batch header")
        self.count = count
        self.base_ts = base_timestamp
        self.lat = bool(log_append_time)
        self.now, self.before, self.after = now, before, after
        self.check_window = bool(check_window)
        self.collect_null_keys = bool(collect_null_keys)
        self.records = 0
        self.bytes_fed = 0
        self._carry = bytearray()
        self._max = -1
        self._index_of_max = -1
        self._deltas_ok = True
        self._bad: list | None = None
        self._nulls: list | None = None
        self._failed = False

    def feed(self, data) -> None:
        if self._failed:
            raise PyWalkError("the record walker already failed")
        self.bytes_fed += len(data)
        self._carry += data
        buf = self._carry
        p = 0
        end = len(buf)
        try:
            while p < end:
                if self.records >= self.count:
                    raise PyWalkError(
                        f"incorrect declared batch size: {end - p} bytes remain after the "
                        f"{self.count} records the header declares")
                try:
                    p = self._record(buf, p, end)
                except _Incomplete:
                    break
        except PyWalkError:
            self._failed = True
            raise
        del buf[:p]

    def _record(self, buf, p: int, end: int) -> int:
        i = self.records
        length, p = _varint(buf, p, end, 5, i, "length")
        if length < 0:
            raise PyWalkError(f"record {i}: invalid record length {length}")
        if end - p < length:
            raise _Incomplete()
        rend = p + length
        if p >= rend:
            raise PyWalkError(f"record {i}: invalid record size: length {length} leaves no room for the attributes")
        p += 1
        tsd, p = _varint(buf, p, rend, 10, i, "timestamp delta", length)
        offd, p = _varint(buf, p, rend, 5, i, "offset delta", length)
        klen, p = _varint(buf, p, rend, 5, i, "key length", length)
        p = _skip(p, rend, klen, i, "key", length)
        vlen, p = _varint(buf, p, rend, 5, i, "value length", length)
        p = _skip(p, rend, vlen, i, "value", length)
        nh, p = _varint(buf, p, rend, 5, i, "header count", length)
        if nh < 0:
            raise PyWalkError(f"record {i}: invalid number of record headers {nh}")
        if nh > rend - p:
            raise PyWalkError(f"record {i}: invalid number of record headers {nh}: larger than the "
                              f"{rend - p} bytes left in the record")
        for _ in range(nh):
            hk, p = _varint(buf, p, rend, 5, i, "header key length", length)
            if hk < 0:
                raise PyWalkError(f"record {i}: invalid negative header key size {hk}")
            p = _skip(p, rend, hk, i, "header key", length)
            hv, p = _varint(buf, p, rend, 5, i, "header value length", length)
            p = _skip(p, rend, hv, i, "header value", length)
        if p != rend:
            raise PyWalkError(f"record {i}: invalid record size: expected {length} bytes in record payload, "
                              f"read {length - (rend - p)}")
        self._finish_record(i, tsd, offd, klen < 0)
        return p

    def _finish_record(self, i: int, tsd: int, offd: int, keynull: bool) -> None:
        if offd != i:
            self._deltas_ok = False
        if not self.lat:
            ts = _s64(self.base_ts + tsd)
            if self.check_window and ts != -1:
                diff = _s64(self.now - ts)
                if diff > self.before or _s64(-diff) > self.after:
                    if self._bad is None:
                        self._bad = []
                    self._bad.append((i, ts))
            if ts > self._max:
                self._max = ts
                self._index_of_max = i
        if keynull and self.collect_null_keys:
            if self._nulls is None:
                self._nulls = []
            self._nulls.append(i)
        self.records += 1

    def finish(self):
        if self._failed:
            raise PyWalkError("the record walker already failed")
        if self._carry:
            self._failed = True
            raise PyWalkError(f"record data underflow: the batch ends inside record {self.records} "
                              f"(of {self.count} declared)")
        if self.records != self.count:
            self._failed = True
            raise PyWalkError(f"record data underflow: the batch holds {self.records} records but its "
                              f"header declares {self.count}")
        return self._max, self._index_of_max, self._deltas_ok, self._bad, self._nulls


def py_find_batch(buf, position: int, end: int, offset: int):
    """The search of ``LogSegment.translate_offset`` over one chunk of a segment file (the
    reference of the compiled ``find_batch``). ``buf`` holds the file's bytes from
    ``position``; the segment ends at ``end``. Walks whole v2 batches from the start of
    ``buf``: ``(last offset, position, size)`` of the first whose last offset >= ``offset``;
    an int, the file position to read on from, when the next header is not whole in
    ``buf``; None where the walk stops (a header or batch past ``end``, a magic other than
    2, a batchLength below 49)."""
    n = len(buf)
    rel = 0
    while True:
        pos = position + rel
        if pos + 61 > end:
            return None
        if rel + 61 > n:
            return pos
        length = int.from_bytes(buf[rel + 8:rel + 12], "big", signed=True)
        if buf[rel + 16] != 2 or length < 49:
            return None
        size = length + 12
        if pos + size > end:
            return None
        last = int.from_bytes(buf[rel:rel + 8], "big", signed=True) + \
            int.from_bytes(buf[rel + 23:rel + 27], "big", signed=True)
        if last >= offset:
            return last, pos, size
        rel += size


try:
    from protocol._recwalk import (  # type: ignore[attr-defined]
        RecordWalker, WalkError, assign_v2, find_batch, scan_v2, validate_v2, validate_v2_setup)

    COMPILED = True
except ImportError:  # no C compiler at install time: the reference serves
    RecordWalker = PyRecordWalker  # type: ignore[misc]
    WalkError = PyWalkError  # type: ignore[misc]
    find_batch = py_find_batch
    #: the validator's one-call path for plain batches (storage/validator.py); without
    #: the compiled module the validator's own steps serve every batch
    scan_v2 = assign_v2 = validate_v2 = validate_v2_setup = None
    COMPILED = False

#: every error either walker raises
WALK_ERRORS = (PyWalkError,) if not COMPILED else (PyWalkError, WalkError)
