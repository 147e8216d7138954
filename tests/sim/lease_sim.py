"""The lease argument of docs/controller.md, attacked with drifting clocks, lossy links and restarts.

Virtual real time in ms. One master broker (``broker.lease.MasterLease``, its own drifting
clock) heartbeats three controllers (``HeartbeatTable`` each, own drifting clocks and offsets).
Heartbeats and replies are lost per link and time window (partitions that come and go, some
from time 0, so a controller may never have heard the master). The scanning controller (the
leader) asks every node that is up (``report_opinion``) about a master it does not hear, and
on a majority DEAD verdict an election commits after a delay shorter than ``hold_ms``; every
node applies the new MasterEpoch a little later (a node that is down applies it when it is
back). A node may restart: it loses its table (holds included) and comes back with the
start-up pause its fsynced last-DEAD-report time gives (``prior_dead_report_age_ms``).

Claim checked: the old master's lease never covers any real time at or after the commit.

``simulate`` runs one scenario (a plain dict, so a failing one can be printed and pasted into a
test); ``random_scenario`` draws one from a seeded ``random.Random`` (the soak runner's fast
generator); ``check`` returns a description of a violation or None. The hypothesis strategy of
tests/unit/test_controller_liveness_lease.py draws from the same space.
"""

from __future__ import annotations

import heapq
import random

from autoswitch.broker.lease import LeaseConfig, MasterLease
from autoswitch.controller.liveness import NEVER_REPORTED, BrokerReport, HeartbeatTable, LivenessView
from autoswitch.controller.membership_ops import lease_quorum_ok

H, L, RHO, SAFETY = 10_000, 6_000, 0.01, 2_000
HOLD = 3 * H
HB_INTERVAL = 1_000
SCAN = 250          # far below the 5 s default: tight scans are the hardest case for the argument
END = 90_000
NODES = ("n0", "n1", "n2")
SPARE = "n3"                     # joins in scenarios with a membership change
G, M = "g", 1
MARKER_AHEAD_MS = 1_000          # controller/node.py writes the last-DEAD-report time 1 s ahead
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


def down(windows, t: float) -> bool:
    return any(s <= t < s + n for s, n in windows)


def simulate(sc, table_factory=HeartbeatTable) -> tuple[float | None, float | None]:
    """Returns (real commit time of the election or None, last real time the lease was valid).

    Optional keys (absent in older scenarios): ``leader`` (the scanning node, default n0),
    ``restarts`` (node -> [(real time, down ms)]) and ``membership``: ``{"steps": [(real time,
    voters)], "learn": {node: [delay per step]}}``, single-server changes the leader makes (it
    knows each at once; every other node learns it that much later); nodes grant only as voters
    of their own view and under the lease-quorum rule (controller/membership_ops.py), the broker
    adopts the list of a reply with a newer view (MasterLease.replace_controllers), and the
    leader's scan asks, and counts, the voters of its own view. ``table_factory`` builds the tables
    (the planted-bug tests pass a broken one)."""
    conf = sc.get("membership")
    nodes = (*NODES, SPARE) if conf else NODES
    clocks = {n: Clock(sc["offsets"].get(n, 0), sc["rates"][n]) for n in (*nodes, "broker")}
    steps = [(0.0, NODES), *[(float(t), tuple(v)) for t, v in conf["steps"]]] if conf else [(0.0, NODES)]
    view = dict.fromkeys(nodes, 0)            # node -> the newest step it knows
    broker_view = 0
    quorum_of_round: dict[int, int] = {}
    leader = sc.get("leader", "n0")
    restarts = sc.get("restarts") or {}
    last_report: dict[str, float] = {}      # node -> real time of its last DEAD report

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
    lease = MasterLease(NODES, LeaseConfig(master_lease_ms=L, heartbeat_timeout_ms=H,
                                           max_clock_rate_drift=RHO, safety_ms=SAFETY).validate())
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0
    jitter = sc["seed_delays"]
    delay = sc["delay"]

    def at(t: float, kind: str, *args) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, args))

    at(0, "beat")
    at(clocks[leader].real(clocks[leader].local(0) + SCAN), "scan")
    for n, rs in restarts.items():
        for t, d in rs:
            at(t, "crash", n, d)
    for i, (t, _v) in enumerate(steps[1:], 1):
        for n in nodes:
            at(t + (0 if n == leader else conf["learn"][n][i - 1]), "learn", n, i)
    commit_at: float | None = None
    last_valid: float | None = None
    k = 0
    down_to, down_from = sc["down_to"], sc["down_from"]
    while events:
        t, _, kind, args = heapq.heappop(events)
        if t > END:
            break
        now_real[0] = t
        if kind == "beat":
            rnd = lease.on_round_sent(clocks["broker"].local(t) / 1000.0)
            quorum_of_round[rnd] = lease.quorum
            for n in lease.controllers:
                k += 1
                if not down(down_to.get(n, ()), t):
                    at(t + delay + jitter[k % 8], "recv", n, rnd)
            at(clocks["broker"].real(clocks["broker"].local(t) + HB_INTERVAL), "beat")
        elif kind == "recv":
            n, rnd = args
            if t < down_until[n]:
                continue
            now = clocks[n].local(t)
            tables[n].record(G, BrokerReport(M, epoch=1, max_offset=100), now)
            mine = steps[view[n]][1]
            voter = n in mine and lease_quorum_ok(quorum_of_round.get(rnd, 0), len(mine))
            if voter and tables[n].grants_lease(G, M, 1, applied[n], now) and not down(down_from.get(n, ()), t):
                k += 1
                at(t + delay + jitter[k % 8], "reply", n, rnd, view[n])
        elif kind == "reply":
            n, rnd, seen = args
            lease.on_reply(n, rnd, clocks["broker"].local(t) / 1000.0)
            if seen > broker_view:        # the reply names a newer membership: adopt its voters
                broker_view = seen
                lease.replace_controllers(steps[seen][1])
        elif kind == "learn":
            n, i = args
            if t < down_until[n]:
                at(down_until[n], "learn", n, i)
            elif i > view[n]:
                if n not in steps[view[n]][1] and n in steps[i][1]:
                    # as controller/node.py does when a node becomes a voter: it listens from
                    # now on and grants no lease for a hold
                    tables[n].started_ms = clocks[n].local(t)
                    tables[n].startup_grace_ms = HOLD
                view[n] = i
        elif kind == "scan":
            if commit_at is not None:
                continue
            now0 = clocks[leader].local(t)
            voters = steps[view[leader]][1]
            if t >= down_until[leader] and not tables[leader].alive(G, M, now0):
                ops = {n: {(G, M): tables[n].report_opinion(G, M, clocks[n].local(t))}
                       for n in voters if t >= down_until[n]}
                if LivenessView.from_opinions(len(voters), ops).is_dead(G, M):
                    commit_at = t + sc["commit_delay"]
                    for n in nodes:
                        at(commit_at + sc["apply_delay"] * (nodes.index(n) % 2), "apply", n)
            at(clocks[leader].real(now0 + SCAN), "scan")
        elif kind == "apply":
            (n,) = args
            if t < down_until[n]:
                at(down_until[n], "apply", n)     # replays its log when it is back
                continue
            applied[n] = 2
            tables[n].release(G, master_id=2)
        elif kind == "crash":
            n, d = args
            down_until[n] = max(down_until[n], t + d)
            at(t + d, "up", n)
        elif kind == "up":
            (n,) = args
            if t >= down_until[n]:
                tables[n] = new_table(n, t, False)
        exp = lease.expires_at()
        if exp is not None:
            last_valid = clocks["broker"].real(exp * 1000.0)
    return commit_at, last_valid


def check(sc, table_factory=HeartbeatTable) -> str | None:
    """None, or what went wrong: the old master's lease covering the commit of its successor."""
    commit_at, last_valid = simulate(sc, table_factory)
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


def membership_scenario(rng: random.Random) -> dict:
    """``random_scenario`` plus two single-server changes while the broker runs: add the spare
    node, then remove an original voter other than the leader. Each node learns each step after
    its own delay (up to 30 s: stale views on purpose); the removal starts only once a majority
    of the enlarged voters know the addition (it committed), as the leader's rule requires."""
    sc = random_scenario(rng)
    nodes = (*NODES, SPARE)
    sc["rates"][SPARE] = rng.uniform(1 - RHO, 1 + RHO)
    sc["offsets"][SPARE] = rng.randint(0, 10**9)
    sc["down_to"][SPARE] = _outages(rng)
    sc["down_from"][SPARE] = [_window(rng) for _ in range(rng.choice((0, 0, 1, 2)))]
    leader = sc["leader"]
    v1 = (*NODES, SPARE)
    t1 = rng.randint(0, END // 2)
    learn = {n: [0 if n == leader else rng.choice((rng.randint(0, 500), rng.randint(0, 30_000))),
                 0 if n == leader else rng.choice((rng.randint(0, 500), rng.randint(0, 30_000)))] for n in nodes}
    committed = sorted(t1 + learn[n][0] for n in v1)[len(v1) // 2]      # the majority-th learner
    t2 = committed + rng.randint(0, 10_000)
    gone = rng.choice([n for n in NODES if n != leader])
    sc["membership"] = {"steps": [(t1, v1), (t2, tuple(n for n in v1 if n != gone))], "learn": learn}
    return sc


def run_scenarios(start: int, count: int, table_factory=HeartbeatTable,
                  progress=None, membership: bool = False) -> tuple[int, list[tuple[int, dict, str]]]:
    """Scenarios ``start`` .. ``start + count - 1`` (scenario i comes from its own seeded RNG, so
    any one can be re-run alone). Returns (elections seen, violations as (i, scenario, what)).
    ``membership``: scenarios with a controller membership change (``membership_scenario``)."""
    bad: list[tuple[int, dict, str]] = []
    elections = 0
    for i in range(start, start + count):
        sc = (membership_scenario(random.Random(f"lease-mem/{i}")) if membership
              else random_scenario(random.Random(f"lease/{i}")))
        commit_at, last_valid = simulate(sc, table_factory)
        elections += commit_at is not None
        if commit_at is not None and last_valid is not None and last_valid > commit_at:
            bad.append((i, sc, f"lease valid until {last_valid:.0f} ms, election committed at {commit_at:.0f} ms"))
        if progress is not None and (i - start + 1) % 10_000 == 0:
            progress(i - start + 1, elections, len(bad))
    return elections, bad
