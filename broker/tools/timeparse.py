"""Parsing of the tools' time arguments: ISO-8601 datetimes, ISO-8601 durations, --time."""

from __future__ import annotations

import datetime as _dt
import re

from broker.tools import UsageError

_EPOCH = _dt.datetime(1970, 1, 1, tzinfo=_dt.timezone.utc)
_MS = _dt.timedelta(milliseconds=1)

#: ListOffsets special timestamps, by name (as kafka-get-offsets.sh accepts them)
SPECIAL_TIMES = {
    "latest": -1,
    "earliest": -2,
    "max-timestamp": -3,
    "earliest-local": -4,
    "latest-tiered": -5,
}

_DATETIME_RE = re.compile(
    r"^\d{4}-\d{2}-\d{2}"
    r"(?:[T ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d{1,9})?)?)?"
    r"(?:Z|z|[+-]\d{2}(?::?\d{2})?)?$"
)


def parse_datetime(text: str, flag: str = "--to-datetime") -> int:
    """An ISO-8601 date-time to epoch milliseconds.

    Accepts ``2026-11-21T10:00:00Z``, ``2026-11-21T10:00:00.123+01:00``,
    ``2026-11-21T10:00``, ``2026-11-21 10:00:00``, ``2026-11-21`` (midnight). Without a
    zone the local time zone applies, as in Kafka's tools. Fractions beyond milliseconds
    are truncated.
    """
    s = text.strip()
    if not _DATETIME_RE.match(s):
        raise UsageError(f"{flag}: cannot parse {text!r} as an ISO-8601 date-time "
                         f"(e.g. 2026-11-21T10:00:00Z or 2026-11-21T10:00:00.000+01:00)")
    s = s.replace(",", ".")
    if s[-1] in "Zz":
        s = s[:-1] + "+00:00"
    m = re.search(r"([+-])(\d{2})(\d{2})$", s)
    if m and len(s) > 10 and s[-5] in "+-":  # +0100 -> +01:00
        s = s[:-4] + m.group(2) + ":" + m.group(3)
    # fromisoformat takes at most 6 fractional digits in every 3.11 form
    s = re.sub(r"\.(\d{6})\d+", r".\1", s)
    try:
        dt = _dt.datetime.fromisoformat(s)
    except ValueError as exc:
        raise UsageError(f"{flag}: cannot parse {text!r} as an ISO-8601 date-time ({exc})") from None
    if dt.tzinfo is None:
        dt = dt.astimezone()  # local time zone
    return (dt - _EPOCH) // _MS


_DURATION_RE = re.compile(
    r"^([-+]?)P(?:([-+]?\d+)D)?"
    r"(?:T(?:([-+]?\d+)H)?(?:([-+]?\d+)M)?(?:([-+]?\d+)(?:[.,](\d{1,9}))?S)?)?$",
    re.IGNORECASE,
)


def parse_duration(text: str, flag: str = "--by-duration") -> int:
    """A Java ``Duration.parse`` string (``PnDTnHnMn.nS``) to milliseconds (may be
    negative: ``-PT1H``)."""
    s = text.strip()
    m = _DURATION_RE.match(s)
    if not m or s.upper().endswith("T") or all(g is None for g in m.groups()[1:5]):
        raise UsageError(f"{flag}: cannot parse {text!r} as an ISO-8601 duration "
                         f"(PnDTnHnMn.nS, e.g. PT1H30M or P1DT12H)")
    sign, days, hours, minutes, seconds, frac = m.groups()

    def num(x):
        return int(x) if x else 0

    ms = ((num(days) * 24 + num(hours)) * 60 + num(minutes)) * 60_000 + num(seconds) * 1000
    if frac:
        f = int((frac + "000")[:3])
        ms += -f if seconds and seconds.startswith("-") else f
    return -ms if sign == "-" else ms


def parse_time_spec(text: str, flag: str = "--time") -> int:
    """``--time``: -1/latest, -2/earliest, -3/max-timestamp, -4/earliest-local,
    -5/latest-tiered, a timestamp in ms (>= 0) or an ISO-8601 date-time."""
    s = text.strip()
    low = s.lower()
    if low in SPECIAL_TIMES:
        return SPECIAL_TIMES[low]
    if re.fullmatch(r"[-+]?\d+", s):
        v = int(s)
        if v >= 0 or v in SPECIAL_TIMES.values():
            return v
        raise UsageError(f"{flag}: invalid value {text!r}: use -1 or latest, -2 or earliest, -3 or "
                         f"max-timestamp, -4 or earliest-local, -5 or latest-tiered, a timestamp in ms "
                         f"or an ISO-8601 date-time")
    if re.match(r"^\d{4}-\d{2}-\d{2}", s):
        return parse_datetime(s, flag)
    raise UsageError(f"{flag}: invalid value {text!r}: use -1 or latest, -2 or earliest, -3 or "
                     f"max-timestamp, -4 or earliest-local, -5 or latest-tiered, a timestamp in ms "
                     f"or an ISO-8601 date-time")
