"""Loading and modelling Kafka's JSON message definitions (``protocol/schemas/*.json``).

Sans-IO except for reading the vendored schema files.  The model is deliberately small:

* :class:`Versions` - a version range (``"0+"``, ``"3-5"``, ``"7"``, ``"none"``).
* :class:`FieldSpec` - one field of a struct (type, version ranges, tag, default, nested
  struct for struct/struct-array fields).
* :class:`StructSpec` - a named struct (the message itself, an inline struct or a
  ``commonStructs`` entry).
* :class:`MessageSpec` - one JSON file (request, response, header or data).

Python attribute names are :func:`snake_case` of the JSON field names.
"""

from __future__ import annotations

import json
import os
import re
import threading
import uuid
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

__all__ = [
    "SCHEMA_DIR",
    "Versions",
    "FieldSpec",
    "StructSpec",
    "MessageSpec",
    "SchemaError",
    "strip_comments",
    "snake_case",
    "load_message",
    "all_messages",
    "message_names",
    "PRIMITIVE_TYPES",
    "FIXED_FORMATS",
]

SCHEMA_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "schemas")

#: primitive type -> struct format character (fixed width types only)
FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}
PRIMITIVE_TYPES = frozenset(FIXED_FORMATS) | {"string", "bytes", "records", "uuid"}

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

ZERO_UUID = uuid.UUID(int=0)

# Python attribute names that differ from the generic snake_case rule.  DESIGN.md names
# the request header attributes ``api_key``/``api_version``.
NAME_OVERRIDES = {
    ("RequestHeader", "RequestApiKey"): "api_key",
    ("RequestHeader", "RequestApiVersion"): "api_version",
}


class SchemaError(ValueError):
    """A schema file is malformed or uses something this codec does not understand."""


# ---------------------------------------------------------------------------------------
# Comments and names


def strip_comments(text: str) -> str:
    """Remove ``//`` line comments, leaving ``//`` inside JSON strings alone.

    A small scanner tracks whether we are inside a string (honouring backslash
    escapes), so a URL such as ``"http://x"`` in an ``about`` text survives.
    """
    out = []
    i = 0
    n = len(text)
    in_str = False
    start = 0
    while i < n:
        c = text[i]
        if in_str:
            if c == "\\":
                i += 2
                continue
            if c == '"':
                in_str = False
        elif c == '"':
            in_str = True
        elif c == "/" and i + 1 < n and text[i + 1] == "/":
            out.append(text[start:i])
            j = text.find("\n", i)
            if j < 0:
                i = start = n
                break
            i = start = j  # keep the newline so line numbers stay right
            continue
        i += 1
    out.append(text[start:])
    return "".join(out)


_SNAKE_1 = re.compile(r"([A-Z]+)([A-Z][a-z])")
_SNAKE_2 = re.compile(r"([a-z0-9])([A-Z])")


def snake_case(name: str) -> str:
    """JSON field name -> Python attribute name.

    Rule: an underscore goes (1) between a lower-case letter or digit and a following
    capital, and (2) before the last capital of a run of capitals that is followed by a
    lower-case letter (the end of an acronym); then everything is lower-cased::

        ThrottleTimeMs -> throttle_time_ms      ProducerId -> producer_id
        IsInternal     -> is_internal           ClusterId  -> cluster_id
        KRaftVersion   -> k_raft_version        isKRaftController -> is_k_raft_controller
        validateOnly   -> validate_only         TopicID (hypothetical) -> topic_id
        HTTPServer (hypothetical) -> http_server

    For every name in the vendored schemas this gives the same result as kafka-python's
    rule (underscore before every capital), since no name has a run of three or more
    capitals.
    """
    s = _SNAKE_1.sub(r"\1_\2", name)
    s = _SNAKE_2.sub(r"\1_\2", s)
    return s.lower()


# ---------------------------------------------------------------------------------------
# Versions


@dataclass(frozen=True, slots=True)
class Versions:
    """Inclusive version range; ``lo > hi`` means empty ("none")."""

    lo: int
    hi: int

    NONE_HI = -1
    OPEN_HI = 0x7FFF

    @classmethod
    def parse(cls, spec: Any) -> "Versions":
        if spec is None:
            return cls(0, -1)
        if isinstance(spec, int):
            return cls(spec, spec)
        s = str(spec).strip()
        if s == "none" or s == "":
            return cls(0, -1)
        if s.endswith("+"):
            return cls(int(s[:-1]), cls.OPEN_HI)
        if "-" in s:
            a, b = s.split("-", 1)
            return cls(int(a), int(b))
        v = int(s)
        return cls(v, v)

    def __contains__(self, v: int) -> bool:
        return self.lo <= v <= self.hi

    @property
    def empty(self) -> bool:
        return self.lo > self.hi

    def intersect(self, other: "Versions") -> "Versions":
        return Versions(max(self.lo, other.lo), min(self.hi, other.hi))

    def __iter__(self):
        return iter(range(self.lo, self.hi + 1))

    def __str__(self) -> str:
        if self.empty:
            return "none"
        if self.hi >= self.OPEN_HI:
            return f"{self.lo}+"
        if self.lo == self.hi:
            return str(self.lo)
        return f"{self.lo}-{self.hi}"


NO_VERSIONS = Versions(0, -1)


# ---------------------------------------------------------------------------------------
# Fields and structs


@dataclass(eq=False)
class FieldSpec:
    name: str  # JSON name
    py_name: str  # python attribute name
    type: str  # JSON type string, e.g. "int32", "[]string", "[]Foo", "Foo"
    versions: Versions
    nullable_versions: Versions = NO_VERSIONS
    tagged_versions: Versions = NO_VERSIONS
    tag: int | None = None
    ignorable: bool = False
    flexible_versions: Versions | None = None  # field-level override ("none" for ClientId)
    map_key: bool = False
    zero_copy: bool = False
    about: str = ""
    raw_default: Any = None
    # derived
    is_array: bool = False
    elem_type: str = ""  # element type for arrays, else == type
    struct: "StructSpec | None" = None  # for struct and struct-array fields
    default: Any = None  # python default (None for arrays -> [] unless default null)

    @property
    def is_struct(self) -> bool:
        return self.struct is not None

    def present_in(self, v: int) -> bool:
        return v in self.versions

    def tagged_in(self, v: int) -> bool:
        return self.tag is not None and v in self.tagged_versions and v in self.versions

    def nullable_in(self, v: int) -> bool:
        return v in self.nullable_versions

    @property
    def default_is_null(self) -> bool:
        return self.raw_default == "null"


@dataclass(eq=False)
class StructSpec:
    name: str
    fields: list[FieldSpec]
    versions: Versions = field(default_factory=lambda: Versions(0, Versions.OPEN_HI))
    is_common: bool = False


@dataclass(eq=False)
class MessageSpec:
    name: str
    type: str  # request | response | header | data | metadata ...
    api_key: int | None
    valid_versions: Versions
    flexible_versions: Versions
    struct: StructSpec  # top-level fields (name == message name)
    structs: dict[str, StructSpec]  # every nested struct by JSON type name
    common_structs: list[str]
    deprecated_versions: Versions = NO_VERSIONS
    latest_version_unstable: bool = False
    listeners: list[str] = field(default_factory=list)
    json: dict = field(default_factory=dict, repr=False)

    @property
    def fields(self) -> list[FieldSpec]:
        return self.struct.fields

    def is_flexible(self, version: int) -> bool:
        return version in self.flexible_versions


# ---------------------------------------------------------------------------------------
# Defaults


def _parse_int(raw: Any, typ: str, where: str) -> int:
    if isinstance(raw, bool):
        raise SchemaError(f"{where}: bad default {raw!r} for {typ}")
    if isinstance(raw, int):
        v = raw
    else:
        s = str(raw).strip()
        neg = s.startswith("-")
        body = s[1:] if neg else s
        try:
            if body.lower().startswith("0x"):
                v = int(body, 16)
            elif len(body) > 1 and body.startswith("0"):
                v = int(body, 8)  # Kafka allows octal with a leading 0
            else:
                v = int(body, 10)
        except ValueError:
            raise SchemaError(f"{where}: bad default {raw!r} for {typ}") from None
        if neg:
            v = -v
    lo, hi = _INT_RANGES[typ]
    if not lo <= v <= hi:
        raise SchemaError(f"{where}: default {raw!r} out of range for {typ}")
    return v


def _compute_default(f: FieldSpec, where: str) -> Any:
    raw = f.raw_default
    t = f.type
    if f.is_array:
        if raw is not None and raw != "null":
            raise SchemaError(f"{where}: arrays only take a null default")
        return None  # marker; codegen turns non-null array defaults into []
    if f.is_struct:
        if raw is not None and raw != "null":
            raise SchemaError(f"{where}: structs only take a null default")
        return None
    if raw is None:
        if t in _INT_RANGES:
            return 0
        return {
            "bool": False,
            "float64": 0.0,
            "string": "",
            "bytes": b"",
            "records": None,
            "uuid": ZERO_UUID,
        }[t]
    if t in _INT_RANGES:
        return _parse_int(raw, t, where)
    if t == "bool":
        if isinstance(raw, bool):
            return raw
        s = str(raw).strip().lower()
        if s in ("true", "false"):
            return s == "true"
        raise SchemaError(f"{where}: bad bool default {raw!r}")
    if t == "float64":
        return float(raw)
    if t == "string":
        return None if raw == "null" else str(raw)
    if t in ("bytes", "records"):
        if raw == "null":
            return None
        raise SchemaError(f"{where}: {t} only takes a null default")
    if t == "uuid":
        if raw in ("", None):
            return ZERO_UUID
        return uuid.UUID(str(raw))
    raise SchemaError(f"{where}: default for unsupported type {t}")


# ---------------------------------------------------------------------------------------
# Parsing


def _parse_fields(
    msg_name: str,
    struct_name: str,
    raw_fields: list[dict],
    structs: dict[str, StructSpec],
    common: dict[str, dict],
    pending_common: dict[str, StructSpec],
) -> list[FieldSpec]:
    out: list[FieldSpec] = []
    seen_names: set[str] = set()
    for rf in raw_fields:
        name = rf["name"]
        where = f"{msg_name}.{struct_name}.{name}"
        typ = rf["type"]
        py_name = NAME_OVERRIDES.get((msg_name, name)) or snake_case(name)
        if py_name in seen_names:
            raise SchemaError(f"{where}: duplicate attribute name {py_name}")
        seen_names.add(py_name)
        is_array = typ.startswith("[]")
        elem = typ[2:] if is_array else typ
        f = FieldSpec(
            name=name,
            py_name=py_name,
            type=typ,
            versions=Versions.parse(rf.get("versions")),
            nullable_versions=Versions.parse(rf.get("nullableVersions", "none")),
            tagged_versions=Versions.parse(rf.get("taggedVersions", "none")),
            tag=None if rf.get("tag") is None else int(rf["tag"]),  # one schema writes "0"
            ignorable=bool(rf.get("ignorable", False)),
            flexible_versions=(
                Versions.parse(rf["flexibleVersions"]) if "flexibleVersions" in rf else None
            ),
            map_key=bool(rf.get("mapKey", False)),
            zero_copy=bool(rf.get("zeroCopy", False)),
            about=rf.get("about", ""),
            # a JSON null default (one group-coordinator schema writes it so) means "null"
            raw_default="null" if "default" in rf and rf["default"] is None else rf.get("default"),
            is_array=is_array,
            elem_type=elem,
        )
        if f.tag is not None and "taggedVersions" not in rf:
            raise SchemaError(f"{where}: tag without taggedVersions")
        if elem not in PRIMITIVE_TYPES:
            if not elem[:1].isupper():
                raise SchemaError(f"{where}: unknown type {typ}")
            if "fields" in rf:
                if elem in structs:
                    raise SchemaError(f"{where}: struct {elem} defined twice")
                sub = StructSpec(elem, [])
                structs[elem] = sub
                sub.fields = _parse_fields(
                    msg_name, elem, rf["fields"], structs, common, pending_common
                )
                f.struct = sub
            elif elem in structs:
                f.struct = structs[elem]
            elif elem in common:
                sub = pending_common.get(elem)
                if sub is None:
                    sub = StructSpec(elem, [], Versions.parse(common[elem].get("versions", "0+")), True)
                    pending_common[elem] = sub
                    structs[elem] = sub
                    sub.fields = _parse_fields(
                        msg_name, elem, common[elem]["fields"], structs, common, pending_common
                    )
                f.struct = sub
            else:
                raise SchemaError(f"{where}: unknown struct type {elem}")
        elif "fields" in rf:
            raise SchemaError(f"{where}: primitive type {typ} with fields")
        if elem == "records" and is_array:
            raise SchemaError(f"{where}: arrays of records are not supported")
        f.default = _compute_default(f, where)
        out.append(f)
    return out


def parse_message(text: str) -> MessageSpec:
    d = json.loads(strip_comments(text))
    name = d["name"]
    common = {c["name"]: c for c in d.get("commonStructs", [])}
    structs: dict[str, StructSpec] = {}
    pending: dict[str, StructSpec] = {}
    top = StructSpec(name, [])
    top.fields = _parse_fields(name, name, d.get("fields", []), structs, common, pending)
    # common structs that are declared but unused still get a class
    for cname, c in common.items():
        if cname not in pending:
            sub = StructSpec(cname, [], Versions.parse(c.get("versions", "0+")), True)
            pending[cname] = sub
            structs[cname] = sub
            sub.fields = _parse_fields(name, cname, c["fields"], structs, common, pending)
    return MessageSpec(
        name=name,
        type=d.get("type", "data"),
        api_key=d.get("apiKey"),
        valid_versions=Versions.parse(d.get("validVersions")),
        flexible_versions=Versions.parse(d.get("flexibleVersions", "none")),
        struct=top,
        structs=structs,
        common_structs=list(common),
        deprecated_versions=Versions.parse(d.get("deprecatedVersions", "none")),
        latest_version_unstable=bool(d.get("latestVersionUnstable", False)),
        listeners=list(d.get("listeners", [])),
        json=d,
    )


_lock = threading.Lock()


@lru_cache(maxsize=None)
def _load_cached(schema_dir: str, name: str) -> MessageSpec:
    path = os.path.join(schema_dir, name + ".json")
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except FileNotFoundError:
        raise KeyError(f"no schema named {name!r}") from None
    spec = parse_message(text)
    if spec.name != name:
        raise SchemaError(f"{path}: name {spec.name!r} does not match the file name")
    return spec


def load_message(name: str, schema_dir: str = SCHEMA_DIR) -> MessageSpec:
    """The parsed schema ``<schema_dir>/<name>.json`` (cached)."""
    spec = _fast_cache.get((schema_dir, name))
    if spec is None:
        with _lock:
            spec = _fast_cache[(schema_dir, name)] = _load_cached(schema_dir, name)
    return spec


_fast_cache: dict[tuple[str, str], MessageSpec] = {}


@lru_cache(maxsize=None)
def message_names(schema_dir: str = SCHEMA_DIR) -> tuple[str, ...]:
    return tuple(
        sorted(fn[:-5] for fn in os.listdir(schema_dir) if fn.endswith(".json"))
    )


def all_messages(schema_dir: str = SCHEMA_DIR) -> dict[str, MessageSpec]:
    return {n: load_message(n, schema_dir) for n in message_names(schema_dir)}
