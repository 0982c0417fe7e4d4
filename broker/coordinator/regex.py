"""Regular expressions a client sends: KIP-848's SubscribedTopicRegex and KIP-1152's
ListTransactions TransactionalIdPattern. Each is matched against whole names
(``fullmatch``), as Kafka matches them.

:func:`compile_client_regex` refuses any text that does not compile with ``re.error``.
Besides ``re.error``, Python's ``re`` raises OverflowError for a repetition count that is
too large and RecursionError for nesting that is too deep. Callers answer all of these
with INVALID_REGULAR_EXPRESSION, never a traceback.
"""

from __future__ import annotations

import re


def compile_client_regex(text: str) -> re.Pattern:
    try:
        return re.compile(text)
    except re.error:
        raise
    except (OverflowError, RecursionError) as exc:
        raise re.error(str(exc)) from None
