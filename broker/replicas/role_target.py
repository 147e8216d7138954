"""What the ReplicasManager's adapter asks of the broker process: the role switch API
(docs/interfaces.md "Broker role switch API"). ``autoswitch.broker.server.Broker`` implements it;
tests/unit/test_rm_seams.py checks that it and the tests' fake still match this Protocol."""

from __future__ import annotations

from typing import Protocol

from autoswitch.broker.health import HealthReport
from autoswitch.broker.traffic import Rates


class BrokerRoleTarget(Protocol):
    """Everything the ReplicasManager asks of the broker process (docs/interfaces.md "Broker role
    switch API"); ``autoswitch.broker.server.Broker`` implements all of it."""

    @property
    def role(self) -> str: ...
    @property
    def broker_id(self) -> int: ...
    def adopt_broker_id(self, broker_id: int) -> None:
        """Controller mode: the id registration named, before the first role."""

    async def become_master(
        self, master_epoch: int, sync_state_set: frozenset[int], sync_state_set_epoch: int
    ) -> None: ...
    async def become_slave(
        self, master_epoch: int, master_ha_addr: tuple[str, int], master_addr: str | None = None,
        master_id: int = 0, replicate: bool = True,
    ) -> None: ...
    async def become_fenced(self, master_epoch: int, reason: str = "") -> None: ...
    def fence_changed(self, reason: str | None) -> None:
        """The write fence went up (reason) or came down (None): the core's SetFenced."""
    def learn_sync_state_set(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> None:
        """The controller's current SyncStateSet of this (master) broker's group."""
    def log_position(self) -> tuple[int, int, int]:
        """(maxOffset, confirmOffset, last EpochFile MasterEpoch or 0) of the local log, now."""
    def handover_view(self) -> tuple[dict[int, int], int] | None:
        """A master's HA view for a handover: (brokerId -> offset each slave acknowledged on a live
        connection, -1 for none; the log's end now); None when it is no master with HA running."""
    def pause_writes(self) -> None: ...
    def resume_writes(self) -> None: ...
    async def wait_replica(self, broker_id: int, offset: int, timeout_s: float) -> tuple[bool, int]:
        """(whether ``broker_id`` acknowledged ``offset`` within the time, what it acknowledged)."""
    def health_report(self) -> HealthReport:
        """Its disk and event loop as the health monitor sees them (broker/health.py)."""
    def traffic_rates(self) -> Rates:
        """Its produce and consume rates over the last window (broker/traffic.py)."""
    def diverged(self) -> bool:
        """Its range digests found bytes that differ from its master's, not repaired yet."""
