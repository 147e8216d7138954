"""The broker process: its composition root. ``serve`` builds the broker, its gRPC service, the
fetch port and the observability server, and in controller mode the ReplicasManager
(``start_replicas``), wires them together and runs them until a signal; the order of start and
stop lives here and nowhere else (docs/architecture.md)."""

from __future__ import annotations

import asyncio
import faulthandler
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

import grpc
from autoswitch.broker.client.client import channel_options
from autoswitch.broker.clients import ClientTable
from autoswitch.broker.config import BrokerConfig, parse_hostport
from autoswitch.broker.fetch_server import FetchServer
from autoswitch.broker.server import Broker, ControllerSeams
from autoswitch.broker.service import BrokerServicer

from autoswitch import __version__
from autoswitch.base import supervise
from autoswitch.base.auth import Guard
from autoswitch.base.auth_interceptor import server_interceptor
from autoswitch.base.features import SUPPORTED_LEVEL
from autoswitch.base.grpc_health import add_grpc_health
from autoswitch.base.log import get_logger
from autoswitch.base.stream_limits import StreamBudget, stream_limit_interceptor
from autoswitch.base.tls import Listener, bind, peer_identity, server_ssl_context
from autoswitch.base.waits import cancel_and_wait
from autoswitch.proto import broker_pb2_grpc as pbg

if TYPE_CHECKING:
    from autoswitch.broker.metrics import BrokerMetrics
    from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter

# tests: runs once the gRPC port is open instead of controller mode's start_replicas; returns
# what runs at shutdown before the broker stops
Attach = Callable[[Broker], Awaitable[Callable[[], Awaitable[None]] | None]]

SHUTDOWN_STACK_DUMP_S = 20.0


def _dump_tasks() -> None:
    # Task.print_stack fails on frames without a line number (gRPC's Cython coroutines).
    for task in asyncio.all_tasks():
        frames = [f"{f.f_code.co_filename}:{f.f_lineno} in {f.f_code.co_name}" for f in task.get_stack(limit=12)]
        print(f"task {task.get_name()} {task.get_coro()!r}: " + " <- ".join(reversed(frames)), file=sys.stderr,
              flush=True)


async def serve(cfg: BrokerConfig, stop_event: asyncio.Event | None = None, attach: Attach | None = None) -> int:
    """Run one broker process until SIGTERM/SIGINT (or stop_event); returns an exit code.

    Controller mode: once the gRPC port is open, the ReplicasManager starts (``start_replicas``);
    at shutdown it stops BEFORE the broker, so no role change races the final flush, and the
    clean-shutdown marker and the farewell to the controllers come after the store closed.
    ``attach(broker)`` (tests) replaces that step: it runs at the same moment, and the coroutine
    function it returns, if any, runs at shutdown before the broker stops."""
    log = get_logger("broker", group=cfg.group, brokerId=cfg.known_broker_id)

    def fatal(reason: str) -> None:
        # A failed fsync (PostgreSQL's rule: after EIO the page cache cannot be trusted): this
        # run's crash is unclean, and the process ends now, before it acknowledges anything more.
        if broker.replicas is not None:
            broker.replicas.marker.poison(reason)
        log.critical("process_exiting", reason=reason, exitCode=supervise.EXIT_IO_FAILURE)
        supervise.process_exit(supervise.EXIT_IO_FAILURE)

    broker = Broker(cfg, fatal=fatal)
    replicas: ReplicasAdapter | None = None
    stop_event = stop_event or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop_event.set)
    # No SO_REUSEPORT: a second process on our port must fail to bind, not silently take half of
    # our connections (gRPC's default would allow that).
    # maximum_concurrent_rpcs: past it gRPC answers RESOURCE_EXHAUSTED at once, so a flood of
    # calls cannot pile up tasks and memory (produce has its own, smaller max_inflight_produce).
    interceptors = []
    guard: Guard | None = None
    if cfg.auth:
        from autoswitch.broker.authz import BROKER_RULES

        from autoswitch.base.tls import certificate_cluster, peer_cluster

        # controller certificates count as peers here only if bound to our own cluster
        guard = Guard("broker.auth", cfg.auth_config, BROKER_RULES, own_cluster=certificate_cluster(cfg.tls.cert)
                      if cfg.tls.cert else None)
        interceptors.append(server_interceptor(guard, peer_identity, peer_cluster))
    elif cfg.tls.enabled:
        log.warning("no_authorization", listen=cfg.listen,
                    note="auth = false: any holder of a certificate of the CA may produce, consume or switch roles")
    interceptors.append(stream_limit_interceptor(StreamBudget(cfg.max_concurrent_rpcs), "broker.streams", cfg.auth))
    server = grpc.aio.server(options=channel_options(cfg.max_request_bytes) + [("grpc.so_reuseport", 0)],
                             interceptors=interceptors, maximum_concurrent_rpcs=cfg.max_concurrent_rpcs)
    clients = ClientTable()         # who is connected, over gRPC and the fetch port (admin client-connections)
    servicer = BrokerServicer(broker, clients)
    observe = None
    metrics: BrokerMetrics | None = None
    if cfg.metrics_listen:      # off: the request path is exactly the uninstrumented one
        # imported here: with metrics off a broker loads no Prometheus client (a faster start)
        from autoswitch.broker.metrics import BrokerMetrics

        from autoswitch.base.observe import ObserveServer, read_http_token

        metrics = BrokerMetrics(broker)
        metrics.instrument(servicer)
        observe = ObserveServer(cfg.metrics_listen, metrics.registry, metrics.readiness, "broker",
                                token=read_http_token(cfg.metrics_token_file) if cfg.metrics_token_file else "")
    pbg.add_BrokerServiceServicer_to_server(servicer, server)
    health, health_pb = add_grpc_health(server)
    host, port = parse_hostport(cfg.listen, "listen")
    if not cfg.tls.enabled:
        log.warning("plaintext", listen=cfg.listen, ha_listen=cfg.ha_listen,
                    note="no TLS: clients, controllers and replicas are not authenticated")
    try:
        listener = await bind(server, f"{host}:{port}", cfg.tls, "broker")
    except RuntimeError as e:  # grpc raises instead of returning 0 in recent versions
        log.error("listen_failed", listen=cfg.listen, error=str(e))
        listener = Listener(0)
    if listener.port == 0:
        print(f'{{"error": {{"code": "LISTEN_FAILED", "message": "cannot bind {cfg.listen}"}}}}', file=sys.stderr)
        broker.store.close()
        return 2
    await broker.start()
    fetch: FetchServer | None = None
    try:
        # Role first, then the gRPC port: a client that can connect sees the configured role.
        if cfg.role == "master":
            epoch = cfg.epoch or broker.last_local_epoch() + 1
            await broker.become_master(epoch)
        elif cfg.role == "slave":
            assert cfg.master_ha is not None
            epoch = cfg.epoch or max(broker.last_local_epoch(), 1)
            await broker.become_slave(epoch, parse_hostport(cfg.master_ha, "master_ha"), cfg.master_addr)
        await server.start()
        if cfg.fetch_listen:
            fetch = FetchServer(servicer.consume, guard, cfg.max_fetch_connections, log, observer=metrics,
                                max_inflight_bytes=cfg.fetch_max_inflight_bytes,
                                slow_reader_timeout_s=cfg.fetch_slow_reader_timeout_s,
                                max_reply_bytes=cfg.max_consume_bytes,
                                produce=servicer.Produce, max_produce_bytes=cfg.max_request_bytes,
                                max_per_identity=cfg.max_fetch_connections_per_identity, clients=clients)
            if metrics is not None:
                metrics.fetch_server = fetch
            fhost, fport = parse_hostport(cfg.fetch_listen, "fetch_listen")
            await fetch.start(fhost, fport, server_ssl_context(cfg.tls) if cfg.tls.enabled else None)
        await health.set("", health_pb.HealthCheckResponse.SERVING)
        if observe is not None:
            await observe.start()
        log.info("broker_started", version=__version__, featureLevelSupported=SUPPORTED_LEVEL, listen=cfg.listen, ha_listen=cfg.ha_listen, fetch_listen=cfg.fetch_listen, role=broker.role,
                 epoch=broker.master_epoch, ack_mode=cfg.ack_mode, flush=cfg.flush,
                 mode="controller" if cfg.controller_mode else "static", eventLoop=cfg.event_loop)
        detach = None
        if attach is not None:
            detach = await attach(broker)
        elif cfg.controller_mode:
            replicas = await start_replicas(broker)
        route_task = None
        if cfg.namesrv:
            from autoswitch.broker.route_registrar import RouteRegistrar

            route_task = asyncio.get_running_loop().create_task(RouteRegistrar(broker).run())
        try:
            await stop_event.wait()
            broker.log.info("broker_stopping")  # bound to the registered brokerId in controller mode
            # A stop that hangs says where: every thread's and every task's stack in the process log.
            faulthandler.dump_traceback_later(SHUTDOWN_STACK_DUMP_S, exit=False)
            loop.call_later(SHUTDOWN_STACK_DUMP_S, _dump_tasks)
            if broker.replicas is not None and cfg.handover_on_shutdown:
                from autoswitch.broker.replicas.handover import hand_over_on_shutdown

                await hand_over_on_shutdown(broker, broker.replicas, cfg.handover_timeout_ms / 1000)
        finally:
            await cancel_and_wait([route_task])
            if detach is not None:
                await detach()
            if replicas is not None:
                await replicas.aclose(keep_client=True)     # the client is still needed: farewell
    finally:
        await health.enter_graceful_shutdown()
        if fetch is not None:
            await fetch.close()
        if observe is not None:
            await observe.stop()
        await listener.close()
        await server.stop(grace=1.0)
        await broker.stop()
        if replicas is not None:
            replicas.mark_clean_shutdown()      # only once the store is flushed and closed
            await replicas.farewell()           # only now: it serves nothing any more
    return 0


async def start_replicas(broker: Broker) -> ReplicasAdapter:
    """Controller mode (docs/replicas-manager.md): build the leader-following controller client,
    the role-change hook runner and the ReplicasManager's adapter for this broker, hand the broker
    its seams (the write fence, the SyncStateSet proposer, the HA registry), and start. The broker
    stays fenced until the controllers name its role."""
    from autoswitch.broker.replicas.hooks import HookRunner
    from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter
    from autoswitch.controller.api import connect

    cfg = broker.cfg
    config = cfg.replicas_config()
    api = connect(config.controllers, rpc_timeout_s=3.0, tls=cfg.tls)
    runner = HookRunner(cfg.hook_config())
    adapter = ReplicasAdapter(config, api, broker, Path(cfg.data_dir), runner, ha_address=cfg.ha_listen,
                              ack_mode=cfg.ack_mode, durable_acks=broker.durable_acks, owns_api=True)
    broker.enter_controller_mode(ControllerSeams(write_fence=adapter.write_fence, proposer=adapter.proposer,
                                                 registry=adapter.registry, replicas=adapter))
    try:
        await adapter.start()
    except BaseException:
        await runner.close()
        await api.close()
        raise
    return adapter
