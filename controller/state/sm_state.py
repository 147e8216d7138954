"""The controller's replicated state (pure): groups, their replicas, MasterEpoch and SyncStateSet,
how each applied event changes them, and the invariants every change must keep.

The state machine (statemachine.py) stages events on copies of the touched groups, runs
``check_group_invariants`` on the result and only then applies them here, so a rejected or buggy
request never half-applies (its docstring lists the invariants).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoswitch.controller.messages import (
    AdminAuditEvent,
    AlterSyncStateSetEvent,
    ApplyBrokerIdEvent,
    CleanBrokerDataEvent,
    ControllerMaintenanceEvent,
    ElectMasterEvent,
    EligibleChangeEvent,
    Event,
    FeatureLevelEvent,
    ImportGroupEvent,
    MaintenanceEvent,
    MemberLevelEvent,
    PreferredMasterEvent,
    ReplicaView,
    UpdateBrokerAddressEvent,
    UpdateConfigEvent,
    ZonePreferenceEvent,
)
from autoswitch.controller.state.sm_config import SMConfig

from autoswitch.base.errors import AutoswitchError, CorruptionError
from autoswitch.base.features import BASELINE_LEVEL
from autoswitch.base.limits import MAX_REPLICAS_PER_GROUP

MAX_GROUPS = 200_000
MAX_REPORTED_EPOCH_JUMP = 1 << 20     # beyond this above our MasterEpoch a reported one is not believed
MAX_RETIRED_IDS = 1024   # per group; past it the floor rises (docs/controller.md)
FIRST_BROKER_ID = 1   # RocketMQ MixAll.FIRST_SLAVE_ID; 0 was the old fixed master id
NEW_INCARNATION = "new_incarnation"   # the reason of the events a non-following registration causes
UNCLEAN_SHUTDOWN = "unclean_shutdown"  # ... an unclean restart of the registered replica causes
CRASH_RESTART = "crash_restart"        # ... a durable run's crash causes (its master moves to a new epoch)



class InvariantViolation(AutoswitchError):
    code = "CONTROLLER_INVARIANT_VIOLATION"


class SnapshotCorrupt(CorruptionError):
    code = "CONTROLLER_SNAPSHOT_CORRUPT"


# --------------------------------------------------------------------------- state


@dataclass
class BrokerRecord:
    address: str
    register_check_code: str
    ha_address: str = ""      # "" = the broker did not give one
    incarnation: str = ""     # the process last registered for this id ("" = never stated)


@dataclass
class GroupState:
    """One broker group (RocketMQ BrokerReplicaInfo + SyncStateInfo) plus eligible replicas."""

    cluster_name: str
    broker_name: str
    created_ts_ms: int = 0
    next_assign_broker_id: int = FIRST_BROKER_ID
    brokers: dict[int, BrokerRecord] = field(default_factory=dict)
    master_broker_id: int | None = None
    master_epoch: int = 0
    sync_state_set: frozenset[int] = frozenset()
    sync_state_set_epoch: int = 0
    eligible: frozenset[int] = frozenset()
    base_master_epoch: int = 0     # MasterEpoch when the group was (re)created
    # brokerIds never to be applied again (they had a history): every id below ``retired_below``
    # and those in ``retired``. Ids never assigned stay free, so a broker whose certificate names
    # its id (broker/<group>/<id>) can register in any order.
    retired_below: int = FIRST_BROKER_ID
    retired: frozenset[int] = frozenset()
    preferred_master: int = 0      # SetPreferredMaster; 0 = none
    # A member of the SyncStateSet or the eligible replicas left them because a process that does
    # not follow it registered for its id (a copied directory): the acknowledged messages may be
    # on a directory no longer running as that id, so the set's unclean recovery (longest log of
    # the rest) is off until a master is elected again. Found by the data simulator's clones.
    holder_replaced: bool = False
    # replicas in maintenance (SetMaintenance): not elected while a clean replica outside it
    # exists, drained of mastership by the leader, skipped by preferred-master moves
    maintenance: frozenset[int] = frozenset()
    # SetZonePreference: the zones elections prefer, most preferred first
    zone_preference: tuple[str, ...] = ()
    # Replicas that hold no acknowledged copy: their range digests found other bytes than their
    # master's (quarantined), or they were cut to repair that and have not caught up since. Never
    # in the SyncStateSet or the eligible replicas, never a clean candidate (only an operator's
    # unclean election picks one) until they are back in a SyncStateSet (feature level 3).
    diverged: frozenset[int] = frozenset()

    def copy(self) -> GroupState:
        return GroupState(self.cluster_name, self.broker_name, self.created_ts_ms, self.next_assign_broker_id,
                          dict(self.brokers), self.master_broker_id, self.master_epoch, self.sync_state_set,
                          self.sync_state_set_epoch, self.eligible, self.base_master_epoch, self.retired_below,
                          self.retired, self.preferred_master, self.holder_replaced, self.maintenance,
                          self.zone_preference, self.diverged)

    def id_retired(self, broker_id: int) -> bool:
        return broker_id < self.retired_below or broker_id in self.retired

    @property
    def first_election(self) -> bool:
        """The group never had a master since it was (re)created, so there is no SSS history to
        trust: every alive registered replica is a candidate and the best data wins. A group whose
        SSS emptied later (unclean restarts, cleaned ids) is NOT in this state: electing outside
        its history needs unclean election."""
        return self.master_broker_id is None and self.master_epoch == self.base_master_epoch

    def view(self) -> ReplicaView:
        m = self.master_broker_id
        rec = self.brokers.get(m) if m is not None else None
        return ReplicaView(
            cluster_name=self.cluster_name, broker_name=self.broker_name, master_broker_id=m,
            master_address=rec.address if rec is not None else None,
            master_ha_address=(rec.ha_address or None) if rec is not None else None,
            master_epoch=self.master_epoch, sync_state_set=tuple(sorted(self.sync_state_set)),
            sync_state_set_epoch=self.sync_state_set_epoch, eligible_replicas=tuple(sorted(self.eligible)),
            preferred_master=self.preferred_master, maintenance=tuple(sorted(self.maintenance)),
            zone_preference=self.zone_preference, diverged=tuple(sorted(self.diverged)),
        )


@dataclass(frozen=True)
class Tombstone:
    """What survives CleanBrokerData of a whole group: the epochs and the id counter."""

    master_epoch: int
    sync_state_set_epoch: int
    next_assign_broker_id: int


class ControllerState:
    def __init__(self, config: SMConfig | None = None) -> None:
        self.groups: dict[str, GroupState] = {}
        self.tombstones: dict[str, Tombstone] = {}
        self.config: SMConfig = config.copy() if config is not None else SMConfig()
        # (code, remark) of the last applied entry: what an AdminAudit proposed right behind an
        # admin's write records as that write's outcome (part of the snapshot: deterministic)
        self.last_outcome: tuple[int, str] = (0, "")
        # the cluster's finalized feature level (autoswitch/base/features.py; FinalizeFeatures)
        self.feature_level: int = BASELINE_LEVEL
        # controller members in maintenance (SetControllerMaintenance): they never campaign
        self.controller_maintenance: frozenset[str] = frozenset()
        # each controller member's highest supported feature level, as the leader last heard it
        # (RecordMemberLevel): FinalizeFeatures refuses a level a voter's record lacks
        self.member_levels: dict[str, int] = {}

    def pristine(self) -> bool:
        """A new cluster: never finalized, and no group has had a master yet (registrations only,
        whose meaning does not depend on the level). An upgraded cluster has elected masters, and
        stays at its level until an operator finalizes. Replaying the log is deterministic either
        way: the level is part of the replicated state, raised by an entry like any other."""
        return (self.feature_level == BASELINE_LEVEL and not self.tombstones and not self.controller_maintenance
                and all(g.first_election for g in self.groups.values()))

    def apply_event(self, ev: Event) -> None:
        """Apply one event to the live state (replay, tests). Same code as the staged path."""
        if isinstance(ev, AdminAuditEvent):
            return
        if isinstance(ev, UpdateConfigEvent):
            apply_config(self.config, ev)
            return
        if isinstance(ev, FeatureLevelEvent):
            self.feature_level = ev.level
            return
        if isinstance(ev, ControllerMaintenanceEvent):
            self.controller_maintenance = apply_controller_maintenance(self.controller_maintenance, ev)
            return
        if isinstance(ev, MemberLevelEvent):
            self.member_levels = apply_member_level(self.member_levels, ev)
            return
        name = ev.broker_name
        g = self.groups.get(name)
        new = apply_group_event(g.copy() if g is not None else None, ev, self.tombstones.get(name))
        commit_group(self, name, g, new)


def commit_group(state: ControllerState, name: str, old: GroupState | None, new: GroupState | None) -> None:
    if new is None:
        if old is not None:
            state.tombstones[name] = Tombstone(old.master_epoch, old.sync_state_set_epoch,
                                               old.next_assign_broker_id)
            del state.groups[name]
    else:
        state.groups[name] = new
        state.tombstones.pop(name, None)


# --------------------------------------------------------------------------- event application


def apply_controller_maintenance(current: frozenset[str], ev: ControllerMaintenanceEvent) -> frozenset[str]:
    return current | {ev.node_id} if ev.on else current - {ev.node_id}


def apply_member_level(current: dict[str, int], ev: MemberLevelEvent) -> dict[str, int]:
    out = dict(current)
    if ev.level:
        out[ev.node_id] = ev.level
    else:
        out.pop(ev.node_id, None)
    return out


def apply_config(cfg: SMConfig, ev: UpdateConfigEvent) -> None:
    for k, v in ev.changes:
        cfg.set(k, v)


def apply_group_event(g: GroupState | None, ev: Event, tomb: Tombstone | None) -> GroupState | None:
    """Apply ``ev`` to ``g`` (a private copy, mutated) and return the group's new state."""
    if isinstance(ev, ApplyBrokerIdEvent):
        if g is None:
            g = GroupState(ev.cluster_name, ev.broker_name, created_ts_ms=ev.ts_ms)
            if tomb is not None:
                g.master_epoch = g.base_master_epoch = tomb.master_epoch
                g.sync_state_set_epoch = tomb.sync_state_set_epoch
                g.next_assign_broker_id = g.retired_below = tomb.next_assign_broker_id
        g.brokers[ev.broker_id] = BrokerRecord(ev.address, ev.register_check_code)
        g.next_assign_broker_id = max(g.next_assign_broker_id, ev.broker_id + 1)
        return g
    if isinstance(ev, ImportGroupEvent):
        if g is not None:
            raise InvariantViolation(f"ImportGroup for known group {ev.broker_name!r}")
        imported = [b for b, _a in ev.brokers]
        # ids below the largest imported one that were not imported may have had a history
        # on the other controller (cleaned brokers): never applied again
        first_free = max(max(imported) + 1, tomb.next_assign_broker_id if tomb is not None else FIRST_BROKER_ID)
        return GroupState(ev.cluster_name, ev.broker_name, created_ts_ms=ev.ts_ms, next_assign_broker_id=first_free,
                          brokers={b: BrokerRecord(a, f"{a};imported") for b, a in ev.brokers},
                          master_broker_id=ev.master_broker_id, master_epoch=ev.master_epoch,
                          sync_state_set=frozenset(ev.sync_state_set), sync_state_set_epoch=ev.sync_state_set_epoch,
                          retired_below=first_free)
    if g is None:
        raise InvariantViolation(f"{type(ev).__name__} for unknown group {ev.broker_name!r}")
    if isinstance(ev, UpdateBrokerAddressEvent):
        g.brokers[ev.broker_id] = BrokerRecord(ev.address, g.brokers[ev.broker_id].register_check_code,
                                               ev.ha_address, ev.incarnation)
    elif isinstance(ev, ElectMasterEvent):
        g.holder_replaced = ev.new_master is None and (g.holder_replaced or ev.reason.endswith(NEW_INCARNATION))
        g.master_broker_id = ev.new_master
        g.master_epoch = max(g.master_epoch + 1, ev.min_epoch)
        if ev.sync_state_set is not None and frozenset(ev.sync_state_set) != g.sync_state_set:
            g.sync_state_set = frozenset(ev.sync_state_set)
            g.sync_state_set_epoch += 1
        elif ev.new_master is not None:
            # RocketMQ bumps syncStateSetEpoch with every elected master, even if the set is equal.
            g.sync_state_set_epoch += 1
        g.eligible = frozenset(ev.eligible)
        if ev.diverged is not None:
            g.diverged = frozenset(ev.diverged)
    elif isinstance(ev, AlterSyncStateSetEvent):
        g.sync_state_set = frozenset(ev.sync_state_set)
        g.sync_state_set_epoch += 1
        g.eligible = frozenset(ev.eligible)
        g.holder_replaced = g.holder_replaced or ev.reason == NEW_INCARNATION
        if ev.diverged is not None:
            g.diverged = frozenset(ev.diverged)
    elif isinstance(ev, EligibleChangeEvent):
        g.eligible = frozenset(ev.eligible)
        g.holder_replaced = g.holder_replaced or ev.reason == NEW_INCARNATION
    elif isinstance(ev, PreferredMasterEvent):
        g.preferred_master = ev.broker_id
    elif isinstance(ev, ZonePreferenceEvent):
        g.zone_preference = ev.zones
    elif isinstance(ev, MaintenanceEvent):
        g.maintenance = g.maintenance | {ev.broker_id} if ev.on else g.maintenance - {ev.broker_id}
    elif isinstance(ev, CleanBrokerDataEvent):
        if not ev.broker_ids:
            return None
        ids = frozenset(ev.broker_ids)
        for bid in ids:
            g.brokers.pop(bid, None)
        g.retired = g.retired | ids
        if len(g.retired) > MAX_RETIRED_IDS:    # bounded: retire everything up to the largest instead
            g.retired_below, g.retired = max(g.retired_below, max(g.retired) + 1), frozenset()
        if not g.brokers:
            return None
        if g.master_broker_id in ids:
            g.master_broker_id = None
            g.master_epoch += 1
        if g.sync_state_set & ids:
            g.sync_state_set = g.sync_state_set - ids
            g.sync_state_set_epoch += 1
        g.eligible = g.eligible - ids
        g.diverged = g.diverged - ids
        g.maintenance = g.maintenance - ids
        if g.preferred_master in ids:
            g.preferred_master = 0
    else:
        raise InvariantViolation(f"unknown event {type(ev).__name__}")
    return g


def check_group_invariants(before: GroupState | None, after: GroupState | None,
                           tomb: Tombstone | None = None) -> None:
    """Raise InvariantViolation if ``after`` is not a legal successor of ``before``."""
    if after is None:
        return
    name = after.broker_name
    registered = after.brokers.keys()
    if after.master_broker_id is not None:
        if after.master_broker_id not in after.sync_state_set:
            raise InvariantViolation(f"{name}: master {after.master_broker_id} outside SyncStateSet")
        if after.master_broker_id not in registered:
            raise InvariantViolation(f"{name}: master {after.master_broker_id} not registered")
    if not after.sync_state_set <= registered or not after.eligible <= registered:
        raise InvariantViolation(f"{name}: SyncStateSet/eligible replicas contain unregistered brokers")
    if after.sync_state_set & after.eligible:
        raise InvariantViolation(f"{name}: a replica is both in SyncStateSet and eligible")
    if not after.diverged <= registered or after.diverged & (after.sync_state_set | after.eligible):
        raise InvariantViolation(f"{name}: a replica holding no acknowledged copy is unregistered, in the "
                                 f"SyncStateSet or eligible")
    if not after.maintenance <= registered:
        raise InvariantViolation(f"{name}: a replica in maintenance is not registered")
    if after.preferred_master and after.preferred_master not in registered:
        raise InvariantViolation(f"{name}: preferred master {after.preferred_master} not registered")
    if not 0 <= after.base_master_epoch <= after.master_epoch:
        raise InvariantViolation(f"{name}: base MasterEpoch above the MasterEpoch")
    if before is not None and after.base_master_epoch != before.base_master_epoch:
        raise InvariantViolation(f"{name}: base MasterEpoch changed")
    if len(after.brokers) > MAX_REPLICAS_PER_GROUP:
        raise InvariantViolation(f"{name}: more than {MAX_REPLICAS_PER_GROUP} replicas")
    if after.brokers and after.next_assign_broker_id <= max(after.brokers):
        raise InvariantViolation(f"{name}: nextAssignBrokerId not above every assigned id")
    ref = before if before is not None else tomb
    if ref is None:
        return
    if after.master_epoch < ref.master_epoch or after.sync_state_set_epoch < ref.sync_state_set_epoch:
        raise InvariantViolation(f"{name}: an epoch went backwards")
    if before is not None:
        if after.master_broker_id != before.master_broker_id and after.master_epoch <= before.master_epoch:
            raise InvariantViolation(f"{name}: master changed without a new MasterEpoch")
        if (after.sync_state_set != before.sync_state_set
                and after.sync_state_set_epoch <= before.sync_state_set_epoch):
            raise InvariantViolation(f"{name}: SyncStateSet changed without a new syncStateSetEpoch")


def check_state(state: ControllerState) -> None:
    """Whole-state structural check (tests, after restore)."""
    for name, g in state.groups.items():
        if name != g.broker_name:
            raise InvariantViolation(f"group key {name!r} holds {g.broker_name!r}")
        check_group_invariants(None, g)
