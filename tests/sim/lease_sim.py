"""The lease argument of docs/controller.md, attacked with drifting clocks, lossy links and restarts.

Virtual real time in ms. One master broker (``broker.lease.MasterLease``, its own drifting
clock) heartbeats three controllers (``HeartbeatTable`` each, own drifting clocks and offsets).
Heartbeats and replies are lost per link and time window (partitions that come and go, some
from time 0, so a controller may never have heard the master). The scanning controller (the
leader) asks every node that is up (``report_opinion``) about a master it does not hear, and
on a majority DEAD verdict an election commits after a delay shorter than ``hold_ms``; every
node applies the new MasterEpoch a little later (a node that is down applies it when it is
back). A node may restart: it loses its table (holds included) and comes back with the
start-up pause its fsynced last-DEAD-report time gives (``prior_dead_report_age_ms``). A node
may be wiped: it comes back with an empty data directory (no log, no marker: "never reported"),
catches up from the leader for a while and then listens afresh, as ControllerNode does.

Every grant is the production rule, ``controller/failover/lease.lease_verdict``, on the facts the
simulated node has (its table's refusal, whether it is catching up, its applied configuration);
planted bugs change the facts a node gathers or wrap the rule, never re-write it.

Claim checked: the old master's lease never covers any real time at or after the commit.

``simulate`` runs one scenario (a plain dict, so a failing one can be printed and pasted into a
test); ``random_scenario`` draws one from a seeded ``random.Random`` (the soak runner's fast
generator); ``check`` returns a description of a violation or None. The hypothesis strategy of
tests/unit/test_controller_liveness_lease.py draws from the same space.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable

from autoswitch.broker.replicas.lease import ClockGapDetector, LeaseConfig, MasterLease
from autoswitch.controller.api import BrokerReport, Heartbeat
from autoswitch.controller.consensus.membership import Membership
from autoswitch.controller.failover.lease import LeaseFacts, lease_verdict
from autoswitch.controller.failover.liveness import NEVER_REPORTED, HeartbeatTable, LivenessView
from autoswitch.controller.store.config import ETCD_REVOKE_LOOP_MS, StoreBackendConfig

H, L, RHO, SAFETY = 10_000, 6_000, 0.01, 2_000
HOLD = 3 * H
HB_INTERVAL = 1_000
SCAN = 250          # far below the 5 s default: tight scans are the hardest case for the argument
END = 90_000
NODES = ("n0", "n1", "n2")
SPARE = "n3"                     # joins in scenarios with a membership change
G, M = "g", 1
MARKER_AHEAD_MS = 1_000          # controller/server/node.py writes the last-DEAD-report time 1 s ahead
MAX_RESTART_DOWN_MS = 2_000
# commit_delay + apply_delay + a restart's down time stay below hold_ms / (1 + RHO): the one
# assumption of the argument (every DEAD voter applies the election within its hold).
MAX_COMMIT_DELAY = HOLD - 5_000
MAX_APPLY_DELAY = 2_000


class Clock:
    def __init__(self, offset: int, rate: float) -> None:
        self.offset, self.rate = offset, rate

    def local(self, real: float) -> int:
        return int(self.offset + self.rate * real)

    def real(self, local: float) -> float:
        return (local - self.offset) / self.rate


class StoppedClock(Clock):
    """The broker's CLOCK_MONOTONIC: stands still during ``stop`` = (real start, ms) (a paused
    VM, a suspended host), as the real one does; ``boot`` is its CLOCK_BOOTTIME, which runs on."""

    def __init__(self, offset: int, rate: float, stop: tuple[float, float] | None) -> None:
        super().__init__(offset, rate)
        self.stop = stop

    def _stood(self, real: float) -> float:
        if self.stop is None:
            return 0.0
        t0, d = self.stop
        return min(max(real - t0, 0.0), d)

    def local(self, real: float) -> int:
        return int(self.offset + self.rate * (real - self._stood(real)))

    def real(self, local: float) -> float:
        r = (local - self.offset) / self.rate
        if self.stop is not None and r > self.stop[0]:
            r += self.stop[1]
        return r

    def boot(self, real: float) -> int:
        return int(self.offset + self.rate * real)


def down(windows, t: float) -> bool:
    return any(s <= t < s + n for s, n in windows)


def simulate(sc, table_factory=HeartbeatTable, rules: frozenset[str] = frozenset()) -> tuple[float | None, float | None]:
    """Returns (real commit time of the election or None, last real time the lease was valid).

    Optional keys (absent in older scenarios): ``leader`` (the scanning node, default n0),
    ``restarts`` (node -> [(real time, down ms)]) and ``membership`` (``membership_scenario``):
    two single-server changes the leader appends (the second ``extra2`` ms after the pacing gap
    from the moment it saw the first committed); every other node appends each after its own
    ``learn`` delay; a change commits once a majority of its voters appended it and everything
    before it in the leader's log committed (the election entry included); a node applies
    entries in log order, ``apply_lag`` after it could. Nodes grant under the rules of
    controller/server/membership_ops.py: the configuration in force applied, a voter of it, the broker's
    round naming it, the lease-quorum rule. The broker adopts the applied configuration a reply
    names when newer, or any other from the leader, and counts only rounds sent after that.
    ``store`` (``store_scenario``): the controllers keep their log in a store (docs/controller.md
    "Store backends"): the scanning leader holds a lock of ``lock`` ms, renewed every ``lock / 5``,
    and is paused once (SIGSTOP: it hears nothing, decides nothing, its election write waits)
    for ``pause_ms``, from ``pause_at`` or ``pause_after`` ms after it decided; the write commits
    only if the store has not fenced the leader by then, and once it did the ``successor`` takes
    the lock and scans with its own table, both when the backend ``kind`` says
    (``store_fence_model``: SQL, etcd or ZooKeeper).
    ``wipes`` (node -> [(real time, down ms, catch-up ms)]): the node loses its data directory;
    it is catching up (the rule's third test) from its return until ``catch-up ms`` later, then
    has applied every entry committed by then and listens afresh (``HeartbeatTable.listen_afresh``).
    ``rules`` switches rules off for the planted-bug tests ("pacing", "applied_conf",
    "store_fence", "catching_up", "listen_afresh");
    ``table_factory`` builds the tables (planted bugs in the liveness rules)."""
    conf = sc.get("membership")
    nodes = (*NODES, SPARE) if conf else NODES
    clocks = {n: Clock(sc["offsets"].get(n, 0), sc["rates"][n]) for n in nodes}
    # broker_stop: the broker host stops (its monotonic clock and its process) for a while; the
    # adapter's ClockGapDetector voids the lease at the resume ("clock_gap" off: it does not)
    stop = sc.get("broker_stop")
    bclock = StoppedClock(0, sc["rates"]["broker"], tuple(stop) if stop else None)
    clocks["broker"] = bclock
    voters_of = [NODES, *([tuple(conf["v1"]), tuple(conf["v2"])] if conf else [])]
    view = dict.fromkeys(nodes, 0)            # node -> the newest configuration in its log
    conf_applied = dict.fromkeys(nodes, 0)    # node -> the newest configuration it applied
    broker_view = 0
    round_info: dict[int, tuple[int, int]] = {}    # round -> (lease quorum, configuration) it named
    leader = sc.get("leader", "n0")
    store = sc.get("store")
    first_leader = leader
    pause: list[float] | None = None
    restarts = sc.get("restarts") or {}
    wipes = sc.get("wipes") or {}
    members = [Membership.of_ids(list(v)) for v in voters_of]
    caught_up_at = dict.fromkeys(nodes, -1.0)    # a wiped node is catching up until then
    last_report: dict[str, float] = {}      # node -> real time of its last DEAD report
    gap_ms = 0 if "pacing" in rules else H

    def new_table(n: str, t: float, fresh: bool) -> HeartbeatTable:
        def on_hold(_key, n=n) -> None:
            last_report[n] = now_real[0]
        if fresh:
            age = NEVER_REPORTED          # a new data dir: the marker says "never"
        elif n not in last_report:
            age = NEVER_REPORTED
        else:
            age = clocks[n].rate * (t - last_report[n]) - MARKER_AHEAD_MS
            age = int(age) if age >= 0 else None
        return table_factory(started_ms=clocks[n].local(t), timeout_ms=H, hold_ms=HOLD,
                             prior_dead_report_age_ms=age, on_hold=on_hold)

    now_real = [0.0]
    tables = {n: new_table(n, 0, True) for n in nodes}
    down_until = dict.fromkeys(nodes, -1.0)   # a restarting node is down until then
    applied = dict.fromkeys(nodes, 1)         # MasterEpoch each node has applied (durable: Raft)
    lcfg = LeaseConfig(master_lease_ms=L, heartbeat_timeout_ms=H, max_clock_rate_drift=RHO, safety_ms=SAFETY).validate()
    lease = MasterLease(NODES, lcfg)
    gaps = ClockGapDetector(max(lcfg.margin_ms(), 1.0) / 2000.0)      # as broker/replicas/replicas_adapter.py

    def stopped(t: float) -> bool:
        return stop is not None and stop[0] <= t < stop[0] + stop[1]

    if stop is not None:
        gaps.observe(bclock.local(0) / 1000.0, bclock.boot(0) / 1000.0)     # the adapter's first reading
    ran_since_stop = [False]     # the broker has run (and looked at its clocks) since it resumed
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0
    jitter = sc["seed_delays"]
    delay = sc["delay"]
    # The leader's log after the bootstrap: ("conf", step) and ("elect", 0) items in log order,
    # each with the time it may commit on its own (None: not yet) and its commit time.
    chain: list[list] = []                    # [kind, step, ready, commit, learned: {node: time}]
    next_apply = dict.fromkeys(nodes, 0)      # node -> the chain position it applies next
    due: dict[tuple[str, int], float] = {}    # (node, position) -> when it may apply it
    waiting: dict[tuple[str, int], int] = {}  # (node, position) -> a later change it learnt first

    def at(t: float, kind: str, *args) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, args))

    def append(kind: str, step: int, t: float) -> None:
        chain.append([kind, step, None, None, {}])
        if kind == "conf":
            for n in nodes:
                at(t + (0 if n == leader else conf["learn"][n][step - 1]), "learn", n, len(chain) - 1)
        else:
            chain[-1][2] = t + sc["commit_delay"]
            at(chain[-1][2], "commit_check")

    def paused(n: str, t: float) -> float | None:
        """End of the pause ``n`` is in at ``t`` (in store scenarios the first leader pauses once)."""
        return pause[1] if pause is not None and n == first_leader and pause[0] <= t < pause[1] else None

    fence_at = [0.0]          # from then on the store refuses the paused leader's writes

    def set_pause(start: float) -> None:
        """The leader's pause from ``start``; if the store fences it meanwhile (its renewals
        stop), the successor takes the lock (``store_fence_model``) and scans from then on."""
        nonlocal pause
        pause = [start, start + store["pause_ms"]]
        fence_at[0], takeover = store_fence_model(store, start)
        if pause[1] > fence_at[0]:
            at(takeover, "takeover")

    def store_write(t: float) -> float | None:
        """The store backend's election write decided at ``t``: its commit time, None if fenced."""
        if pause is None:
            set_pause(t + store["pause_after"])
        arrive = t + sc["commit_delay"]
        if t <= pause[0] < arrive:               # paused mid-write: it reaches the store after the pause
            paused_ms = pause[1] - pause[0]
            if store["kind"] == "sql" and "sql_fence_last" in rules:
                # (planted bug: the old order) the fence was the transaction's first statement:
                # it passed before the pause, the transaction and the lock row stay open, and
                # the write commits whenever the leader resumes
                return arrive + paused_ms if t <= fence_at[0] else None
            if store["kind"] == "sql" and store.get("after_fence"):
                # paused between the fence (the last statement, passed) and COMMIT: the server
                # ends a transaction idle for longer than its idle-in-transaction timeout
                return None if paused_ms > store["idle_ms"] else arrive + paused_ms
            arrive += paused_ms
            if arrive > fence_at[0] and "store_fence" not in rules:
                return None                      # the store fenced the leader first: refused
        return arrive

    def apply_while(n: str, ready: Callable[[int], bool]) -> None:
        """Node ``n`` applies its log's next entries in order while ``ready(position)``."""
        while next_apply[n] < len(chain) and ready(next_apply[n]):
            item = chain[next_apply[n]]
            next_apply[n] += 1
            if item[0] == "elect":
                applied[n] = 2
                tables[n].release(G, master_id=2)
            else:
                conf_applied[n] = max(conf_applied[n], item[1])

    def commit_ready(t: float) -> None:
        for j, item in enumerate(chain):
            if item[3] is not None:
                continue
            if item[2] is None or item[2] > t:
                return
            item[3] = t
            kind, step = item[0], item[1]
            for n in nodes:
                if kind == "elect":
                    ready = t + sc["apply_delay"] * (nodes.index(n) % 2)
                else:
                    ready = max(t, item[4].get(n, float("inf"))) + conf["apply_lag"][n][step - 1]
                due[(n, j)] = ready
                at(ready, "apply", n)
            if kind == "conf" and step == 1:     # the leader paces the next voter change
                lt = clocks[leader].real(clocks[leader].local(t) + gap_ms) + conf["extra2"]
                at(lt, "append2")

    at(0, "beat")
    at(clocks[leader].real(clocks[leader].local(0) + SCAN), "scan", leader)
    if store and store.get("pause_after") is None:
        set_pause(store["pause_at"])
    for n, rs in restarts.items():
        for t, d in rs:
            at(t, "crash", n, d)
    for n, ws in wipes.items():
        for t, d, catch in ws:
            at(t, "wipe", n, d, catch)
    if conf:
        at(conf["t1"], "append1")
    if sc.get("timeout_change"):
        at(sc["timeout_change"][0], "timeout_change", sc["timeout_change"][1])
    commit_at: float | None = None
    last_valid: float | None = None
    k = 0
    down_to, down_from = sc["down_to"], sc["down_from"]
    while events:
        t, _, kind, args = heapq.heappop(events)
        if t > END:
            break
        now_real[0] = t
        if kind in ("beat", "reply") and stopped(t):
            at(stop[0] + stop[1], kind, *args)   # the stopped broker runs nothing until it resumes
            continue
        if kind in ("beat", "reply") and stop is not None:
            gap = gaps.observe(bclock.local(t) / 1000.0, bclock.boot(t) / 1000.0)
            if gap is not None and "clock_gap" not in rules:
                lease.void()
            ran_since_stop[0] = ran_since_stop[0] or t >= stop[0] + stop[1]
        if kind == "beat":
            rnd = lease.on_round_sent(clocks["broker"].local(t) / 1000.0)
            round_info[rnd] = (lease.quorum, broker_view)
            for n in lease.controllers:
                k += 1
                if not down(down_to.get(n, ()), t):
                    at(t + delay + jitter[k % 8], "recv", n, rnd)
            at(clocks["broker"].real(clocks["broker"].local(t) + HB_INTERVAL), "beat")
        elif kind == "recv":
            n, rnd = args
            if t < down_until[n]:
                continue
            if (end := paused(n, t)) is not None:
                at(end, "recv", n, rnd)          # SIGSTOP: the kernel keeps it until the process runs
                continue
            now = clocks[n].local(t)
            tables[n].record(G, BrokerReport(M, epoch=1, max_offset=100, assumed_timeout_ms=H), now)
            quorum, named = round_info.get(rnd, (0, 0))
            # Consensus.applied_conf(): the applied configuration, in force unless a newer one is
            # appended ("applied_conf" off, the planted bug: the appended one counts as applied)
            step_ = view[n] if "applied_conf" in rules else conf_applied[n]
            facts = LeaseFacts(
                self_id=n, table_refusal=tables[n].lease_refusal(G, M, 1, applied[n], now),
                registered_incarnation="", catching_up=t < caught_up_at[n] and "catching_up" not in rules,
                applied_conf=(step_, members[step_], step_ == view[n]), master_epoch=applied[n],
                master_id=M if applied[n] <= 1 else 2, is_leader=n == leader, timeout_ms=tables[n].timeout_ms)
            hb = Heartbeat("c", G, BrokerReport(M, epoch=1, max_offset=100, assumed_timeout_ms=H),
                           lease_quorum=quorum, controllers_index=named)
            granted = lease_verdict(hb, facts).granted
            if not down(down_from.get(n, ()), t) and (granted or conf):
                k += 1
                at(t + delay + jitter[k % 8], "reply", n, rnd, conf_applied[n], granted)
        elif kind == "reply":
            n, rnd, seen, granted = args
            if seen > broker_view or (n == leader and seen != broker_view):
                broker_view = seen               # adopt the configuration the reply names
                lease.replace_controllers(voters_of[seen])
            if granted:
                lease.on_reply(n, rnd, clocks["broker"].local(t) / 1000.0)
        elif kind in ("append1", "append2"):
            append("conf", 1 if kind == "append1" else 2, t)
        elif kind == "learn":
            n, j = args
            step = chain[j][1]
            if t < down_until[n]:
                at(down_until[n], "learn", n, j)
                continue
            before = [i for i in range(j) if chain[i][0] == "conf" and n not in chain[i][4]]
            if before:                           # a log is appended in order: after the earlier change
                waiting[(n, before[-1])] = j
                continue
            chain[j][4][n] = t
            if (n, j) in waiting:
                at(t, "learn", n, waiting.pop((n, j)))
            if step > view[n]:
                if n not in voters_of[view[n]] and n in voters_of[step]:
                    # as controller/server/node.py does when a node becomes a voter: it listens from
                    # now on and grants no lease for a hold
                    tables[n].started_ms = clocks[n].local(t)
                    tables[n].startup_grace_ms = HOLD
                view[n] = step
            vs = voters_of[step]
            if chain[j][2] is None and sum(1 for v in vs if v in chain[j][4]) > len(vs) // 2:
                chain[j][2] = t
                commit_ready(t)
        elif kind == "commit_check":
            commit_ready(t)
        elif kind == "timeout_change":
            # An operator sets heartbeat_timeout_ms at run time (node.broker_timeout_floor): below
            # the largest timeout the master stated to the nodes that answer (a majority must) it
            # is refused ("timeout_floor" off: accepted). Every node takes the new timeout and
            # hold; a hold already running keeps its length (HeartbeatTable).
            (ms,) = args
            up = [n for n in NODES if t >= down_until[n] and paused(n, t) is None]
            floor = max((tables[n].max_assumed_timeout_ms(clocks[n].local(t)) for n in up), default=0)
            if "timeout_floor" in rules or (len(up) > len(NODES) // 2 and ms >= floor):
                for tb in tables.values():
                    tb.timeout_ms, tb.hold_ms = ms, 3 * ms
        elif kind == "scan":
            (who,) = args
            if commit_at is not None or who != leader:
                continue
            if (end := paused(who, t)) is not None:
                at(end, "scan", who)
                continue
            now0 = clocks[leader].local(t)
            voters = voters_of[view[leader]]
            if t >= down_until[leader] and not tables[leader].alive(G, M, now0):
                ops = {n: {(G, M): tables[n].report_opinion(G, M, clocks[n].local(t))}
                       for n in voters if t >= down_until[n] and paused(n, t) is None}
                if LivenessView.from_opinions(len(voters), ops).is_dead(G, M):
                    if not store:
                        append("elect", 0, t)
                        commit_at = -1.0             # decided; the commit time comes from the chain
                    elif (arrive := store_write(t)) is not None:
                        append("elect", 0, t)
                        chain[-1][2] = arrive
                        at(arrive, "commit_check")
                        commit_at = -1.0
            at(clocks[leader].real(now0 + SCAN), "scan", leader)
        elif kind == "takeover":
            leader = store["successor"]
            commit_at = None                     # a fenced decision committed nothing: look again
            if not any(item[0] == "elect" for item in chain):
                at(t, "scan", leader)
        elif kind == "apply":
            (n,) = args
            if t < down_until[n]:
                at(down_until[n], "apply", n)     # replays its log when it is back
                continue
            if (end := paused(n, t)) is not None:
                at(end, "apply", n)
                continue
            apply_while(n, lambda j, n=n, t=t: due.get((n, j), float("inf")) <= t)
        elif kind == "crash":
            n, d = args
            down_until[n] = max(down_until[n], t + d)
            at(t + d, "up", n)
        elif kind == "up":
            (n,) = args
            if t >= down_until[n]:
                tables[n] = new_table(n, t, False)
        elif kind == "wipe":
            # the data directory is gone: the log (and what it applied), the DEAD-report marker
            n, d, catch = args
            down_until[n] = max(down_until[n], t + d)
            caught_up_at[n] = max(caught_up_at[n], t + d + catch)
            last_report.pop(n, None)
            applied[n] = 0
            next_apply[n] = 0
            at(t + d, "wiped_up", n)
            at(caught_up_at[n], "caught_up", n)
        elif kind == "wiped_up":
            (n,) = args
            if t >= down_until[n]:
                tables[n] = new_table(n, t, True)
        elif kind == "caught_up":
            (n,) = args
            if t < caught_up_at[n] or t < down_until[n]:
                continue
            # up to the leader's commit index: every entry committed by now is applied
            apply_while(n, lambda j, t=t: chain[j][3] is not None and chain[j][3] <= t)
            applied[n] = max(applied[n], 1)      # the bootstrap's MasterEpoch 1 (M)
            if "listen_afresh" not in rules:
                tables[n].listen_afresh(clocks[n].local(t))      # LivenessDesk.caught_up_from_empty
        exp = lease.expires_at()
        # A lease counts from the reply that completes its quorum: one learnt only after it ran
        # out (a paused controller's late grants) never let the master acknowledge anything.
        if exp is not None and (valid := clocks["broker"].real(exp * 1000.0)) > t:
            if stop is not None and valid > stop[0] and not ran_since_stop[0]:
                # the broker acts (acknowledges) only while it runs: until the stop, and after
                # the resume only if its lease survives the ClockGapDetector's first look
                valid = stop[0]
            last_valid = valid if last_valid is None else max(last_valid, valid)
    elect = [item for item in chain if item[0] == "elect"]
    return (elect[0][3] if elect else None), last_valid


def check(sc, table_factory=HeartbeatTable, rules: frozenset[str] = frozenset()) -> str | None:
    """None, or what went wrong: the old master's lease covering the commit of its successor."""
    commit_at, last_valid = simulate(sc, table_factory, rules)
    if commit_at is not None and last_valid is not None and last_valid > commit_at:
        return f"lease valid until {last_valid:.0f} ms, election committed at {commit_at:.0f} ms"
    return None


# --------------------------------------------------------------------------- random scenarios


def _window(rng: random.Random) -> tuple[int, int]:
    """(start, length) of an outage. Starts at 0 (a node that never heard the master) or on a
    scan instant, and ends on a scan instant, more often than chance would have it."""
    x = rng.random()
    start = 0 if x < 0.35 else rng.randrange(0, END // SCAN) * SCAN if x < 0.6 else rng.randint(0, END)
    y = rng.random()
    if y < 0.4:
        length = rng.randrange(1, 40_000 // SCAN) * SCAN + rng.choice((0, 0, 1, -1))
    else:
        length = rng.randint(0, 40_000)
    return start, max(0, length)


def _outages(rng: random.Random) -> list[tuple[int, int]]:
    x = rng.random()
    if x < 0.15:
        return [(30_000, END)]
    if x < 0.3:
        return []
    return [_window(rng) for _ in range(rng.randint(1, 3))]


def random_scenario(rng: random.Random) -> dict:
    """One scenario from the space the hypothesis strategy draws from, plus restarts and a
    changing leader; ties (equal clocks, zero delays) come up often on purpose."""
    tie = rng.random() < 0.3
    rates = {n: 1.0 if tie and rng.random() < 0.7 else rng.uniform(1 - RHO, 1 + RHO) for n in (*NODES, "broker")}
    offsets = {n: 0 if tie else rng.randint(0, 10**9) for n in NODES}
    restarts = {}
    if rng.random() < 0.3:
        for n in NODES:
            if rng.random() < 0.4:
                restarts[n] = [(rng.randint(0, END), rng.randint(0, MAX_RESTART_DOWN_MS))
                               for _ in range(rng.randint(1, 2))]
    c = rng.random()
    commit_delay = 0 if c < 0.2 else rng.randint(0, 50) if c < 0.4 else rng.randint(0, 2_000) if c < 0.7 \
        else rng.randint(0, MAX_COMMIT_DELAY)
    return {
        "rates": rates,
        "offsets": offsets,
        "down_to": {n: _outages(rng) for n in NODES},
        "down_from": {n: [_window(rng) for _ in range(rng.choice((0, 0, 1, 2)))] for n in NODES},
        "delay": 0 if tie else rng.randint(0, 300),
        "commit_delay": commit_delay,
        "apply_delay": rng.randint(0, MAX_APPLY_DELAY),
        "seed_delays": [0] * 8 if tie else [rng.randint(0, 300) for _ in range(8)],
        "leader": rng.choice(NODES) if rng.random() < 0.3 else "n0",
        "restarts": restarts,
    }


def broker_stop(rng: random.Random) -> tuple[int, int] | None:
    """One plain scenario in five stops the broker host (a paused VM, a suspended host) once: its
    own RNG (``lease-stop/<i>``), so every other draw of the scenarios is the one of before."""
    if rng.random() >= 0.2:
        return None
    return rng.randint(0, END), rng.choice((rng.randint(0, 3_000), rng.randint(3_000, 40_000)))


def timeout_change(rng: random.Random) -> tuple[int, int] | None:
    """One plain scenario in five has an operator change heartbeat_timeout_ms once, to a third,
    a half, or twice the value the broker's lease was sized for: its own RNG (``lease-timeout/<i>``)."""
    if rng.random() >= 0.2:
        return None
    return rng.randint(0, END), rng.choice((H // 3, H // 2, 2 * H))


def wipes(rng: random.Random, leader: str) -> dict[str, list[tuple[int, int, int]]]:
    """One plain scenario in four wipes a controller other than the scanning leader once: it is
    back after up to ``MAX_RESTART_DOWN_MS`` with an empty data directory and catches up for up to
    0.2 s or 5 s. Its own RNG (``lease-wipe/<i>``), so every other draw is the one of before."""
    if rng.random() >= 0.25:
        return {}
    n = rng.choice([x for x in NODES if x != leader])
    return {n: [(rng.randint(0, END), rng.randint(0, MAX_RESTART_DOWN_MS),
                 rng.choice((rng.randint(0, 200), rng.randint(0, 5_000))))]}


def membership_scenario(rng: random.Random) -> dict:
    """``random_scenario`` plus two single-server changes while the broker runs: add the spare
    node (at ``t1``), then remove an original voter other than the leader (``extra2`` ms after the
    leader's pacing allows it); in three scenarios of ten the other way round (remove, then add). Each node appends each change after its own delay (up to 30 s:
    stale views on purpose) and applies it up to 2 s after it could."""
    sc = random_scenario(rng)
    nodes = (*NODES, SPARE)
    sc["rates"][SPARE] = rng.uniform(1 - RHO, 1 + RHO)
    sc["offsets"][SPARE] = rng.randint(0, 10**9)
    sc["down_to"][SPARE] = _outages(rng)
    sc["down_from"][SPARE] = [_window(rng) for _ in range(rng.choice((0, 0, 1, 2)))]
    leader = sc["leader"]

    def lag(longest: int) -> int:
        return 0 if rng.random() < 0.3 else rng.choice((rng.randint(0, 500), rng.randint(0, longest)))

    gone = rng.choice([n for n in NODES if n != leader])
    smaller = tuple(n for n in NODES if n != gone)
    remove_first = rng.random() < 0.3          # replace by removing first: 3 -> 2 -> 3 voters
    sc["membership"] = {
        "t1": rng.randint(0, END // 2),
        "v1": smaller if remove_first else (*NODES, SPARE),
        "v2": (*smaller, SPARE) if remove_first else tuple(n for n in (*NODES, SPARE) if n != gone),
        "extra2": rng.choice((0, rng.randint(0, 500), rng.randint(0, 10_000))),
        "learn": {n: [0 if n == leader else lag(30_000) for _ in range(2)] for n in nodes},
        "apply_lag": {n: [lag(2_000) for _ in range(2)] for n in nodes},
    }
    return sc


def _first_at_or_after(t: float, phase: float, every: float) -> float:
    """The first instant ``phase + k * every`` (k any integer) at or after ``t``."""
    return phase + math.ceil((t - phase) / every) * every


def store_fence_model(store: dict, pause_at: float) -> tuple[float, float]:
    """(fence, takeover) for a leader that renews every ``lock / 5`` ms (at multiples of it) and
    stops at ``pause_at``: from ``fence`` on the store refuses its writes, at ``takeover`` the
    successor holds the lock. One model per backend (docs/controller.md "Store backends"):

    - ``sql``: the write's own transaction checks the lock row's expiry by the database clock:
      fenced at the last renewal + ``lock``; the successor, looking every renewal period, takes
      it at its next look.
    - ``etcd``: the write compares the leader key's create revision, so it is fenced only once
      the key is gone: etcd deletes it when its lease (``lock`` rounded up to whole seconds)
      expired, at the next run of its 500 ms revoke loop (``revoke_phase``), or the successor
      deletes it, having read the same renewal for more than ``lock`` of its own time, counted
      from the first of its looks (every renewal period, ``poll_phase``) that returned it; the
      successor campaigns at once after its own delete, or at its next look after etcd's.
    - ``zookeeper``: the write is a multi on the leader's session, which the server expires at
      the first tick (``tick``) after the session timeout (``lock``) from the last renewal (the
      client's last ping); the ephemeral node goes with it and the successor's watch fires
      within ``watch_ms``."""
    lock, kind = store["lock"], store.get("kind", "sql")
    every = lock // 5
    last = pause_at // every * every
    if kind == "etcd":
        ttl_ms = StoreBackendConfig(lease_ms=lock).etcd_ttl_s * 1000
        gone = _first_at_or_after(last + ttl_ms, store["revoke_phase"], ETCD_REVOKE_LOOP_MS)
        seen = _first_at_or_after(last, store["poll_phase"], every)
        silent = seen + (lock // every + 1) * every
        if silent <= gone:
            return silent, silent
        return gone, _first_at_or_after(gone, store["poll_phase"], every)
    if kind == "zookeeper":
        expired = _first_at_or_after(last + lock, 0, store["tick"])
        return expired, expired + store["watch_ms"]
    return last + lock, last + lock + every


def store_scenario(rng: random.Random) -> dict:
    """``random_scenario`` on a store backend (SQL, etcd or ZooKeeper, each with its own fencing:
    ``store_fence_model``): a lock of 0.5-8 s, and the leader paused once for
    up to 60 s (SIGSTOP), half the time right after it decided an election (mid-write). The Raft
    commit delay is replaced by the store write's (up to the statement timeout, 1-2 s), so that
    delay plus a pause the lock survives stays within the hold (the argument's one assumption)."""
    sc = random_scenario(rng)
    kind = rng.choice(("sql", "etcd", "zookeeper"))
    lock = rng.choice((500, 1_500, 3_000, 7_000 if kind == "etcd" else 8_000))
    tick = rng.choice([t for t in (100, 200, 2_000) if t <= lock // 2])
    # What the controller's config check allows (controller/store/config.py fence_bound_ms):
    # the backend's fence bound plus a statement within one heartbeat timeout.
    bound = StoreBackendConfig(lease_ms=lock, zk_tick_ms=tick).fence_bound_ms(kind)
    # SQL: the fence is the write's last statement; a pause after it, before COMMIT, lasts at most
    # the idle-in-transaction timeout (the server then rolls it back): that gap counts too
    idle = rng.choice((100, 250, 1_000)) if kind == "sql" else 0
    sc["commit_delay"] = min(H - bound - idle, rng.choice((0, rng.randint(0, 50), rng.randint(0, 2_000))))
    sc["store"] = {
        "kind": kind,
        "tick": tick,
        "watch_ms": rng.randint(0, 50),
        "revoke_phase": rng.randrange(ETCD_REVOKE_LOOP_MS),
        "poll_phase": rng.randrange(lock // 5),
        "lock": lock,
        "pause_at": rng.randint(0, END),
        "pause_after": rng.choice((None, 0, rng.randint(0, 40), rng.randint(0, sc["commit_delay"] + 1))),
        "pause_ms": rng.choice((rng.randint(0, lock), rng.randint(lock, 2 * lock), rng.randint(0, 60_000))),
        "successor": rng.choice([n for n in NODES if n != sc["leader"]]),
        # drawn last (2026-11-27), so the other draws are those of before
        "idle_ms": idle,
        "after_fence": kind == "sql" and rng.random() < 0.3,
    }
    return sc


def run_scenarios(start: int, count: int, table_factory=HeartbeatTable, progress=None,
                  membership: bool = False, rules: frozenset[str] = frozenset(),
                  store: bool = False) -> tuple[int, list[tuple[int, dict, str]]]:
    """Scenarios ``start`` .. ``start + count - 1`` (scenario i comes from its own seeded RNG, so
    any one can be re-run alone). Returns (elections seen, violations as (i, scenario, what)).
    ``membership``: scenarios with a controller membership change (``membership_scenario``);
    ``store``: scenarios on a store backend with a paused leader (``store_scenario``);
    ``rules``: membership rules switched off (``simulate``)."""
    bad: list[tuple[int, dict, str]] = []
    elections = 0
    for i in range(start, start + count):
        sc = (membership_scenario(random.Random(f"lease-mem/{i}")) if membership
              else store_scenario(random.Random(f"lease-store/{i}")) if store
              else random_scenario(random.Random(f"lease/{i}")))
        if not membership and not store:
            sc["broker_stop"] = broker_stop(random.Random(f"lease-stop/{i}"))
            sc["timeout_change"] = timeout_change(random.Random(f"lease-timeout/{i}"))
            sc["wipes"] = wipes(random.Random(f"lease-wipe/{i}"), sc.get("leader", "n0"))
        commit_at, last_valid = simulate(sc, table_factory, rules)
        elections += commit_at is not None
        if commit_at is not None and last_valid is not None and last_valid > commit_at:
            bad.append((i, sc, f"lease valid until {last_valid:.0f} ms, election committed at {commit_at:.0f} ms"))
        if progress is not None and (i - start + 1) % 10_000 == 0:
            progress(i - start + 1, elections, len(bad))
    return elections, bad
