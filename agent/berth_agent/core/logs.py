"""JSON logs: one object per line with time, level, logger, msg, plus the fields passed as extra={"fields": {...}}.

Callers pass only secret-free values (errors from the pipeline are secret-free by construction); this module
formats what it is given and adds nothing from requests or environment.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import TextIO

_RESERVED = ("time", "level", "logger", "msg")


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds")
            .replace("+00:00", "Z"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        fields = getattr(record, "fields", None)
        if isinstance(fields, dict):
            for key, value in fields.items():
                # A field never overwrites the four fixed keys: readers rely on them.
                entry[key if key not in _RESERVED else f"field_{key}"] = value
        if record.exc_info and record.exc_info[0] is not None:
            # Type and message only: a traceback is many lines and the reader wants one object per line.
            # Code bugs still show their origin through the logger name and message.
            entry["exception"] = f"{record.exc_info[0].__name__}: {record.exc_info[1]}"
        return json.dumps(entry, default=str, ensure_ascii=False)


class _JsonHandler(logging.StreamHandler):
    """Marker class so setup_json_logging can replace its own handler when called again."""


def setup_json_logging(level: int | str = "INFO", stream: TextIO | None = None) -> logging.Handler:
    """Send every log record of the process to `stream` (stderr) as one JSON object per line."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if isinstance(handler, _JsonHandler):
            root.removeHandler(handler)
    handler = _JsonHandler(stream or sys.stderr)
    handler.setFormatter(JsonFormatter())
    root.addHandler(handler)
    root.setLevel(level.upper() if isinstance(level, str) else level)
    # Library chatter is not an agent action: these stay at WARNING whatever the agent's level.
    for noisy in ("watchdog", "aiohttp.access"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    return handler


__all__ = ["JsonFormatter", "setup_json_logging"]
