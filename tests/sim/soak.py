"""Run simulation seeds: ``python -m tests.sim.soak --seeds N --seed-start S [--verbose]``.

Every seed runs Phase A (controller Raft + state machine) and Phase B (brokers, leases, HA) of
the simulator with its own fault mix. Prints seeds per second and the seed of every violation;
exits 1 when there is one. ``--bug NAME`` plants a bug (tests/sim only) to show a checker bites.
``--lease-scenarios N`` also runs N scenarios of the lease simulator (tests/sim/lease_sim.py):
drifting clocks, partitions from time 0 and heals on a scan instant, slow commits, restarts.
``--lease-membership-scenarios N`` runs N more, each with two controller membership changes (add a
voter, remove another) learnt late by some nodes (docs/controller.md "Controller membership").
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from . import controller_sim, data_sim, lease_sim, store_sim
from .bugs import MEMBERSHIP_RULE_OFF, WIPE_RULE_OFF
from .common import BUGS, HoldFromFirstReportTable, Stats, Violation, quiet_logs


def run_one(seed: int, bugs: frozenset[str] = frozenset(), phases: str = "ab",
            verbose: bool = False) -> tuple[Stats, list[tuple[str, Violation]]]:
    """Both phases of one seed. Returns the stats and the violations (phase, violation)."""
    with quiet_logs():
        return _run_one(seed, bugs, phases, verbose)


def _run_one(seed: int, bugs: frozenset[str], phases: str, verbose: bool) -> tuple[Stats, list[tuple[str, Violation]]]:
    stats = Stats()
    bad: list[tuple[str, Violation]] = []
    if "a" in phases:
        try:
            # every other seed also changes the controller membership (two spare nodes), every
            # third seed also wipes a node's data directory now and then, and every fourth (3 mod 4,
            # with membership changes) has a hostile member forging Raft messages (issue 59)
            stats.add(controller_sim.ControllerSim(seed, bugs=bugs, spares=2 * (seed % 2), wipes=seed % 3 == 1,
                                                   hostile=seed % 4 == 3).run())
        except Violation as v:
            bad.append(("A", v))
    if "b" in phases:
        # odd seeds: masters also hand over (issue 13's compare-and-set), adversarially; seeds 2, 3
        # mod 4: crash-fast failover with sessions that also reset while brokers live on, and every
        # eighth seed in ack mode in_sync_replicas, where the fast path must stay off; every third
        # seed (ack mode all) also cuts the power of brokers (unsynced bytes lost, unclean restarts),
        # and every fifth (and every in_sync_replicas one) has operators designating masters
        # (and every sixteenth, 11 mod 16, in ack mode master)
        isr = seed % 8 == 7
        master = seed % 16 == 11
        d = data_sim.DataSim(seed, bugs=bugs, handovers=seed % 2 == 1, crash_fast=seed % 4 >= 2,
                             ack_mode="in_sync_replicas" if isr else "master" if master else "all",
                             power_loss=seed % 3 == 2 and not isr and not master,
                             admin_elections=seed % 5 == 4 or (isr and seed % 2 == 1))
        try:
            stats.add(d.run())
        except Violation as v:
            bad.append(("B", v))
            if verbose:
                print("\n".join(d.trace[-80:]), file=sys.stderr)
    return stats, bad


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.sim.soak")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--seed-start", type=int, default=0)
    ap.add_argument("--phases", default="ab", help="a = controller Raft, b = brokers/HA (default both)")
    ap.add_argument("--bug", action="append", default=[], choices=BUGS, help="plant a bug (sim only)")
    ap.add_argument("--max-seconds", type=float, default=None, help="stop early after this long")
    ap.add_argument("--lease-scenarios", type=int, default=0, help="lease simulator scenarios to run too")
    ap.add_argument("--lease-start", type=int, default=0, help="first lease scenario number")
    ap.add_argument("--lease-membership-scenarios", type=int, default=0,
                    help="lease scenarios with controller membership changes (add one voter, remove another)")
    ap.add_argument("--lease-store-scenarios", type=int, default=0,
                    help="lease scenarios on a store backend whose leader pauses (SIGSTOP) past or within its lock")
    ap.add_argument("--store-seeds", type=int, default=0,
                    help="storage simulator seeds (the real MessageStore on a simulated disk) to run too")
    ap.add_argument("--verbose", action="store_true")
    a = ap.parse_args(argv)
    store_summary = _run_store(a.seed_start, a.store_seeds, bugs=frozenset(a.bug)) if a.store_seeds > 0 else None
    bugs = frozenset(a.bug)
    lease_bad = _run_lease(a.lease_start, a.lease_scenarios, bugs) if a.lease_scenarios > 0 else 0
    if a.lease_membership_scenarios > 0:
        lease_bad += _run_lease(a.lease_start, a.lease_membership_scenarios, bugs, membership=True)
    if a.lease_store_scenarios > 0:
        lease_bad += _run_lease(a.lease_start, a.lease_store_scenarios, bugs, store=True)
    total = Stats()
    failed: list[int] = []
    t0 = time.monotonic()
    done = 0
    with quiet_logs():
        for seed in range(a.seed_start, a.seed_start + a.seeds):
            st, bad = run_one(seed, bugs, a.phases, a.verbose)
            total.add(st)
            done += 1
            for phase, v in bad:
                failed.append(seed)
                print(f"VIOLATION seed={seed} phase={phase} {v}", file=sys.stderr, flush=True)
            if a.verbose:
                print(f"seed {seed}: {vars(st)}", file=sys.stderr)
            if done % 50 == 0:
                el = time.monotonic() - t0
                print(f"{done} seeds, {done / el:.1f} seeds/s, {len(failed)} violations", file=sys.stderr, flush=True)
            if a.max_seconds is not None and time.monotonic() - t0 > a.max_seconds:
                break
    el = time.monotonic() - t0
    summary = {"seeds": done, "seed_start": a.seed_start, "seconds": round(el, 2),
               "seeds_per_second": round(done / el, 2) if el else None, "violations": sorted(set(failed)),
               "bugs": sorted(bugs), "virtual_hours": round(total.virtual_ms / 3_600_000, 3),
               "stats": {k: v for k, v in vars(total).items() if isinstance(v, int)}}
    print(f"{done} seeds in {el:.1f}s = {summary['seeds_per_second']} seeds/s; "
          f"violations at seeds: {summary['violations'] or 'none'}", file=sys.stderr)
    summary["lease_scenarios"] = a.lease_scenarios
    summary["lease_membership_scenarios"] = a.lease_membership_scenarios
    summary["lease_store_scenarios"] = a.lease_store_scenarios
    summary["lease_violations"] = lease_bad
    if store_summary is not None:
        summary["store"] = store_summary
    print(json.dumps(summary))
    return 1 if failed or lease_bad or (store_summary and store_summary["violations"]) else 0


def _run_store(start: int, count: int, bugs: frozenset[str]) -> dict:
    """Storage simulator seeds start .. start+count-1 (store_sim.py); each violation printed."""
    bug = next((b for b in bugs if b in store_sim.STORE_BUGS), None)
    t0 = time.monotonic()
    bad: list[int] = []
    totals: dict[str, int] = {}
    for i, seed in enumerate(range(start, start + count)):
        try:
            st = store_sim.run_seed(seed, bug=bug)
        except Violation as v:
            bad.append(seed)
            print(f"STORE VIOLATION seed={seed} {v}", file=sys.stderr, flush=True)
            continue
        for k, v in vars(st).items():
            if isinstance(v, int):
                totals[k] = totals.get(k, 0) + v
        for k, v in st.disk.items():
            totals[f"disk_{k}"] = totals.get(f"disk_{k}", 0) + v
        if (i + 1) % 100 == 0:
            print(json.dumps({"event": "store_progress", "done": i + 1, "of": count, "violations": len(bad)}),
                  file=sys.stderr, flush=True)
    el = time.monotonic() - t0
    print(f"{count} storage seeds in {el:.1f}s; violations at seeds: {bad or 'none'}", file=sys.stderr, flush=True)
    return {"seeds": count, "seconds": round(el, 2), "violations": bad, "bug": bug, "stats": totals}


def _run_lease(start: int, count: int, bugs: frozenset[str], membership: bool = False, store: bool = False) -> int:
    """Lease scenarios start .. start+count-1; prints each violation as a pasteable scenario."""
    table = HoldFromFirstReportTable if "lease_hold_from_first_report" in bugs else lease_sim.HeartbeatTable
    rules = frozenset(MEMBERSHIP_RULE_OFF[b] for b in bugs if b in MEMBERSHIP_RULE_OFF) \
        | frozenset(WIPE_RULE_OFF[b] for b in bugs if b in WIPE_RULE_OFF) \
        | ({"store_fence"} if "store_no_fence" in bugs else set())
    t0 = time.monotonic()

    def progress(done: int, elections: int, bad: int) -> None:
        el = time.monotonic() - t0
        print(json.dumps({"event": "lease_progress", "membership": membership, "done": done, "of": count, "elections": elections,
                          "violations": bad, "per_second": round(done / el, 1) if el else None}),
              file=sys.stderr, flush=True)

    elections, bad = lease_sim.run_scenarios(start, count, table, progress, membership, rules, store)
    for i, sc, what in bad:
        print(f"LEASE VIOLATION scenario={i} {what}\n  {sc!r}", file=sys.stderr, flush=True)
    what = " with membership changes" if membership else " on a store backend" if store else ""
    print(f"{count} lease scenarios{what} ({elections} elections) in {time.monotonic() - t0:.1f}s; "
          f"{len(bad)} violations", file=sys.stderr, flush=True)
    return len(bad)


if __name__ == "__main__":
    sys.exit(main())
