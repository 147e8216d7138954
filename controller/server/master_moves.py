"""The leader's master moves: periodic jobs that move a group's master role to another replica by
a broker handover (TransferMaster), never by an election. One desk per job, each a thin driver
around its pure planner in controller/failover/ (the planner decides; the desk gathers the facts,
logs the decisions once, and runs the handover as the node's task):

* ``RebalanceDesk`` — back to the preferred master (rebalance.py, ``auto_rebalance_masters``);
* ``DrainDesk`` — off a master in maintenance (drain.py);
* ``GrayDesk`` — off a master whose disk or event loop is slow (gray.py, ``gray_failover``).

The leader's loop (leader_loop.py) runs them after each dead-master scan; a desk does nothing on
a follower. docs/controller.md "Preferred masters", "Gray failover", docs/operations-controller.md
"Maintenance" have the rules.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from autoswitch.controller.failover.drain import DrainFacts, DrainMove, DrainPlanner, Member
from autoswitch.controller.failover.gray import GrayPlanner, GroupHealth, Move, Replica
from autoswitch.controller.failover.rebalance import GroupFacts, RebalancePlanner
from autoswitch.controller.server import sm_adapter
from autoswitch.controller.server.broker_calls import transfer_master

from autoswitch.base import tls
from autoswitch.base.log import EventLogger

if TYPE_CHECKING:
    from autoswitch.controller.api import BrokerReport
    from autoswitch.controller.server.alerts import Alerter
    from autoswitch.controller.server.liveness_desk import LivenessDesk


@dataclass(frozen=True)
class MoveDeps:
    """What every master-move desk uses: the applied state, this node's heartbeat table and clock
    (the liveness desk), whether it leads, the alerts, and how it reaches a broker."""

    sm: sm_adapter.AppliedStateMachine
    liveness: LivenessDesk
    is_leader: Callable[[], bool]
    alerter: Alerter
    tls_config: tls.TLSConfig
    handover_timeout_ms: int
    log: EventLogger
    spawn: Callable[[Coroutine[Any, Any, None], str], None]

    async def hand_over(self, address: str, to: int, reason: str = "") -> tuple[bool, str]:
        """(whether the master at ``address`` handed its role to ``to``, why not)."""
        try:
            return await transfer_master(address, self.tls_config, to, self.handover_timeout_ms, reason=reason)
        except Exception as e:  # noqa: BLE001 - a bad address or TLS files: the broker keeps its role
            return False, repr(e)[:200]


def _unhealthy(r: BrokerReport | None) -> bool:
    """A replica's last report says its disk or loop is slow, or its digests differ."""
    return r is not None and (r.degraded or r.diverged)


class RebalanceDesk:
    """Back to the preferred masters, at most ``rebalance_max_in_flight`` at a time; never to a
    degraded or diverged preferred master (it was moved off for that), none while ``storm()``."""

    def __init__(self, deps: MoveDeps, storm: Callable[[], bool]) -> None:
        self.d = deps
        self.storm = storm
        self.planner = RebalancePlanner()
        self._said: dict[str, str] = {}

    @property
    def waiting(self) -> dict[str, str]:
        return self.planner.waiting

    def once(self) -> list[str]:
        """Returns the groups whose move started; every group that waits says why (logged once per
        kind of reason, and in ``admin explain``)."""
        d = self.d
        on, delay_ms, max_in_flight = d.sm.rebalance()
        if not on or not d.is_leader():
            self.planner.waiting = {}
            return []
        now = d.liveness.now_ms()
        alive = d.liveness.heartbeats.alive
        facts = [GroupFacts(g, m, e, addr, pref, pref in sss, alive(g, pref, now), m is not None and alive(g, m, now),
                            _unhealthy(d.liveness.heartbeats.report(g, pref)), maint)
                 for g, m, e, addr, pref, sss, maint in d.sm.preferred_masters()]
        paused = "more than half of the alive brokers report themselves degraded: no master moves" if self.storm() else ""
        moves = self.planner.plan(facts, delay_ms, now, max_in_flight, paused)
        kinds = {g: re.sub(r"\d+", "#", why) for g, why in self.planner.waiting.items()}   # counts move every scan
        for g, kind in kinds.items():
            if self._said.get(g) != kind:
                d.log.info("preferred_master_postponed", group=g, reason=self.planner.waiting[g])
        self._said = kinds
        for f in moves:
            d.log.info("preferred_master_handover_started", group=f.group, brokerId=f.master,
                       epoch=f.master_epoch, to=f.preferred)
            # the node's task: a handover in flight at stop is abandoned (the broker keeps its role)
            d.spawn(self._hand_back(f), f"rebalance-{f.group}")
        return [f.group for f in moves]

    async def _hand_back(self, f: GroupFacts) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await self.d.hand_over(f.master_address, f.preferred)
        finally:
            self.planner.done(f.group, ok, self.d.liveness.now_ms())
            log = self.d.log.info if ok else self.d.log.warning
            log("preferred_master_handover_done", group=f.group, brokerId=f.master, epoch=f.master_epoch,
                to=f.preferred, ok=ok, reason=why)


class DrainDesk:
    """Off the masters an operator put in maintenance, to a healthy in-sync replica."""

    def __init__(self, deps: MoveDeps) -> None:
        self.d = deps
        self.planner = DrainPlanner()
        self._said: dict[str, str] = {}

    @property
    def waiting(self) -> dict[str, str]:
        return self.planner.waiting

    def facts(self) -> list[DrainFacts]:
        d = self.d
        now = d.liveness.now_ms()
        table = d.liveness.heartbeats
        out = []
        for g, master, epoch, addr, maint, pref, sss, ids in d.sm.draining_groups():
            members = []
            for b in ids:
                r = table.report(g, b)
                healthy = table.alive(g, b, now) and not _unhealthy(r)
                members.append(Member(b, b in sss, healthy, r.max_offset if r is not None else 0))
            out.append(DrainFacts(g, master, epoch, addr, maint, pref, tuple(members)))
        return out

    def once(self) -> list[str]:
        """Returns the groups whose handover started."""
        d = self.d
        if not d.is_leader():
            return []
        moves = self.planner.plan(self.facts(), d.liveness.now_ms())
        for g, why in self.planner.waiting.items():
            if self._said.get(g) != why:
                d.log.warning("maintenance_drain_waiting", group=g, reason=why)
        self._said = dict(self.planner.waiting)
        for mv in moves:
            d.log.info("maintenance_drain_started", group=mv.group, brokerId=mv.master, epoch=mv.master_epoch, to=mv.to)
            d.spawn(self._drain(mv), f"drain-{mv.group}")
        return [mv.group for mv in moves]

    async def _drain(self, mv: DrainMove) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await self.d.hand_over(mv.master_address, mv.to, reason="maintenance")
        finally:
            self.planner.done(mv.group, ok, self.d.liveness.now_ms())
            log = self.d.log.info if ok else self.d.log.warning
            log("maintenance_drain_done", group=mv.group, brokerId=mv.master, epoch=mv.master_epoch, to=mv.to,
                ok=ok, reason=why)


class GrayDesk:
    """Off a master whose own health report says its disk or event loop is slow: at most one
    group at a time, none while more than half of the alive brokers are degraded (a storm)."""

    def __init__(self, deps: MoveDeps) -> None:
        self.d = deps
        self.planner = GrayPlanner()
        self._storm_said = False

    @property
    def storm(self) -> bool:
        return self.planner.storm

    def group_health(self, now_ms: int) -> list[GroupHealth]:
        """Every group's replicas as this node hears them: alive, in sync, health, digests."""
        table = self.d.liveness.heartbeats
        out = []
        for g, master, epoch, addr, sss, ids in self.d.sm.groups_members():
            reps = []
            for b in ids:
                r = table.report(g, b)
                reps.append(Replica(b, table.alive(g, b, now_ms), b in sss,
                                    r.health.reasons if r is not None and r.health is not None else (),
                                    r is not None and r.diverged, r.max_offset if r is not None else 0))
            out.append(GroupHealth(g, master, epoch, addr, tuple(reps)))
        return out

    def once(self) -> str | None:
        """Returns the group whose move started."""
        d = self.d
        on, delay_ms, cooldown_ms = d.sm.gray_failover()
        if not on or not d.is_leader():
            return None
        now = d.liveness.now_ms()
        move = self.planner.plan(self.group_health(now), delay_ms, cooldown_ms, now)
        if self.planner.storm != self._storm_said:
            self._storm_said = self.planner.storm
            if self.planner.storm:
                d.log.warning("cluster_degraded", groups=sorted(self.planner.waiting),
                              note="more than half of the alive brokers report a slow disk or event loop: "
                                   "no master is moved (a shared storage or host problem, not one replica's)")
                d.alerter.emit("cluster_degraded", "*", sm_adapter.wall_ms(), degraded_groups=sorted(self.planner.waiting))
            else:
                d.log.info("cluster_degraded_ended")
                d.alerter.alarms.resolved("cluster_degraded", "*", sm_adapter.wall_ms(), "ended")
        if move is None:
            return None
        d.log.warning("gray_failover_started", group=move.group, brokerId=move.master, epoch=move.master_epoch,
                      to=move.to, reasons=list(move.reasons))
        d.alerter.emit("gray_failover", move.group, sm_adapter.wall_ms(), epoch=move.master_epoch,
                       master=move.master, to=move.to, reasons=list(move.reasons))
        d.spawn(self._move_off(move), f"gray-{move.group}")
        return move.group

    async def _move_off(self, move: Move) -> None:
        ok, why = False, "cancelled"
        try:
            ok, why = await self.d.hand_over(move.master_address, move.to,
                                             reason=f"gray_failover: {','.join(move.reasons)}")
        finally:
            self.planner.done(move.group, ok, self.d.liveness.now_ms())
            self.d.log.warning("gray_failover_done", group=move.group, brokerId=move.master,
                               epoch=move.master_epoch, to=move.to, reasons=list(move.reasons), ok=ok, reason=why)


def pending(group: str, drains: DrainDesk, rebalance: RebalanceDesk) -> str:
    """Why a maintenance drain or a move back of ``group`` waits on this leader ("" = none)."""
    for what, waiting in (("maintenance drain", drains.waiting), ("move back to the preferred master", rebalance.waiting)):
        if group in waiting:
            return f"{what} waits: {waiting[group]}"
    return ""
