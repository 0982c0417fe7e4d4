"""Generated message classes, one per JSON schema in ``protocol/schemas``.

``from protocol.messages import ProduceRequest`` builds (once, on first access) the class
for ``ProduceRequest.json`` and its nested struct classes, which are attributes of it
named by their JSON type name (``ProduceRequest.TopicProduceData``,
``ProduceRequest.TopicProduceData`` ... ``ProduceResponse.PartitionProduceResponse``).

Instances:

* keyword-only constructors; omitted fields get the schema default (ints 0 or the JSON
  default, ``""`` for strings, ``b""`` for bytes, ``[]`` for arrays, a default instance
  for struct fields, ``None`` where the default is ``"null"``, ``None`` for records,
  the zero UUID for uuids);
* ``__slots__`` = the snake_case field names plus ``_unknown_tags`` (``None`` or a dict
  tag -> bytes of tagged fields read from the wire that this version does not know;
  they are written back on encode);
* ``__eq__`` (field by field; ``None`` and ``{}`` unknown tags compare equal),
  ``__repr__`` and ``to_dict()``.

Class attributes of top-level classes: ``SCHEMA`` (:class:`protocol.schema.MessageSpec`),
``API_KEY``, ``MESSAGE_TYPE``, ``VALID_VERSIONS``, ``FLEXIBLE_VERSIONS``.

Field names are :func:`protocol.schema.snake_case` of the JSON names, except
``RequestHeader.api_key``/``api_version`` (JSON ``RequestApiKey``/``RequestApiVersion``;
``request_api_key``/``request_api_version`` are property aliases).
"""

from __future__ import annotations

from typing import Any

from ._codegen import KafkaStruct, get_class
from .schema import message_names

__all__ = ["KafkaStruct", "get_class", *message_names()]

_NAMES = frozenset(message_names())


def __getattr__(name: str) -> Any:
    if name in _NAMES:
        cls = get_class(name)
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | _NAMES)
