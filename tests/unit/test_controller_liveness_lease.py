"""The lease argument of docs/controller.md, attacked with drifting clocks and lossy links.

Virtual real time in ms. One master broker (``broker.lease.MasterLease``, its own drifting
clock) heartbeats three controllers (``HeartbeatTable`` each, own drifting clocks and offsets).
Heartbeats and replies are delayed or dropped per link and time window (partitions that come
and go). Controller 0 leads: it scans, asks its peers (``report_opinion``) about a master it
does not hear, and on a majority DEAD verdict an election commits after a delay shorter than
``hold_ms``; every node applies the new MasterEpoch a little later. Claim checked: the old
master's lease never covers any real time at or after the commit.
"""

from __future__ import annotations

import heapq

from autoswitch.broker.lease import LeaseConfig, MasterLease
from autoswitch.controller.liveness import BrokerReport, HeartbeatTable, LivenessView, Opinion
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

H, L, RHO, SAFETY = 10_000, 6_000, 0.01, 2_000
HOLD = 3 * H
HB_INTERVAL = 1_000
SCAN = 250          # far below the 5 s default: tight scans are the hardest case for the argument
END = 90_000
NODES = ("n0", "n1", "n2")
G, M = "g", 1


class Clock:
    def __init__(self, offset: int, rate: float) -> None:
        self.offset, self.rate = offset, rate

    def local(self, real: float) -> int:
        return int(self.offset + self.rate * real)

    def real(self, local: float) -> float:
        return (local - self.offset) / self.rate


window = st.tuples(st.integers(0, END), st.integers(0, 40_000))   # (start, length) of a link outage
outages = st.one_of(st.lists(window, max_size=3), st.just([(30_000, END)]))


@st.composite
def scenarios(draw):
    return {
        "rates": {n: draw(st.floats(1 - RHO, 1 + RHO)) for n in (*NODES, "broker")},
        "offsets": {n: draw(st.integers(0, 10**9)) for n in NODES},
        "down_to": {n: draw(outages) for n in NODES},                           # broker -> node lost
        "down_from": {n: draw(st.lists(window, max_size=2)) for n in NODES},    # node -> broker lost
        "delay": draw(st.integers(0, 300)),
        "commit_delay": draw(st.one_of(st.just(0), st.integers(0, 50), st.integers(0, HOLD - 5_000))),
        "apply_delay": draw(st.integers(0, 2_000)),
        "seed_delays": draw(st.lists(st.integers(0, 300), min_size=8, max_size=8)),
    }


def down(windows, t: float) -> bool:
    return any(s <= t < s + n for s, n in windows)


def simulate(sc) -> tuple[float | None, float | None]:
    """Returns (real commit time of the election or None, last real time the lease was valid)."""
    clocks = {n: Clock(sc["offsets"].get(n, 0), sc["rates"][n]) for n in (*NODES, "broker")}
    # A fresh cluster sent no DEAD report before, so no start-up wait (restarts are not simulated).
    tables = {n: HeartbeatTable(started_ms=clocks[n].local(0), timeout_ms=H, hold_ms=HOLD, startup_grace_ms=0)
              for n in NODES}
    applied = dict.fromkeys(NODES, 1)      # MasterEpoch each node has applied
    lease = MasterLease(NODES, LeaseConfig(master_lease_ms=L, heartbeat_timeout_ms=H,
                                           max_clock_rate_drift=RHO, safety_ms=SAFETY).validate())
    events: list[tuple[float, int, str, tuple]] = []
    seq = 0
    jitter = sc["seed_delays"]

    def at(t: float, kind: str, *args) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, args))

    at(0, "beat")
    at(clocks["n0"].real(clocks["n0"].local(0) + SCAN), "scan")
    commit_at: float | None = None
    last_valid: float | None = None
    k = 0
    while events:
        t, _, kind, args = heapq.heappop(events)
        if t > END:
            break
        if kind == "beat":
            rnd = lease.on_round_sent(clocks["broker"].local(t) / 1000.0)
            for n in NODES:
                k += 1
                if not down(sc["down_to"][n], t):
                    at(t + sc["delay"] + jitter[k % 8], "recv", n, rnd)
            at(clocks["broker"].real(clocks["broker"].local(t) + HB_INTERVAL), "beat")
        elif kind == "recv":
            n, rnd = args
            now = clocks[n].local(t)
            tables[n].record(G, BrokerReport(M, epoch=1, max_offset=100), now)
            if tables[n].grants_lease(G, M, 1, applied[n], now) and not down(sc["down_from"][n], t):
                k += 1
                at(t + sc["delay"] + jitter[k % 8], "reply", n, rnd)
        elif kind == "reply":
            n, rnd = args
            lease.on_reply(n, rnd, clocks["broker"].local(t) / 1000.0)
        elif kind == "scan" and commit_at is None:
            now0 = clocks["n0"].local(t)
            if not tables["n0"].alive(G, M, now0):
                ops = {n: {(G, M): tables[n].report_opinion(G, M, clocks[n].local(t))} for n in NODES}
                if LivenessView.from_opinions(len(NODES), ops).is_dead(G, M):
                    commit_at = t + sc["commit_delay"]
                    for n in NODES:
                        at(commit_at + sc["apply_delay"] * (NODES.index(n) % 2), "apply", n)
            at(clocks["n0"].real(now0 + SCAN), "scan")
        elif kind == "apply":
            (n,) = args
            applied[n] = 2
            tables[n].release(G)
        exp = lease.expires_at()
        if exp is not None:
            last_valid = clocks["broker"].real(exp * 1000.0)
    return commit_at, last_valid


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_old_master_lease_ends_before_the_election_commits(sc):
    commit_at, last_valid = simulate(sc)
    if commit_at is not None and last_valid is not None:
        assert last_valid <= commit_at, f"lease valid until {last_valid:.0f} ms, election committed at {commit_at:.0f}"


def test_majority_partition_does_elect_and_lease_is_gone_by_then():
    """A concrete schedule: the master loses n0 and n1 at 40 s for good."""
    sc = {
        "rates": {"n0": 1 + RHO, "n1": 1 + RHO, "n2": 1.0, "broker": 1 - RHO},
        "offsets": {"n0": 5, "n1": 70_000, "n2": 123},
        "down_to": {"n0": [(40_000, END)], "n1": [(40_000, END)], "n2": []},
        "down_from": {"n0": [], "n1": [], "n2": []},
        "delay": 50, "commit_delay": 0, "apply_delay": 500, "seed_delays": [0] * 8,
    }
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None, "a majority lost the master: the leader must elect"
    assert last_valid is not None and last_valid <= commit_at


def test_one_broken_link_never_elects():
    sc = {
        "rates": {n: 1.0 for n in (*NODES, "broker")}, "offsets": {n: 0 for n in NODES},
        "down_to": {"n0": [(0, END)], "n1": [], "n2": []}, "down_from": {n: [] for n in NODES},
        "delay": 10, "commit_delay": 0, "apply_delay": 0, "seed_delays": [0] * 8,
    }
    assert simulate(sc)[0] is None
    assert Opinion.DEAD.value == "dead"


def test_dead_voters_hearing_the_master_again_before_the_commit_grant_nothing():
    """Case (ii): n0 and n1 lose the master for 15 s, vote it DEAD, then hear it again while the
    election takes 20 s to commit. Without the hold their replies would renew its lease."""
    sc = {
        "rates": {n: 1.0 for n in (*NODES, "broker")}, "offsets": {n: 0 for n in NODES},
        "down_to": {"n0": [(20_000, 15_000)], "n1": [(20_000, 15_000)], "n2": []},
        "down_from": {n: [] for n in NODES},
        "delay": 20, "commit_delay": 20_000, "apply_delay": 0, "seed_delays": [0] * 8,
    }
    commit_at, last_valid = simulate(sc)
    assert commit_at is not None and 30_000 <= commit_at <= 52_000
    assert last_valid is not None and last_valid <= commit_at
