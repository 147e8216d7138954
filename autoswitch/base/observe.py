"""Observability endpoints of one process: Prometheus ``/metrics``, ``/healthz``, ``/readyz`` on a
small HTTP port, and gRPC health checking on the process's gRPC server.

Every process owns one ``CollectorRegistry`` (several nodes may share a test process). Values that
already live in the process (Raft indexes, roles, offsets) are read at scrape time by a collector,
so the hot paths pay nothing for them; counters and histograms are kept where events happen.

The HTTP server is asyncio, loopback by default, GET only, one request per connection, bounded:
8 KiB of request head, a 5 s read deadline, at most ``MAX_CONNECTIONS`` at once; when full, the
oldest connection that has not sent its request head yet is closed for the newcomer, so idle
connections cannot keep a probe out.

It runs on a thread of its own, with its own event loop (issue 59: the probes failed during floods
and up to 30 s after long-poll clients left, queued behind the data plane on the process's loop).
``/healthz`` and ``/readyz`` are answered there, from what a task on the process's loop refreshes
every ``REFRESH_S`` (the readiness, and that the loop runs at all): they answer while the data
plane is busy, and say 503 when the process's loop has not run for ``STALE_S`` (a frozen process
is not healthy). ``/metrics`` and the pages run on the process's loop, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import parse_qsl

from prometheus_client import CollectorRegistry, Info, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from autoswitch.base.addr import AddressError, split_hostport
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.log import get_logger
from autoswitch.base.version import VERSION

MAX_HEAD_BYTES = 8192
READ_TIMEOUT_S = 5.0
MAX_CONNECTIONS = 64
REFRESH_S = 0.5         # the process's loop refreshes what the probes answer this often
STALE_S = 10.0          # older than this, the process's loop is not running: 503
PAGE_TIMEOUT_S = 30.0   # a page or /metrics on the process's loop
PROBE_WAIT_S = 0.5      # /readyz asks the process's loop this long before it answers what it last said

# (ready, reason): what /readyz answers.
Readiness = Callable[[], tuple[bool, str]]
# More pages: (query parameters, whether the caller presented the HTTP token) -> (HTTP status,
# body, content type). A page shows identities (admin actors, their requests) only to a caller
# with the token.
Page = Callable[[dict[str, str], bool], Awaitable[tuple[int, bytes, str]]]
OPEN_PATHS = ("/healthz", "/readyz")        # probes never need the token


def read_http_token(path: str) -> str:
    """The bearer token of the HTTP surface: the first line of ``path`` (a file, so it stays out of
    the config and the process list); ConfigError when missing or empty."""
    from autoswitch.base.errors import ConfigError

    try:
        with open(path, encoding="utf-8") as f:
            token = f.readline().strip()
    except OSError as e:
        raise ConfigError(f"metrics_token_file {path!r} cannot be read: {e.strerror}", key="metrics_token_file") from None
    if not 16 <= len(token) <= 4096:
        raise ConfigError(f"metrics_token_file {path!r} must hold a token of 16..4096 characters on its first line",
                          key="metrics_token_file")
    return token

_log = get_logger("observe")


class FnCollector:
    """Values computed at scrape time: ``fn()`` yields (name, help, labels dict, value); a name
    ending in ``_total`` is a counter (a running count the process keeps), any other a gauge."""

    def __init__(self, fn: Callable[[], Iterable[tuple[str, str, dict[str, str], float]]]) -> None:
        self._fn = fn

    def collect(self):
        fams: dict[str, GaugeMetricFamily | CounterMetricFamily] = {}
        for name, help_, labels, value in self._fn():
            fam = fams.get(name)
            if fam is None:
                if name.endswith("_total"):
                    fam = fams[name] = CounterMetricFamily(name[:-len("_total")], help_, labels=sorted(labels))
                else:
                    fam = fams[name] = GaugeMetricFamily(name, help_, labels=sorted(labels))
            fam.add_metric([labels[k] for k in sorted(labels)], float(value))
        return list(fams.values())

    def describe(self):
        return []       # computed at scrape time only; no registration-time call of fn()


def add_build_info(registry: CollectorRegistry, component: str) -> None:
    """``autoswitch_build_info{version, component, feature_level} 1`` (the Prometheus convention):
    which version, and the highest feature level it runs, each process runs, for a rolling
    upgrade's dashboards. Once per registry."""
    if registry in _WITH_BUILD_INFO:
        return
    Info("autoswitch_build", "The autoswitch version this process runs", registry=registry).info(
        {"version": VERSION, "component": component, "feature_level": str(SUPPORTED_LEVEL)})
    _WITH_BUILD_INFO.add(registry)


# the registries that have it (a weak set: a registry's life is its owner's, not ours)
_WITH_BUILD_INFO: weakref.WeakSet[CollectorRegistry] = weakref.WeakSet()


class ObserveServer:
    """``/metrics`` (Prometheus text format), ``/healthz`` (200 while the process's loop runs),
    ``/readyz`` (200 or 503 with the reason, from ``ready``)."""

    def __init__(self, listen: str, registry: CollectorRegistry, ready: Readiness, component: str,
                 pages: dict[str, Page] | None = None, token: str = "") -> None:
        """``token``: when set, every path but /healthz and /readyz needs ``Authorization: Bearer
        <token>`` (401 otherwise); pages learn whether the caller presented it."""
        self.token = token
        try:
            self.host, self.port = split_hostport(listen, listen=True)
        except AddressError as e:
            raise ValueError(f"metrics listen address: {e}, got {listen[:80]!r}") from None
        self.registry = registry
        add_build_info(registry, component)
        self.ready = ready
        self.component = component
        self.pages = dict(pages or {})
        self._server: asyncio.AbstractServer | None = None
        self._open = 0
        # connections that have not sent their request head yet, oldest first (evicted when full)
        self._idle: dict[asyncio.StreamWriter, None] = {}
        self._main: asyncio.AbstractEventLoop | None = None      # the process's loop
        self._loop: asyncio.AbstractEventLoop | None = None      # the HTTP server's, on its thread
        self._thread: threading.Thread | None = None
        self._refresher: asyncio.Task | None = None
        # what the probes answer, refreshed on the process's loop: (ready, reason, monotonic time)
        self._probe: tuple[bool, str, float] = (False, "starting", time.monotonic())

    async def start(self) -> int:
        self._main = asyncio.get_running_loop()
        self._refresh()
        self._refresher = self._main.create_task(self._refresh_loop(), name="observe-refresh")
        started: asyncio.Future[int] = self._main.create_future()
        self._thread = threading.Thread(target=self._run, args=(started,), name=f"observe-{self.component}",
                                        daemon=True)
        self._thread.start()
        self.port = await started
        _log.info("observe_listening", component=self.component, listen=f"{self.host}:{self.port}")
        return self.port

    def _run(self, started: asyncio.Future[int]) -> None:
        """The HTTP server's thread: its own event loop until stop()."""
        loop = self._loop = asyncio.new_event_loop()
        main = self._main
        assert main is not None

        async def serve() -> None:
            try:
                self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEAD_BYTES)
            except Exception as e:  # noqa: BLE001 - the bind failed: start() raises it
                err = e
                main.call_soon_threadsafe(lambda: started.done() or started.set_exception(err))
                return
            port = self._server.sockets[0].getsockname()[1]
            main.call_soon_threadsafe(lambda: started.done() or started.set_result(port))

        loop.create_task(serve())
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _refresh(self) -> None:
        try:
            ok, why = self.ready()
        except Exception as e:  # noqa: BLE001 - a readiness that raises is not ready
            ok, why = False, f"readiness failed: {type(e).__name__}"
        self._probe = (ok, why, time.monotonic())

    async def _refresh_loop(self) -> None:
        while True:
            self._refresh()
            await asyncio.sleep(REFRESH_S)

    async def stop(self) -> None:
        if self._refresher is not None:
            self._refresher.cancel()
            with contextlib.suppress(BaseException):
                await self._refresher
        loop, thread = self._loop, self._thread
        if loop is not None and thread is not None:
            async def down() -> None:
                if self._server is not None:
                    self._server.close()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self._server.wait_closed(), 2.0)
                loop.stop()
            with contextlib.suppress(RuntimeError):         # its loop already stopped
                asyncio.run_coroutine_threadsafe(down(), loop)
            await asyncio.to_thread(thread.join, 5.0)
        self._server = None
        self._loop = self._thread = None

    async def _probes(self, path: str) -> tuple[int, bytes]:
        """/healthz and /readyz on the server's thread: the readiness asked of the process's loop,
        and when it does not answer within PROBE_WAIT_S (busy), what it last said."""
        if path == "/readyz":
            with contextlib.suppress(TimeoutError):
                assert self._main is not None
                fut = asyncio.run_coroutine_threadsafe(_call(self._refresh), self._main)
                await asyncio.wait_for(asyncio.wrap_future(fut), PROBE_WAIT_S)
        ok, why, at = self._probe
        age = time.monotonic() - at
        if age > STALE_S:
            return 503, f"the process's event loop has not run for {age:.0f} s\n".encode()
        if path == "/healthz":
            return 200, b"ok\n"
        return (200 if ok else 503), (why or ("ready" if ok else "not ready")).encode() + b"\n"

    async def _on_main(self, coro: Awaitable[Any]) -> Any:
        """Run ``coro`` on the process's loop (pages, /metrics read its state) and wait here."""
        assert self._main is not None
        fut = asyncio.run_coroutine_threadsafe(_awaited(coro), self._main)
        return await asyncio.wait_for(asyncio.wrap_future(fut), PAGE_TIMEOUT_S)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            if not self._idle:
                writer.close()
                return
            oldest = next(iter(self._idle))         # an idle one makes room: a probe always gets in
            self._idle.pop(oldest)
            oldest.transport.abort()
        self._open += 1
        self._idle[writer] = None
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
            finally:
                self._idle.pop(writer, None)
            line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if len(line) != 3 or line[0] not in ("GET", "HEAD"):
                await self._reply(writer, 405, b"GET only\n")
                return
            path, _, qs = line[1].partition("?")
            authed = bool(self.token) and self._presented(head) == self.token
            if self.token and not authed and path not in OPEN_PATHS:
                await self._reply(writer, 401, b"this endpoint needs Authorization: Bearer <token>\n")
                return
            page = self.pages.get(path)
            if page is not None:
                status, body, ctype = await self._on_main(page(dict(parse_qsl(qs[:2000])), authed))
                await self._reply(writer, status, body, ctype, line[0] == "HEAD")
            elif path == "/metrics":
                body = await self._on_main(_call(generate_latest, self.registry))
                await self._reply(writer, 200, body, CONTENT_TYPE_LATEST, line[0] == "HEAD")
            elif path in OPEN_PATHS:
                status, text = await self._probes(path)
                await self._reply(writer, status, text)
            else:
                known = " ".join(["/metrics", "/healthz", "/readyz", *sorted(self.pages)])
                await self._reply(writer, 404, f"not found: {known}\n".encode())
        except Exception:  # noqa: BLE001 - one bad scrape must never hurt the process
            _log.warning("observe_request_failed", component=self.component, exc_info=True)
        finally:
            self._open -= 1
            with contextlib.suppress(Exception):
                writer.close()

    @staticmethod
    def _presented(head: bytes) -> str:
        for raw in head.split(b"\r\n")[1:]:
            name, _, value = raw.partition(b":")
            if name.strip().lower() == b"authorization":
                scheme, _, tok = value.strip().partition(b" ")
                if scheme.lower() == b"bearer":
                    return tok.strip().decode("latin-1")
        return ""

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, status: int, body: bytes,
                     ctype: str = "text/plain; charset=utf-8", head_only: bool = False) -> None:
        reason = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found", 405: "Method Not Allowed",
                  503: "Service Unavailable"}[status]
        writer.write(f"HTTP/1.1 {status} {reason}\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + (b"" if head_only else body))
        with contextlib.suppress(ConnectionError):
            await asyncio.wait_for(writer.drain(), READ_TIMEOUT_S)


async def _awaited(aw: Awaitable[Any]) -> Any:
    return await aw


async def _call(fn: Callable[..., Any], *args: Any) -> Any:
    return fn(*args)
