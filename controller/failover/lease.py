"""The master lease grant, pure: does this controller's reply to a broker's heartbeat count
towards the broker's master lease?

One rule, ``lease_verdict(heartbeat, facts)``, called for every heartbeat by the liveness desk
(controller/server/liveness_desk.py) and by every simulator (tests/sim), so the rule the
simulators attack is the one production runs. The caller gathers what the node knows into
``LeaseFacts``; the verdict says whether it grants, why not (the first test that refuses), and
which alerts the leader raises. docs/controller.md "Liveness and the master lease" has the
argument; the tests, in the order they are applied:

1. the process: a heartbeat from a process the applied registration does not name (another
   incarnation of the brokerId) earns no grant; the controllers do not know that process;
2. the node's table (``HeartbeatTable.lease_refusal``): a deposed MasterEpoch, the start-up
   pause, a lease sized for a longer heartbeat timeout than this node's, a DEAD report's hold;
3. the node's log: a node catching up (it started without its log: a wiped or replaced disk, a
   new member) may not have applied the newest MasterEpoch;
4. the membership (``membership_refusal``): the configuration in force applied, this node a
   voter of it, the broker counting that very configuration with a quorum that meets every
   electing majority (docs/controller.md "Controller membership").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from autoswitch.controller.api import Heartbeat
from autoswitch.controller.consensus.membership import Membership
from autoswitch.controller.raft.quorum import majority

# What Consensus.applied_conf() returns: (the applied configuration's log index, the
# configuration, whether it is the one in force, i.e. no newer one is appended).
AppliedConf = tuple[int, Membership, bool]


def lease_quorum_ok(broker_quorum: int, voters: int) -> bool:
    """May a voter grant a lease counted ``broker_quorum``-of-N by the broker? A quorum not
    stated (0) is refused (issue 30): it skipped the rule, and a broker counting a quorum of one
    could hold a lease no electing majority ever heard about. Every broker of this project states it."""
    if broker_quorum <= 0:
        return False
    return broker_quorum + majority(voters) > voters


def membership_refusal(self_id: str, broker_quorum: int, broker_conf_index: int, applied: AppliedConf) -> str | None:
    """Why node ``self_id``'s reply must not count towards a broker's master lease as far as
    membership goes, or None."""
    index, conf, in_force = applied
    if not in_force:
        return "membership_change_pending"     # appended, not applied: it may still change
    if self_id not in conf.voters:
        return "not_voter"
    if broker_conf_index != index:
        return "other_membership"              # the broker counts another configuration's voters
    if not lease_quorum_ok(broker_quorum, len(conf.voters)):
        return "lease_quorum"
    return None


@dataclass(frozen=True, slots=True)
class LeaseFacts:
    """What the node knows when a heartbeat arrives (gathered by the caller, no I/O)."""

    self_id: str
    table_refusal: str | None        # HeartbeatTable.lease_refusal for this broker, now
    registered_incarnation: str      # the process the applied registration names ("" = none)
    catching_up: bool                # the node's log may lack committed entries
    applied_conf: AppliedConf        # Consensus.applied_conf()
    master_epoch: int                # the group's applied MasterEpoch
    master_id: int                   # and its master (0: none)
    is_leader: bool                  # alerts are the leader's
    timeout_ms: int                  # this node's heartbeat timeout (named by an alert)


@dataclass(frozen=True, slots=True)
class LeaseAlert:
    kind: str
    fields: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class LeaseVerdict:
    granted: bool
    refusal: str | None = None       # the first test that refused (None: granted)
    alerts: tuple[LeaseAlert, ...] = ()


def lease_verdict(hb: Heartbeat, facts: LeaseFacts) -> LeaseVerdict:
    """The grant for one heartbeat (see the module's docstring for the four tests)."""
    r = hb.report
    alerts: list[LeaseAlert] = []
    why = facts.table_refusal
    if why == "timeout" and facts.is_leader:
        alerts.append(LeaseAlert("settings_mismatch", {
            "brokerId": r.broker_id, "key": "heartbeat_timeout_ms", "broker": r.assumed_timeout_ms,
            "controllers": facts.timeout_ms,
            "note": "no lease grant: the broker's lease was sized for a longer timeout"}))
    if why == "hold" and facts.master_id == r.broker_id and r.epoch == facts.master_epoch and facts.is_leader:
        # the current master heartbeats, but a DEAD report about it stands: it will fence itself
        alerts.append(LeaseAlert("master_lease_refused", {
            "master": facts.master_id, "reason": "a DEAD report about it holds its lease grants"}))
    registered = facts.registered_incarnation
    if registered and r.incarnation and registered != r.incarnation:
        return LeaseVerdict(False, "not_registered_process", tuple(alerts))
    if why is not None:
        return LeaseVerdict(False, why, tuple(alerts))
    if facts.catching_up:
        return LeaseVerdict(False, "catching_up", tuple(alerts))
    why = membership_refusal(facts.self_id, hb.lease_quorum, hb.controllers_index, facts.applied_conf)
    return LeaseVerdict(why is None, why, tuple(alerts))
