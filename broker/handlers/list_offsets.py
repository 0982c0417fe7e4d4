"""ListOffsets (key 2), v0-11 (v10 adds only a timeout for tiered-storage lookups): offsets by special value or by time (KIP-33).

-1 LATEST (the high watermark), -2 EARLIEST (log start offset), -3 MAX_TIMESTAMP (v7+),
-4 EARLIEST_LOCAL (v8+, the log start offset here), -5 LATEST_TIERED (v9+, -1/-1: no
tiered storage), -6 EARLIEST_PENDING_UPLOAD (v11+, KIP-1023: -1/-1 with leader epoch -1,
as Kafka answers for a topic without remote storage), T >= 0 through the time index (SPEC section 5). A special value below
the version that introduced it is UNSUPPORTED_VERSION; the same partition twice in one
v1+ request is INVALID_REQUEST for both entries. v0 answers "offsets before a time"
from segment base offsets and file mtimes, like Kafka's legacy path.
"""

from __future__ import annotations

import logging
from time import perf_counter

from protocol.errors import ErrorCode
from protocol.messages import ListOffsetsResponse

from broker.errors import error_code_for, leader_epoch_error
from broker.security import authorizer as A
from storage import errors as se

log = logging.getLogger("chronolog.list_offsets")

LATEST, EARLIEST, MAX_TIMESTAMP, EARLIEST_LOCAL, LATEST_TIERED, EARLIEST_PENDING_UPLOAD = -1, -2, -3, -4, -5, -6
_MIN_VERSION = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}

PartitionResponse = ListOffsetsResponse.ListOffsetsPartitionResponse
TopicResponse = ListOffsetsResponse.ListOffsetsTopicResponse


def _resp(index, code=0, offset=-1, timestamp=-1, old_style=None, plog=None):
    """``plog`` given: the leader epoch reported is the one that wrote ``offset``
    (Kafka: the found batch's epoch, the latest epoch for the log end), else -1."""
    epoch = None
    if plog is not None and code == 0 and offset >= 0:
        epoch = plog.epoch_for_offset(offset)
    return PartitionResponse(
        partition_index=index,
        error_code=int(code),
        old_style_offsets=old_style if old_style is not None else [],
        timestamp=timestamp,
        offset=offset,
        leader_epoch=-1 if epoch is None else epoch,
    )


def handle(ctx, header, request, session=None):
    version = header.api_version
    lm = ctx.log_manager
    denied = ctx.unauthorized(session, A.DESCRIBE, A.TOPIC, (t.name for t in request.topics), "ListOffsets")
    seen = {}
    for t in request.topics:
        for p in t.partitions:
            key = (t.name, p.partition_index)
            seen[key] = seen.get(key, 0) + 1
    topics_out = []
    for t in request.topics:
        parts = []
        for p in t.partitions:
            index = p.partition_index
            if t.name in denied:
                parts.append(_resp(index, ErrorCode.TOPIC_AUTHORIZATION_FAILED))
                continue
            if version >= 1 and seen[(t.name, index)] > 1:
                parts.append(_resp(index, ErrorCode.INVALID_REQUEST))
                continue
            try:
                plog = lm.get_log(t.name, index)
            except se.StorageError as exc:
                parts.append(_resp(index, error_code_for(exc)))
                continue
            if version == 0:
                parts.append(_resp(index, 0, old_style=_offsets_before(ctx, plog, p.timestamp, p.max_num_offsets)))
                continue
            if version >= 4:
                code = leader_epoch_error(p.current_leader_epoch, plog.leader_epoch)
                if code:
                    parts.append(_resp(index, code))
                    continue
            parts.append(_lookup(plog, version, index, p.timestamp, request.isolation_level, ctx.metrics))
        topics_out.append(TopicResponse(name=t.name, partitions=parts))
    return ListOffsetsResponse(throttle_time_ms=0, topics=topics_out)


def _lookup(plog, version, index, ts, isolation_level, metrics=None):
    need = _MIN_VERSION.get(ts)
    if need is not None and version < need:
        return _resp(index, ErrorCode.UNSUPPORTED_VERSION)
    # read_committed (isolation level 1) sees the log up to the last stable offset
    fetchable = plog.last_stable_offset if isolation_level == 1 else plog.high_watermark
    if ts == LATEST:
        return _resp(index, 0, fetchable, -1, plog=plog)
    if ts in (EARLIEST, EARLIEST_LOCAL):
        return _resp(index, 0, plog.log_start_offset, -1, plog=plog)
    if ts == MAX_TIMESTAMP:
        try:
            found = plog.offset_of_max_timestamp()
        except se.StorageError as exc:
            return _read_failed(plog, index, exc)
        if found is None:
            return _resp(index, 0, -1, -1)
        return _resp(index, 0, found[0], found[1], plog=plog)
    if ts in (LATEST_TIERED, EARLIEST_PENDING_UPLOAD):
        return _resp(index, 0, -1, -1)
    if ts < 0:
        return _resp(index, ErrorCode.INVALID_REQUEST)
    started = perf_counter() if metrics is not None else 0.0
    try:
        found = plog.offset_for_timestamp(ts)
    except se.StorageError as exc:
        return _read_failed(plog, index, exc)
    if metrics is not None:  # time-index lookups: count and latency
        metrics.time_index_lookup(perf_counter() - started)
    if found is None or found[0] >= fetchable:
        return _resp(index, 0, -1, -1)
    return _resp(index, 0, found[0], found[1], plog=plog)


def _read_failed(plog, index, exc):
    """A batch the search had to read is malformed (stored before the produce path
    walked every record, or damaged behind a valid CRC): the partition answers the
    error code (CORRUPT_MESSAGE), one log line names the segment and offset."""
    code = error_code_for(exc)
    log.warning("ListOffsets on %s-%d answered %s: %s", plog.topic, plog.partition, ErrorCode(code).name, exc)
    return _resp(index, code)


def _offsets_before(ctx, plog, timestamp, max_num_offsets):
    """Kafka's legacy v0 answer: candidate (offset, mtime) pairs from the segments'
    base offsets and file mtimes plus (log end, now) when the active segment has data;
    return up to ``max_num_offsets`` offsets at or before ``timestamp``, newest first."""
    pairs = [(max(seg.base_offset, plog.log_start_offset), seg.last_modified_ms()) for seg in plog.segments]
    if plog.segments and plog.segments[-1].size > 0:
        pairs.append((plog.log_end_offset, ctx.clock.time_ms()))
    if not pairs:
        return []
    if timestamp == LATEST:
        start = len(pairs) - 1
    elif timestamp == EARLIEST:
        start = 0
    else:
        start = len(pairs) - 1
        while start >= 0 and pairs[start][1] > timestamp:
            start -= 1
    count = min(max_num_offsets, start + 1)
    out = [pairs[start - j][0] for j in range(max(0, count))]
    return sorted(out, reverse=True)
