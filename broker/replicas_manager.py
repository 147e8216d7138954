"""ReplicasManager decisions, sans-IO (RocketMQ's ReplicasManager, controller mode).

The core never touches a socket, a file or a clock. The driver (``replicas_adapter``
for asyncio, the simulator later) feeds it inputs -- ``start``, ``on_reply``,
``on_failure``, ``on_replica_info``, ``propose``, ``tick`` -- each with ``now`` (seconds,
monotonic), and performs the commands they return. Every command that expects an
answer carries a ``req`` id; the driver answers it exactly once with ``on_reply`` or
``on_failure`` (a timeout is a failure of kind RETRY).

Lifecycle: fenced at start -> find the controller leader -> registration
(GetNextBrokerId -> write temp identity with a registerCheckCode -> ApplyBrokerId
-> write identity file, drop temp -> RegisterBroker) -> running: heartbeat every
controller, sync replica info every ``sync_interval_ms`` and on push, ask for an
election while there is no master, switch role only for a higher MasterEpoch,
carry SyncStateSet proposals (one in flight), fence on lease expiry.

Why resumable at any step: the identity files are the only durable state.
identity file -> register with it; temp file -> re-apply its (brokerId,
registerCheckCode), which the controller treats as idempotent; nothing -> fresh.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from autoswitch.broker.identity import BrokerIdentity, LoadedIdentity, TempIdentity
from autoswitch.broker.lease import LeaseConfig, MasterLease
from autoswitch.controller.api import FailKind, ReplicaInfo

from autoswitch.base.backoff import Backoff
from autoswitch.base.errors import ConfigError
from autoswitch.base.limits import MAX_REPLICAS_PER_GROUP
from autoswitch.base.log import get_logger

MAX_SYNC_STATE_SET = MAX_REPLICAS_PER_GROUP  # members per proposal


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ReplicasConfig:
    cluster: str
    group: str  # brokerName
    broker_addr: str  # registered with the controller; clients and slaves find us by it
    controllers: tuple[str, ...]  # every controller node: heartbeats go to all of them
    heartbeat_interval_ms: int = 1000
    sync_interval_ms: int = 5000
    backoff_min_ms: int = 100
    backoff_max_ms: int = 5000
    election_priority: int = 0  # lower wins among equal (epoch, maxOffset), RocketMQ's rule
    lease: LeaseConfig = field(default_factory=LeaseConfig)

    def validate(self) -> ReplicasConfig:
        if not self.controllers:
            raise ConfigError("at least one controller address is required", key="controllers")
        if not (10 <= self.heartbeat_interval_ms <= 60_000):
            raise ConfigError("heartbeat_interval_ms must be in [10, 60000]", key="heartbeat_interval_ms")
        if not (self.heartbeat_interval_ms <= self.sync_interval_ms <= 600_000):
            raise ConfigError("sync_interval_ms must be in [heartbeat_interval_ms, 600000]", key="sync_interval_ms")
        if not (1 <= self.backoff_min_ms <= self.backoff_max_ms <= 60_000):
            raise ConfigError("need 1 <= backoff_min_ms <= backoff_max_ms <= 60000", key="backoff_max_ms")
        if self.lease.heartbeat_timeout_ms <= self.heartbeat_interval_ms:
            raise ConfigError("heartbeat_timeout_ms must be > heartbeat_interval_ms", key="heartbeat_timeout_ms")
        self.lease.validate(self.heartbeat_interval_ms)
        return self


# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Failure:
    kind: FailKind
    code: str
    message: str = ""
    leader_addr: str | None = None


@dataclass(frozen=True)
class RoleChange:
    """Given to role-switch hooks after the switch is done."""

    role: str  # "master" | "slave" | "fenced"
    cluster: str
    group: str
    broker_id: int
    epoch: int
    old_master_id: int
    old_master_addr: str
    new_master_id: int
    new_master_addr: str
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class FindLeader:
    req: int


@dataclass(frozen=True)
class GetNextBrokerId:
    req: int
    cluster: str
    group: str


@dataclass(frozen=True)
class WriteTempIdentity:
    req: int
    temp: TempIdentity


@dataclass(frozen=True)
class ApplyBrokerId:
    req: int
    cluster: str
    group: str
    broker_id: int
    register_check_code: str


@dataclass(frozen=True)
class CommitIdentity:
    """Write the identity file, then remove the temp file."""

    req: int
    identity: BrokerIdentity


@dataclass(frozen=True)
class RemoveTempIdentity:
    """Fire and forget: a stale temp file next to a valid identity file."""


@dataclass(frozen=True)
class RegisterBroker:
    req: int
    cluster: str
    group: str
    broker_id: int
    broker_addr: str


@dataclass(frozen=True)
class SendHeartbeat:
    """To ONE controller. The driver adds maxOffset/confirmOffset read at send time."""

    req: int
    controller: str
    round: int
    cluster: str
    group: str
    broker_id: int
    broker_addr: str
    epoch: int
    election_priority: int
    heartbeat_timeout_ms: int
    clean_shutdown: bool = True  # log intact: see ReplicasManager.log_intact


@dataclass(frozen=True)
class GetReplicaInfo:
    req: int
    group: str


@dataclass(frozen=True)
class ElectMaster:
    req: int
    cluster: str
    group: str
    broker_id: int


@dataclass(frozen=True)
class AlterSyncStateSet:
    req: int
    group: str
    master_id: int
    master_epoch: int
    new_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class BecomeMaster:
    req: int
    epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class BecomeSlave:
    req: int
    epoch: int
    master_id: int
    master_addr: str


@dataclass(frozen=True)
class BecomeFenced:
    """Deposed without a successor (controller recorded "no master" at a higher epoch)."""

    req: int
    epoch: int
    reason: str


@dataclass(frozen=True)
class SetFenced:
    """The master's lease expired (fenced=True) or was renewed (fenced=False)."""

    fenced: bool
    reason: str | None


@dataclass(frozen=True)
class SyncStateSetLearned:
    """The controller holds a newer SyncStateSet for our epoch than we last told HA (e.g. an
    admin change, or the push of our own proposal); HAMaster.update_sync_state_set ignores stale ones."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ProposalResult:
    proposal: int
    sync_state_set: frozenset[int] | None
    sync_state_set_epoch: int | None
    error: Failure | None = None


@dataclass(frozen=True)
class NotifyRoleChange:
    change: RoleChange


Command = (
    FindLeader
    | GetNextBrokerId
    | WriteTempIdentity
    | ApplyBrokerId
    | CommitIdentity
    | RemoveTempIdentity
    | RegisterBroker
    | SendHeartbeat
    | GetReplicaInfo
    | ElectMaster
    | AlterSyncStateSet
    | BecomeMaster
    | BecomeSlave
    | BecomeFenced
    | SetFenced
    | SyncStateSetLearned
    | ProposalResult
    | NotifyRoleChange
)


# Failures of these tell us something about who leads the controller cluster.
_LEADER_AWARE = (FindLeader, GetNextBrokerId, ApplyBrokerId, RegisterBroker, GetReplicaInfo, ElectMaster, AlterSyncStateSet)


class Phase(StrEnum):
    NEW = "new"
    FIND_LEADER = "find_leader"
    GET_NEXT_ID = "get_next_id"
    WRITE_TEMP = "write_temp"
    APPLY_ID = "apply_id"
    COMMIT_ID = "commit_id"
    REGISTER = "register"
    RUNNING = "running"
    STOPPED = "stopped"


_CONTROLLER_STEPS = (Phase.GET_NEXT_ID, Phase.APPLY_ID, Phase.REGISTER)


# --------------------------------------------------------------------------- the core


class ReplicasManager:
    def __init__(
        self,
        config: ReplicasConfig,
        new_check_code: Callable[[], str] | None = None,
        rand: Callable[[], float] | None = None,
    ) -> None:
        self.config = config.validate()
        self._new_check_code = new_check_code or (lambda: uuid.uuid4().hex)
        rand = rand or random.random
        bmin, bmax = config.backoff_min_ms / 1000.0, config.backoff_max_ms / 1000.0
        self.lease = MasterLease(config.controllers, config.lease)
        self._log = get_logger("broker.replicas", group=config.group, cluster=config.cluster)

        self.phase = Phase.NEW
        self.broker_id: int | None = None
        self.log_intact = True
        self._log_last_epoch = 0
        self._temp: TempIdentity | None = None
        self._next_req = 1
        self._pending: dict[int, Command] = {}

        # registration step machine
        self._step_req: int | None = None
        self._step_retry_at = 0.0
        self._step_backoff = Backoff(bmin, bmax, rand=rand)
        self._resume_after_leader: Phase | None = None
        self.leader: str | None = None

        # running
        self._hb_interval = config.heartbeat_interval_ms / 1000.0
        self._sync_interval = config.sync_interval_ms / 1000.0
        self._next_hb_at = 0.0
        self._hb_inflight: dict[str, int] = {}
        self._sync_req: int | None = None
        self._next_sync_at = 0.0
        self._sync_backoff = Backoff(bmin, bmax, rand=rand)
        self._elect_req: int | None = None
        self._elect_retry_at = 0.0
        self._elect_backoff = Backoff(bmin, bmax, rand=rand)

        # role: `target` is the newest controller view, `applied_*` what the broker runs
        self.target: ReplicaInfo | None = None
        self.role = "fenced"
        self.applied_epoch = 0
        self.applied_master_id = 0
        self.applied_master_addr = ""
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        self._role_req: int | None = None
        self._resume_refused_epoch = 0
        self._role_retry_at = 0.0
        self._role_backoff = Backoff(bmin, bmax, rand=rand)
        self._lease_fenced = False  # what the last SetFenced told the broker

        self._learned: list[SyncStateSetLearned] = []  # emitted by the next tick
        # SyncStateSet proposals from HA: one in flight
        self._alter_req: int | None = None
        self._alter_proposal: int | None = None

    # ------------------------------------------------------------------ helpers

    def _req(self, make: Callable[[int], Command]) -> Command:
        req = self._next_req
        self._next_req += 1
        cmd = make(req)
        self._pending[req] = cmd
        # one registration step + one heartbeat per controller + sync + elect + alter + role
        assert len(self._pending) <= len(self.config.controllers) + 5, self._pending
        return cmd

    def next_deadline(self) -> float | None:
        """Earliest time a tick can produce something (None: only inputs can)."""
        times: list[float] = []
        if self.phase in (Phase.STOPPED, Phase.NEW):
            return None
        if self.phase != Phase.RUNNING:
            if self._step_req is None:
                times.append(self._step_retry_at)
        else:
            times.append(self._next_hb_at)
            if self._sync_req is None:
                times.append(self._next_sync_at)
            if self._needs_election() and self._elect_req is None:
                times.append(self._elect_retry_at)
            if self._role_req is None and self._role_change_due() and not self._refusing_resume():
                times.append(self._role_retry_at)
        if self.role == "master" and self.config.lease.enabled and not self._lease_fenced:
            exp = self.lease.expires_at()
            if exp is not None:
                times.append(exp)
        return min(times) if times else None

    # ------------------------------------------------------------------ inputs

    def start(
        self, now: float, loaded: LoadedIdentity, log_intact: bool = True, log_last_epoch: int = 0
    ) -> list[Command]:
        """Boot with what the identity files hold (the driver refused corrupt files already).

        ``log_intact``: the previous run of this broker ended cleanly (or there was none), so the
        log holds everything this broker ever acknowledged; reported in every heartbeat as
        cleanShutdown until the broker is back in a SyncStateSet. ``log_last_epoch``: the last
        epoch of the local EpochFile."""
        assert self.phase == Phase.NEW
        self.log_intact = log_intact
        self._log_last_epoch = log_last_epoch
        if not log_intact:
            self._log.warning("unclean_restart", logLastEpoch=log_last_epoch,
                              note="reported as not clean until back in a SyncStateSet")
        out: list[Command] = []
        for item in (loaded.identity, loaded.temp):
            if item is not None and (item.cluster, item.group) != (self.config.cluster, self.config.group):
                raise ConfigError(f"identity for {item.cluster}#{item.group} given to {self.config.cluster}#{self.config.group}")
        if loaded.identity is not None:
            self.broker_id = loaded.identity.broker_id
            resume = Phase.REGISTER
            if loaded.temp is not None:
                out.append(RemoveTempIdentity())
            self._log.info("identity_loaded", brokerId=self.broker_id)
        elif loaded.temp is not None:
            self._temp = loaded.temp
            resume = Phase.APPLY_ID
            self._log.info("registration_resumed", brokerId=loaded.temp.broker_id, step="apply_id")
        else:
            resume = Phase.GET_NEXT_ID
            self._log.info("registration_fresh")
        self._resume_after_leader = resume
        self.phase = Phase.FIND_LEADER
        self._step_retry_at = now
        out.extend(self.tick(now))
        return out

    def tick(self, now: float) -> list[Command]:
        out: list[Command] = []
        if self.phase in (Phase.NEW, Phase.STOPPED):
            return out
        if self.phase != Phase.RUNNING:
            out.extend(self._drive_registration(now))
            return out
        out.extend(self._drive_heartbeats(now))
        if self._sync_req is None and now >= self._next_sync_at:
            cmd = self._req(lambda r: GetReplicaInfo(r, self.config.group))
            self._sync_req = cmd.req
            out.append(cmd)
        out.extend(self._drive_election(now))
        out.extend(self._drive_role(now))
        out.extend(self._check_lease(now))
        if self._learned:
            out.append(self._learned[-1])  # only the newest matters
            self._learned.clear()
        return out

    def on_replica_info(self, info: ReplicaInfo, now: float, source: str = "push") -> list[Command]:
        """A WatchReplicaInfo push (or any other fresh view of the group)."""
        self._observe(info, source)
        return self.tick(now) if self.phase == Phase.RUNNING else []

    def propose(
        self, proposal: int, master_epoch: int, sync_state_set_epoch: int, new_set: frozenset[int], now: float
    ) -> list[Command]:
        """HA asks to change the SyncStateSet. Answered by a ProposalResult command."""

        def reject(code: str, msg: str) -> list[Command]:
            self._log.warning("sss_proposal_rejected_locally", code=code, reason=msg, proposal=proposal)
            return [ProposalResult(proposal, None, None, Failure(FailKind.REJECTED, code, msg))]

        if self.role != "master" or self.broker_id is None:
            return reject("NOT_MASTER", f"role is {self.role}")
        if master_epoch != self.applied_epoch:
            return reject("STALE_MASTER_EPOCH", f"proposal for epoch {master_epoch}, running {self.applied_epoch}")
        if self.broker_id not in new_set:
            return reject("SET_WITHOUT_MASTER", "the master must stay in its SyncStateSet")
        if len(new_set) > MAX_SYNC_STATE_SET:
            return reject("SET_TOO_LARGE", f"more than {MAX_SYNC_STATE_SET} members")
        if self._role_change_due():
            return reject("DEPOSED", "a newer MasterEpoch is known")
        if self._alter_req is not None:
            return reject("PROPOSAL_IN_FLIGHT", "one SyncStateSet change at a time")
        cmd = self._req(
            lambda r: AlterSyncStateSet(
                r, self.config.group, self.broker_id, master_epoch, frozenset(new_set), sync_state_set_epoch
            )
        )
        self._alter_req, self._alter_proposal = cmd.req, proposal
        self._log.info(
            "sss_proposed", epoch=master_epoch, syncStateSet=sorted(new_set), syncStateSetEpoch=sync_state_set_epoch
        )
        return [cmd]

    def shutdown(self, now: float) -> list[Command]:
        """Stop issuing commands; answers that still arrive are dropped."""
        self.phase = Phase.STOPPED
        return []

    def on_reply(self, req: int, value: object, now: float) -> list[Command]:
        cmd = self._pending.pop(req, None)
        if cmd is None or self.phase == Phase.STOPPED:
            return []  # answered twice or after shutdown: nothing waits for it
        out: list[Command] = []
        match cmd:
            case SendHeartbeat():
                self._hb_inflight.pop(cmd.controller, None)
                if value is True:  # the controller says it is the leader
                    self.leader = cmd.controller
                if self.lease.on_reply(cmd.controller, cmd.round, now):
                    out.extend(self._check_lease(now))
                return out
            case FindLeader() | GetNextBrokerId() | WriteTempIdentity() | ApplyBrokerId() | CommitIdentity() | RegisterBroker():
                out.extend(self._registration_reply(cmd, value, now))
            case GetReplicaInfo():
                self._sync_req = None
                self._sync_backoff.reset()
                self._next_sync_at = now + self._sync_interval
                assert isinstance(value, ReplicaInfo)
                self._observe(value, "poll")
            case ElectMaster():
                self._elect_req = None
                assert isinstance(value, ReplicaInfo)
                self._log.info("elect_master_done", masterId=value.master_id, epoch=value.master_epoch)
                self._observe(value, "elect")
                if not self._needs_election():
                    self._elect_backoff.reset()  # still needed (e.g. controller kept us): keep backing off
            case AlterSyncStateSet():
                out.extend(self._alter_reply(cmd, value))
            case BecomeMaster() | BecomeSlave() | BecomeFenced():
                out.extend(self._role_done(cmd, now))
            case _:
                raise AssertionError(f"unexpected reply to {cmd!r}")
        out.extend(self.tick(now))
        return out

    def on_failure(self, req: int, failure: Failure, now: float) -> list[Command]:
        cmd = self._pending.pop(req, None)
        if cmd is None or self.phase == Phase.STOPPED:
            return []
        out: list[Command] = []
        if isinstance(cmd, _LEADER_AWARE):
            self._note_leader(failure)
        match cmd:
            case SendHeartbeat():
                self._hb_inflight.pop(cmd.controller, None)
                self._log.debug("heartbeat_failed", controller=cmd.controller, code=failure.code)
                return out
            case FindLeader() | GetNextBrokerId() | WriteTempIdentity() | ApplyBrokerId() | CommitIdentity() | RegisterBroker():
                self._registration_failure(cmd, failure, now)
            case GetReplicaInfo():
                self._sync_req = None
                self._next_sync_at = now + min(self._sync_interval, self._sync_backoff.next())
                self._log.warning("replica_info_sync_failed", code=failure.code, message=failure.message)
            case ElectMaster():
                self._elect_req = None
                self._elect_retry_at = now + self._elect_backoff.next()
                self._log.warning("elect_master_failed", code=failure.code, message=failure.message)
            case AlterSyncStateSet():
                self._alter_req = None
                proposal, self._alter_proposal = self._alter_proposal, None
                assert proposal is not None
                self._log.warning("sss_alter_failed", code=failure.code, message=failure.message)
                out.append(ProposalResult(proposal, None, None, failure))
            case BecomeMaster() | BecomeSlave() | BecomeFenced():
                self._role_req = None
                self._role_retry_at = now + self._role_backoff.next()
                hint = None
                if failure.code == "STALE_EPOCH":
                    # The local EpochFile already holds this epoch (a master restarted before the
                    # controller noticed). Retrying cannot help until the broker resumes an epoch
                    # it owns or the controller moves on; say so instead of failing quietly.
                    hint = "local log already has this MasterEpoch; needs a new election or broker-side resume"
                self._log.error("role_change_failed", command=type(cmd).__name__, epoch=cmd.epoch,
                                code=failure.code, message=failure.message, hint=hint)
            case _:
                raise AssertionError(f"unexpected failure of {cmd!r}")
        out.extend(self.tick(now))
        return out

    # ------------------------------------------------------------------ registration

    def _note_leader(self, failure: Failure) -> None:
        if failure.kind == FailKind.NOT_LEADER:
            self.leader = failure.leader_addr or None
        elif failure.kind == FailKind.RETRY:
            self.leader = None

    def _drive_registration(self, now: float) -> list[Command]:
        if self._step_req is not None or now < self._step_retry_at:
            return []
        if self.phase in _CONTROLLER_STEPS and self.leader is None:
            self._resume_after_leader = self.phase
            self.phase = Phase.FIND_LEADER
        cfg = self.config
        match self.phase:
            case Phase.FIND_LEADER:
                cmd = self._req(FindLeader)
            case Phase.GET_NEXT_ID:
                cmd = self._req(lambda r: GetNextBrokerId(r, cfg.cluster, cfg.group))
            case Phase.WRITE_TEMP:
                assert self._temp is not None
                temp = self._temp
                cmd = self._req(lambda r: WriteTempIdentity(r, temp))
            case Phase.APPLY_ID:
                assert self._temp is not None
                t = self._temp
                cmd = self._req(lambda r: ApplyBrokerId(r, cfg.cluster, cfg.group, t.broker_id, t.register_check_code))
            case Phase.COMMIT_ID:
                assert self._temp is not None
                ident = self._temp.identity()
                cmd = self._req(lambda r: CommitIdentity(r, ident))
            case Phase.REGISTER:
                assert self.broker_id is not None
                bid = self.broker_id
                cmd = self._req(lambda r: RegisterBroker(r, cfg.cluster, cfg.group, bid, cfg.broker_addr))
            case _:
                raise AssertionError(self.phase)
        self._step_req = cmd.req
        return [cmd]

    def _advance(self, phase: Phase, now: float) -> None:
        self.phase = phase
        self._step_req = None
        self._step_retry_at = now
        self._step_backoff.reset()

    def _registration_reply(self, cmd: Command, value: object, now: float) -> list[Command]:
        assert cmd.req == self._step_req
        cfg = self.config
        match cmd:
            case FindLeader():
                self.leader = value if isinstance(value, str) and value else "unknown"
                self._log.info("controller_leader_found", leader=self.leader)
                nxt = self._resume_after_leader
                assert nxt is not None
                self._resume_after_leader = None
                self._advance(nxt, now)
            case GetNextBrokerId():
                assert isinstance(value, int) and value >= 1, value
                self._temp = TempIdentity(cfg.cluster, cfg.group, value, self._new_check_code())
                self._log.info("broker_id_offered", brokerId=value)
                self._advance(Phase.WRITE_TEMP, now)
            case WriteTempIdentity():
                self._advance(Phase.APPLY_ID, now)
            case ApplyBrokerId():
                assert self._temp is not None
                self._log.info("broker_id_applied", brokerId=self._temp.broker_id)
                self._advance(Phase.COMMIT_ID, now)
            case CommitIdentity():
                assert self._temp is not None
                self.broker_id = self._temp.broker_id
                self._temp = None
                self._advance(Phase.REGISTER, now)
            case RegisterBroker():
                assert isinstance(value, ReplicaInfo)
                self._advance(Phase.RUNNING, now)
                self._log = self._log.bind(brokerId=self.broker_id)
                self._log.info("registered", masterId=value.master_id, epoch=value.master_epoch)
                self._next_hb_at = now
                self._next_sync_at = now + self._sync_interval
                self._observe(value, "register")
        return []

    def _registration_failure(self, cmd: Command, failure: Failure, now: float) -> None:
        assert cmd.req == self._step_req
        self._step_req = None
        step = type(cmd).__name__
        if isinstance(cmd, ApplyBrokerId) and failure.kind == FailKind.CONFLICT:
            # The offered id went to another broker (its registerCheckCode won). Nothing of ours
            # was applied; a fresh id replaces the temp file atomically.
            self._log.warning("broker_id_conflict", brokerId=cmd.broker_id, code=failure.code)
            self._temp = None
            self._advance(Phase.GET_NEXT_ID, now)
            return
        if failure.kind == FailKind.NOT_LEADER and failure.leader_addr:
            self._log.info("controller_leader_moved", step=step, leader=failure.leader_addr)
            self._step_retry_at = now  # the leader is known: retry the same step at once
            return
        if isinstance(cmd, FindLeader):
            self.leader = None
        delay = self._step_backoff.next()
        self._step_retry_at = now + delay
        self._log.warning(
            "registration_step_failed", step=step, kind=str(failure.kind), code=failure.code,
            message=failure.message, retryInMs=int(delay * 1000),
        )

    # ------------------------------------------------------------------ running

    def _heartbeat_cmd(self, controller: str, rnd: int) -> SendHeartbeat:
        assert self.broker_id is not None
        cfg = self.config
        bid, epoch, intact = self.broker_id, self.applied_epoch, self.log_intact
        cmd = self._req(
            lambda r: SendHeartbeat(
                r, controller, rnd, cfg.cluster, cfg.group, bid, cfg.broker_addr, epoch,
                cfg.election_priority, cfg.lease.heartbeat_timeout_ms, intact,
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

    def _needs_election(self) -> bool:
        if self.target is None:
            return False
        return self.target.master_id == 0 or self._refusing_resume()

    def _refusing_resume(self) -> bool:
        """Named master of an epoch our log already has, right after an unclean restart: our log
        may have lost acknowledged messages that the slaves hold, and resuming would make the
        slaves truncate them. Ask for an election instead; the controller skips us as not clean."""
        t = self.target
        return (
            t is not None and t.master_id == self.broker_id and self.applied_epoch == 0
            and not self.log_intact and t.master_epoch <= self._log_last_epoch
            # Alone in the SyncStateSet, nobody can hold an acknowledged message we lost:
            # resuming is the best anyone can do, and refusing would leave the group masterless.
            and bool(t.sync_state_set - {self.broker_id})
        )

    def _drive_election(self, now: float) -> list[Command]:
        if not self._needs_election() or self._elect_req is not None or now < self._elect_retry_at:
            return []
        assert self.broker_id is not None
        cfg, bid = self.config, self.broker_id
        cmd = self._req(lambda r: ElectMaster(r, cfg.cluster, cfg.group, bid))
        self._elect_req = cmd.req
        # Until a reply or a push shows a master, ask again no faster than the backoff allows.
        self._elect_retry_at = now + self._elect_backoff.next()
        self._log.info("elect_master_requested", epoch=self.target.master_epoch if self.target else 0)
        return [cmd]

    def _observe(self, info: ReplicaInfo, source: str) -> None:
        """Keep the newest controller view; role changes happen in _drive_role."""
        cur = self.target
        if info.master_id != 0 and info.master_id not in info.sync_state_set:
            self._log.error("replica_info_invalid", source=source, masterId=info.master_id,
                            syncStateSet=sorted(info.sync_state_set))
            return
        if info.master_epoch < self.applied_epoch or (cur is not None and info.master_epoch < cur.master_epoch):
            self._log.info("stale_replica_info_ignored", source=source, epoch=info.master_epoch,
                           knownEpoch=max(self.applied_epoch, cur.master_epoch if cur else 0))
            return
        if cur is not None and info.master_epoch == cur.master_epoch:
            if info.master_id != cur.master_id:
                # One master per epoch is the controller's invariant; a second one is a bug we refuse to follow.
                self._log.error("epoch_conflict_ignored", source=source, epoch=info.master_epoch,
                                masterId=info.master_id, knownMasterId=cur.master_id)
                return
            if (not self.log_intact and self.role == "slave" and self.applied_epoch == info.master_epoch
                    and self.broker_id in info.sync_state_set):
                self._note_log_intact("in_sync_state_set")
            if info.sync_state_set_epoch > cur.sync_state_set_epoch:
                self.target = info
                if self.applied_epoch == info.master_epoch and info.sync_state_set_epoch > self.sync_state_set_epoch:
                    self.sync_state_set = info.sync_state_set
                    self.sync_state_set_epoch = info.sync_state_set_epoch
                    if self.role == "master":
                        self._learned.append(SyncStateSetLearned(info.sync_state_set, info.sync_state_set_epoch))
            return
        if cur is None or info.master_epoch > cur.master_epoch:
            self._log.info("replica_info_newer", source=source, epoch=info.master_epoch, masterId=info.master_id,
                           syncStateSet=sorted(info.sync_state_set))
            self.target = info
            self._role_backoff.reset()
            self._role_retry_at = 0.0
            if info.master_id == 0:  # news of a lost master: ask at once, back off only on failures
                self._elect_backoff.reset()
                self._elect_retry_at = 0.0

    def _note_log_intact(self, why: str) -> None:
        if not self.log_intact:
            self.log_intact = True
            self._log.info("log_intact_again", reason=why, epoch=self.applied_epoch)

    def _role_change_due(self) -> bool:
        return self.target is not None and self.target.master_epoch > self.applied_epoch

    def _drive_role(self, now: float) -> list[Command]:
        if self._role_req is not None or not self._role_change_due() or now < self._role_retry_at:
            return []
        t = self.target
        assert t is not None and self.broker_id is not None
        if self._refusing_resume():
            if self._resume_refused_epoch != t.master_epoch:
                self._resume_refused_epoch = t.master_epoch
                self._log.warning("unclean_master_resume_refused", epoch=t.master_epoch,
                                  logLastEpoch=self._log_last_epoch, action="elect_master")
            return []
        if t.master_id == self.broker_id:
            cmd = self._req(lambda r: BecomeMaster(r, t.master_epoch, t.sync_state_set, t.sync_state_set_epoch))
        elif t.master_id != 0:
            cmd = self._req(lambda r: BecomeSlave(r, t.master_epoch, t.master_id, t.master_addr))
        elif self.role == "master":
            cmd = self._req(lambda r: BecomeFenced(r, t.master_epoch, "deposed_no_master"))
        else:
            # No master at a higher epoch and we are not master: nothing to switch; remember the
            # epoch so a later master at this epoch is not mistaken for news.
            self.applied_epoch = t.master_epoch
            self._log.info("no_master", epoch=t.master_epoch)
            return []
        self._role_req = cmd.req
        self._log.info("role_change_started", command=type(cmd).__name__, epoch=t.master_epoch,
                       masterId=t.master_id, fromRole=self.role)
        return [cmd]

    def _role_done(self, cmd: BecomeMaster | BecomeSlave | BecomeFenced, now: float) -> list[Command]:
        assert cmd.req == self._role_req
        self._role_req = None
        self._role_backoff.reset()
        old_id, old_addr = self.applied_master_id, self.applied_master_addr
        assert cmd.epoch > self.applied_epoch, (cmd.epoch, self.applied_epoch)
        self.applied_epoch = cmd.epoch
        out: list[Command] = []
        match cmd:
            case BecomeMaster():
                self.role = "master"
                self.applied_master_id, self.applied_master_addr = self.broker_id or 0, self.config.broker_addr
                self.sync_state_set, self.sync_state_set_epoch = cmd.sync_state_set, cmd.sync_state_set_epoch
                self._note_log_intact("became_master")
            case BecomeSlave():
                self.role = "slave"
                self.applied_master_id, self.applied_master_addr = cmd.master_id, cmd.master_addr
                self.sync_state_set, self.sync_state_set_epoch = frozenset(), 0
                t = self.target
                if t is not None and t.master_epoch == cmd.epoch and self.broker_id in t.sync_state_set:
                    self._note_log_intact("in_sync_state_set")
            case BecomeFenced():
                self.role = "fenced"
                self.applied_master_id, self.applied_master_addr = 0, ""
                self.sync_state_set, self.sync_state_set_epoch = frozenset(), 0
        out.extend(self._check_lease(now))
        self._log.info("role_changed", role=self.role, epoch=self.applied_epoch, masterId=self.applied_master_id,
                       oldMasterId=old_id)
        assert self.broker_id is not None
        out.append(
            NotifyRoleChange(
                RoleChange(
                    self.role, self.config.cluster, self.config.group, self.broker_id, self.applied_epoch,
                    old_id, old_addr, self.applied_master_id, self.applied_master_addr,
                    self.sync_state_set, self.sync_state_set_epoch,
                )
            )
        )
        return out

    def _alter_reply(self, cmd: AlterSyncStateSet, value: object) -> list[Command]:
        assert cmd.req == self._alter_req
        self._alter_req = None
        proposal, self._alter_proposal = self._alter_proposal, None
        assert proposal is not None
        new_set, new_epoch = value  # type: ignore[misc]
        new_set = frozenset(new_set)
        if cmd.master_epoch == self.applied_epoch and self.role == "master":
            if new_epoch >= self.sync_state_set_epoch:  # a push of the same change may have come first
                self.sync_state_set, self.sync_state_set_epoch = new_set, new_epoch
            else:
                self._log.warning("sss_alter_reply_stale", syncStateSetEpoch=new_epoch,
                                  knownSyncStateSetEpoch=self.sync_state_set_epoch)
        self._log.info("sss_altered", syncStateSet=sorted(new_set), syncStateSetEpoch=new_epoch)
        return [ProposalResult(proposal, new_set, new_epoch)]

    def _check_lease(self, now: float) -> list[Command]:
        """Tell the broker when a master's lease state flips (and clear it after any role change)."""
        want = self.role == "master" and self.config.lease.enabled and not self.lease.valid(now)
        if want == self._lease_fenced:
            return []
        self._lease_fenced = want
        if want:
            self._log.warning("master_lease_expired", epoch=self.applied_epoch,
                              leaseMs=self.config.lease.master_lease_ms, answered=self.lease.status(now)["answered"])
            return [SetFenced(True, "lease_expired")]
        if self.role == "master":
            self._log.info("master_lease_renewed", epoch=self.applied_epoch,
                           remainingMs=int(self.lease.remaining(now) * 1000))
        return [SetFenced(False, None)]

    # ------------------------------------------------------------------ queries

    def may_acknowledge(self, now: float) -> bool:
        """True only for a master that holds its lease and knows of no newer MasterEpoch.
        The write path asks this before acknowledging and before advancing confirmOffset."""
        if self.role != "master" or self.phase != Phase.RUNNING:
            return False
        if self._role_change_due():
            return False  # deposed: the switch is on its way
        return self.lease.valid(now)

    def fenced_reason(self, now: float) -> str | None:
        if self.phase != Phase.RUNNING:
            return "starting" if self.phase != Phase.STOPPED else "stopped"
        if self.role == "master":
            if self._role_change_due():
                return "deposed"
            if not self.lease.valid(now):
                return "lease_expired"
            return None
        if self._refusing_resume():
            return "unclean_restart"
        if self.role == "fenced":
            return "no_master" if self._needs_election() else "waiting_for_role"
        return None

    def status(self, now: float) -> dict:
        t = self.target
        return {
            "phase": str(self.phase),
            "cluster": self.config.cluster,
            "group": self.config.group,
            "brokerId": self.broker_id,
            "role": self.role,
            "fenced": self.fenced_reason(now),
            "masterEpoch": self.applied_epoch,
            "masterId": self.applied_master_id,
            "masterAddr": self.applied_master_addr,
            "syncStateSet": sorted(self.sync_state_set),
            "syncStateSetEpoch": self.sync_state_set_epoch,
            "controllerEpoch": t.master_epoch if t else None,
            "controllerLeader": self.leader,
            "logIntact": self.log_intact,
            "lease": self.lease.status(now),
        }
