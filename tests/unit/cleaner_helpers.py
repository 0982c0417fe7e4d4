"""Helpers for the log cleaner tests: a LogManager over a real BrokerConfig and a manual
clock, appends of keyed records, and read-backs of what a log holds."""

from __future__ import annotations

from protocol import records as R
from storage.clock import ManualClock
from storage.log_cleaner import LogCleaner
from storage.log_manager import LogManager

from config import load_broker_config

START_MS = 1_700_000_000_000


def broker_config(tmp_path, **props):
    overrides = [f"log.dirs={tmp_path}"] + [f"{k.replace('_', '.')}={v}" for k, v in props.items()]
    return load_broker_config(None, overrides, env={}, warn=False)


def make_lm(tmp_path, clock=None, **props):
    clock = clock or ManualClock(START_MS)
    cfg = broker_config(tmp_path, **props)
    lm = LogManager(cfg, clock)
    lm.startup()
    return lm, cfg, clock


def compact_topic(lm, name="t", partitions=1, **configs):
    cfg = {"cleanup.policy": "compact", "segment.bytes": "4000", "min.cleanable.dirty.ratio": "0.01",
           "delete.retention.ms": "1000", "file.delete.delay.ms": "0"}
    cfg.update({k.replace("_", "."): str(v) for k, v in configs.items()})
    lm.create_topic(name, partitions, cfg)
    return lm.get_log(name, 0)


def cleaner(lm, cfg, clock, compiled=True, **kw):
    return LogCleaner(lm, cfg, clock, inline=True, compiled=compiled, **kw)


def append(log, clock, records, *, compression=0, step_ms=1, **batch_kw):
    """Append one batch of ``(key, value[, timestamp[, headers]])`` records; each record
    without a timestamp gets the clock's time, which then moves ``step_ms``."""
    items = []
    for r in records:
        key, value = r[0], r[1]
        ts = r[2] if len(r) > 2 and r[2] is not None else clock.time_ms()
        headers = r[3] if len(r) > 3 else ()
        items.append((ts, key, value, list(headers)))
        clock.advance(step_ms)
    return log.append(R.build_batch(items, compression=compression, **batch_kw))


def read_all(log):
    """Every record in the log: (offset, timestamp, key, value, headers)."""
    out = []
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        for pos, h in R.iter_batches(data):
            if h.is_control:
                continue
            for r in R.iter_records(data, pos, h):
                out.append((r.offset, r.timestamp, r.key, r.value, tuple(r.headers)))
    return out


def batches(log):
    """Every batch header in the log, in order."""
    out = []
    for seg in log.segments:
        data = seg.read_bytes(0, seg.size)
        out += [h for _pos, h in R.iter_batches(data)]
    return out


def full_scan_offset_for_time(records, target, log_start=0):
    """The first record at or after the log start whose timestamp >= target."""
    for off, ts, *_ in records:
        if off >= log_start and ts >= target:
            return off, ts
    return None
