"""`make upgrade-test`: a rolling upgrade from the previous release to this tree and back, under
continuous acked produce and a consumer group, with real processes (issue 34 item 4).

    python -m tests.upgrade.run [--groups 2] [--work DIR]

The previous release (docs/releases.toml) and this tree are installed side by side
(tests/upgrade/installs.py). A cluster of the old version starts: 3 controllers, a name server,
``groups`` groups of 3 brokers (ack mode all), one producer per group (this tree's CLI, as an
application would run it) and a consumer group per group. Then one process at a time is
replaced by the new version (controllers first, followers before the leader; then each group's
slaves before its master, whose SIGTERM hands over; the name server last), the feature level is
finalized at the old level (the new release's own level only in a dry run that must find every
member ready: finalizing it would close the way back), and everything rolls back to the old
version the same way. After every step: the cluster is whole again (a leader, every
broker back in its SyncStateSet), no process refused to start, and the consumer group reads on
from where it stopped. At the end: every acked message is read back. The last line is JSON:
``steps``, ``acked``, ``lost_acked``, ``gap_ms_p99`` (the producers' largest ack gap around each
master restart), ``refused`` and ``consumer_resumed``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoswitch.app.launcher import Child, stop_all
from autoswitch.base import features
from bench.producing_cluster import pct
from tests.procs import HOST, free_port, wait_port
from tests.upgrade.installs import Install, install_commit, install_tree, plant_epochfile_v2, previous_release

CLUSTER, TOPIC, CG = "c1", "t", "upgrade-cg"
HEARTBEAT_TIMEOUT_MS = 3000
CONTROLLER_TOML = f"""
[controller]
heartbeat_timeout_ms = {HEARTBEAT_TIMEOUT_MS}
scan_interval_ms = 100
propose_timeout_s = 2.0
read_timeout_s = 1.5
"""
STEP_TIMEOUT_S = 90.0       # a replaced process back in service (bounded: a stuck step fails the run)
CONSUME_BATCH = 20


def log(event: str, **kw: Any) -> None:
    print(json.dumps({"upgrade": event, **kw}), flush=True)


@dataclass
class Proc:
    name: str
    kind: str                  # controller | namesrv | broker
    group: str = ""
    port: int = 0
    child: Child | None = None
    install: Install | None = None
    starts: int = 0


@dataclass
class UpgradeCluster:
    work: Path
    groups: tuple[str, ...]
    procs: dict[str, Proc] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.work.mkdir(parents=True, exist_ok=True)
        self.ctl_ids = ("n1", "n2", "n3")
        self.ctl_addr = {n: f"{HOST}:{free_port()}" for n in self.ctl_ids}
        self.raft_addr = {n: f"{HOST}:{free_port()}" for n in self.ctl_ids}
        self.namesrv = f"{HOST}:{free_port()}"
        self.ha_port: dict[str, int] = {}
        (self.work / "controller.toml").write_text(CONTROLLER_TOML)
        for n in self.ctl_ids:
            self.procs[n] = Proc(n, "controller", port=int(self.ctl_addr[n].rsplit(":", 1)[1]))
        self.procs["namesrv"] = Proc("namesrv", "namesrv", port=int(self.namesrv.rsplit(":", 1)[1]))
        for g in self.groups:
            for i in (1, 2, 3):
                name = f"{g}-b{i}"
                self.procs[name] = Proc(name, "broker", group=g, port=free_port())
                self.ha_port[name] = free_port()

    @property
    def controllers(self) -> str:
        return ",".join(self.ctl_addr.values())

    def args(self, p: Proc) -> list[str]:
        if p.kind == "controller":
            return ["controller", "--node-id", p.name, "--peers", ",".join(f"{n}={a}" for n, a in self.ctl_addr.items()),
                    "--raft-peers", ",".join(f"{n}={a}" for n, a in self.raft_addr.items()),
                    "--data-dir", str(self.work / f"ctl-{p.name}"), "--config", str(self.work / "controller.toml")]
        if p.kind == "namesrv":
            return ["namesrv", "--listen", self.namesrv, "--route-ttl-s", "5", "--controllers", self.controllers]
        return ["broker", "--cluster", CLUSTER, "--group", p.group, "--listen", f"{HOST}:{p.port}",
                "--ha-listen", f"{HOST}:{self.ha_port[p.name]}", "--data-dir", str(self.work / f"broker-{p.name}"),
                "--controllers", self.controllers, "--namesrv", self.namesrv,
                "--heartbeat-timeout-ms", str(HEARTBEAT_TIMEOUT_MS), "--ack-mode", "all", "--ack-timeout", "3"]

    def start(self, name: str, inst: Install, wait: bool = True) -> Child:
        p = self.procs[name]
        p.starts += 1
        p.install = inst
        p.child = inst.child(f"{name}-{p.starts}-{inst.label}", self.args(p), self.work / "logs").start()
        if wait:
            wait_port(p.port, timeout=30, proc=p.child.popen)
        return p.child

    def stop(self, name: str) -> int | None:
        p = self.procs[name]
        assert p.child is not None
        code, _forced = p.child.stop(30)
        return code

    def stop_everything(self) -> None:
        stop_all([p.child for p in self.procs.values() if p.child is not None], 15)


# ---------------------------------------------------------------------------- what the cluster says


async def _controller_view(c: UpgradeCluster) -> dict[str, dict]:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    out: dict[str, dict] = {}
    async with ControllerClient(c.controllers, deadline_s=5) as client:
        for n, addr in c.ctl_addr.items():
            try:
                m = await client.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=2.0)
            except ControllerRpcError:
                continue
            out[n] = {"leader": m.leader_id, "commit": m.commit_index, "applied": m.applied_index,
                      "version": m.version, "paused_ms": m.lease_grants_paused_ms}
    return out


async def _sync_state(c: UpgradeCluster, groups: tuple[str, ...]) -> list[Any]:
    from autoswitch.controller.client import ControllerClient

    async with ControllerClient(c.controllers, deadline_s=10) as client:
        return await client.get_sync_state_data(groups)


def _groups(c: UpgradeCluster) -> dict[str, tuple[int | None, set[int], set[int]]]:
    """group -> (master, SyncStateSet, alive replicas) as the controller leader says."""
    return {d.replica_info.broker_name: (d.replica_info.master_broker_id or None, set(d.replica_info.sync_state_set),
                                         {m.broker_id for m in d.members if m.alive})
            for d in asyncio.run(_sync_state(c, c.groups))}


def whole(c: UpgradeCluster) -> str | None:
    """None when every controller answers with one leader and has applied what it knows, and every
    group has a master with all 3 replicas alive and in its SyncStateSet; else what is missing."""
    try:
        view = asyncio.run(_controller_view(c))
        if len(view) < 3 or len({v["leader"] for v in view.values()}) != 1 or not next(iter(view.values()))["leader"]:
            return f"controllers {view}"
        if any(v["commit"] - v["applied"] > 2 for v in view.values()):
            return f"controllers applying {view}"
        groups = _groups(c)
    except Exception as e:  # noqa: BLE001 - while a process restarts every kind of refusal is "not yet"
        return f"{type(e).__name__}: {e}"
    for g in c.groups:
        m, sss, alive = groups.get(g, (None, set(), set()))
        if m is None or sss != {1, 2, 3} or alive != {1, 2, 3}:
            return f"{g}: master {m}, SyncStateSet {sorted(sss)}, alive {sorted(alive)}"
    return None


def wait_whole(c: UpgradeCluster, what: str, timeout_s: float = STEP_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    last = "never checked"
    while time.monotonic() < deadline:
        for p in c.procs.values():
            if p.child is not None and not p.child.alive():
                raise StepFailed(f"{what}: {p.name} ({p.install.label if p.install else '?'}) exited "
                                 f"{p.child.exit_code}: {p.child.log_text()[-1500:]}")
        last = whole(c) or ""
        if not last:
            return
        time.sleep(0.2)
    raise StepFailed(f"{what}: not whole within {timeout_s:.0f} s: {last}")


def wait_grants(c: UpgradeCluster, name: str, started_wall: float) -> None:
    """A restarted controller may refuse masters their leases for up to 3 heartbeat timeouts
    (its pause after a restart, and the holds it takes replaying elections older than a heartbeat
    timeout: docs/controller.md); restarting the next one before that ends leaves the masters'
    leases without a majority and pauses every write. Every release says how long
    (GetMetaData lease_grants_paused_ms, /readyz): wait for 0, as docs/operations.md says."""
    deadline = time.monotonic() + 3 * HEARTBEAT_TIMEOUT_MS / 1000 + STEP_TIMEOUT_S
    while time.monotonic() < deadline:
        if asyncio.run(_controller_view(c)).get(name, {}).get("paused_ms", 1) == 0:
            log("lease_grants_resumed", process=name, waited_s=round(time.time() - started_wall, 2))
            return
        time.sleep(0.2)
    raise StepFailed(f"{name} did not grant leases again in time")


class StepFailed(Exception):
    pass


def master_name(c: UpgradeCluster, group: str) -> str:
    """The process serving as the group's master (brokerIds are the controller's, not our names)."""
    (d,) = asyncio.run(_sync_state(c, (group,)))
    a = next(m.address for m in d.members if m.broker_id == d.replica_info.master_broker_id)
    return next(p.name for p in c.procs.values() if p.kind == "broker" and f"{HOST}:{p.port}" == a)


def leader_name(c: UpgradeCluster) -> str:
    view = asyncio.run(_controller_view(c))
    return next(iter(view.values()))["leader"]


# ---------------------------------------------------------------------------- clients


def _cli(*args: str, timeout: float = 60) -> dict:
    r = subprocess.run([sys.executable, "-m", "autoswitch", *args, "--json"], capture_output=True, text=True,
                       timeout=timeout)
    lines = [json.loads(x) for x in r.stdout.splitlines() if x.strip().startswith("{")]
    return {"rc": r.returncode, "lines": lines, "stderr": r.stderr[-1500:]}


def producer(c: UpgradeCluster, group: str) -> Child:
    """This tree's CLI producer, as an application runs it (ended by SIGTERM at the end)."""
    return Child(f"producer-{group}", ["produce", "--namesrv", c.namesrv, "--group", group, "--topic", TOPIC,
                                       "--count", "1000000", "--size", "64", "--duration-s", "3600",
                                       "--interval-ms", "10", "--ack-log", str(c.work / f"acks-{group}.jsonl"),
                                       "--retry-deadline-s", "60", "--timeout", "2"],
                 c.work / "logs" / f"producer-{group}.log").start()


def consume_next(c: UpgradeCluster, group: str, expect_from: int | None) -> tuple[int, int]:
    """The consumer group reads CONSUME_BATCH more messages of ``group``: (first, next) queue
    offsets. ``expect_from``: where it stopped last time (it must resume there)."""
    r = _cli("consume", "--namesrv", c.namesrv, "--group", group, "--topic", TOPIC, "-g", CG,
             "--count", str(CONSUME_BATCH))
    if r["rc"] != 0 or not r["lines"] or not r["lines"][-1].get("ok"):
        raise StepFailed(f"consumer group on {group}: {r}")
    recs = [x for x in r["lines"][:-1] if "queue_offset" in x]
    if not recs:
        raise StepFailed(f"consumer group on {group} read nothing: {r['lines'][-1]}")
    first, nxt = recs[0]["queue_offset"], r["lines"][-1]["result"]["next_queue_offset"]
    if expect_from is not None and first != expect_from:
        raise StepFailed(f"consumer group on {group} resumed at {first}, it had stopped at {expect_from}")
    return first, nxt


def read_acks(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def consume_all(c: UpgradeCluster, group: str) -> set[str]:
    r = _cli("consume", "--namesrv", c.namesrv, "--group", group, "--topic", TOPIC, "--count", str(10**7),
             timeout=300)
    if r["rc"] != 0:
        raise StepFailed(f"reading {group} back: {r}")
    return {x["msg_id"] for x in r["lines"][:-1] if "msg_id" in x}


# ---------------------------------------------------------------------------- the run


@dataclass
class Step:
    name: str
    to: str
    was_master: bool
    t0: float
    t1: float = 0.0


def roll(c: UpgradeCluster, to: Install, steps: list[Step], resume: dict[str, int]) -> None:
    """Replace every process by ``to``, one at a time, in the safe order."""
    leader = leader_name(c)
    order = [n for n in c.ctl_ids if n != leader] + [leader]
    for g in c.groups:
        m = master_name(c, g)
        order += [f"{g}-b{i}" for i in (1, 2, 3) if f"{g}-b{i}" != m] + [m]
    order.append("namesrv")
    for name in order:
        p = c.procs[name]
        was_master = p.kind == "broker" and master_name(c, p.group) == name
        if p.kind == "controller" and name == leader_name(c):
            # hand Raft leadership to a member already replaced, as an operator would
            target = next(n for n in c.ctl_ids if n != name and c.procs[n].install == to)
            _cli("admin", "move-controller-leader", "--controller", c.controllers, "--to", target)
        step = Step(name, to.label, was_master, time.time())
        code = c.stop(name)
        if code not in (0, None):
            raise StepFailed(f"{name} stopped with exit code {code}: {p.child.log_text()[-1500:] if p.child else ''}")
        started_wall = time.time()
        c.start(name, to)
        wait_whole(c, f"{name} -> {to.label}")
        if p.kind == "controller":
            wait_grants(c, name, started_wall)
        step.t1 = time.time()
        steps.append(step)
        log("step", process=name, to=to.label, was_master=was_master, seconds=round(step.t1 - step.t0, 2))
        if p.kind == "broker":
            resume[p.group] = consume_next(c, p.group, resume[p.group])[1]


def gaps_ms(acks: list[dict], steps: list[Step]) -> list[float]:
    """Per master restart: the largest gap between consecutive acks of that group's producer
    around it: from the last ack before the stop to one second after the group was whole again."""
    out = []
    for s in steps:
        if not s.was_master:
            continue
        g = s.name.rsplit("-", 1)[0]
        ts = sorted(a["ack_ts_ms"] for a in acks if a.get("group", g) == g)
        lo, hi = s.t0 * 1000, (s.t1 + 1) * 1000
        before = [t for t in ts if t < lo][-1:]
        window = before + [t for t in ts if lo <= t <= hi]
        out.append(max((b - a for a, b in zip(window, window[1:], strict=False)), default=0.0))
    return out


def run(work: Path, groups: int, installs: Path | None = None) -> dict[str, Any]:
    rel = previous_release()
    log("installing", previous=rel["version"], commit=rel["commit"][:12])
    old = install_commit(rel["commit"], rel["version"], installs or work)
    new = install_tree("HEAD", installs or work)
    log("installed", old=old.version, new=new.version)
    c = UpgradeCluster(work, tuple(f"g{i + 1}" for i in range(groups)))
    producers: list[Child] = []
    steps: list[Step] = []
    result: dict[str, Any] = {"from": old.version, "to": new.version}
    try:
        c.start("namesrv", old, wait=False)
        for n in c.ctl_ids:
            c.start(n, old, wait=False)
        for p in c.procs.values():
            if p.kind == "broker":
                c.start(p.name, old, wait=False)
        wait_whole(c, "the old cluster")
        producers = [producer(c, g) for g in c.groups]
        resume = {}
        for g in c.groups:
            deadline = time.monotonic() + 60
            while len(read_acks(work / f"acks-{g}.jsonl")) < CONSUME_BATCH * 2 and time.monotonic() < deadline:
                time.sleep(0.2)
            resume[g] = consume_next(c, g, None)[1]
        roll(c, new, steps, resume)
        fin = _cli("admin", "finalize-features", "--controller", c.controllers, "--level", "1")
        if fin["rc"] != 0:
            raise StepFailed(f"finalize-features: {fin}")
        # every member now runs the new release: its highest level could be finalized (a dry run
        # only: finalizing a level the old release lacks closes the way back, docs/compatibility.md)
        top = str(features.SUPPORTED_LEVEL)
        dry = _cli("admin", "finalize-features", "--controller", c.controllers, "--level", top, "--dry-run")
        if dry["rc"] != 0:
            raise StepFailed(f"finalize-features --level {top} --dry-run: {dry}")
        feats = _cli("admin", "features", "--controller", c.controllers)["lines"][-1]["result"]
        result["versions_after_upgrade"] = sorted({m["version"] for m in feats["members"]})
        roll(c, old, steps, resume)
        for p in producers:
            p.stop(30)
        acked: list[dict] = []
        lost: list[str] = []
        for g in c.groups:
            acks = [{**a, "group": g} for a in read_acks(work / f"acks-{g}.jsonl")]
            acked += acks
            have = consume_all(c, g)
            lost += [a["msg_id"] for a in acks if a["msg_id"] not in have]
        gaps = gaps_ms(acked, steps)
        result.update(steps=len(steps), acked=len(acked), lost_acked=len(lost), lost_examples=lost[:5],
                      gap_ms_p99=pct(gaps, 0.99) or 0.0, gap_ms_max=round(max(gaps, default=0.0), 1),
                      master_restarts=len(gaps), refused=[], consumer_resumed=True)
    except StepFailed as e:
        result.update(steps=len(steps), error=str(e)[-3000:], consumer_resumed="consumer group" not in str(e),
                      refused=[str(e)[:300]] if "exited" in str(e) else [])
    finally:
        stop_all(producers, 15)
        c.stop_everything()
    return result


def planted(work: Path, installs: Path | None = None) -> dict[str, Any]:
    """The test of the refusal itself: this tree with a planted incompatible change (the EpochFile
    written as format version 2) replaces one slave; after a failover it has written its EpochFile
    in the new format; rolled back to the previous release it must refuse to start by name
    (FORMAT_TOO_NEW, exit 2) instead of reading the file as damage or starting without it; run
    with the release that wrote it again, the group is whole and nothing acked was lost."""
    rel = previous_release()
    old = install_commit(rel["commit"], rel["version"], installs or work)
    new = install_tree("HEAD+planted", installs or work, plant=plant_epochfile_v2)
    c = UpgradeCluster(work, ("g1",))
    prod: list[Child] = []
    out: dict[str, Any] = {"planted": "EpochFile format version 2", "from": old.version}
    try:
        c.start("namesrv", old, wait=False)
        for p in c.procs.values():
            if p.kind != "namesrv":
                c.start(p.name, old, wait=False)
        wait_whole(c, "the old cluster")
        prod = [producer(c, "g1")]
        master = master_name(c, "g1")
        slave = next(p.name for p in c.procs.values() if p.kind == "broker" and p.name != master)
        c.stop(slave)
        c.start(slave, new)
        wait_whole(c, f"{slave} -> {new.label}")
        c.stop(master)                  # hands over: a new epoch, which the planted slave records
        c.start(master, old)
        wait_whole(c, f"{master} restarted")
        epochs = work / f"broker-{slave}" / "epochfile"
        out["written_version"] = int.from_bytes(epochs.read_bytes()[4:6], "big")
        if out["written_version"] != 2:
            raise StepFailed(f"the planted slave wrote EpochFile version {out['written_version']}, not 2")
        c.stop(slave)
        child = c.start(slave, old, wait=False)
        assert child.popen is not None
        try:
            out["exit_code"] = child.popen.wait(60)
        except subprocess.TimeoutExpired:
            raise StepFailed(f"{slave} on {old.label} did not refuse an EpochFile of version 2: it runs") from None
        text = child.log_text()
        out["refused_cleanly"] = (out["exit_code"] == 2 and "FORMAT_TOO_NEW" in text and "EpochFile" in text
                                  and "Traceback" not in text)
        refusals = [json.loads(x) for x in text.splitlines() if "FORMAT_TOO_NEW" in x and x.startswith("{")]
        out["message"] = next((r.get("message") or r.get("error") or "" for r in refusals), text[-500:])
        c.start(slave, new)             # the operator's fix: the release that wrote it
        wait_whole(c, f"{slave} back on {new.label}")
        for p in prod:
            p.stop(30)
        acks = read_acks(work / "acks-g1.jsonl")
        have = consume_all(c, "g1")
        out.update(acked=len(acks), lost_acked=sum(a["msg_id"] not in have for a in acks))
    except StepFailed as e:
        out["error"] = str(e)[-3000:]
    finally:
        stop_all(prod, 15)
        c.stop_everything()
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tests.upgrade.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--groups", type=int, default=2, choices=range(1, 5))
    ap.add_argument("--work", type=Path, default=None, help="where installs, data and logs go (default: a temp dir)")
    ap.add_argument("--skip-planted", action="store_true", help="without the planted incompatible change")
    args = ap.parse_args(argv)
    work = args.work or Path(tempfile.mkdtemp(prefix="autoswitch-upgrade-"))
    (work / "rolling").mkdir(parents=True, exist_ok=True)
    res = run(work / "rolling", args.groups, installs=work)
    ok = "error" not in res and res.get("lost_acked") == 0
    if not args.skip_planted:
        (work / "planted").mkdir(exist_ok=True)
        pl = planted(work / "planted", installs=work)
        log("planted", **pl)
        res["planted_refused_cleanly"] = bool(pl.get("refused_cleanly"))
        res["planted_lost_acked"] = pl.get("lost_acked")
        ok = ok and res["planted_refused_cleanly"] and pl.get("lost_acked") == 0
    res["work"] = str(work)
    print(json.dumps(res), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
