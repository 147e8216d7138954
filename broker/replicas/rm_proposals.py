"""SyncStateSet proposals, the third part of the ReplicasManager: carry HA's shrink/expand
requests to the controller, one at a time, only from a master that is not deposed."""

from __future__ import annotations

from autoswitch.broker.replicas.rm_commands import AlterSyncStateSet, Command, Failure, Issue, ProposalResult
from autoswitch.broker.replicas.rm_role import RoleKeeper
from autoswitch.controller.api import FailKind

from autoswitch.base.limits import MAX_REPLICAS_PER_GROUP
from autoswitch.base.log import EventLogger


class SyncStateSetProposals:
    def __init__(self, group: str, issue: Issue, log: EventLogger) -> None:
        self.group = group
        self._issue = issue
        self.log = log
        self._req: int | None = None
        self._proposal: int | None = None

    def propose(self, roles: RoleKeeper, proposal: int, master_epoch: int, sync_state_set_epoch: int,
                new_set: frozenset[int], leaving: tuple[tuple[int, str], ...] = ()) -> list[Command]:
        def reject(code: str, msg: str) -> list[Command]:
            self.log.warning("sss_proposal_rejected_locally", code=code, reason=msg, proposal=proposal)
            return [ProposalResult(proposal, None, None, Failure(FailKind.REJECTED, code, msg))]

        bid = roles.broker_id
        if roles.role != "master" or bid is None:
            return reject("NOT_MASTER", f"role is {roles.role}")
        if master_epoch != roles.applied_epoch:
            return reject("STALE_MASTER_EPOCH", f"proposal for epoch {master_epoch}, running {roles.applied_epoch}")
        if bid not in new_set:
            return reject("SET_WITHOUT_MASTER", "the master must stay in its SyncStateSet")
        if len(new_set) > MAX_REPLICAS_PER_GROUP:
            return reject("SET_TOO_LARGE", f"more than {MAX_REPLICAS_PER_GROUP} members")
        if roles.role_change_due():
            return reject("DEPOSED", "a newer MasterEpoch is known")
        if self._req is not None:
            return reject("PROPOSAL_IN_FLIGHT", "one SyncStateSet change at a time")
        group, members = self.group, frozenset(new_set)
        why = tuple((b, w) for b, w in leaving if b not in members)
        cmd = self._issue(lambda r: AlterSyncStateSet(r, group, bid, master_epoch, members, sync_state_set_epoch, why))
        self._req, self._proposal = cmd.req, proposal
        self.log.info("sss_proposed", epoch=master_epoch, syncStateSet=sorted(new_set),
                      syncStateSetEpoch=sync_state_set_epoch)
        return [cmd]

    def _take(self, cmd: AlterSyncStateSet) -> int:
        assert cmd.req == self._req
        proposal, self._req, self._proposal = self._proposal, None, None
        assert proposal is not None
        return proposal

    def on_reply(self, cmd: AlterSyncStateSet, value: tuple[frozenset[int], int], roles: RoleKeeper) -> ProposalResult:
        proposal = self._take(cmd)
        new_set, new_epoch = frozenset(value[0]), value[1]
        roles.adopt_sync_state_set(cmd.master_epoch, new_set, new_epoch)
        self.log.info("sss_altered", syncStateSet=sorted(new_set), syncStateSetEpoch=new_epoch)
        return ProposalResult(proposal, new_set, new_epoch)

    def on_failure(self, cmd: AlterSyncStateSet, failure: Failure) -> ProposalResult:
        proposal = self._take(cmd)
        self.log.warning("sss_alter_failed", code=failure.code, message=failure.message)
        return ProposalResult(proposal, None, None, failure)
