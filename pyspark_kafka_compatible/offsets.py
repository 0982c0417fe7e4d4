"""Offset resolution and range planning (pure: the broker is reached through a callable).

``list_offsets`` everywhere is ``Callable[[dict[(topic, partition), int]],
dict[(topic, partition), (error_code, offset, timestamp)]]`` - the ListOffsets API:
timestamp -2 earliest, -1 latest, >= 0 the first offset whose timestamp is >= it
(offset -1 when there is none).
"""

from __future__ import annotations

from typing import Callable, Iterable

from pyspark_kafka_compatible.options import EARLIEST, LATEST, KafkaSourceError, OffsetSpec

TP = tuple  # (topic, partition)
ListOffsets = Callable[[dict], dict]


def _check(answers: dict, tps: Iterable[TP], what: str) -> None:
    for tp in tps:
        if tp not in answers:
            raise KafkaSourceError(f"ListOffsets ({what}): no answer for {tp[0]}-{tp[1]}")
        err = answers[tp][0]
        if err:
            raise KafkaSourceError(f"ListOffsets ({what}) for {tp[0]}-{tp[1]} failed: {error_name(err)}")


def error_name(code: int) -> str:
    try:
        from protocol.errors import ErrorCode

        return ErrorCode(code).name
    except Exception:  # noqa: BLE001
        return f"error code {code}"


def _ask(list_offsets: ListOffsets, req: dict, what: str) -> dict[TP, int]:
    if not req:
        return {}
    ans = list_offsets(req)
    _check(ans, req, what)
    return {tp: ans[tp][1] for tp in req}


def resolve(spec: OffsetSpec, tps: list[TP], list_offsets: ListOffsets, *, which: str,
            strategy: str = "error") -> dict[TP, int]:
    """Resolve ``spec`` (``which`` "starting" or "ending") to a concrete offset per
    partition in ``tps``.

    * earliest/latest: the log start offset / the high watermark.
    * offsets JSON: every partition must be given (as Spark requires); -2/-1 resolved.
    * timestamp / by_timestamp: ListOffsets by time.  No offset at or after the
      timestamp: starting + strategy "error" raises naming topic, partition and
      timestamp; starting + "latest", and every ending, resolve to latest.
    """
    tps = sorted(tps)
    if spec.kind == "earliest":
        return _ask(list_offsets, {tp: EARLIEST for tp in tps}, f"{which} earliest")
    if spec.kind == "latest":
        return _ask(list_offsets, {tp: LATEST for tp in tps}, f"{which} latest")
    if spec.kind == "offsets":
        given = {(t, p): off for t, parts in spec.offsets.items() for p, off in parts.items()}
        _same_partitions(given, tps, f"{which}Offsets")
        out = {tp: off for tp, off in given.items() if off >= 0}
        out.update(_ask(list_offsets, {tp: off for tp, off in given.items() if off < 0},
                        f"{which}Offsets -2/-1"))
        return out
    if spec.kind == "timestamp":
        stamps = {tp: spec.timestamp for tp in tps}
        name = f"{which}Timestamp"
    elif spec.kind == "by_timestamp":
        stamps = {(t, p): ts for t, parts in spec.timestamps.items() for p, ts in parts.items()}
        name = f"{which}OffsetsByTimestamp"
        _same_partitions(stamps, tps, name)
    else:  # pragma: no cover
        raise KafkaSourceError(f"unknown offset spec {spec.kind}")
    ans = list_offsets(dict(stamps))
    _check(ans, stamps, name)
    out = {}
    missing = []
    for tp, ts in sorted(stamps.items()):
        off = ans[tp][1]
        if off is None or off < 0:
            missing.append(tp)
        else:
            out[tp] = off
    if missing:
        if which == "starting" and strategy == "error":
            tp = missing[0]
            others = f" (and {len(missing) - 1} more partitions)" if len(missing) > 1 else ""
            raise KafkaSourceError(
                f"{name}: no record with a timestamp >= {stamps[tp]} in topic {tp[0]} "
                f"partition {tp[1]}{others}; set startingOffsetsByTimestampStrategy=latest "
                f"to start from the latest offset instead")
        out.update(_ask(list_offsets, {tp: LATEST for tp in missing}, f"{name} fallback to latest"))
    return out


def _same_partitions(given: dict, tps: list[TP], name: str) -> None:
    want = set(tps)
    have = set(given)
    if have != want:
        extra = sorted(have - want)
        lack = sorted(want - have)
        parts = []
        if lack:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in lack))
        if extra:
            parts.append("not in the subscription or not existing: " + ", ".join(f"{t}-{p}" for t, p in extra))
        raise KafkaSourceError(f"option {name} must name every subscribed partition exactly "
                               f"({'; '.join(parts)})")


def plan_ranges(start: dict[TP, int], end: dict[TP, int], earliest: dict[TP, int],
                latest: dict[TP, int], *, fail_on_data_loss: bool) -> list[tuple[str, int, int, int]]:
    """``[(topic, partition, from, until)]`` for a batch read, checked against the log's
    current bounds.  A start below the log start offset is data loss: an error with
    failOnDataLoss, else the range starts at the log start offset.  An end beyond the
    high watermark: an error with failOnDataLoss, else cut at the high watermark."""
    out = []
    for tp in sorted(start):
        t, p = tp
        s, e = start[tp], end[tp]
        lo, hi = earliest.get(tp, 0), latest.get(tp, e)
        if s < lo:
            if fail_on_data_loss:
                raise KafkaSourceError(
                    f"{t}-{p}: starting offset {s} is before the log start offset {lo} (records "
                    f"deleted?); set failOnDataLoss=false to read from {lo}")
            s = lo
        if e > hi:
            if fail_on_data_loss:
                raise KafkaSourceError(
                    f"{t}-{p}: ending offset {e} is beyond the latest offset {hi}; "
                    f"set failOnDataLoss=false to stop at {hi}")
            e = hi
        if s > e:
            if fail_on_data_loss or start[tp] > end[tp]:
                raise KafkaSourceError(f"{t}-{p}: starting offset {start[tp]} is after the ending offset {end[tp]}")
            s = e
        out.append((t, p, s, e))
    return out


def split_ranges(ranges: list[tuple[str, int, int, int]], min_partitions: int | None
                 ) -> list[tuple[str, int, int, int]]:
    """Spark's KafkaOffsetRangeCalculator: with minPartitions above the number of
    ranges, each range becomes ``max(round(size / total * minPartitions), 1)`` parts of
    (nearly) equal size; empty ranges are dropped."""
    ranges = [r for r in ranges if r[3] > r[2]]
    if not min_partitions or min_partitions <= len(ranges):
        return ranges
    total = sum(r[3] - r[2] for r in ranges)
    out = []
    for t, p, s, e in ranges:
        size = e - s
        parts = max(int(size / total * min_partitions + 0.5), 1)
        parts = min(parts, size)
        step, rem = divmod(size, parts)
        cur = s
        for i in range(parts):
            nxt = cur + step + (1 if i < rem else 0)
            out.append((t, p, cur, nxt))
            cur = nxt
    return out


def delay_batch(available: int, min_rows: int, now_ms: int, last_trigger_ms: int,
                max_trigger_delay_ms: int) -> bool:
    """Spark's minOffsetsPerTrigger with maxTriggerDelay (KafkaMicroBatchStream.delayBatch):
    hold the next micro-batch while fewer than ``min_rows`` offsets are available, unless
    ``max_trigger_delay_ms`` have passed since the last batch was released."""
    if now_ms - last_trigger_ms >= max_trigger_delay_ms:
        return False
    return available < min_rows


def rate_limit(start: dict[TP, int], latest: dict[TP, int], max_rows: int | None) -> dict[TP, int]:
    """Spark's maxOffsetsPerTrigger: at most ``max_rows`` offsets over all partitions,
    shared in proportion to each partition's backlog (a share below 1 rounds up)."""
    if max_rows is None:
        return dict(latest)
    sizes = {tp: max(latest[tp] - start.get(tp, latest[tp]), 0) for tp in latest}
    total = sum(sizes.values())
    if total <= max_rows:
        return dict(latest)
    out = {}
    for tp, end in latest.items():
        size = sizes[tp]
        if size == 0:
            out[tp] = end
            continue
        share = max_rows * size / total
        take = int(-(-share // 1)) if share < 1 else int(share)
        out[tp] = min(start.get(tp, end) + take, end)
    return out


def to_spark_json(offsets: dict[TP, int]) -> dict[str, dict[str, int]]:
    """``{(t, p): off}`` -> Spark's checkpoint shape ``{"t": {"p": off}}``."""
    out: dict[str, dict[str, int]] = {}
    for (t, p), off in sorted(offsets.items()):
        out.setdefault(t, {})[str(p)] = int(off)
    return out


def from_spark_json(obj: dict) -> dict[TP, int]:
    return {(t, int(p)): int(off) for t, parts in obj.items() for p, off in parts.items()}
