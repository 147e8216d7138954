"""The liveness desk of a controller node: what this node hears of the brokers and what it
concludes with its peers.

It receives heartbeats (typed: the servicer translates the protobuf), session opens and closes,
and answers: may this reply count towards the broker's master lease; is this process of a
brokerId the one the controllers registered (or a copy, refused); which members are alive, dead,
or dead only on crash evidence, by a voter majority (QueryLiveness to the peers: Sentinel's
is-master-down-by-addr). The decisions are the pure HeartbeatTable's (controller/failover/liveness.py) and
MembershipView's; this module feeds them and asks the peers. It also keeps the last_dead_report
marker that makes a DEAD report's lease hold survive a restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from autoswitch.controller import messages as msgs
from autoswitch.controller.api import BrokerReport, Heartbeat
from autoswitch.controller.codes import Code
from autoswitch.controller.failover.lease import LeaseFacts, lease_verdict
from autoswitch.controller.failover.liveness import (
    MAX_ASSUMED_TIMEOUT_MS,
    NEVER_REPORTED,
    HeartbeatTable,
    LivenessView,
    NodeOpinion,
)
from autoswitch.controller.failover.takeover import RegistrationFacts, registration_verdict
from autoswitch.controller.server import sm_adapter
from autoswitch.controller.server.service_common import NodeReply
from autoswitch.controller.state.history import HistoryRecord

from autoswitch.base.fsutil import write_atomic
from autoswitch.base.limits import MAX_INCARNATION_LEN
from autoswitch.base.log import EventLogger, RateLimitedLog

if TYPE_CHECKING:
    from autoswitch.controller.consensus import Consensus
    from autoswitch.controller.failover.peers import PeerLiveness
    from autoswitch.controller.server.alerts import Alerter
    from autoswitch.controller.server.membership_ops import MembershipView
    from autoswitch.controller.server.metrics import ControllerMetrics

# How far ahead of now the last_dead_report file is written (DeadReportMarker.persist).
MARKER_AHEAD_MS = 1000


class DeadReportMarker:
    """The data dir's last_dead_report file: a wall time no older than this node's last DEAD
    report (or "never" in a new data dir), so a restarted node holds lease grants as long as a
    report it made before the restart may still stand."""

    def __init__(self, data_dir: Path, log: EventLogger) -> None:
        self.data_dir = data_dir
        self.path = data_dir / "last_dead_report"
        self.log = log
        self.covers_ms = 0      # the wall time the file already covers

    def prior_age_ms(self) -> int | None:
        """Wall-clock age of the last DEAD report, NEVER_REPORTED, or None (hold a full hold_ms)
        when it cannot be known: a data dir from before the marker existed, an unreadable or
        corrupt marker, a wall clock that went back. Call before anything else writes the dir."""
        try:
            raw = self.path.read_text().strip()
        except FileNotFoundError:
            if any(self.data_dir.iterdir()):
                return None
            write_atomic(self.path, b"never")     # a new data dir: this node has reported nothing
            return NEVER_REPORTED
        except OSError:
            self.log.error("dead_report_marker_unreadable", exc_info=True, path=str(self.path))
            return None
        if raw == "never":
            return NEVER_REPORTED
        try:
            recorded = int(raw)
        except ValueError:
            self.log.error("dead_report_marker_corrupt", path=str(self.path), content=raw[:64])
            return None
        self.covers_ms = recorded
        age = sm_adapter.wall_ms() - recorded
        return age if age >= 0 else None

    def persist(self, key: tuple[str, int]) -> None:
        """Before a DEAD report leaves this node: a wall time not older than it, durably. The file
        records now + 1 s, so reports in the next second need no write (a mass outage costs one
        fsync a second, not one per broker) at the price of <= 1 s more pause after a restart.
        A failure raises, and the report is not made."""
        now = sm_adapter.wall_ms()
        if now <= self.covers_ms:
            return
        value = now + MARKER_AHEAD_MS
        write_atomic(self.path, str(value).encode())
        self.covers_ms = value
        self.log.info("dead_report_recorded", group=key[0], brokerId=key[1], until_wall_ms=value)


class LivenessDesk:
    """Heartbeats, sessions, incarnations and majority liveness verdicts of one controller node."""

    def __init__(self, node_id: str, heartbeats: HeartbeatTable, *, sm: sm_adapter.AppliedStateMachine,
                 consensus: Consensus, membership: MembershipView, peers: PeerLiveness,
                 metrics: ControllerMetrics, alerter: Alerter, clock: Callable[[], float],
                 peer_query_timeout_s: float, log: EventLogger,
                 on_master_crashed: Callable[[str, int, int], None]) -> None:
        self.node_id = node_id
        self.heartbeats = heartbeats
        self.sm = sm
        self.consensus = consensus
        self.membership = membership
        self.peers = peers
        self.metrics = metrics
        self.alerter = alerter
        self.clock = clock
        self.peer_query_timeout_s = peer_query_timeout_s
        self.log = log
        self.refusal_log = RateLimitedLog(log)
        self._regressions = RateLimitedLog(log, 30.0)     # replica_log_regressed, per broker
        self.on_master_crashed = on_master_crashed
        self.longest_stated_timeout_ms = 0     # the longest heartbeat timeout a broker stated here

    def now_ms(self) -> int:
        return int(self.clock() * 1000)

    @property
    def is_leader(self) -> bool:
        return bool(self.consensus.is_leader)

    def sync_config(self) -> None:
        """The timeout (and the lease hold derived from it) follow the replicated config."""
        t = self.sm.heartbeat_timeout_ms()
        if t != self.heartbeats.timeout_ms:
            self.heartbeats.timeout_ms = t
            self.heartbeats.hold_ms = 3 * t

    def voter_change_gap_ms(self) -> int:
        """How long a voter change waits after the previous one committed (membership_ops): until
        leases counted under the configuration before it have run out. A lease is shorter than
        the heartbeat timeout it was sized for (the broker's own, when it states one), and on this
        node's clock that covers the drift."""
        return max(self.sm.heartbeat_timeout_ms(), self.longest_stated_timeout_ms)

    def became_voter(self) -> None:
        """This node has just become a voter: it starts listening now (brokers heartbeat a
        controller only once they know it: its "never heard" must not count as DEAD) and grants
        no lease for a hold (an election decided without its opinion may still be committing)."""
        now = self.now_ms()
        self.heartbeats.listen_afresh(now)
        self.log.info("controller_became_voter", listening_from_ms=now, no_grants_ms=self.heartbeats.hold_ms)

    def caught_up_from_empty(self) -> None:
        """This node started without its log (a wiped or replaced disk, a new member) and has now
        caught up. Its DEAD reports from before the loss went with the disk (the marker that makes
        a hold outlive a restart included), and an election built on one may still be
        committing: it grants no lease for a hold from now, as a restart with an unknown marker
        does (found by the lease simulator's wiped nodes)."""
        now = self.now_ms()
        self.heartbeats.listen_afresh(now)
        self.log.info("controller_caught_up_listening_afresh", listening_from_ms=now,
                      no_grants_ms=self.heartbeats.hold_ms)

    # ------------------------------------------------------------------ heartbeats

    def record_heartbeat(self, hb: Heartbeat) -> bool:
        """Store the heartbeat; returns whether this reply may count towards the broker's master lease."""
        self.metrics.heartbeats.inc()
        r, g = hb.report, hb.group
        if r.assumed_timeout_ms > self.longest_stated_timeout_ms:
            self.longest_stated_timeout_ms = r.assumed_timeout_ms
        self.sync_config()
        now = self.now_ms()
        if hb.stopping:
            # a clean stop's farewell (the broker serves nothing any more): forget that process,
            # never another incarnation that is alive
            if self.heartbeats.live_incarnation(g, r.broker_id, now) in ("", r.incarnation):
                self.heartbeats.note_sign(g, r.broker_id, now)
                self.heartbeats.forget(g, [r.broker_id])
                self.log.info("broker_stopped", group=g, brokerId=r.broker_id,
                              incarnation=r.incarnation[:MAX_INCARNATION_LEN])
            return False
        self.check_incarnation(g, r.broker_id, r.incarnation, "BrokerHeartbeat")
        if r.clean_shutdown and self.heartbeats.regressed(g, r):
            mark = self.heartbeats.durable_mark(g, r.broker_id)
            self._regressions.warning((g, r.broker_id), "replica_log_regressed", group=g, brokerId=r.broker_id,
                                      epoch=r.epoch, maxOffset=r.max_offset, durableMark=list(mark or ()),
                                      note="its log is below what it stated it held durably: not a clean candidate "
                                           "until it is past that point again")
            if self.is_leader:
                self.alerter.emit_once("log_regressed", g, r.epoch, sm_adapter.wall_ms(), brokerId=r.broker_id,
                                       maxOffset=r.max_offset, durableMark=list(mark or ()))
        if not self.heartbeats.record(g, r, now):
            raise NodeReply(Code.CONTROLLER_OVERLOADED, "heartbeat table full")
        epoch, master = self.sm.master_of(g)
        configured = self.sm.min_in_sync_replicas()
        leader = self.is_leader
        if r.min_in_sync_replicas and r.min_in_sync_replicas != configured and leader:
            self.alerter.emit_once("settings_mismatch", g, epoch, sm_adapter.wall_ms(), brokerId=r.broker_id,
                                   key="min_in_sync_replicas", broker=r.min_in_sync_replicas, controllers=configured,
                                   note="the smaller one decides which replicas stay electable")
        registered = self.sm.registered_incarnation(g, r.broker_id)
        verdict = lease_verdict(hb, LeaseFacts(
            self_id=self.node_id, table_refusal=self.heartbeats.lease_refusal(g, r.broker_id, r.epoch, epoch, now),
            registered_incarnation=registered,
            catching_up=self.consensus.catching_up, applied_conf=self.consensus.applied_conf(),
            master_epoch=epoch, master_id=master or 0, is_leader=leader, timeout_ms=self.heartbeats.timeout_ms))
        for alert in verdict.alerts:
            self.alerter.emit_once(alert.kind, g, epoch, sm_adapter.wall_ms(), **alert.fields)
        if verdict.refusal == "not_registered_process":
            self.refusal_log.warning((g, r.broker_id), "broker_not_registered_process", group=g,
                                     brokerId=r.broker_id,
                                     registered=registered[:MAX_INCARNATION_LEN],
                                     heard=r.incarnation[:MAX_INCARNATION_LEN], note="no lease grant until it registers")
        return verdict.granted

    def max_assumed_timeout_ms(self) -> int:
        """The longest timeout a broker heard here sized its lease for (QueryLiveness answers it)."""
        return self.heartbeats.max_assumed_timeout_ms(self.now_ms())

    async def broker_timeout_floor(self) -> int:
        """The least heartbeat_timeout_ms the brokers' leases allow: the longest timeout any broker
        heard by a controller sized its lease for, from this node and its peers, a voter majority
        answering. Not this node's table alone: a master heard by the others but not by the
        leader would be left out, and its lease could outlive a successor's election."""
        floors = {self.node_id: self.max_assumed_timeout_ms()}
        peers = await self.peers.timeout_floors(self.peer_query_timeout_s, MAX_ASSUMED_TIMEOUT_MS)
        floors.update((n, f) for n, f in peers.items() if n in self.membership.voter_ids)
        voters = self.membership.voter_ids
        if sum(1 for n in floors if n in voters) < len(voters) // 2 + 1:
            raise NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE,
                            f"heartbeat_timeout_ms cannot be lowered now: only {sorted(floors)} of the voters "
                            f"{sorted(voters)} told the timeouts their brokers' leases assume (a majority must)")
        return max(floors.values())

    def live_report(self, group: str, broker_id: int) -> BrokerReport | None:
        """The broker's last report here while it counts as alive here, else None."""
        now = self.now_ms()
        return self.heartbeats.report(group, broker_id) if self.heartbeats.alive(group, broker_id, now) else None

    def stated_min_in_sync(self, group: str, broker_id: int) -> int:
        """The min_in_sync_replicas the broker stated in its last heartbeat here (0: none)."""
        r = self.heartbeats.report(group, broker_id)
        return r.min_in_sync_replicas if r is not None else 0

    # ------------------------------------------------------------------ processes of a brokerId

    def check_incarnation(self, group: str, broker_id: int, incarnation: str, call: str) -> None:
        """NodeReply(CONTROLLER_BROKER_INCARNATION_CONFLICT) when another process of this
        brokerId is alive here (a cloned or copied data directory started beside the original):
        a heartbeat's or a session's check (a registration's is check_registration)."""
        live = self.heartbeats.live_incarnation(group, broker_id, self.now_ms())
        if not live or not incarnation or live == incarnation:
            return
        self.refusal_log.warning((group, broker_id), "broker_incarnation_conflict", group=group, brokerId=broker_id,
                                 call=call, live=live[:MAX_INCARNATION_LEN], refused=incarnation[:MAX_INCARNATION_LEN])
        raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                        f"brokerId {broker_id} of {group} is alive in another process (incarnation {live[:16]}); "
                        f"a second process with the same identity (a copied data directory?) is refused")

    def _registration_facts(self, req: msgs.RegisterBrokerRequest,
                            dead_by_majority: bool | None = None) -> RegistrationFacts:
        g, b = req.broker_name, req.broker_id
        now = self.now_ms()
        return RegistrationFacts(
            incarnation=req.incarnation, previous=req.previous_incarnation, clean_shutdown=req.clean_shutdown,
            live=self.heartbeats.live_incarnation(g, b, now), registered=self.sm.registered_incarnation(g, b),
            takeover_wait_ms=self.heartbeats.takeover_wait_ms(g, b, now), dead_by_majority=dead_by_majority)

    def registration_refused(self, req: msgs.RegisterBrokerRequest) -> bool:
        """The batched path sends this registration alone (to check_registration): another
        process of the id is alive here, or it would take the id over."""
        v = registration_verdict(self._registration_facts(req))
        return v.refusal is not None or v.takes_over

    async def check_registration(self, req: msgs.RegisterBrokerRequest) -> None:
        """NodeReply(CONTROLLER_BROKER_INCARNATION_CONFLICT) unless the one registration rule
        (controller/failover/takeover.py) accepts it; the controller majority is asked only when
        the rule needs it."""
        g, b = req.broker_name, req.broker_id
        facts = self._registration_facts(req)
        v = registration_verdict(facts)
        if v.ask_majority:
            facts = replace(facts, dead_by_majority=(await self.view([(g, b)])).is_dead(g, b))
            v = registration_verdict(facts)
        if v.refusal is None:
            return
        live, registered = facts.live[:MAX_INCARNATION_LEN], facts.registered[:MAX_INCARNATION_LEN]
        refused = req.incarnation[:MAX_INCARNATION_LEN]
        if v.mark_unclean and self.heartbeats.mark_unclean(g, b):
            self.log.warning("stale_incarnation_marked_unclean", group=g, brokerId=b, live=live, refused=refused)
        if v.refusal == "incarnation_conflict":
            self.refusal_log.warning((g, b), "broker_incarnation_conflict", group=g, brokerId=b, call="RegisterBroker",
                                     live=live, refused=refused)
            raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                            f"brokerId {b} of {g} is alive in another process (incarnation {live[:16]}); "
                            f"a second process with the same identity (a copied data directory?) is refused")
        if v.refusal == "takeover_waits":
            self.refusal_log.warning((g, b), "broker_takeover_waits", group=g, brokerId=b, registered=registered,
                                     refused=refused, waitMs=facts.takeover_wait_ms)
            raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                            f"brokerId {b} of {g} was last run by incarnation {registered[:16]}, which this process "
                            f"does not follow (a copied or restored directory?); it may take the id over "
                            f"{facts.takeover_wait_ms} ms from now if that process does not come back first")
        self.refusal_log.warning((g, b), "broker_takeover_not_agreed", group=g, brokerId=b,
                                 registered=registered, refused=refused)
        raise NodeReply(Code.CONTROLLER_BROKER_INCARNATION_CONFLICT,
                        f"brokerId {b} of {g} is registered for incarnation {registered[:16]}, which a controller "
                        f"majority does not hold dead; a process that does not follow it cannot take the id over")

    # ------------------------------------------------------------------ sessions

    def session_opened(self, group: str, broker_id: int, ack_mode: str, incarnation: str = "") -> bool:
        """A broker's session stream started (crash-fast failover); False when the table is full."""
        ok = self.heartbeats.session_opened(group, broker_id, ack_mode, incarnation)
        self.log.info("broker_session_opened", group=group, brokerId=broker_id, ackMode=ack_mode, tracked=ok)
        return ok

    def session_closed(self, group: str, broker_id: int) -> None:
        """A session ended. If that makes the group's master count as crashed, on_master_crashed
        (the leader's scanner scans at once)."""
        self.sync_config()
        crashed = self.heartbeats.session_closed(group, broker_id, self.now_ms())
        self.metrics.session_ends.labels("true" if crashed else "false").inc()
        epoch, master = self.sm.master_of(group)
        is_master = master == broker_id
        self.log.info("broker_session_closed", group=group, brokerId=broker_id, epoch=epoch, crashed=crashed,
                      master=is_master)
        if crashed and is_master:
            self.on_master_crashed(group, broker_id, epoch)

    def crashed_master(self) -> bool:
        """Does this node count some group's master as crashed (a closed session) right now?"""
        now = self.now_ms()
        return any(self.heartbeats.crashed(m.broker_name, m.master_broker_id, now) for m in self.sm.masters_refs())

    # ------------------------------------------------------------------ verdicts

    def local_opinions(self, keys: list[tuple[str, int]]) -> list[NodeOpinion]:
        """This node's answer to a leader asking (a DEAD answer starts a lease hold)."""
        self.sync_config()
        now = self.now_ms()
        return [self.heartbeats.report_opinion(g, b, now) for g, b in keys]

    def member_view(self, g: str, b: int) -> tuple[bool, int, Any]:
        """Read-side view of one replica for GetSyncStateData: this node's own opinion, no hold."""
        now = self.now_ms()
        return (self.heartbeats.alive(g, b, now), self.heartbeats.last_heard_ms_ago(g, b, now),
                self.heartbeats.report(g, b))

    async def view(self, keys: list[tuple[str, int]]) -> LivenessView:
        """Majority verdicts for ``keys``: this node's opinion plus every peer that answers in time."""
        voters = self.membership.voter_ids
        if not keys:
            return LivenessView(len(voters), {})
        mine = dict(zip(keys, self.local_opinions(keys), strict=True))
        peer_ops = await self.peers.query(keys, self.peer_query_timeout_s)
        by_node = {self.node_id: mine}
        for nid, ops in peer_ops.items():
            by_node[nid] = dict(zip(keys, ops, strict=True))
        return LivenessView.from_opinions(len(voters), {n: o for n, o in by_node.items() if n in voters})

    async def evidence(self, group: str, broker_ids: list[int], *,
                       heard_by_any: bool = False) -> tuple[dict[int, Any], set[int], set[int]]:
        """(brokerId -> last report for members that count as alive, members a majority holds dead,
        those of them held dead only on crash evidence: closed sessions, not the timeout).

        Heard by this node within the timeout -> alive with this node's report (an asymmetric
        partition only ever makes a node miss heartbeats, never invent them; this saves a peer
        round on the hot AlterSyncStateSet path). Otherwise ask the peers: alive only if a
        majority says ALIVE, dead only if a majority says DEAD, else neither.

        ``heard_by_any``: alive when any voter heard it within the timeout, by the same argument
        as this node's own hearing. For a SyncStateSet change and a clean-up, not an election (an
        electable master must be heard by a majority, which its lease needs): a broker whose
        heartbeats reach only some controllers (apache/rocketmq #10812: after a disaster-recovery
        move its list names only followers) still joins the set its master proposes.
        """
        self.sync_config()
        now = self.now_ms()
        alive: dict[int, Any] = {}
        unsure = []
        for b in broker_ids:
            if self.heartbeats.alive(group, b, now):
                alive[b] = self.heartbeats.report(group, b)
            else:
                unsure.append((group, b))
        dead: set[int] = set()
        crashed: set[int] = set()
        if unsure:
            v = await self.view(unsure)
            for _g, b in unsure:
                verdict = v.verdicts.get((group, b))
                if verdict is not None and (verdict.alive or (heard_by_any and verdict.alive_votes > 0)):
                    alive[b] = verdict.report
                elif verdict is not None and verdict.dead:
                    dead.add(b)
                    if not verdict.dead_by_timeout:
                        crashed.add(b)
        return alive, dead, crashed

    def heard_all(self, group: str, broker_ids: list[int] | tuple[int, ...]) -> bool:
        """Has this node itself heard every one of ``broker_ids`` within the timeout? Then
        ``evidence`` would count them all alive without asking the peers."""
        self.sync_config()
        now = self.now_ms()
        alive = self.heartbeats.alive
        return all(alive(group, b, now) for b in broker_ids)

    # ------------------------------------------------------------------ applied history

    def group_imported(self, rec: HistoryRecord) -> None:
        """An ImportGroup record applied here: its brokers get a whole timeout of listening
        before any of them is DEAD by the timeout (HeartbeatTable.listen_to_group_from)."""
        self.heartbeats.listen_to_group_from(rec.group, self.now_ms())

    def election_applied(self, rec: HistoryRecord) -> None:
        """An ElectMaster record applied here: a late-committing election holds grants
        (HeartbeatTable.election_applied)."""
        if rec.master_broker_id and self.heartbeats.election_applied(
                rec.group, rec.master_broker_id, rec.ts_ms, sm_adapter.wall_ms(), self.now_ms()):
            self.refusal_log.warning(("late", rec.group), "late_election_grants_held", group=rec.group,
                                     master=rec.master_broker_id, epoch=rec.master_epoch,
                                     ageMs=sm_adapter.wall_ms() - rec.ts_ms)
