"""When a produce waits for this broker's role switch instead of being answered at once (pure).

A handover or failover elects a new master while producers still write to the old one. The broker
that learns of the election first (the old master, deposed by the handover it asked for) answers
NOT_MASTER naming the new master and its MasterEpoch; the producer sends the write there at once,
saying ``expect_master_epoch``. That broker may not be writable yet: it may not have heard of the
election, may be switching, or may wait for its first lease. Refusing would bounce the producer
back (and into its backoff); so it holds the request while one of those lifts by itself, for at
most ``master_switch_hold_ms``. A broker mid-switch holds any request the same way, so its answer
names the master it switched to. Settled, the request is answered by the usual checks: the hold
only delays an answer and never admits a write (broker/service.py is the adapter).
"""

from __future__ import annotations

from dataclasses import dataclass

from autoswitch.broker.replicas.rm_fence import DEPOSED, LEASE_EXPIRED


@dataclass(frozen=True)
class SwitchView:
    switching: bool               # a role switch holds the switch lock, or the fence says deposed
    role: str                     # "master" | "slave" | "fenced"
    master_epoch: int             # the MasterEpoch of its role (a slave's: its master's)
    fence: str | None             # a master's write fence reason, None when writable
    master_for_s: float           # how long it has been master (meaningless otherwise)


def switching(switch_lock_held: bool, fence: str | None) -> bool:
    return switch_lock_held or fence == DEPOSED


def settled(v: SwitchView, expect: int, hold_s: float) -> bool:
    """True when waiting longer cannot change the answer (or the answer is a write).

    ``expect``: the MasterEpoch the sender was told this broker masters (0: none)."""
    if v.switching:
        return False
    if expect <= 0:
        return True
    if v.role == "master":
        # Its first lease is the one fence that lifts by itself in a moment; any other (shutting
        # down, a lease lost, a stalled disk) is answered at once.
        return not (v.fence == LEASE_EXPIRED and v.master_for_s < hold_s)
    return v.master_epoch >= expect     # a slave or fenced broker that knows the epoch: final
