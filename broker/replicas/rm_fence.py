"""The write fence, a part of the ReplicasManager: the one owner of "may this master acknowledge
now?". A master must not while it knows of a newer MasterEpoch (deposed), while a handover of its
epoch may have passed without it knowing (in doubt), or once its lease ran out. The broker asks at
every write (ReplicasManager.fenced_reason); ``check`` tells it the instant the answer changes
(SetFenced), so it freezes its commit point then and not at the next read."""

from __future__ import annotations

from autoswitch.broker.replicas.lease import MasterLease
from autoswitch.broker.replicas.rm_commands import Command, SetFenced
from autoswitch.broker.replicas.rm_role import RoleKeeper

from autoswitch.base.log import EventLogger

DEPOSED = "deposed"                 # the fence while a role change is decided but not made
LEASE_EXPIRED = "lease_expired"     # the fence of a master without a lease (a new one: not yet)


class WriteFence:
    def __init__(self, roles: RoleKeeper, lease: MasterLease, log: EventLogger) -> None:
        self.roles, self.lease, self.log = roles, lease, log
        self._told: str | None = None   # the reason the last SetFenced told the broker
        # A handover whose outcome is unknown (handover.py): (MasterEpoch, reason) fences writes of
        # that epoch until settled; any role change leaves it behind (another epoch).
        self._handover: tuple[int, str] | None = None

    @property
    def told(self) -> str | None:
        return self._told

    def reason(self, running_master: bool, now: float) -> str | None:
        """Why this master must not acknowledge now; None when it may (or it is no running master)."""
        if not running_master:
            return None
        if self.roles.role_change_due():
            return DEPOSED
        h = self._handover
        if h is not None and h[0] == self.roles.applied_epoch:
            return h[1]
        if not self.lease.valid(now):
            return LEASE_EXPIRED
        return None

    def handover_in_doubt(self, master_epoch: int, reason: str) -> None:
        if self.roles.role == "master" and self.roles.applied_epoch == master_epoch:
            self._handover = (master_epoch, reason)

    def handover_settled(self, master_epoch: int) -> None:
        if self._handover is not None and self._handover[0] == master_epoch:
            self._handover = None

    def check(self, running_master: bool, now: float) -> list[Command]:
        """SetFenced when the answer changed since the last one told (also after a role change)."""
        want = self.reason(running_master, now)
        told, self._told = self._told, want
        if want == told:
            return []
        epoch = self.roles.applied_epoch
        if want == LEASE_EXPIRED:
            self.log.warning("master_lease_expired", epoch=epoch, leaseMs=self.lease.config.master_lease_ms,
                             answered=self.lease.status(now)["answered"])
        elif told == LEASE_EXPIRED and running_master:
            self.log.info("master_lease_renewed", epoch=epoch, remainingMs=int(self.lease.remaining(now) * 1000))
        return [SetFenced(want is not None, want)]
