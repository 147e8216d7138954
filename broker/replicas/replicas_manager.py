"""ReplicasManager decisions, sans-IO (RocketMQ's ReplicasManager, controller mode).

The core never touches a socket, a file or a clock. The driver (``replicas_adapter`` for asyncio,
the simulator) feeds it inputs -- ``start``, ``on_reply``, ``on_failure``, ``on_replica_info``,
``propose``, ``tick`` -- each with ``now`` (seconds, monotonic), and performs the commands they
return (rm_commands.py). Every command that expects an answer carries a ``req`` id; the driver
answers it exactly once with ``on_reply`` or ``on_failure`` (a timeout is a failure of kind RETRY).

Lifecycle: fenced at start -> registration (rm_registration.py: find the controller leader,
GetNextBrokerId -> temp identity -> ApplyBrokerId -> identity file -> RegisterBroker) -> running:
heartbeat every controller and keep the master lease (here), sync replica info every
``sync_interval_ms`` and on push, switch roles and ask for elections (rm_role.py), carry
SyncStateSet proposals one at a time (rm_proposals.py). This module composes the three parts and
owns what they share: the request ids, the heartbeats and the lease.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from autoswitch.broker.replicas.identity import LoadedIdentity
from autoswitch.broker.replicas.lease import LeaseReasks, MasterLease
from autoswitch.broker.replicas.rm_commands import (
    LEADER_AWARE,
    AdoptControllers,
    AlterSyncStateSet,
    ApplyBrokerId,
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    Command,
    CommitIdentity,
    DrainTo,
    ElectMaster,
    Failure,
    FindLeader,
    GetNextBrokerId,
    GetReplicaInfo,
    HandoverDone,
    HandoverElect,
    HandoverResult,
    NotifyRoleChange,
    PauseWrites,
    Phase,
    ProposalResult,
    RegisterBroker,
    RemoveTempIdentity,
    Request,
    ResumeWrites,
    RoleChange,
    SendHeartbeat,
    SetFenced,
    SyncStateSetLearned,
    WriteTempIdentity,
)
from autoswitch.broker.replicas.rm_config import ReplicasConfig
from autoswitch.broker.replicas.rm_fence import WriteFence
from autoswitch.broker.replicas.rm_handover import Handover
from autoswitch.broker.replicas.rm_proposals import SyncStateSetProposals
from autoswitch.broker.replicas.rm_registration import Registration
from autoswitch.broker.replicas.rm_role import RoleKeeper
from autoswitch.controller.api import FailKind, HeartbeatAnswer, ReplicaInfo

from autoswitch.base import features
from autoswitch.base.addr import is_hostport
from autoswitch.base.backoff import Backoff
from autoswitch.base.limits import MAX_CONTROLLERS
from autoswitch.base.log import get_logger
from autoswitch.base.quorum import majority

FEATURE_FENCE = "feature_level_unsupported"   # the fence reason of a broker behind the cluster's level

# The vocabulary is importable from here too: the driver and the tests speak to this module.
__all__ = [
    "AdoptControllers", "AlterSyncStateSet", "ApplyBrokerId", "BecomeFenced", "BecomeMaster",
    "BecomeSlave", "Command", "Request", "CommitIdentity", "ElectMaster", "FailKind", "Failure",
    "FindLeader", "GetNextBrokerId", "GetReplicaInfo", "NotifyRoleChange", "Phase", "ProposalResult",
    "RegisterBroker", "RemoveTempIdentity", "ReplicaInfo", "ReplicasConfig", "ReplicasManager",
    "RoleChange", "SendHeartbeat", "SetFenced", "SyncStateSetLearned", "WriteTempIdentity", "DrainTo",
    "HandoverDone", "HandoverElect", "HandoverResult", "PauseWrites", "ResumeWrites",
]


# --------------------------------------------------------------------------- the manager


class ReplicasManager:
    def __init__(
        self,
        config: ReplicasConfig,
        new_check_code: Callable[[], str] | None = None,
        rand: Callable[[], float] | None = None,
        incarnation: str | None = None,
    ) -> None:
        """``incarnation``: this process's identity towards the controllers (random by default,
        new at every start; stated in registration and heartbeats)."""
        self.config = cfg = config.validate()
        # the node id of the controller that last answered a heartbeat as the Raft leader ("" =
        # none known): the only controller that may move this broker's mastership (TransferMaster)
        self.leader_node = ""
        self.incarnation = incarnation or uuid.uuid4().hex[:16]
        rand = rand or random.random
        bmin, bmax = cfg.backoff_min_ms / 1000.0, cfg.backoff_max_ms / 1000.0
        self.lease = MasterLease(cfg.controllers, cfg.lease)
        self.controllers_index = 0    # the membership change the controller list is from (0: configured)
        self.feature_unsupported = 0  # the finalized feature level above ours a controller named (0: none)
        self._log = get_logger("broker.replicas", group=cfg.group, cluster=cfg.cluster)
        self._next_req = 1
        self._pending: dict[int, Request] = {}
        self.reg = Registration(cfg.cluster, cfg.group, cfg.broker_addr, self._req, Backoff(bmin, bmax, rand=rand),
                                new_check_code or (lambda: uuid.uuid4().hex), self._log, cfg.fixed_broker_id,
                                log_intact=lambda: self.roles.log_intact)
        self.roles = RoleKeeper(cfg.cluster, cfg.group, cfg.broker_addr, self._req, Backoff(bmin, bmax, rand=rand),
                                Backoff(bmin, bmax, rand=rand), self._log)
        self.proposals = SyncStateSetProposals(cfg.group, self._req, self._log)
        self.fence = WriteFence(self.roles, self.lease, self._log)
        self.handover = Handover(cfg.cluster, cfg.group, self._req, self.roles, self.fence, self._log)
        self._hb_interval = cfg.heartbeat_interval_ms / 1000.0
        self._sync_interval = cfg.sync_interval_ms / 1000.0
        self._next_hb_at = 0.0
        self._hb_inflight: dict[str, int] = {}
        self._reasks = LeaseReasks()
        self._sync_req: int | None = None
        self._next_sync_at = 0.0
        self._sync_backoff = Backoff(bmin, bmax, rand=rand)
        self._stopped = False

    # ------------------------------------------------------------------ the parts' state, read-only

    @property
    def phase(self) -> Phase:
        return Phase.STOPPED if self._stopped else self.reg.phase

    @property
    def broker_id(self) -> int | None:
        return self.reg.broker_id

    @property
    def leader(self) -> str | None:
        return self.reg.leader

    @property
    def role(self) -> str:
        return self.roles.role

    @property
    def target(self) -> ReplicaInfo | None:
        return self.roles.target

    @property
    def applied_epoch(self) -> int:
        return self.roles.applied_epoch

    @property
    def applied_master_id(self) -> int:
        return self.roles.applied_master_id

    @property
    def sync_state_set(self) -> frozenset[int]:
        return self.roles.sync_state_set

    @property
    def log_intact(self) -> bool:
        return self.roles.log_intact

    # ------------------------------------------------------------------ helpers

    def _req(self, make: Callable[[int], Request]) -> Request:
        req = self._next_req
        self._next_req += 1
        cmd = make(req)
        self._pending[req] = cmd
        # one registration step + one heartbeat per controller + sync + elect + alter + role
        # + a handover's election or cancel
        assert len(self._pending) <= len(self.config.controllers) + 6, self._pending
        return cmd

    def next_deadline(self) -> float | None:
        """Earliest time a tick can produce something (None: only inputs can)."""
        times: list[float] = []
        if self.phase in (Phase.STOPPED, Phase.NEW):
            return None
        if self.phase != Phase.RUNNING:
            step = self.reg.next_deadline()
            if step is not None:
                times.append(step)
        else:
            times.append(self._next_hb_at)
            if self._sync_req is None:
                times.append(self._next_sync_at)
            times.extend(self.roles.deadlines())
            h = self.handover.next_deadline()
            if h is not None:
                times.append(h)
        if self.role == "master" and self.config.lease.enabled and self.fence.told is None:
            exp = self.lease.expires_at()
            if exp is not None:
                times.append(exp)
        return min(times) if times else None

    # ------------------------------------------------------------------ inputs

    def start(
        self, now: float, loaded: LoadedIdentity, log_intact: bool = True, log_last_epoch: int = 0,
        previous_incarnation: str = "", crashed: bool = False,
    ) -> list[Command]:
        """Boot with what the identity files hold (the driver refused corrupt files already).

        ``log_intact``: the previous run of this broker ended cleanly (or there was none), so the
        log holds everything this broker ever acknowledged; reported in every heartbeat as
        cleanShutdown (and at registration) until, as a slave, it has fetched up to its master's
        confirmOffset (``on_caught_up``) or the controller made it master. ``log_last_epoch``: the last
        epoch of the local EpochFile. ``previous_incarnation``: the incarnation whose stop (clean,
        or a crash named by the abort marker) left this log, so the controllers know this start
        continues that replica: intact, or (unclean) as its last known holder. ``crashed``: the
        previous run did not stop cleanly (durable or not): this start never resumes mastership of
        an epoch its log already has, and says so at registration, so the controllers move a
        master that crashed to a new MasterEpoch (a slave may hold, fsynced, a tail of that epoch
        this log lost: docs/replicas-manager.md "Durable acknowledgements")."""
        assert self.phase == Phase.NEW
        self.roles.log_intact = log_intact
        self.roles.crashed = crashed
        self.reg.crashed = crashed
        self.roles.log_last_epoch = log_last_epoch
        self.reg.incarnation = self.incarnation
        self.reg.previous_incarnation = previous_incarnation
        if not log_intact:
            self._log.warning("unclean_restart", logLastEpoch=log_last_epoch,
                              note="reported as not clean until caught up with the master's confirmOffset")
        out = self.reg.start(now, loaded)
        out.extend(self.tick(now))
        return out

    def tick(self, now: float) -> list[Command]:
        out: list[Command] = []
        if self.phase in (Phase.NEW, Phase.STOPPED):
            return out
        if self.phase != Phase.RUNNING:
            return self.reg.drive(now)
        out.extend(self._drive_heartbeats(now))
        if self._sync_req is None and now >= self._next_sync_at:
            cmd = self._req(lambda r: GetReplicaInfo(r, self.config.group))
            self._sync_req = cmd.req
            out.append(cmd)
        out.extend(self.roles.drive_election(now))
        out.extend(self.roles.drive(now))
        out.extend(self.handover.tick(now))
        out.extend(self._check_fence(now))
        out.extend(self.roles.take_learned())
        return out

    def on_replica_info(self, info: ReplicaInfo, now: float, source: str = "push") -> list[Command]:
        """A WatchReplicaInfo push (or any other fresh view of the group)."""
        self.roles.observe(info, source)
        return self.tick(now) if self.phase == Phase.RUNNING else []

    def on_clock_gap(self, gap_s: float, now: float) -> list[Command]:
        """The broker's clock stood still while real time went on (host suspend, paused VM): the
        lease is void until fresh heartbeat rounds renew it."""
        if self.role == "master" and self.config.lease.enabled:
            self._log.warning("clock_gap_lease_dropped", gapMs=int(gap_s * 1000), epoch=self.roles.applied_epoch)
        self.lease.void()
        return self._check_fence(now)

    def start_handover(self, now: float, to: int | None, acked: Mapping[int, int], max_offset: int,
                       timeout_s: float, leaving: bool = False) -> list[Command]:
        """Hand the master role to ``to`` (None: the best in-sync slave), rm_handover.py; ``leaving``:
        the broker stops afterwards. ``acked``: brokerId -> offset acked on a live HA connection or -1."""
        return self.handover.start(now, to, acked, max_offset, self.fence.reason(self._running_master, now),
                                   timeout_s, leaving)

    def on_handover_drained(self, now: float, caught_up: bool, acked_at: int) -> list[Command]:
        """The DrainTo the handover asked for ended: the target holds the log (or not in time)."""
        out = self.handover.on_drained(now, caught_up, acked_at)
        out.extend(self.tick(now))
        return out

    def on_caught_up(self, master_epoch: int, now: float) -> list[Command]:
        """The HA slave's log reached the confirmOffset sent by its master of ``master_epoch``."""
        self.roles.on_caught_up(master_epoch)
        return []

    def propose(
        self, proposal: int, master_epoch: int, sync_state_set_epoch: int, new_set: frozenset[int], now: float,
        leaving: tuple[tuple[int, str], ...] = (),
    ) -> list[Command]:
        """HA asks to change the SyncStateSet (``leaving``: why members go). Answered by a
        ProposalResult command."""
        return self.proposals.propose(self.roles, proposal, master_epoch, sync_state_set_epoch, new_set, leaving)

    def on_controllers(self, controllers: tuple[str, ...], now: float) -> list[Command]:
        """The broker adopted another controller configuration (a heartbeat reply named it):
        heartbeat rounds and the lease follow it (MasterLease.replace_controllers keeps the expiry
        granted so far, and only rounds sent from now on count), also when the list is the same."""
        if not controllers:
            return []
        self.lease.replace_controllers(controllers)
        if controllers == self.config.controllers:
            return []
        self._log.info("controllers_changed", old=list(self.config.controllers), new=list(controllers))
        self.config = replace(self.config, controllers=controllers)
        for c in [c for c in self._hb_inflight if c not in controllers]:
            self._hb_inflight.pop(c)
        return self.tick(now) if self.phase == Phase.RUNNING else []

    def _membership_news(self, answer: HeartbeatAnswer, told_by: str, now: float) -> list[Command]:
        """Adopt the controllers' voters a heartbeat answer names: a newer membership change from
        any voter; the leader's even when older (a cluster restored from a snapshot). Checked like
        any network input: a list too long or not HOST:PORT is refused with a log line."""
        index = answer.controllers_index
        if not (index > self.controllers_index
                or (answer.is_leader and answer.controllers and index != self.controllers_index)):
            return []
        new = tuple(dict.fromkeys(answer.controllers))
        if not new or len(new) > MAX_CONTROLLERS or not all(is_hostport(a) for a in new):
            self._log.warning("controllers_refused", told_by=told_by, index=index, controllers=list(new)[:16])
            return []
        self.controllers_index = index
        self._log.info("controllers_adopted", index=index, told_by=told_by, controllers=list(new))
        out: list[Command] = [AdoptControllers(new, index)] if new != self.config.controllers else []
        # also for the same list: grants now name the new index, earlier rounds must not mix in
        out.extend(self.on_controllers(new, now))
        return out

    def _feature_news(self, level: int, told_by: str) -> list[Command]:
        """The cluster finalized a feature level this build does not run (the leader refuses that
        while this broker is registered and heard, so it joined or was downgraded afterwards): it
        acknowledges no write from then on (the others may already write what it cannot read) and
        says so once per level; the operator runs a release that supports it (docs/compatibility.md)."""
        why = features.unsupported(level)
        if why is None or level == self.feature_unsupported:
            return []
        first = not self.feature_unsupported
        self.feature_unsupported = level
        self._log.critical("feature_level_unsupported", told_by=told_by, level=level,
                           supported=features.SUPPORTED_LEVEL, action="writes fenced: " + why)
        return [SetFenced(True, FEATURE_FENCE)] if first and self._running_master else []

    def shutdown(self, now: float) -> list[Command]:
        """Stop issuing commands; answers that still arrive are dropped."""
        self._stopped = True
        return []

    def on_reply(self, req: int, value: object, now: float) -> list[Command]:
        cmd = self._pending.pop(req, None)
        if cmd is None or self.phase == Phase.STOPPED:
            return []  # answered twice or after shutdown: nothing waits for it
        out: list[Command] = []
        if self.handover.owns(req):
            out.extend(self.handover.on_reply(now, cmd, value))
            out.extend(self.tick(now))
            return out
        match cmd:
            case SendHeartbeat():
                self._hb_inflight.pop(cmd.controller, None)
                assert isinstance(value, HeartbeatAnswer)
                # Membership news before the grant: a controller refuses grants to a broker that
                # counts another configuration, and its reply is how the broker learns the right one.
                out.extend(self._membership_news(value, cmd.controller, now))
                out.extend(self._feature_news(value.feature_level, cmd.controller))
                if not value.lease_granted:
                    # A controller that holds a DEAD report on us, or has applied a newer MasterEpoch,
                    # answers but refuses the grant; counting that reply would let a deposed master
                    # keep acknowledging writes (sim seed 200): the round does not count.
                    self._log.debug("heartbeat_not_granted", controller=cmd.controller, masterEpoch=value.master_epoch)
                    if self._running_master:
                        at = self._reasks.after_refusal(cmd.epoch, value.master_epoch, self.roles.applied_epoch, now)
                        self._next_hb_at = self._next_hb_at if at is None else min(self._next_hb_at, at)
                    return out
                if value.is_leader:  # the controller says it is the leader
                    self.reg.leader = cmd.controller
                    self.leader_node = value.node_id
                elif value.node_id and value.node_id == self.leader_node:
                    self.leader_node = ""       # it no longer leads
                if self.lease.on_reply(cmd.controller, cmd.round, now, value.node_id):
                    out.extend(self._check_fence(now))
                return out
            case FindLeader() | GetNextBrokerId() | WriteTempIdentity() | ApplyBrokerId() | CommitIdentity() | RegisterBroker():
                registered = self.reg.on_reply(cmd, value, now)
                if registered is not None:
                    self._running(registered, now)
            case GetReplicaInfo():
                self._sync_req = None
                self._sync_backoff.reset()
                self._next_sync_at = now + self._sync_interval
                assert isinstance(value, ReplicaInfo)
                self.roles.observe(value, "poll")
            case ElectMaster():
                assert isinstance(value, ReplicaInfo)
                self.roles.on_elected(value)
            case AlterSyncStateSet():
                out.append(self.proposals.on_reply(cmd, value, self.roles))  # type: ignore[arg-type]
            case BecomeMaster() | BecomeSlave() | BecomeFenced():
                notify = self.roles.on_switched(cmd)
                if isinstance(cmd, BecomeMaster):
                    # Heartbeats sent as a slave carry the old MasterEpoch and grant no lease: a new
                    # master asks for its lease now rather than at the next period (up to 1/3 of
                    # the lease of unavailability after every election or handover).
                    self._next_hb_at = now
                out.extend(self._check_fence(now))
                out.append(notify)
            case _:
                raise AssertionError(f"unexpected reply to {cmd!r}")
        out.extend(self.tick(now))
        return out

    def _running(self, info: ReplicaInfo, now: float) -> None:
        """Registration is done: bind the brokerId everywhere and start heartbeats and syncs."""
        bid = self.reg.broker_id
        self.roles.broker_id = bid
        self._log = self._log.bind(brokerId=bid)
        self.reg.log = self.roles.log = self.proposals.log = self.fence.log = self.handover.log = self._log
        self._log.info("registered", masterId=info.master_id, epoch=info.master_epoch)
        self._next_hb_at = now
        self._next_sync_at = now + self._sync_interval
        self.roles.observe(info, "register")

    def on_failure(self, req: int, failure: Failure, now: float) -> list[Command]:
        cmd = self._pending.pop(req, None)
        if cmd is None or self.phase == Phase.STOPPED:
            return []
        out: list[Command] = []
        if isinstance(cmd, LEADER_AWARE):
            self.reg.note_leader(failure)
        if self.handover.owns(req):
            out.extend(self.handover.on_failure(now, cmd, failure))
            out.extend(self.tick(now))
            return out
        match cmd:
            case SendHeartbeat():
                self._hb_inflight.pop(cmd.controller, None)
                self._log.debug("heartbeat_failed", controller=cmd.controller, code=failure.code)
                return out
            case FindLeader() | GetNextBrokerId() | WriteTempIdentity() | ApplyBrokerId() | CommitIdentity() | RegisterBroker():
                self.reg.on_failure(cmd, failure, now)
            case GetReplicaInfo():
                self._sync_req = None
                self._next_sync_at = now + min(self._sync_interval, self._sync_backoff.next())
                self._log.warning("replica_info_sync_failed", code=failure.code, message=failure.message)
            case ElectMaster():
                self.roles.on_elect_failed(failure, now)
            case AlterSyncStateSet():
                out.append(self.proposals.on_failure(cmd, failure))
            case BecomeMaster() | BecomeSlave() | BecomeFenced():
                self.roles.on_switch_failed(cmd, failure, now)
            case _:
                raise AssertionError(f"unexpected failure of {cmd!r}")
        out.extend(self.tick(now))
        return out

    # ------------------------------------------------------------------ heartbeats and the lease

    def _heartbeat_cmd(self, controller: str, rnd: int) -> SendHeartbeat:
        assert self.broker_id is not None
        cfg = self.config
        bid, epoch, intact = self.broker_id, self.roles.applied_epoch, self.roles.log_intact
        cmd = self._req(
            lambda r: SendHeartbeat(
                r, controller, rnd, cfg.cluster, cfg.group, bid, cfg.broker_addr, epoch,
                cfg.election_priority, cfg.lease.heartbeat_timeout_ms, intact,
                lease_quorum=majority(len(cfg.controllers)), controllers_index=self.controllers_index,
            )
        )
        assert isinstance(cmd, SendHeartbeat)
        self._hb_inflight[controller] = cmd.req
        return cmd

    def _drive_heartbeats(self, now: float) -> list[Command]:
        if now < self._next_hb_at:
            return []
        # Missed rounds are not replayed: the next round starts from now.
        self._next_hb_at = max(self._next_hb_at + self._hb_interval, now)
        if self._next_hb_at <= now:
            self._next_hb_at = now + self._hb_interval
        rnd = self.lease.on_round_sent(now)
        out: list[Command] = []
        for c in self.config.controllers:
            if c in self._hb_inflight:
                continue  # one heartbeat in flight per controller; a slow node skips a round
            out.append(self._heartbeat_cmd(c, rnd))
        return out

    def _check_fence(self, now: float) -> list[Command]:
        return self.fence.check(self._running_master, now)

    @property
    def _running_master(self) -> bool:
        return self.role == "master" and self.phase == Phase.RUNNING

    # ------------------------------------------------------------------ queries

    def may_acknowledge(self, now: float) -> bool:
        """True only for a master that holds its lease, knows of no newer MasterEpoch and has
        no handover in doubt. The write path asks this before acknowledging and before
        advancing confirmOffset."""
        return self._running_master and self.fence.reason(True, now) is None and not self.feature_unsupported

    def fenced_reason(self, now: float) -> str | None:
        if self.phase != Phase.RUNNING:
            return "starting" if self.phase != Phase.STOPPED else "stopped"
        if self.feature_unsupported:
            return FEATURE_FENCE
        if self.role == "master":
            return self.fence.reason(True, now)
        if self.roles.refusing_resume():
            return "unclean_restart"
        if self.role == "fenced":
            return "no_master" if self.roles.needs_election() else "waiting_for_role"
        return None

    def status(self, now: float) -> dict[str, Any]:
        t = self.target
        r = self.roles
        return {
            "phase": str(self.phase),
            "cluster": self.config.cluster,
            "group": self.config.group,
            "brokerId": self.broker_id,
            "role": r.role,
            "fenced": self.fenced_reason(now),
            "masterEpoch": r.applied_epoch,
            "masterId": r.applied_master_id,
            "masterAddr": r.applied_master_addr,
            "syncStateSet": sorted(r.sync_state_set),
            "syncStateSetEpoch": r.sync_state_set_epoch,
            "controllerEpoch": t.master_epoch if t else None,
            "controllerLeader": self.leader,
            "logIntact": r.log_intact,
            "lease": self.lease.status(now),
        }
