"""SyncStateSet, confirmOffset and write-ack decisions on the master (sans-IO).

Inputs: connects/disconnects, acks (with the lastCaughtUpTime the session derived), proposal
results, and the clock. Outputs: the confirmOffset, whether an offset is acknowledged under
the configured ack mode, and at most one AlterSyncStateSet proposal at a time.

The rule that matters most (RocketMQ #5663): while a proposal is in flight, nobody knows yet
which set the controller will hold, so an ack must satisfy the UNION of the current and the
proposed set; counting only one of them acknowledged writes that the next master lacked.

With ``min_in_sync_zones`` (docs/operations.md "Acks that span zones") the members that hold an
ack must also cover that many zones, as the controllers know each replica's zone (``set_zone``);
a replica whose zone is not known covers none.
"""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass

from autoswitch.ha.config import HAConfig

from autoswitch.base.backoff import Backoff
from autoswitch.base.limits import MAX_UNRESOLVED_PROPOSALS
from autoswitch.base.slowness import WindowedSignal
from autoswitch.base.write_errors import InSyncReplicasNotEnough


@dataclass
class ReplicaState:
    broker_id: int
    connected: bool = False
    async_learner: bool = False
    ack_offset: int = -1                 # -1: nothing known yet
    last_caught_up_time: float | None = None
    connected_at: float | None = None
    # The last time (tracker clock) its ack advanced or stood at the master's end: a member
    # behind and without progress since longer than slave_stall_timeout_s has stalled.
    progress_at: float | None = None
    progress_offset: int = -1
    # How long its acks trail the writes they cover (ms, per window; the slow rule): None until
    # its first ack of data written while it was connected.
    ack_latency: WindowedSignal | None = None


@dataclass
class Quarantine:
    """A replica whose bytes differ from ours in [start, end) of ``epoch`` (its own report): kept
    out of the SyncStateSet, and told to repair once no set the controller may hold names it."""
    epoch: int
    start: int
    end: int
    reason: str
    since: float
    repair_sent: bool = False
    reconnected: bool = False      # a connection opened after the repair was sent


@dataclass(frozen=True)
class Proposal:
    new_set: frozenset[int]
    base_sync_state_set_epoch: int
    master_epoch: int
    reasons: tuple[tuple[int, str], ...] = ()     # why members leave (brokerId, reason), for the log


# The slaves' ack latency is judged per window of this length; marks of the log end kept.
LATENCY_WINDOW_S = 1.0
MAX_MARKS = 4096
# tick() runs on every append and every ack (thousands a second with one-message requests); the
# set it wants, the stall and slow rules and the latency marks are looked at no more often than
# this, or at once after a connect, disconnect or proposal outcome. The rules' own times are
# seconds; a mark up to this late only underestimates an ack's latency by as much.
LOOK_EVERY_S = 0.01


class SyncStateTracker:
    def __init__(self, master_id: int, master_epoch: int, sync_state_set: frozenset[int],
                 sync_state_set_epoch: int, config: HAConfig, now: float,
                 confirm_offset: int = 0, epoch_start_offset: int = 0) -> None:
        if master_id not in sync_state_set:
            raise ValueError(f"SyncStateSet {sorted(sync_state_set)} lacks the master {master_id}")
        self.master_id = master_id
        self.master_epoch = master_epoch
        self.sync_state_set = frozenset(sync_state_set)
        self.sync_state_set_epoch = sync_state_set_epoch
        self.config = config
        self.started_at = now
        self.epoch_start_offset = epoch_start_offset   # start of the master's current epoch
        self._confirm = confirm_offset
        self.replicas: dict[int, ReplicaState] = {}
        self.in_flight: Proposal | None = None
        # Failed proposals whose outcome is unknown (a timeout, or a 2001 answer to a duplicate
        # whose first copy committed): the controller may hold any of them, so their members keep
        # counting for acks until the syncStateSetEpoch is known to have moved past their base.
        self.unresolved: dict[frozenset[int], int] = {}
        self._proposal_backoff = Backoff(config.proposal_backoff_min_s, config.proposal_backoff_max_s, jitter=False)
        self.next_proposal_at = now
        # Sets proposed and failed since the last accepted proposal: the backoff holds these back;
        # another set (a replica caught up or left since) is news, and goes at once. Always a
        # subset of ``unresolved``'s keys, so bounded by MAX_UNRESOLVED_PROPOSALS too.
        self._failed_sets: set[frozenset[int]] = set()
        self._next_look_at = now
        self.proposals_sent = 0
        self.quarantined: dict[int, Quarantine] = {}
        # (log end, when it was first seen there), ascending: when the data an ack covers was
        # written, for the slaves' ack latency. Bounded; an ack older than the first mark is
        # measured against it (an underestimate: never slower than the truth).
        self._marks: deque[tuple[int, float]] = deque(maxlen=MAX_MARKS)
        self._window_end = now + LATENCY_WINDOW_S
        self.self_degraded = False      # the master's own health: no slave is judged slow meanwhile
        # brokerId -> zone, as the controllers know it (min_in_sync_zones); registered replicas only,
        # so bounded by the group's size
        self.zones: dict[int, str] = {}
        # The master's own copy as it counts for acks and confirmOffset: None, its log end; with
        # durable acknowledgements (flush = "sync") its fsynced end, so consumers never read what
        # a power cut of the master could take back (issue 58, item 2). Kept by the adapter.
        self.own_durable: int | None = None

    # ------------------------------------------------------------------ inputs

    def _replica(self, broker_id: int) -> ReplicaState:
        r = self.replicas.get(broker_id)
        if r is None:
            if len(self.replicas) >= 4 * self.config.max_slaves:
                # Forget disconnected non-members first: the table is bounded.
                for bid, st in list(self.replicas.items()):
                    if not st.connected and bid not in self.ack_set:
                        del self.replicas[bid]
            r = self.replicas[broker_id] = ReplicaState(broker_id)
        return r

    def on_connect(self, broker_id: int, async_learner: bool, now: float) -> None:
        assert broker_id != self.master_id
        r = self._replica(broker_id)
        self._next_look_at = now
        r.connected = True
        q = self.quarantined.get(broker_id)
        if q is not None and q.repair_sent:
            q.reconnected = True
        r.async_learner = async_learner
        r.connected_at = now
        r.last_caught_up_time = None
        r.ack_offset = -1
        r.progress_offset = -1
        r.progress_at = now

    def set_zone(self, broker_id: int, zone: str) -> None:
        if zone:
            self.zones[broker_id] = zone
        else:
            self.zones.pop(broker_id, None)

    def on_disconnect(self, broker_id: int, now: float) -> None:
        r = self.replicas.get(broker_id)
        self._next_look_at = now
        if r is not None:
            r.connected = False

    def on_ack(self, broker_id: int, offset: int, caught_up_at: float | None, master_max: int,
               now: float | None = None) -> None:
        r = self._replica(broker_id)
        assert offset <= master_max, (offset, master_max)
        if offset > r.ack_offset:
            if now is not None:
                self._sample_latency(r, offset, now)
            r.ack_offset = offset
        if caught_up_at is not None:
            r.last_caught_up_time = caught_up_at
        self._advance_confirm(master_max)

    def quarantine(self, broker_id: int, epoch: int, start: int, end: int, reason: str, now: float) -> bool:
        """A replica reported a range it holds differently. True when this is news."""
        q = self.quarantined.get(broker_id)
        if q is not None and not q.repair_sent:
            return False
        self.quarantined[broker_id] = Quarantine(epoch, start, end, reason, now)
        return True

    def repair_due(self) -> list[int]:
        """Quarantined replicas that no set the controller may hold names any more: their bytes
        can be cut now without an acknowledged write depending on them."""
        members = self.ack_set
        return [b for b, q in self.quarantined.items()
                if not q.repair_sent and b not in members and (r := self.replicas.get(b)) is not None and r.connected]

    def on_repair_sent(self, broker_id: int) -> None:
        self.quarantined[broker_id].repair_sent = True

    def on_verified(self, broker_id: int, start: int, end: int, range_kept: bool) -> Quarantine | None:
        """The replica verified [start, end) against our digests. Its quarantine ends once it
        repaired and reconnected, and the bad range is verified again (or, when we no longer keep
        that range's digest, the replica holds it again). Returns the ended quarantine."""
        q = self.quarantined.get(broker_id)
        r = self.replicas.get(broker_id)
        if q is None or not q.reconnected or r is None:
            return None
        covered = start <= q.start and end >= q.end
        if covered or (not range_kept and r.ack_offset >= q.end):
            del self.quarantined[broker_id]
            return q
        return None

    def on_proposal_accepted(self, accepted: frozenset[int], sync_state_set_epoch: int, now: float) -> None:
        self.in_flight = None
        self._proposal_backoff.reset()
        self._failed_sets.clear()
        self.next_proposal_at = self._next_look_at = now
        if sync_state_set_epoch < self.sync_state_set_epoch:
            return  # an answer older than what we know; ignore it
        if self.master_id not in accepted:
            raise ValueError(f"accepted SyncStateSet {sorted(accepted)} lacks the master")
        self.sync_state_set = frozenset(accepted)
        self.sync_state_set_epoch = sync_state_set_epoch
        self._resolve(sync_state_set_epoch)

    def on_proposal_failed(self, now: float) -> None:
        if self.in_flight is not None:
            p = self.in_flight
            base = self.unresolved.get(p.new_set)
            self.unresolved[p.new_set] = p.base_sync_state_set_epoch if base is None else max(
                base, p.base_sync_state_set_epoch)
            self._failed_sets.add(p.new_set)
        self.in_flight = None
        self.next_proposal_at = now + self._proposal_backoff.next()

    @property
    def failures(self) -> int:
        """Proposals failed in a row."""
        return self._proposal_backoff.attempt

    def on_sync_state_set(self, sync_state_set: frozenset[int], sync_state_set_epoch: int) -> None:
        """The controller told us a newer set by another path (replica info poll)."""
        if sync_state_set_epoch > self.sync_state_set_epoch and self.master_id in sync_state_set:
            self._next_look_at = float("-inf")
            self.sync_state_set = frozenset(sync_state_set)
            self.sync_state_set_epoch = sync_state_set_epoch
            self._resolve(sync_state_set_epoch)

    def _resolve(self, known_epoch: int) -> None:
        """A proposal based on an epoch older than one the controller has reached can never commit."""
        for members, base in list(self.unresolved.items()):
            if base < known_epoch:
                del self.unresolved[members]
        self._failed_sets.intersection_update(self.unresolved)

    # ------------------------------------------------------------------ decisions

    def _possible_sets(self) -> list[frozenset[int]]:
        """Every set the controller may hold right now."""
        out = [self.sync_state_set, *self.unresolved]
        if self.in_flight is not None:
            out.append(self.in_flight.new_set)
        return out

    @property
    def ack_set(self) -> frozenset[int]:
        if self.in_flight is None and not self.unresolved:
            return self.sync_state_set
        return frozenset().union(*self._possible_sets())

    def _ack_of(self, broker_id: int, master_max: int) -> int:
        if broker_id == self.master_id:
            return master_max if self.own_durable is None else min(master_max, self.own_durable)
        r = self.replicas.get(broker_id)
        return r.ack_offset if r is not None else -1

    def zones_of(self, members: frozenset[int] | set[int] | list[int]) -> frozenset[str]:
        return frozenset(z for b in members if (z := self.zones.get(b)))

    def _short_of_zones(self, members: frozenset[int] | set[int] | list[int]) -> bool:
        need = self.config.min_in_sync_zones
        return need > 0 and len(self.zones_of(members)) < need

    def _below_min(self) -> bool:
        """Some set the controller may hold is smaller than minInSyncReplicas (or spans fewer
        zones than min_in_sync_zones). The controller then keeps the members it shrank away
        *eligible* (electable), trusting that the master acknowledges nothing from that moment (A1
        in docs/controller.md); so neither acks nor confirmOffset may move, also for writes
        admitted while the set was still big enough."""
        need = self.config.min_in_sync_replicas
        return self.config.ack_mode != "master" and any(
            len(s) < need or self._short_of_zones(s) for s in self._possible_sets())

    def _advance_confirm(self, master_max: int) -> int:
        if self._below_min():
            return self._confirm
        low = min(self._ack_of(b, master_max) for b in self.ack_set)
        if low > self._confirm:
            self._confirm = low
        return self._confirm

    def confirm_offset(self, master_max: int) -> int:
        """Smallest max offset over the (union) SyncStateSet; never moves backwards."""
        return self._advance_confirm(master_max)

    def _alive_members(self) -> list[int]:
        out = []
        for b in self.sync_state_set:
            if b == self.master_id:
                out.append(b)
            else:
                r = self.replicas.get(b)
                if r is not None and r.connected and not r.async_learner:
                    out.append(b)
        return out

    def alive_in_sync(self) -> int:
        return len(self._alive_members())

    def zone_shortfall(self, members: frozenset[int] | list[int] | None = None) -> str | None:
        """Why ``members`` (default: the SyncStateSet) span too few zones for an ack; None when
        they span enough (or min_in_sync_zones is off)."""
        if self.config.ack_mode == "master" or not self._short_of_zones(
                self.sync_state_set if members is None else members):
            return None
        ms = sorted(self.sync_state_set if members is None else members)
        zones = sorted(self.zones_of(ms))
        unknown = [b for b in ms if b not in self.zones]
        return (f"members {ms} span zones {zones} ({len(zones)}) < min_in_sync_zones "
                f"{self.config.min_in_sync_zones}" + (f"; zone not known for {unknown}" if unknown else ""))

    def check_enough(self) -> None:
        if self.config.ack_mode == "master":
            return
        members = self._alive_members()
        alive = len(members)
        if alive < self.config.min_in_sync_replicas:
            raise InSyncReplicasNotEnough(
                f"{alive} alive SyncStateSet members < minInSyncReplicas {self.config.min_in_sync_replicas}",
                alive=alive, min_in_sync_replicas=self.config.min_in_sync_replicas)
        short = self.zone_shortfall(members)
        if short is not None:
            raise InSyncReplicasNotEnough(f"alive SyncStateSet {short}", alive=alive,
                                          zones=sorted(self.zones_of(members)),
                                          min_in_sync_zones=self.config.min_in_sync_zones)

    def is_acked(self, offset: int, master_max: int) -> bool:
        mode = self.config.ack_mode
        if master_max < offset:
            return False
        if mode == "master":
            return self._ack_of(self.master_id, master_max) >= offset
        if self._below_min():
            return False
        if mode == "all":
            return all(self._ack_of(b, master_max) >= offset for b in self.ack_set)
        # in_sync_replicas: count only replicas electable under BOTH the current and the
        # proposed set, so whichever the controller keeps holds N copies.
        members = frozenset.intersection(*self._possible_sets())
        holders = [b for b in members if self._ack_of(b, master_max) >= offset]
        return len(holders) >= self.config.in_sync_replicas and not self._short_of_zones(holders)

    def acked_through(self, master_max: int) -> int:
        """The highest offset (>= 0) that ``is_acked`` holds for, or -1 for none: it then holds
        for every offset below too (an ack counts the holders at or above an offset, and a lower
        offset has at least the same holders), so one look releases every write waiting at or below it.
        ``is_acked`` stays the rule; this is its threshold, computed once per ack."""
        mode = self.config.ack_mode
        if mode == "master":
            return self._ack_of(self.master_id, master_max)
        if self._below_min():
            return -1
        if mode == "all":
            return min(master_max, min(self._ack_of(b, master_max) for b in self.ack_set))
        # in_sync_replicas: is_acked changes only at an ack (capped at the log end) or the log end
        members = frozenset.intersection(*self._possible_sets())
        candidates = {min(self._ack_of(b, master_max), master_max) for b in members} | {master_max}
        return next((c for c in sorted(candidates, reverse=True) if c >= 0 and self.is_acked(c, master_max)), -1)

    def desired_set(self, now: float, master_max: int | None = None) -> frozenset[int]:
        return self._desired(now, master_max)[0]

    def _desired(self, now: float, master_max: int | None) -> tuple[frozenset[int], dict[int, str]]:
        """The set we want, and why each member we drop goes. ``master_max`` (our log end)
        enables the stall rule: a member behind it whose ack has not moved for
        slave_stall_timeout_s goes, long before the catch-up timeout (a slave whose disk or
        process hangs while its connection stays up would hold every write in ack mode all)."""
        keep = {self.master_id}
        why: dict[int, str] = {}
        limit = self.config.ha_max_time_slave_not_catchup_s
        stall = self.config.slave_stall_timeout_s
        for b in self.sync_state_set:
            if b == self.master_id:
                continue
            if b in self.quarantined:
                why[b] = "quarantined"
                continue
            r = self.replicas.get(b)
            if r is None:
                # Never connected since we became master: grace of one catch-up window.
                if now - self.started_at <= limit:
                    keep.add(b)
                else:
                    why[b] = "never_connected"
                continue
            if not r.connected or r.async_learner:
                why[b] = "disconnected" if not r.connected else "async_learner"
                continue
            # not while the master is degraded itself: its own loop or disk holds the acks back (a
            # slow master shrinking its healthy slaves away would leave nowhere to hand over to)
            if (stall > 0 and not self.self_degraded and master_max is not None and r.ack_offset < master_max
                    and r.progress_at is not None and now - r.progress_at > stall):
                why[b] = "stalled"
                continue
            ref = r.last_caught_up_time if r.last_caught_up_time is not None else r.connected_at
            if ref is not None and now - ref <= limit:
                keep.add(b)
            else:
                why[b] = "not_caught_up"
        # The slow rule: a member whose acks trail the writes by more than slave_slow_ack_ms (a slow
        # disk, an overloaded host) holds every write in ack mode all; it leaves -- unless the master
        # is degraded itself (then the latency is its own), or the set would fall below
        # minInSyncReplicas or span fewer zones than min_in_sync_zones (writes would stop, not speed up).
        slow = {b for b in keep if b != self.master_id and b in self.replicas and self._is_slow(self.replicas[b])}
        if (slow and not self.self_degraded and len(keep) - len(slow) >= self.config.min_in_sync_replicas
                and not self._short_of_zones(keep - slow)):
            keep -= slow
            why.update(dict.fromkeys(slow, "slow"))
        for b, r in self.replicas.items():
            if (b in self.sync_state_set or not r.connected or r.async_learner or b in self.quarantined
                    or (self._is_slow(r) and not self.self_degraded)):
                continue
            if r.ack_offset >= self._confirm and r.ack_offset >= self.epoch_start_offset:
                keep.add(b)
        return frozenset(keep), why

    def _sample_latency(self, r: ReplicaState, offset: int, now: float) -> None:
        """The ack of ``offset`` arrived ``now``: how long after the master's log first reached it."""
        marks = self._marks
        threshold = self.config.slave_slow_ack_ms
        if threshold <= 0 or not marks:
            return
        i = bisect.bisect_left(marks, (offset, -1.0))
        if i == len(marks):
            return                                  # written since the last tick: current
        written_at = marks[i][1]
        if r.connected_at is None or written_at < r.connected_at:
            return                                  # catching up on what was written before it came
        if r.ack_latency is None:
            cfg = self.config
            r.ack_latency = WindowedSignal(threshold, cfg.slave_slow_windows, cfg.slave_recover_windows)
        r.ack_latency.add((now - written_at) * 1000.0)

    def _is_slow(self, r: ReplicaState) -> bool:
        return r.ack_latency is not None and r.ack_latency.slow

    def _close_latency_windows(self, now: float, master_max: int) -> None:
        if not self._marks or self._marks[-1][0] < master_max:
            self._marks.append((master_max, now))
        if now < self._window_end:
            return
        self._window_end = max(self._window_end + LATENCY_WINDOW_S, now)
        for r in self.replicas.values():
            if r.ack_latency is not None:
                r.ack_latency.close_window()

    def _note_progress(self, now: float, master_max: int) -> None:
        for r in self.replicas.values():
            if r.connected and (r.ack_offset > r.progress_offset or r.ack_offset >= master_max):
                r.progress_offset = r.ack_offset
                r.progress_at = now

    def tick(self, now: float, master_max: int) -> Proposal | None:
        """Returns a proposal to carry to the controller, at most one in flight."""
        if now < self._next_look_at:
            return None
        self._next_look_at = now + LOOK_EVERY_S
        self._advance_confirm(master_max)
        self._note_progress(now, master_max)
        self._close_latency_windows(now, master_max)
        if self.in_flight is not None:
            return None
        want, why = self._desired(now, master_max)
        if len(self.unresolved) >= MAX_UNRESOLVED_PROPOSALS and want not in self.unresolved:
            want = self.sync_state_set      # a confirm, nothing new (limits.MAX_UNRESOLVED_PROPOSALS)
        if want == self.sync_state_set and not self.unresolved:
            return None
        if now < self.next_proposal_at and want in self._failed_sets:
            # Backing off a refused set: a master whose first expansion named the old master, then
            # shutting down, sat 0.5 s without acks while another slave had caught up (bench-rolling).
            return None
        # With unresolved proposals an unchanged set is still proposed: the controller accepts it as
        # a "confirm" that bumps syncStateSetEpoch, which fences the unresolved ones for good.
        self.in_flight = Proposal(want, self.sync_state_set_epoch, self.master_epoch,
                                  tuple(sorted((b, w) for b, w in why.items() if b not in want)))
        self.proposals_sent += 1
        return self.in_flight

    def replica_infos(self, master_max: int) -> list[dict[str, object]]:
        out: list[dict[str, object]] = []
        for b, r in sorted(self.replicas.items()):
            out.append({
                "brokerId": b,
                "connected": r.connected,
                "asyncLearner": r.async_learner,
                "ackOffset": r.ack_offset,
                "lastCaughtUpTime": r.last_caught_up_time,
                "inSync": b in self.sync_state_set,
                "quarantined": _quarantine_info(self.quarantined.get(b)),
                "ackLatencyMs": r.ack_latency.last_ms if r.ack_latency is not None else -1.0,
                "slow": self._is_slow(r),
                "zone": self.zones.get(b, ""),
            })
        return out


def admission_refusal(broker_id: int, incarnation: str, registered: Mapping[int, str] | None) -> str | None:
    """May a connection stating ``incarnation`` count as replica ``broker_id`` (be served the log,
    enter a SyncStateSet)? ``registered``: the process the controllers registered for each of the
    group's brokerIds ("" = not stated: not checkable, admitted), None when they could not be asked
    (fail closed). None = admitted, else why not."""
    if registered is None:
        return "registry_unavailable"
    if broker_id not in registered:
        return "unknown_replica"
    reg = registered[broker_id]
    return "stale_incarnation" if reg and incarnation and reg != incarnation else None


def expansion_refusals(added: frozenset[int], connected: Mapping[int, str],
                       registered: Mapping[int, str] | None) -> dict[int, str]:
    """Why each replica a SyncStateSet expansion adds may not enter it (an absent id is admitted):
    it must be connected, as the process the controllers registered now (a clone, or a restart the
    connection outlived, is refused; the master closes that connection and it reconnects as
    itself). ``connected``: brokerId -> the incarnation its connection stated. HAMaster and the
    data simulator both decide with this."""
    out: dict[int, str] = {}
    for bid in sorted(added):
        why = "not_connected" if bid not in connected else admission_refusal(bid, connected[bid], registered)
        if why is not None:
            out[bid] = why
    return out


def _quarantine_info(q: Quarantine | None) -> dict[str, object] | None:
    if q is None:
        return None
    return {"epoch": q.epoch, "start": q.start, "end": q.end, "reason": q.reason,
            "repairSent": q.repair_sent}
