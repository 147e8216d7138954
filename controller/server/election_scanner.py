"""Elections of a controller node: the dead-master scan, and the elections and SyncStateSet
changes clients ask for.

The scan (``scan_once``, run by the leader's loop, leader_loop.py) acts only on the leader: it
asks the pure ScanPlanner (controller/failover/liveness.py) which masters it suspects, asks the
peers for a majority verdict (the liveness desk), and proposes the planned elections through the
node's one proposal path. Election requests carry the leader's liveness evidence (alive reports,
dead ids, crash-only) so the state machine decides on facts in the log. Master moves by handover
(preferred masters, drains, gray failover) are master_moves.py's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec
from autoswitch.controller import messages as msgs
from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.failover.liveness import ScanPlanner
from autoswitch.controller.server import sm_adapter
from autoswitch.controller.server.service_common import NodeReply

from autoswitch.base.features import OPERATOR_LEVEL
from autoswitch.base.log import EventLogger

if TYPE_CHECKING:
    from autoswitch.controller.server.alerts import Alerter
    from autoswitch.controller.server.liveness_desk import LivenessDesk
    from autoswitch.controller.server.proposer import Proposer


class ElectionScanner:
    def __init__(self, *, sm: sm_adapter.AppliedStateMachine, liveness: LivenessDesk, proposer: Proposer,
                 alerter: Alerter, log: EventLogger) -> None:
        self.sm = sm
        self.liveness = liveness
        self.proposer = proposer
        self.alerter = alerter
        self.log = log
        self.planner = ScanPlanner()

    @property
    def is_leader(self) -> bool:
        return self.proposer.is_leader

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
            v = view.verdicts.get((m.broker_name, m.master_broker_id))
            if v is not None and v.alive_votes > 0:
                # Some controller still hears it: a partition, or brokers that heartbeat to fewer
                # controllers than a majority (a RocketMQ broker whose controllerAddr does not name
                # every controller is failed over again and again; docs/rocketmq.md)
                self.alerter.emit_once("master_heard_by_minority", m.broker_name, m.master_epoch,
                                       sm_adapter.wall_ms(), master=m.master_broker_id, alive_votes=v.alive_votes,
                                       dead_votes=v.dead_votes)
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
