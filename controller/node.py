"""ControllerNode: one controller process part — Raft + state machine + gRPC service + scans.

One asyncio loop; one grpc.aio server carrying the Raft transport and the ControllerService
(and the NameServer when embedded). State changes only through committed Raft entries applied
in order by ``AppliedStateMachine`` (sm_adapter.py), which also writes events.jsonl and pushes
ReplicaInfo changes to WatchReplicaInfo subscribers.

Liveness is node-local (HeartbeatTable, our own receipt clock). The leader declares a broker
dead only when a majority of controller nodes (itself included) holds that opinion: it asks
the peers with QueryLiveness (Sentinel's is-master-down-by-addr). Unreachable peers count as
"not dead" — an isolated leader can never conclude a master is dead on its own.

Library use::

    node = ControllerNode(config)
    await node.start()
    ...
    await node.stop()
"""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path
from typing import Any

import grpc
from autoswitch.controller import rpc_codes as rc
from autoswitch.controller import sm_adapter
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.eventlog import EventLog
from autoswitch.controller.heartbeats import BeatInfo, HeartbeatTable
from autoswitch.controller.quorum_liveness import Opinion, Verdict, combine
from autoswitch.controller.service import ControllerServicer, NodeReply
from autoswitch.controller.watchers import Watchers

from autoswitch.log import get_logger
from autoswitch.proto import controller_pb2 as pb
from autoswitch.proto import controller_pb2_grpc as pbg

MAX_SCAN_GROUPS_PER_ROUND = 10_000


class ControllerNode:
    def __init__(self, config: ControllerConfig, *, clock=time.monotonic) -> None:
        config.validate()
        self.config = config
        self.node_id = config.node_id
        self.clock = clock
        self.log = get_logger("controller.node", node=config.node_id)
        self.data_dir = Path(config.data_dir)
        self.heartbeats = HeartbeatTable(10.0)   # the timeout follows the replicated config
        self.watchers = Watchers(config.max_watchers, config.watch_queue_size)
        self.events: EventLog | None = None
        self.sm: sm_adapter.AppliedStateMachine | None = None
        self.raft: Any = None
        self.server: grpc.aio.Server | None = None
        self._peer_client: Any = None
        self._tasks: list[asyncio.Task] = []
        self._extra_servicers: list = []
        self._stopped = asyncio.Event()
        self._started = False

    # ------------------------------------------------------------------ lifecycle

    def add_servicer(self, register) -> None:
        """Host another service (the name server) on this node's gRPC server; call before start()."""
        assert not self._started
        self._extra_servicers.append(register)

    async def start(self) -> None:
        assert not self._started
        self._started = True
        self._started_at = self.clock()
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.events = EventLog(self.data_dir / "events.jsonl")
        self.sm = sm_adapter.AppliedStateMachine(self.config.sm, self.events, self._on_applied, self.log)
        # One server for Raft and the API: its limit must fit Raft's largest message; the
        # servicer enforces max_message_bytes on API requests itself.
        raft_max = int(self.config.raft.get("max_message_bytes", 16 << 20))
        limit = max(raft_max, self.config.max_message_bytes)
        opts = [
            ("grpc.max_send_message_length", limit),
            ("grpc.max_receive_message_length", limit),
            ("grpc.so_reuseport", 0),
        ]
        self.server = grpc.aio.server(options=opts, maximum_concurrent_rpcs=self.config.max_concurrent_rpcs)
        pbg.add_ControllerServiceServicer_to_server(ControllerServicer(self), self.server)
        for register in self._extra_servicers:
            register(self.server)
        self.raft = sm_adapter.make_raft(self.config, self.data_dir / "raft", self.sm, self.server)
        port = self.server.add_insecure_port(self.config.listen_addr)
        if port == 0:
            raise OSError(f"cannot listen on {self.config.listen_addr}")
        await self.raft.start()
        await self.server.start()
        from autoswitch.controller.peers import PeerLiveness

        self._peer_client = PeerLiveness(self.config, self.node_id)
        self._tasks.append(asyncio.create_task(self._scan_loop(), name="dead-master-scan"))
        self.log.info("controller_started", listen=self.config.listen_addr, peers=self.config.peers)

    async def stop(self) -> None:
        if self._stopped.is_set():
            return
        self._stopped.set()
        for t in self._tasks:
            t.cancel()
        for t in self._tasks:
            try:
                await t
            except (asyncio.CancelledError, Exception):
                pass
        self.watchers.close_all()
        if self.server is not None:
            await self.server.stop(grace=0.5)
        if self.raft is not None:
            await self.raft.stop()
        if self._peer_client is not None:
            await self._peer_client.close()
        if self.events is not None:
            self.events.close()
        self.log.info("controller_stopped")

    async def wait_stopped(self) -> None:
        await self._stopped.wait()

    # ------------------------------------------------------------------ raft facts

    @property
    def is_leader(self) -> bool:
        return bool(self.raft is not None and self.raft.is_leader)

    @property
    def term(self) -> int:
        return int(getattr(self.raft, "term", 0) or 0)

    def leader_hint(self) -> tuple[str, str]:
        lid = getattr(self.raft, "leader_id", None) if self.raft is not None else None
        if lid and lid in self.config.peers:
            return lid, self.config.peers[lid]
        return "", ""

    def metadata(self) -> dict:
        lid, laddr = self.leader_hint()
        reach = self._peer_client.reachability() if self._peer_client else {}
        peers = [(n, a, n == self.node_id or reach.get(n, False)) for n, a in sorted(self.config.peers.items())]
        return {"node_id": self.node_id, "is_leader": self.is_leader, "leader_id": lid, "leader_addr": laddr,
                "term": self.term, "peers": peers, "groups": self.sm.group_count() if self.sm else 0}

    # ------------------------------------------------------------------ writes and reads

    def _not_leader(self) -> NodeReply:
        lid, laddr = self.leader_hint()
        if not laddr or lid == self.node_id:
            return NodeReply(rc.CONTROLLER_NOT_LEADER,
                             f"node {self.node_id} is not the leader and knows none (election or no quorum)")
        return NodeReply(rc.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)

    async def write(self, kind: str, **fields: Any) -> dict:
        if not self.is_leader:
            raise self._not_leader()
        try:
            data = sm_adapter.encode_write(kind, fields)
        except sm_adapter.BadWrite as e:
            raise NodeReply(rc.CONTROLLER_INVALID_REQUEST, str(e)) from None
        if len(data) > self.config.max_message_bytes:
            raise NodeReply(rc.CONTROLLER_REQUEST_TOO_LARGE, f"encoded request is {len(data)} bytes")
        try:
            result = await self.raft.propose(data, timeout_s=self.config.propose_timeout_s)
        except Exception as e:  # noqa: BLE001 - mapped to a typed reply code below
            raise self._map_raft_error(e) from None
        return sm_adapter.reply_dict(result)

    async def barrier(self) -> None:
        """Linearizable-read barrier: raises NodeReply unless this node is the leader and caught up."""
        if not self.is_leader:
            raise self._not_leader()
        try:
            await self.raft.read_index(timeout_s=self.config.read_timeout_s)
        except Exception as e:  # noqa: BLE001
            raise self._map_raft_error(e) from None

    async def read(self, kind: str, **fields: Any) -> dict:
        await self.barrier()
        return self.sm.read(kind, fields, self._member_view)

    def _map_raft_error(self, e: Exception) -> NodeReply:
        name = type(e).__name__
        if name == "NotLeader":
            lid = getattr(e, "leader_id", None) or ""
            laddr = getattr(e, "leader_addr", None) or self.config.peers.get(lid, "")
            return NodeReply(rc.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)
        if name == "QuorumUnavailable":
            return NodeReply(rc.CONTROLLER_QUORUM_UNAVAILABLE, f"no controller quorum: {e}")
        if name in ("ProposalTimeout", "TimeoutError", "ReadIndexTimeout"):
            return NodeReply(rc.CONTROLLER_TIMEOUT, f"not committed in time (outcome unknown): {e}")
        if name == "ProposalDropped":
            return NodeReply(rc.CONTROLLER_QUORUM_UNAVAILABLE, f"{e}")
        self.log.error("raft_error", exc_info=e, kind=name)
        return NodeReply(rc.CONTROLLER_INTERNAL_ERROR, f"{name}: {e}")

    def local_replica_info(self, group: str) -> dict | None:
        return self.sm.replica_info(group)

    def read_events(self, from_line: int, max_lines: int) -> tuple[list[str], int, bool]:
        return self.events.read(from_line, max_lines)

    # ------------------------------------------------------------------ liveness

    def heartbeat_timeout_s(self) -> float:
        t = self.sm.heartbeat_timeout_ms() / 1000.0
        self.heartbeats.default_timeout_s = t   # follow the replicated config as it changes
        return t

    def record_heartbeat(self, r: pb.BrokerHeartbeatRequest) -> None:
        ok = self.heartbeats.record(
            r.broker_name, r.broker_id,
            BeatInfo(received_at=self.clock(), timeout_s=r.heartbeat_timeout_ms / 1000.0, address=r.broker_address,
                     epoch=r.epoch, max_offset=r.max_offset, confirm_offset=r.confirm_offset,
                     election_priority=r.election_priority, clean_shutdown=r.clean_shutdown),
        )
        if not ok:
            raise NodeReply(rc.CONTROLLER_OVERLOADED, "heartbeat table full")

    def _local_opinion(self, g: str, b: int, now: float) -> Opinion:
        timeout = self.heartbeat_timeout_s()
        alive, ago = self.heartbeats.opinion(g, b, now)
        if not alive and now - self._started_at < timeout:
            # Too young to know: a broker may be alive and simply not have reached us yet.
            return Opinion(alive=None, last_heard_ms_ago=ago, report=self.heartbeats.get(g, b))
        return Opinion(alive=alive, last_heard_ms_ago=ago, report=self.heartbeats.get(g, b))

    def local_opinions(self, keys: list[tuple[str, int]]) -> list[Opinion]:
        now = self.clock()
        return [self._local_opinion(g, b, now) for g, b in keys]

    def _member_view(self, g: str, b: int) -> tuple[bool, int, Any]:
        """Read-side view of one replica for GetSyncStateData: this node's own opinion."""
        now = self.clock()
        alive, ago = self.heartbeats.opinion(g, b, now)
        return alive, ago, self.heartbeats.get(g, b)

    async def verdicts(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], Verdict]:
        """Majority verdicts for ``keys``: this node's opinion plus every peer that answers in time."""
        now = self.clock()
        mine = {k: self._local_opinion(k[0], k[1], now) for k in keys}
        peer_ops = await self._peer_client.query(keys, self.config.peer_query_timeout_s) if keys else {}
        n = len(self.config.peers)
        out = {}
        for i, k in enumerate(keys):
            ops = [mine[k]] + [p[i] for p in peer_ops.values()]
            out[k] = combine(n, ops)
        return out

    async def liveness_evidence(self, group: str, broker_ids: list[int]) -> tuple[dict[int, Any], set[int]]:
        """(brokerId -> last report for members that count as alive, members a majority holds dead).

        Heard by this node within the timeout -> alive (an asymmetric partition only ever makes a
        node miss heartbeats, never invent them). Otherwise alive only if a majority says so, and
        dead only if a majority says so; anything else is neither.
        """
        now = self.clock()
        self.heartbeat_timeout_s()
        alive: dict[int, Any] = {}
        dead: set[int] = set()
        unsure = []
        for b in broker_ids:
            if self.heartbeats.is_alive(group, b, now):
                alive[b] = self.heartbeats.get(group, b)
            else:
                unsure.append((group, b))
        if unsure:
            for (_g, b), v in (await self.verdicts(unsure)).items():
                if v.alive:
                    alive[b] = v.report
                elif v.dead:
                    dead.add(b)
        return alive, dead

    async def elect(self, cluster: str, group: str, broker_id: int, designate: bool, trigger: str) -> dict:
        if not self.is_leader:
            raise self._not_leader()
        attempts = max(1, self.sm.elect_retries() + 1) if trigger == "controller" else 1
        backoff = self.config.election_retry_backoff_s
        last: NodeReply | None = None
        for i in range(attempts):
            alive, dead = await self.liveness_evidence(group, self.sm.member_ids(group))
            try:
                return await self.write("elect_master", cluster=cluster, group=group, broker_id=broker_id,
                                        designate=designate, trigger=trigger, alive=alive, dead=dead)
            except NodeReply as e:
                # Retry only what may succeed later; NOT_LEADER/bad input are answers, not glitches.
                if e.reply_code not in (rc.CONTROLLER_TIMEOUT, rc.CONTROLLER_QUORUM_UNAVAILABLE):
                    raise
                last = e
                self.log.warning("election_retry", group=group, attempt=i, code=rc.code_name(e.reply_code))
                await asyncio.sleep(backoff * (2**i))
        assert last is not None
        raise last

    async def alter_sync_state_set(self, **fields: Any) -> dict:
        alive, _dead = await self.liveness_evidence(fields["group"], list(fields["new_sync_state_set"]))
        return await self.write("alter_sync_state_set", alive_broker_ids=sorted(alive), **fields)

    async def clean_broker_data(self, **fields: Any) -> dict:
        alive, _dead = await self.liveness_evidence(fields["group"], self.sm.member_ids(fields["group"]))
        return await self.write("clean_broker_data", alive_broker_ids=sorted(alive), **fields)

    # ------------------------------------------------------------------ scans and notifications

    async def _scan_loop(self) -> None:
        while not self._stopped.is_set():
            await asyncio.sleep(self.sm.scan_interval_ms() / 1000.0)
            try:
                # An empty liveness query keeps GetMetaData's peer reachability current on every node.
                await self._peer_client.query([], self.config.peer_query_timeout_s)
                await self.scan_once()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.log.error("scan_failed", exc_info=True)

    async def scan_once(self) -> int:
        """Leader only: elect a new master for every group whose master a majority considers dead."""
        now = self.clock()
        self.heartbeats.expire(now, keep_s=max(600.0, 10 * self.heartbeat_timeout_s()))
        if not self.is_leader:
            return 0
        masters = self.sm.masters()   # [(cluster, group, masterBrokerId)]
        suspects = [(g, b) for _c, g, b in masters if not self.heartbeats.is_alive(g, b, now)]
        suspects = suspects[:MAX_SCAN_GROUPS_PER_ROUND]
        if not suspects:
            return 0
        verdicts = await self.verdicts(suspects)
        clusters = {g: c for c, g, _m in masters}
        n = 0
        for (g, b), v in sorted(verdicts.items()):
            if not v.dead:
                self.log.info("master_suspect_not_majority", group=g, brokerId=b, dead_votes=v.dead_votes,
                              alive_votes=v.alive_votes)
                continue
            self.log.warning("master_dead_by_majority", group=g, brokerId=b, dead_votes=v.dead_votes)
            try:
                res = await self.elect(clusters.get(g, ""), g, 0, False, trigger="controller")
                n += 1
                self.log.info("controller_election", group=g, code=rc.code_name(res.get("code", 0)),
                              master=(res.get("replica_info") or {}).get("master_broker_id"))
            except NodeReply as e:
                self.log.warning("controller_election_failed", group=g, code=rc.code_name(e.reply_code),
                                 reason=e.message)
                if e.reply_code == rc.CONTROLLER_NOT_LEADER:
                    break
        return n

    def _on_applied(self, index: int, group: str, replica_info: dict) -> None:
        """Called from the apply path when a group's master/epoch/SSS changed."""
        if self.config.notify_broker_role_changed:
            self.watchers.publish(group, (index, replica_info))


def run_forever(config: ControllerConfig | None, namesrv: dict | None) -> int:
    """Process entry: run a controller node and/or a name server until SIGTERM/SIGINT."""
    from autoswitch.controller.namesrv import NameServerServicer, RouteTable

    from autoswitch.proto import namesrv_pb2_grpc

    log = get_logger("controller.process")

    async def main() -> int:
        loop = asyncio.get_running_loop()
        stop = asyncio.Event()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        node = None
        server = None
        if namesrv is not None:
            table = RouteTable(default_ttl_s=namesrv["route_ttl_s"])
            ns = NameServerServicer(table)

            def reg(s):
                namesrv_pb2_grpc.add_NameServerServicer_to_server(ns, s)

            async def expire_loop():
                while True:
                    await asyncio.sleep(1.0)
                    table.expire(time.monotonic())

            expirer = asyncio.create_task(expire_loop())
        if config is not None:
            node = ControllerNode(config)
            if namesrv is not None:
                node.add_servicer(reg)
            await node.start()
        else:
            server = grpc.aio.server()
            reg(server)
            if server.add_insecure_port(namesrv["listen"]) == 0:
                raise OSError(f"cannot listen on {namesrv['listen']}")
            await server.start()
            log.info("namesrv_started", listen=namesrv["listen"])
        waiter = asyncio.create_task(stop.wait())
        watch = [waiter] + ([asyncio.create_task(node.wait_stopped())] if node else [])
        await asyncio.wait(watch, return_when=asyncio.FIRST_COMPLETED)
        log.info("shutting_down")
        if node is not None:
            await node.stop()
        if server is not None:
            await server.stop(grace=0.5)
        if namesrv is not None:
            expirer.cancel()
        for t in watch:
            t.cancel()
        return 0

    return asyncio.run(main())
