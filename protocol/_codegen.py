"""Python source generation for message classes, encoders and decoders.

Everything here is generated from :mod:`protocol.schema` specs and compiled with
``exec`` lazily, on first use, then cached:

* one class per message (plus one nested class per struct type), built by
  :func:`get_class`;
* one decoder and one encoder per (message, version), built by :func:`get_decoder`
  and :func:`get_encoder`.  Nested structs and arrays are inlined into that single
  function (no per-field or per-element function calls); runs of fixed-width fields
  are read/written with one precompiled :class:`struct.Struct`.

With ``protocol/_fastwire.c`` built, :func:`get_decoder` and :func:`get_encoder` return
its compiled runners instead, each driven by a *plan* (:func:`decode_plan`,
:func:`encode_plan`): nested tuples made by the same walk of the same spec, naming each
field's kind, class slot and rules. The generated Python functions stay the reference:
the runners hand them any input they do not accept, so results and errors are theirs
(``tests/unit/test_fastwire.py`` compares the two on every message and version).

Each encoder/decoder also exists in a *traced* variant that records the field being
processed; it is only compiled and run after the fast variant failed, to name the
offending field in the error message (the wire format is deterministic, so the traced
run fails at the same place).

Generated decoder signature: ``decode(buf: memoryview, pos: int, _t) -> (obj, pos)``.
Generated encoder signature: ``encode(obj, out: bytearray, chunks: list, _t) -> out``;
external records objects (anything not bytes-like, e.g. ``storage.FileSlice``) and
large bytes-like records are appended to ``chunks`` as their own element after the
bytes written so far, and the encoder continues in a fresh bytearray which it returns.
"""

from __future__ import annotations

import functools
import struct
import sys
import threading
import uuid
from typing import Any, Callable

from . import schema as _schema
from .schema import FIXED_FORMATS, FieldSpec, MessageSpec, StructSpec, ZERO_UUID

__all__ = [
    "CodecError",
    "DecodeError",
    "EncodeError",
    "KafkaStruct",
    "get_class",
    "get_decoder",
    "get_encoder",
    "decoder_source",
    "encoder_source",
    "INLINE_RECORDS_MAX",
]

#: records values (bytes-like) up to this size are copied into the surrounding chunk;
#: larger ones become their own chunk (no copy) in ``encode_response``.
INLINE_RECORDS_MAX = 64 * 1024


class CodecError(ValueError):
    """Base class of the codec's errors."""


class DecodeError(CodecError):
    """Malformed or truncated input."""


class EncodeError(CodecError):
    """A message cannot be encoded (wrong type, null in a non-nullable field, ...)."""


_MISSING = object()
# the module the generated classes belong to ("protocol.messages"; "chronolog.protocol.messages" installed)
_MESSAGES = __package__ + ".messages"


class KafkaStruct:
    """Base class of every generated message and struct class."""

    __slots__ = ()
    #: python attribute names of the schema fields, in schema order
    _fields: tuple[str, ...] = ()
    #: the schema of this struct (StructSpec) and, for top-level classes, of the message
    _struct_spec: StructSpec | None = None
    SCHEMA: MessageSpec | None = None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        for n in self._fields:
            if getattr(self, n) != getattr(other, n):
                return False
        return (self._unknown_tags or None) == (other._unknown_tags or None)  # type: ignore[attr-defined]

    def __ne__(self, other: object) -> bool:
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        parts = []
        for n in self._fields:
            v = getattr(self, n)
            if isinstance(v, memoryview):
                v = f"<memoryview {v.nbytes} bytes>"
            elif isinstance(v, (bytes, bytearray)) and len(v) > 64:
                v = f"<{type(v).__name__} {len(v)} bytes>"
            elif not isinstance(v, (int, float, str, bytes, bytearray, list, type(None), uuid.UUID, KafkaStruct)):
                try:
                    v = f"<{type(v).__name__} {len(v)} bytes>"
                except TypeError:
                    pass
                parts.append(f"{n}={v}")
                continue
            parts.append(f"{n}={v!r}")
        if getattr(self, "_unknown_tags", None):
            parts.append(f"_unknown_tags={self._unknown_tags!r}")  # type: ignore[attr-defined]
        return f"{type(self).__qualname__}({', '.join(parts)})"

    def to_dict(self) -> dict[str, Any]:
        """A plain dict (nested structs converted too); handy for logs and tests."""

        def conv(v: Any) -> Any:
            if isinstance(v, KafkaStruct):
                return v.to_dict()
            if isinstance(v, list):
                return [conv(x) for x in v]
            return v

        return {n: conv(getattr(self, n)) for n in self._fields}


# ---------------------------------------------------------------------------------------
# Runtime helpers referenced by generated code

_S_b = struct.Struct(">b")
_S_h = struct.Struct(">h")
_S_i = struct.Struct(">i")
_S_I = struct.Struct(">I")


def _uvarint_tail(buf: memoryview, pos: int, first: int) -> tuple[int, int]:
    """Continue an unsigned varint whose first byte (already consumed) was ``first``."""
    value = first & 0x7F
    shift = 7
    while True:
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if not b & 0x80:
            return value, pos
        shift += 7
        if shift > 28:
            raise DecodeError("unsigned varint longer than 5 bytes")


def _uvarint_bytes(value: int) -> bytes:
    if value < 0 or value > 0xFFFFFFFF:
        raise EncodeError(f"unsigned varint out of range: {value}")
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _write_tags(out: bytearray, tags: list) -> None:
    tags.sort(key=_first)
    out += _uvarint_bytes(len(tags))
    last = -1
    for tag, data in tags:
        if tag == last:
            raise EncodeError(f"tagged field {tag} written twice")
        last = tag
        out += _uvarint_bytes(tag)
        out += _uvarint_bytes(len(data))
        out += data


def _first(t: tuple) -> Any:
    return t[0]


_BYTESLIKE = (bytes, bytearray, memoryview)

_RUNTIME: dict[str, Any] = {
    "_new": object.__new__,
    "_UUID": uuid.UUID,
    "_ZERO_UUID": ZERO_UUID,
    "_DE": DecodeError,
    "_EE": EncodeError,
    "_uvt": _uvarint_tail,
    "_uvb": _uvarint_bytes,
    "_write_tags": _write_tags,
    "_unpack_from": struct.unpack_from,
    "_pack": struct.pack,
    "_BYTESLIKE": _BYTESLIKE,
    "_M": _MISSING,
    "_INLINE_MAX": INLINE_RECORDS_MAX,
    "_list": list,
    "_str": str,
    "_bytes": bytes,
    "_len": len,
    "_isinstance": isinstance,
    "_range": range,
}


# ---------------------------------------------------------------------------------------
# Class generation


def _default_expr(f: FieldSpec, consts: "_Consts") -> str:
    """Source expression producing a fresh default value for field ``f``."""
    if f.is_array:
        return "None" if f.default_is_null else "[]"
    if f.is_struct:
        return "None" if f.default_is_null else f"{f.struct.name}()"
    v = f.default
    if isinstance(v, uuid.UUID):
        return "_ZERO_UUID" if v == ZERO_UUID else consts.add(v, "UUID")
    return repr(v)


class _Consts:
    """Module-level constants of a generated source (Struct objects, default instances)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self._by_key: dict[Any, str] = {}

    def add(self, value: Any, prefix: str, key: Any = None) -> str:
        k = (prefix, key if key is not None else repr(value))
        name = self._by_key.get(k)
        if name is None:
            name = f"_{prefix}{len(self.values)}"
            self._by_key[k] = name
            self.values[name] = value
        return name

    def fmt(self, fmt: str) -> str:
        return self.add(struct.Struct(">" + fmt), "S", key=fmt)


def _class_source(spec: MessageSpec, consts: _Consts) -> str:
    lines: list[str] = []
    order = list(spec.structs.values()) + [spec.struct]
    for st in order:
        names = [f.py_name for f in st.fields]
        lines.append(f"class {st.name}(_KafkaStruct):")
        lines.append(f"    __slots__ = {tuple(names + ['_unknown_tags'])!r}")
        lines.append(f"    _fields = {tuple(names)!r}")
        params = []
        body = []
        for f in st.fields:
            d = _default_expr(f, consts)
            if d in ("[]",) or d.endswith("()"):
                params.append(f"{f.py_name}=_M")
                body.append(f"        self.{f.py_name} = {d} if {f.py_name} is _M else {f.py_name}")
            else:
                params.append(f"{f.py_name}={d}")
                body.append(f"        self.{f.py_name} = {f.py_name}")
        params.append("_unknown_tags=None")
        body.append("        self._unknown_tags = _unknown_tags")
        lines.append(f"    def __init__(self, *, {', '.join(params)}):")
        lines.extend(body)
        # the same object without calling the class: a call with keywords to a class
        # packs them into a dict for __init__ (~950 ns for seven), a function takes them
        # as they are (~420 ns); for the handlers' hottest answers (Produce). It also
        # takes them by position, in the order of ``_fields`` (cheaper still)
        lines.append("    @staticmethod")
        lines.append(f"    def _new({', '.join(params)}):")
        lines.append(f"        self = _new({st.name})")
        lines.extend(body)
        lines.append("        return self")
        lines.append("")
    return "\n".join(lines) + "\n"


_class_cache: dict[str, type] = {}
_lock = threading.RLock()


def get_class(name: str) -> type:
    """The generated class for message ``name`` (e.g. ``"ProduceRequest"``)."""
    cls = _class_cache.get(name)
    if cls is not None:
        return cls
    with _lock:
        cls = _class_cache.get(name)
        if cls is not None:
            return cls
        spec = _schema.load_message(name)
        consts = _Consts()
        src = _class_source(spec, consts)
        ns: dict[str, Any] = dict(_RUNTIME)
        ns["_KafkaStruct"] = KafkaStruct
        ns.update(consts.values)
        ns["__name__"] = _MESSAGES
        exec(compile(src, f"<{_MESSAGES}.{name}>", "exec"), ns)
        top = ns[spec.name]
        top.SCHEMA = spec
        top._struct_spec = spec.struct
        top.API_KEY = spec.api_key
        top.MESSAGE_TYPE = spec.type
        top.VALID_VERSIONS = spec.valid_versions
        top.FLEXIBLE_VERSIONS = spec.flexible_versions
        top.__module__ = _MESSAGES
        top.__doc__ = f"Kafka {spec.name} (valid versions {spec.valid_versions}, flexible {spec.flexible_versions})."
        for sname, sspec in spec.structs.items():
            sub = ns[sname]
            sub._struct_spec = sspec
            sub.__module__ = _MESSAGES
            sub.__qualname__ = f"{spec.name}.{sname}"
            setattr(top, sname, sub)
        # each struct class also carries its direct child struct classes, Java-style
        # (ProduceResponse.PartitionProduceResponse.BatchIndexAndErrorMessage)
        for sspec in [spec.struct, *spec.structs.values()]:
            owner = ns[sspec.name]
            for f in sspec.fields:
                if f.struct is not None and f.struct.name != sspec.name:
                    setattr(owner, f.struct.name, ns[f.struct.name])
        if _fastwire is not None:
            _install_compiled_new(spec, ns)
        if name == "RequestHeader":
            top.request_api_key = property(
                lambda self: self.api_key, lambda self, v: setattr(self, "api_key", v)
            )
            top.request_api_version = property(
                lambda self: self.api_version, lambda self, v: setattr(self, "api_version", v)
            )
        _class_cache[name] = top
        return top


# ---------------------------------------------------------------------------------------
# Encoder / decoder generation


class _Gen:
    def __init__(self, spec: MessageSpec, version: int, trace: bool) -> None:
        self.spec = spec
        self.version = version
        self.trace = trace
        self.flexible = spec.is_flexible(version)
        self.lines: list[str] = []
        self.consts = _Consts()
        self.n = 0

    def tmp(self, prefix: str) -> str:
        self.n += 1
        return f"{prefix}{self.n}"

    def emit(self, ind: int, line: str) -> None:
        self.lines.append("    " * ind + line)

    def field_flexible(self, f: FieldSpec) -> bool:
        if not self.flexible:
            return False
        if f.flexible_versions is not None:
            return self.version in f.flexible_versions
        return True

    def mark(self, ind: int, path: str) -> None:
        if self.trace:
            self.emit(ind, f"_t[0] = {path!r}")

    def source(self) -> str:
        return "\n".join(self.lines) + "\n"


# ---- decoding -------------------------------------------------------------------------


class _DecGen(_Gen):
    def build(self) -> str:
        self.emit(0, "def decode(buf, pos, _t=None):")
        self.emit(1, "end = _len(buf)")
        var = self.decode_struct(self.spec.struct, 1, "")
        self.emit(1, f"return {var}, pos")
        return self.source()

    def read_len(self, ind: int, flex: bool, wide: bool) -> str:
        """Emit code reading a length (int16 for strings, int32 otherwise, or compact)."""
        n = self.tmp("n")
        if flex:
            self.read_uvarint(ind, n)
            self.emit(ind, f"{n} -= 1")
        elif wide:
            self.emit(ind, f"{n}, = _S_i.unpack_from(buf, pos)")
            self.emit(ind, "pos += 4")
        else:
            self.emit(ind, f"{n}, = _S_h.unpack_from(buf, pos)")
            self.emit(ind, "pos += 2")
        return n

    def read_uvarint(self, ind: int, var: str) -> None:
        self.emit(ind, f"{var} = buf[pos]")
        self.emit(ind, "pos += 1")
        self.emit(ind, f"if {var} > 127:")
        self.emit(ind + 1, f"{var}, pos = _uvt(buf, pos, {var})")

    def null_check(self, ind: int, n: str, nullable: bool, target: str, what: str) -> None:
        """Emit ``if n < 0: ...`` handling; caller emits the ``else`` body at ind+1."""
        self.emit(ind, f"if {n} < 0:")
        if nullable:
            self.emit(ind + 1, f"if {n} != -1:")
            self.emit(ind + 2, f"raise _DE('invalid {what} length %d' % {n})")
            self.emit(ind + 1, f"{target} = None")
        else:
            self.emit(ind + 1, f"raise _DE('null or negative length %d for non-nullable {what}' % {n})")
        self.emit(ind, "else:")

    def decode_struct(self, st: StructSpec, ind: int, path: str) -> str:
        v = self.version
        var = self.tmp("o")
        self.emit(ind, f"{var} = _new({st.name})")
        regular = [f for f in st.fields if f.present_in(v) and not f.tagged_in(v)]
        tagged = [f for f in st.fields if f.tagged_in(v)]
        absent = [f for f in st.fields if not f.present_in(v) or f.tagged_in(v)]
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED_FORMATS:
                j = i
                while j < len(regular) and regular[j].type in FIXED_FORMATS:
                    j += 1
                group = regular[i:j]
                fmt = "".join(FIXED_FORMATS[g.type] for g in group)
                s = self.consts.fmt(fmt)
                self.mark(ind, path + "/".join(g.py_name for g in group))
                targets = ", ".join(f"{var}.{g.py_name}" for g in group)
                self.emit(ind, f"{targets}, = {s}.unpack_from(buf, pos)")
                self.emit(ind, f"pos += {struct.calcsize('>' + fmt)}")
                i = j
                continue
            self.decode_field(f, f"{var}.{f.py_name}", ind, path + f.py_name)
            i += 1
        for f in absent:
            self.emit(ind, f"{var}.{f.py_name} = {_default_expr(f, self.consts)}")
        self.emit(ind, f"{var}._unknown_tags = None")
        if self.flexible:
            self.decode_tags(st, var, tagged, ind, path)
        return var

    def decode_tags(self, st: StructSpec, var: str, tagged: list, ind: int, path: str) -> None:
        nt = self.tmp("nt")
        self.mark(ind, path + "<tagged fields>")
        self.read_uvarint(ind, nt)
        self.emit(ind, f"if {nt}:")
        ind += 1
        self.emit(ind, f"if {nt} > end - pos:")
        self.emit(ind + 1, f"raise _DE('tagged field count %d exceeds the remaining bytes' % {nt})")
        self.emit(ind, f"for _ in _range({nt}):")
        ind += 1
        tag, sz, tend = self.tmp("tag"), self.tmp("sz"), self.tmp("tend")
        self.read_uvarint(ind, tag)
        self.read_uvarint(ind, sz)
        self.emit(ind, f"if {sz} > end - pos:")
        self.emit(ind + 1, f"raise _DE('tagged field %d size %d exceeds the remaining bytes' % ({tag}, {sz}))")
        self.emit(ind, f"{tend} = pos + {sz}")
        kw = "if"
        for f in sorted(tagged, key=lambda f: f.tag):
            self.emit(ind, f"{kw} {tag} == {f.tag}:")
            kw = "elif"
            self.decode_field(f, f"{var}.{f.py_name}", ind + 1, path + f.py_name)
            self.emit(ind + 1, f"if pos > {tend}:")
            self.emit(ind + 2, f"raise _DE('tagged field %d overruns its size %d' % ({tag}, {sz}))")
        if tagged:
            self.emit(ind, "else:")
            ind2 = ind + 1
        else:
            ind2 = ind
        self.emit(ind2, f"if {var}._unknown_tags is None:")
        self.emit(ind2 + 1, f"{var}._unknown_tags = {{}}")
        self.emit(ind2, f"{var}._unknown_tags[{tag}] = _bytes(buf[pos:{tend}])")
        self.emit(ind, f"pos = {tend}")

    def decode_field(self, f: FieldSpec, target: str, ind: int, path: str) -> None:
        v = self.version
        self.mark(ind, path)
        flex = self.field_flexible(f)
        nullable = f.nullable_in(v)
        if f.is_array:
            self.decode_array(f, target, ind, path, flex, nullable)
        elif f.is_struct:
            if nullable:
                m = self.tmp("m")
                self.emit(ind, f"{m}, = _S_b.unpack_from(buf, pos)")
                self.emit(ind, "pos += 1")
                self.emit(ind, f"if {m} < 0:")
                self.emit(ind + 1, f"{target} = None")
                self.emit(ind, "else:")
                sv = self.decode_struct(f.struct, ind + 1, path + ".")
                self.emit(ind + 1, f"{target} = {sv}")
            else:
                sv = self.decode_struct(f.struct, ind, path + ".")
                self.emit(ind, f"{target} = {sv}")
        else:
            self.decode_scalar(f.type, target, ind, flex, nullable)

    def decode_scalar(self, typ: str, target: str, ind: int, flex: bool, nullable: bool) -> None:
        if typ in FIXED_FORMATS:
            s = self.consts.fmt(FIXED_FORMATS[typ])
            self.emit(ind, f"{target}, = {s}.unpack_from(buf, pos)")
            self.emit(ind, f"pos += {struct.calcsize('>' + FIXED_FORMATS[typ])}")
            return
        if typ == "uuid":
            self.emit(ind, "if end - pos < 16:")
            self.emit(ind + 1, "raise _DE('truncated uuid')")
            self.emit(ind, f"{target} = _UUID(bytes=_bytes(buf[pos:pos + 16]))")
            self.emit(ind, "pos += 16")
            return
        n = self.read_len(ind, flex, wide=(typ != "string"))
        self.null_check(ind, n, nullable, target, typ)
        ind += 1
        self.emit(ind, f"if {n} > end - pos:")
        self.emit(ind + 1, f"raise _DE('{typ} length %d exceeds the remaining %d bytes' % ({n}, end - pos))")
        if typ == "string":
            self.emit(ind, f"{target} = _str(buf[pos:pos + {n}], 'utf-8')")
        elif typ == "bytes":
            self.emit(ind, f"{target} = _bytes(buf[pos:pos + {n}])")
        elif typ == "records":
            self.emit(ind, f"{target} = buf[pos:pos + {n}]")
        else:  # pragma: no cover - schema validation prevents this
            raise _schema.SchemaError(f"unsupported type {typ}")
        self.emit(ind, f"pos += {n}")

    def decode_array(self, f: FieldSpec, target: str, ind: int, path: str, flex: bool, nullable: bool) -> None:
        n = self.read_len(ind, flex, wide=True)
        self.null_check(ind, n, nullable, target, "array")
        ind += 1
        self.emit(ind, f"if {n} > end - pos:")
        self.emit(ind + 1, f"raise _DE('array length %d exceeds the remaining %d bytes' % ({n}, end - pos))")
        et = f.elem_type
        if et in FIXED_FORMATS:
            c = FIXED_FORMATS[et]
            size = struct.calcsize(">" + c)
            self.emit(ind, f"{target} = _list(_unpack_from('>%d{c}' % {n}, buf, pos))")
            self.emit(ind, f"pos += {size} * {n}")
            return
        lst = self.tmp("l")
        self.emit(ind, f"{lst} = []")
        self.emit(ind, f"for _ in _range({n}):")
        if f.is_struct:
            sv = self.decode_struct(f.struct, ind + 1, path + "[].")
            self.emit(ind + 1, f"{lst}.append({sv})")
        else:
            e = self.tmp("e")
            self.decode_scalar(et, e, ind + 1, flex, False)
            self.emit(ind + 1, f"{lst}.append({e})")
        self.emit(ind, f"{target} = {lst}")


# ---- encoding -------------------------------------------------------------------------


class _EncGen(_Gen):
    def __init__(self, spec: MessageSpec, version: int, trace: bool) -> None:
        super().__init__(spec, version, trace)

    def build(self) -> str:
        self.emit(0, "def encode(o0, out, chunks, _t=None):")
        self.encode_struct(self.spec.struct, "o0", 1, "", "out", True)
        self.emit(1, "return out")
        return self.source()

    def write_uvarint(self, ind: int, expr: str, out: str) -> None:
        x = self.tmp("x")
        self.emit(ind, f"{x} = {expr}")
        self.emit(ind, f"if {x} < 128:")
        self.emit(ind + 1, f"{out}.append({x})")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{out} += _uvb({x})")

    def write_len(self, ind: int, expr: str, flex: bool, wide: bool, out: str) -> None:
        if flex:
            self.write_uvarint(ind, f"{expr} + 1", out)
        elif wide:
            self.emit(ind, f"{out} += _S_i.pack({expr})")
        else:
            self.emit(ind, f"{out} += _S_h.pack({expr})")

    def write_null(self, ind: int, flex: bool, wide: bool, out: str) -> None:
        if flex:
            self.emit(ind, f"{out}.append(0)")
        elif wide:
            self.emit(ind, f"{out} += b'\\xff\\xff\\xff\\xff'")
        else:
            self.emit(ind, f"{out} += b'\\xff\\xff'")

    def null_branch(self, ind: int, val: str, nullable: bool, flex: bool, wide: bool, out: str, what: str) -> None:
        self.emit(ind, f"if {val} is None:")
        if nullable:
            self.write_null(ind + 1, flex, wide, out)
        else:
            self.emit(ind + 1, f"raise _EE('null value for a non-nullable {what}')")
        self.emit(ind, "else:")

    def encode_struct(self, st: StructSpec, var: str, ind: int, path: str, out: str, ext: bool) -> None:
        v = self.version
        regular = [f for f in st.fields if f.present_in(v) and not f.tagged_in(v)]
        tagged = sorted((f for f in st.fields if f.tagged_in(v)), key=lambda f: f.tag)
        i = 0
        while i < len(regular):
            f = regular[i]
            if f.type in FIXED_FORMATS:
                j = i
                while j < len(regular) and regular[j].type in FIXED_FORMATS:
                    j += 1
                group = regular[i:j]
                fmt = "".join(FIXED_FORMATS[g.type] for g in group)
                s = self.consts.fmt(fmt)
                self.mark(ind, path + "/".join(g.py_name for g in group))
                args = ", ".join(f"{var}.{g.py_name}" for g in group)
                self.emit(ind, f"{out} += {s}.pack({args})")
                i = j
                continue
            self.encode_field(f, f"{var}.{f.py_name}", ind, path + f.py_name, out, ext)
            i += 1
        if not self.flexible:
            return
        self.mark(ind, path + "<tagged fields>")
        ut = self.tmp("ut")
        self.emit(ind, f"{ut} = {var}._unknown_tags")
        if not tagged:
            self.emit(ind, f"if {ut}:")
            self.emit(ind + 1, f"_write_tags({out}, _list({ut}.items()))")
            self.emit(ind, "else:")
            self.emit(ind + 1, f"{out}.append(0)")
            return
        tg = self.tmp("tg")
        self.emit(ind, f"{tg} = _list({ut}.items()) if {ut} else []")
        for f in tagged:
            val = f"{var}.{f.py_name}"
            self.emit(ind, f"if {self.non_default_cond(f, val)}:")
            tb = self.tmp("tb")
            self.emit(ind + 1, f"{tb} = bytearray()")
            self.encode_field(f, val, ind + 1, path + f.py_name, tb, False)
            self.emit(ind + 1, f"{tg}.append(({f.tag}, {tb}))")
        self.emit(ind, f"if {tg}:")
        self.emit(ind + 1, f"_write_tags({out}, {tg})")
        self.emit(ind, "else:")
        self.emit(ind + 1, f"{out}.append(0)")

    def non_default_cond(self, f: FieldSpec, val: str) -> str:
        if f.is_array:
            return f"{val} is not None" if f.default_is_null else f"{val}"
        if f.is_struct:
            if f.default_is_null:
                return f"{val} is not None"
            return f"{val} is not None and not ({self.struct_default_expr(f.struct, val, 0)})"
        if f.type == "records":
            return f"{val} is not None"
        if isinstance(f.default, uuid.UUID):
            d = "_ZERO_UUID" if f.default == ZERO_UUID else self.consts.add(f.default, "UUID")
            return f"{val} != {d}"
        return f"{val} != {f.default!r}"

    def struct_default_expr(self, st: StructSpec, val: str, depth: int) -> str:
        """Inline expression: is struct instance ``val`` equal to a default instance?"""
        parts = []
        for f in st.fields:
            a = f"{val}.{f.py_name}"
            if f.is_array:
                parts.append(f"{a} is None" if f.default_is_null else f"{a} == []")
            elif f.is_struct:
                if f.default_is_null:
                    parts.append(f"{a} is None")
                elif depth > 3:
                    d = self.consts.add(None, "D", key=("struct", f.struct.name))
                    self.consts.values[d] = _DeferredDefault(f.struct.name)
                    parts.append(f"{a} == {d}")
                else:
                    parts.append(f"({a} is not None and {self.struct_default_expr(f.struct, a, depth + 1)})")
            elif f.type == "records":
                parts.append(f"{a} is None")
            elif isinstance(f.default, uuid.UUID):
                d = "_ZERO_UUID" if f.default == ZERO_UUID else self.consts.add(f.default, "UUID")
                parts.append(f"{a} == {d}")
            else:
                parts.append(f"{a} == {f.default!r}")
        parts.append(f"not {val}._unknown_tags")
        return " and ".join(parts)

    def encode_field(self, f: FieldSpec, val_expr: str, ind: int, path: str, out: str, ext: bool) -> None:
        v = self.version
        self.mark(ind, path)
        flex = self.field_flexible(f)
        nullable = f.nullable_in(v)
        val = self.tmp("v")
        self.emit(ind, f"{val} = {val_expr}")
        if f.is_array:
            self.null_branch(ind, val, nullable, flex, True, out, "array")
            ind += 1
            self.write_len(ind, f"_len({val})", flex, True, out)
            et = f.elem_type
            if et in FIXED_FORMATS:
                self.emit(ind, f"{out} += _pack('>%d{FIXED_FORMATS[et]}' % _len({val}), *{val})")
                return
            e = self.tmp("e")
            self.emit(ind, f"for {e} in {val}:")
            if f.is_struct:
                self.encode_struct(f.struct, e, ind + 1, path + "[].", out, ext)
            else:
                self.encode_scalar(et, e, ind + 1, flex, False, out, ext)
        elif f.is_struct:
            if nullable:
                self.emit(ind, f"if {val} is None:")
                self.emit(ind + 1, f"{out} += b'\\xff'")
                self.emit(ind, "else:")
                self.emit(ind + 1, f"{out} += b'\\x01'")
                self.encode_struct(f.struct, val, ind + 1, path + ".", out, ext)
            else:
                self.emit(ind, f"if {val} is None:")
                self.emit(ind + 1, "raise _EE('null value for a non-nullable struct')")
                self.encode_struct(f.struct, val, ind, path + ".", out, ext)
        else:
            self.encode_scalar(f.type, val, ind, flex, nullable, out, ext)

    def encode_scalar(self, typ: str, val: str, ind: int, flex: bool, nullable: bool, out: str, ext: bool) -> None:
        if typ in FIXED_FORMATS:
            s = self.consts.fmt(FIXED_FORMATS[typ])
            self.emit(ind, f"{out} += {s}.pack({val})")
            return
        if typ == "uuid":
            self.emit(ind, f"{out} += {val}.bytes")
            return
        wide = typ != "string"
        self.null_branch(ind, val, nullable, flex, wide, out, typ)
        ind += 1
        if typ == "string":
            b = self.tmp("b")
            self.emit(ind, f"{b} = {val}.encode('utf-8')")
            self.write_len(ind, f"_len({b})", flex, wide, out)
            self.emit(ind, f"{out} += {b}")
        elif typ == "bytes":
            self.write_len(ind, f"_len({val})", flex, wide, out)
            self.emit(ind, f"{out} += {val}")
        elif typ == "records":
            self.write_len(ind, f"_len({val})", flex, wide, out)
            if ext:
                self.emit(ind, f"if _isinstance({val}, _BYTESLIKE) and _len({val}) <= _INLINE_MAX:")
                self.emit(ind + 1, f"{out} += {val}")
                self.emit(ind, "else:")
                self.emit(ind + 1, f"chunks.append({out})")
                self.emit(ind + 1, f"chunks.append({val})")
                self.emit(ind + 1, f"{out} = bytearray()")
            else:
                self.emit(ind, f"{out} += {val}")
        else:  # pragma: no cover
            raise _schema.SchemaError(f"unsupported type {typ}")


class _DeferredDefault:
    """Placeholder for a default struct instance, resolved when the code is compiled."""

    def __init__(self, struct_name: str) -> None:
        self.struct_name = struct_name


_dec_cache: dict[tuple[str, int, bool], Callable] = {}
_enc_cache: dict[tuple[str, int, bool], Callable] = {}


def _compile(name: str, version: int, trace: bool, gen_cls: type, kind: str) -> Callable:
    spec = _schema.load_message(name)
    if version not in spec.valid_versions:
        raise ValueError(f"{name} has no version {version} (valid {spec.valid_versions})")
    top = get_class(name)
    gen = gen_cls(spec, version, trace)
    src = gen.build()
    ns: dict[str, Any] = dict(_RUNTIME)
    ns["_S_b"], ns["_S_h"], ns["_S_i"] = _S_b, _S_h, _S_i
    ns[spec.name] = top
    for sname in spec.structs:
        ns[sname] = getattr(top, sname)
    for k, val in gen.consts.values.items():
        if isinstance(val, _DeferredDefault):
            val = ns[val.struct_name]()
        ns[k] = val
    tag = "_traced" if trace else ""
    exec(compile(src, f"<protocol.codec {kind} {name} v{version}{tag}>", "exec"), ns)
    fn = ns[kind]
    fn.__source__ = src  # type: ignore[attr-defined]
    return fn


def _cached(cache: dict, key: tuple, make: Callable[[], Callable]) -> Callable:
    """``cache[key]``, made once by ``make()`` (under the lock) when missing."""
    fn = cache.get(key)
    if fn is None:
        with _lock:
            fn = cache.get(key)
            if fn is None:
                fn = cache[key] = make()
    return fn


def _get(cache: dict, gen: type, kind: str, name: str, version: int, trace: bool) -> Callable:
    return _cached(cache, (name, version, trace), lambda: _compile(name, version, trace, gen, kind))


# ---- the compiled runners (protocol/_fastwire.c) ------------------------------------
# The same walk of the spec as _DecGen and _EncGen, made into nested tuples (the "plans",
# layout in _fastwire.c's docstring) instead of source: one definition, two runners. The
# generated Python functions stay the reference and the error path: _fastwire hands them
# any input it does not accept, so every error message is theirs.

K_FIXED, K_STRING, K_BYTES, K_RECORDS, K_UUID, K_STRUCT, K_ARRAY_STRUCT, K_ARRAY_FIXED, K_ARRAY_SCALAR = range(9)
_SCALAR_KINDS = {"string": K_STRING, "bytes": K_BYTES, "records": K_RECORDS, "uuid": K_UUID}


class _PlanGen(_Gen):
    def build(self) -> tuple:
        self.classes = {self.spec.name: get_class(self.spec.name)}
        for sname in self.spec.structs:
            self.classes[sname] = getattr(self.classes[self.spec.name], sname)
        return self.struct_plan(self.spec.struct)

    def struct_plan(self, st: StructSpec) -> tuple:
        v = self.version
        cls = self.classes[st.name]
        defaults = tuple((_member(cls, f.py_name), *self.default(f))
                         for f in st.fields if not f.present_in(v) or f.tagged_in(v))
        tagged = {f.tag: self.field_op(f, cls) for f in st.fields if f.tagged_in(v)}
        return (cls, self.field_ops(st, cls), defaults, bool(self.flexible), tagged or None,
                _member(cls, "_unknown_tags"))

    def field_ops(self, st: StructSpec, cls: type) -> tuple:
        """The ops of the struct's regular (untagged) fields in wire order, each run of
        fixed-width fields one K_FIXED op (as _DecGen and _EncGen give it one Struct)."""
        v = self.version
        regular = [f for f in st.fields if f.present_in(v) and not f.tagged_in(v)]
        ops: list[tuple] = []
        i = 0
        while i < len(regular):
            if regular[i].type in FIXED_FORMATS:
                j = i
                while j < len(regular) and regular[j].type in FIXED_FORMATS:
                    j += 1
                group = regular[i:j]
                ops.append(_fixed_op(tuple(_member(cls, g.py_name) for g in group),
                                     "".join(FIXED_FORMATS[g.type] for g in group)))
                i = j
                continue
            ops.append(self.field_op(regular[i], cls))
            i += 1
        return tuple(ops)

    def default(self, f: FieldSpec) -> tuple:
        return _default_mode(f, self.classes)

    def field_op(self, f: FieldSpec, cls: type) -> tuple:
        """The op decoding field ``f`` of struct class ``cls``."""
        v = self.version
        name = _member(cls, f.py_name)
        flex = int(self.field_flexible(f))
        nullable = int(f.nullable_in(v))
        if f.is_array:
            et = f.elem_type
            if f.is_struct:
                return (K_ARRAY_STRUCT, name, flex, nullable, self.struct_plan(f.struct))
            if et in FIXED_FORMATS:
                return (K_ARRAY_FIXED, name, flex, nullable, FIXED_FORMATS[et])
            return (K_ARRAY_SCALAR, name, flex, nullable, _SCALAR_KINDS[et])
        if f.is_struct:
            return (K_STRUCT, name, nullable, self.struct_plan(f.struct), None)
        if f.type in FIXED_FORMATS:
            return _fixed_op((name,), FIXED_FORMATS[f.type])
        return (_SCALAR_KINDS[f.type], name, flex, nullable, None)


def _fixed_op(attrs: tuple, fmt: str) -> tuple:
    """K_FIXED: the fields ``attrs``, their struct format, and its size in bytes."""
    return (K_FIXED, attrs, fmt, struct.calcsize(">" + fmt), None)


#: what a field of a struct must hold for the struct to be a default one
#: (_EncGen.struct_default_expr): D_EQUAL the default value, D_NONE None, D_EMPTY an empty
#: list, D_STRUCT a default struct (nested test)
D_EQUAL, D_NONE, D_EMPTY, D_STRUCT = range(4)


class _EncPlanGen(_PlanGen):
    """The encoding plan: the fields as for decoding, then the tagged fields with the
    test _EncGen.non_default_cond writes for each (layout in _fastwire.c)."""

    def struct_plan(self, st: StructSpec) -> tuple:
        cls = self.classes[st.name]
        tagged = tuple((f.tag, self.field_op(f, cls), *self.write_test(f))
                       for f in sorted((f for f in st.fields if f.tagged_in(self.version)), key=lambda f: f.tag))
        return (self.field_ops(st, cls), bool(self.flexible), tagged, _member(cls, "_unknown_tags"))

    def default_test(self, st: StructSpec) -> tuple:
        """(unknown_tags attr, ((attr, test, value), ...)): every field of ``st`` as
        _EncGen.struct_default_expr tests it, then no unknown tags."""
        cls = self.classes[st.name]
        tests = []
        for f in st.fields:
            a = _member(cls, f.py_name)
            if f.is_array:
                tests.append((a, D_NONE, None) if f.default_is_null else (a, D_EMPTY, None))
            elif f.is_struct:
                tests.append((a, D_NONE, None) if f.default_is_null else (a, D_STRUCT, self.default_test(f.struct)))
            elif f.type == "records":
                tests.append((a, D_NONE, None))
            else:
                tests.append((a, D_EQUAL, f.default))
        return (_member(cls, "_unknown_tags"), tuple(tests))

    def write_test(self, f: FieldSpec) -> tuple:
        """(mode, value): when the generated encoder writes tagged field ``f``."""
        if f.is_array:
            return (0, None) if f.default_is_null else (1, None)
        if f.is_struct:
            return (0, None) if f.default_is_null else (3, self.default_test(f.struct))
        if f.type == "records":
            return (0, None)
        return (2, f.default)


def _default_mode(f: FieldSpec, classes: dict) -> tuple:
    """(mode, value) for _fastwire: what _default_expr writes as source (``classes``: the
    message's struct classes by name)."""
    if f.is_array:
        return (0, None) if f.default_is_null else (1, None)
    if f.is_struct:
        return (0, None) if f.default_is_null else (2, classes[f.struct.name])
    return (0, f.default)


def _install_compiled_new(spec: MessageSpec, ns: dict) -> None:
    """Each struct class's ``_new`` (the handlers' way to make hot answers) becomes
    _fastwire's compiled one, which takes the same arguments and makes the same object
    (tests/unit/test_codec.py checks every struct of every schema); the generated Python
    one stays as ``_py_new``."""
    for st in [spec.struct, *spec.structs.values()]:
        cls = ns[st.name]
        fields = tuple((_member(cls, f.py_name), *_default_mode(f, ns), sys.intern(f.py_name)) for f in st.fields)
        cls._py_new = cls.__dict__["_new"]
        cls._new = staticmethod(_fastwire.struct_new(cls, fields, _member(cls, "_unknown_tags")))


def _member(cls: type, name: str) -> Any:
    """The member descriptor of slot ``name`` of a generated class (what _fastwire
    writes through), or the name itself if it is not one."""
    d = cls.__dict__.get(name)
    return d if type(d).__name__ == "member_descriptor" else sys.intern(name)


def _plan(gen: type, name: str, version: int) -> tuple:
    spec = _schema.load_message(name)
    if version not in spec.valid_versions:
        raise ValueError(f"{name} has no version {version} (valid {spec.valid_versions})")
    return gen(spec, version, False).build()


def decode_plan(name: str, version: int) -> tuple:
    """The plan _fastwire.decode runs for (message, version) (see _PlanGen)."""
    return _plan(_PlanGen, name, version)


def encode_plan(name: str, version: int) -> tuple:
    """The plan _fastwire.encode runs for (message, version) (see _EncPlanGen)."""
    return _plan(_EncPlanGen, name, version)


try:
    from . import _fastwire  # type: ignore[attr-defined]
except ImportError:  # no C compiler at install time: the generated Python code serves
    _fastwire = None

#: the compiled decoders and encoders serve
FAST_CODEC = _fastwire is not None
_fast_cache: dict[tuple[str, str, int], Callable] = {}


class _Fallback:
    """The generated Python function of (message, version), compiled at its first call:
    the compiled runner calls it only for input it does not accept, so a pair's first
    request does not wait for it to be generated (a millisecond or two per message)."""

    __slots__ = ("kind", "name", "version")

    def __init__(self, kind: str, name: str, version: int) -> None:
        self.kind, self.name, self.version = kind, name, version

    def function(self) -> Callable:
        return (python_decoder if self.kind == "decode" else python_encoder)(self.name, self.version)

    def __call__(self, *args: Any) -> Any:
        return self.function()(*args)


def _fast(kind: str, name: str, version: int) -> Callable:
    """The compiled runner of (message, version)'s plan, bound to its generated Python
    function (the fallback, generated when first needed) as ``partial(runner, plan,
    fallback[, inline max])``."""

    def make() -> Callable:
        fallback = _Fallback(kind, name, version)
        if kind == "decode":
            return functools.partial(_fastwire.decode, decode_plan(name, version), fallback)
        return functools.partial(_fastwire.encode, encode_plan(name, version), fallback, INLINE_RECORDS_MAX)

    return _cached(_fast_cache, (kind, name, version), make)


def get_decoder(name: str, version: int, trace: bool = False) -> Callable:
    """The decoder of (message, version): ``decode(buf, pos) -> (obj, pos)``. Untraced,
    and with protocol/_fastwire.c built, the compiled runner of its plan, which falls back
    to the generated Python decoder (``python_decoder``) for any input it does not accept."""
    if trace or not FAST_CODEC:
        return python_decoder(name, version, trace)
    return _fast("decode", name, version)


def python_decoder(name: str, version: int, trace: bool = False) -> Callable:
    """The generated Python decoder of (message, version)."""
    return _get(_dec_cache, _DecGen, "decode", name, version, trace)


def get_encoder(name: str, version: int, trace: bool = False) -> Callable:
    """The encoder of (message, version): ``encode(obj, out, chunks) -> out``. Untraced,
    and with protocol/_fastwire.c built, the compiled runner of its plan, which falls back
    to the generated Python encoder (``python_encoder``) for anything it cannot write."""
    if trace or not FAST_CODEC:
        return python_encoder(name, version, trace)
    return _fast("encode", name, version)


def python_encoder(name: str, version: int, trace: bool = False) -> Callable:
    """The generated Python encoder of (message, version)."""
    return _get(_enc_cache, _EncGen, "encode", name, version, trace)


def decoder_source(name: str, version: int, trace: bool = False) -> str:
    """The generated decoder source (for debugging and docs)."""
    return python_decoder(name, version, trace).__source__  # type: ignore[attr-defined]


def encoder_source(name: str, version: int, trace: bool = False) -> str:
    return python_encoder(name, version, trace).__source__  # type: ignore[attr-defined]
