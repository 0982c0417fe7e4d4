"""Sans-IO Kafka request/response codec.

Frames are the bytes *after* the 4-byte size prefix for the decoders
(``decode_request(frame)``, ``decode_request_header(frame)``,
``decode_response(api_key, version, frame)``); the encoders include the size prefix
(``encode_request`` returns ``bytes``, ``encode_response`` a list of chunks).

Encoders/decoders are generated Python source per (message, version), compiled lazily
and cached (see :mod:`protocol._codegen`).  ``records`` fields decode to a zero-copy
``memoryview`` slice of the frame (or ``None``).
"""

from __future__ import annotations

import enum
import os
import re
import struct
from typing import Any, Iterable, Iterator

from . import schema as _schema
from ._codegen import (
    FAST_CODEC,
    CodecError,
    DecodeError,
    EncodeError,
    INLINE_RECORDS_MAX,
    KafkaStruct,
    _fastwire,
    get_class,
    get_decoder,
    get_encoder,
)

__all__ = [
    "API_KEYS",
    "ApiKey",
    "CodecError",
    "DecodeError",
    "EncodeError",
    "UnsupportedVersionError",
    "request_header_version",
    "response_header_version",
    "decode_request_header",
    "decode_request",
    "encode_request",
    "decode_response",
    "encode_response",
    "encode_response_bytes",
    "encode_body",
    "decode_body",
    "request_class",
    "response_class",
    "valid_versions",
    "is_flexible",
    "INLINE_RECORDS_MAX",
]


class UnsupportedVersionError(CodecError):
    """Unknown api key, or a version outside the schema's validVersions.

    ``header`` is the decoded :class:`RequestHeader` (``None`` when raised by an encoder);
    ``api_key`` and ``api_version`` are always set.
    """

    def __init__(self, message: str, header: Any = None, api_key: int | None = None,
                 api_version: int | None = None) -> None:
        super().__init__(message)
        self.header = header
        self.api_key = header.api_key if header is not None else api_key
        self.api_version = header.api_version if header is not None else api_version


# ---------------------------------------------------------------------------------------
# API keys (scanned from the schema files without parsing them all)

_API_KEY_RE = re.compile(r'"apiKey"\s*:\s*(\d+)')


def _scan_api_keys() -> dict[int, str]:
    keys: dict[int, str] = {}
    for name in _schema.message_names():
        if not name.endswith("Request"):
            continue
        with open(os.path.join(_schema.SCHEMA_DIR, name + ".json"), encoding="utf-8") as fh:
            text = _schema.strip_comments(fh.read())
        m = _API_KEY_RE.search(text)
        if m and '"type": "request"' in text.replace("  ", " "):
            keys[int(m.group(1))] = name[: -len("Request")]
    return dict(sorted(keys.items()))


#: api key -> API name as in the schema file names without the Request suffix
#: (0 -> "Produce", 18 -> "ApiVersions", ...)
API_KEYS: dict[int, str] = _scan_api_keys()

ApiKey = enum.IntEnum(  # type: ignore[misc]
    "ApiKey", [(_schema.snake_case(n).upper(), k) for k, n in API_KEYS.items()], module=__name__
)
ApiKey.__doc__ = "Kafka API keys (PRODUCE=0, FETCH=1, ..., API_VERSIONS=18, ...)."

_REQ_NAMES = {k: n + "Request" for k, n in API_KEYS.items()}
_RESP_NAMES = {k: n + "Response" for k, n in API_KEYS.items()}
_API_VERSIONS = 18
_CONTROLLED_SHUTDOWN = 7

_S_hh = struct.Struct(">hh")
_S_i = struct.Struct(">i")
_S_ii = struct.Struct(">ii")


def request_class(api_key: int) -> type:
    return get_class(_REQ_NAMES[api_key])


def response_class(api_key: int) -> type:
    return get_class(_RESP_NAMES[api_key])


def valid_versions(api_key: int) -> _schema.Versions:
    """The request schema's validVersions for ``api_key`` (KeyError if unknown)."""
    return _schema.load_message(_REQ_NAMES[api_key]).valid_versions


def is_flexible(api_key: int, api_version: int) -> bool:
    return api_version in _schema.load_message(_REQ_NAMES[api_key]).flexible_versions


def request_header_version(api_key: int, api_version: int) -> int:
    """2 for flexible versions, 1 otherwise; 0 only for ControlledShutdown v0."""
    if api_key == _CONTROLLED_SHUTDOWN and api_version == 0:
        return 0
    name = _REQ_NAMES.get(api_key)
    if name is None:
        return 1
    return 2 if api_version in _schema.load_message(name).flexible_versions else 1


def response_header_version(api_key: int, api_version: int) -> int:
    """1 for flexible versions, 0 otherwise; always 0 for ApiVersions (KIP-511)."""
    if api_key == _API_VERSIONS:
        return 0
    name = _RESP_NAMES.get(api_key)
    if name is None:
        return 0
    return 1 if api_version in _schema.load_message(name).flexible_versions else 0


# ---------------------------------------------------------------------------------------
# Generic body encode/decode with error translation


def _as_view(frame: Any) -> memoryview:
    mv = frame if isinstance(frame, memoryview) else memoryview(frame)
    if mv.format != "B" or mv.ndim != 1:
        mv = mv.cast("B")
    return mv


_DECODE_ERRORS = (struct.error, IndexError, ValueError, TypeError, OverflowError, MemoryError)


def _reason(exc: BaseException) -> str:
    if isinstance(exc, DecodeError):
        return str(exc)
    if isinstance(exc, (struct.error, IndexError)):
        return "truncated input"
    if isinstance(exc, UnicodeDecodeError):
        return f"invalid UTF-8 ({exc.reason})"
    return f"{type(exc).__name__}: {exc}"


def _decode(name: str, version: int, buf: memoryview, pos: int) -> tuple[Any, int]:
    fn = get_decoder(name, version)
    try:
        return fn(buf, pos)
    except _DECODE_ERRORS as exc:
        trace = ["<start>"]
        try:
            get_decoder(name, version, True)(buf, pos, trace)
        except _DECODE_ERRORS as exc2:
            exc = exc2
        raise DecodeError(
            f"malformed {name} v{version} at field {trace[0]}: {_reason(exc)}"
        ) from None


def _encode(name: str, version: int, body: Any, out: bytearray, chunks: list) -> bytearray:
    start = len(out)
    nchunks = len(chunks)
    try:
        return get_encoder(name, version)(body, out, chunks)
    except EncodeError as exc:
        err: BaseException = exc
    except (struct.error, TypeError, AttributeError, ValueError, OverflowError) as exc:
        err = exc
    del out[start:]
    del chunks[nchunks:]
    trace = ["<start>"]
    try:
        get_encoder(name, version, True)(body, bytearray(), [], trace)
    except Exception as exc2:  # noqa: BLE001 - re-raised as EncodeError below
        err = exc2
    raise EncodeError(f"cannot encode {name} v{version} field {trace[0]}: {type(err).__name__}: {err}") from None


def _check_body(name: str, body: Any) -> None:
    cls = get_class(name)
    if type(body) is not cls:
        raise EncodeError(f"expected a {name} instance, got {type(body).__qualname__}")


def encode_body(body: KafkaStruct, version: int) -> bytes:
    """Encode any generated message (request, response, header or data) without a
    header or size prefix.  External records objects are read with ``read()``."""
    name = type(body).SCHEMA.name  # type: ignore[union-attr]
    spec = _schema.load_message(name)
    if version not in spec.valid_versions:
        raise UnsupportedVersionError(
            f"{name} has no version {version} (valid {spec.valid_versions})",
            api_key=spec.api_key, api_version=version,
        )
    chunks: list = []
    out = _encode(name, version, body, bytearray(), chunks)
    chunks.append(out)
    return _join(chunks)


def decode_body(message: str | type, version: int, buf: Any, pos: int = 0) -> tuple[Any, int]:
    """Decode a message body (no header) of ``message`` (name or generated class) from
    ``buf[pos:]``; returns ``(obj, end_pos)``."""
    name = message if isinstance(message, str) else message.SCHEMA.name  # type: ignore[union-attr]
    spec = _schema.load_message(name)
    if version not in spec.valid_versions:
        raise UnsupportedVersionError(
            f"{name} has no version {version} (valid {spec.valid_versions})",
            api_key=spec.api_key, api_version=version,
        )
    return _decode(name, version, _as_view(buf), pos)


def _join(chunks: Iterable[Any]) -> bytes:
    parts = []
    for c in chunks:
        if isinstance(c, (bytes, bytearray, memoryview)):
            parts.append(c)
        elif hasattr(c, "read"):
            data = c.read()
            if len(data) != len(c):
                raise EncodeError(f"external chunk {c!r} read {len(data)} bytes, expected {len(c)}")
            parts.append(data)
        else:
            raise TypeError(f"cannot join external chunk {c!r} (no read())")
    return b"".join(parts)


# ---------------------------------------------------------------------------------------
# Requests


# (api key, version) -> what decoding its request needs, or encoding its response: the
# generated functions of the same schemas, looked up once per pair instead of through
# the name, schema and version checks on every request (the produce path's per-request
# cost; see README "Other shapes of work")
_REQ_PLANS: dict[tuple[int, int], tuple[Any, Any, str]] = {}
_RESP_PLANS: dict[tuple[int, int], tuple[Any, str, bool, type]] = {}
#: the same pairs for protocol/_fastwire.c's decode_request and encode_response, keyed by
#: api_key << 16 | api_version: (header plan, body plan); (plan, inline max, flexible
#: header, class). Filled as the functions below meet each pair.
REQUEST_TABLE: dict[int, tuple] = {}
RESPONSE_TABLE: dict[int, tuple] = {}
_encode_response_compiled = _fastwire.encode_response if FAST_CODEC else None
#: protocol/_fastwire.c's decode_request (None without it): ``(header, body offset,
#: request or None)`` of a frame whose pair this module has decoded before, in one call,
#: else None (the caller takes decode_request_header_view and decode_request_body_view)
decode_request_compiled = _fastwire.decode_request if FAST_CODEC else None


def _request_plan(api_key: int, api_version: int):
    """(header decoder, body decoder, body name) of a supported pair, else None."""
    name = _REQ_NAMES.get(api_key)
    if name is None or api_version not in _schema.load_message(name).valid_versions:
        return None
    header_version = request_header_version(api_key, api_version)
    plan = _REQ_PLANS[(api_key, api_version)] = (
        get_decoder("RequestHeader", header_version), get_decoder(name, api_version), name)
    if FAST_CODEC:  # the plans the compiled decoders (partials of _fastwire.decode) run
        REQUEST_TABLE[api_key << 16 | api_version] = (plan[0].args[0], plan[1].args[0])
    return plan


def _response_plan(api_key: int, api_version: int):
    """(encoder, body name, flexible header, class) of a pair; UnsupportedVersionError for
    one not supported."""
    name = _checked_name(_RESP_NAMES, api_key, api_version)
    plan = _RESP_PLANS[(api_key, api_version)] = (
        get_encoder(name, api_version), name, response_header_version(api_key, api_version) == 1,
        get_class(name))
    if FAST_CODEC:  # the plan and inline max of the compiled encoder (a partial of _fastwire.encode)
        RESPONSE_TABLE[api_key << 16 | api_version] = (plan[0].args[0], plan[0].args[2], plan[2], plan[3])
    return plan


def prepare(api_keys: Iterable[int]) -> Iterator[None]:
    """Builds, for every supported version of each api key, what decoding its request and
    encoding its response need, so that no request waits for it: a pair met for the first
    time otherwise pays for its schema, classes and plans (one to two milliseconds per
    message). A generator, one pair per step, so that a server can take the steps between
    requests; ``for _ in prepare(keys): pass`` takes them all at once."""
    for api_key in api_keys:
        name = _REQ_NAMES.get(api_key)
        if name is None:
            raise ValueError(f"unknown api key {api_key}")
        for version in _schema.load_message(name).valid_versions:
            if (api_key, version) not in _REQ_PLANS:
                _request_plan(api_key, version)
            if (api_key, version) not in _RESP_PLANS:
                _response_plan(api_key, version)
            yield


def decode_request_header(frame: Any) -> tuple[Any, int]:
    """``(RequestHeader, body_offset)`` for any api key and version.

    For a known api key and flexible version the header's tagged fields are skipped
    (header v2); for ControlledShutdown v0 it is header v0; otherwise v1.
    """
    return decode_request_header_view(_as_view(frame))


def decode_request_header_view(mv: memoryview) -> tuple[Any, int]:
    """:func:`decode_request_header` of a one-dimensional memoryview of unsigned bytes
    (format "B", as a connection's frames are), without checking that it is one."""
    try:
        api_key, api_version = _S_hh.unpack_from(mv, 0)
    except struct.error:
        raise DecodeError(f"request header truncated ({len(mv)} bytes)") from None
    plan = _REQ_PLANS.get((api_key, api_version)) or _request_plan(api_key, api_version)
    if plan is not None:
        try:
            return plan[0](mv, 0)
        except _DECODE_ERRORS:
            pass  # again below, for the message naming the field
    hv = 1
    name = _REQ_NAMES.get(api_key)
    if name is not None and api_version in _schema.load_message(name).valid_versions:
        hv = request_header_version(api_key, api_version)
    elif api_key == _CONTROLLED_SHUTDOWN and api_version == 0:
        hv = 0
    try:
        return _decode("RequestHeader", hv, mv, 0)
    except DecodeError as exc:
        what = f"{name} v{api_version}" if name is not None else f"api key {api_key} v{api_version}"
        raise DecodeError(f"{what} request: {exc}") from None


def _checked_name(names: dict, api_key: int, api_version: int, header: Any = None) -> str:
    """The message name for a supported (api key, version), else UnsupportedVersionError."""
    name = names.get(api_key)
    if name is None:
        raise UnsupportedVersionError(f"unknown api key {api_key}", header,
                                      api_key=api_key, api_version=api_version)
    valid = _schema.load_message(name).valid_versions
    if api_version not in valid:
        raise UnsupportedVersionError(f"unsupported {name} version {api_version} (valid {valid})", header,
                                      api_key=api_key, api_version=api_version)
    return name


def decode_request(frame: Any) -> tuple[Any, Any]:
    """``(RequestHeader, request)``.

    Raises :class:`UnsupportedVersionError` (with ``.header``) for an unknown api key or
    a version outside validVersions, :class:`DecodeError` for malformed input.
    Trailing bytes after the body are ignored (as Kafka does).
    """
    mv = _as_view(frame)
    header, pos = decode_request_header(mv)
    return header, decode_request_body(header, mv, pos)


def decode_request_body(header: Any, frame: Any, pos: int) -> Any:
    """The request body that starts at ``pos`` (as returned by
    :func:`decode_request_header`), for callers that look at the header first."""
    return decode_request_body_view(header, _as_view(frame), pos)


def decode_request_body_view(header: Any, mv: memoryview, pos: int) -> Any:
    """:func:`decode_request_body` of a one-dimensional memoryview of unsigned bytes
    (format "B", as a connection's frames are), without checking that it is one."""
    plan = _REQ_PLANS.get((header.api_key, header.api_version))
    if plan is not None:
        try:
            return plan[1](mv, pos)[0]
        except _DECODE_ERRORS:
            pass  # again below, for the message naming the field
    name = _checked_name(_REQ_NAMES, header.api_key, header.api_version, header)
    body, _ = _decode(name, header.api_version, mv, pos)
    return body


def encode_request(header: Any, body: Any) -> bytes:
    """Size prefix + request header (v0/v1/v2 as the api/version needs) + body."""
    api_key, version = header.api_key, header.api_version
    name = _checked_name(_REQ_NAMES, api_key, version)
    _check_body(name, body)
    chunks: list = []
    out = bytearray(4)
    out = _encode("RequestHeader", request_header_version(api_key, version), header, out, chunks)
    out = _encode(name, version, body, out, chunks)
    chunks.append(out)
    if len(chunks) == 1:
        _S_i.pack_into(out, 0, len(out) - 4)
        return bytes(out)
    data = _join(chunks)
    return _S_i.pack(len(data) - 4) + data[4:]


# ---------------------------------------------------------------------------------------
# Responses


def encode_response(api_key: int, api_version: int, correlation_id: int, body: Any) -> list:
    """Encode a response as a list of chunks.

    The first chunk (a bytearray) starts with the 4-byte size prefix, which counts every
    chunk.  Other chunks are bytes-like or external records objects (non-bytes objects
    with ``__len__``, e.g. ``storage.FileSlice``) to be sent as they are (``sendfile``).
    Bytes-like records larger than ``INLINE_RECORDS_MAX`` also get their own chunk so
    they are not copied.
    """
    if _encode_response_compiled is not None:  # a pair met before: protocol/_fastwire.c, in one call
        chunks = _encode_response_compiled(RESPONSE_TABLE, api_key, api_version, correlation_id, body)
        if chunks is not None:
            return chunks
    encoder, name, flexible_header, cls = _RESP_PLANS.get((api_key, api_version)) or _response_plan(
        api_key, api_version)
    if type(body) is not cls:
        _check_body(name, body)
    chunks: list = []
    # size prefix and correlation id (both written below, in one pack), and for a flexible
    # header its empty tagged fields (the zero byte bytearray() starts with)
    out = bytearray(8 + flexible_header)
    try:
        out = encoder(body, out, chunks)
    except Exception:  # noqa: BLE001 - again through _encode, for the message naming the field
        del out[8 + flexible_header:]
        chunks.clear()
        out = _encode(name, api_version, body, out, chunks)
    if not chunks:  # the whole answer in ``out``
        _S_ii.pack_into(out, 0, len(out) - 4, correlation_id)
        return [out]
    if len(out):
        chunks.append(out)
    total = 0
    for c in chunks:
        total += len(c)
    _S_ii.pack_into(chunks[0], 0, total - 4, correlation_id)  # the bytearray made above
    return chunks


def encode_response_bytes(api_key: int, api_version: int, correlation_id: int, body: Any) -> bytes:
    """``encode_response`` joined into one bytes object (external chunks are read with
    their ``read()`` method; others raise TypeError)."""
    return _join(encode_response(api_key, api_version, correlation_id, body))


def decode_response(api_key: int, api_version: int, frame: Any) -> tuple[int, Any]:
    """``(correlation_id, response)`` from a response frame (without the size prefix)."""
    name = _checked_name(_RESP_NAMES, api_key, api_version)
    mv = _as_view(frame)
    header, pos = _decode("ResponseHeader", response_header_version(api_key, api_version), mv, 0)
    body, _ = _decode(name, api_version, mv, pos)
    return header.correlation_id, body
