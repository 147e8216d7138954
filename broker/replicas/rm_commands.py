"""The ReplicasManager's vocabulary: the commands its sans-IO parts hand to the driver, the
values they carry, and the registration phases. A command that expects an answer carries a
``req`` id; the driver answers it exactly once (``on_reply`` / ``on_failure``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum

from autoswitch.broker.replicas.identity import BrokerIdentity, TempIdentity
from autoswitch.controller.api import FailKind

# --------------------------------------------------------------------------- values


@dataclass(frozen=True)
class Failure:
    kind: FailKind
    code: str
    message: str = ""
    leader_addr: str | None = None


@dataclass(frozen=True)
class RoleChange:
    """Given to role-switch hooks after the switch is done."""

    role: str  # "master" | "slave" | "fenced"
    cluster: str
    group: str
    broker_id: int
    epoch: int
    old_master_id: int
    old_master_addr: str
    new_master_id: int
    new_master_addr: str
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


# --------------------------------------------------------------------------- commands


@dataclass(frozen=True)
class FindLeader:
    req: int


@dataclass(frozen=True)
class GetNextBrokerId:
    req: int
    cluster: str
    group: str


@dataclass(frozen=True)
class WriteTempIdentity:
    req: int
    temp: TempIdentity


@dataclass(frozen=True)
class ApplyBrokerId:
    req: int
    cluster: str
    group: str
    broker_id: int
    register_check_code: str


@dataclass(frozen=True)
class CommitIdentity:
    """Write the identity file, then remove the temp file."""

    req: int
    identity: BrokerIdentity


@dataclass(frozen=True)
class RemoveTempIdentity:
    """Fire and forget: a stale temp file next to a valid identity file."""


@dataclass(frozen=True)
class RegisterBroker:
    req: int
    cluster: str
    group: str
    broker_id: int
    broker_addr: str
    clean_shutdown: bool = True  # log intact: see ReplicasManager.log_intact
    incarnation: str = ""           # this process (ReplicasManager.incarnation)
    previous_incarnation: str = ""  # the incarnation whose clean stop this start follows ("" = none)
    crashed: bool = False           # the last run did not stop cleanly (durable or not): never resume as master


@dataclass(frozen=True)
class SendHeartbeat:
    """To ONE controller. The driver adds maxOffset/confirmOffset read at send time and answers
    with the controller's HeartbeatAnswer (controller/api.py) as it came: the core decides whether
    it counts for the lease and whether the controllers' membership it names is adopted."""

    req: int
    controller: str
    round: int
    cluster: str
    group: str
    broker_id: int
    broker_addr: str
    epoch: int
    election_priority: int
    heartbeat_timeout_ms: int
    clean_shutdown: bool = True  # log intact: see ReplicasManager.log_intact
    lease_quorum: int = 0        # the majority of the controllers the lease counts against
    controllers_index: int = 0   # the membership change the controller list is from (0: configured)


@dataclass(frozen=True)
class GetReplicaInfo:
    req: int
    group: str


@dataclass(frozen=True)
class ElectMaster:
    req: int
    cluster: str
    group: str
    broker_id: int


@dataclass(frozen=True)
class AlterSyncStateSet:
    req: int
    group: str
    master_id: int
    master_epoch: int
    new_set: frozenset[int]
    sync_state_set_epoch: int
    leaving: tuple[tuple[int, str], ...] = ()   # (brokerId, why it leaves), e.g. "quarantined"


@dataclass(frozen=True)
class BecomeMaster:
    req: int
    epoch: int
    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class BecomeSlave:
    """``replicate`` False: this broker stops after handing its role over (SIGTERM); it names the
    new master to clients but opens no HA connection (it would join the SyncStateSet it leaves)."""

    req: int
    epoch: int
    master_id: int
    master_addr: str
    replicate: bool = True


@dataclass(frozen=True)
class BecomeFenced:
    """Deposed without a successor (controller recorded "no master" at a higher epoch)."""

    req: int
    epoch: int
    reason: str


@dataclass(frozen=True)
class AdoptControllers:
    """The controllers' voters changed (membership change ``index``): the driver points its calls
    and crash-fast sessions at ``controllers``; the core's heartbeats and lease follow already."""

    controllers: tuple[str, ...]
    index: int


@dataclass(frozen=True)
class SetFenced:
    """The master's write fence went up or changed its reason (fenced=True: "lease_expired",
    "deposed", a handover in doubt) or came down (fenced=False). The fence itself is the core's
    answer at every write (fenced_reason); this tells the broker the instant it changed."""

    fenced: bool
    reason: str | None


@dataclass(frozen=True)
class SyncStateSetLearned:
    """The controller holds a newer SyncStateSet for our epoch than we last told HA (e.g. an
    admin change, or the push of our own proposal); HAMaster.update_sync_state_set ignores stale ones."""

    sync_state_set: frozenset[int]
    sync_state_set_epoch: int


@dataclass(frozen=True)
class ProposalResult:
    proposal: int
    sync_state_set: frozenset[int] | None
    sync_state_set_epoch: int | None
    error: Failure | None = None


@dataclass(frozen=True)
class NotifyRoleChange:
    change: RoleChange


@dataclass(frozen=True)
class HandoverElect:
    """Ask the controller to move mastership to ``to_id``: a compare-and-set on this master
    (``from_id``), its MasterEpoch and syncStateSetEpoch (rm_handover.py). Answered with the
    group's ReplicaInfo; a refusal is REJECTED, anything else leaves the outcome unknown."""

    req: int
    cluster: str
    group: str
    from_id: int
    to_id: int
    expect_master_epoch: int
    expect_sync_state_set_epoch: int
    timeout_s: float


@dataclass(frozen=True)
class HandoverResult:
    ok: bool
    reason: str                 # why not, or how ("handed_over")
    target: int = 0
    master_id: int = 0          # the group's master afterwards, as far as this broker knows
    master_epoch: int = 0
    master_addr: str = ""
    waited_ms: int = 0


@dataclass(frozen=True)
class PauseWrites:
    """Hold new writes (they wait, they are not refused) until ResumeWrites."""


@dataclass(frozen=True)
class ResumeWrites:
    pass


@dataclass(frozen=True)
class DrainTo:
    """Tell the core (on_handover_drained) once broker ``target`` acknowledged ``offset`` on its
    HA connection, or that it did not within ``timeout_s``."""

    target: int
    offset: int
    timeout_s: float


@dataclass(frozen=True)
class HandoverDone:
    result: HandoverResult


# What the driver performs and answers (on_reply / on_failure): each carries its request id.
Request = (
    FindLeader
    | GetNextBrokerId
    | WriteTempIdentity
    | ApplyBrokerId
    | CommitIdentity
    | RegisterBroker
    | SendHeartbeat
    | GetReplicaInfo
    | ElectMaster
    | AlterSyncStateSet
    | HandoverElect
    | BecomeMaster
    | BecomeSlave
    | BecomeFenced
)
# What the driver carries out with no answer.
Notice = (RemoveTempIdentity | AdoptControllers | SetFenced | SyncStateSetLearned | ProposalResult | NotifyRoleChange
          | PauseWrites | ResumeWrites | DrainTo | HandoverDone)
Command = Request | Notice

# How a part issues a command: it passes a constructor taking the request id it is given.
Issue = Callable[[Callable[[int], Request]], Request]

# Failures of these tell us something about who leads the controller cluster.
LEADER_AWARE = (FindLeader, GetNextBrokerId, ApplyBrokerId, RegisterBroker, GetReplicaInfo, ElectMaster, AlterSyncStateSet)


class Phase(StrEnum):
    NEW = "new"
    FIND_LEADER = "find_leader"
    GET_NEXT_ID = "get_next_id"
    WRITE_TEMP = "write_temp"
    APPLY_ID = "apply_id"
    COMMIT_ID = "commit_id"
    REGISTER = "register"
    RUNNING = "running"
    STOPPED = "stopped"


CONTROLLER_STEPS = (Phase.GET_NEXT_ID, Phase.APPLY_ID, Phase.REGISTER)
