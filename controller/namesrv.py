"""Name server: broker routes with expiry, master lookup by highest MasterEpoch.

RouteTable is the sans-IO core (clock passed in). NameServerServicer is the thin gRPC adapter.
Like RocketMQ's NameServer, routes are soft state: a broker re-registers periodically and a
route that is not refreshed within its TTL disappears. Unlike RocketMQ (which trusts the last
registration), the master of a group is the master route with the highest masterEpoch, so a
stale master that still re-registers after a failover never overrides the new one; and when
the name server runs inside a controller process, a master route must also match the master and
MasterEpoch the controller applied (``authority``), so no registration can outrank the
controller. Every number a registrant sends is bounded: name length and charset, TTL, routes per
peer address.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from autoswitch.base.limits import MAX_ADDRESS_LEN, MAX_NAME_LEN
from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.tls import TLSConfig
from autoswitch.proto import namesrv_pb2 as pb
from autoswitch.proto import namesrv_pb2_grpc as pbg

_log = get_logger("namesrv")
_refusals = RateLimitedLog(_log)

OK = 0
BAD_REQUEST = 1
NOT_FOUND = 2
LIMIT_REACHED = 3
ROLES = ("master", "slave", "fenced")
# Cluster and group names: what RocketMQ accepts for broker names, nothing a log or a file path
# could trip on.
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.%-]*")
MAX_TTL_S = 300.0
MAX_ROUTES_PER_PEER = 1024
# In-flight RPCs of a standalone name server; an embedded one shares the controller's limit.
MAX_CONCURRENT_RPCS = 512

# group -> (master brokerId or None, MasterEpoch) as the controller applied it; None: not managed.
Authority = Callable[[str], "tuple[int | None, int] | None"]


# Membership changes are rare: the name server asks the leader's GetMetaData every this many
# polls (and after an outage), not on every one.
MEMBERSHIP_CHECK_EVERY = 10
# The fewest seconds between two polls of the controllers, however often brokers claim a newer master.
MIN_POLL_GAP_S = 0.05


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
    fetch_address: str = ""


class RouteError(ValueError):
    pass


class RouteTable:
    def __init__(self, default_ttl_s: float = 30.0, max_routes: int = 200_000, *,
                 max_ttl_s: float = MAX_TTL_S, max_routes_per_peer: int = MAX_ROUTES_PER_PEER,
                 authority: Authority | None = None) -> None:
        assert 0 < default_ttl_s <= max_ttl_s and max_routes > 0 and max_routes_per_peer > 0
        self.default_ttl_s = default_ttl_s
        self.max_ttl_s = max_ttl_s
        self.max_routes = max_routes
        self.max_routes_per_peer = max_routes_per_peer
        self.authority = authority
        # told of a master route the authority does not know yet (group, its MasterEpoch): a
        # polled authority asks the controllers at once instead of at its next poll
        self.on_unknown_master: Callable[[str, int], None] | None = None
        self._routes: dict[tuple[str, int], Route] = {}   # (group, brokerId) -> route
        self._owner: dict[tuple[str, int], str] = {}       # (group, brokerId) -> registering peer
        self._per_peer: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._routes)

    def register(self, r: pb.BrokerRoute, ttl_s: float, now: float, peer: str = "") -> tuple[bool, int]:
        """Insert/refresh; returns (this route is the group's master, the group's master epoch).
        ``peer`` is the registrant's address (its IP): it may hold ``max_routes_per_peer`` routes."""
        if not r.broker_name or len(r.broker_name) > MAX_NAME_LEN or len(r.cluster_name) > MAX_NAME_LEN:
            raise RouteError(f"broker_name required, names at most {MAX_NAME_LEN} chars")
        if not NAME_RE.fullmatch(r.broker_name) or (r.cluster_name and not NAME_RE.fullmatch(r.cluster_name)):
            raise RouteError("names may hold only letters, digits and _ . % - (not first)")
        if r.broker_id <= 0:
            raise RouteError("broker_id must be > 0")
        if not r.address or max(len(r.address), len(r.ha_address), len(r.fetch_address)) > MAX_ADDRESS_LEN:
            raise RouteError("address required, at most 255 chars")
        if r.role not in ROLES:
            raise RouteError(f"role must be one of {ROLES}")
        if r.master_epoch < 0:
            raise RouteError("master_epoch must be >= 0")
        if ttl_s > self.max_ttl_s:
            # A long TTL lets one registration hold a slot (or a master claim) long after its
            # broker is gone.
            raise RouteError(f"ttl {ttl_s:g} s above the maximum {self.max_ttl_s:g} s")
        ttl = ttl_s if ttl_s > 0 else self.default_ttl_s
        key = (r.broker_name, r.broker_id)
        if key not in self._routes or self._owner.get(key) != peer:
            if self._per_peer[peer] >= self.max_routes_per_peer:
                self.expire(now)
                if self._per_peer[peer] >= self.max_routes_per_peer:
                    raise OverflowError(f"peer {peer or '?'} holds {self.max_routes_per_peer} routes (the limit)")
        if key not in self._routes and len(self._routes) >= self.max_routes:
            self.expire(now)
            if len(self._routes) >= self.max_routes:
                raise OverflowError("route table full")
        self._set_owner(key, peer)
        self._routes[key] = Route(r.cluster_name, r.broker_name, r.broker_id, r.address, r.role,
                                  r.master_epoch, r.ha_address, now + ttl, now, r.fetch_address)
        m = self.master(r.broker_name, now)
        return (m is not None and m.broker_id == r.broker_id, m.master_epoch if m else 0)

    def _set_owner(self, key: tuple[str, int], peer: str | None) -> None:
        old = self._owner.pop(key, None)
        if old is not None:
            self._per_peer[old] -= 1
            if self._per_peer[old] <= 0:
                del self._per_peer[old]
        if peer is not None:
            self._owner[key] = peer
            self._per_peer[peer] += 1

    def unregister(self, group: str, broker_id: int) -> bool:
        self._set_owner((group, broker_id), None)
        return self._routes.pop((group, broker_id), None) is not None

    def expire(self, now: float) -> int:
        dead = [k for k, r in self._routes.items() if r.expires_at < now]
        for k in dead:
            del self._routes[k]
            self._set_owner(k, None)
        return len(dead)

    def _authorised(self, r: Route) -> bool:
        """May this master route stand for its group? Only as the controller's master and epoch."""
        if self.authority is None:
            return True
        known = self.authority(r.group)
        if known is None:
            return True                      # a group the controller does not manage (static mode)
        master_id, epoch = known
        return master_id is not None and master_id == r.broker_id and epoch == r.master_epoch

    def master(self, group: str, now: float) -> Route | None:
        best: Route | None = None
        for r in self.routes(group=group, now=now):
            # Highest epoch wins; equal epochs (should not happen) -> the lowest brokerId, deterministic.
            if r.role == "master" and self._authorised(r) and (
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
        peer = _peer_host(context.peer())
        try:
            is_master, epoch = self.table.register(request.route, request.ttl_ms / 1000.0, now, peer)
        except RouteError as e:
            _refusals.warning(("bad", peer), "route_rejected", reason=str(e), peer=peer,
                              group=request.route.broker_name[:MAX_NAME_LEN])
            return pb.RegisterRouteReply(header=pb.NamesrvReplyHeader(code=BAD_REQUEST, message=str(e)))
        except OverflowError as e:
            _refusals.warning(("limit", peer), "route_rejected", reason=str(e), peer=peer,
                              group=request.route.broker_name[:MAX_NAME_LEN])
            return pb.RegisterRouteReply(header=pb.NamesrvReplyHeader(code=LIMIT_REACHED, message=str(e)))
        r = request.route
        if r.role == "master" and not is_master and r.master_epoch > epoch:
            # newer than every master route here: the controllers' view has not caught up yet (a
            # handover or election this instant), not a stale claim; a polled authority asks now
            if self.table.on_unknown_master is not None:
                self.table.on_unknown_master(r.broker_name, r.master_epoch)
            _refusals.info(("pending", r.broker_name, r.broker_id), "master_route_pending", group=r.broker_name,
                           brokerId=r.broker_id, epoch=r.master_epoch, group_epoch=epoch)
        elif r.role == "master" and not is_master:
            _refusals.warning(("stale", r.broker_name, r.broker_id), "stale_master_route", group=r.broker_name,
                              brokerId=r.broker_id, epoch=r.master_epoch, group_epoch=epoch)
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
                              age_ms=int(max(0.0, now - r.refreshed_at) * 1000), ha_address=r.ha_address,
                              fetch_address=r.fetch_address)


def _peer_host(peer: str | None) -> str:
    """gRPC's ``ipv4:127.0.0.1:5555`` / ``ipv6:[::1]:5555`` -> the host part (the registrant)."""
    if not peer:
        return ""
    addr = peer.split(":", 1)[1] if ":" in peer else peer
    if addr.startswith("["):
        return addr[1:addr.find("]")]
    return addr.rsplit(":", 1)[0]


class PolledAuthority:
    """A standalone name server's view of the controllers (``--controllers``): every group's
    master and MasterEpoch, fetched every ``interval_s`` (GetSyncStateData). Until the first
    fetch succeeds no route counts as a master (the name server cannot tell a forged epoch from
    a real one yet). A group missing from the last answer has no master route either: with
    ``--controllers`` every group is the controllers' (one elected within the last poll shows up
    at the next one, ``interval_s`` later)."""

    def __init__(self, interval_s: float = 1.0, tls: TLSConfig | None = None) -> None:
        assert interval_s > 0
        self.interval_s = interval_s
        self.tls = tls or TLSConfig.off()
        self._masters: dict[str, tuple[int | None, int]] | None = None
        self._conf_index = 0        # the controllers' membership change our address list is from
        self._wake = asyncio.Event()     # set: poll now

    def claimed(self, group: str, epoch: int) -> None:
        """A broker registered as master at a MasterEpoch newer than the last poll shows (a
        handover or failover just happened): poll now, so producers find the new master within a
        round trip instead of up to ``interval_s`` later (the upgrade test measured ack gaps of
        0.2-0.9 s after handovers from this wait). A route is still only accepted as the
        controllers say; polls stay at least MIN_POLL_GAP_S apart, whatever brokers claim."""
        known = self._masters.get(group) if self._masters is not None else None
        if known is None or epoch > known[1]:
            self._wake.set()

    def __call__(self, group: str) -> tuple[int | None, int] | None:
        if self._masters is None:
            return (None, 0)
        return self._masters.get(group, (None, 0))

    def update(self, groups) -> None:
        self._masters = {g.replica_info.broker_name: (int(g.replica_info.master_broker_id) or None,
                                                      int(g.replica_info.master_epoch)) for g in groups}

    async def _follow_membership(self, c) -> None:
        """After a controller membership change, ask the controllers that are voters now (the
        leader's view, like a broker learns it from heartbeat replies)."""
        from autoswitch.proto import controller_pb2 as pb

        if c.leader is None:
            return
        md = await c.call_node(c.leader, "GetMetaData", pb.GetMetaDataRequest())
        voters = [p.address for p in md.peers if p.role == "voter" and p.address]
        if not md.is_leader or md.config_index <= self._conf_index or not voters:
            return
        self._conf_index = md.config_index
        if sorted(voters) != sorted(c.addresses):
            _log.info("controllers_adopted", index=md.config_index, controllers=voters)
            c.set_addresses(voters)

    async def run(self, controllers: list[str]) -> None:
        import itertools

        from autoswitch.controller.client import ControllerClient

        from autoswitch.base.errors import AutoswitchError

        async with ControllerClient(controllers, deadline_s=self.interval_s * 3, tls=self.tls) as c:
            failing = False
            for poll in itertools.count():
                try:
                    self.update(await c.get_sync_state_data([]))
                    if poll % MEMBERSHIP_CHECK_EVERY == 0 or failing:
                        await self._follow_membership(c)
                    if failing:
                        _log.info("controller_view_restored", groups=len(self._masters or {}))
                    failing = False
                except AutoswitchError as e:
                    if not failing:     # one line per outage, not per poll
                        _log.warning("controller_view_unavailable", error=e.message[:200],
                                     note="keeping the last view; before the first one no master route counts")
                    failing = True
                polled = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), self.interval_s)
                self._wake.clear()
                await asyncio.sleep(max(0.0, MIN_POLL_GAP_S - (time.monotonic() - polled)))
