"""Graceful master handover, a part of the ReplicasManager (docs/replicas-manager.md "Graceful
handover"): on SIGTERM of a master (``handover_on_shutdown``) and on the admin ``TransferMaster``.

1. hold new writes (``PauseWrites``: they wait, they are not refused);
2. wait until the target in-sync slave acknowledged everything in the log (``DrainTo``: every
   write already appended, acknowledged or not);
3. ask the controller to elect the target, as a compare-and-set on this master and its
   MasterEpoch (``HandoverElect``: an election that raced us makes the handover fail, never
   elect twice);
4. step down: the controller's answer is a view of the group, which the role keeper follows, so
   this broker switches to slave;
5. let the held writes go (``ResumeWrites``): they get NOT_MASTER with the new master's address.

If anything fails or the timeout passes first, the master keeps its role and the result
(``HandoverDone``) says why. An election whose answer never came may still commit (a Raft entry
can commit late): the handover is then cancelled for good by confirming the SyncStateSet
unchanged (its epoch moves, so the compare-and-set can never pass later) before writes are
acknowledged again. Until that settles, the write fence holds the epoch's acknowledgements
(WriteFence.handover_in_doubt), and the settling goes on in the background, bounded.

``pick_target`` is the pure choice; ``Handover`` the sub-machine, driven by the core's inputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoswitch.broker.replicas.rm_commands import (
    AlterSyncStateSet,
    Command,
    DrainTo,
    Failure,
    HandoverDone,
    HandoverElect,
    HandoverResult,
    Issue,
    PauseWrites,
    ResumeWrites,
)
from autoswitch.broker.replicas.rm_fence import WriteFence
from autoswitch.broker.replicas.rm_role import RoleKeeper
from autoswitch.controller.api import FailKind, ReplicaInfo

from autoswitch.base.log import EventLogger

MAX_HANDOVER_TIMEOUT_S = 300.0
MAX_SETTLE_ATTEMPTS = 20          # background cancel attempts after an unknown outcome
SETTLE_ATTEMPT_S = 3.0
# The controller's answers to a cancel that tell how the handover ended.
_CANCELLED = frozenset({"CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH"})   # the epoch moved anyway: it cannot pass
_DEPOSED = frozenset({"CONTROLLER_FENCED_MASTER_EPOCH", "CONTROLLER_INVALID_MASTER"})


def pick_target(self_id: int, sync_state_set: frozenset[int], acked: Mapping[int, int],
                to: int | None, maintenance: frozenset[int] = frozenset()) -> int | str:
    """The slave to hand over to, or why there is none. ``acked``: brokerId -> the offset it
    acknowledged on a live connection. A named target must be an in-sync slave; otherwise the
    in-sync slave outside maintenance that acknowledged the most (the lowest brokerId on a tie)
    wins (the controllers refuse a cordoned target)."""
    if to is not None:
        if to == self_id:
            return f"broker {to} is this master"
        if to not in sync_state_set:
            return f"broker {to} is not in the SyncStateSet {sorted(sync_state_set)}"
        if acked.get(to, -1) < 0:
            return f"broker {to} is not connected"
        return to
    live = [(-acked.get(b, -1), b) for b in sync_state_set
            if b != self_id and acked.get(b, -1) >= 0 and b not in maintenance]
    if not live:
        return (f"no connected in-sync slave outside maintenance (SyncStateSet {sorted(sync_state_set)}, "
                f"in maintenance {sorted(maintenance)})" if maintenance
                else f"no connected in-sync slave (SyncStateSet {sorted(sync_state_set)})")
    return min(live)[1]


@dataclass
class _Run:
    target: int
    epoch: int
    end_offset: int
    started: float
    deadline: float
    step: str = "drain"            # drain -> elect -> (settle) -> step_down
    req: int | None = None          # the HandoverElect or cancel in flight
    info: ReplicaInfo | None = None
    unknown: str = ""               # why the election's outcome is unknown


@dataclass
class _Settle:
    """Background cancel attempts after a handover's outcome stayed unknown."""

    epoch: int
    attempt: int = 0
    retry_at: float = 0.0
    req: int | None = None


class Handover:
    def __init__(self, cluster: str, group: str, issue: Issue, roles: RoleKeeper, fence: WriteFence,
                 log: EventLogger) -> None:
        self.cluster, self.group = cluster, group
        self._issue = issue
        self.roles, self.fence, self.log = roles, fence, log
        self.run: _Run | None = None
        self.settle: _Settle | None = None

    # ------------------------------------------------------------------ inputs

    def start(self, now: float, to: int | None, acked: Mapping[int, int], max_offset: int,
              fence_reason: str | None, timeout_s: float, leaving: bool = False) -> list[Command]:
        """Steps 1-2. ``acked``: brokerId -> offset each in-sync slave acknowledged on a live
        connection (-1: not connected); ``max_offset``: the end of the log now; ``leaving``: the
        broker stops afterwards, so whatever role change follows opens no HA connection (a
        stopping broker that replicated from its successor would join the SyncStateSet it leaves)."""
        self.roles.leaving = self.roles.leaving or leaving
        if self.roles.role != "master" or self.roles.broker_id is None:
            return self._refuse(now, "not a master")
        if self.run is not None:
            return self._refuse(now, "a handover is already running")
        # A lapsed lease does not stop a handover: nothing is acknowledged meanwhile, the drain
        # still brings the target to the whole log and the election is a compare-and-set on this
        # epoch (a failover that passed first makes it fail). A slow master's lease lapses often,
        # and it is the one that most needs to hand over (controller/failover/gray.py).
        if fence_reason is not None and fence_reason != "lease_expired":
            return self._refuse(now, f"fenced: {fence_reason}")
        target = pick_target(self.roles.broker_id, self.roles.sync_state_set, acked, to, self.roles.maintenance)
        if isinstance(target, str):
            return self._refuse(now, target)
        timeout_s = min(max(timeout_s, 0.0), MAX_HANDOVER_TIMEOUT_S)
        run = self.run = _Run(target, self.roles.applied_epoch, max_offset, now, now + timeout_s)
        self.log.info("handover_started", target=target, epoch=run.epoch, maxOffset=max_offset,
                      timeoutMs=int(timeout_s * 1000))
        return [PauseWrites(), DrainTo(target, max_offset, timeout_s)]

    def on_drained(self, now: float, caught_up: bool, acked_at: int) -> list[Command]:
        """Step 2 ended: the target acknowledged ``end_offset`` (or not, by the deadline)."""
        run = self.run
        if run is None or run.step != "drain":
            return []
        if not caught_up:
            return self._finish(now, False, f"broker {run.target} did not acknowledge offset {run.end_offset} "
                                            f"in time (at {acked_at})")
        run.step = "elect"
        epoch, sss_epoch, bid, target = run.epoch, self.roles.sync_state_set_epoch, self.roles.broker_id, run.target
        assert bid is not None
        left = max(0.001, run.deadline - now)
        cmd = self._issue(lambda r: HandoverElect(r, self.cluster, self.group, bid, target, epoch, sss_epoch, left))
        run.req = cmd.req
        return [cmd]

    def owns(self, req: int) -> bool:
        return (self.run is not None and self.run.req == req) or (self.settle is not None and self.settle.req == req)

    def on_reply(self, now: float, cmd: Command, value: object) -> list[Command]:
        if isinstance(cmd, HandoverElect):
            assert isinstance(value, ReplicaInfo) and self.run is not None
            self.run.req, self.run.info, self.run.step = None, value, "step_down"
            self.roles.observe(value, "handover")       # step 4: the role keeper follows the new view
            return []
        assert isinstance(cmd, AlterSyncStateSet) and isinstance(value, tuple)
        self.roles.adopt_sync_state_set(cmd.master_epoch, frozenset(value[0]), value[1])
        return self._settled(now, cmd, "cancelled")

    def on_failure(self, now: float, cmd: Command, failure: Failure) -> list[Command]:
        if isinstance(cmd, HandoverElect):
            run = self.run
            assert run is not None
            run.req = None
            if failure.kind is FailKind.REJECTED:
                return self._finish(now, False, f"controller refused: {failure.code}: {failure.message}")
            # Unreachable, timed out, no quorum: it may have been applied, or may still be.
            # Resuming now could let this master ack writes the new master never sees (ack
            # mode quorum); so cancel the handover for good first.
            run.unknown = failure.message[:200] or failure.code
            self.log.warning("handover_outcome_unknown", target=run.target, epoch=run.epoch, error=run.unknown)
            run.step = "settle"
            cancel = self._cancel(run.epoch)
            run.req = cancel.req
            return [cancel]
        assert isinstance(cmd, AlterSyncStateSet)
        outcome = ("cancelled" if failure.code in _CANCELLED else "deposed" if failure.code in _DEPOSED
                   else "unsettled")
        return self._settled(now, cmd, outcome)

    def tick(self, now: float) -> list[Command]:
        out: list[Command] = []
        run = self.run
        if run is not None:
            if run.step == "step_down" and self._stepped_down(run):
                out += self._finish(now, True, "handed_over")
            elif run.step in ("drain", "step_down") and now >= run.deadline:
                why = "the step-down did not happen in time" if run.step == "step_down" else \
                    f"broker {run.target} did not acknowledge offset {run.end_offset} in time"
                out += self._finish(now, False, why)
            elif run.step == "settle" and now >= run.deadline:
                # the caller's time is up with the first cancel still unanswered: it goes on in
                # the background like any later attempt, the epoch fenced until it settles
                out += self._unsettled(now, run, run.req)
        s = self.settle
        if s is not None and s.req is None and now >= s.retry_at:
            if self.roles.role != "master" or self.roles.applied_epoch != s.epoch:
                self.settle = None            # the role changed: that settled it (and left the fence behind)
            elif s.attempt >= MAX_SETTLE_ATTEMPTS:
                self.settle = None
                self.log.error("handover_unsettled_gave_up", epoch=s.epoch,
                               note="writes stay fenced until this broker's role changes")
            else:
                s.attempt += 1
                cancel = self._cancel(s.epoch)
                s.req = cancel.req
                out.append(cancel)
        return out

    def next_deadline(self) -> float | None:
        times = []
        if self.run is not None and self.run.step in ("drain", "settle", "step_down"):
            times.append(self.run.deadline)
        if self.settle is not None and self.settle.req is None:
            times.append(self.settle.retry_at)
        return min(times) if times else None

    # ------------------------------------------------------------------ steps

    def _cancel(self, epoch: int) -> AlterSyncStateSet:
        """Confirm the SyncStateSet unchanged: its epoch moves, so the handover can never pass."""
        bid, members, sss_epoch = self.roles.broker_id, self.roles.sync_state_set, self.roles.sync_state_set_epoch
        assert bid is not None
        cmd = self._issue(lambda r: AlterSyncStateSet(r, self.group, bid, epoch, members, sss_epoch))
        assert isinstance(cmd, AlterSyncStateSet)
        return cmd

    def _settled(self, now: float, cmd: AlterSyncStateSet, outcome: str) -> list[Command]:
        epoch = cmd.master_epoch
        run = self.run
        if run is not None and run.req == cmd.req:          # the first cancel, within the caller's handover
            run.req = None
            if outcome == "cancelled":
                return self._finish(now, False, f"no answer from the controller ({run.unknown}); the handover is "
                                                "cancelled")
            if outcome == "deposed":
                # The controller already moved on; until this broker's role follows, acknowledge nothing.
                self.fence.handover_in_doubt(epoch, "deposed by the handover")
                run.step = "step_down"
                return self.tick(now)
            return self._unsettled(now, run, None)
        s = self.settle
        if s is None or s.req != cmd.req:
            return []
        s.req = None
        if outcome == "cancelled":
            self.settle = None
            self.fence.handover_settled(epoch)
            self.log.info("handover_settled", epoch=epoch, outcome="cancelled")
        elif outcome == "deposed":
            self.settle = None
            self.fence.handover_in_doubt(epoch, "deposed by the handover")   # the role switch lifts it
        else:
            s.retry_at = now + min(SETTLE_ATTEMPT_S, 0.1 * 2 ** s.attempt)
        return []

    def _unsettled(self, now: float, run: _Run, in_flight: int | None) -> list[Command]:
        """Nobody can tell yet whether the handover passed: fence the epoch, settle in the
        background (``in_flight``: a cancel already sent), and tell the caller."""
        self.fence.handover_in_doubt(run.epoch, "handover outcome unknown")
        self.log.warning("handover_unsettled", epoch=run.epoch, note="writes fenced until the controller answers")
        self.settle = _Settle(run.epoch, retry_at=now, req=in_flight)
        return self._finish(now, False, f"no answer from the controller ({run.unknown}); the outcome is "
                                        "unknown: writes stay fenced until the controller answers")

    def _finish(self, now: float, ok: bool, reason: str) -> list[Command]:
        run = self.run
        assert run is not None
        self.run = None
        waited = int((now - run.started) * 1000)
        info = run.info
        if info is not None:
            res = HandoverResult(ok, reason, run.target, info.master_id, info.master_epoch, info.master_addr, waited)
        else:
            res = HandoverResult(ok, reason, run.target, self.roles.applied_master_id, self.roles.applied_epoch,
                                 self.roles.applied_master_addr or "", waited)
        (self.log.info if ok else self.log.warning)("handover_done" if ok else "handover_failed", target=run.target,
                                                    reason=reason, waitedMs=waited, masterId=res.master_id)
        return [ResumeWrites(), HandoverDone(res)]

    def _refuse(self, now: float, reason: str) -> list[Command]:
        self.log.warning("handover_failed", target=0, reason=reason, waitedMs=0)
        return [HandoverDone(HandoverResult(False, reason, 0, self.roles.applied_master_id, self.roles.applied_epoch,
                                            self.roles.applied_master_addr or "", 0))]

    def _stepped_down(self, run: _Run) -> bool:
        return self.roles.role == "slave" and self.roles.applied_epoch > run.epoch

