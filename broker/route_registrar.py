"""The broker's route with the name servers: every ``route_interval_ms`` the broker registers
``(cluster, group, brokerId, address, role, masterEpoch, haAddress, fetchAddress)`` with a TTL of
``route_ttl_ms``, so a dead broker's route disappears by itself (RocketMQ's NameServer does the
same with a 120 s broker expiry; we use seconds because failover speed depends on it). A master
whose writes are fenced (lease expired, deposed) registers as ``fenced``: clients must not be
sent to a broker that will refuse them. Clients find the route with autoswitch.broker.client.route.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

import grpc
from autoswitch.broker.client.route import NAMESRV_RPC_TIMEOUT_S

from autoswitch.base.addr import split_hostport_list
from autoswitch.base.limits import MAX_NAMESRVS
from autoswitch.base.log import get_logger
from autoswitch.base.tls import grpc_channel
from autoswitch.base.waits import wait_event

if TYPE_CHECKING:
    from autoswitch.broker.server import Broker

_log = get_logger("broker.route")


class RouteRegistrar:
    """Periodic RegisterRoute for one broker (controller or static mode), with every name server
    of its ``namesrv`` list (RocketMQ's brokers register with every namesrvAddr): a client asking
    any of them finds the route, so losing one machine's name server loses no route."""

    def __init__(self, broker: Broker) -> None:
        from autoswitch.proto import namesrv_pb2_grpc as nsg

        cfg = broker.cfg
        assert cfg.namesrv, "a broker registers routes only with a name server configured"
        self.broker = broker
        self.interval_s = cfg.route_interval_ms / 1000.0
        self.ttl_ms = cfg.route_ttl_ms
        self.addrs = split_hostport_list(cfg.namesrv, MAX_NAMESRVS)
        self._channels = [grpc_channel(a, cfg.tls) for a in self.addrs]
        self._stubs = [nsg.NameServerStub(ch) for ch in self._channels]
        self.registrations = 0
        self._last_error: dict[str, str | None] = dict.fromkeys(self.addrs)
        # A role change re-registers at once: clients must find a new master without waiting for
        # the next period (failover time = detection + election + this).
        self._changed = asyncio.Event()
        broker.add_role_hook(self._on_role)
        broker.add_fence_listener(lambda reason: self._changed.set())

    def _on_role(self, role: str, epoch: int) -> None:
        self._changed.set()

    def route(self) -> Any:
        from autoswitch.proto import namesrv_pb2 as ns

        b = self.broker
        role = b.role
        if role == "master" and b.fence_reason():
            role = "fenced"
        return ns.BrokerRoute(
            cluster_name=b.cfg.cluster, broker_name=b.group, broker_id=b.broker_id, address=b.cfg.listen,
            role=role, master_epoch=b.master_epoch, ha_address=b.cfg.ha_listen, fetch_address=b.cfg.fetch_listen,
        )

    async def _register(self, stub: Any, request: Any) -> str | None:
        """None when the name server took the route, else why not."""
        try:
            reply = await stub.RegisterRoute(request, timeout=NAMESRV_RPC_TIMEOUT_S)
        except grpc.aio.AioRpcError as e:
            return f"{e.code().name} {e.details()}"
        return None if reply.header.code == 0 else f"code {reply.header.code}: {reply.header.message}"

    async def register_once(self) -> dict[str, str | None]:
        """Register with every name server at once: {address: None, or why it refused}."""
        from autoswitch.proto import namesrv_pb2 as ns

        request = ns.RegisterRouteRequest(route=self.route(), ttl_ms=self.ttl_ms)
        errors = await asyncio.gather(*(self._register(stub, request) for stub in self._stubs))
        return dict(zip(self.addrs, errors, strict=True))

    async def run(self) -> None:
        # Controller mode: no route before the controller named our brokerId (a route under the
        # placeholder id would overwrite another broker's, and authorization refuses it anyway).
        try:
            await self.broker.broker_id_known.wait()
            while True:
                for addr, err in (await self.register_once()).items():
                    if err is None:
                        self.registrations += 1
                    if err != self._last_error[addr]:  # log transitions, not every failed period
                        if err:
                            _log.warning("route_register_failed", group=self.broker.group, namesrv=addr, error=err)
                        else:
                            _log.info("route_registered", group=self.broker.group, brokerId=self.broker.broker_id,
                                      namesrv=addr)
                        self._last_error[addr] = err
                await wait_event(self._changed, self.interval_s)
                self._changed.clear()
        finally:
            # Best effort: a stopping broker should stop attracting clients now, not after the TTL.
            if self.broker.broker_id_known.is_set():
                from autoswitch.proto import namesrv_pb2 as ns

                request = ns.UnregisterRouteRequest(cluster_name=self.broker.cfg.cluster,
                                                    broker_name=self.broker.group, broker_id=self.broker.broker_id)
                await asyncio.gather(*(stub.UnregisterRoute(request, timeout=0.5) for stub in self._stubs),
                                     return_exceptions=True)
            for ch in self._channels:
                await ch.close()
