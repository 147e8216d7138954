"""Shared pieces of the simulator: violations, the fault schedule, quiet logging, bug switches."""

from __future__ import annotations

import contextlib
import logging
import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from autoswitch.controller.failover.liveness import HeartbeatTable, NodeOpinion, Opinion

from autoswitch.base.log import silenced

# Planted bugs (docs/design.md lists the failures they re-introduce). They exist ONLY here:
# each is a subclass/wrapper of a production core built inside tests/sim.
BUGS = (
    "no_union_sss",            # acks count only the old SyncStateSet while a change is in flight (#5663)
    "elect_outside_sss",       # election ranks every alive replica, ignoring the SyncStateSet
    "skip_handshake_truncation",  # slave keeps its divergent tail after the handshake
    "drop_zero_msg_epochs",    # slave records only the header's epoch, not zero-message epochs before it
    "no_self_fencing",         # master ignores its lease (RocketMQ #7017, #6662)
    "vote_not_persisted",      # Raft driver replies to a vote before the vote is durable
    "lease_hold_from_first_report",  # a controller's grant hold runs from its FIRST DEAD report only
    "handover_without_cas",    # the controller applies a handover with no compare-and-set or SyncStateSet check
    "fast_path_any_ack_mode",  # crash-fast failover also for a group whose acks do not need every SSS member
    "membership_no_pacing",    # the leader changes voters again right after the previous change committed
    "membership_grant_unapplied",  # a controller grants under a configuration it has appended, not applied
    "store_no_fence",          # a store backend commits a paused leader's write after its lock expired
    "unstated_ack_mode",       # brokers do not state their ack mode: an admin election deposes a live quorum-mode master
    "unstated_min_isr",        # brokers do not state their min_in_sync_replicas (the controllers' runtime value decides)
    "wiped_member_votes",      # a controller on an empty data directory votes and campaigns at once
    "sql_fence_first",         # a SQL store write checks the lock first and commits whenever it resumes
    "ignore_clock_gap",        # a broker ignores that its monotonic clock stood still (VM pause, suspend)
    "report_restart_clean",    # a broker that crashed (power cut, async flush) reports an intact log
    "resume_epoch_after_unclean",  # a master resumes its MasterEpoch after an unclean restart
    "accept_second_incarnation",   # controllers and masters accept a second process of a brokerId
    "lower_timeout_below_floor",   # heartbeat_timeout_ms may be lowered below what brokers' leases assume
    "learner_may_lead",        # a Raft follower takes leader messages from a learner of its configuration
    "no_term_rise_budget",     # Raft terms may rise by up to 2^20 per message, with no budget per peer and window
    "lease_grant_catching_up",  # the lease rule's third test dropped: a controller catching up after losing its log grants
    "no_listen_afresh_after_catch_up",  # a controller that caught up after losing its log grants at once (no hold)
    "sync_counts_later_appends",  # the store's group commit counts bytes appended after its fsync began
    "fsync_error_ignored",     # the store takes a failed fsync (EIO) for a good one
)
PHASE_A_BUGS = {"vote_not_persisted", "wiped_member_votes", "learner_may_lead", "no_term_rise_budget"}


class NoTimeoutCheckTable(HeartbeatTable):
    """BUG lower_timeout_below_floor (with the lease simulator's rule "timeout_floor" off): the
    controllers grant leases sized for a longer heartbeat timeout than theirs."""

    def lease_refusal(self, broker_name, broker_id, broker_epoch, applied_master_epoch, now_ms):
        why = super().lease_refusal(broker_name, broker_id, broker_epoch, applied_master_epoch, now_ms)
        if why == "timeout":
            return "hold" if self._holding((broker_name, broker_id), now_ms) else None
        return why


class Violation(AssertionError):
    def __init__(self, kind: str, detail: str, t: int) -> None:
        super().__init__(f"[{kind}] t={t}ms {detail}")
        self.kind = kind
        self.detail = detail
        self.t = t


@dataclass
class Stats:
    virtual_ms: int = 0
    messages: int = 0
    dropped: int = 0
    duplicated: int = 0
    crashes: int = 0
    torn: int = 0
    partitions: int = 0
    proposals: int = 0
    applied: int = 0
    leaders: int = 0
    elections: int = 0          # MasterEpoch changes seen
    acked: int = 0
    consumed: int = 0
    truncations: int = 0
    digests_verified: int = 0
    acked_checked: int = 0      # (acked message, later master) pairs verified
    handovers: int = 0          # handover requests a master sent (phase B, handovers=True)
    extra: dict = field(default_factory=dict)

    def add(self, other: Stats) -> None:
        for k, v in vars(other).items():
            if isinstance(v, int):
                setattr(self, k, getattr(self, k) + v)


@contextlib.contextmanager
def quiet_logs() -> Iterator[None]:
    """The cores log every rejected message; at thousands of seeds that is the whole cost (and
    the soak's stderr). Both the standard logging and the structured event logs are silenced."""
    prev = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with silenced():
            yield
    finally:
        logging.disable(prev)


@dataclass(frozen=True)
class FaultMix:
    """Probabilities per fault draw; one draw every ``every_ms`` of virtual time."""

    every_ms: int = 300
    partition: float = 0.15
    one_way: float = 0.05
    heal: float = 0.2
    crash: float = 0.12
    crash_in_persist: float = 0.05     # crash between a write and its fsync (torn tail)
    drop: float = 0.05
    dup: float = 0.03
    slow: float = 0.03
    crash_after_vote: float = 0.1      # a voter dies right after granting (and restarts at once)
    kill_new_master: float = 0.1       # a broker dies soon after taking the master role
    # the master hands over (no drain, maybe a stale epoch); 0 by default so the pinned regression
    # seeds replay unchanged; DataSim(handovers=True) and the soak turn it on
    handover: float = 0.0
    # a broker's controller sessions reset while it lives on; 0 unless DataSim(crash_fast=True)
    session_reset: float = 0.0
    # The lease hole pattern: a controller that has never heard a broker (its link from that
    # broker is cut from time 0) and heals that land exactly on the leader's scan instant.
    never_heard: float = 0.0           # chance per broker that one controller is cut from it at t=0
    heal_at_scan: float = 0.0          # share of heals moved to the next scan instant
    # power cuts (DataSim(power_loss=True)): brokers lose every byte they did not fsync
    power_cut: float = 0.0

    @staticmethod
    def draw(rng: random.Random) -> FaultMix:
        """A random fault mix: hypothesis-free seeds still cover calm and stormy runs."""
        calm = rng.random() < 0.2
        k = 0.3 if calm else 1.0
        return FaultMix(every_ms=rng.choice((150, 300, 600)), partition=0.15 * k, one_way=0.05 * k,
                        heal=0.2, crash=0.12 * k, crash_in_persist=0.05 * k, drop=rng.choice((0, 0.02, 0.1)) * k,
                        dup=rng.choice((0, 0.03)) * k, slow=rng.choice((0, 0.03)) * k,
                        crash_after_vote=rng.choice((0, 0.1, 0.3)) * k,
                        kill_new_master=rng.choice((0, 0.2, 0.5)) * k,
                        never_heard=rng.choice((0, 0.3, 0.6)), heal_at_scan=rng.choice((0, 0.5, 1.0)))


class HoldFromFirstReportTable(HeartbeatTable):
    """BUG lease_hold_from_first_report: the grant hold starts at a node's first DEAD report and
    is not restarted by later ones, and applying any new MasterEpoch ends every hold of the group.
    A controller that never heard the master then grants a lease in the instant it votes it DEAD
    for the second time (its hold, counted from the first vote, is over)."""

    def report_opinion(self, broker_name: str, broker_id: int, now_ms: int) -> NodeOpinion:
        op = self.opinion(broker_name, broker_id, now_ms)
        key = (broker_name, broker_id)
        if op.opinion is Opinion.DEAD and key not in self._holds:
            if self.on_hold is not None:
                self.on_hold(key)
            self._hold(key, now_ms)
        return op

    def release(self, broker_name: str, broker_ids: Iterable[int] | None = None,
                master_id: int | None = None) -> None:
        super().release(broker_name, broker_ids, None)
