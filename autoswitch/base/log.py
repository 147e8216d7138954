"""Structured logging: one JSON object per line, one line per event (structlog, orjson).

Every line carries ``ts``, ``level``, ``pid``, ``component`` and ``event``; callers bind
``group`` / ``brokerId`` / ``epoch`` (and anything else) so an operator can grep one broker
group's history across processes. Lines from the standard ``logging`` module (gRPC, asyncio,
py4j) go through the same renderer, so a process writes one format.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import orjson

if TYPE_CHECKING:
    from structlog.typing import EventDict, FilteringBoundLogger, WrappedLogger

    EventLogger = FilteringBoundLogger
else:
    EventLogger = Any

# structlog is imported on first use, not here: it loads asyncio, and the sans-IO cores that log
# must import without an I/O framework (tests/unit/test_import_layers.py).


def _structlog() -> Any:
    """structlog, imported without rich. Its ``dev`` module (always imported by the package) loads
    rich's console and traceback renderers when rich is installed (it is: our CLI's tables); we
    render JSON and never use them, and they cost every process start ~60 ms on a quiet machine
    (docs/operations.md "Process start"). rich stays importable: the mask lasts for this import."""
    mod = sys.modules.get("structlog")
    if mod is not None:
        return mod
    masked = "rich" not in sys.modules
    if masked:
        sys.modules["rich"] = None  # type: ignore[assignment]  # an ImportError for structlog.dev
    try:
        import structlog
    finally:
        if masked:
            del sys.modules["rich"]
    return structlog


_stamp_second = -1
_stamp_prefix = ""


def _stamp(_: WrappedLogger, method: str, ed: EventDict) -> EventDict:
    """ts (UTC, milliseconds), level and pid first, then the event's own fields."""
    global _stamp_second, _stamp_prefix
    now = time.time()
    sec = int(now)
    if sec != _stamp_second:   # the date part changes once a second: format it once a second
        _stamp_second, _stamp_prefix = sec, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(sec))
    out = {"ts": f"{_stamp_prefix}.{int((now - sec) * 1000):03d}Z",
           "level": "warning" if method == "warn" else method, "pid": os.getpid()}
    exc = ed.pop("exc_info", None)
    if exc:
        out["exc"] = _structlog().processors.ExceptionRenderer()(None, method, {"exc_info": exc})["exception"]
    out["component"] = ed.pop("component", None)
    out["event"] = ed.pop("event", None)
    out.update(ed)
    return out


def _render(_: WrappedLogger, __: str, ed: EventDict) -> bytes:
    # default=str: paths, enums and other objects become their text instead of failing the line.
    return orjson.dumps(ed, default=str, option=orjson.OPT_NON_STR_KEYS)


class _Sink:
    """Where rendered lines go: the given stream, else whatever ``sys.stderr`` is at write time
    (a stream captured at configure time may be closed by then: test runners swap stderr)."""

    def __init__(self, stream=None) -> None:
        self._stream = stream
        self._lock = threading.Lock()

    def msg(self, message: bytes) -> None:
        out = self._stream if self._stream is not None else sys.stderr
        target = getattr(out, "buffer", out)
        with self._lock:
            if isinstance(target, io.TextIOBase):
                target.write(message.decode() + "\n")
            else:
                cast(BinaryIO, target).write(message + b"\n")
            target.flush()

    log = debug = info = warn = warning = error = critical = exception = fatal = msg


class _StderrHandler(logging.StreamHandler):
    """A standard-logging handler that writes to the current ``sys.stderr`` (see _Sink)."""

    @property
    def stream(self):  # noqa: D102
        return sys.stderr

    @stream.setter
    def stream(self, _value) -> None:
        pass


_PROCESSORS: list[Any] = [_stamp, _render]
_generation = 0   # bumped by configure() (0: not yet): loggers re-bind to the new level and stream


def configure(level: str | None = None, stream=None, *, stdlib: bool = True) -> None:
    """Route every logger to one JSON-lines stream (stderr by default). Level comes from the
    argument, else ``AUTOSWITCH_LOG_LEVEL``, else INFO. May be called again (tests, the CLI).
    ``stdlib``: also take over the standard ``logging`` root handler (what a process wants; a
    library import must not)."""
    name = (level or os.environ.get("AUTOSWITCH_LOG_LEVEL") or "INFO").upper()
    lvl = logging.getLevelName(name)
    if not isinstance(lvl, int):
        raise ValueError(f"unknown log level {name!r}")
    structlog = _structlog()

    global _generation
    _generation += 1
    sink = _Sink(stream)
    structlog.configure(
        processors=list(_PROCESSORS),
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=lambda *_args: sink,
        cache_logger_on_first_use=False,
    )
    if not stdlib:
        return
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(structlog.stdlib.ProcessorFormatter(
        processors=[_stdlib_fields, structlog.stdlib.ProcessorFormatter.remove_processors_meta, _stamp,
                    lambda *a: _render(*a).decode()]))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(lvl)


def _drop_event(*_: Any) -> EventDict:
    raise _structlog().DropEvent


@contextlib.contextmanager
def silenced() -> Iterator[None]:
    """Nothing is logged inside (the simulators run thousands of seeds whose refused messages
    and recoveries would each be a line); the configuration before is restored after."""
    global _generation
    structlog = _structlog()
    before, saved = _generation, structlog.get_config()
    # below CRITICAL filtered where it is called (no cost); CRITICAL dropped by the one processor
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.CRITICAL),
                        processors=[_drop_event])
    _generation = max(_generation, 0) + 1
    try:
        yield
    finally:
        structlog.configure(**saved)
        # never configured before: the next use configures the default again
        _generation = 0 if before == 0 else _generation + 1


def _stdlib_fields(_: WrappedLogger, __: str, ed: EventDict) -> EventDict:
    record = ed.get("_record")
    if record is not None:
        ed = {"component": record.name, **ed}
        if record.exc_info:
            ed["exc_info"] = record.exc_info
    return ed


class _Logger:
    """A bound structlog logger that follows ``configure``: module-level loggers exist before the
    CLI configures. Re-binds once per configure, not per call: a filtered-out debug() then costs
    ~0.3 us instead of the ~2 us of building a logger on every call."""

    __slots__ = ("_ctx", "_gen", "_bound")

    def __init__(self, ctx: dict[str, Any]) -> None:
        self._ctx = ctx
        self._gen = -1
        self._bound: FilteringBoundLogger | None = None

    def __getattr__(self, name: str) -> Any:
        if self._gen != _generation:
            if _generation == 0:
                # Nothing configured yet (library use, tests, the simulator): warnings and errors
                # as JSON lines on stderr, like the standard logging module's default; never
                # structlog's console format. Standard logging is left to the host.
                configure(os.environ.get("AUTOSWITCH_LOG_LEVEL") or "WARNING", stdlib=False)
            self._bound = _structlog().get_logger().bind(**self._ctx)
            self._gen = _generation
        return getattr(self._bound, name)


def get_logger(component: str, **ctx: Any) -> EventLogger:
    """A logger with ``component`` and ``ctx`` bound; ``.bind(**more)`` adds fields."""
    return cast(EventLogger, _Logger({"component": component, **ctx}))



class RateLimitedLog:
    """At most one line per key per ``interval_s``: a hostile peer's flood of refused requests
    must not become a flood of log lines (each line then carries how many it stood for).

    Keys are bounded (``max_keys``): past that, all keys share one budget."""

    def __init__(self, log: EventLogger, interval_s: float = 10.0, max_keys: int = 1024,
                 clock: Any = None) -> None:
        assert interval_s > 0 and max_keys > 0
        self.log = log
        self.interval_s = interval_s
        self.max_keys = max_keys
        self.clock = clock or time.monotonic
        self._last: dict[Any, float] = {}
        self._suppressed: dict[Any, int] = {}

    def info(self, key: Any, event: str, **fields: Any) -> bool:
        return self._emit(self.log.info, key, event, fields)

    def warning(self, key: Any, event: str, **fields: Any) -> bool:
        """Log now (True) or count it for the next line of this key (False)."""
        return self._emit(self.log.warning, key, event, fields)

    def error(self, key: Any, event: str, **fields: Any) -> bool:
        return self._emit(self.log.error, key, event, fields)

    def _emit(self, write: Any, key: Any, event: str, fields: dict[str, Any]) -> bool:
        now = self.clock()
        if key not in self._last and len(self._last) >= self.max_keys:
            key = "*"
        last = self._last.get(key)
        if last is not None and now - last < self.interval_s:
            self._suppressed[key] = self._suppressed.get(key, 0) + 1
            return False
        self._last[key] = now
        write(event, suppressed=self._suppressed.pop(key, 0), **fields)
        if len(self._last) > self.max_keys:      # drop keys idle for a whole interval
            for k in [k for k, t in self._last.items() if now - t >= self.interval_s]:
                self._last.pop(k, None)
        return True
