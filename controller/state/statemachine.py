"""The controller's replicated state machine (RocketMQ ``ReplicasInfoManager``), pure.

Flow on every node, in Raft log order::

    apply(index, data) -> decode_request(data) -> handle(request, state) -> (events, reply)
                       -> apply_event(event) for each event -> reply

``handle`` only reads the state; it stages the events on copies of the touched group(s), checks
the invariants there and builds the reply from the staged result, so a rejected or buggy
request never half-applies. Everything time- or liveness-dependent is inside the request
(see messages.py), so two nodes fed the same log end byte-identical (``snapshot()``).

Invariants (checked after every staged apply; a violation rejects the entry with
CONTROLLER_JRAFT_INTERNAL_ERROR on every node alike and logs an error, instead of crashing
the whole controller cluster on a deterministic bug):
  * the master is a registered replica inside its SyncStateSet;
  * SSS and eligible replicas are registered and disjoint;
  * MasterEpoch and syncStateSetEpoch never decrease, and a change of master (or of SSS) comes
    with a strictly larger MasterEpoch (or syncStateSetEpoch): one master per MasterEpoch.
    Epochs survive CleanBrokerData of a whole group (a tombstone keeps them) so a re-created
    group never reuses an epoch that brokers still hold in their EpochFiles.

The state, its event appliers and the invariant checks are sm_state.py; the snapshot codec
sm_snapshot.py; the history record each applied event leaves history.py.

Why one long module: each request's handler sits next to the others, so what each may emit can
be read against the invariants in one place.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable
from typing import Any

import msgspec
from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.messages import (
    MAX_AUDIT_FIELD_LEN,
    MAX_QUERY_GROUPS,
    NOT_HOLDER_REASONS,
    TRIGGER_ADMIN,
    TRIGGER_CONTROLLER,
    TRIGGER_REGISTRATION,
    AdminAuditEvent,
    AdminAuditRequest,
    AlterSyncStateSetEvent,
    AlterSyncStateSetRequest,
    ApplyBrokerIdEvent,
    ApplyBrokerIdRequest,
    BrokerLiveInfo,
    CheckStateHashRequest,
    CleanBrokerDataEvent,
    CleanBrokerDataRequest,
    ElectMasterEvent,
    ElectMasterRequest,
    EligibleChangeEvent,
    Event,
    FinalizeFeaturesRequest,
    GetControllerConfigRequest,
    GetMetaDataRequest,
    GetNextBrokerIdRequest,
    GetReplicaInfoRequest,
    GetSyncStateDataRequest,
    ImportGroupRequest,
    MalformedRequest,
    RecordMemberLevelRequest,
    RegisterBrokerRequest,
    ReplicaView,
    Reply,
    Request,
    SetControllerMaintenanceRequest,
    SetMaintenanceRequest,
    SetPreferredMasterRequest,
    SetZonePreferenceRequest,
    UpdateBrokerAddressEvent,
    UpdateConfigEvent,
    UpdateControllerConfigRequest,
    WriteRequest,
    check_request,
    decode_request,
    recovery_token_state,
)
from autoswitch.controller.state import election, explain, operator_rules
from autoswitch.controller.state.history import HistoryRecord, event_history_record
from autoswitch.controller.state.outcome import Outcome as _Outcome
from autoswitch.controller.state.outcome import reject as _reject
from autoswitch.controller.state.sm_config import (
    BLACKLIST,
    KEY_LEVEL,
    KEYS,
    ConfigValueError,
    SMConfig,
    parse_value,
)
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot, state_hash
from autoswitch.controller.state.sm_state import (
    CRASH_RESTART,
    FIRST_BROKER_ID,
    MAX_GROUPS,
    MAX_REPORTED_EPOCH_JUMP,
    NEW_INCARNATION,
    UNCLEAN_SHUTDOWN,
    ControllerState,
    GroupState,
    InvariantViolation,
)
from autoswitch.controller.state.staged import Staged

from autoswitch.base.features import SAFETY_LEVEL
from autoswitch.base.limits import MAX_REPLICAS_PER_GROUP
from autoswitch.base.log import get_logger

STATE_HASHES_KEPT = 16
_log = get_logger("controller.sm")

# --------------------------------------------------------------------------- handle


def follows_registered(registered: str, incarnation: str, previous: str) -> bool:
    """A registration of ``incarnation`` (continuing ``previous``) is the registered process of
    its id or its successor; not stated on either side: unverifiable, taken as following."""
    return not registered or not incarnation or registered in (incarnation, previous)


def _same_process(registered: str, reported: str) -> bool:
    """A liveness report is from the registered process of its id. Unverifiable (and accepted):
    a registration that named no incarnation (a RocketMQ broker)."""
    return not registered or registered == reported


def handle(request: Request, state: ControllerState) -> tuple[list[Event], Reply]:
    """Pure: the events ``request`` produces against ``state`` and the reply, nothing applied."""
    events, reply, _ = _handle(request, state)
    return events, reply


def _handle(request: Request, state: ControllerState,
            validated: bool = False) -> tuple[list[Event], Reply, Staged]:
    """``validated``: the request came from decode_request or check_request (is checked)."""
    staged = Staged(state)
    try:
        if not validated:
            check_request(request)
        decide = _DECIDERS.get(type(request))
        if decide is None:
            raise MalformedRequest(f"not a write request: {type(request).__name__}")
        events, out = decide(request, state)
        for ev in events:
            staged.apply(ev)
        staged.check()
    except MalformedRequest as e:
        return [], Reply(Code.CONTROLLER_INVALID_REQUEST, e.message), Staged(state)
    except InvariantViolation as e:
        _log.error("invariant_violation", request=type(request).__name__, group=request.group, error=e.message)
        return [], Reply(Code.CONTROLLER_JRAFT_INTERNAL_ERROR, f"invariant violation: {e.message}"), Staged(state)
    except Exception as e:  # noqa: BLE001 - a bug: deterministic on every node, so reject the entry everywhere alike
        _log.error("state_machine_bug", exc_info=True, request=type(request).__name__, group=request.group)
        return [], Reply(Code.CONTROLLER_JRAFT_INTERNAL_ERROR, f"internal error: {type(e).__name__}"), Staged(state)
    view = None
    if out.group is not None:
        g = staged.group(out.group)
        view = g.view() if g is not None else None
    data = out.data
    if isinstance(request, UpdateControllerConfigRequest) and out.code == Code.SUCCESS:
        data = (staged.config or state.config).to_strings()
    decision = None
    if isinstance(request, ElectMasterRequest | AlterSyncStateSetRequest):
        decision = explain.decision_record(request, code_name(out.code), out.remark, out.explain, view)
    return events, Reply(out.code, out.remark, view, out.broker_id, data, decision), staged


def _apply_broker_id(req: ApplyBrokerIdRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    name = req.broker_name
    g = state.groups.get(name)
    address = req.register_check_code.split(";", 1)[0]   # RocketMQ: "address;timestamp"
    ev = ApplyBrokerIdEvent(name, req.cluster_name, req.applied_broker_id, address, req.register_check_code,
                            req.ts_ms)
    if g is None:
        tomb = state.tombstones.get(name)
        first = tomb.next_assign_broker_id if tomb is not None else FIRST_BROKER_ID
        if len(state.groups) >= MAX_GROUPS:
            return _reject(Code.CONTROLLER_INVALID_REQUEST, f"too many broker groups (limit {MAX_GROUPS})")
        if req.applied_broker_id < first:
            return _reject(Code.CONTROLLER_BROKER_ID_INVALID,
                           f"brokerId {req.applied_broker_id} of {name} was already used; ids start at {first}")
        return [ev], _Outcome(group=name, broker_id=req.applied_broker_id)
    if g.cluster_name != req.cluster_name:
        return _reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"broker-set {name} belongs to cluster {g.cluster_name}, not {req.cluster_name}", name)
    rec = g.brokers.get(req.applied_broker_id)
    if rec is not None:
        if rec.register_check_code == req.register_check_code:
            return [], _Outcome(remark="already applied", group=name, broker_id=req.applied_broker_id)
        return _reject(Code.CONTROLLER_BROKER_ID_INVALID,
                       f"brokerId {req.applied_broker_id} of {name} belongs to another broker", name)
    if g.id_retired(req.applied_broker_id):
        # Ids are never reused: a stale identity file must not inherit someone else's history.
        return _reject(Code.CONTROLLER_BROKER_ID_INVALID,
                       f"brokerId {req.applied_broker_id} of {name} was already used; next is "
                       f"{g.next_assign_broker_id}", name)
    if len(g.brokers) >= MAX_REPLICAS_PER_GROUP:
        return _reject(Code.CONTROLLER_INVALID_REQUEST, f"{name} already has {MAX_REPLICAS_PER_GROUP} replicas", name)
    return [ev], _Outcome(group=name, broker_id=req.applied_broker_id)


def _register_broker(req: RegisterBrokerRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    name = req.broker_name
    g = state.groups.get(name)
    if g is None:
        return _reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {name} is not registered")
    if g.cluster_name != req.cluster_name:
        return _reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"broker-set {name} belongs to cluster {g.cluster_name}, not {req.cluster_name}", name)
    bid = req.broker_id
    if bid not in g.brokers:
        return _reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED,
                       f"brokerId {bid} is not registered in broker-set {name}", name)
    events: list[Event] = []
    rec = g.brokers[bid]
    incarnation = req.incarnation or rec.incarnation      # not stated: the record keeps its own
    if (rec.address, rec.ha_address, rec.incarnation) != (req.broker_address, req.broker_ha_address, incarnation):
        events.append(UpdateBrokerAddressEvent(name, bid, req.broker_address, req.broker_ha_address, incarnation))
    # A start that follows the clean stop of the incarnation registered last is that replica
    # going on. Any other new incarnation (a copied or restored data directory, a clone started
    # after the original died) may hold an older log than the one that was in the set, even with
    # a clean marker: it catches up again before it is in a SyncStateSet or electable.
    follows = follows_registered(rec.incarnation, req.incarnation, req.previous_incarnation)
    # An unclean restart of the registered process (its abort marker named it, same host and
    # directory) stays a last known holder; an unclean start that follows nothing (a copy of a
    # running broker's directory) holds nobody's acknowledged messages for sure: out, like any
    # other new incarnation (found by the data simulator's cloned processes).
    if not follows:
        events.extend(_data_loss_events(g, bid, state.config, NEW_INCARNATION))
    elif not req.clean_shutdown:
        events.extend(_data_loss_events(g, bid, state.config, UNCLEAN_SHUTDOWN))
    elif req.crashed and bid == g.master_broker_id and state.feature_level >= SAFETY_LEVEL:
        # A durable run's crash lost nothing acknowledged, but its master shipped each append to
        # the slaves before its own fsync: a slave may hold, fsynced, a tail of this MasterEpoch
        # that the master's log lost. Resumed, the master would write new messages at those
        # offsets and the slave's first ack would count for bytes it does not hold (issue 58,
        # item 1). A crashed master never resumes its epoch: the group moves to a new one.
        events.extend(_data_loss_events(g, bid, state.config, CRASH_RESTART))
    return events, _Outcome(group=name)


def _data_loss_events(g: GroupState, bid: int, cfg: SMConfig, reason: str) -> list[Event]:
    """A replica restarted after an unclean shutdown, or as an incarnation that does not follow the
    registered one (a copied directory): its log may miss acknowledged messages.

    After an unclean shutdown its heartbeats say so (clean_shutdown false until it has caught up
    with a master's confirmOffset), and that keeps it from a normal election; it stays in the
    SyncStateSet and the eligible replicas, which remain the last known holders of the
    acknowledged messages (KIP-966's last known ELR): if every one of them restarted uncleanly,
    the unclean recovery of election.decide elects the longest log once all are back. (Taking it
    out here, as before, lost acked messages: a slave that still held them left the set while the
    dead master's later recovery counted only itself.) A master that restarted uncleanly is no
    longer master. A new incarnation reports a clean log, so it leaves the set and the eligible
    replicas here and catches up like a new replica."""
    keep = reason in (UNCLEAN_SHUTDOWN, CRASH_RESTART)    # the same replica going on: still a last known holder
    if bid == g.master_broker_id:
        rest = g.sync_state_set - {bid}
        # An eligible replica (it left the set after the set fell below min_in_sync_replicas, so
        # it holds everything acknowledged) outranks a lone master that lost its tail: electing
        # the master at a new epoch would make it truncate what it holds.
        if not rest and not (g.eligible - {bid}) and keep:
            # The only copy (the same process's directory after an unclean restart; a process
            # that does not follow the master is no copy of its log at all: the master is
            # deposed and the group waits for the operator, GroupState.holder_replaced):
            # nothing better to elect, but never the same epoch again. Resumed,
            # it would write new records at offsets it lost, and a replica outside the set that
            # still holds the old bytes of that epoch would keep them at its handshake (same
            # epoch, same start) and could later be elected with other bytes under acked offsets.
            # A new epoch starts where this log now ends; the others truncate to it.
            return [ElectMasterEvent(g.broker_name, bid, (bid,), (), False, "master_" + reason + "_new_epoch",
                                     trigger=TRIGGER_REGISTRATION)]
        return [ElectMasterEvent(g.broker_name, None, tuple(sorted(g.sync_state_set if keep else rest)),
                                 tuple(sorted(g.eligible if keep else g.eligible - {bid})), False, "master_" + reason,
                                 trigger=TRIGGER_REGISTRATION)]
    if keep:
        return []
    if bid in g.sync_state_set:
        new = g.sync_state_set - {bid}
        elig = election.eligible_after_alter(old_sync_state_set=g.sync_state_set, new_sync_state_set=new,
                                             old_eligible=g.eligible, min_in_sync_replicas=cfg.min_in_sync_replicas,
                                             enabled=cfg.enable_eligible_replicas) - {bid}
        return [AlterSyncStateSetEvent(g.broker_name, tuple(sorted(new)), tuple(sorted(elig)), reason)]
    if bid in g.eligible:
        return [EligibleChangeEvent(g.broker_name, tuple(sorted(g.eligible - {bid})), reason)]
    return []


def _elect_master(req: ElectMasterRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    name = req.broker_name
    g = state.groups.get(name)
    cfg = state.config
    if g is None:
        return _reject(Code.CONTROLLER_BROKER_NEED_TO_BE_REGISTERED, f"broker-set {name} is not registered")
    if req.cluster_name and g.cluster_name != req.cluster_name:
        return _reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"broker-set {name} belongs to cluster {g.cluster_name}, not {req.cluster_name}", name)
    # A report counts only from the process registered for its id: another one's (the last words
    # of the process a copy was registered over, still fresh on some node) describes a log the
    # registered process may not have (found by the data simulator's cloned processes).
    alive: dict[int, BrokerLiveInfo] = {a.broker_id: a for a in req.alive if a.broker_id in g.brokers
                                        and _same_process(g.brokers[a.broker_id].incarnation, a.incarnation)}
    if g.diverged:
        # a replica recorded as holding no acknowledged copy is one whatever its report says
        alive = {b: msgspec.structs.replace(a, diverged=True) if b in g.diverged else a for b, a in alive.items()}
    designated = req.broker_id if req.designate else None
    if designated is not None and designated not in g.brokers:
        return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED, f"designated brokerId {designated} is not registered",
                       name)
    if g.first_election and designated is None:
        registered = g.brokers.keys()
        waited = req.ts_ms >= g.created_ts_ms + cfg.first_election_grace_ms
        all_reported = registered <= alive.keys() and len(alive) >= cfg.first_election_min_replicas
        if not (waited or all_reported):
            return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                           f"first election of {name} waits for replicas to report: {len(alive)} of "
                           f"{len(registered)} alive, grace ends at ts {g.created_ts_ms + cfg.first_election_grace_ms}",
                           name)
    master = g.master_broker_id
    safety = state.feature_level >= SAFETY_LEVEL
    if req.unclean_recovery and safety:
        # The operator's plan was made at a state the controllers can check now, when the election
        # commits: the group still has no master at exactly the plan's epochs (issue 58, item 5).
        # A master elected after the plan was read (its re-plan can take seconds) is never deposed.
        at = recovery_token_state(req.unclean_recovery)
        if at is None:
            return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                           f"unclean recovery of {name}: the token does not name the state it was planned at "
                           f"(make the plan with `autoswitch admin unclean-recover` of this release)", name)
        if master is not None or (g.master_epoch, g.sync_state_set_epoch) != at:
            now = f"master {master}" if master is not None else "no master"
            return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                           f"unclean recovery of {name} refused: the plan was made at MasterEpoch {at[0]}, "
                           f"syncStateSetEpoch {at[1]} with no master; now {now} at MasterEpoch {g.master_epoch}, "
                           f"syncStateSetEpoch {g.sync_state_set_epoch}: plan again", name)
    if req.handover_from:
        # Compare-and-set: the master drained itself for exactly this master and MasterEpoch; any
        # election in between (an operator's, a failover) makes the handover void, never a second one.
        if master != req.handover_from or g.master_epoch != req.expect_master_epoch:
            return _reject(Code.CONTROLLER_FENCED_MASTER_EPOCH,
                           f"handover of {name} from {req.handover_from} at MasterEpoch {req.expect_master_epoch} is "
                           f"stale: the master is {master} at MasterEpoch {g.master_epoch}", name)
        if g.sync_state_set_epoch != req.expect_sync_state_set_epoch:
            # the master cancels a handover whose answer it never got by bumping this (a confirm)
            return _reject(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                           f"handover of {name} expects syncStateSetEpoch {req.expect_sync_state_set_epoch}, "
                           f"it is {g.sync_state_set_epoch}", name)
        if designated not in g.sync_state_set:
            return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                           f"handover target {designated} is not in the SyncStateSet {sorted(g.sync_state_set)} of "
                           f"{name}", name)
    if req.trigger == TRIGGER_ADMIN and not req.handover_from and alive:
        newest = max(a.epoch for a in alive.values())
        if newest > g.master_epoch:
            return _elect_past_stale_view(g, alive, designated, newest)
        live = alive.get(master) if master is not None else None
        if designated not in (None, master) and live is not None and live.ack_mode in ("quorum", "master"):
            # It keeps acknowledging on its lease until it learns, without the successor's copy:
            # two masters acknowledge, and the old one's writes are lost (issue 30). A handover
            # drains it first; in ack mode "all" the successor's ack is needed, so it is safe.
            return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                           f"master {master} of {name} is alive and acknowledges in ack mode {live.ack_mode!r}: "
                           f"move it with `autoswitch admin transfer-master` (a graceful handover)", name)
    if designated is None and master is not None and master not in alive and master not in req.dead_broker_ids:
        # Liveness is the majority's (docs/design.md §2): not seen alive is not the same as dead. The
        # claim names the master, so a request computed before another election (pipelined
        # proposals) can never depose the master that election produced.
        return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                       f"master {master} of {name} is not agreed dead by a controller majority", name)
    zones = dict(req.zones)
    ranks = election.zone_ranks(zones, g.zone_preference)
    d = election.decide(master=master, sync_state_set=g.sync_state_set, eligible=g.eligible,
                        registered=frozenset(g.brokers), alive=alive, first_election=g.first_election,
                        designated=designated,
                        unclean_enabled=((cfg.enable_elect_unclean_master or bool(req.unclean_recovery))
                                         and not req.handover_from and not req.crash_only),
                        pool_complete=not g.holder_replaced,
                        maintenance=g.maintenance, zone_rank=ranks, not_holders=g.diverged,
                        unclean_spares_live_master=safety)
    winner = d.new_master if d.outcome in (election.Outcome.ELECT, election.Outcome.KEEP) else None
    cands = explain.verdicts(registered=sorted(g.brokers), alive=alive, dead=frozenset(req.dead_broker_ids),
                             sync_state_set=g.sync_state_set, eligible=g.eligible, maintenance=g.maintenance,
                             first_election=g.first_election, designated=designated, winner=winner,
                             winner_in_maintenance_only=d.reason == "only_clean_replicas_in_maintenance",
                             zones=zones, zone_rank=ranks)
    if d.outcome is election.Outcome.KEEP:
        events, out = _reject(Code.CONTROLLER_MASTER_STILL_EXIST, f"master {master} of {name} is still alive", name)
        out.explain = ("kept", d.reason, cands)
        return events, out
    if d.outcome is election.Outcome.DESIGNATED_INVALID:
        events, out = _reject(Code.CONTROLLER_ELECT_MASTER_FAILED, d.reason, name)
        out.explain = ("refused", d.reason, cands)
        return events, out
    if d.outcome is election.Outcome.NONE:
        events = []
        if req.trigger == TRIGGER_CONTROLLER and master is not None and not req.crash_only:
            # RocketMQ: the old master is gone and nobody can replace it; record "no master" (and a new
            # MasterEpoch) so brokers stop following it, keep the SSS for when a member returns. Not on
            # crash evidence alone: a reset connection must not depose a healthy master nobody can
            # replace; if it really died, the timeout path records this a moment later.
            events.append(ElectMasterEvent(name, None, None, tuple(sorted(g.eligible)), False, "no_candidate",
                                           trigger=req.trigger, crash=req.crash_only))
        return events, _Outcome(Code.CONTROLLER_MASTER_NOT_AVAILABLE, f"no electable replica in {name}: {d.reason}",
                                name, explain=("no_master", d.reason, cands))
    assert d.new_master is not None
    lost = frozenset(bid for bid, info in alive.items() if not info.clean_shutdown)
    # the new master acknowledges by its own rule: count on the smaller number
    stated = alive[d.new_master].min_in_sync_replicas if d.new_master in alive else 0
    elig = election.eligible_after_election(
        new_master=d.new_master, old_sync_state_set=g.sync_state_set, old_eligible=g.eligible,
        unclean=d.unclean, min_in_sync_replicas=election.effective_min_in_sync(cfg.min_in_sync_replicas, stated),
        enabled=cfg.enable_eligible_replicas, lost_data=lost | g.diverged)
    recovery = f":recovery={req.unclean_recovery}" if req.unclean_recovery and d.unclean else ""
    # an operator's unclean election of a replica without an acknowledged copy makes its log the group's
    diverged = tuple(sorted(g.diverged - {d.new_master})) if d.new_master in g.diverged else None
    ev = ElectMasterEvent(name, d.new_master, (d.new_master,), tuple(sorted(elig)), d.unclean,
                          f"{req.trigger}:{'crash:' if req.crash_only else ''}{d.reason}{recovery}",
                          trigger=req.trigger, crash=req.crash_only, diverged=diverged,
                          min_epoch=_above_reported(g, alive) if safety else 0)
    return [ev], _Outcome(group=name, remark=d.reason, explain=("elected", d.reason, cands))


def _above_reported(g: GroupState, alive: dict[int, BrokerLiveInfo]) -> int:
    """The lowest MasterEpoch a new master may take: above every epoch its replicas report. A
    broker never follows a lower epoch than its own epoch file holds (RocketMQ's AutoSwitchHAService
    refuses it, and its ReplicasManager ignores the refusal), so a group this controller starts
    afresh beside brokers that ran under another controller (epoch files at 17) must begin above
    them; in a group the controllers ran all along no report is above their own epoch and this is
    no bound. A report implausibly far above is not believed (MAX_REPORTED_EPOCH_JUMP)."""
    newest = max((a.epoch for a in alive.values()), default=0)
    return newest + 1 if g.master_epoch < newest <= g.master_epoch + MAX_REPORTED_EPOCH_JUMP else 0


def _elect_past_stale_view(g: GroupState, alive: dict[int, BrokerLiveInfo], designated: int | None,
                           newest: int) -> tuple[list[Event], _Outcome]:
    """Brokers report a MasterEpoch above ours: this state is older than theirs (a controller
    cluster restored from an older snapshot; in a running cluster a broker only learns an epoch
    after its entry is applied, so it never reports one above). Our SyncStateSet is stale too, so
    only what the brokers report can decide: the replica holding the most of the newest epoch has
    every acknowledged message of it. It becomes master alone in the set (the others rejoin as they
    catch up), at an epoch above every reported one (brokers never follow a lower one)."""
    name = g.broker_name
    if newest > g.master_epoch + MAX_REPORTED_EPOCH_JUMP:
        return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                       f"a replica of {name} reports MasterEpoch {newest}, implausibly far above this state's "
                       f"{g.master_epoch}", name)
    top = [a for a in alive.values() if a.epoch == newest]
    top = [a for a in top if a.clean_shutdown] or top
    best = max(a.max_offset for a in top)
    complete = sorted(a.broker_id for a in top if a.max_offset == best)
    if designated is not None and designated not in complete:
        return _reject(Code.CONTROLLER_ELECT_MASTER_FAILED,
                       f"the controllers' state of {name} is older than the brokers' (they report MasterEpoch "
                       f"{newest}, it says {g.master_epoch}: restored from an older snapshot?); only {complete} "
                       f"hold everything of MasterEpoch {newest}", name)
    new = designated if designated is not None else complete[0]
    ev = ElectMasterEvent(name, new, (new,), (), False, f"{TRIGGER_ADMIN}:stale_controller_view", min_epoch=newest + 1,
                          trigger=TRIGGER_ADMIN)
    return [ev], _Outcome(group=name, remark=f"stale_controller_view: brokers reported MasterEpoch {newest}")


def _alter_sync_state_set(req: AlterSyncStateSetRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    name = req.broker_name
    g = state.groups.get(name)
    cfg = state.config
    if g is None:
        return _reject(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED, f"broker-set {name} is not registered")
    if g.master_broker_id != req.master_broker_id:
        return _reject(Code.CONTROLLER_INVALID_MASTER,
                       f"master of {name} is {g.master_broker_id}, not {req.master_broker_id}", name)
    if req.master_epoch != g.master_epoch:
        return _reject(Code.CONTROLLER_FENCED_MASTER_EPOCH,
                       f"masterEpoch of {name} is {g.master_epoch}, not {req.master_epoch}", name)
    if req.sync_state_set_epoch != g.sync_state_set_epoch:
        return _reject(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH,
                       f"syncStateSetEpoch of {name} is {g.sync_state_set_epoch}, not {req.sync_state_set_epoch}",
                       name)
    new = frozenset(req.new_sync_state_set)
    # An unchanged set is accepted and bumps syncStateSetEpoch ("confirm"): a master whose earlier
    # proposal had an unknown outcome (timeout, duplicate) uses it to fence that proposal for good
    # -- once the epoch moves past the proposal's base it can never commit -- before it stops
    # counting the proposed members for acks (RocketMQ rejects it; sim seeds 37/152 lost acks).
    alive = frozenset(req.alive_broker_ids)
    # The loops name the smallest offending id; the subset tests skip them when there is none.
    if not new <= g.brokers.keys():
        for bid in sorted(new):
            if bid not in g.brokers:
                return _reject(Code.CONTROLLER_INVALID_REPLICAS, f"replica {bid} is not registered in {name}", name)
    if not new <= alive:
        for bid in sorted(new):
            if bid != g.master_broker_id and bid not in alive:
                return _reject(Code.CONTROLLER_BROKER_NOT_ALIVE, f"replica {bid} of {name} is not alive", name)
    if g.master_broker_id not in new:
        return _reject(Code.CONTROLLER_ALTER_SYNC_STATE_SET_FAILED,
                       f"newSyncStateSet does not contain master {g.master_broker_id}", name)
    min_in_sync = election.effective_min_in_sync(cfg.min_in_sync_replicas, req.master_min_in_sync_replicas)
    diverged: tuple[int, ...] | None = None
    not_holders: frozenset[int] = frozenset()
    if state.feature_level >= SAFETY_LEVEL:
        # A member the master takes out because its bytes differ from the master's (quarantine) holds
        # no acknowledged copy: it must not become eligible when the set falls below the minimum,
        # and stays marked until it is back in a SyncStateSet (issue 58, items 3-4). Returning to
        # the set is what clears it: the master adds a replica only once its ack reached the
        # confirmOffset, after the repair.
        leaving = {b for b, why in req.leaving if why in NOT_HOLDER_REASONS and b in g.sync_state_set - new}
        not_holders = (g.diverged | leaving) - new
        if not_holders != g.diverged:
            diverged = tuple(sorted(not_holders))
    elig = election.eligible_after_alter(old_sync_state_set=g.sync_state_set, new_sync_state_set=new,
                                         old_eligible=g.eligible, min_in_sync_replicas=min_in_sync,
                                         enabled=cfg.enable_eligible_replicas) - not_holders
    reason = ("confirm" if new == g.sync_state_set else "expand" if new > g.sync_state_set
              else "shrink" if new < g.sync_state_set else "change")
    return [AlterSyncStateSetEvent(name, tuple(sorted(new)), tuple(sorted(elig)), reason, diverged)], \
        _Outcome(group=name)


def _clean_broker_data(req: CleanBrokerDataRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    name = req.broker_name
    g = state.groups.get(name)
    if g is None:
        return _reject(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"broker-set {name} does not exist")
    if req.cluster_name and g.cluster_name != req.cluster_name:
        return _reject(Code.CONTROLLER_INVALID_REQUEST,
                       f"broker-set {name} belongs to cluster {g.cluster_name}, not {req.cluster_name}", name)
    ids = frozenset(req.broker_ids)
    unknown = sorted(ids - g.brokers.keys())
    if unknown:
        return _reject(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA, f"brokerIds {unknown} not in {name}", name)
    if not req.clean_living_broker:
        living = sorted((ids or g.brokers.keys()) & frozenset(req.alive_broker_ids))
        if living:
            return _reject(Code.CONTROLLER_INVALID_CLEAN_BROKER_METADATA,
                           f"brokers {living} of {name} are still alive; refusing to clean", name)
    return [CleanBrokerDataEvent(name, tuple(sorted(ids)))], _Outcome(group=name)


def _update_config(req: UpdateControllerConfigRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    changes: list[tuple[str, str]] = []
    for k in sorted(req.config):
        if k in BLACKLIST:
            return _reject(Code.NO_PERMISSION, f"config key {k!r} cannot be changed at run time")
        if k not in KEYS:
            return _reject(Code.CONTROLLER_INVALID_REQUEST, f"unknown config key {k!r}; known: {sorted(KEYS)}")
        if KEY_LEVEL.get(k, 0) > state.feature_level:
            return _reject(Code.CONTROLLER_INVALID_REQUEST,
                           f"config key {k!r} needs feature level {KEY_LEVEL[k]}; the cluster is finalized at "
                           f"{state.feature_level} (`autoswitch admin finalize-features`)")
        try:
            parse_value(k, req.config[k])
        except ConfigValueError as e:
            return _reject(Code.CONTROLLER_INVALID_REQUEST, str(e))
        changes.append((k, req.config[k].strip().lower()))
    new = dict(changes)
    if "heartbeat_timeout_ms" in new:
        timeout = parse_value("heartbeat_timeout_ms", new["heartbeat_timeout_ms"])
        if timeout < req.broker_timeout_floor_ms:
            # A broker's master lease was sized for its heartbeat timeout: masterLease*(1+drift)
            # + safety < that timeout. A controller declaring it dead sooner could elect a new
            # master while its lease still lets the old one acknowledge (two masters).
            return _reject(Code.CONTROLLER_INVALID_REQUEST,
                           f"heartbeat_timeout_ms={timeout} refused: brokers heartbeating this controller sized "
                           f"their master lease for {req.broker_timeout_floor_ms} ms (rule: heartbeat_timeout_ms "
                           f">= every live broker's heartbeat_timeout_ms, so masterLease*(1+drift)+safety < "
                           f"heartbeat_timeout_ms still holds); lower the brokers' first")
    return [UpdateConfigEvent("", tuple(changes))], _Outcome()


def _admin_audit(req: AdminAuditRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    return [AdminAuditEvent(req.broker_name, req.actor, req.action, req.detail, req.code, req.remark)], _Outcome()


def _check_state_hash(req: CheckStateHashRequest, state: ControllerState) -> tuple[list[Event], _Outcome]:
    return [], _Outcome(data={"hash": state_hash(state)})


_DECIDERS: dict[type, Callable[[Any, ControllerState], tuple[list[Event], _Outcome]]] = {
    CheckStateHashRequest: _check_state_hash,
    ApplyBrokerIdRequest: _apply_broker_id,
    RegisterBrokerRequest: _register_broker,
    ElectMasterRequest: _elect_master,
    AlterSyncStateSetRequest: _alter_sync_state_set,
    CleanBrokerDataRequest: _clean_broker_data,
    UpdateControllerConfigRequest: _update_config,
    AdminAuditRequest: _admin_audit,
    SetPreferredMasterRequest: operator_rules.set_preferred_master,
    FinalizeFeaturesRequest: operator_rules.finalize_features,
    RecordMemberLevelRequest: operator_rules.record_member_level,
    SetMaintenanceRequest: operator_rules.set_maintenance,
    SetControllerMaintenanceRequest: operator_rules.set_controller_maintenance,
    SetZonePreferenceRequest: operator_rules.set_zone_preference,
    ImportGroupRequest: operator_rules.import_group,
}


# --------------------------------------------------------------------------- the state machine


class ControllerStateMachine:
    """The Raft StateMachine (docs/interfaces.md): apply / snapshot / restore, plus query for reads.

    ``history_sink`` (optional) receives one event history record per applied event, on every
    node, in log order; the process layer appends them to ``events.jsonl``. Pass the same
    ``config`` on every node (it is the replicated initial config; later changes are entries).
    """

    def __init__(self, config: SMConfig | None = None,
                 history_sink: Callable[[HistoryRecord], None] | None = None) -> None:
        self.state = ControllerState(config)
        self.last_applied_index = 0
        self.history_sink = history_sink
        # (applied index, state hash) of the last CheckStateHash entries applied here
        self.state_hashes: collections.deque[tuple[int, str]] = collections.deque(maxlen=STATE_HASHES_KEPT)
        # the last decisions per group applied here (not in snapshots: since this member started)
        self.decisions = explain.DecisionLog()

    # --- writes ---

    def apply(self, index: int, data: bytes) -> Reply | None:
        """Apply one committed entry. Empty data is a Raft no-op (returns None). Never raises for
        bad entries: they answer CONTROLLER_INVALID_REQUEST on every node alike. Every node,
        the proposing leader included, decodes the bytes: one path for all."""
        if index <= self.last_applied_index:
            _log.warning("apply_skipped_duplicate", index=index, last_applied=self.last_applied_index)
            return Reply(Code.CONTROLLER_INVALID_REQUEST, f"entry {index} already applied")
        if not data:
            self.last_applied_index = index
            return None
        try:
            req = decode_request(data)
        except MalformedRequest as e:
            self.last_applied_index = index
            _log.warning("apply_malformed_entry", index=index, error=e.message)
            return Reply(Code.CONTROLLER_INVALID_REQUEST, e.message)
        except Exception as e:  # noqa: BLE001 - a decoder bug: still a bad entry, never an exception out of apply
            self.last_applied_index = index
            _log.error("apply_decode_bug", exc_info=True, index=index)
            return Reply(Code.CONTROLLER_INVALID_REQUEST, f"undecodable entry: {type(e).__name__}")
        return self._execute(req, index, validated=True)   # decode_request checked it

    def execute(self, req: Request, index: int | None = None) -> Reply:
        """Apply an already decoded write request (simulator/tests); checks it first.
        apply() goes to _execute directly: decode_request has validated the entry."""
        if index is None:
            index = self.last_applied_index + 1
        return self._execute(req, index, validated=False)

    def _execute(self, req: Request, index: int, validated: bool) -> Reply:
        if isinstance(req, AdminAuditRequest) and req.outcome_of_previous:
            code, remark = self.state.last_outcome
            req = msgspec.structs.replace(req, code=code, remark=remark, outcome_of_previous=False)
        events, reply, staged = _handle(req, self.state, validated)
        if reply.decision is not None:
            reply = msgspec.structs.replace(reply, decision=msgspec.structs.replace(reply.decision, index=index))
            self.decisions.add(reply.decision)
            if isinstance(req, ElectMasterRequest):
                _log.info("election_decided", group=req.broker_name, index=index, outcome=reply.decision.outcome,
                          brokerId=reply.decision.master, epoch=reply.decision.master_epoch,
                          trigger=reply.decision.trigger, summary=reply.decision.summary[:500])
                for w in reply.decision.warnings:
                    _log.warning("zone_promise_at_risk", group=req.broker_name, index=index,
                                 brokerId=reply.decision.master, epoch=reply.decision.master_epoch, warning=w)
        self.state.last_outcome = (int(reply.code), reply.remark[:MAX_AUDIT_FIELD_LEN])
        if isinstance(req, CheckStateHashRequest) and reply.ok:
            self.state_hashes.append((index, reply.data["hash"]))
        ts = req.ts_ms if isinstance(req, WriteRequest) else 0
        records: list[HistoryRecord] = []
        if events:
            # Records show the state right after each event (staged.after, in event order).
            dj = explain.to_json(reply.decision) if reply.decision is not None else ""
            for ev, after in zip(events, staged.after, strict=True):
                records.append(event_history_record(ev, index, ts, after, dj))
            staged.commit()
        self.last_applied_index = index
        log_applied = _log.is_enabled_for(logging.INFO) if records else False
        for rec in records:
            if log_applied:   # skip building the fields when INFO is off (_log.info would drop them)
                _log.info("event_applied", kind=rec.event, index=index, group=rec.group,
                          brokerId=rec.master_broker_id, epoch=rec.master_epoch,
                          syncStateSet=list(rec.sync_state_set), syncStateSetEpoch=rec.sync_state_set_epoch,
                          reason=rec.reason, unclean=rec.unclean)
            if self.history_sink is not None:
                try:
                    self.history_sink(rec)
                except Exception:  # noqa: BLE001 - the audit trail must not un-apply or crash the applied entry
                    _log.error("history_sink_failed", exc_info=True, index=index, group=rec.group)
        if not reply.ok:
            _log.info("request_rejected", index=index, request=req.TYPE, group=req.group,
                      code=int(reply.code), remark=reply.remark)
        return reply

    # --- reads (leader, after read-index) ---

    def query(self, req: Request) -> Reply:
        try:
            check_request(req)
        except MalformedRequest as e:
            return Reply(Code.CONTROLLER_INVALID_REQUEST, e.message)
        st = self.state
        if isinstance(req, GetNextBrokerIdRequest):
            g = st.groups.get(req.broker_name)
            tomb = st.tombstones.get(req.broker_name)
            nxt = g.next_assign_broker_id if g else tomb.next_assign_broker_id if tomb else FIRST_BROKER_ID
            return Reply(broker_id=nxt)
        if isinstance(req, GetReplicaInfoRequest):
            g = st.groups.get(req.broker_name)
            if g is None:
                return Reply(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST, f"broker-set {req.broker_name} not found")
            return Reply(replica=g.view())
        if isinstance(req, GetSyncStateDataRequest):
            names = req.broker_names or tuple(sorted(st.groups))[:MAX_QUERY_GROUPS]
            out = {}
            for n in names:
                g = st.groups.get(n)
                if g is not None:
                    d = g.view().to_dict()
                    d["brokers"] = {str(b): r.address for b, r in sorted(g.brokers.items())}
                    out[n] = d
            return Reply(data=out)
        if isinstance(req, GetMetaDataRequest):
            return Reply(data={"groups": len(st.groups), "lastAppliedIndex": self.last_applied_index,
                               "featureLevel": st.feature_level})
        if isinstance(req, GetControllerConfigRequest):
            return Reply(data=st.config.to_strings())
        return Reply(Code.CONTROLLER_INVALID_REQUEST, f"not a read request: {type(req).__name__}")

    def replica_view(self, broker_name: str) -> ReplicaView | None:
        g = self.state.groups.get(broker_name)
        return g.view() if g is not None else None

    # --- snapshots ---

    def snapshot(self) -> bytes:
        return encode_snapshot(self.state, self.last_applied_index)

    def restore(self, data: bytes) -> None:
        state, index = decode_snapshot(data)
        self.state = state
        self.last_applied_index = index
