"""Graceful master handover (docs/replicas-manager.md "Graceful handover").

On SIGTERM of a master (``handover_on_shutdown``) and on the admin ``TransferMaster`` call:

1. hold new writes (``WritePath.pause``: they wait, they are not refused);
2. wait until the target in-sync slave acknowledged everything in the log (every write already
   appended, acknowledged or not);
3. ask the controller to elect the target, as a compare-and-set on this master and its
   MasterEpoch (an election that raced us makes the handover fail, never elect twice);
4. step down: the new view goes to the ReplicasManager, which switches this broker to slave;
5. let the held writes go: they get NOT_MASTER with the new master's address, so producers move
   at once. If anything fails or the timeout passes first, the master keeps its role, the held
   writes go on here, and the result says why.

``pick_target`` is the pure decision; ``hand_over`` is the asyncio procedure around it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from autoswitch.controller.api import ControllerCallFailed, FailKind, ReplicaInfo

if TYPE_CHECKING:
    from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter
    from autoswitch.broker.server import Broker

MAX_HANDOVER_TIMEOUT_S = 300.0
MAX_SETTLE_ATTEMPTS = 20          # background cancel attempts after an unknown outcome
SETTLE_ATTEMPT_S = 3.0


@dataclass(frozen=True)
class HandoverResult:
    ok: bool
    reason: str                 # why not, or how ("handed_over")
    target: int = 0
    master_id: int = 0          # the group's master afterwards, as far as this broker knows
    master_epoch: int = 0
    master_addr: str = ""
    waited_ms: int = 0


def pick_target(self_id: int, sync_state_set: frozenset[int], acked: Mapping[int, int],
                to: int | None) -> int | str:
    """The slave to hand over to, or why there is none. ``acked``: brokerId -> the offset it
    acknowledged on a live connection. A named target must be an in-sync slave; otherwise the
    in-sync slave that acknowledged the most (the lowest brokerId on a tie) wins."""
    if to is not None:
        if to == self_id:
            return f"broker {to} is this master"
        if to not in sync_state_set:
            return f"broker {to} is not in the SyncStateSet {sorted(sync_state_set)}"
        if acked.get(to, -1) < 0:
            return f"broker {to} is not connected"
        return to
    live = [(-acked.get(b, -1), b) for b in sync_state_set if b != self_id and acked.get(b, -1) >= 0]
    if not live:
        return f"no connected in-sync slave (SyncStateSet {sorted(sync_state_set)})"
    return min(live)[1]


async def hand_over(broker: Broker, adapter: ReplicasAdapter, to: int | None, timeout_s: float) -> HandoverResult:
    """Run steps 1-5 once; never raises for a refusal (the result says why)."""
    t0 = time.monotonic()
    log = broker.log.bind(epoch=broker.master_epoch)

    def done(ok: bool, reason: str, target: int = 0, info: ReplicaInfo | None = None) -> HandoverResult:
        waited = int((time.monotonic() - t0) * 1000)
        if info is not None:
            res = HandoverResult(ok, reason, target, info.master_id, info.master_epoch, info.master_addr, waited)
        else:
            res = HandoverResult(ok, reason, target, adapter.core.applied_master_id, broker.master_epoch,
                                 broker.master_addr or "", waited)
        (log.info if ok else log.warning)("handover_done" if ok else "handover_failed", target=target,
                                          reason=reason, waitedMs=waited, masterId=res.master_id)
        return res

    timeout_s = min(max(timeout_s, 0.0), MAX_HANDOVER_TIMEOUT_S)
    ha, wp = broker.ha_master, broker.write_path
    if broker.role != "master" or ha is None or wp is None or wp.paused:
        return done(False, "not a master" if broker.role != "master" else "a handover is already running")
    if broker.fence_reason() is not None:
        return done(False, f"fenced: {broker.fence_reason()}")
    bid = adapter.core.broker_id or broker.broker_id
    acked = {b: ha.replica_acked(b) for b in ha.sync_state_set}
    target = pick_target(bid, ha.sync_state_set, acked, to)
    if isinstance(target, str):
        return done(False, target)
    epoch = broker.master_epoch
    deadline = t0 + timeout_s
    wp.pause()
    log.info("handover_started", target=target, maxOffset=broker.store.max_offset, timeoutMs=int(timeout_s * 1000))
    try:
        end = broker.store.max_offset
        if not await ha.wait_replica(target, end, max(0.0, deadline - time.monotonic())):
            return done(False, f"broker {target} did not acknowledge offset {end} in time "
                               f"(at {ha.replica_acked(target)})", target)
        info = None
        unknown: Exception | None = None
        try:
            info = await adapter.hand_over(target, epoch, max(0.001, deadline - time.monotonic()))
        except ControllerCallFailed as e:
            if e.kind is FailKind.REJECTED:
                return done(False, f"controller refused: {e.reply_name}: {e.message}", target)
            unknown = e         # unreachable, timed out, no quorum: it may have been applied
        except (TimeoutError, OSError) as e:
            unknown = e
        if unknown is not None:
            # Unknown outcome: the controller may have elected the target, or may still do so (a
            # Raft entry can commit late). Resuming now could let this master ack writes the new
            # master never sees (ack mode quorum); so cancel the handover for good first.
            log.warning("handover_outcome_unknown", target=target, error=repr(unknown)[:200])
            settled = await _settle(broker, adapter, epoch, deadline)
            if settled == "cancelled":
                return done(False, f"no answer from the controller ({str(unknown)[:200]}); the handover is "
                                   "cancelled", target)
            if settled == "unsettled":
                return done(False, f"no answer from the controller ({str(unknown)[:200]}); the outcome is "
                                   "unknown: writes stay fenced until the controller answers", target)
            # "deposed": the election happened; wait for the step-down below
        def stepped_down() -> bool:
            return broker.role == "slave" and broker.master_epoch > epoch

        await broker.role_signal.wait_until(stepped_down, max(0.0, deadline - time.monotonic()))
        if not stepped_down():
            return done(False, "the step-down did not happen in time", target, info)
        return done(True, "handed_over", target, info)
    finally:
        wp.resume()


async def _settle(broker: Broker, adapter: ReplicasAdapter, epoch: int,
                  deadline: float) -> Literal["cancelled", "deposed", "unsettled"]:
    """"cancelled": the handover can no longer pass and this broker is still master. "deposed":
    it passed. "unsettled": nobody can tell yet; writes stay fenced until a later attempt (in the
    background, bounded) settles it or the role changes."""
    settled = await adapter.cancel_handover(epoch, max(0.001, deadline - time.monotonic()))
    if settled is True:
        return "cancelled"
    if settled is False:
        # The controller already moved on; until this broker's role follows, acknowledge nothing.
        adapter.handover_in_doubt(epoch, "deposed by the handover")
        return "deposed"
    adapter.handover_in_doubt(epoch, "handover outcome unknown")
    broker.log.warning("handover_unsettled", epoch=epoch, note="writes fenced until the controller answers")

    async def keep_trying() -> None:
        for attempt in range(MAX_SETTLE_ATTEMPTS):
            if broker.role != "master" or broker.master_epoch != epoch:
                return          # the role changed: that settled it (and cleared the fence)
            res = await adapter.cancel_handover(epoch, SETTLE_ATTEMPT_S)
            if res is True:
                adapter.handover_settled(epoch)
                broker.log.info("handover_settled", epoch=epoch, outcome="cancelled")
                return
            if res is False:
                adapter.handover_in_doubt(epoch, "deposed by the handover")
                return          # the ReplicasManager switches the role, which lifts the fence
            await asyncio.sleep(min(SETTLE_ATTEMPT_S, 0.1 * 2 ** attempt))
        broker.log.error("handover_unsettled_gave_up", epoch=epoch,
                         note="writes stay fenced until this broker's role changes")

    broker.handover_task = asyncio.get_running_loop().create_task(keep_trying())
    return "unsettled"


async def hand_over_on_shutdown(broker: Broker, adapter: ReplicasAdapter, timeout_s: float) -> None:
    """SIGTERM of a master: hand over first, so the restart costs producers no failover."""
    if broker.role != "master":
        return
    res = await hand_over(broker, adapter, None, timeout_s)
    if not res.ok:
        broker.log.warning("shutdown_without_handover", reason=res.reason)
