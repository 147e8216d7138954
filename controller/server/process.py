"""The controller process: a controller node and/or a name server, until SIGTERM or SIGINT.

``run_forever`` is what `autoswitch controller` and `autoswitch namesrv` run: it wires the name
server's route table to the node it is embedded in (routes may not outrank the controller), or
serves it alone, and turns a startup failure into one clear log line and exit code 2.
"""

from __future__ import annotations

import asyncio
import gc
import signal
import time
from dataclasses import dataclass

import grpc
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.namesrv import MAX_CONCURRENT_RPCS, NameServerServicer, PolledAuthority, RouteTable
from autoswitch.controller.remoting.routes import RocketRoutes
from autoswitch.controller.server.authz import NAMESRV_RULES, STANDALONE_NAMESRV_RULES
from autoswitch.controller.server.node import ControllerNode
from prometheus_client import CollectorRegistry

from autoswitch import __version__
from autoswitch.base import tls
from autoswitch.base.auth import AuthConfig, Guard
from autoswitch.base.auth_interceptor import server_interceptor
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.grpc_health import add_grpc_health
from autoswitch.base.log import get_logger
from autoswitch.base.observe import FnCollector, ObserveServer
from autoswitch.base.stream_limits import StreamBudget, stream_limit_interceptor
from autoswitch.base.waits import cancel_and_wait
from autoswitch.proto import namesrv_pb2_grpc

_log = get_logger("controller.process")


def _tune_gc() -> None:
    """Process-level GC settings, once the node has started (modules, gRPC, recovered state).

    Those long-lived objects never become garbage; gc.freeze() keeps every later full collection
    from walking them again. The state machine allocates a few dozen small objects per write and
    almost no reference cycles, so the young generation is collected every 20,000 allocations
    instead of 700. py-spy under the write bench: gc_collect_main was ~9% of the leader's busy samples."""
    gc.freeze()
    gc.set_threshold(20_000, 20, 20)


@dataclass(frozen=True)
class NameServerSettings:
    """A name server's settings (the `autoswitch namesrv` flags, checked by the CLI)."""

    listen: str
    route_ttl_s: float
    tls: tls.TLSConfig
    auth: AuthConfig
    controllers: tuple[str, ...] = ()     # a standalone name server asks these for the masters
    metrics_listen: str = ""              # standalone only: an embedded one shares the node's


class NameServer:
    """The route table and its servicer; hosted by a controller node or on its own server."""

    def __init__(self, settings: NameServerSettings) -> None:
        self.settings = settings
        self.table = RouteTable(default_ttl_s=settings.route_ttl_s)
        self.servicer = NameServerServicer(self.table)
        self.routes = FnCollector(lambda: [("autoswitch_namesrv_routes", "Broker routes the name server holds", {},
                                            len(self.table))])
        self._tasks: list[asyncio.Task[None]] = []
        self._server: grpc.aio.Server | None = None
        self._listener: tls.Listener | None = None
        self._observe: ObserveServer | None = None

    def register(self, server: grpc.aio.Server) -> None:
        namesrv_pb2_grpc.add_NameServerServicer_to_server(self.servicer, server)

    def embed(self, node: ControllerNode) -> None:
        """Serve from ``node``'s server, with its metrics. Routes may not outrank the controller:
        only the master and MasterEpoch the node applied can be a group's master route."""
        node.metrics.registry.register(self.routes)
        self.table.authority = node.applied_master
        node.add_servicer(self.register, NAMESRV_RULES)
        if node.config.remoting_listen:
            # RocketMQ brokers and clients find each other here too (docs/rocketmq.md): a slave is
            # answered with the master the controllers elected
            def master_address(group: str) -> str | None:
                v = node.local_replica_info(group)
                return v.master_address if v is not None else None

            node.rocketmq_routes = RocketRoutes(master_address)

    def start_tasks(self) -> None:
        if self.settings.controllers:
            authority = PolledAuthority(tls=self.settings.tls)
            self.table.authority = authority
            self.table.on_unknown_master = authority.claimed
            self._tasks.append(asyncio.create_task(authority.run(list(self.settings.controllers))))
        self._tasks.append(asyncio.create_task(self._expire_loop()))

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(1.0)
            self.table.expire(time.monotonic())

    async def serve_alone(self) -> None:
        """A server of its own (no controller node in this process)."""
        st = self.settings
        interceptors: list[grpc.aio.ServerInterceptor] = []
        if st.auth.enabled:
            guard = Guard("namesrv.auth", st.auth, STANDALONE_NAMESRV_RULES)
            interceptors.append(server_interceptor(guard, tls.peer_identity))
        interceptors.append(stream_limit_interceptor(StreamBudget(MAX_CONCURRENT_RPCS), "namesrv.streams",
                                                     st.auth.enabled))
        server = self._server = grpc.aio.server(options=[("grpc.so_reuseport", 0)], interceptors=interceptors,
                                                maximum_concurrent_rpcs=MAX_CONCURRENT_RPCS)
        self.register(server)
        health, hpb = add_grpc_health(server)
        try:
            self._listener = await tls.bind(server, st.listen, st.tls, "namesrv")
        except RuntimeError as e:
            raise OSError(f"cannot listen on {st.listen}: {e}") from None
        if self._listener.port == 0:
            raise OSError(f"cannot listen on {st.listen}")
        await server.start()
        await health.set("", hpb.HealthCheckResponse.SERVING)
        if st.metrics_listen:
            registry = CollectorRegistry(auto_describe=False)
            registry.register(self.routes)
            self._observe = ObserveServer(st.metrics_listen, registry, lambda: (True, "serving"), "namesrv")
            await self._observe.start()
        if not st.tls.enabled:
            _log.warning("plaintext", listen=st.listen,
                         note="no TLS: brokers and clients are not authenticated; loopback development only")
        elif not st.auth.enabled:
            _log.warning("no_authorization", listen=st.listen,
                         note="auth off: any holder of a certificate of the CA may register routes")
        _log.info("namesrv_started", version=__version__, featureLevelSupported=SUPPORTED_LEVEL, listen=st.listen)

    async def stop(self) -> None:
        if self._observe is not None:
            await self._observe.stop()
        if self._listener is not None:
            await self._listener.close()
        if self._server is not None:
            await self._server.stop(grace=0.5)
        await cancel_and_wait(self._tasks)


def run_forever(config: ControllerConfig | None, namesrv: NameServerSettings | None) -> int:
    """Process entry: run a controller node and/or a name server until SIGTERM/SIGINT."""

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        node = ControllerNode(config) if config is not None else None
        ns = NameServer(namesrv) if namesrv is not None else None
        if ns is not None:
            ns.start_tasks()
        if node is not None:
            if ns is not None:
                ns.embed(node)
            await node.start()
        elif ns is not None:
            await ns.serve_alone()
        _tune_gc()
        watch = [asyncio.create_task(stop.wait())] + ([asyncio.create_task(node.wait_stopped())] if node else [])
        await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
        _log.info("shutting_down")
        if node is not None:
            await node.stop()
        if ns is not None:
            await ns.stop()
        await cancel_and_wait(watch)
        return 0

    try:
        return asyncio.run(main())
    except (OSError, AutoswitchError) as e:
        # Startup failures (port in use, corrupt Raft storage, bad config): one clear line, exit 2.
        fields = e.to_dict() if isinstance(e, AutoswitchError) else {"code": "OS_ERROR", "message": str(e)}
        _log.error("startup_failed", **fields)
        return 2
