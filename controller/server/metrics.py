"""Prometheus metrics of a controller node (autoswitch/base/observe.py serves them).

Counters are kept where events happen (heartbeats, applied elections, proposals, session ends);
everything the node already knows (Raft term and indexes, role, groups, open sessions, what it
hears) is read at scrape time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec
from prometheus_client import CollectorRegistry, Counter, Histogram

from autoswitch.base.observe import FnCollector

if TYPE_CHECKING:
    from autoswitch.controller.server.node_api import ObservedNode
    from autoswitch.controller.state.history import HistoryRecord

PROPOSAL_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
MAX_GROUPS_SCANNED = 100_000     # the per-scrape walk over groups is bounded
MAX_DECISION_LABELS = 64         # label sets of the decisions counter kept at hand


class _Tally(msgspec.Struct, frozen=True):
    """What the decisions counter needs of a decision record (explain.Decision): decoding only
    these fields skips the candidates, which are most of the record, on every applied entry."""

    outcome: str
    zones_lost: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


_TALLY = msgspec.json.Decoder(_Tally)


class ControllerMetrics:
    def __init__(self, node: ObservedNode) -> None:
        self.node = node
        self.registry = CollectorRegistry(auto_describe=False)
        r = self.registry
        self.heartbeats = Counter("autoswitch_controller_heartbeats", "Broker heartbeats received", registry=r)
        self.elections = Counter("autoswitch_controller_elections", "MasterEpoch changes applied on this node, by "
                                 "trigger (controller, broker, admin, handover) and kind", ["trigger", "kind"],
                                 registry=r)
        self.decisions = Counter("autoswitch_controller_decisions", "Elections and SyncStateSet changes applied on "
                                 "this node, by their decision record (admin explain): outcome, whether a whole zone "
                                 "was lost, whether it warned of a promise it cannot keep (min_in_sync_zones)",
                                 ["outcome", "zone_lost", "warned"], registry=r)
        self.proposals = Histogram("autoswitch_controller_proposal_seconds", "Proposal to applied reply (leader)",
                                   buckets=PROPOSAL_BUCKETS, registry=r)
        self.session_ends = Counter("autoswitch_controller_broker_sessions_closed", "BrokerSession streams that "
                                    "ended, by whether the end counted as a crash", ["crashed"], registry=r)
        self.leader_changes = Counter("autoswitch_controller_leader_changes", "Raft leader changes seen", registry=r)
        self.status_requests = Counter("autoswitch_controller_status_requests", "/status.json requests answered",
                                       registry=r)
        r.register(FnCollector(self._gauges))
        self._last_leader: str | None = None
        self._decision_index = 0
        self._decision_counts: dict[tuple[str, bool, bool], Any] = {}   # labels -> the counter's child

    def on_history_record(self, rec: HistoryRecord) -> None:
        if rec.event in ("ElectMaster", "NoMaster"):
            kind = ("no_master" if rec.event == "NoMaster" else "crash" if rec.crash
                    else "unclean" if rec.unclean else "clean")
            self.elections.labels(rec.trigger or "unknown", kind).inc()
        if rec.decision and rec.index != self._decision_index:    # one entry's events share its decision
            self._decision_index = rec.index
            try:
                d = _TALLY.decode(rec.decision)
            except ValueError:      # msgspec's errors are ValueErrors: a record from a newer release
                return
            key = (d.outcome, bool(d.zones_lost), bool(d.warnings))
            child = self._decision_counts.get(key)
            if child is None:
                child = self.decisions.labels(key[0], str(key[1]).lower(), str(key[2]).lower())
                if len(self._decision_counts) < MAX_DECISION_LABELS:
                    self._decision_counts[key] = child
            child.inc()

    def _gauges(self) -> Iterator[tuple[str, str, dict[str, str], float]]:
        node = self.node
        md = node.metadata()
        leader = md["leader_id"] or None
        if leader != self._last_leader:
            if leader is not None:
                self.leader_changes.inc()
            self._last_leader = leader
        yield "autoswitch_controller_raft_term", "Raft term", {}, md["term"]
        yield "autoswitch_controller_raft_commit_index", "Raft commit index", {}, md["commit"]
        yield "autoswitch_controller_raft_applied_index", "Raft applied index", {}, md["applied"]
        yield "autoswitch_controller_raft_last_index", "Raft last log index", {}, md["last_index"]
        yield "autoswitch_controller_is_leader", "1 on the Raft leader", {}, 1 if md["is_leader"] else 0
        yield "autoswitch_controller_groups", "Broker groups in the state machine", {}, md["groups"]
        roles = [role for _n, _a, _r, role in md["peers"]]
        yield "autoswitch_controller_members", "Controller members in force here, by role", {"role": "voter"}, \
            roles.count("voter")
        yield "autoswitch_controller_members", "Controller members in force here, by role", {"role": "learner"}, \
            roles.count("learner")
        yield "autoswitch_controller_is_voter", "1 while this node is a voter", {}, 1 if node.membership.is_voter else 0
        yield ("autoswitch_controller_in_maintenance", "1 while this member is in maintenance (never campaigns)", {},
               1 if md.get("maintenance") else 0)
        check = node.state_check
        if check is not None:
            yield ("autoswitch_controller_state_corrupt", "1 once the state hash check found this member's state "
                   "differs from the majority's (it no longer votes, leads or answers reads)", {},
                   1 if check.corrupt else 0)
            yield ("autoswitch_controller_state_checks_total", "State hash comparisons this member made", {},
                   check.checked)
            yield ("autoswitch_controller_state_check_mismatches_total", "State hash comparisons where a member "
                   "differed (each one an alarm)", {}, check.mismatches)
        yield ("autoswitch_controller_broker_sessions_open", "BrokerSession streams held on this node", {},
               node.open_sessions)
        if not node.wired:
            return
        refs = node.sm.masters_refs()
        yield ("autoswitch_controller_groups_without_master", "Groups with no master", {},
               max(0, md["groups"] - len(refs)))
        now = node.liveness.now_ms()
        counts = {"alive": 0, "silent": 0, "crashed": 0}
        for ref in refs[:MAX_GROUPS_SCANNED]:
            if node.liveness.heartbeats.crashed(ref.broker_name, ref.master_broker_id, now):
                counts["crashed"] += 1
            elif node.liveness.heartbeats.alive(ref.broker_name, ref.master_broker_id, now):
                counts["alive"] += 1
            else:
                counts["silent"] += 1
        for state, n in counts.items():
            yield ("autoswitch_controller_masters_heard", "Masters as this node hears them (its own opinion)",
                   {"state": state}, n)
        yield from self._replica_health(node, now)

    def _replica_health(self, node: ObservedNode, now: int) -> Iterator[tuple[str, str, dict[str, str], float]]:
        """Each replica heard alive: degraded / diverged as its heartbeats report them, and the
        health figures (broker/health.py), so a slow replica shows before anything moves."""
        table = node.liveness.heartbeats
        zones: dict[tuple[str, str], int] = {}
        for g, master, _epoch, _addr, _sss, ids in node.sm.groups_members()[:MAX_GROUPS_SCANNED]:
            for b in sorted(node.sm.maintenance(g)):
                yield ("autoswitch_controller_replica_maintenance", "1 for each replica in maintenance (cordoned)",
                       {"group": g, "broker": str(b), "role": "master" if b == master else "slave"}, 1)
            for b in ids:
                r = table.report(g, b)
                alive = table.alive(g, b, now)
                if r is not None and r.zone:
                    key = (r.zone, "alive" if alive else "silent")
                    zones[key] = zones.get(key, 0) + 1
                if r is None or not alive:
                    continue
                labels = {"group": g, "broker": str(b), "role": "master" if b == master else "slave"}
                yield ("autoswitch_controller_replica_degraded", "1 while the replica reports a slow disk or "
                       "event loop (its heartbeats)", labels, 1 if r.degraded else 0)
                yield ("autoswitch_controller_replica_diverged", "1 while the replica's range digests found bytes "
                       "that differ from its master's", labels, 1 if r.diverged else 0)
                if r.health is None:
                    continue
                for signal, v in (("append", r.health.append_ms), ("fsync", r.health.fsync_ms),
                                  ("loop_lag", r.health.loop_lag_ms)):
                    if v >= 0:
                        yield ("autoswitch_controller_replica_health_ms", "The replica's last health window: "
                               "median append or fsync time, event-loop lag (ms)", {**labels, "signal": signal}, v)
        for (zone, state), n in sorted(zones.items()):
            yield ("autoswitch_controller_zone_replicas", "Replicas by the zone their heartbeats state, as this node "
                   "hears them (a zone with none alive is lost)", {"zone": zone, "state": state}, n)

