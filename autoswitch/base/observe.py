"""Observability endpoints of one process: Prometheus ``/metrics``, ``/healthz``, ``/readyz`` on a
small HTTP port, and gRPC health checking on the process's gRPC server.

Every process owns one ``CollectorRegistry`` (several nodes may share a test process). Values that
already live in the process (Raft indexes, roles, offsets) are read at scrape time by a collector,
so the hot paths pay nothing for them; counters and histograms are kept where events happen.

The HTTP server is asyncio, loopback by default, GET only, one request per connection, bounded:
8 KiB of request head, a 5 s read deadline, at most ``MAX_CONNECTIONS`` at once.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable
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
    if getattr(registry, "_autoswitch_build_info", False):
        return
    Info("autoswitch_build", "The autoswitch version this process runs", registry=registry).info(
        {"version": VERSION, "component": component, "feature_level": str(SUPPORTED_LEVEL)})
    registry._autoswitch_build_info = True     # type: ignore[attr-defined]


class ObserveServer:
    """``/metrics`` (Prometheus text format), ``/healthz`` (200 while the process serves),
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

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, self.port, limit=MAX_HEAD_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]
        _log.info("observe_listening", component=self.component, listen=f"{self.host}:{self.port}")
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self._open >= MAX_CONNECTIONS:
            writer.close()
            return
        self._open += 1
        try:
            try:
                head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), READ_TIMEOUT_S)
            except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, TimeoutError, ConnectionError):
                return
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
                status, body, ctype = await page(dict(parse_qsl(qs[:2000])), authed)
                await self._reply(writer, status, body, ctype, line[0] == "HEAD")
            elif path == "/metrics":
                await self._reply(writer, 200, generate_latest(self.registry), CONTENT_TYPE_LATEST, line[0] == "HEAD")
            elif path == "/healthz":
                await self._reply(writer, 200, b"ok\n")
            elif path == "/readyz":
                ok, why = self.ready()
                await self._reply(writer, 200 if ok else 503, (why or ("ready" if ok else "not ready")).encode() + b"\n")
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
