"""Broker logging: plain text (default) or JSON lines, and a level per logger.

* Format ``text``: ``2026-11-21 20:30:00,123 INFO chronolog.server message`` (the
  traceback, if any, on the following lines).
* Format ``json``: one JSON object per line with the keys ``time`` (ISO-8601 UTC with
  milliseconds), ``level``, ``logger``, ``message`` and, only when an exception is
  attached, ``exception`` (the formatted traceback as one string).
* Levels: a comma-separated list of ``LEVEL`` (the root logger) and ``logger=LEVEL``
  entries, e.g. ``INFO,chronolog.produce=DEBUG,storage=WARNING``. Logger names are
  Python logger names (dotted, hierarchical: ``storage`` covers ``storage.log`` and
  ``storage.log_manager``). The spec syntax is checked by :func:`parse_level_spec`
  (shared with the ``logging.levels`` broker property in ``config``).
"""

from __future__ import annotations

import json
import logging
import sys
import time

from config.properties import ConfigError
from config.broker_config import LOG_FORMATS, parse_level_spec

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"

__all__ = ["JsonFormatter", "LOG_FORMATS", "TEXT_FORMAT", "parse_level_spec", "setup_logging", "ConfigError"]


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (newlines inside values are escaped)."""

    def format(self, record: logging.LogRecord) -> str:
        t = time.gmtime(record.created)
        obj = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", t) + ".%03dZ" % int(record.msecs),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            obj["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            obj["exception"] = record.exc_text
        if record.stack_info:
            obj["stack"] = self.formatStack(record.stack_info)
        return json.dumps(obj, ensure_ascii=False, default=str)


# loggers whose level we set last time (so a second call can reset them)
_configured: set[str] = set()


def setup_logging(level: str = "INFO", stream=None, fmt: str = "text") -> None:
    """Install one stderr handler on the root logger (replacing a previous one of ours)
    with the ``text`` or ``json`` format, and apply the level spec (see module doc).
    Raises :class:`ConfigError` for a bad format or level spec."""
    fmt = (fmt or "text").lower()
    if fmt not in LOG_FORMATS:
        raise ConfigError("--log-format", fmt, "String must be one of: " + ", ".join(LOG_FORMATS))
    root_level, per_logger = parse_level_spec("--log-level", level)
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else logging.Formatter(TEXT_FORMAT))
    handler._chronolog = True  # type: ignore[attr-defined]
    root = logging.getLogger()
    for h in list(root.handlers):
        if getattr(h, "_chronolog", False):
            root.removeHandler(h)
    root.addHandler(handler)
    root.setLevel(root_level or "INFO")
    for name in _configured - set(per_logger):
        logging.getLogger(name).setLevel(logging.NOTSET)
    for name, lvl in per_logger.items():
        logging.getLogger(name).setLevel(lvl)
    _configured.clear()
    _configured.update(per_logger)
