"""The error response of any request (Kafka's ``AbstractRequest.getErrorResponse``):
the response a broker sends when handling a request failed unexpectedly, with the error
code in every place the response has one, for every topic, partition, group or resource
the request named (sans-IO: request object in, response object out).

It is built from the schemas: each response array is filled from the request array it
answers (the same name, a known pairing such as ``topic_data`` -> ``responses``, or the
only list the request has at that level), one element per request element, copying the
identifying fields (names, partition indexes, ids, resource types) and setting every
``error_code`` and ``error_message`` field. Request elements that are plain strings or
integers (group ids, partition indexes) fill the element's first field of that kind.
"""

from __future__ import annotations

from typing import Any

from .codec import response_class
from .errors import ErrorCode

__all__ = ["error_response"]

# response array -> the request arrays it answers, in order of preference
_ARRAY_SOURCES: dict[str, tuple[str, ...]] = {
    "responses": ("topic_data", "topics", "resources", "topic_names", "groups"),
    "partition_responses": ("partition_data", "partitions"),
    "results": ("resources", "topics", "creations", "groups_names", "users", "transactional_ids", "groups",
                "topic_names"),
    "results_by_topic_v3_and_below": ("v3_and_below_topics",),
    "results_by_partition": ("partitions",),
    "results_by_transaction": ("transactions",),
    "filter_results": ("filters",),
    "transaction_states": ("transactional_ids",),
    "partitions": ("partitions", "partition_indexes", "partition_data"),
}

# response field -> request fields that identify the same thing
_KEY_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("name", "topic"),
    "topic": ("topic", "name"),
    "partition_index": ("partition_index", "partition", "index"),
    "partition": ("partition", "partition_index", "index"),
    "index": ("index", "partition_index", "partition"),
    "group_id": ("group_id", "group"),
    "user": ("user", "name"),
}


def error_response(api_key: int, version: int, request: Any, code: int = ErrorCode.UNKNOWN_SERVER_ERROR,
                   message: str | None = None) -> Any:
    """The response to ``request`` (a decoded request object of ``api_key`` v``version``)
    carrying ``code`` everywhere an error code goes."""
    cls = response_class(api_key)
    resp = _build(cls, cls._struct_spec, request, version, int(code), message, top=cls)
    if api_key == 51:  # AlterUserScramCredentials: one result per deletion and upsertion
        results = [r for lst in (getattr(request, "deletions", []), getattr(request, "upsertions", []))
                   for r in lst]
        elem = getattr(cls, "AlterUserScramCredentialsResult")
        resp.results = [elem(user=r.name, error_code=int(code), error_message=message) for r in results]
    return resp


def _list_fields(obj: Any) -> dict[str, list]:
    out = {}
    for n in getattr(obj, "_fields", ()):
        v = getattr(obj, n)
        if isinstance(v, list):
            out[n] = v
    return out


def _source_list(field, req: Any) -> list:
    if req is None or isinstance(req, (str, int)):
        return []
    lists = _list_fields(req)
    for name in (field.py_name, *_ARRAY_SOURCES.get(field.py_name, ())):
        if lists.get(name):
            return lists[name]
    nonempty = [v for v in lists.values() if v]
    return nonempty[0] if len(nonempty) == 1 else []


def _copy_key(field, req: Any):
    """The value of a response field taken from the request element, or None."""
    if isinstance(req, str):
        return req if field.type == "string" else None
    if isinstance(req, int) and not isinstance(req, bool):
        return req if field.type in ("int32", "int16", "int64") else None
    if req is None:
        return None
    for name in _KEY_ALIASES.get(field.py_name, (field.py_name,)):
        if name in getattr(req, "_fields", ()):
            v = getattr(req, name)
            if not isinstance(v, list):
                return v
    return None


def _build(cls, spec, req: Any, version: int, code: int, message: str | None, top):
    kwargs = {}
    filled_scalar = False
    for f in spec.fields:
        if version not in f.versions:
            continue
        name = f.py_name
        if name == "error_code" or name.endswith("_error_code"):
            kwargs[name] = code
        elif name == "error_message":
            kwargs[name] = message if message is not None or f.nullable_in(version) else ""
        elif name == "throttle_time_ms":
            kwargs[name] = 0
        elif f.type == "records" and not f.nullable_in(version):
            kwargs[name] = b""  # ShareFetch v1+: an empty record set, never null
        elif f.is_array and f.struct is not None:
            elem_cls = getattr(top, f.struct.name)
            kwargs[name] = [_build(elem_cls, f.struct, item, version, code, message, top)
                            for item in _source_list(f, req)]
        elif f.struct is not None:
            kwargs[name] = _build(getattr(top, f.struct.name), f.struct, req, version, code, message, top)
        elif not f.is_array:
            v = _copy_key(f, req)
            if isinstance(req, (str, int)) and not isinstance(req, bool):
                # a plain request element fills the first field of its kind only
                if v is not None and not filled_scalar:
                    kwargs[name] = v
                    filled_scalar = True
            elif v is not None:
                kwargs[name] = v
    return cls(**kwargs)
