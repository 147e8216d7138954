"""Graceful master handover, the broker's entry points (docs/replicas-manager.md "Graceful
handover"). The procedure is a sub-machine of the ReplicasManager core (rm_handover.py: hold
writes, drain to the target, the controller's compare-and-set election, step down, release the
writes; cancel for good when the answer never came); the adapter performs its commands."""

from __future__ import annotations

from typing import TYPE_CHECKING

from autoswitch.broker.replicas.rm_commands import HandoverResult
from autoswitch.broker.replicas.rm_handover import MAX_HANDOVER_TIMEOUT_S, pick_target

if TYPE_CHECKING:
    from autoswitch.broker.replicas.replicas_adapter import ReplicasAdapter
    from autoswitch.broker.server import Broker

__all__ = ["MAX_HANDOVER_TIMEOUT_S", "HandoverResult", "hand_over", "hand_over_on_shutdown", "pick_target"]


async def hand_over(broker: Broker, adapter: ReplicasAdapter, to: int | None, timeout_s: float,
                    leaving: bool = False) -> HandoverResult:
    """Hand this master's role to ``to`` (None: the best in-sync slave); never raises for a
    refusal (the result says why). ``leaving``: the broker stops afterwards (no HA slave)."""
    return await adapter.hand_over(to, timeout_s, leaving)


async def hand_over_on_shutdown(broker: Broker, adapter: ReplicasAdapter, timeout_s: float) -> None:
    """SIGTERM of a master: hand over first, so the restart costs producers no failover."""
    if broker.role != "master":
        return
    res = await hand_over(broker, adapter, None, timeout_s, leaving=True)
    if not res.ok:
        broker.log.warning("shutdown_without_handover", reason=res.reason)
