"""Regular expressions a client sends: KIP-848's SubscribedTopicRegex and KIP-1152's
ListTransactions TransactionalIdPattern. Each is matched against whole names
(``fullmatch``), as Kafka matches them.

Kafka compiles both with RE2J, and so do we with RE2 (the ``google-re2`` package): the
same syntax (no look-around, no back-references, repetition counts up to 1000), and
matching in time linear in the name. Python's ``re`` backtracks, so a pattern such as
``(a+)+b`` matched against a long topic name would hold the event loop for hours; a
client with nothing more than READ on a group could send one.

:func:`compile_client_regex` refuses any text RE2 does not compile with
:class:`ClientRegexError`, whose message is RE2's (``missing ]: [``). Callers answer it
with INVALID_REGULAR_EXPRESSION, never a traceback.
"""

from __future__ import annotations

from functools import lru_cache

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would print every refused pattern on stderr
_OPTIONS.never_capture = True  # only match or no match is asked


class ClientRegexError(ValueError):
    """A client's regular expression that does not compile; the message says why."""


@lru_cache(maxsize=256)  # a regex member's pattern is matched at each of its heartbeats
def compile_client_regex(text: str):
    """The compiled pattern (with ``fullmatch(name)``), or :class:`ClientRegexError`."""
    try:
        return re2.compile(text, _OPTIONS)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else "invalid"
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ClientRegexError(reason) from None
