"""What the parts around a controller node may use of it: narrow protocols, so the servicer, the
streams, the metrics and the status page depend on these seams and not on ControllerNode (which
builds them: no import cycle, and a test stand-in implements only what is listed here)."""

from __future__ import annotations

from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from autoswitch.controller import messages as msgs
    from autoswitch.controller.config import ControllerConfig
    from autoswitch.controller.server.election_scanner import ElectionScanner
    from autoswitch.controller.server.liveness_desk import LivenessDesk
    from autoswitch.controller.server.membership_ops import MembershipView
    from autoswitch.controller.server.metrics import ControllerMetrics
    from autoswitch.controller.server.proposer import Proposer
    from autoswitch.controller.server.sm_adapter import AppliedStateMachine, GroupState
    from autoswitch.controller.server.state_check import StateCheck
    from autoswitch.controller.server.watchers import Watchers

    from autoswitch.base.log import EventLogger


class ObservedNode(Protocol):
    """What the metrics and the status page read."""

    node_id: str
    membership: MembershipView
    open_sessions: int
    sm: AppliedStateMachine
    liveness: LivenessDesk
    metrics: ControllerMetrics
    state_check: StateCheck | None

    @property
    def wired(self) -> bool: ...
    def metadata(self) -> dict[str, Any]: ...


class StreamedNode(Protocol):
    """What the long-lived streams (BrokerSession, WatchAlerts, WatchReplicaInfo) use."""

    node_id: str
    config: ControllerConfig
    open_sessions: int
    liveness: LivenessDesk
    watchers: Watchers

    def local_replica_info(self, group: str) -> msgs.ReplicaView | None: ...
    async def wait_stopped(self) -> None: ...


class ServedNode(StreamedNode, Protocol):
    """What the ControllerService servicer calls."""

    membership: MembershipView
    sm: AppliedStateMachine
    proposer: Proposer
    elections: ElectionScanner
    state_check: StateCheck | None
    log: EventLogger
    feature_unsupported: str | None     # why this member cannot run the finalized level (None: it can)

    @property
    def is_leader(self) -> bool: ...
    @property
    def term(self) -> int: ...
    def leader_hint(self) -> tuple[str, str]: ...
    def metadata(self) -> dict[str, Any]: ...
    def spawn(self, coro: Coroutine[Any, Any, Any], name: str, *, essential: bool = False) -> None: ...
    def controllers_for_brokers(self) -> tuple[int, list[str]]: ...
    def state_snapshot(self) -> tuple[bytes, int]: ...
    def read_events(self, from_line: int, max_lines: int) -> tuple[list[str], int, bool]: ...
    async def query(self, req: msgs.Request) -> msgs.Reply: ...
    async def sync_state_data(self, groups: tuple[str, ...]) -> tuple[msgs.Reply, list[GroupState]]: ...
    async def move_leader(self, to: str, timeout_s: float | None) -> None: ...
    def refuse_on_store(self, what: str) -> None: ...
    async def change_membership(self, action: str, node_id: str, address: str, raft_address: str,
                                pacing_budget_s: float = 0.0) -> None: ...
