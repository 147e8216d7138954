"""``make powerloss``: power cuts on real processes, every unsynced byte lost, nothing acked lost.

    python -m tests.powerloss.run [--rounds 200] [--seed 1] [--keep]

Three controllers (Raft, one embedded in the name server) and one group of three brokers run on
127.0.0.1, each process on its own LazyFS mount (tests/powerloss/lazyfs.py), while a routed producer
sends one message at a time and logs every ack. Each round waits for a full SyncStateSet and fresh
acks, then cuts the power of its victims: kill -9, LazyFS drops every write they did not fsync, and
they start again at once on what is left. The kinds of round:

    slave       one slave
    master      the master
    controller  one controller (the Raft leader every other time)
    minority    the master and the controller leader together
    all         every broker and every controller at once

Two phases, each a fresh cluster. Phase ``sync`` runs the brokers on the default `flush = "sync"`
(durable acknowledgements: power loss of every replica loses nothing; docs/controller.md, "The
premises of the promise") and cycles all, master, slave, controller, minority: 3/5 of the rounds.
Phase ``async`` runs `flush = "async"` (the explicit trade) with `min_in_sync_replicas = 2` (an ack
is then on two replicas, one of which survives any single power cut) and cycles slave, master,
controller, minority. At the end of each
phase every acked message must be served by the final master, and no MasterEpoch may have acked from
two brokers. The last line is JSON: ``rounds``, ``faults`` by kind, ``acked``, ``lost_acked``.
Exit 1 on a loss, a two-master epoch, or a kind that never ran. Where LazyFS cannot run (not root,
no /dev/fuse, no source) it says so, prints ``{"skipped": reason}`` and exits 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import shutil
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import lazyfs

ROOT = Path(__file__).resolve().parent.parent.parent
GROUP, TOPIC = "g0", "powerloss"
SETTLE_S = 30.0          # a full SyncStateSet before a round
RECOVER_S = 60.0         # acks again after a round
FRESH_ACKS = 10          # acks that show the group writable again
MAX_S = 3 * 3600


def say(msg: str) -> None:
    print(f"{time.strftime('%H:%M:%S')} {msg}", file=sys.stderr, flush=True)


@dataclass
class Phase:
    name: str
    flush: str
    kinds: list[str]
    rounds: int


@dataclass
class PhaseResult:
    name: str
    rounds: int = 0
    faults: Counter = field(default_factory=Counter)
    acked: int = 0
    lost: list[str] = field(default_factory=list)
    lost_by_round: dict[int, int] = field(default_factory=dict)
    epoch_conflicts: list[str] = field(default_factory=list)
    stuck_rounds: list[int] = field(default_factory=list)
    recover_s: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def summary(self) -> dict:
        rs = sorted(self.recover_s)
        return {"phase": self.name, "rounds": self.rounds, "faults": dict(self.faults), "acked": self.acked,
                "lost_acked": len(self.lost), "lost_by_round": self.lost_by_round,
                "epoch_conflicts": self.epoch_conflicts[:10], "stuck_rounds": self.stuck_rounds,
                "recover_p50_s": rs[len(rs) // 2] if rs else None, "recover_max_s": rs[-1] if rs else None,
                "problems": self.problems[:10]}


def mount_name(child_name: str) -> str:
    """The data directory (and so the LazyFS mount) a child process writes."""
    if child_name.startswith("broker-"):
        return child_name.removeprefix("broker-")           # broker-g0-r1 -> g0-r1
    return "controller-" + child_name.rsplit("-", 1)[1]       # namesrv-n1 / controller-n2


class Rig:
    """One phase's cluster on LazyFS, its producer and its fault rounds."""

    def __init__(self, exe: Path, data: Path, phase: Phase, rng: random.Random) -> None:
        from autoswitch.app.playground_cluster import Cluster, Layout
        from tests.procs import free_block

        self.phase, self.rng, self.data = phase, rng, data
        self.layout = Layout(data, base_port=free_block(30), groups=1, replicas=3, cluster="powerloss",
                             profile="fast", secure=False,
                             broker_extra=["--flush", phase.flush, "--min-in-sync-replicas", "2"],
                             controller_extra={"min_in_sync_replicas": 2})
        self.cluster = Cluster(self.layout)
        names = ["controller-n1", "controller-n2", "controller-n3", "g0-r0", "g0-r1", "g0-r2"]
        self.mounts = {n: lazyfs.Mount(exe, data / n, data / ".backing" / n, data / ".lazyfs" / n) for n in names}
        self.res = PhaseResult(phase.name)
        self.round_t: list[float] = []      # monotonic start of each round

    async def up(self) -> None:
        from autoswitch.controller.client import ControllerClient

        from autoswitch.app.demo_traffic import DemoProducer

        self.cluster.prepare_dir(fresh=True, wipe=True)
        for m in self.mounts.values():
            m.start()
        self.client = ControllerClient(self.layout.controller_addrs(), deadline_s=2.0, max_attempts=4,
                                       rpc_timeout_s=1.0)
        self.cluster.start_controllers()
        await self.cluster.wait_ports(list(self.cluster.children.values()), 60)
        await self.cluster.wait_leader(self.client, 60)
        self.cluster.start_brokers()
        await self.cluster.wait_masters(self.client, 60)
        self.ack_path = self.data / "acks.jsonl"
        self.producer = DemoProducer(self.layout.namesrv, GROUP, TOPIC, self.ack_path, rpc_timeout_s=1.0)
        self.stop = asyncio.Event()
        self.task = asyncio.ensure_future(self.producer.run(self.stop, max_messages=50_000_000, max_s=MAX_S))

    async def down(self) -> None:
        if getattr(self, "stop", None) is not None:
            self.stop.set()
            with contextlib.suppress(BaseException):
                await asyncio.wait_for(self.task, 10)
            await self.producer.close()
        if getattr(self, "client", None) is not None:
            await self.client.close()
        self.cluster.stop_all()
        for m in self.mounts.values():
            m.stop()
        self.cluster.release_dir()

    async def _acks_after(self, t: float, n: int, timeout_s: float) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if sum(1 for a in self.producer.acks[-n:] if a.t > t) >= n:
                return True
            await asyncio.sleep(0.05)
        return False

    async def settle(self) -> None:
        from autoswitch.app.demo_traffic import wait_full_sync_state_set

        sss = await wait_full_sync_state_set(self.client, GROUP, 3, SETTLE_S)
        if len(sss) < 3:
            self.res.problems.append(f"round {len(self.round_t)}: SyncStateSet {sss} after {SETTLE_S} s")
        await self._acks_after(time.monotonic(), FRESH_ACKS, 15)

    async def victims(self, kind: str, i: int) -> list:
        info = await self.client.get_replica_info(GROUP)
        md = await self.client.get_metadata()
        kids = self.cluster.children
        brokers = [c for n, c in sorted(kids.items()) if n.startswith("broker-")]
        ctls = [c for n, c in sorted(kids.items()) if not n.startswith("broker-")]
        master = self.cluster.child_by_addr(info.master_address) if info.master_broker_id else None
        leader = next((c for c in ctls if c.name.endswith(f"-{md.leader_id}")), None) if md.leader_id else None
        if kind == "slave":
            return [self.rng.choice([b for b in brokers if b is not master])]
        if kind == "master":
            return [master or self.rng.choice(brokers)]
        if kind == "controller":
            followers = [c for c in ctls if c is not leader]
            return [leader if leader is not None and i % 2 == 0 else self.rng.choice(followers)]
        if kind == "minority":
            return [master or self.rng.choice(brokers), leader or self.rng.choice(ctls)]
        assert kind == "all", kind
        return brokers + ctls

    async def one_round(self, i: int, kind: str) -> None:
        await self.settle()
        victims = await self.victims(kind, i)
        t0 = time.monotonic()
        self.round_t.append(t0)
        for v in victims:
            self.cluster.kill9(v)
        for v in victims:
            self.mounts[mount_name(v.name)].clear_cache()
        for v in victims:
            v.start()
        self.res.faults[kind] += 1
        self.res.rounds += 1
        if await self._acks_after(t0, FRESH_ACKS, RECOVER_S):
            self.res.recover_s.append(round(self.producer.acks[-FRESH_ACKS].t - t0, 3))
        else:
            self.res.stuck_rounds.append(i)
        say(f"{self.phase.name} round {i + 1}/{self.phase.rounds} {kind}: "
            f"{','.join(v.name for v in victims)}; acked {len(self.producer.acks)}"
            f"{'' if i not in self.res.stuck_rounds else f'; no acks within {RECOVER_S} s'}")

    async def check(self) -> None:
        from autoswitch.app.demo_traffic import load_ack_log, lost_acked, wait_full_sync_state_set

        self.stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self.task, 10)
        await wait_full_sync_state_set(self.client, GROUP, 3, SETTLE_S)
        acks = load_ack_log(self.ack_path)
        self.res.acked = len(acks)
        by_epoch: dict[int, int] = {}
        for a in self.producer.acks:
            prev = by_epoch.setdefault(a.epoch, a.broker_id)
            if prev != a.broker_id:
                self.res.epoch_conflicts.append(f"epoch {a.epoch} acked by brokers {prev} and {a.broker_id}")
        info = await self.client.get_replica_info(GROUP)
        if not info.master_address:
            self.res.problems.append("no master at the end: every acked message counts as lost")
            self.res.lost = [a["msg_id"] for a in acks]
            return
        missing = await lost_acked(info.master_address, TOPIC, {a["msg_id"] for a in acks}, wait_s=15)
        self.res.lost = sorted(missing)
        when = {a.msg_id: a.t for a in self.producer.acks}
        for mid in missing:
            t = when.get(mid)
            r = sum(1 for s in self.round_t if t is not None and s <= t) - 1
            self.res.lost_by_round[r] = self.res.lost_by_round.get(r, 0) + 1


async def run_phase(exe: Path, out: Path, phase: Phase, rng: random.Random, deadline: float) -> PhaseResult:
    rig = Rig(exe, out / phase.name, phase, rng)
    say(f"phase {phase.name}: flush={phase.flush}, {phase.rounds} rounds of {phase.kinds} in {rig.data}")
    try:
        await rig.up()
        for i in range(phase.rounds):
            if time.monotonic() > deadline:
                rig.res.problems.append(f"time bound reached after {i} rounds")
                break
            await rig.one_round(i, phase.kinds[i % len(phase.kinds)])
        await rig.check()
    except Exception as e:  # noqa: BLE001 - one line in the report, the cluster still comes down
        rig.res.problems.append(f"{type(e).__name__}: {e}")
    finally:
        await rig.down()
    return rig.res


def phases(rounds: int) -> list[Phase]:
    """From 9 rounds on, every kind runs (the sync phase, the default, cycles 5 kinds and gets 3/5
    of the rounds; the async phase 4)."""
    n_async = max(1, rounds * 2 // 5)
    return [Phase("sync", "sync", ["all", "master", "slave", "controller", "minority"], rounds - n_async),
            Phase("async", "async", ["slave", "master", "controller", "minority"], n_async)]


async def amain(args: argparse.Namespace) -> int:
    try:
        exe = lazyfs.binary()
    except lazyfs.Unavailable as e:
        say(f"powerloss cannot run here: {e}")
        print(json.dumps({"skipped": str(e)}))
        return 0
    out = Path(args.out).resolve()
    rng = random.Random(args.seed)
    t0 = time.monotonic()
    results = []
    for ph in phases(args.rounds):
        if ph.rounds:
            results.append(await run_phase(exe, out, ph, rng, t0 + args.max_s))
    faults: Counter = Counter()
    for r in results:
        faults.update(r.faults)
    summary = {
        "rounds": sum(r.rounds for r in results), "faults": dict(faults),
        "acked": sum(r.acked for r in results), "lost_acked": sum(len(r.lost) for r in results),
        "epoch_conflicts": sum(len(r.epoch_conflicts) for r in results),
        "stuck_rounds": sum(len(r.stuck_rounds) for r in results),
        "seconds": round(time.monotonic() - t0, 1), "phases": [r.summary() for r in results],
    }
    expected = {k for ph in phases(args.rounds) for k in ph.kinds[:ph.rounds]}   # every kind scheduled ran
    bad = (summary["lost_acked"] or summary["epoch_conflicts"] or expected - set(faults)
           or any(r.problems for r in results))
    if not bad and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    elif bad:
        say(f"FAILED: data and logs kept in {out}")
    print(json.dumps(summary))
    return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.powerloss.run")
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--out", default=str(ROOT / "run-data" / "powerloss"))
    ap.add_argument("--max-s", type=float, default=MAX_S)
    ap.add_argument("--keep", action="store_true", help="keep data and logs after a clean run")
    args = ap.parse_args(argv)
    if not 1 <= args.rounds <= 10_000:
        ap.error("--rounds must be in [1, 10000]")
    return asyncio.run(amain(args))


if __name__ == "__main__":
    sys.exit(main())
