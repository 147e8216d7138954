"""The controller as a broker sees it: typed calls, typed answers and one typed failure.

This is the only controller module the broker imports (tests/unit/test_import_rules.py). It loads
neither gRPC nor the generated protobuf: ``connect`` builds the gRPC implementation
(``autoswitch.controller.broker_client``) lazily, and tests may hand the broker any other
implementation of ``BrokerControllerApi``.
"""

from __future__ import annotations

import contextvars
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, Protocol

from autoswitch.controller.messages import AckMode as AckMode  # the broker states its ack mode in this type

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.tls import TLSConfig

# Who asked this broker for the handover (its TransferMaster caller), for the controller's audit
# record; set by the broker's TransferMaster handler, read when the handover's ElectMaster is sent.
HANDOVER_REQUESTED_BY: contextvars.ContextVar[str] = contextvars.ContextVar("autoswitch_handover_by", default="")


@dataclass(frozen=True, slots=True)
class RegisteredReplica:
    """A brokerId the controllers registered: its process (incarnation, "" = none stated) and the
    zone its heartbeats state ("" = none, or not heard by the answering controller)."""

    incarnation: str = ""
    zone: str = ""


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """The controller's view of one group. master_id 0 = no master. ``master_ha_addr`` is the HA
    address the master registered ('' = not given: slaves use the listen port + 1 convention)."""

    master_id: int
    master_addr: str
    master_epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int
    master_ha_addr: str = ""
    maintenance: frozenset[int] = frozenset()   # replicas an operator cordoned (never a handover target)


@dataclass(frozen=True, slots=True)
class BrokerHealth:
    """What a heartbeat says of the broker's disk and event loop (broker/health.py): the signals
    slow past their hysteresis, and the last window's figures in ms (-1 = no sample)."""

    reasons: tuple[str, ...] = ()
    append_ms: float = -1.0
    fsync_ms: float = -1.0
    loop_lag_ms: float = -1.0


@dataclass(frozen=True, slots=True)
class TopicRate:
    topic: str
    produce_per_s: float = 0.0
    consume_per_s: float = 0.0


@dataclass(frozen=True, slots=True)
class BrokerTraffic:
    """What a heartbeat says of the broker's traffic over its last window (broker/traffic.py):
    messages acknowledged and served per second (-1 = not stated), and its busiest topics."""

    produce_per_s: float = -1.0
    consume_per_s: float = -1.0
    topics: tuple[TopicRate, ...] = ()


def rate_or_none(x: float) -> float | None:
    """A stated rate for display (None: not stated)."""
    return None if x < 0 else round(x, 1)


def group_traffic(members: Iterable[Any], master_id: int | None) -> tuple[float | None, float]:
    """A group's rates from its replicas (``broker_id``, ``alive``, ``produce_per_s``,
    ``consume_per_s``; -1 = not stated): what its master acknowledged per second (None: no master
    heard) and what every replica heard now served."""
    heard = [m for m in members if m.alive]
    produce = next((rate_or_none(m.produce_per_s) for m in heard if m.broker_id == master_id), None)
    return produce, round(sum(max(0.0, m.consume_per_s) for m in heard), 1)


def topic_totals(members: Iterable[tuple[bool, Iterable[Any]]]) -> list[dict[str, Any]]:
    """Per topic, from every heard replica's busiest topics (``(is_master, topic_rates)``, each
    rate with ``topic``, ``produce_per_s``, ``consume_per_s``): messages acknowledged per second
    by the masters and served per second by every replica (readers may read slaves), busiest first."""
    acc: dict[str, list[float]] = {}
    for is_master, rates in members:
        for t in rates:
            a = acc.setdefault(t.topic, [0.0, 0.0])
            if is_master:
                a[0] += t.produce_per_s
            a[1] += t.consume_per_s
    return [{"topic": name, "produce_per_s": round(p, 1), "consume_per_s": round(c, 1)}
            for name, (p, c) in sorted(acc.items(), key=lambda kv: (-(kv[1][0] + kv[1][1]), kv[0]))]


@dataclass(frozen=True, slots=True)
class BrokerReport:
    """What one broker heartbeat says of its replica: the one report type from the broker's
    heartbeat to the controllers' lease grant and liveness table (protobuf is converted in one
    function per side: ``broker_client.heartbeat_request`` and ``server.service_common.checked_heartbeat``,
    which checks every field's range: those of ``messages.BrokerLiveInfo``, the health figures,
    a known feature level, a printable version and zone).

    ``epoch``/``max_offset`` describe the broker's LOG (the last EpochFile epoch and its end): the
    controllers rank election candidates by them. 0 / "" fields are "not stated"."""

    broker_id: int
    address: str = ""
    epoch: int = 0
    max_offset: int = 0
    confirm_offset: int = 0
    election_priority: int = 0
    clean_shutdown: bool = True
    # The controller heartbeat timeout the broker's master lease was sized for (0: not sent); the
    # controllers cap it at liveness.MAX_ASSUMED_TIMEOUT_MS.
    assumed_timeout_ms: int = 0
    min_in_sync_replicas: int = 0   # the fewest SyncStateSet members it acknowledges with as master
    incarnation: str = ""           # the broker process that sent it (new at every start)
    ack_mode: AckMode = ""          # "all" | "quorum" | "master"
    diverged: bool = False          # its range digests found a difference not yet repaired
    health: BrokerHealth | None = None   # its own view of its disk and loop
    feature_level: int = 0          # the highest feature level it runs
    version: str = ""               # its release
    zone: str = ""                  # the failure domain it runs in
    min_in_sync_zones: int = 0      # the zones its acks must span as master (0: off)
    traffic: BrokerTraffic = BrokerTraffic()   # its produce and consume rates (not a liveness fact)

    @property
    def degraded(self) -> bool:
        return self.health is not None and bool(self.health.reasons)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """One broker heartbeat, as the broker sends it and as the controllers' liveness desk takes it
    (checked). ``lease_quorum``: the grants the broker's lease counts (a majority of the voters it
    knows, 0 = not stated); ``controllers_index``: the controller configuration it knows the voters
    of (0 = configured); ``stopping``: the farewell after a clean stop (forget this incarnation)."""

    cluster: str
    group: str
    report: BrokerReport
    stopping: bool = False
    lease_quorum: int = 0
    controllers_index: int = 0


@dataclass(frozen=True, slots=True)
class HeartbeatAnswer:
    """``lease_granted``: this controller counts the heartbeat toward the master lease (it holds no
    DEAD report on the broker and knows no newer MasterEpoch). ``is_leader``: it is the Raft leader."""

    is_leader: bool
    lease_granted: bool
    master_epoch: int
    controllers: tuple[str, ...] = ()   # the controllers' voters, as of membership change controllers_index
    controllers_index: int = 0          # 0 = the bootstrap configuration
    node_id: str = ""                   # the answering controller (the lease counts nodes, not addresses)
    feature_level: int = 0              # the cluster's finalized feature level on that node (0: not stated)


class FailKind(StrEnum):
    RETRY = "retry"            # unreachable, timed out, no quorum, overloaded: same call later
    NOT_LEADER = "not_leader"  # the node asked is a follower; ``leader_addr`` may name the leader
    CONFLICT = "conflict"      # ApplyBrokerId: the id belongs to another registerCheckCode
    REJECTED = "rejected"      # the controller said no; ``reply_name`` says why


class ControllerCallFailed(AutoswitchError):
    """A controller call that did not succeed, classified once, by the client that made it."""

    code = "CONTROLLER_CALL_FAILED"

    def __init__(self, kind: FailKind, reply_name: str, message: str, leader_addr: str | None = None) -> None:
        super().__init__(message, kind=str(kind), reply_name=reply_name, leader_addr=leader_addr)
        self.kind = kind
        self.reply_name = reply_name
        self.leader_addr = leader_addr


class BrokerControllerApi(Protocol):
    """Every controller call a broker's ReplicasManager makes. Failures raise ControllerCallFailed
    (or TimeoutError/OSError from the network)."""

    async def leader_address(self) -> str | None:
        """The Raft leader's client address, None while there is none."""

    async def heartbeat_timeout_ms(self) -> int | None:
        """The controllers' replicated heartbeat timeout (None: they do not say)."""

    async def get_next_broker_id(self, cluster: str, group: str) -> int: ...

    async def apply_broker_id(self, cluster: str, group: str, broker_id: int, check_code: str) -> None: ...

    async def register_broker(self, cluster: str, group: str, broker_id: int, address: str,
                              ha_address: str, clean_shutdown: bool = True, incarnation: str = "",
                              previous_incarnation: str = "", crashed: bool = False) -> ReplicaInfo:
        """``clean_shutdown`` False: this start follows an unclean stop, so the log may lack
        acknowledged messages; the controller takes the replica out of its SyncStateSet.
        ``incarnation``: this process; ``previous_incarnation``: the one whose clean stop it follows.
        ``crashed``: the last run did not stop cleanly (durable or not): a master is moved to a new
        MasterEpoch."""

    async def heartbeat(self, controller_addr: str, hb: Heartbeat, timeout_s: float) -> HeartbeatAnswer:
        """To one controller node (every node counts heartbeats for the lease), not the leader."""

    async def get_replica_info(self, group: str) -> ReplicaInfo: ...

    async def elect_master(self, cluster: str, group: str, broker_id: int) -> ReplicaInfo: ...

    async def hand_over_master(self, cluster: str, group: str, from_id: int, to_id: int, expect_master_epoch: int,
                               expect_sync_state_set_epoch: int) -> ReplicaInfo:
        """The master ``from_id`` hands over to ``to_id`` (compare-and-set on the MasterEpoch and
        the syncStateSetEpoch)."""

    async def alter_sync_state_set(self, group: str, master_id: int, master_epoch: int, new_set: frozenset[int],
                                   sync_state_set_epoch: int,
                                   leaving: tuple[tuple[int, str], ...] = ()) -> tuple[frozenset[int], int]:
        """``leaving``: why members go ((brokerId, reason)); a "quarantined" one holds no
        acknowledged copy and never becomes eligible."""

    async def group_members(self, group: str) -> dict[int, RegisteredReplica]:
        """The brokerIds registered in ``group``, each with its registered incarnation and zone."""

    def watch_replica_info(self, group: str, addr: str) -> AsyncIterator[ReplicaInfo]:
        """Pushes of the group's ReplicaInfo from node ``addr``; ends (or raises) when the stream does."""

    def broker_session(self, addr: str, cluster: str, group: str, broker_id: int, ack_mode: str,
                       incarnation: str = "") -> AsyncIterator[bool]:
        """The session held with node ``addr`` for crash-fast failover: yields once (whether the
        node tracks it) when it is open, then ends (or raises) when the stream does."""

    def set_controllers(self, addresses: tuple[str, ...]) -> None:
        """The controllers' membership changed: leader-following calls use these addresses."""

    async def close(self) -> None: ...


def connect(addresses: Iterable[str], *, rpc_timeout_s: float, tls: TLSConfig | None = None) -> BrokerControllerApi:
    """The gRPC implementation, following the Raft leader among ``addresses`` (mutual TLS when
    ``tls`` is enabled)."""
    from autoswitch.controller.broker_client import GrpcBrokerControllerApi

    return GrpcBrokerControllerApi(list(addresses), rpc_timeout_s=rpc_timeout_s, tls=tls)
