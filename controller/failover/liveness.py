"""Broker liveness, pure: per-node heartbeat tables, the majority rule, the scan decision.

Why one long module: a node's knowledge of its brokers (heartbeats, sessions, holds, the
process heard for each id) is one table read under one clock; its rules (alive, crashed, held,
live incarnation, takeover grace) are checked against each other, so they stay together.

* ``HeartbeatTable`` — what THIS controller node heard, by its own monotonic clock (ms). A
  broker is alive while ``last_receipt + timeout >= now`` (RocketMQ's rule, default 10 s). The
  node's *opinion* is three-valued: DEAD needs the node to have listened for a whole timeout
  (a freshly started node cannot know) — or to be holding an earlier DEAD report (below).
* ``combine`` — Sentinel's ODOWN: DEAD only when a majority of ALL controller nodes says DEAD;
  ALIVE (electable) only when a majority says ALIVE. Unanswered nodes count as neither, so one
  controller with a broken link to a healthy master causes no failover (docs/design.md §2).
* Lease grants — every DEAD report a node sends (also "never heard it") starts or restarts a
  hold: the node grants the broker no master lease (its heartbeat replies do not count towards
  the broker's lease) from that instant on, until ``hold_ms`` has passed since its LATEST DEAD
  report and it hears the broker again, or it applies a MasterEpoch in which that broker is
  no longer the master. docs/controller.md "Liveness and the master lease" has the argument.
* Sessions (crash-fast failover) — a broker holds one long-lived stream per controller node;
  when it ends (the process died, so the kernel closed its sockets), the broker counts as DEAD
  at once instead of after the timeout, but only if it said its writes wait for every
  SyncStateSet member (ack mode ``all``), and only for one timeout after the close (then the
  heartbeat rule takes over) or until it opens a new session. Such an opinion is marked
  ``crashed``; an election a majority backs only with crashed opinions is ``crash_only`` and
  may never be unclean. docs/controller.md "Crash-fast failover" has the safety argument.
* ``ScanPlanner`` — every ``scan_interval_ms`` the leader proposes controller-triggered
  elections for groups whose master a majority holds DEAD, with bounded retries.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import Enum

from autoswitch.controller.api import BrokerReport
from autoswitch.controller.messages import TRIGGER_CONTROLLER, BrokerLiveInfo, ElectMasterRequest
from autoswitch.controller.raft.quorum import majority

DEFAULT_TIMEOUT_MS = 10_000
DEFAULT_SCAN_INTERVAL_MS = 5_000
MAX_TABLE_ENTRIES = 1_000_000
MAX_ELECTIONS_PER_SCAN = 1_000

Key = tuple[str, int]   # (brokerName, brokerId)


class Opinion(Enum):
    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"


def live_info(report: BrokerReport) -> BrokerLiveInfo:
    """What an election carries of a heartbeat report (its ranges are BrokerLiveInfo's)."""
    return BrokerLiveInfo(report.broker_id, report.epoch, report.max_offset, report.confirm_offset,
                          report.election_priority, report.clean_shutdown, report.min_in_sync_replicas,
                          report.ack_mode, report.incarnation, report.diverged)


HEALTH_SIGNALS = frozenset({"append", "fsync", "loop_lag"})


def health_word(heard: bool, diverged: bool, reasons: Iterable[str]) -> str:
    """A replica's health in one word (cluster-list, the status page): ok, degraded(fsync,...),
    diverged, or unknown (no current report: dead or never heard)."""
    if not heard:
        return "unknown"
    if diverged:
        return "diverged"
    reasons = list(reasons)
    return f"degraded({','.join(reasons)})" if reasons else "ok"


# sm_config's upper bound for heartbeat_timeout_ms: a broker claiming more cannot raise the floor
# past what any config could satisfy.
MAX_ASSUMED_TIMEOUT_MS = 600_000


def cap_timeout(stated_ms: int) -> int:
    return min(stated_ms, MAX_ASSUMED_TIMEOUT_MS)


@dataclass(frozen=True)
class NodeOpinion:
    """One controller node's view of one broker (what QueryLiveness carries). ``crashed``: DEAD
    because the broker's session closed, not because the timeout passed."""

    opinion: Opinion
    last_heard_ms_ago: int = -1          # -1 = never heard
    report: BrokerReport | None = None
    crashed: bool = False


@dataclass
class _Entry:
    received_ms: int
    report: BrokerReport


@dataclass
class _Session:
    open: int = 0                  # streams open now (a reconnect may overlap the old stream's end)
    fast_ok: bool = False          # the broker's ack mode lets a close count as a crash
    closed_at: int | None = None   # when the last open stream ended (None: one is open)


# Ack modes whose broker may be failed over on a session close (docs/controller.md).
FAST_FAILOVER_ACK_MODES = frozenset({"all"})


# prior_dead_report_age_ms for a node that has never reported a broker DEAD.
NEVER_REPORTED = 1 << 62


class HeartbeatTable:
    def __init__(self, started_ms: int, timeout_ms: int = DEFAULT_TIMEOUT_MS, hold_ms: int | None = None,
                 max_entries: int = MAX_TABLE_ENTRIES, startup_grace_ms: int | None = None,
                 prior_dead_report_age_ms: int | None = None,
                 on_hold: Callable[[Key], None] | None = None) -> None:
        """Holds live in memory only, so a restarted node must not grant leases until any hold it
        may have had would be over. ``prior_dead_report_age_ms``: how long before this start (wall
        clock) this node last reported a broker DEAD, ``NEVER_REPORTED``, or None when unknown;
        the grant pause after start is then ``hold_ms - age`` (None: all of ``hold_ms``, the safe
        default). ``startup_grace_ms`` fixes the pause instead (tests). ``on_hold(key)`` runs
        before a DEAD report leaves this node, so the process can make its time durable first;
        if it raises, the report is not made."""
        assert timeout_ms > 0 and max_entries > 0 and (hold_ms is None or hold_ms > 0)
        self.started_ms = started_ms
        self.timeout_ms = timeout_ms
        self.hold_ms = hold_ms if hold_ms is not None else 3 * timeout_ms
        self.startup_grace_ms = startup_grace_ms
        self.prior_dead_report_age_ms = prior_dead_report_age_ms
        self.on_hold = on_hold
        self.max_entries = max_entries
        self._beats: dict[Key, _Entry] = {}
        # key -> until when grants are held: the latest DEAD report (or late election) + the hold_ms
        # of that moment. A running hold keeps its length when heartbeat_timeout_ms is lowered.
        self._holds: dict[Key, int] = {}
        self._sessions: dict[Key, _Session] = {}
        self.fast_failover = True            # False: session closes are ignored (timeout path only)
        self._last_sign: dict[Key, int] = {}    # key -> last heartbeat or farewell of any process of it
        # key -> the highest (last epoch, offset) the replica stated as holding durably: the
        # confirmOffset of its clean reports (durable acknowledgements fsync before they count,
        # and a clean report of an async replica is a clean stop's). A later report below it is of
        # a log that went backwards (a backup restored in place, a rolled-back disk or VM snapshot,
        # a file system that lied about fsync): never clean, whatever its marker says (issue 58,
        # item 8), until its log is past the mark again. In memory on every node: one that
        # restarts forgets, the others' reports still count (``combine``: any unclean one wins).
        self._durable: dict[Key, tuple[int, int]] = {}
        # group -> since when this node listens to it: a group taken over from another controller
        # (ImportGroup) runs brokers this node may never have heard; none of them is DEAD by the
        # timeout before a whole timeout of listening from the import (else the first scan after
        # an import deposes a master that is running, by an election that finds nobody alive)
        self._listening_since: dict[str, int] = {}

    def listen_to_group_from(self, broker_name: str, now_ms: int) -> None:
        """This node listens to ``broker_name`` from ``now_ms`` on as if it had just started."""
        if broker_name not in self._listening_since and len(self._listening_since) >= self.max_entries:
            del self._listening_since[min(self._listening_since, key=self._listening_since.__getitem__)]
        self._listening_since[broker_name] = max(now_ms, self._listening_since.get(broker_name, now_ms))

    def __len__(self) -> int:
        return len(self._beats)

    def durable_mark(self, broker_name: str, broker_id: int) -> tuple[int, int] | None:
        """(last epoch, offset): the most this replica stated it holds durably (None: nothing yet)."""
        return self._durable.get((broker_name, broker_id))

    def regressed(self, broker_name: str, report: BrokerReport) -> bool:
        """``report`` describes a log below what this replica stated it held durably."""
        mark = self._durable.get((broker_name, report.broker_id))
        return mark is not None and (report.epoch, report.max_offset) < mark

    def _note_durable(self, key: Key, report: BrokerReport) -> None:
        if not report.clean_shutdown or report.epoch <= 0:
            return
        held = (report.epoch, min(report.confirm_offset, report.max_offset))
        mark = self._durable.get(key)
        if mark is None or held > mark:
            if mark is None and len(self._durable) >= self.max_entries:
                return          # bounded; the other nodes' marks still count
            self._durable[key] = held

    def record(self, broker_name: str, report: BrokerReport, now_ms: int) -> bool:
        """Store a heartbeat received now (a report of a log below the replica's durable mark is
        stored as not clean). False (nothing stored) when the table is full."""
        key = (broker_name, report.broker_id)
        if key not in self._beats and len(self._beats) >= self.max_entries:
            return False
        if report.clean_shutdown and self.regressed(broker_name, report):
            report = replace(report, clean_shutdown=False)
        else:
            self._note_durable(key, report)
        prev = self._beats.get(key)
        # Receipt times never go backwards even if the caller's clock does.
        received = max(now_ms, prev.received_ms) if prev is not None else now_ms
        self._beats[key] = _Entry(received, report)
        self.note_sign(broker_name, report.broker_id, received)
        return True

    def note_sign(self, broker_name: str, broker_id: int, now_ms: int) -> None:
        """A heartbeat or a clean stop's farewell: the id had a process then (forget keeps this)."""
        key = (broker_name, broker_id)
        if key not in self._last_sign and len(self._last_sign) >= self.max_entries:
            del self._last_sign[min(self._last_sign, key=self._last_sign.__getitem__)]
        self._last_sign[key] = max(now_ms, self._last_sign.get(key, now_ms))

    def takeover_wait_ms(self, broker_name: str, broker_id: int, now_ms: int) -> int:
        """How long a process that does *not* follow the registered one of this id (a copied or
        restored directory) must still wait before it may register over it: two heartbeat
        timeouts after the id's last sign of life on this node, or after this node started (it
        may have missed them). The registered process restarting (a clean stop, a crash) follows
        it and registers at once, so it wins the race for its id against a copy started meanwhile."""
        grace = 2 * self.timeout_ms
        last = max(self._last_sign.get((broker_name, broker_id), self.started_ms), self.started_ms)
        return max(0, last + grace - now_ms)

    def live_incarnation(self, broker_name: str, broker_id: int, now_ms: int) -> str:
        """The incarnation of the process this node hears as that broker now ("" = none alive or
        none stated). Another incarnation is refused while this one is alive: two processes with
        one brokerId would follow the same ReplicaInfo and could both act as its master."""
        e = self._beats.get((broker_name, broker_id))
        if e is None or not self.alive(broker_name, broker_id, now_ms):
            return ""
        return e.report.incarnation

    def mark_unclean(self, broker_name: str, broker_id: int) -> bool:
        """A new process of this broker said, while this one's last heartbeat still counts as alive,
        that it restarted after a crash: that heartbeat's clean log is no longer true (the tail it
        described may be gone). Keep the entry (the id stays alive until it expires, so the new
        process cannot take over early) but never as a clean candidate. True if it changed."""
        e = self._beats.get((broker_name, broker_id))
        if e is None or not e.report.clean_shutdown:
            return False
        self._beats[(broker_name, broker_id)] = _Entry(e.received_ms, replace(e.report, clean_shutdown=False))
        return True

    def report(self, broker_name: str, broker_id: int) -> BrokerReport | None:
        e = self._beats.get((broker_name, broker_id))
        return e.report if e is not None else None

    def alive(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        e = self._beats.get((broker_name, broker_id))
        return (e is not None and e.received_ms + self.timeout_ms >= now_ms
                and not self.crashed(broker_name, broker_id, now_ms))

    # --- sessions: crash evidence ---

    def session_opened(self, broker_name: str, broker_id: int, ack_mode: str, incarnation: str = "") -> bool:
        """A broker opened its session stream to this node. False (not tracked) when full.

        An open session keeps the broker alive here. When it comes from another process than the
        one whose heartbeat the table holds (that one crashed: its sessions closed; a live one is
        refused before this), the old report must not live on under the new session: it says
        "clean, max offset N" of a process that may have lost that tail, and it would keep the new
        process's own heartbeats refused as a second incarnation. It becomes a placeholder: alive,
        not clean, no data, of no stated process (so it is no election candidate of any: the state
        machine counts only reports of the registered process, and a placeholder describes no log;
        found by the data simulator, where the unclean recovery of a whole set once ranked two
        placeholders), until the new process's first heartbeat replaces it."""
        key = (broker_name, broker_id)
        e = self._beats.get(key)
        if e is not None and incarnation and e.report.incarnation and e.report.incarnation != incarnation:
            self._beats[key] = _Entry(e.received_ms, BrokerReport(broker_id, e.report.address, clean_shutdown=False))
        s = self._sessions.get(key)
        if s is None:
            if len(self._sessions) >= self.max_entries:
                return False
            s = self._sessions[key] = _Session()
        s.open += 1
        s.fast_ok = ack_mode in FAST_FAILOVER_ACK_MODES
        s.closed_at = None
        return True

    def session_closed(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        """A session stream ended; True when it was the broker's last one and now counts as a crash."""
        s = self._sessions.get((broker_name, broker_id))
        if s is None or s.open == 0:
            return False
        s.open -= 1
        if s.open == 0:
            s.closed_at = now_ms
        return self.crashed(broker_name, broker_id, now_ms)

    def crashed(self, broker_name: str, broker_id: int, now_ms: int) -> bool:
        """Its last session closed less than one timeout ago and its ack mode allows the fast path."""
        s = self._sessions.get((broker_name, broker_id))
        return (self.fast_failover and s is not None and s.fast_ok and s.open == 0 and s.closed_at is not None
                and now_ms - s.closed_at < self.timeout_ms)

    def sessions_open(self, broker_name: str, broker_id: int) -> int:
        s = self._sessions.get((broker_name, broker_id))
        return 0 if s is None else s.open

    def max_assumed_timeout_ms(self, now_ms: int) -> int:
        """Largest heartbeat timeout any broker heard within the timeout sized its lease for: the
        replicated heartbeat_timeout_ms may not go below it (the lease argument needs it)."""
        return max((e.report.assumed_timeout_ms for e in self._beats.values()
                    if e.received_ms + self.timeout_ms >= now_ms), default=0)

    def last_heard_ms_ago(self, broker_name: str, broker_id: int, now_ms: int) -> int:
        e = self._beats.get((broker_name, broker_id))
        return -1 if e is None else max(0, now_ms - e.received_ms)

    def opinion(self, broker_name: str, broker_id: int, now_ms: int) -> NodeOpinion:
        """What this node itself sees. A hold does not make it DEAD: every DEAD report restarts
        the hold, so a held opinion would re-arm itself at every scan and a broker heard again
        would never become electable (the simulator's liveness checker found that)."""
        ago = self.last_heard_ms_ago(broker_name, broker_id, now_ms)
        rep = self.report(broker_name, broker_id)
        e = self._beats.get((broker_name, broker_id))
        heard = e is not None and e.received_ms + self.timeout_ms >= now_ms
        crashed = self.crashed(broker_name, broker_id, now_ms)
        if heard and not crashed:
            return NodeOpinion(Opinion.ALIVE, ago, rep)
        listening = max(self.started_ms, self._listening_since.get(broker_name, self.started_ms))
        if not heard and now_ms - listening >= self.timeout_ms:
            return NodeOpinion(Opinion.DEAD, ago, rep)      # the timeout: the lease argument holds
        if crashed:
            return NodeOpinion(Opinion.DEAD, ago, rep, crashed=True)   # evidence, no listening needed
        return NodeOpinion(Opinion.UNKNOWN, ago, rep)   # has not listened long enough to know

    # --- the hold behind lease grants ---

    def report_opinion(self, broker_name: str, broker_id: int, now_ms: int) -> NodeOpinion:
        """The opinion this node sends to a leader asking (is-master-down-by-addr).

        Every DEAD answer (re)starts the hold at ``now_ms``, also when the node was holding
        already: the leader may build an election on THIS answer, so the grant pause must run
        from it, not from an earlier report (a hold counted from the first report of a node
        that never heard the broker ran out one second after its last vote, while the
        election built on that vote was still committing). Grants are checked against the
        hold at the same instant, so none can follow this answer before ``hold_ms`` passes."""
        op = self.opinion(broker_name, broker_id, now_ms)
        if op.opinion is Opinion.DEAD:
            key = (broker_name, broker_id)
            if self.on_hold is not None:
                self.on_hold(key)
            self._hold(key, now_ms)
        return op

    def _hold(self, key: Key, now_ms: int) -> None:
        self._holds[key] = max(now_ms + self.hold_ms, self._holds.get(key, 0))

    def election_applied(self, broker_name: str, new_master: int, entry_ts_ms: int, wall_ms: int,
                         now_ms: int) -> bool:
        """An election was applied here. Committed late (its entry was stamped more than a
        heartbeat timeout ago by the leader's clock: a leader that appended it, lost its
        followers and was elected again when they came back), its evidence is stale: the old
        master may hold a lease granted since. Grants to the new master are held for ``hold_ms``
        from now, longer than any lease, so the old one has stopped acknowledging before the new
        one starts; the old one gets none here already (its epoch is deposed). True if held."""
        if wall_ms - entry_ts_ms <= self.timeout_ms:
            return False
        self._hold((broker_name, new_master), now_ms)
        return True

    def listen_afresh(self, now_ms: int) -> None:
        """From ``now_ms`` on this node listens as if it had just started, and grants no lease for
        a whole hold: it may have reported brokers DEAD that it no longer remembers (it became a
        voter, or caught up after losing its log)."""
        self.started_ms = now_ms
        self.startup_grace_ms = self.hold_ms

    def startup_grace(self) -> int:
        """How long after start this node grants no lease (see __init__)."""
        if self.startup_grace_ms is not None:
            return self.startup_grace_ms
        if self.prior_dead_report_age_ms is None:
            return self.hold_ms
        return max(0, self.hold_ms - self.prior_dead_report_age_ms)

    def grant_pause_left_ms(self, now_ms: int) -> int:
        """How much longer this node may refuse some broker its lease: the pause after its start,
        and the time left of its holds (a DEAD report, an election applied late, which replaying
        the log after a restart does for every master elected earlier). 0: it grants to every
        broker it hears. A rolling restart waits for 0 before it stops the next controller."""
        start = self.startup_grace() - (now_ms - self.started_ms)
        return max(0, start, *(until - now_ms for until in self._holds.values()))

    def grants_lease(self, broker_name: str, broker_id: int, broker_epoch: int, applied_master_epoch: int,
                     now_ms: int) -> bool:
        """May this node's reply to the broker's heartbeat count towards its master lease?"""
        return self.lease_refusal(broker_name, broker_id, broker_epoch, applied_master_epoch, now_ms) is None

    def lease_refusal(self, broker_name: str, broker_id: int, broker_epoch: int, applied_master_epoch: int,
                      now_ms: int) -> str | None:
        """Why this node grants no lease now ("deposed", "startup", "timeout", "hold"), or None
        when it grants."""
        if broker_epoch < applied_master_epoch:
            return "deposed"                   # a newer MasterEpoch is applied here
        if now_ms - self.started_ms < self.startup_grace():
            return "startup"                   # may have held a DEAD report before a restart
        e = self._beats.get((broker_name, broker_id))
        if e is not None and e.report.assumed_timeout_ms > self.timeout_ms:
            # Its lease was sized for a longer heartbeat timeout than this node declares a broker
            # dead after: the timeout was lowered while this broker was not heard (so the floor
            # could not count it). Found by the lease simulator's runtime timeout changes.
            return "timeout"
        return "hold" if self._holding((broker_name, broker_id), now_ms) else None

    def release(self, broker_name: str, broker_ids: Iterable[int] | None = None,
                master_id: int | None = None) -> None:
        """Call when this node applies a new MasterEpoch for the group; ``master_id`` is the
        master in it (None: no master).

        The hold on ``master_id`` itself stays: this node may lag behind the leader that asked
        it, so the epoch it just applied can be the very election that made the broker it voted
        DEAD master (the leader asked about that newer epoch). Releasing then would let it grant
        that epoch while the election built on its vote commits. Once it applies an epoch with
        another master, the deposed epoch is refused by the epoch check in ``grants_lease``."""
        keys = ([k for k in self._holds if k[0] == broker_name] if broker_ids is None
                else [(broker_name, b) for b in broker_ids])
        for k in keys:
            if master_id is None or k[1] != master_id:
                self._holds.pop(k, None)

    def _holding(self, key: Key, now_ms: int) -> bool:
        until = self._holds.get(key)
        if until is None:
            return False
        if now_ms >= until and self.alive(key[0], key[1], now_ms):
            del self._holds[key]   # long enough and the broker is back: stop holding
            return False
        return True

    # --- housekeeping ---

    def forget(self, broker_name: str, broker_ids: Iterable[int] | None = None) -> None:
        if broker_ids is None:
            for k in [k for k in self._beats if k[0] == broker_name]:
                del self._beats[k]
        else:
            for b in broker_ids:
                self._beats.pop((broker_name, b), None)
        for k in [k for k in self._sessions if k[0] == broker_name and (broker_ids is None or k[1] in broker_ids)]:
            if self._sessions[k].open == 0:
                del self._sessions[k]

    def expire(self, now_ms: int, keep_ms: int) -> int:
        """Drop entries silent for keep_ms (far beyond the timeout) to bound memory."""
        old = [k for k, e in self._beats.items() if e.received_ms + keep_ms < now_ms and k not in self._holds]
        for k in old:
            del self._beats[k]
        for k in [k for k, s in self._sessions.items() if s.open == 0 and k not in self._beats]:
            del self._sessions[k]
        return len(old)


# --------------------------------------------------------------------------- majority rule


# ``majority`` is the Raft quorum's (controller/raft/quorum.py): the liveness rule and the log
# agree on what "a majority of the controller nodes" is.


@dataclass(frozen=True)
class Verdict:
    alive: bool
    dead: bool
    alive_votes: int
    dead_votes: int
    report: BrokerReport | None   # freshest report among the ALIVE opinions
    # A majority holds it DEAD by the timeout alone (no crashed opinion needed): the lease
    # argument covers it. Otherwise a DEAD verdict rests on session closes: crash-only.
    dead_by_timeout: bool = False


def combine(n_nodes: int, opinions: Sequence[NodeOpinion]) -> Verdict:
    """Majority of ALL ``n_nodes`` controller nodes; missing answers count as UNKNOWN."""
    assert len(opinions) <= n_nodes, "more opinions than controller nodes"
    need = majority(n_nodes)
    alive = [o for o in opinions if o.opinion is Opinion.ALIVE]
    dead = sum(1 for o in opinions if o.opinion is Opinion.DEAD)
    timed_out = sum(1 for o in opinions if o.opinion is Opinion.DEAD and not o.crashed)
    with_report = [o for o in alive if o.report is not None]
    freshest = min(with_report, key=lambda o: o.last_heard_ms_ago).report if with_report else None
    if freshest is not None:
        # A node that knows more says so: a report it holds as not clean (a log below the durable
        # mark it remembers, a crash another process told it of) or diverged is not outvoted by a
        # fresher one from a node that forgot (restarted) or had not heard yet.
        unclean = any(not o.report.clean_shutdown for o in with_report if o.report is not None)
        diverged = any(o.report.diverged for o in with_report if o.report is not None)
        if (unclean and freshest.clean_shutdown) or (diverged and not freshest.diverged):
            freshest = replace(freshest, clean_shutdown=freshest.clean_shutdown and not unclean,
                               diverged=freshest.diverged or diverged)
    v = Verdict(len(alive) >= need, dead >= need, len(alive), dead, freshest, timed_out >= need)
    assert not (v.alive and v.dead)
    return v


class LivenessView:
    """Majority verdicts for some brokers, ready to fill a request (alive infos, dead ids)."""

    def __init__(self, n_nodes: int, verdicts: Mapping[Key, Verdict]) -> None:
        self.n_nodes = n_nodes
        self.verdicts = dict(verdicts)

    @classmethod
    def from_opinions(cls, n_nodes: int, by_node: Mapping[str, Mapping[Key, NodeOpinion]]) -> LivenessView:
        keys = sorted({k for ops in by_node.values() for k in ops})
        return cls(n_nodes, {k: combine(n_nodes, [ops[k] for ops in by_node.values() if k in ops]) for k in keys})

    def is_dead(self, broker_name: str, broker_id: int) -> bool:
        v = self.verdicts.get((broker_name, broker_id))
        return v is not None and v.dead

    def crash_only(self, broker_name: str, broker_id: int) -> bool:
        """DEAD by a majority, but not by the timeout alone: the election must stay clean."""
        v = self.verdicts.get((broker_name, broker_id))
        return v is not None and v.dead and not v.dead_by_timeout

    def is_alive(self, broker_name: str, broker_id: int) -> bool:
        v = self.verdicts.get((broker_name, broker_id))
        return v is not None and v.alive

    def alive_infos(self, broker_name: str) -> tuple[BrokerLiveInfo, ...]:
        out = []
        for (g, b), v in sorted(self.verdicts.items()):
            if g == broker_name and v.alive:
                # No report at all: rank it last; it can still win only if nobody else is electable.
                out.append(live_info(v.report) if v.report is not None else BrokerLiveInfo(b))
        return tuple(out)

    def alive_ids(self, broker_name: str) -> tuple[int, ...]:
        return tuple(b for (g, b), v in sorted(self.verdicts.items()) if g == broker_name and v.alive)

    def dead_ids(self, broker_name: str) -> tuple[int, ...]:
        return tuple(b for (g, b), v in sorted(self.verdicts.items()) if g == broker_name and v.dead)


# --------------------------------------------------------------------------- scan


@dataclass(frozen=True)
class MasterRef:
    cluster_name: str
    broker_name: str
    master_broker_id: int
    master_epoch: int


class ScanPlanner:
    """Decides, per scan, which controller-triggered elections the leader proposes.

    Bounded: at most ``max_per_scan`` elections per scan and ``max_retries`` + 1 attempts per
    (group, MasterEpoch); after that the group is left alone for ``give_up_ms`` (an operator
    can still elect by hand), then gets a fresh budget.
    """

    def __init__(self, interval_ms: int = DEFAULT_SCAN_INTERVAL_MS, max_retries: int = 3,
                 max_per_scan: int = MAX_ELECTIONS_PER_SCAN, give_up_ms: int | None = None) -> None:
        assert interval_ms > 0 and max_retries >= 0 and max_per_scan > 0
        self.interval_ms = interval_ms
        self.max_retries = max_retries
        self.max_per_scan = max_per_scan
        self.give_up_ms = give_up_ms if give_up_ms is not None else 12 * interval_ms
        self._last_scan_ms: int | None = None
        self._attempts: dict[tuple[str, int], int] = {}
        self._gave_up: dict[tuple[str, int], int] = {}

    def due(self, now_ms: int) -> bool:
        return self._last_scan_ms is None or now_ms - self._last_scan_ms >= self.interval_ms

    def suspects(self, masters: Iterable[MasterRef], table: HeartbeatTable, now_ms: int) -> list[Key]:
        """Masters THIS node does not hear: the ones worth asking the peers about."""
        self._last_scan_ms = now_ms
        out = [(m.broker_name, m.master_broker_id) for m in masters
               if not table.alive(m.broker_name, m.master_broker_id, now_ms)]
        return sorted(out)[: self.max_per_scan]

    def plan(self, masters: Iterable[MasterRef], view: LivenessView, now_ms: int,
             group_view: Mapping[str, LivenessView] | None = None) -> list[ElectMasterRequest]:
        """Election requests for masters a majority holds DEAD (``view``), skipping groups whose
        retry budget is spent. ``group_view`` optionally gives per-group views with every member
        (for ``alive``); by default ``view`` is used for both."""
        current = {(m.broker_name, m.master_epoch) for m in masters}
        for k in [k for k in self._attempts if k not in current]:
            del self._attempts[k]
        for k, t in list(self._gave_up.items()):
            if k not in current or now_ms - t >= self.give_up_ms:
                del self._gave_up[k]
        out: list[ElectMasterRequest] = []
        for m in sorted(masters, key=lambda m: m.broker_name):
            if len(out) >= self.max_per_scan:
                break
            key = (m.broker_name, m.master_epoch)
            if key in self._gave_up or not view.is_dead(m.broker_name, m.master_broker_id):
                continue
            gv = (group_view or {}).get(m.broker_name, view)
            out.append(ElectMasterRequest(
                m.cluster_name, m.broker_name, trigger=TRIGGER_CONTROLLER, broker_id=0,
                alive=gv.alive_infos(m.broker_name),
                dead_broker_ids=tuple(sorted(set(gv.dead_ids(m.broker_name)) | {m.master_broker_id})),
                ts_ms=now_ms, crash_only=view.crash_only(m.broker_name, m.master_broker_id)))
        return out

    def record_result(self, broker_name: str, master_epoch: int, committed: bool, now_ms: int) -> None:
        """After proposing: ``committed`` = the entry was applied (whatever its reply code: an
        applied election either changed the MasterEpoch or answered definitively)."""
        key = (broker_name, master_epoch)
        if committed:
            self._attempts.pop(key, None)
            return
        n = self._attempts.get(key, 0) + 1
        self._attempts[key] = n
        if n > self.max_retries:
            del self._attempts[key]
            self._gave_up[key] = now_ms

    def gave_up(self, broker_name: str, master_epoch: int) -> bool:
        return (broker_name, master_epoch) in self._gave_up
