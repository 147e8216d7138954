"""Elections of a controller node: the dead-master scan, the elections clients ask for, and the
preferred-master rebalance.

The scan runs on every node but acts only on the leader: it asks the pure ScanPlanner
(controller/failover/liveness.py) which masters it suspects, asks the peers for a majority verdict (the
liveness desk), and proposes the planned elections through the node's one proposal path. A master's
closed session (crash-fast failover) wakes the scan at once and then every FAST_RESCAN_S while a
peer has not seen its own end of the session yet. Election requests carry the leader's liveness
evidence (alive reports, dead ids, crash-only) so the state machine decides on facts in the log.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import msgspec
from autoswitch.controller import messages as msgs
from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.failover.drain import DrainFacts, DrainMove, DrainPlanner, Member
from autoswitch.controller.failover.gray import GrayPlanner, GroupHealth, Move, Replica
from autoswitch.controller.failover.liveness import ScanPlanner
from autoswitch.controller.failover.rebalance import GroupFacts, RebalancePlanner
from autoswitch.controller.server import sm_adapter
from autoswitch.controller.server.broker_calls import transfer_master
from autoswitch.controller.server.service_common import NodeReply

from autoswitch.base import tls
from autoswitch.base.features import OPERATOR_LEVEL
from autoswitch.base.log import EventLogger
from autoswitch.base.waits import cancellation_is_ours, wait_event

if TYPE_CHECKING:
    from autoswitch.controller.failover.peers import PeerLiveness
    from autoswitch.controller.server.alerts import Alerter
    from autoswitch.controller.server.liveness_desk import LivenessDesk
    from autoswitch.controller.server.proposer import Proposer

# After a master's session closes the leader scans at once, then every FAST_RESCAN_S while a peer
# has not seen its own end of the session yet, at most MAX_FAST_RESCANS times (~0.5 s).
FAST_RESCAN_S = 0.025
MAX_FAST_RESCANS = 20
# A leader in maintenance that could not hand its leadership over tries again after this long.
LEAVE_RETRY_MS = 10_000


class ElectionScanner:
    def __init__(self, *, sm: sm_adapter.AppliedStateMachine, liveness: LivenessDesk, proposer: Proposer,
                 peers: PeerLiveness, alerter: Alerter, tls_config: tls.TLSConfig,
                 peer_query_timeout_s: float, rebalance_handover_timeout_ms: int, log: EventLogger,
                 spawn: Callable[[Coroutine[Any, Any, None], str], None]) -> None:
        self.sm = sm
        self.liveness = liveness
        self.proposer = proposer
        self.peers = peers
        self.alerter = alerter
        self.tls_config = tls_config
        self.peer_query_timeout_s = peer_query_timeout_s
        self.rebalance_handover_timeout_ms = rebalance_handover_timeout_ms
        self.log = log
        self.spawn = spawn
        self.planner = ScanPlanner()
        self.rebalancer = RebalancePlanner()
        self.gray = GrayPlanner()
        self.drainer = DrainPlanner()
        self._drain_waiting_said: dict[str, str] = {}
        self._rebalance_waiting_said: dict[str, str] = {}
        # set by the node: whether this member is in maintenance, and how it hands Raft leadership off
        self.in_maintenance: Callable[[], bool] = lambda: False
        self.leave_leadership: Callable[[], Coroutine[Any, Any, None]] | None = None
        self._leaving = False
        self._leave_not_before = 0
        self._storm_said = False
        self._wake = asyncio.Event()
        self._fast_rescans_left = 0

    @property
    def is_leader(self) -> bool:
        return self.proposer.is_leader

    def master_crashed(self, group: str, broker_id: int, epoch: int) -> None:
        """The liveness desk saw a master's session end: on the leader, scan now."""
        if not self.is_leader:
            return
        self._fast_rescans_left = MAX_FAST_RESCANS
        self._wake.set()
        self.alerter.emit("master_crashed", group, sm_adapter.wall_ms(), master=broker_id, epoch=epoch)

    async def run(self, stopped: asyncio.Event) -> None:
        """The scan loop, until ``stopped``."""
        while not stopped.is_set():
            pause = min(self.sm.scan_interval_ms(), 1000) / 1000.0
            if self._fast_rescans_left > 0:
                pause = FAST_RESCAN_S
            woken = await wait_event(self._wake, pause)
            self._wake.clear()
            try:
                if self.planner.interval_ms != self.sm.scan_interval_ms():
                    self.planner.interval_ms = self.sm.scan_interval_ms()
                self.planner.max_retries = self.sm.elect_retries()
                if woken or self._fast_rescans_left > 0:
                    # a peer may not have seen its end of the session yet: ask again shortly
                    self._fast_rescans_left = max(0, self._fast_rescans_left - 1)
                    if await self.scan_once() > 0 or not self.liveness.crashed_master():
                        self._fast_rescans_left = 0
                    continue
                if not self.planner.due(self.liveness.now_ms()):
                    continue
                # An empty liveness query keeps GetMetaData's peer reachability current on every node.
                await self.peers.query([], self.peer_query_timeout_s)
                await self.scan_once()
                self.gray_once()
                self.drain_once()
                self.rebalance_once()
                self.maintenance_leadership_once()
            except asyncio.CancelledError:
                # Ours (the node stops) ends the scan; one raised by an awaited call (a gRPC
                # channel closed under it) must not: nothing else elects for this node.
                if stopped.is_set() or cancellation_is_ours():
                    raise
                self.log.error("scan_failed", reason="an awaited call was cancelled", exc_info=True)
            except Exception:
                self.log.error("scan_failed", exc_info=True)

    async def scan_once(self) -> int:
        """Leader only: elect a new master for every group whose master a majority holds DEAD."""
        desk = self.liveness
        desk.sync_config()
        now = desk.now_ms()
        table = desk.heartbeats
        table.expire(now, keep_ms=max(600_000, 10 * table.timeout_ms))
        if not self.is_leader:
            self.planner.suspects([], table, now)   # keeps the planner's clock moving
            return 0
        masters = self.sm.masters_refs()
        suspects = self.planner.suspects(masters, table, now)
        if not suspects:
            return 0
        view = await desk.view(suspects)
        dead_groups = sorted({g for g, b in suspects if view.is_dead(g, b)})
        for g, b in suspects:
            v = view.verdicts.get((g, b))
            if v is not None and not v.dead:
                self.log.info("master_suspect_not_majority", group=g, brokerId=b, dead_votes=v.dead_votes,
                              alive_votes=v.alive_votes)
                epoch, _ = self.sm.master_of(g)
                if not table.crashed(g, b, now):
                    self.alerter.emit_once("liveness_disagreement", g, epoch, sm_adapter.wall_ms(), master=b,
                                           dead_votes=v.dead_votes, alive_votes=v.alive_votes)
        if not dead_groups:
            return 0
        # Full member view of the affected groups, so the elections carry every alive candidate.
        member_keys = [(g, b) for g in dead_groups for b in self.sm.member_ids(g)]
        members_view = await desk.view(member_keys)
        group_view = {g: members_view for g in dead_groups}
        plans = self.planner.plan([m for m in masters if m.broker_name in dead_groups], view, now, group_view)
        by_group = {m.broker_name: m for m in masters}
        n = 0
        for req in plans:
            m = by_group[req.broker_name]
            self.log.warning("master_dead_by_majority", group=req.broker_name, brokerId=m.master_broker_id,
                             epoch=m.master_epoch)
            committed = False
            try:
                # the planner stamps its own monotonic ms; the log carries the leader's wall time
                res = await self.proposer.write(msgspec.structs.replace(self.with_zones(req), ts_ms=sm_adapter.wall_ms()))
                committed = True
                n += 1
                self.log.info("controller_election", group=req.broker_name, code=code_name(res.code),
                              master=res.replica.master_broker_id if res.replica is not None else None)
            except NodeReply as e:
                self.log.warning("controller_election_failed", group=req.broker_name,
                                 code=code_name(e.reply_code), reason=e.message)
                if e.reply_code == Code.CONTROLLER_NOT_LEADER:
                    break
            finally:
                self.planner.record_result(req.broker_name, m.master_epoch, committed, desk.now_ms())
        return n

    # ------------------------------------------------------------------ elections clients ask for

    async def elect(self, cluster: str, group: str, broker_id: int, designate: bool, trigger: msgs.Trigger,
                    handover_from: int = 0, expect_master_epoch: int = 0,
                    expect_sync_state_set_epoch: int = 0, dry_run: bool = False,
                    unclean_recovery: str = "") -> msgs.Reply:
        """``dry_run``: decide with the same pure state machine on this leader's applied state and
        its liveness evidence now, and propose nothing (the reply's decision says who would win)."""
        if not self.is_leader:
            raise self.proposer.not_leader()
        alive, dead, crashed = await self.liveness.evidence(group, self.sm.member_ids(group))
        _epoch, master = self.sm.master_of(group)
        req = msgs.ElectMasterRequest(
            cluster_name=cluster, broker_name=group, trigger=trigger, broker_id=broker_id, designate=designate,
            alive=tuple(sm_adapter.live_info(b, beat) for b, beat in sorted(alive.items())),
            dead_broker_ids=tuple(sorted(dead)), handover_from=handover_from,
            expect_master_epoch=expect_master_epoch, expect_sync_state_set_epoch=expect_sync_state_set_epoch,
            # a master dead only on crash evidence: whoever asks, the election must stay clean
            crash_only=master in crashed, unclean_recovery=unclean_recovery)
        req = self.with_zones(req)
        if dry_run:
            await self.proposer.barrier()
            return self.sm.dry_run(msgspec.structs.replace(req, ts_ms=sm_adapter.wall_ms()))
        return await self.proposer.write(req)

    def with_zones(self, req: msgs.ElectMasterRequest) -> msgs.ElectMasterRequest:
        """The group's zones as the replicas' heartbeats state them (their last report, dead ones
        too: a lost zone is named), and the most zones any states its acks must span, once feature
        level 2 is finalized (a 0.1.0 member would refuse the fields)."""
        if self.sm.feature_level < OPERATOR_LEVEL:
            return req
        table = self.liveness.heartbeats
        zones = []
        need = 0
        for b in self.sm.member_ids(req.broker_name):
            r = table.report(req.broker_name, b)
            if r is not None and r.zone:
                zones.append((b, r.zone))
                need = max(need, r.min_in_sync_zones)
        return msgspec.structs.replace(req, zones=tuple(zones), min_in_sync_zones=need) if zones else req

    async def alter_sync_state_set(self, req: msgs.AlterSyncStateSetRequest) -> msgs.Reply:
        """``alive_broker_ids`` is the leader's to fill: the proposed members some voter hears."""
        alive, _dead, _ = await self.liveness.evidence(req.broker_name, list(req.new_sync_state_set),
                                                       heard_by_any=True)
        return await self.proposer.write(msgspec.structs.replace(
            req, alive_broker_ids=tuple(sorted(alive)),
            master_min_in_sync_replicas=self.liveness.stated_min_in_sync(req.broker_name, req.master_broker_id)))

    async def clean_broker_data(self, req: msgs.CleanBrokerDataRequest) -> msgs.Reply:
        alive, _dead, _ = await self.liveness.evidence(req.broker_name, self.sm.member_ids(req.broker_name),
                                                       heard_by_any=True)
        return await self.proposer.write(msgspec.structs.replace(req, alive_broker_ids=tuple(sorted(alive))))

    # ------------------------------------------------------------------ preferred masters

    def rebalance_once(self) -> list[str]:
        """Leader only, with auto_rebalance_masters: start moving groups back to their preferred
        masters, at most rebalance_max_in_flight at a time (controller/failover/rebalance.py);
        returns the groups whose move started. Every group that waits says why (logged once per
        reason, and in ``admin explain``)."""
        on, delay_ms, max_in_flight = self.sm.rebalance()
        if not on or not self.is_leader:
            self.rebalancer.waiting = {}
            return []
        now = self.liveness.now_ms()
        table = self.liveness.heartbeats
        alive: Callable[[str, int, int], bool] = table.alive

        def degraded(g: str, b: int) -> bool:
            r = table.report(g, b)
            return r is not None and (r.degraded or r.diverged)

        # never back to a preferred master that is itself degraded (it was moved off for that)
        facts = [GroupFacts(g, m, e, addr, pref, pref in sss, alive(g, pref, now), m is not None and alive(g, m, now),
                            degraded(g, pref), maint)
                 for g, m, e, addr, pref, sss, maint in self.sm.preferred_masters()]
        paused = ("more than half of the alive brokers report themselves degraded: no master moves"
                  if self.gray.storm else "")
        moves = self.rebalancer.plan(facts, delay_ms, now, max_in_flight, paused)
        # logged once per kind of reason (the counts in it move with every scan)
        kinds = {g: re.sub(r"\d+", "#", why) for g, why in self.rebalancer.waiting.items()}
        for g, kind in kinds.items():
            if self._rebalance_waiting_said.get(g) != kind:
                self.log.info("preferred_master_postponed", group=g, reason=self.rebalancer.waiting[g])
        self._rebalance_waiting_said = kinds
        for f in moves:
            self.log.info("preferred_master_handover_started", group=f.group, brokerId=f.master,
                          epoch=f.master_epoch, to=f.preferred)
            # the node's task: a handover in flight at stop is abandoned (the broker keeps its role)
            self.spawn(self._hand_back(f), f"rebalance-{f.group}")
        return [f.group for f in moves]

    def pending(self, group: str) -> str:
        """Why a maintenance drain or a move back of ``group`` waits on this leader ("" = none)."""
        for what, waiting in (("maintenance drain", self.drainer.waiting),
                              ("move back to the preferred master", self.rebalancer.waiting)):
            if group in waiting:
                return f"{what} waits: {waiting[group]}"
        return ""

    # ------------------------------------------------------------------ maintenance

    def drain_facts(self) -> list[DrainFacts]:
        now = self.liveness.now_ms()
        table = self.liveness.heartbeats
        out = []
        for g, master, epoch, addr, maint, pref, sss, ids in self.sm.draining_groups():
            members = []
            for b in ids:
                r = table.report(g, b)
                healthy = table.alive(g, b, now) and (r is None or not (r.degraded or r.diverged))
                members.append(Member(b, b in sss, healthy, r.max_offset if r is not None else 0))
            out.append(DrainFacts(g, master, epoch, addr, maint, pref, tuple(members)))
        return out

    def drain_once(self) -> list[str]:
        """Leader only: start moving the master role off masters in maintenance
        (controller/failover/drain.py); returns the groups whose handover started."""
        if not self.is_leader:
            return []
        moves = self.drainer.plan(self.drain_facts(), self.liveness.now_ms())
        for g, why in self.drainer.waiting.items():
            if self._drain_waiting_said.get(g) != why:
                self.log.warning("maintenance_drain_waiting", group=g, reason=why)
        self._drain_waiting_said = dict(self.drainer.waiting)
        for mv in moves:
            self.log.info("maintenance_drain_started", group=mv.group, brokerId=mv.master, epoch=mv.master_epoch,
                          to=mv.to)
            self.spawn(self._drain(mv), f"drain-{mv.group}")
        return [mv.group for mv in moves]

    async def _drain(self, mv: DrainMove) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await transfer_master(mv.master_address, self.tls_config, mv.to,
                                            self.rebalance_handover_timeout_ms, reason="maintenance")
        except Exception as e:  # noqa: BLE001 - a bad address or TLS files: the broker keeps its role
            why = repr(e)[:200]
        finally:
            self.drainer.done(mv.group, ok, self.liveness.now_ms())
            log = self.log.info if ok else self.log.warning
            log("maintenance_drain_done", group=mv.group, brokerId=mv.master, epoch=mv.master_epoch, to=mv.to,
                ok=ok, reason=why)

    def maintenance_leadership_once(self) -> bool:
        """Leader only: a leader in maintenance hands Raft leadership to a member outside it."""
        if not self.is_leader or self.leave_leadership is None or self._leaving or not self.in_maintenance():
            return False
        now = self.liveness.now_ms()
        if now < self._leave_not_before:
            return False
        self._leaving = True
        self._leave_not_before = now + LEAVE_RETRY_MS      # a move that did not happen is tried again later

        async def leave() -> None:
            try:
                assert self.leave_leadership is not None
                await self.leave_leadership()
            finally:
                self._leaving = False

        self.spawn(leave(), "maintenance-leave-leadership")
        return True

    # ------------------------------------------------------------------ gray failover

    def group_health(self, now_ms: int) -> list[GroupHealth]:
        """Every group's replicas as this node hears them: alive, in sync, health, digests."""
        table = self.liveness.heartbeats
        out = []
        for g, master, epoch, addr, sss, ids in self.sm.groups_members():
            reps = []
            for b in ids:
                r = table.report(g, b)
                reps.append(Replica(b, table.alive(g, b, now_ms), b in sss,
                                    r.health.reasons if r is not None and r.health is not None else (),
                                    r is not None and r.diverged, r.max_offset if r is not None else 0))
            out.append(GroupHealth(g, master, epoch, addr, tuple(reps)))
        return out

    def gray_once(self) -> str | None:
        """Leader only, with gray_failover: start moving at most one group's master off a degraded
        master (controller/failover/gray.py); returns the group."""
        on, delay_ms, cooldown_ms = self.sm.gray_failover()
        if not on or not self.is_leader:
            return None
        now = self.liveness.now_ms()
        move = self.gray.plan(self.group_health(now), delay_ms, cooldown_ms, now)
        if self.gray.storm != self._storm_said:
            self._storm_said = self.gray.storm
            if self.gray.storm:
                self.log.warning("cluster_degraded", groups=sorted(self.gray.waiting),
                                 note="more than half of the alive brokers report a slow disk or event loop: "
                                      "no master is moved (a shared storage or host problem, not one replica's)")
                self.alerter.emit("cluster_degraded", "*", sm_adapter.wall_ms(),
                                  degraded_groups=sorted(self.gray.waiting))
            else:
                self.log.info("cluster_degraded_ended")
        if move is None:
            return None
        self.log.warning("gray_failover_started", group=move.group, brokerId=move.master, epoch=move.master_epoch,
                         to=move.to, reasons=list(move.reasons))
        self.alerter.emit("gray_failover", move.group, sm_adapter.wall_ms(), epoch=move.master_epoch,
                          master=move.master, to=move.to, reasons=list(move.reasons))
        self.spawn(self._move_off(move), f"gray-{move.group}")
        return move.group

    async def _move_off(self, move: Move) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await transfer_master(move.master_address, self.tls_config, move.to,
                                            self.rebalance_handover_timeout_ms,
                                            reason=f"gray_failover: {','.join(move.reasons)}")
        except Exception as e:  # noqa: BLE001 - a bad address or TLS files: the broker keeps its role
            why = repr(e)[:200]
        finally:
            self.gray.done(move.group, ok, self.liveness.now_ms())
            self.log.warning("gray_failover_done", group=move.group, brokerId=move.master,
                             epoch=move.master_epoch, to=move.to, reasons=list(move.reasons), ok=ok, reason=why)

    async def _hand_back(self, f: GroupFacts) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await transfer_master(f.master_address, self.tls_config, f.preferred,
                                            self.rebalance_handover_timeout_ms)
        except Exception as e:  # noqa: BLE001 - a bad address or TLS files: the broker keeps its role
            why = repr(e)[:200]
        finally:
            self.rebalancer.done(f.group, ok, self.liveness.now_ms())
            log = self.log.info if ok else self.log.warning
            log("preferred_master_handover_done", group=f.group, brokerId=f.master, epoch=f.master_epoch,
                to=f.preferred, ok=ok, reason=why)
