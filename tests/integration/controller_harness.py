"""Starting controller clusters as real processes (`python -m autoswitch controller ...`)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

from tests.procs import HOST, ProcGroup, free_port, wait_port

# Fast but realistic timings for tests: Raft defaults, short liveness timeout and scan.
TEST_TOML = """
[controller]
heartbeat_timeout_ms = 3000
scan_interval_ms = 500
propose_timeout_s = 2.0
read_timeout_s = 1.5

[raft]
snapshot_every = 16
compaction_keep = 4
"""


class Cluster:
    def __init__(self, procs: ProcGroup, tmp: Path, n: int = 3, embedded: set[str] = frozenset(),
                 tls_dir: Path | None = None, remoting: bool = False) -> None:
        """``tls_dir``: from ``autoswitch certs init`` with a ``controller/<id>`` identity per node.
        ``remoting``: every node also serves RocketMQ's remoting protocol (``remoting_addrs``)."""
        self.procs = procs
        self.tmp = Path(tmp)
        self.ids = [f"n{i + 1}" for i in range(n)]
        self.ports = {nid: free_port() for nid in self.ids}
        self.addrs = {nid: f"{HOST}:{p}" for nid, p in self.ports.items()}
        # Raft on its own listener, as in production (docs/configuration.md raft_peers).
        self.raft_addrs = {nid: f"{HOST}:{free_port()}" for nid in self.ids}
        self.embedded = set(embedded)
        self.remoting_addrs = {nid: f"{HOST}:{free_port()}" for nid in self.ids} if remoting else {}
        self.tls_dir = tls_dir
        self.proc: dict[str, object] = {}
        self.toml = self.tmp / "controller.toml"
        self.toml.write_text(TEST_TOML)
        self._gen: dict[str, int] = {}

    @property
    def peers_spec(self) -> str:
        return ",".join(f"{n}={a}" for n, a in self.addrs.items())

    @property
    def spec(self) -> str:
        return ",".join(self.addrs.values())

    def data_dir(self, nid: str) -> Path:
        return self.tmp / f"data-{nid}"

    def node_args(self, nid: str) -> list[str]:
        """--node-id ... --config: what `controller`, `namesrv --embed-controller` and
        `recover-member` take for this node."""
        tls = [] if self.tls_dir is None else [
            "--tls-ca", str(self.tls_dir / "ca.pem"), "--tls-cert", str(self.tls_dir / f"controller_{nid}.pem"),
            "--tls-key", str(self.tls_dir / f"controller_{nid}.key")]
        return ["--node-id", nid, "--peers", self.peers_spec, "--data-dir", str(self.data_dir(nid)),
                "--raft-peers", ",".join(f"{n}={a}" for n, a in self.raft_addrs.items()),
                "--config", str(self.toml), *tls, *self._remoting_args(nid)]

    def _remoting_args(self, nid: str) -> list[str]:
        if not self.remoting_addrs:
            return []
        return ["--remoting-listen", self.remoting_addrs[nid],
                "--remoting-peers", ",".join(f"{n}={a}" for n, a in self.remoting_addrs.items())]

    def add_member(self, nid: str) -> None:
        """Ports and addresses for a new member (it starts with ``start(nid, join=cluster_id)``)."""
        self.ids.append(nid)
        self.ports[nid] = free_port()
        self.addrs[nid] = f"{HOST}:{self.ports[nid]}"
        self.raft_addrs[nid] = f"{HOST}:{free_port()}"

    def start(self, nid: str, wait: bool = True, join: bool = False, cluster_id: str = "") -> None:
        self._gen[nid] = self._gen.get(nid, 0) + 1
        common = self.node_args(nid) + (["--join"] if join else []) + (["--cluster-id", cluster_id] if cluster_id else [])
        if nid in self.embedded:
            args = ["namesrv", "--listen", self.addrs[nid], "--embed-controller", *common]
        else:
            args = ["controller", *common]
        p = self.procs.start(f"{nid}-{self._gen[nid]}", args)
        self.proc[nid] = p
        if wait:
            wait_port(self.ports[nid], timeout=20, proc=p.popen)

    def start_all(self) -> None:
        """All at once (as an operator restarting a cluster would), then wait for every port."""
        for nid in self.ids:
            self.start(nid, wait=False)
        for nid in self.ids:
            wait_port(self.ports[nid], timeout=20, proc=self.proc[nid].popen)

    def wait_feature_level(self, timeout: float = 60.0) -> None:
        """Until a new cluster has finalized its bootstrap feature level (the newest every member
        runs): behaviour of that level (ImportGroup, a crashed master's new epoch) is off before."""
        from autoswitch.base.features import SUPPORTED_LEVEL

        deadline = time.monotonic() + timeout
        last: dict = {}
        while time.monotonic() < deadline:
            last = admin("features", "--controller", self.spec)
            if last.get("ok") and last["result"]["finalized"] == SUPPORTED_LEVEL:
                return
            time.sleep(0.2)
        raise AssertionError(f"feature level {SUPPORTED_LEVEL} not finalized within {timeout} s: {last}")

    def kill9(self, nid: str) -> None:
        self.proc[nid].kill9()

    def stop(self, nid: str) -> None:
        self.proc[nid].stop()


def admin(*args: str, timeout: float = 30) -> dict:
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *args, "--json"],
                         capture_output=True, text=True, timeout=timeout)
    try:
        return json.loads(out.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        raise AssertionError(f"admin {args} gave no JSON: rc={out.returncode} out={out.stdout!r} "
                             f"err={out.stderr[-2000:]!r}") from None


async def wait_leader(client, timeout: float = 20.0) -> str:
    """Address of the leader once one node says it leads (via GetMetaData on every node)."""
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for addr in client.addresses:
            try:
                m = await client.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=1.0)
            except ControllerRpcError:
                continue
            if m.is_leader:
                return addr
        await asyncio.sleep(0.1)
    raise TimeoutError("no controller leader")


async def register_brokers(client, beats: Heartbeater, addrs: list[str], check: str = "check",
                           port_base: int = 30000, group: str = "g1", ids: tuple[int, ...] = (1, 2)) -> None:
    """Apply and register brokers ``ids`` of ``group`` (registerCheckCode ``{check}-{id}``, address
    ``HOST:{port_base + id}``), then heartbeat them to ``addrs`` (RocketMQ's apply -> register)."""
    for bid in ids:
        await client.apply_broker_id("c1", group, bid, f"{check}-{bid}")
        await client.register_broker("c1", group, bid, f"{HOST}:{port_base + bid}")
        beats.targets[(group, bid)] = list(addrs)


async def wait_heard(client, group: str, ids: set[int]) -> None:
    """Until the leader hears every broker of ``ids`` in ``group`` (what an election that
    designates one of them checks): readiness, not a fixed sleep."""
    from tests.waiting import until

    async def heard() -> bool:
        groups = await client.get_sync_state_data([group])
        return bool(groups) and {m.broker_id for m in groups[0].members if m.alive} >= ids
    await until(heard, f"the leader hears brokers {sorted(ids)} of {group}", interval_s=0.05)


def hb(group: str, bid: int, *, epoch: int = 0, max_offset: int = 0, cluster: str = "c1", lease_quorum: int = 2):
    """A broker's heartbeat; ``lease_quorum`` 2 counts grants as a broker of 3 controllers does."""
    from autoswitch.proto import controller_pb2 as pb

    return pb.BrokerHeartbeatRequest(cluster_name=cluster, broker_name=group, broker_id=bid,
                                     broker_address=f"127.0.0.1:{30000 + bid}", epoch=epoch,
                                     max_offset=max_offset, confirm_offset=max_offset, clean_shutdown=True,
                                     lease_quorum=lease_quorum)


class Heartbeater:
    """Sends heartbeats every 0.3 s for (group, brokerId) -> the controller addresses to send to;
    ``reported`` sets what a broker states in them: (MasterEpoch, maxOffset), default (0, 0)."""

    def __init__(self, client) -> None:
        self.client = client
        self.targets: dict[tuple[str, int], list[str]] = {}
        self.reported: dict[tuple[str, int], tuple[int, int]] = {}
        self._task: asyncio.Task | None = None

    async def _loop(self) -> None:
        from autoswitch.controller.codes import ControllerRpcError

        for _ in range(100_000):   # bounded; cancelled by stop()
            for (g, b), addrs in list(self.targets.items()):
                for a in addrs:
                    try:
                        epoch, max_offset = self.reported.get((g, b), (0, 0))
                        await self.client.call_node(a, "BrokerHeartbeat", hb(g, b, epoch=epoch, max_offset=max_offset),
                                                    timeout_s=0.5)
                    except ControllerRpcError:
                        pass
            await asyncio.sleep(0.3)

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
