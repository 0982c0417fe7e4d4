"""``server.properties`` parsing and Kafka ``ConfigDef``-style typed values.

Two independent pieces live here because both ``broker_config`` and ``topic_config``
need them and ``config/`` imports nothing else of ours:

* :func:`parse_properties` / :func:`load_properties`: the ``java.util.Properties.load``
  text format (``#``/``!`` comment lines, ``=``/``:``/whitespace separators, backslash
  line continuation, ``\\t \\n \\r \\f \\uXXXX`` escapes, any other escaped character
  stands for itself, the last duplicate key wins).
* :class:`ConfigError` and the typed-value parsing/validation rules of Kafka's
  ``ConfigDef`` (``parse_value``, :class:`Range`, :class:`ValidString`, ...).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

__all__ = [
    "ConfigError",
    "parse_properties",
    "load_properties",
    "ConfigType",
    "ConfigKey",
    "Range",
    "ValidString",
    "ValidList",
    "parse_value",
    "value_to_string",
    "java_trim",
    "INT_MIN",
    "INT_MAX",
    "LONG_MIN",
    "LONG_MAX",
]

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
LONG_MIN, LONG_MAX = -(2**63), 2**63 - 1


class ConfigError(Exception):
    """An invalid configuration value (or an unknown topic property).

    ``str()`` is one line naming the property, the value and the violated rule, in the
    shape of Kafka's ``ConfigException``: ``Invalid value X for configuration NAME: RULE``.
    """

    def __init__(self, name: str, value: Any, rule: str) -> None:
        self.name = name
        self.value = value
        self.rule = rule
        super().__init__(name, value, rule)

    def __str__(self) -> str:
        value = "null" if self.value is None else _one_line(_display(self.value))
        return f"Invalid value {value} for configuration {_one_line(str(self.name))}: {_one_line(str(self.rule))}"


def _display(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    return str(value)


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


# --------------------------------------------------------------------------------------
# java.util.Properties text format
# --------------------------------------------------------------------------------------

_WS = " \t\f"
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def _logical_lines(text: str) -> Iterable[str]:
    """Yield logical lines (continuations joined, escapes still raw), skipping blank and
    comment lines, exactly as Properties.LineReader does."""
    lines = re.split(r"\r\n|\r|\n", text)
    i = 0
    n = len(lines)
    while i < n:
        line = lines[i].lstrip(_WS)
        i += 1
        if not line or line[0] in "#!":
            continue  # a comment line never continues, even if it ends with a backslash
        parts = []
        while True:
            trailing = len(line) - len(line.rstrip("\\"))
            if trailing % 2 == 1:  # odd number of backslashes: continuation
                parts.append(line[:-1])
                if i >= n:  # backslash at end of input: dropped
                    break
                line = lines[i].lstrip(_WS)
                i += 1
                continue
            parts.append(line)
            break
        yield "".join(parts)


def _unescape(raw: str, where: str) -> str:
    out = []
    i = 0
    n = len(raw)
    while i < n:
        c = raw[i]
        i += 1
        if c != "\\":
            out.append(c)
            continue
        if i >= n:
            break
        c = raw[i]
        i += 1
        if c == "u":
            hexdigits = raw[i : i + 4]
            if len(hexdigits) != 4 or not all(h in "0123456789abcdefABCDEF" for h in hexdigits):
                raise ConfigError(where, "\\u" + hexdigits, "Malformed \\uxxxx encoding")
            out.append(chr(int(hexdigits, 16)))
            i += 4
        else:
            out.append(_ESCAPES.get(c, c))
    return "".join(out)


def _split_key_value(line: str) -> tuple[str, str]:
    n = len(line)
    key_end = n
    value_start = n
    has_sep = False
    backslash = False
    i = 0
    while i < n:
        c = line[i]
        if (c == "=" or c == ":") and not backslash:
            key_end = i
            value_start = i + 1
            has_sep = True
            break
        if c in _WS and not backslash:
            key_end = i
            value_start = i + 1
            break
        backslash = (not backslash) if c == "\\" else False
        i += 1
    while value_start < n:
        c = line[value_start]
        if c in _WS:
            value_start += 1
            continue
        if not has_sep and (c == "=" or c == ":"):
            has_sep = True
            value_start += 1
            continue
        break
    return line[:key_end], line[value_start:]


def parse_properties(text: str, source: str = "<properties>") -> dict[str, str]:
    """Parse ``java.util.Properties`` text into an insertion-ordered dict."""
    if text.startswith("\ufeff"):
        text = text[1:]
    props: dict[str, str] = {}
    for line in _logical_lines(text):
        raw_key, raw_value = _split_key_value(line)
        key = _unescape(raw_key, source)
        value = _unescape(raw_value, key or source)
        props.pop(key, None)  # keep the position of the last occurrence
        props[key] = value
    return props


def load_properties(path: str) -> dict[str, str]:
    """Read a properties file (UTF-8; Latin-1 if it does not decode as UTF-8)."""
    with open(path, "rb") as fh:
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = data.decode("latin-1")
    return parse_properties(text, source=path)


# --------------------------------------------------------------------------------------
# ConfigDef-style types and validators
# --------------------------------------------------------------------------------------


class ConfigType:
    BOOLEAN = "BOOLEAN"
    STRING = "STRING"
    SHORT = "SHORT"
    INT = "INT"
    LONG = "LONG"
    DOUBLE = "DOUBLE"
    LIST = "LIST"
    PASSWORD = "PASSWORD"  # a STRING never shown: describe answers null, errors say [hidden]


def java_trim(s: str) -> str:
    """String.trim(): strips code points <= U+0020 from both ends."""
    start, end = 0, len(s)
    while start < end and ord(s[start]) <= 32:
        start += 1
    while end > start and ord(s[end - 1]) <= 32:
        end -= 1
    return s[start:end]


_INT_RE = re.compile(r"[+-]?[0-9]+\Z")
_DOUBLE_RE = re.compile(
    r"[+-]?(NaN|Infinity|((\d+\.?\d*|\.\d+)([eE][+-]?\d+)?)[fFdD]?)\Z"
)
_COMMA_WS = re.compile(r"\s*,\s*")


def _parse_integer(name: str, raw: str, lo: int, hi: int, type_name: str) -> int:
    if not _INT_RE.match(raw):
        raise ConfigError(name, raw, f"Not a number of type {type_name}")
    v = int(raw)
    if not lo <= v <= hi:
        raise ConfigError(name, raw, f"Not a number of type {type_name}")
    return v


def parse_value(name: str, value: Any, type_: str) -> Any:
    """Coerce a string (or an already typed python value) as ConfigDef.parseType does."""
    if value is None:
        return None
    if isinstance(value, str):
        trimmed = java_trim(value)
        if type_ == ConfigType.BOOLEAN:
            low = trimmed.lower()
            if low == "true":
                return True
            if low == "false":
                return False
            raise ConfigError(name, value, "Expected value to be either true or false")
        if type_ == ConfigType.STRING:
            return trimmed
        if type_ == ConfigType.PASSWORD:
            return value  # ConfigDef keeps a Password untrimmed
        if type_ == ConfigType.INT:
            return _parse_integer(name, trimmed, INT_MIN, INT_MAX, "INT")
        if type_ == ConfigType.SHORT:
            return _parse_integer(name, trimmed, -32768, 32767, "SHORT")
        if type_ == ConfigType.LONG:
            return _parse_integer(name, trimmed, LONG_MIN, LONG_MAX, "LONG")
        if type_ == ConfigType.DOUBLE:
            if not _DOUBLE_RE.match(trimmed):
                raise ConfigError(name, value, "Not a number of type DOUBLE")
            t = trimmed.rstrip("fFdD") if not trimmed.endswith("Infinity") else trimmed
            return float(t.replace("Infinity", "inf"))
        if type_ == ConfigType.LIST:
            if not trimmed:
                return []
            return _COMMA_WS.split(trimmed)
        raise AssertionError(type_)
    # Typed python values (programmatic construction).
    if type_ == ConfigType.BOOLEAN:
        if isinstance(value, bool):
            return value
        raise ConfigError(name, value, "Expected value to be either true or false")
    if type_ in (ConfigType.INT, ConfigType.LONG, ConfigType.SHORT):
        bits = {ConfigType.SHORT: 16, ConfigType.INT: 32, ConfigType.LONG: 64}[type_]
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(name, value, f"Expected value to be a {bits}-bit integer")
        lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
        if not lo <= value <= hi:
            raise ConfigError(name, value, f"Not a number of type {type_}")
        return value
    if type_ == ConfigType.DOUBLE:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(name, value, "Expected value to be a double")
        return float(value)
    if type_ == ConfigType.LIST:
        if isinstance(value, (list, tuple)):
            return [str(v) for v in value]
        raise ConfigError(name, value, "Expected a comma separated list.")
    if type_ in (ConfigType.STRING, ConfigType.PASSWORD):
        raise ConfigError(name, "[hidden]" if type_ == ConfigType.PASSWORD else value,
                          "Expected value to be a string")
    raise AssertionError(type_)


def _java_double(v: float) -> str:
    if math.isnan(v):
        return "NaN"
    if math.isinf(v):
        return "Infinity" if v > 0 else "-Infinity"
    if v == 0 or 1e-3 <= abs(v) < 1e7:
        r = repr(float(v))
        return r if "e" not in r else format(v, "f")
    mantissa, exp = f"{v:.16e}".split("e")
    mantissa = repr(float(mantissa))
    return f"{mantissa}E{int(exp)}"


def value_to_string(value: Any, type_: str | None = None) -> str | None:
    """ConfigDef.convertToString: the value as Kafka would print it (None stays None)."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return ",".join(str(v) for v in value)
    if isinstance(value, float) or type_ == ConfigType.DOUBLE:
        return _java_double(float(value))
    return str(value)


@dataclass(frozen=True)
class Range:
    min: float | None = None
    max: float | None = None

    def __call__(self, name: str, value: Any) -> None:
        if value is None:
            raise ConfigError(name, None, "Value must be non-null")
        if self.min is not None and value < self.min:
            raise ConfigError(name, value, f"Value must be at least {self.min}")
        if self.max is not None and value > self.max:
            raise ConfigError(name, value, f"Value must be no more than {self.max}")

    def __str__(self) -> str:
        if self.min is None and self.max is None:
            return "[...]"
        if self.min is None:
            return f"[...,{self.max}]"
        if self.max is None:
            return f"[{self.min},...]"
        return f"[{self.min},...,{self.max}]"

    @staticmethod
    def at_least(n: float) -> "Range":
        return Range(n, None)

    @staticmethod
    def between(lo: float, hi: float) -> "Range":
        return Range(lo, hi)


@dataclass(frozen=True)
class ValidString:
    valid: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        if value not in self.valid:
            raise ConfigError(name, value, "String must be one of: " + ", ".join(self.valid))

    def __str__(self) -> str:
        return "[" + ", ".join(self.valid) + "]"


@dataclass(frozen=True)
class ValidList:
    valid: tuple[str, ...]

    def __call__(self, name: str, value: Any) -> None:
        for item in value:
            if item not in self.valid:
                raise ConfigError(name, item, "String must be one of: " + ", ".join(self.valid))

    def __str__(self) -> str:
        return "[" + ", ".join(self.valid) + "]"


Validator = Callable[[str, Any], None]


@dataclass(frozen=True)
class ConfigKey:
    """One property: Kafka name, ConfigDef type, default (already typed) and validator.
    ``attr`` is the python attribute name (dots and dashes become underscores)."""

    name: str
    type: str
    default: Any
    validator: Validator | None = None
    doc: str = ""
    attr: str = field(default="")

    def __post_init__(self) -> None:
        if not self.attr:
            object.__setattr__(self, "attr", self.name.replace(".", "_").replace("-", "_"))

    def parse(self, value: Any) -> Any:
        """Coerce and validate; a None value is allowed only when the default is None."""
        v = parse_value(self.name, value, self.type)
        if v is None:
            if self.default is None:
                return None
            raise ConfigError(self.name, None, "Value must be non-null")
        if self.validator is not None:
            try:
                self.validator(self.name, v)
            except ConfigError as exc:
                if self.type == ConfigType.PASSWORD:  # never echo a secret
                    raise ConfigError(exc.name, "[hidden]", exc.rule) from None
                raise
        return v
