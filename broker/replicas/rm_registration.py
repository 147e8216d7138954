"""Registration, the first part of the ReplicasManager: find the controller leader, get a brokerId,
persist it, register. Resumable at every step: the identity files are the only durable state
(identity file -> register with it; temp file -> re-apply its (brokerId, registerCheckCode), which
the controller treats as idempotent; nothing -> start fresh)."""

from __future__ import annotations

from collections.abc import Callable

from autoswitch.broker.replicas.identity import LoadedIdentity, TempIdentity
from autoswitch.broker.replicas.rm_commands import (
    CONTROLLER_STEPS,
    ApplyBrokerId,
    Command,
    CommitIdentity,
    Failure,
    FindLeader,
    GetNextBrokerId,
    Issue,
    Phase,
    RegisterBroker,
    RemoveTempIdentity,
    Request,
    WriteTempIdentity,
)
from autoswitch.controller.api import FailKind, ReplicaInfo

from autoswitch.base.backoff import Backoff
from autoswitch.base.errors import ConfigError
from autoswitch.base.log import EventLogger


class Registration:
    def __init__(self, cluster: str, group: str, broker_addr: str, issue: Issue, backoff: Backoff,
                 new_check_code: Callable[[], str], log: EventLogger, fixed_broker_id: int | None = None,
                 log_intact: Callable[[], bool] = lambda: True) -> None:
        self.cluster, self.group, self.broker_addr = cluster, group, broker_addr
        # Registration states whether the last stop was clean: after an unclean one the
        # controller takes this replica out of the SyncStateSet before anyone can elect it.
        self._log_intact = log_intact
        self.incarnation = ""            # set by the ReplicasManager
        self.previous_incarnation = ""
        self.crashed = False        # the last run of this data directory did not stop cleanly
        # The brokerId our certificate names (broker/<group>/<id>): the controller would refuse
        # any other, so we apply exactly this one instead of asking for the next free id.
        self.fixed_broker_id = fixed_broker_id
        self._issue = issue
        self._backoff = backoff
        self._new_check_code = new_check_code
        self.log = log
        self.phase = Phase.NEW
        self.broker_id: int | None = None
        self.leader: str | None = None          # the controller leader's address, when known
        self._temp: TempIdentity | None = None
        self._step_req: int | None = None
        self._step_retry_at = 0.0
        self._resume_after_leader: Phase | None = None

    def start(self, now: float, loaded: LoadedIdentity) -> list[Command]:
        out: list[Command] = []
        for item in (loaded.identity, loaded.temp):
            if item is not None and (item.cluster, item.group) != (self.cluster, self.group):
                raise ConfigError(f"identity for {item.cluster}#{item.group} given to {self.cluster}#{self.group}")
            if item is not None and self.fixed_broker_id not in (None, item.broker_id):
                raise ConfigError(f"the identity files hold brokerId {item.broker_id} but the certificate names "
                                  f"{self.fixed_broker_id}: use that broker's certificate (or its data dir)",
                                  key="tls_cert")
        if loaded.identity is not None:
            self.broker_id = loaded.identity.broker_id
            resume = Phase.REGISTER
            if loaded.temp is not None:
                out.append(RemoveTempIdentity())
            self.log.info("identity_loaded", brokerId=self.broker_id)
        elif loaded.temp is not None:
            self._temp = loaded.temp
            resume = Phase.APPLY_ID
            self.log.info("registration_resumed", brokerId=loaded.temp.broker_id, step="apply_id")
        else:
            resume = Phase.GET_NEXT_ID
            self.log.info("registration_fresh")
        self._resume_after_leader = resume
        self.phase = Phase.FIND_LEADER
        self._step_retry_at = now
        return out

    def next_deadline(self) -> float | None:
        return self._step_retry_at if self._step_req is None else None

    def note_leader(self, failure: Failure) -> None:
        """What a failed controller call says about who leads."""
        if failure.kind == FailKind.NOT_LEADER:
            self.leader = failure.leader_addr or None
        elif failure.kind == FailKind.RETRY:
            self.leader = None

    def drive(self, now: float) -> list[Command]:
        if self._step_req is not None or now < self._step_retry_at:
            return []
        if self.phase in CONTROLLER_STEPS and self.leader is None:
            self._resume_after_leader = self.phase
            self.phase = Phase.FIND_LEADER
        cluster, group = self.cluster, self.group
        match self.phase:
            case Phase.FIND_LEADER:
                cmd = self._issue(FindLeader)
            case Phase.GET_NEXT_ID if self.fixed_broker_id is not None:
                temp = self._temp = TempIdentity(cluster, group, self.fixed_broker_id, self._new_check_code())
                self.log.info("broker_id_from_certificate", brokerId=self.fixed_broker_id)
                self.phase = Phase.WRITE_TEMP
                cmd = self._issue(lambda r: WriteTempIdentity(r, temp))
            case Phase.GET_NEXT_ID:
                cmd = self._issue(lambda r: GetNextBrokerId(r, cluster, group))
            case Phase.WRITE_TEMP:
                assert self._temp is not None
                temp = self._temp
                cmd = self._issue(lambda r: WriteTempIdentity(r, temp))
            case Phase.APPLY_ID:
                assert self._temp is not None
                t = self._temp
                cmd = self._issue(lambda r: ApplyBrokerId(r, cluster, group, t.broker_id, t.register_check_code))
            case Phase.COMMIT_ID:
                assert self._temp is not None
                ident = self._temp.identity()
                cmd = self._issue(lambda r: CommitIdentity(r, ident))
            case Phase.REGISTER:
                assert self.broker_id is not None
                bid, addr, clean = self.broker_id, self.broker_addr, self._log_intact()
                inc, prev, crashed = self.incarnation, self.previous_incarnation, self.crashed
                cmd = self._issue(lambda r: RegisterBroker(r, cluster, group, bid, addr, clean, inc, prev, crashed))
            case _:
                raise AssertionError(self.phase)
        self._step_req = cmd.req
        return [cmd]

    def _advance(self, phase: Phase, now: float) -> None:
        self.phase = phase
        self._step_req = None
        self._step_retry_at = now
        self._backoff.reset()

    def on_reply(self, cmd: Request, value: object, now: float) -> ReplicaInfo | None:
        """The group's ReplicaInfo once RegisterBroker succeeded (phase RUNNING), else None."""
        assert cmd.req == self._step_req
        match cmd:
            case FindLeader():
                self.leader = value if isinstance(value, str) and value else "unknown"
                self.log.info("controller_leader_found", leader=self.leader)
                nxt = self._resume_after_leader
                assert nxt is not None
                self._resume_after_leader = None
                self._advance(nxt, now)
            case GetNextBrokerId():
                assert isinstance(value, int) and value >= 1, value
                self._temp = TempIdentity(self.cluster, self.group, value, self._new_check_code())
                self.log.info("broker_id_offered", brokerId=value)
                self._advance(Phase.WRITE_TEMP, now)
            case WriteTempIdentity():
                self._advance(Phase.APPLY_ID, now)
            case ApplyBrokerId():
                assert self._temp is not None
                self.log.info("broker_id_applied", brokerId=self._temp.broker_id)
                self._advance(Phase.COMMIT_ID, now)
            case CommitIdentity():
                assert self._temp is not None
                self.broker_id = self._temp.broker_id
                self._temp = None
                self._advance(Phase.REGISTER, now)
            case RegisterBroker():
                assert isinstance(value, ReplicaInfo)
                self._advance(Phase.RUNNING, now)
                return value
        return None

    def on_failure(self, cmd: Request, failure: Failure, now: float) -> None:
        assert cmd.req == self._step_req
        self._step_req = None
        step = type(cmd).__name__
        if isinstance(cmd, ApplyBrokerId) and failure.kind == FailKind.CONFLICT and self.fixed_broker_id is not None:
            # Another broker holds the id our certificate names: no other id would be accepted,
            # so wait (an operator cleans the stale one with clean-broker-metadata) and retry.
            delay = self._backoff.next()
            self._step_retry_at = now + delay
            self.log.error("broker_id_taken", brokerId=cmd.broker_id, code=failure.code, retryInMs=int(delay * 1000),
                           note="another broker registered the brokerId this certificate names")
            return
        if isinstance(cmd, ApplyBrokerId) and failure.kind == FailKind.CONFLICT:
            # The offered id went to another broker (its registerCheckCode won). Nothing of ours
            # was applied; a fresh id replaces the temp file atomically.
            self.log.warning("broker_id_conflict", brokerId=cmd.broker_id, code=failure.code)
            self._temp = None
            self._advance(Phase.GET_NEXT_ID, now)
            return
        if failure.code == "CONTROLLER_BROKER_INCARNATION_CONFLICT":
            # Another process runs with our brokerId (a copied data directory?). Never take over
            # from it: wait, fenced, until it stops or the controllers stop hearing it.
            delay = self._backoff.next()
            self._step_retry_at = now + delay
            self.log.error("broker_incarnation_conflict", step=step, message=failure.message,
                           retryInMs=int(delay * 1000), note="another process runs with this brokerId")
            return
        if failure.kind == FailKind.NOT_LEADER and failure.leader_addr:
            self.log.info("controller_leader_moved", step=step, leader=failure.leader_addr)
            self._step_retry_at = now  # the leader is known: retry the same step at once
            return
        if isinstance(cmd, FindLeader):
            self.leader = None
        delay = self._backoff.next()
        self._step_retry_at = now + delay
        self.log.warning(
            "registration_step_failed", step=step, kind=str(failure.kind), code=failure.code,
            message=failure.message, retryInMs=int(delay * 1000),
        )
