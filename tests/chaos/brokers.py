"""Broker chaos: 3 controllers + 3 brokers (controller mode, lease on, ack mode all), each in
its own namespace; producers and consumers in the root namespace. Faults hit the master and the
controller leader: kill -9 (restart), SIGSTOP/SIGCONT, nftables isolation of the master, of the
controller leader. Afterwards every acknowledged and every consumed message must be on the final
master at the same queue/phy offset, and no two brokers may have acked in one MasterEpoch."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

from . import netns as nsmod

ROOT = Path(__file__).resolve().parent.parent.parent
CTL = ["n1", "n2", "n3"]
BRK = ["b1", "b2", "b3"]
CPORT, BPORT = 7101, 7201
TOPIC = "chaos"
TOML = """
[controller]
# a private network namespace made by this test: plaintext is asked for, not an accident
allow_insecure = true
heartbeat_timeout_ms = 1000
scan_interval_ms = 100
propose_timeout_s = 2.0
read_timeout_s = 1.5
state_check_interval_s = 2.0
"""
# Range digests verified every second over small ranges: many comparisons under the faults.
BROKER_TOML = """
[ha]
digest_interval_s = 1.0
digest_range_bytes = 65536
"""
MAX_PRODUCES = 20_000


class P:
    """One process in a namespace, ended only by its PID."""

    def __init__(self, name: str, net: nsmod.Netns, argv: list[str], logs: Path) -> None:
        self.name, self.net, self.argv, self.logs = name, net, argv, logs
        self.popen: subprocess.Popen | None = None
        self.gen = 0

    def start(self) -> None:
        self.gen += 1
        log = open(self.logs / f"{self.name}-{self.gen}.log", "ab")
        self.popen = subprocess.Popen(self.net.cmd(self.name, [sys.executable, "-m", "autoswitch", *self.argv]),
                                      cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                      env=dict(os.environ, PYTHONUNBUFFERED="1"))
        log.close()

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def sig(self, s: int) -> None:
        if self.alive():
            os.kill(self.popen.pid, s)

    def kill9(self) -> None:
        if self.alive():
            os.kill(self.popen.pid, signal.SIGKILL)
            self.popen.wait(10)

    def stop(self) -> None:
        if self.alive():
            os.kill(self.popen.pid, signal.SIGCONT)
            os.kill(self.popen.pid, signal.SIGTERM)
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.popen.pid, signal.SIGKILL)
                self.popen.wait(10)


class World:
    def __init__(self, out: Path, net: nsmod.Netns | None = None) -> None:
        self.out = out
        self.net = net or nsmod.Netns(CTL + BRK)
        ip = self.net.ip
        peers = ",".join(f"{n}={ip[n]}:{CPORT}" for n in CTL)
        self.ctl_spec = ",".join(f"{ip[n]}:{CPORT}" for n in CTL)
        toml = out / "controller.toml"
        toml.write_text(TOML)
        btoml = out / "broker.toml"
        btoml.write_text(BROKER_TOML)
        logs = out / "logs"
        self.procs: dict[str, P] = {}
        for n in CTL:
            self.procs[n] = P(n, self.net, ["controller", "--node-id", n, "--peers", peers, "--data-dir",
                                            str(out / f"data-{n}"), "--config", str(toml)], logs)
        for b in BRK:
            self.procs[b] = P(b, self.net, ["broker", "--cluster", "c1", "--group", "g1",
                                            "--listen", f"{ip[b]}:{BPORT}", "--ha-listen", f"{ip[b]}:{BPORT + 1}",
                                            "--data-dir", str(out / f"data-{b}"), "--controllers", self.ctl_spec,
                                            "--heartbeat-timeout-ms", "1000", "--ack-mode", "all",
                                            "--ack-timeout", "3", "--master-lease-ms", "600",
                                            "--config", str(btoml), "--allow-insecure"], logs)     # our own namespace

    def addr(self, b: str) -> str:
        return f"{self.net.ip[b]}:{BPORT}"

    def by_addr(self, addr: str) -> str | None:
        return next((b for b in BRK if self.addr(b) == addr), None)


async def ctl_state(w: World):
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    leader, info = None, None
    async with ControllerClient(w.ctl_spec, deadline_s=2, rpc_timeout_s=0.8) as c:
        for n in CTL:
            with contextlib.suppress(ControllerRpcError):
                m = await c.call_node(f"{w.net.ip[n]}:{CPORT}", "GetMetaData", pb.GetMetaDataRequest(), timeout_s=0.8)
                if m.is_leader:
                    leader = n
        with contextlib.suppress(ControllerRpcError):
            info = await c.get_replica_info("g1")
    return leader, info


async def producer(w: World, pid: int, stop_at: float, acked: list[dict], stats: dict) -> None:
    from autoswitch.broker.client.client import ProducerClient

    from autoswitch.proto import broker_pb2 as bpb

    target = BRK[pid % len(BRK)]
    clients: dict[str, ProducerClient] = {}
    try:
        for _ in range(MAX_PRODUCES):
            if time.monotonic() >= stop_at:
                return
            c = clients.get(target) or clients.setdefault(target, ProducerClient(w.addr(target), timeout_s=3.0, max_retries=1))
            mid = uuid.uuid4().hex
            try:
                out = await c.produce(TOPIC, [f"p{pid}-{mid}".encode()], [mid])
            except Exception:  # noqa: BLE001 - unreachable/paused broker: try another
                stats["errors"] = stats.get("errors", 0) + 1
                target = random.choice(BRK)
                await asyncio.sleep(0.05)
                continue
            if out.ok:
                for r in out.acked():
                    acked.append({"msg_id": r.msg_id, "phy": r.phy_offset, "queue": r.queue_offset,
                                  "epoch": r.epoch, "broker_id": out.broker_id, "by": target})
            else:
                stats[bpb.Status.Name(out.status)] = stats.get(bpb.Status.Name(out.status), 0) + 1
                nxt = w.by_addr(out.master_addr) if out.master_addr else None
                target = nxt or random.choice(BRK)
                await asyncio.sleep(0.02)
    finally:
        for c in clients.values():
            with contextlib.suppress(Exception):
                await c.close()


async def consumer(w: World, stop_at: float, seen: dict[str, tuple[int, int]]) -> None:
    """Reads what each broker exposes (below its confirmOffset) — consumers must never see
    data that a later master lacks."""
    from autoswitch.broker.client.client import ConsumerClient

    clients = {b: ConsumerClient(w.addr(b), timeout_s=1.0) for b in BRK}
    pos = dict.fromkeys(BRK, 0)
    try:
        while time.monotonic() < stop_at:
            for b in BRK:
                with contextlib.suppress(Exception):
                    r = await clients[b].consume(TOPIC, pos[b], 200)
                    for m in r.messages:
                        seen.setdefault(m.msg_id, (m.queue_offset, m.phy_offset))
                    if r.messages:
                        pos[b] = r.next_queue_offset
            await asyncio.sleep(0.2)
    finally:
        for c in clients.values():
            with contextlib.suppress(Exception):
                await c.close()


async def faults(w: World, stop_at: float, rng: random.Random, log: list[str]) -> None:
    kinds = ["kill_master", "partition_master", "stop_master", "partition_ctl_leader", "kill_ctl_leader"]
    i = 0
    await asyncio.sleep(4.0)
    while time.monotonic() < stop_at - 8:
        kind = kinds[i] if i < len(kinds) else rng.choice(kinds)
        i += 1
        leader, info = await ctl_state(w)
        master = w.by_addr(info.master_address) if info is not None and info.master_broker_id else None
        log.append(f"{time.strftime('%H:%M:%S')} {kind} (ctl leader {leader}, master {master} "
                   f"epoch {info.master_epoch if info else '?'})")
        if kind.endswith("master") and master is None or kind.endswith("ctl_leader") and leader is None:
            await asyncio.sleep(1.0)
            continue
        if kind == "kill_master":
            w.procs[master].kill9()
            await asyncio.sleep(3.0)
            w.procs[master].start()
        elif kind == "stop_master":
            w.procs[master].sig(signal.SIGSTOP)
            await asyncio.sleep(3.0)
            w.procs[master].sig(signal.SIGCONT)
        elif kind == "partition_master":
            others = [n for n in CTL + BRK if n != master]
            w.net.isolate(master, others)
            for n in others:
                w.net.isolate(n, [master])
            await asyncio.sleep(4.0)
            w.net.heal()
        elif kind == "partition_ctl_leader":
            others = [n for n in CTL + BRK if n != leader]
            w.net.isolate(leader, others)
            for n in others:
                w.net.isolate(n, [leader])
            await asyncio.sleep(4.0)
            w.net.heal()
        else:
            w.procs[leader].kill9()
            await asyncio.sleep(2.0)
            w.procs[leader].start()
        await asyncio.sleep(rng.uniform(2.0, 4.0))


async def final_check(w: World, acked: list[dict], consumed: dict[str, tuple[int, int]]) -> dict:
    from autoswitch.broker.client.client import ConsumerClient

    deadline = time.monotonic() + 30
    master, info = None, None
    while time.monotonic() < deadline:
        _, info = await ctl_state(w)
        if info is not None and info.master_broker_id:
            master = w.by_addr(info.master_address)
            if master is not None:
                break
        await asyncio.sleep(0.5)
    if master is None:
        return {"final_master": None, "problems": ["no master within 30 s after healing"]}
    on_master: dict[str, tuple[int, int]] = {}
    async with contextlib.AsyncExitStack() as st:
        c = ConsumerClient(w.addr(master), timeout_s=3.0)
        st.push_async_callback(c.close)
        q = 0
        for _ in range(10_000):
            r = await c.consume(TOPIC, q, 500)
            for m in r.messages:
                on_master[m.msg_id] = (m.queue_offset, m.phy_offset)
            if not r.messages:
                break
            q = r.next_queue_offset
    problems = []
    epoch_broker: dict[int, int] = {}
    for a in acked:
        prev = epoch_broker.setdefault(a["epoch"], a["broker_id"])
        if prev != a["broker_id"]:
            problems.append(f"epoch {a['epoch']} acked by brokers {prev} and {a['broker_id']}")
        got = on_master.get(a["msg_id"])
        if got != (a["queue"], a["phy"]):
            problems.append(f"acked {a['msg_id']} at {(a['queue'], a['phy'])} (epoch {a['epoch']}), final master "
                            f"{master} has {got}")
    for mid, where in consumed.items():
        if on_master.get(mid) != where:
            problems.append(f"consumed {mid} at {where}, final master {master} has {on_master.get(mid)}")
    return {"final_master": master, "final_epoch": info.master_epoch, "messages_on_master": len(on_master),
            "problems": problems[:20], "problem_count": len(problems), "digests": await digest_counts(w)}


async def digest_counts(w: World) -> dict[str, int]:
    """The slaves' range-digest counters now (their processes' lives since the last restart)."""
    from autoswitch.broker.client.client import AdminClient

    total = {"rounds": 0, "verified": 0, "mismatches": 0, "repairs": 0}
    for b in BRK:
        c = AdminClient(w.addr(b), max_retries=0, timeout_s=2.0)
        try:
            st = await c.get_status()
            slave = json.loads(st.digests_json).get("slave", {}) if st.digests_json else {}
            for k in total:
                total[k] += int(slave.get(k, 0))
        except Exception:  # noqa: BLE001 - a broker down at the end counts nothing
            pass
        finally:
            await c.close()
    return total


async def scenario(w: World, seconds: float, seed: int) -> dict:
    rng = random.Random(seed)
    t0 = time.monotonic()
    stop_at = t0 + seconds
    acked: list[dict] = []
    consumed: dict[str, tuple[int, int]] = {}
    stats: dict = {}
    fault_log: list[str] = []
    tasks = [asyncio.create_task(producer(w, i, stop_at, acked, stats)) for i in range(2)]
    tasks.append(asyncio.create_task(consumer(w, stop_at, consumed)))
    await faults(w, stop_at, rng, fault_log)
    await asyncio.gather(*tasks)
    w.net.heal()
    for p in w.procs.values():
        p.sig(signal.SIGCONT)
        if not p.alive():
            p.start()
    await asyncio.sleep(3.0)
    res = await final_check(w, acked, consumed)
    (w.out / "acked.jsonl").write_text("".join(json.dumps(a) + "\n" for a in acked))
    return {"acked": len(acked), "consumed": len(consumed), "produce_failures": stats, "faults": fault_log,
            "seconds": round(time.monotonic() - t0, 1), **res}


@contextlib.contextmanager
def started(w: World) -> Iterator[World]:
    """The namespaces up, the controllers and then the brokers started; on exit every process
    stopped (by PID) and the namespaces removed."""
    try:
        w.net.up()
        for n in CTL:
            w.procs[n].start()
        time.sleep(1.0)
        for b in BRK:
            w.procs[b].start()
        yield w
    finally:
        for p in w.procs.values():
            with contextlib.suppress(Exception):
                p.stop()
        w.net.down()


def run(out: Path, seconds: float, seed: int) -> dict:
    with started(World(out)) as w:
        time.sleep(4.0)
        return asyncio.run(scenario(w, seconds, seed))
