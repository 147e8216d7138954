"""Structured logging: one JSON object per line, one line per event.

Every line carries ``ts``, ``level``, ``component`` and ``event``; callers bind
``group`` / ``brokerId`` / ``epoch`` (and anything else) so an operator can grep
one broker group's history across processes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

_configured = False


# One encoder for every line: json.dumps with options builds a new encoder per call, and even a
# kept JSONEncoder builds its C encoder per call. Same output as
# json.dumps(obj, default=str, separators=(",", ":")); a field that cannot be encoded (a cycle)
# falls back to that call and its error.
_ENCODER = json.JSONEncoder(default=str, separators=(",", ":"))
_C_ENCODE = (json.encoder.c_make_encoder(None, str, json.encoder.encode_basestring_ascii, None, ":", ",",
                                         False, False, True)
             if json.encoder.c_make_encoder is not None else None)


def _encode(obj: dict) -> str:
    if _C_ENCODE is not None:
        try:
            return "".join(_C_ENCODE(obj, 0))
        except (RecursionError, ValueError, TypeError):
            pass
    return _ENCODER.encode(obj)


class _JsonFormatter(logging.Formatter):
    def __init__(self) -> None:
        super().__init__()
        self._second = -1
        self._stamp = ""

    def format(self, record: logging.LogRecord) -> str:
        fields = getattr(record, "as_fields", None)
        if fields is None:
            fields = {"component": record.name, "event": record.getMessage()}
        sec = int(record.created)
        if sec != self._second:    # the date part changes once a second: format it once a second
            self._second, self._stamp = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
        out = {"ts": f"{self._stamp}.{int(record.msecs):03d}Z", "level": record.levelname.lower(),
               "pid": record.process}
        out.update(fields)
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return _encode(out)


def configure(level: str | None = None, stream=None) -> None:
    """Install the JSON formatter on the root logger (idempotent).

    Level comes from the argument, else ``AUTOSWITCH_LOG_LEVEL``, else INFO.
    """
    global _configured
    root = logging.getLogger()
    lvl = (level or os.environ.get("AUTOSWITCH_LOG_LEVEL") or "INFO").upper()
    root.setLevel(lvl)
    if _configured:
        return
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.setFormatter(_JsonFormatter())
    root.handlers[:] = [handler]
    # Our lines carry no source file / line / thread: skip the stack walk and thread lookup the
    # logging module does for every record (about a third of a line's cost on the apply path).
    logging._srcfile = None
    logging.logThreads = False
    _configured = True


class EventLogger:
    """A logger that emits events with bound context fields.

    >>> log = get_logger("ha").bind(group="g1", brokerId=2)
    >>> log.info("slave_connected", epoch=3, addr="127.0.0.1:10912")
    """

    __slots__ = ("_logger", "_ctx", "component")

    def __init__(self, component: str, ctx: dict[str, Any] | None = None) -> None:
        self.component = component
        self._logger = logging.getLogger(f"autoswitch.{component}")
        self._ctx = dict(ctx or {})

    def bind(self, **ctx: Any) -> EventLogger:
        merged = dict(self._ctx)
        merged.update(ctx)
        return EventLogger(self.component, merged)

    def enabled_for(self, level: int) -> bool:
        """Whether an event at ``level`` would be emitted (lets hot paths skip building fields)."""
        return self._logger.isEnabledFor(level)

    def _emit(self, level: int, event: str, fields: dict[str, Any], exc_info=None) -> None:
        if not self._logger.isEnabledFor(level):
            return
        payload: dict[str, Any] = {"component": self.component, "event": event}
        payload.update(self._ctx)
        payload.update(fields)
        self._logger.log(level, event, extra={"as_fields": payload}, exc_info=exc_info)

    def debug(self, event: str, **fields: Any) -> None:
        self._emit(logging.DEBUG, event, fields)

    def info(self, event: str, **fields: Any) -> None:
        self._emit(logging.INFO, event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._emit(logging.WARNING, event, fields)

    def error(self, event: str, exc_info=None, **fields: Any) -> None:
        self._emit(logging.ERROR, event, fields, exc_info=exc_info)


def get_logger(component: str, **ctx: Any) -> EventLogger:
    return EventLogger(component, ctx)


class RateLimitedLog:
    """At most one line per key per ``interval_s``: a hostile peer's flood of refused requests
    must not become a flood of log lines (each line then carries how many it stood for).

    Keys are bounded (``max_keys``): past that, all keys share one budget."""

    def __init__(self, log: EventLogger, interval_s: float = 10.0, max_keys: int = 1024,
                 clock: Any = None) -> None:
        import time

        assert interval_s > 0 and max_keys > 0
        self.log = log
        self.interval_s = interval_s
        self.max_keys = max_keys
        self.clock = clock or time.monotonic
        self._last: dict[Any, float] = {}
        self._suppressed: dict[Any, int] = {}

    def warning(self, key: Any, event: str, **fields: Any) -> bool:
        """Log now (True) or count it for the next line of this key (False)."""
        now = self.clock()
        if key not in self._last and len(self._last) >= self.max_keys:
            key = "*"
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        self.log.warning(event, suppressed=self._suppressed.pop(key, 0), **fields)
        if len(self._last) > self.max_keys:      # drop keys idle for a whole interval
            for k in [k for k, t in self._last.items() if now - t >= self.interval_s]:
                self._last.pop(k, None)
        return True
