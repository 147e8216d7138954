"""Role, the second part of the ReplicasManager: keep the newest controller view of the group
(``target``), switch the broker's role only for a higher MasterEpoch, ask for an election while the
group has no master, and refuse to resume mastership of an epoch after an unclean restart (the
slaves may hold acknowledged messages this log lost)."""

from __future__ import annotations

from autoswitch.broker.replicas.rm_commands import (
    BecomeFenced,
    BecomeMaster,
    BecomeSlave,
    Command,
    ElectMaster,
    Failure,
    Issue,
    NotifyRoleChange,
    RoleChange,
    SyncStateSetLearned,
)
from autoswitch.controller.api import ReplicaInfo

from autoswitch.base.backoff import Backoff
from autoswitch.base.log import EventLogger


class RoleKeeper:
    def __init__(self, cluster: str, group: str, broker_addr: str, issue: Issue, role_backoff: Backoff,
                 elect_backoff: Backoff, log: EventLogger) -> None:
        self.cluster, self.group, self.broker_addr = cluster, group, broker_addr
        self._issue = issue
        self.log = log
        self.broker_id: int | None = None     # set once registered
        self.log_intact = True
        # The last run crashed (durable or not): mastership of an epoch our log has is never resumed
        self.crashed = False
        self.log_last_epoch = 0
        # `target` is the newest controller view, `applied_*` what the broker runs
        self.target: ReplicaInfo | None = None
        self.role = "fenced"
        self.applied_epoch = 0
        self.applied_master_id = 0
        self.applied_master_addr = ""
        self.sync_state_set: frozenset[int] = frozenset()
        self.sync_state_set_epoch = 0
        # the replicas in maintenance as the newest view says (no epoch moves with a cordon, so
        # any view not older than ours updates it): a handover never picks one
        self.maintenance: frozenset[int] = frozenset()
        self.leaving = False    # the broker is stopping: a step-down opens no HA connection
        self._role_req: int | None = None
        self._role_retry_at = 0.0
        self._role_backoff = role_backoff
        self._resume_refused_epoch = 0
        self._elect_req: int | None = None
        self._elect_retry_at = 0.0
        self._elect_backoff = elect_backoff
        self._learned: list[SyncStateSetLearned] = []   # emitted by the next tick

    # ------------------------------------------------------------------ questions

    def role_change_due(self) -> bool:
        return self.target is not None and self.target.master_epoch > self.applied_epoch

    def needs_election(self) -> bool:
        if self.target is None:
            return False
        return self.target.master_id == 0 or self.refusing_resume()

    def refusing_resume(self) -> bool:
        """Named master of an epoch our log already has, right after a crash: our log may have lost
        messages that the slaves hold (acknowledged ones after an unclean run; after a durable run
        unacknowledged ones, which the slaves fsynced before the master did), and resuming would
        write new messages at those offsets: a slave keeps its old bytes at the handshake (same
        epoch, same start) and its first ack would count for messages it does not hold. Only a
        clean stop resumes; otherwise ask for an election: the controller, told of the crash at
        registration, moves the group to a new MasterEpoch (docs/replicas-manager.md)."""
        t = self.target
        return (
            t is not None and t.master_id == self.broker_id and self.applied_epoch == 0
            and (self.crashed or not self.log_intact) and t.master_epoch <= self.log_last_epoch
            # Even alone in the SyncStateSet: never the same epoch again after a crash
            # (the controller moves a lone master to a new epoch when it registers crashed).
        )

    def deadlines(self) -> list[float]:
        times = []
        if self.needs_election() and self._elect_req is None:
            times.append(self._elect_retry_at)
        if self._role_req is None and self.role_change_due() and not self.refusing_resume():
            times.append(self._role_retry_at)
        return times

    def take_learned(self) -> list[SyncStateSetLearned]:
        """The newest SyncStateSet learned for a master since the last call (only the newest matters)."""
        if not self._learned:
            return []
        newest = self._learned[-1]
        self._learned.clear()
        return [newest]

    # ------------------------------------------------------------------ controller view

    def observe(self, info: ReplicaInfo, source: str) -> None:
        """Keep the newest controller view; role changes happen in drive()."""
        cur = self.target
        if info.master_id != 0 and info.master_id not in info.sync_state_set:
            self.log.error("replica_info_invalid", source=source, masterId=info.master_id,
                           syncStateSet=sorted(info.sync_state_set))
            return
        if info.master_epoch < self.applied_epoch or (cur is not None and info.master_epoch < cur.master_epoch):
            self.log.info("stale_replica_info_ignored", source=source, epoch=info.master_epoch,
                          knownEpoch=max(self.applied_epoch, cur.master_epoch if cur else 0))
            return
        if cur is None or (info.master_epoch, info.sync_state_set_epoch) >= (cur.master_epoch,
                                                                             cur.sync_state_set_epoch):
            self.maintenance = info.maintenance
        if cur is not None and info.master_epoch == cur.master_epoch:
            if info.master_id != cur.master_id:
                # One master per epoch is the controller's invariant; a second one is a bug we refuse to follow.
                self.log.error("epoch_conflict_ignored", source=source, epoch=info.master_epoch,
                               masterId=info.master_id, knownMasterId=cur.master_id)
                return
            if info.sync_state_set_epoch > cur.sync_state_set_epoch:
                self.target = info
                if self.applied_epoch == info.master_epoch and info.sync_state_set_epoch > self.sync_state_set_epoch:
                    self.sync_state_set = info.sync_state_set
                    self.sync_state_set_epoch = info.sync_state_set_epoch
                    if self.role == "master":
                        self._learned.append(SyncStateSetLearned(info.sync_state_set, info.sync_state_set_epoch))
            return
        if cur is None or info.master_epoch > cur.master_epoch:
            self.log.info("replica_info_newer", source=source, epoch=info.master_epoch, masterId=info.master_id,
                          syncStateSet=sorted(info.sync_state_set))
            self.target = info
            self._role_backoff.reset()
            self._role_retry_at = 0.0
            if info.master_id == 0:  # news of a lost master: ask at once, back off only on failures
                self._elect_backoff.reset()
                self._elect_retry_at = 0.0

    def on_caught_up(self, epoch: int) -> None:
        """The HA slave's log reached the confirmOffset its master of ``epoch`` sent: it holds
        every message acknowledged so far. Only that makes an unclean replica whole again; seeing
        itself in a SyncStateSet does not (a view older than its registration still lists it, and
        it would be electable before it fetched a byte)."""
        if self.role == "slave" and self.applied_epoch == epoch:
            self.note_log_intact("caught_up_to_confirm_offset")

    def note_log_intact(self, why: str) -> None:
        if not self.log_intact:
            self.log_intact = True
            self.log.info("log_intact_again", reason=why, epoch=self.applied_epoch)

    # ------------------------------------------------------------------ elections

    def drive_election(self, now: float) -> list[Command]:
        if not self.needs_election() or self._elect_req is not None or now < self._elect_retry_at:
            return []
        assert self.broker_id is not None
        cluster, group, bid = self.cluster, self.group, self.broker_id
        cmd = self._issue(lambda r: ElectMaster(r, cluster, group, bid))
        self._elect_req = cmd.req
        # Until a reply or a push shows a master, ask again no faster than the backoff allows.
        self._elect_retry_at = now + self._elect_backoff.next()
        self.log.info("elect_master_requested", epoch=self.target.master_epoch if self.target else 0)
        return [cmd]

    def on_elected(self, value: ReplicaInfo) -> None:
        self._elect_req = None
        self.log.info("elect_master_done", masterId=value.master_id, epoch=value.master_epoch)
        self.observe(value, "elect")
        if not self.needs_election():
            self._elect_backoff.reset()  # still needed (e.g. controller kept us): keep backing off

    def on_elect_failed(self, failure: Failure, now: float) -> None:
        self._elect_req = None
        self._elect_retry_at = now + self._elect_backoff.next()
        self.log.warning("elect_master_failed", code=failure.code, message=failure.message)

    # ------------------------------------------------------------------ role switches

    def drive(self, now: float) -> list[Command]:
        if self._role_req is not None or not self.role_change_due() or now < self._role_retry_at:
            return []
        t = self.target
        assert t is not None and self.broker_id is not None
        if self.refusing_resume():
            if self._resume_refused_epoch != t.master_epoch:
                self._resume_refused_epoch = t.master_epoch
                self.log.warning("unclean_master_resume_refused", epoch=t.master_epoch,
                                 logLastEpoch=self.log_last_epoch, action="elect_master")
            return []
        if t.master_id == self.broker_id:
            cmd = self._issue(lambda r: BecomeMaster(r, t.master_epoch, t.sync_state_set, t.sync_state_set_epoch))
        elif t.master_id != 0:
            cmd = self._issue(lambda r: BecomeSlave(r, t.master_epoch, t.master_id, t.master_addr, not self.leaving))
        elif self.role == "master":
            cmd = self._issue(lambda r: BecomeFenced(r, t.master_epoch, "deposed_no_master"))
        else:
            # No master at a higher epoch and we are not master: nothing to switch; remember the
            # epoch so a later master at this epoch is not mistaken for news.
            self.applied_epoch = t.master_epoch
            self.log.info("no_master", epoch=t.master_epoch)
            return []
        self._role_req = cmd.req
        self.log.info("role_change_started", command=type(cmd).__name__, epoch=t.master_epoch,
                      masterId=t.master_id, fromRole=self.role)
        return [cmd]

    def on_switched(self, cmd: BecomeMaster | BecomeSlave | BecomeFenced) -> NotifyRoleChange:
        assert cmd.req == self._role_req
        self._role_req = None
        self._role_backoff.reset()
        old_id, old_addr = self.applied_master_id, self.applied_master_addr
        assert cmd.epoch > self.applied_epoch, (cmd.epoch, self.applied_epoch)
        self.applied_epoch = cmd.epoch
        match cmd:
            case BecomeMaster():
                self.role = "master"
                self.applied_master_id, self.applied_master_addr = self.broker_id or 0, self.broker_addr
                self.sync_state_set, self.sync_state_set_epoch = cmd.sync_state_set, cmd.sync_state_set_epoch
                self.note_log_intact("became_master")
            case BecomeSlave():
                self.role = "slave"
                self.applied_master_id, self.applied_master_addr = cmd.master_id, cmd.master_addr
                self.sync_state_set, self.sync_state_set_epoch = frozenset(), 0
            case BecomeFenced():
                self.role = "fenced"
                self.applied_master_id, self.applied_master_addr = 0, ""
                self.sync_state_set, self.sync_state_set_epoch = frozenset(), 0
        self.log.info("role_changed", role=self.role, epoch=self.applied_epoch, masterId=self.applied_master_id,
                      oldMasterId=old_id)
        assert self.broker_id is not None
        return NotifyRoleChange(RoleChange(
            self.role, self.cluster, self.group, self.broker_id, self.applied_epoch,
            old_id, old_addr, self.applied_master_id, self.applied_master_addr,
            self.sync_state_set, self.sync_state_set_epoch,
        ))

    def on_switch_failed(self, cmd: BecomeMaster | BecomeSlave | BecomeFenced, failure: Failure, now: float) -> None:
        self._role_req = None
        self._role_retry_at = now + self._role_backoff.next()
        hint = None
        if failure.code == "STALE_EPOCH":
            # The local EpochFile already holds this epoch (a master restarted before the
            # controller noticed). Retrying cannot help until the broker resumes an epoch
            # it owns or the controller moves on; say so instead of failing quietly.
            hint = "local log already has this MasterEpoch; needs a new election or broker-side resume"
        self.log.error("role_change_failed", command=type(cmd).__name__, epoch=cmd.epoch,
                       code=failure.code, message=failure.message, hint=hint)

    def adopt_sync_state_set(self, master_epoch: int, new_set: frozenset[int], new_epoch: int) -> None:
        """A SyncStateSet change this master proposed was committed."""
        if master_epoch == self.applied_epoch and self.role == "master":
            if new_epoch >= self.sync_state_set_epoch:  # a push of the same change may have come first
                self.sync_state_set, self.sync_state_set_epoch = new_set, new_epoch
            else:
                self.log.warning("sss_alter_reply_stale", syncStateSetEpoch=new_epoch,
                                 knownSyncStateSetEpoch=self.sync_state_set_epoch)
