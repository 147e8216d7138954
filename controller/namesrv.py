"""Name server: broker routes with expiry, master lookup by highest MasterEpoch.

RouteTable is the sans-IO core (clock passed in). NameServerServicer is the thin gRPC adapter.
Like RocketMQ's NameServer, routes are soft state: a broker re-registers periodically and a
route that is not refreshed within its TTL disappears. Unlike RocketMQ (which trusts the last
registration), the master of a group is the master route with the highest masterEpoch, so a
stale master that still re-registers after a failover never overrides the new one.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from autoswitch.log import get_logger
from autoswitch.proto import namesrv_pb2 as pb
from autoswitch.proto import namesrv_pb2_grpc as pbg

_log = get_logger("namesrv")

OK = 0
BAD_REQUEST = 1
NOT_FOUND = 2
LIMIT_REACHED = 3
ROLES = ("master", "slave", "fenced")
MAX_NAME = 255
MAX_ADDR = 255


@dataclass
class Route:
    cluster: str
    group: str
    broker_id: int
    address: str
    role: str
    master_epoch: int
    ha_address: str
    expires_at: float
    refreshed_at: float


class RouteError(ValueError):
    pass


class RouteTable:
    def __init__(self, default_ttl_s: float = 30.0, max_routes: int = 200_000) -> None:
        assert default_ttl_s > 0 and max_routes > 0
        self.default_ttl_s = default_ttl_s
        self.max_routes = max_routes
        self._routes: dict[tuple[str, int], Route] = {}   # (group, brokerId) -> route

    def __len__(self) -> int:
        return len(self._routes)

    def register(self, r: pb.BrokerRoute, ttl_s: float, now: float) -> tuple[bool, int]:
        """Insert/refresh; returns (this route is the group's master, the group's master epoch)."""
        if not r.broker_name or len(r.broker_name) > MAX_NAME or len(r.cluster_name) > MAX_NAME:
            raise RouteError("broker_name required, names at most 255 chars")
        if r.broker_id <= 0:
            raise RouteError("broker_id must be > 0")
        if not r.address or len(r.address) > MAX_ADDR or len(r.ha_address) > MAX_ADDR:
            raise RouteError("address required, at most 255 chars")
        if r.role not in ROLES:
            raise RouteError(f"role must be one of {ROLES}")
        if r.master_epoch < 0:
            raise RouteError("master_epoch must be >= 0")
        ttl = ttl_s if ttl_s > 0 else self.default_ttl_s
        ttl = min(ttl, 3600.0)
        key = (r.broker_name, r.broker_id)
        if key not in self._routes and len(self._routes) >= self.max_routes:
            self.expire(now)
            if len(self._routes) >= self.max_routes:
                raise OverflowError("route table full")
        self._routes[key] = Route(r.cluster_name, r.broker_name, r.broker_id, r.address, r.role,
                                  r.master_epoch, r.ha_address, now + ttl, now)
        m = self.master(r.broker_name, now)
        return (m is not None and m.broker_id == r.broker_id, m.master_epoch if m else 0)

    def unregister(self, group: str, broker_id: int) -> bool:
        return self._routes.pop((group, broker_id), None) is not None

    def expire(self, now: float) -> int:
        dead = [k for k, r in self._routes.items() if r.expires_at < now]
        for k in dead:
            del self._routes[k]
        return len(dead)

    def master(self, group: str, now: float) -> Route | None:
        best: Route | None = None
        for r in self.routes(group=group, now=now):
            # Highest epoch wins; equal epochs (should not happen) -> the lowest brokerId, deterministic.
            if r.role == "master" and (
                best is None or (r.master_epoch, -r.broker_id) > (best.master_epoch, -best.broker_id)
            ):
                best = r
        return best

    def routes(self, cluster: str = "", group: str = "", now: float = 0.0) -> list[Route]:
        out = [
            r for r in self._routes.values()
            if r.expires_at >= now and (not group or r.group == group) and (not cluster or r.cluster == cluster)
        ]
        out.sort(key=lambda r: (r.cluster, r.group, r.broker_id))
        return out


class NameServerServicer(pbg.NameServerServicer):
    def __init__(self, table: RouteTable, clock=time.monotonic) -> None:
        self.table = table
        self.clock = clock

    async def RegisterRoute(self, request, context):
        now = self.clock()
        try:
            is_master, epoch = self.table.register(request.route, request.ttl_ms / 1000.0, now)
        except RouteError as e:
            _log.warning("route_rejected", reason=str(e), group=request.route.broker_name)
            return pb.RegisterRouteReply(header=pb.NamesrvReplyHeader(code=BAD_REQUEST, message=str(e)))
        except OverflowError as e:
            return pb.RegisterRouteReply(header=pb.NamesrvReplyHeader(code=LIMIT_REACHED, message=str(e)))
        r = request.route
        if r.role == "master" and not is_master:
            _log.warning("stale_master_route", group=r.broker_name, brokerId=r.broker_id,
                         epoch=r.master_epoch, group_epoch=epoch)
        return pb.RegisterRouteReply(header=pb.NamesrvReplyHeader(code=OK), accepted_as_master=is_master,
                                     group_master_epoch=epoch)

    async def UnregisterRoute(self, request, context):
        found = self.table.unregister(request.broker_name, request.broker_id)
        code = OK if found else NOT_FOUND
        return pb.UnregisterRouteReply(header=pb.NamesrvReplyHeader(code=code))

    async def LookupMaster(self, request, context):
        now = self.clock()
        m = self.table.master(request.broker_name, now)
        if m is None:
            return pb.LookupMasterReply(header=pb.NamesrvReplyHeader(code=NOT_FOUND, message="no master route"))
        return pb.LookupMasterReply(header=pb.NamesrvReplyHeader(code=OK), master=self._route(m, now))

    async def GetRoutes(self, request, context):
        now = self.clock()
        rs = self.table.routes(request.cluster_name, request.broker_name, now)
        return pb.GetRoutesReply(header=pb.NamesrvReplyHeader(code=OK), routes=[self._route(r, now) for r in rs])

    @staticmethod
    def _route(r: Route, now: float) -> pb.BrokerRoute:
        return pb.BrokerRoute(cluster_name=r.cluster, broker_name=r.group, broker_id=r.broker_id,
                              address=r.address, role=r.role, master_epoch=r.master_epoch,
                              age_ms=int(max(0.0, now - r.refreshed_at) * 1000), ha_address=r.ha_address)
