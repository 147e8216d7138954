"""A zone cut (issue 35 item 2): three zones, each one controller and one broker in network
namespaces of their own; acked produce and a consumer from the root namespace. The group's zone
preference puts the master's zone first and, of the two others, the one an election would not
pick by itself (the higher brokerId) second. Then the master's whole zone is cut off (nftables:
from every other node and from the clients). The next master must be in the preferred surviving
zone, its election must name the lost zone, and after healing every acknowledged and every
consumed message must be on the final master where it was acknowledged (tests/chaos/brokers.py
``final_check``).

    python -m tests.chaos.zones [--seconds 30] [--out DIR]      (root: network namespaces)

The last line is JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from autoswitch.base.features import SUPPORTED_LEVEL

from . import netns as nsmod
from .brokers import BRK, CTL, ROOT, World, consumer, ctl_state, final_check, producer, started

ZONE = {"n1": "z1", "b1": "z1", "n2": "z2", "b2": "z2", "n3": "z3", "b3": "z3"}
WAIT_S = 60.0


def admin(w: World, *args: str) -> dict:
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *args, "--controller", w.ctl_spec, "--json"],
                         capture_output=True, text=True, timeout=60, cwd=ROOT)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return {"ok": False, "error": {"message": f"rc={out.returncode} {out.stderr[-500:]}"}}


async def wait_for(what: str, pred, timeout: float = WAIT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = await pred()
        if got:
            return got
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{what}: not within {timeout} s")


async def scenario(w: World, seconds: float) -> dict:
    async def whole():
        _, info = await ctl_state(w)
        if info is not None and info.master_broker_id and len(info.sync_state_set) == len(BRK):
            return info
        return None

    info = await wait_for("a master with every replica in sync", whole)
    # a new cluster starts at the newest level (zones need 2): finalizing it again is a no-op
    fin = admin(w, "finalize-features", "--level", str(SUPPORTED_LEVEL))
    if not fin.get("ok"):
        return {"problems": [f"finalize-features: {fin}"]}
    master = w.by_addr(info.master_address)
    assert master is not None
    ids = {b: await broker_id(w, b) for b in BRK}
    rest = sorted((b for b in BRK if b != master), key=lambda b: -ids[b])      # the higher brokerId first
    order = [ZONE[master], *(ZONE[b] for b in rest)]
    pref = admin(w, "set-zone-preference", "-b", "g1", "--zones", ",".join(order))
    if not pref.get("ok"):
        return {"problems": [f"set-zone-preference: {pref}"]}
    stop_at = time.monotonic() + seconds
    acked: list[dict] = []
    consumed: dict[str, tuple[int, int]] = {}
    stats: dict = {}
    tasks = [asyncio.create_task(producer(w, i, stop_at, acked, stats)) for i in range(2)]
    tasks.append(asyncio.create_task(consumer(w, stop_at, consumed)))
    await wait_for("acks before the cut", lambda: asyncio.sleep(0, result=len(acked) >= 50))
    cut = [n for n, z in ZONE.items() if z == ZONE[master]]
    others = [n for n in CTL + BRK if n not in cut]
    for n in cut:
        w.net.isolate(n, others)
        w.net.isolate_from_host(n)
    for n in others:
        w.net.isolate(n, cut)
    t_cut = time.monotonic()
    acked_at_cut = len(acked)

    async def moved():
        _, now = await ctl_state(w)
        return now if now is not None and now.master_broker_id and w.by_addr(now.master_address) != master else None

    after = await wait_for("a master outside the cut zone", moved)
    failover_s = round(time.monotonic() - t_cut, 2)
    new_master = w.by_addr(after.master_address)
    explained = admin(w, "explain", "-b", "g1")
    decisions = explained.get("result", {}).get("decisions", []) if explained.get("ok") else []
    won = next((d for d in decisions if d.get("outcome") == "elected" and d.get("master_epoch") == after.master_epoch),
               None)
    await asyncio.gather(*tasks)
    w.net.heal()
    await asyncio.sleep(3.0)
    res = await final_check(w, acked, consumed)
    problems = list(res.get("problems", []))
    if new_master != rest[0]:
        problems.append(f"new master {new_master}, the preferred surviving zone's broker is {rest[0]}")
    if won is None or ZONE[master] not in won.get("zones_lost", []):
        problems.append(f"the election does not name the lost zone {ZONE[master]}: {won}")
    else:
        loser = next((v for v in won["candidates"] if v["broker_id"] == ids[rest[1]]), {})
        if "zone preference" not in loser.get("why", ""):
            problems.append(f"broker {ids[rest[1]]} did not lose by the zone preference: {loser}")
    return {"acked": len(acked), "acked_after_cut": len(acked) - acked_at_cut, "consumed": len(consumed),
            "cut_zone": ZONE[master], "old_master": master, "new_master": new_master,
            "preference": order, "broker_ids": ids, "failover_s": failover_s,
            "explained": won.get("summary") if won else None, "produce_failures": stats,
            **{k: v for k, v in res.items() if k != "problems"}, "problems": problems}


async def broker_id(w: World, b: str) -> int:
    from autoswitch.broker.client.client import AdminClient

    c = AdminClient(w.addr(b), max_retries=2, timeout_s=3.0)
    try:
        return int((await c.get_status()).broker_id)
    finally:
        await c.close()


def run(out: Path, seconds: float = 20.0) -> dict:
    net = nsmod.Netns(CTL + BRK, prefix="aszn", subnet="10.81.0")
    w = World(out, net)
    for n in BRK:
        w.procs[n].argv += ["--zone", ZONE[n]]
    with started(w):
        return asyncio.run(scenario(w, seconds))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=30.0)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    why = nsmod.can_run()
    if why is not None:
        print(json.dumps({"skipped": why}))
        return 2
    out = Path(a.out) if a.out else Path(tempfile.mkdtemp(prefix="aszones-"))
    (out / "logs").mkdir(parents=True, exist_ok=True)
    res = run(out, a.seconds)
    print(json.dumps(res))
    return 0 if not res["problems"] else 1


if __name__ == "__main__":
    sys.exit(main())
