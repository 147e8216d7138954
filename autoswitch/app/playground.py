"""`autoswitch playground`: a whole controller-mode cluster on 127.0.0.1, and the failover demo.

Layout (base port N, default 19876):
  N      name server + embedded controller node n1 (one process, one port)
  N+1    controller n2 (standalone)          N+2  controller n3 (standalone)
  N+10+10*g+2*r   broker replica r of group g (gRPC); +1 is its HA port (RocketMQ's listenPort+1)

Every child is a `python -m autoswitch ...` process in its own session with its own log file,
tracked and ended by PID only (SIGTERM, then SIGKILL after a bounded wait). The launcher,
the routed producer and the failover timeline are reused by bench/failover.py.

Why one long module: the playground is an application, not a library: the cluster layout, its
launcher, the demo producer and the failover report are used together and nowhere else (sharing
the launcher and the producer with the tests is on docs/roadmap.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import signal
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autoswitch.app import launcher
from autoswitch.app.etcdserver import EtcdNotInstalled, EtcdServer
from autoswitch.app.launcher import Child
from autoswitch.app.pgserver import PostgresNotInstalled, PostgresServer
from autoswitch.app.zkserver import TICK_MS as ZK_TICK_MS
from autoswitch.app.zkserver import ZooKeeperNotInstalled, ZooKeeperServer
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import get_logger
from autoswitch.base.output import fail
from autoswitch.base.tls import TLSConfig
from autoswitch.base.waits import wait_event

HOST = "127.0.0.1"
MARKER = ".autoswitch-playground"   # only a directory carrying it is ever wiped
MAX_GROUPS = 20
MAX_REPLICAS = 5                    # 10 ports per group: 5 replicas x (gRPC, HA)
BACKENDS = ("raft", "sql", "sqlite", "etcd", "zookeeper")
# An etcd lease is whole seconds and etcd revokes expired ones every 500 ms: with etcd the fast
# profile's heartbeat timeout is raised to this, so that 1.5 s plus a statement fits in it
# (controller/config.py checks).
ETCD_FAST_TIMEOUT_MS = 2000
ETCD_FAST_STORE = {"lease_ms": 1000, "heartbeat_ms": 100, "poll_ms": 20, "statement_timeout_ms": 500}
STOP_WAIT_S = 10.0

_log = get_logger("playground")

# Timings. "fast" is the loopback profile (docs/design.md §1 / docs/replicas-manager.md lease
# table): heartbeat timeout 1000 ms, lease 600 ms. "default" keeps the RocketMQ-like 10 s.
PROFILES: dict[str, dict[str, Any]] = {
    "fast": {
        "controller": {"heartbeat_timeout_ms": 1000, "scan_interval_ms": 100, "first_election_grace_ms": 3000},
        "broker_args": ["--heartbeat-timeout-ms", "1000", "--master-lease-ms", "600"],
        # a SQL store adds lease + idle gap + COMMIT (2 x statement) within the 1000 ms timeout
        "store": {"lease_ms": 500, "heartbeat_ms": 100, "poll_ms": 20, "statement_timeout_ms": 250},
    },
    "default": {
        "controller": {},
        "broker_args": [],
    },
}


class PlaygroundError(AutoswitchError):
    code = "PLAYGROUND_ERROR"


class NotReady(PlaygroundError):
    code = "PLAYGROUND_NOT_READY"


@dataclass
class Layout:
    data_dir: Path
    base_port: int = 19876
    groups: int = 2
    replicas: int = 3
    cluster: str = "playground"
    profile: str = "fast"
    broker_extra: list[str] = field(default_factory=list)
    controller_extra: dict[str, Any] = field(default_factory=dict)   # [controller] keys over the profile's
    secure: bool = True      # mutual TLS and authorization on every process (--insecure: plaintext)
    # What replicates the controllers' log: "raft"; "sql" = a PostgreSQL started for the playground
    # (port base+9); "sqlite" = one SQLite file in the data directory; "etcd" = a single-member etcd
    # started for the playground (client port base+9, peer port just above the groups' ports);
    # "zookeeper" = a single ZooKeeper server started for the playground (port base+9).
    backend: str = "raft"

    def validate(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS:
            raise PlaygroundError(f"--groups must be in [1, {MAX_GROUPS}]")
        if not 1 <= self.replicas <= MAX_REPLICAS:
            raise PlaygroundError(f"--replicas must be in [1, {MAX_REPLICAS}]")
        top = self.base_port + 11 + 10 * self.groups      # + the etcd peer port
        if not 1024 <= self.base_port or top > 65535:
            raise PlaygroundError(f"--base-port must leave room for ports {self.base_port}..{top}")
        if self.profile not in PROFILES:
            raise PlaygroundError(f"unknown profile {self.profile!r}", profiles=sorted(PROFILES))
        if self.backend not in BACKENDS:
            raise PlaygroundError(f"unknown backend {self.backend!r}", backends=list(BACKENDS))

    @property
    def postgres_port(self) -> int:
        return self.base_port + 9

    @property
    def etcd_ports(self) -> tuple[int, int]:
        return self.base_port + 9, self.base_port + 10 + 10 * self.groups

    def controller_keys(self) -> dict[str, Any]:
        keys = dict(PROFILES[self.profile]["controller"])
        if self.backend == "etcd" and self.profile == "fast":
            keys["heartbeat_timeout_ms"] = ETCD_FAST_TIMEOUT_MS
        keys.update(self.controller_extra)
        return keys

    def broker_profile_args(self) -> list[str]:
        args = list(PROFILES[self.profile]["broker_args"])
        if self.backend == "etcd" and "--heartbeat-timeout-ms" in args:
            args[args.index("--heartbeat-timeout-ms") + 1] = str(ETCD_FAST_TIMEOUT_MS)
        return args

    def store_keys(self) -> dict[str, Any]:
        if self.backend == "etcd" and self.profile == "fast":
            return dict(ETCD_FAST_STORE)
        keys = dict(PROFILES[self.profile].get("store", {}))
        if self.backend == "zookeeper":
            # our server's tick; a session may outlive its timeout by one tick, so the fast
            # profile's statements get 100 ms less (controller/config.py checks the sum)
            keys["zk_tick_ms"] = ZK_TICK_MS
            if self.profile == "fast":
                keys["statement_timeout_ms"] -= ZK_TICK_MS
        return keys

    @property
    def namesrv(self) -> str:
        return f"{HOST}:{self.base_port}"

    def controller_addrs(self) -> list[str]:
        return [f"{HOST}:{self.base_port + i}" for i in range(3)]

    def metrics_addrs(self) -> list[str]:
        """The controllers' /metrics and status-page ports (base+3, base+4, base+8: free slots)."""
        return [f"{HOST}:{self.base_port + p}" for p in (3, 4, 8)]

    def raft_addrs(self) -> list[str]:
        """The controllers' Raft listeners, apart from their client ports (base+5..base+7)."""
        return [f"{HOST}:{self.base_port + 5 + i}" for i in range(3)]

    def group_names(self) -> list[str]:
        return [f"g{i}" for i in range(self.groups)]

    def broker_port(self, g: int, r: int) -> int:
        return self.base_port + 10 + 10 * g + 2 * r

    def broker_layout(self) -> dict[str, list[str]]:
        return {f"g{g}": [f"{HOST}:{self.broker_port(g, r)}" for r in range(self.replicas)]
                for g in range(self.groups)}


class Cluster:
    """Starts, watches and stops the child processes of one playground (by PID only)."""

    def __init__(self, layout: Layout) -> None:
        layout.validate()
        self.layout = layout
        self.children: dict[str, Child] = {}
        self.log_dir = layout.data_dir / "logs"
        self._lock_fd: int | None = None
        self.tls_dir = layout.data_dir / "tls"
        # What the playground's own clients present (the admin certificate); plaintext if insecure.
        self.tls: TLSConfig = TLSConfig.off()
        self.postgres: PostgresServer | None = None     # backend "sql": the server we started
        self.etcd: EtcdServer | None = None             # backend "etcd": the server we started
        self.zookeeper: ZooKeeperServer | None = None   # backend "zookeeper": the server we started

    # ---------- data directory ----------

    def prepare_dir(self, keep: bool) -> None:
        d = self.layout.data_dir
        if d.exists() and any(d.iterdir()) and not (d / MARKER).exists():
            raise PlaygroundError(f"{d} is not empty and was not created by the playground; refusing to use it",
                                  path=str(d))
        d.mkdir(parents=True, exist_ok=True)
        (d / MARKER).touch()
        # One playground per directory: a second one would wipe the first one's files.
        fd = os.open(d / MARKER, os.O_RDWR)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise PlaygroundError(f"another playground is running on {d}", path=str(d)) from None
        self._lock_fd = fd
        if not keep:
            for p in d.iterdir():
                if p.name == MARKER:
                    continue
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()
        self.log_dir.mkdir(parents=True, exist_ok=True)
        if self.layout.secure:
            self._make_credentials()

    def _make_credentials(self) -> None:
        """A development CA, one certificate per process (brokers get broker/g<g>/<r+1>: the
        certificate names the brokerId), an admin certificate for us and the CLI, and a profile
        file the CLI reads (AUTOSWITCH_PROFILE)."""
        from autoswitch.app.certs import init_dev_ca

        lay = self.layout
        ids = ["controller/n1", "controller/n2", "controller/n3", "admin"]
        ids += [self.broker_identity(g, r) for g in range(lay.groups) for r in range(lay.replicas)]
        certs = init_dev_ca(self.tls_dir, ids)
        admin = certs["admin"]
        self.tls = TLSConfig(ca=admin["ca"], cert=admin["cert"], key=admin["key"]).validate()
        self.profile_path.write_text('tls_ca = "ca.pem"\ntls_cert = "admin.pem"\ntls_key = "admin.key"\n')

    @property
    def profile_path(self) -> Path:
        return self.tls_dir / "profile.toml"

    @staticmethod
    def broker_identity(g: int, r: int) -> str:
        return f"broker/g{g}/{r + 1}"

    def server_flags(self, identity: str) -> list[str]:
        """--tls-* and --auth for a child acting as ``identity`` (nothing when insecure)."""
        if not self.layout.secure:
            return []
        name = identity.replace("/", "_")
        return ["--tls-ca", str(self.tls_dir / "ca.pem"), "--tls-cert", str(self.tls_dir / f"{name}.pem"),
                "--tls-key", str(self.tls_dir / f"{name}.key"), "--auth"]

    def release_dir(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)
            self._lock_fd = None

    def busy_ports(self) -> list[int]:
        """Ports of the layout something already listens on (a child would fail to bind late)."""
        import socket

        lay = self.layout
        ports = [lay.base_port + i for i in range(3)] + [lay.base_port + 5 + i for i in range(3)]
        if lay.backend in ("sql", "zookeeper"):
            ports.append(lay.postgres_port)
        if lay.backend == "etcd":
            ports += list(lay.etcd_ports)
        for g in range(lay.groups):
            for r in range(lay.replicas):
                ports += [lay.broker_port(g, r), lay.broker_port(g, r) + 1]
        busy = []
        for p in ports:
            with contextlib.closing(socket.socket()) as s:
                # Like the servers: a port in TIME_WAIT is usable, one with a listener is not.
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                try:
                    s.bind((HOST, p))
                except OSError:
                    busy.append(p)
        return busy

    # ---------- processes ----------

    def _spawn(self, child: Child) -> Child:
        child.start()
        self.children[child.name] = child
        _log.info("child_started", name=child.name, pid=child.pid, log=str(child.log_path))
        return child

    def _controller_toml(self) -> Path:
        path = self.layout.data_dir / "controller.toml"
        lines = ["[controller]"]
        for k, v in self.layout.controller_keys().items():
            lines.append(f"{k} = {json.dumps(v)}")
        url = self._store_url()
        if url:
            backend = self.layout.backend if self.layout.backend in ("etcd", "zookeeper") else "sql"
            lines += [f'backend = "{backend}"', "", "[store]", f"url = {json.dumps(url)}"]
            # the lock's lease plus a statement must fit in the profile's heartbeat timeout
            lines += [f"{k} = {v}" for k, v in self.layout.store_keys().items()]
        path.write_text("\n".join(lines) + "\n")
        return path

    def _store_url(self) -> str:
        """The store URL ("" for Raft); "sql" starts PostgreSQL, "etcd" starts etcd."""
        lay = self.layout
        if lay.backend == "sqlite":
            return f"sqlite:///{lay.data_dir / 'controller-store.db'}"
        if lay.backend == "zookeeper":
            if self.zookeeper is None:
                try:
                    self.zookeeper = ZooKeeperServer([lay.postgres_port]).start()
                except (ZooKeeperNotInstalled, RuntimeError) as e:
                    raise NotReady(f"cannot start ZooKeeper for --backend zookeeper: {e}") from None
            return self.zookeeper.url + "/autoswitch"
        if lay.backend == "etcd":
            if self.etcd is None:
                try:
                    self.etcd = EtcdServer(*lay.etcd_ports).start()
                except (EtcdNotInstalled, RuntimeError) as e:
                    raise NotReady(f"cannot start etcd for --backend etcd: {e}") from None
            return self.etcd.url
        if lay.backend != "sql":
            return ""
        if self.postgres is None:
            try:
                self.postgres = PostgresServer(lay.postgres_port).start()
            except (PostgresNotInstalled, RuntimeError) as e:
                raise NotReady(f"cannot start PostgreSQL for --backend sql: {e}") from None
            _log.info("postgres_started", port=lay.postgres_port)
        return self.postgres.url

    def start_controllers(self) -> None:
        lay = self.layout
        addrs = lay.controller_addrs()
        peers = ",".join(f"n{i + 1}={a}" for i, a in enumerate(addrs))
        raft = ",".join(f"n{i + 1}={a}" for i, a in enumerate(lay.raft_addrs()))
        raft_flags = ["--raft-peers", raft] if lay.backend == "raft" else []
        toml = str(self._controller_toml())
        d = lay.data_dir
        self._spawn(Child("namesrv-n1", ["namesrv", "--listen", addrs[0], "--embed-controller", "--node-id", "n1",
                                         "--peers", peers, *raft_flags, "--data-dir", str(d / "controller-n1"),
                                         "--config", toml, "--metrics-listen", lay.metrics_addrs()[0],
                                         *self.server_flags("controller/n1")],
                          self.log_dir / "namesrv-n1.log", port=lay.base_port))
        for i in (1, 2):
            nid = f"n{i + 1}"
            self._spawn(Child(f"controller-{nid}", ["controller", "--node-id", nid, "--peers", peers, *raft_flags,
                                                    "--data-dir", str(d / f"controller-{nid}"), "--config", toml,
                                                    "--metrics-listen", lay.metrics_addrs()[i],
                                                    *self.server_flags(f"controller/{nid}")],
                              self.log_dir / f"controller-{nid}.log", port=lay.base_port + i))

    def broker_args(self, g: int, r: int) -> list[str]:
        lay = self.layout
        port = lay.broker_port(g, r)
        return ["broker", "--cluster", lay.cluster, "--group", f"g{g}", "--listen", f"{HOST}:{port}",
                "--ha-listen", f"{HOST}:{port + 1}", "--data-dir", str(lay.data_dir / f"g{g}-r{r}"),
                "--controllers", ",".join(lay.controller_addrs()), "--namesrv", lay.namesrv,
                *self.server_flags(self.broker_identity(g, r)), *lay.broker_profile_args(),
                *lay.broker_extra]

    def start_broker(self, g: int, r: int) -> Child:
        name = f"broker-g{g}-r{r}"
        old = self.children.get(name)
        assert old is None or not old.alive(), f"{name} still running"
        return self._spawn(Child(name, self.broker_args(g, r), self.log_dir / f"{name}.log",
                                 port=self.layout.broker_port(g, r), group=f"g{g}"))

    def start_brokers(self) -> None:
        for g in range(self.layout.groups):
            for r in range(self.layout.replicas):
                self.start_broker(g, r)

    def child_by_addr(self, addr: str) -> Child | None:
        for c in self.children.values():
            if c.port and f"{HOST}:{c.port}" == addr:
                return c
        return None

    def kill9(self, child: Child) -> None:
        if child.alive():
            child.kill9(STOP_WAIT_S)
            _log.info("child_killed", name=child.name, pid=child.pid)

    def failed_children(self) -> list[Child]:
        return [c for c in self.children.values() if c.popen is not None and c.popen.poll() is not None]

    def stop_all(self) -> list[dict]:
        """Brokers first (they flush and say goodbye), then controllers; each by PID, bounded."""
        order = sorted(self.children.values(), key=lambda c: (not c.name.startswith("broker"), c.name))
        out = []
        for c, (rc, forced) in zip(order, launcher.stop_all(order, STOP_WAIT_S), strict=True):
            if c.popen is None:
                continue
            out.append({"name": c.name, "pid": c.pid, "rc": rc, "forced": forced})
            _log.info("child_stopped", name=c.name, pid=c.pid, rc=rc, forced=forced)
        if self.etcd is not None:              # after the controllers that used it
            self.etcd.stop()
            self.etcd = None
        if self.zookeeper is not None:
            self.zookeeper.stop()
            self.zookeeper = None
        if self.postgres is not None:
            try:
                self.postgres.stop()
            except RuntimeError as e:
                _log.warning("postgres_stop_failed", error=str(e))
            self.postgres = None
        return out

    def write_manifest(self) -> Path:
        path = self.layout.data_dir / "playground.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({
            "pid": os.getpid(),
            "namesrv": self.layout.namesrv,
            "controllers": self.layout.controller_addrs(),
            "groups": self.layout.broker_layout(),
            "children": {c.name: {"pid": c.pid, "log": str(c.log_path), "args": c.args}
                         for c in self.children.values() if c.popen is not None},
        }, indent=1))
        os.replace(tmp, path)
        return path

    # ---------- readiness ----------

    async def wait_ports(self, children: list[Child], timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        for c in children:
            while True:
                if not c.alive():
                    raise NotReady(f"{c.name} exited with {c.exit_code} during startup", log=str(c.log_path))
                try:
                    _r, w = await asyncio.wait_for(asyncio.open_connection(HOST, c.port), 0.5)
                    w.close()
                    break
                except (TimeoutError, OSError):
                    if time.monotonic() > deadline:
                        raise NotReady(f"{c.name} did not open port {c.port} within {timeout_s}s",
                                       log=str(c.log_path)) from None
                    await asyncio.sleep(0.1)

    async def wait_leader(self, client: Any, timeout_s: float) -> str:
        deadline = time.monotonic() + timeout_s
        last = ""
        while time.monotonic() < deadline:
            self._check_alive()
            try:
                md = await asyncio.wait_for(client.get_metadata(), 2.0)
                if md.leader_id:
                    return md.leader_id
            except (TimeoutError, AutoswitchError) as e:
                last = getattr(e, "code", type(e).__name__)
            await asyncio.sleep(0.2)
        raise NotReady(f"no controller leader within {timeout_s}s ({last})")

    async def wait_masters(self, client: Any, timeout_s: float, groups: list[str] | None = None) -> Any:
        from autoswitch.app.status import gather

        deadline = time.monotonic() + timeout_s
        layout = self.layout.broker_layout()
        if groups is not None:
            layout = {g: layout[g] for g in groups}
        snap = None
        while time.monotonic() < deadline:
            self._check_alive()
            snap = await gather(client, layout, self.tls)
            if all(g.master_id and any(r.role == "master" and r.broker_id == g.master_id for r in g.replicas)
                   for g in snap.groups):
                return snap
            await asyncio.sleep(0.3)
        detail = "; ".join(f"{g.group}: master={g.master_id} roles={[r.role for r in g.replicas]}"
                           for g in (snap.groups if snap else []))
        raise NotReady(f"not every group has a serving master within {timeout_s}s ({detail})")

    def _check_alive(self) -> None:
        dead = self.failed_children()
        if dead:
            c = dead[0]
            raise NotReady(f"{c.name} (pid {c.pid}) exited with {c.exit_code}", log=str(c.log_path))


# ---------------- routed producer ----------------

@dataclass
class Ack:
    t: float            # time.monotonic() when the ack arrived
    msg_id: str
    broker_id: int
    epoch: int
    addr: str


class DemoProducer:
    """One message at a time to a group's master, through the routed producer every client uses
    (autoswitch.broker.route.RoutedProducer: name-server route, NOT_MASTER redirects, same msg_id
    on every retry, acks counted only under the routed MasterEpoch, the ack log). It retries in
    short windows so a stop request is seen within about a second, and times every ack."""

    def __init__(self, namesrv: str, group: str, topic: str, ack_log: Path, *, rpc_timeout_s: float = 2.0,
                 backoff_min_s: float = 0.02, backoff_max_s: float = 0.1, body_size: int = 256,
                 tls: TLSConfig | None = None) -> None:
        from autoswitch.broker.route import RetryPolicy, RoutedProducer

        policy = RetryPolicy(backoff_min_s=backoff_min_s, backoff_max_s=backoff_max_s, retry_deadline_s=1.0,
                             rpc_timeout_s=rpc_timeout_s)
        self._p = RoutedProducer(namesrv, group, ack_log=ack_log, policy=policy, tls=tls)
        self.topic = topic
        self.body = b"x" * body_size
        self.acks: list[Ack] = []
        self.last_error = ""

    @property
    def failures(self) -> int:
        """Attempts that were not acknowledged (retries of the routed producer)."""
        return self._p.stats.retries

    async def send_one(self, stop: asyncio.Event, deadline: float) -> Ack | None:
        """Retry one new message until acked, stop is set, or the deadline passes."""
        from autoswitch.broker.route import RetriesExhausted

        msg_id = uuid.uuid4().hex
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                results = await self._p.produce(self.topic, [self.body], [msg_id])
            except RetriesExhausted as e:
                self.last_error = e.message[:200]
                continue
            ack = Ack(time.monotonic(), msg_id, self._p.last_ack_broker_id, results[0].epoch, self._p.master or "")
            self.acks.append(ack)
            return ack
        return None

    async def run(self, stop: asyncio.Event, max_messages: int, max_s: float) -> None:
        deadline = time.monotonic() + max_s
        for _ in range(max_messages):
            if stop.is_set() or time.monotonic() >= deadline:
                return
            await self.send_one(stop, deadline)

    async def close(self) -> None:
        await self._p.close()


async def read_all_ids(addr: str, topic: str, max_messages: int = 1_000_000,
                       tls: TLSConfig | None = None) -> set[str]:
    """Every msg_id the broker serves for topic (below its confirmOffset), queue offset 0 onwards."""
    from autoswitch.broker.client import ConsumerClient
    from autoswitch.proto import broker_pb2 as pb

    c = ConsumerClient(addr, timeout_s=5.0, max_retries=3, tls=tls)
    ids: set[str] = set()
    q = 0
    try:
        while len(ids) < max_messages:
            reply = await c.consume(topic, q, 1000)
            if reply.status != pb.OK:
                raise PlaygroundError(f"consume from {addr}: {pb.Status.Name(reply.status)} {reply.error_message}")
            if not reply.messages:
                return ids
            ids.update(m.msg_id for m in reply.messages)
            q = reply.next_queue_offset
    finally:
        await c.close()
    return ids


async def lost_acked(addr: str, topic: str, acked: set[str], wait_s: float = 10.0,
                     tls: TLSConfig | None = None) -> set[str]:
    """Acked ids the (final) master does not serve; retried until wait_s for confirmOffset to settle."""
    deadline = time.monotonic() + wait_s
    while True:
        missing = acked - await read_all_ids(addr, topic, tls=tls)
        if not missing or time.monotonic() >= deadline:
            return missing
        await asyncio.sleep(0.5)


def load_ack_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


# ---------------- CLI ----------------

def register(sub: Any, admin_sub: Any) -> None:
    p = sub.add_parser("playground", help="a local controller-mode cluster on 127.0.0.1 (Ctrl-C stops it)")
    p.add_argument("--data-dir", default="./run-data/playground",
                   help="all data and logs (wiped at start unless --keep-data)")
    p.add_argument("--keep-data", action="store_true", help="reuse the data of the last run (identities, logs)")
    p.add_argument("--base-port", type=int, default=19876)
    p.add_argument("--groups", type=int, default=2)
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--backend", choices=BACKENDS, default="raft",
                   help="what replicates the controllers' log: raft; sql (a PostgreSQL started for you on "
                        "base-port+9); sqlite (a file in the data directory); etcd, zookeeper (a server started for you)")
    p.add_argument("--profile", choices=sorted(PROFILES), default="fast",
                   help="timings: fast = 1 s heartbeat timeout (loopback), default = RocketMQ-like 10 s")
    p.add_argument("--broker-arg", action="append", default=[], help="extra flag for every broker (repeatable)")
    p.add_argument("--insecure", action="store_true",
                   help="plaintext, no authorization (by default every process runs mutual TLS with roles)")
    p.add_argument("--ready-timeout-s", type=float, default=60.0)
    p.add_argument("--refresh-s", type=float, default=1.0)
    p.add_argument("--demo", choices=["failover"], help="run a scripted scenario, then stop and exit")
    p.add_argument("--demo-before-s", type=float, default=2.0, help="produce this long before the kill")
    p.add_argument("--demo-after-s", type=float, default=2.0, help="produce this long after the first new ack")
    p.set_defaults(func=_cmd_playground)


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def _cmd_playground(args: argparse.Namespace) -> int:
    layout = Layout(Path(args.data_dir).resolve(), args.base_port, args.groups, args.replicas,
                    profile=args.profile, broker_extra=[a for x in args.broker_arg for a in x.split()],
                    secure=not args.insecure, backend=args.backend)
    try:
        cluster = Cluster(layout)
        cluster.prepare_dir(args.keep_data)
    except PlaygroundError as e:
        return fail(args, e, rc=2)
    logf = None
    if sys.stdout.isatty():
        # Our own JSON log lines would scroll the in-place table away: on a terminal they go to a file.
        import logging

        logf = open(cluster.log_dir / "playground.log", "a", encoding="utf-8")  # noqa: SIM115
        for h in logging.getLogger().handlers:
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler):
                h.setStream(logf)
    try:
        return asyncio.run(_main(cluster, args))
    finally:
        stopped = cluster.stop_all()
        bad = [s for s in stopped if s["forced"]]
        _out(f"stopped {len(stopped)} processes" + (f" ({len(bad)} needed SIGKILL)" if bad else ""))
        cluster.release_dir()
        if logf is not None:
            logf.close()


async def _main(cluster: Cluster, args: argparse.Namespace) -> int:
    from autoswitch.controller.client import ControllerClient

    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    lay = cluster.layout
    client = ControllerClient(lay.controller_addrs(), deadline_s=2.0, max_attempts=4, rpc_timeout_s=1.0,
                              tls=cluster.tls)
    try:
        try:
            t0 = time.monotonic()
            busy = cluster.busy_ports()
            if busy:
                raise NotReady(f"ports already in use: {busy} (another playground? use --base-port)")
            cluster.start_controllers()
            await _until(stop, cluster.wait_ports(list(cluster.children.values()), args.ready_timeout_s))
            leader = await _until(stop, cluster.wait_leader(client, args.ready_timeout_s))
            cluster.start_brokers()
            cluster.write_manifest()
            _print_addresses(cluster, leader)
            remaining = max(5.0, args.ready_timeout_s - (time.monotonic() - t0))
            await _until(stop, cluster.wait_masters(client, remaining))
            _out(f"ready in {time.monotonic() - t0:.1f}s")
        except NotReady as e:
            _out(f"error: {e.code}: {e.message}")
            _out("logs:")
            for c in cluster.children.values():
                _out(f"  {c.name}: {c.log_path}")
            return 1
        except _Stopped:
            return 0
        if args.demo == "failover":
            return await _until_or(stop, demo_failover(cluster, client, args), 130)
        await _status_loop(cluster, client, stop, args.refresh_s)
        return 0
    finally:
        await client.close()


class _Stopped(Exception):
    pass


async def _until(stop: asyncio.Event, coro: Any) -> Any:
    """Run coro unless SIGINT/SIGTERM arrives first (then _Stopped)."""
    task = asyncio.ensure_future(coro)
    waiter = asyncio.ensure_future(stop.wait())
    done, _ = await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    if task in done:
        waiter.cancel()
        return task.result()
    task.cancel()
    with contextlib.suppress(BaseException):
        await task
    raise _Stopped()


async def _until_or(stop: asyncio.Event, coro: Any, rc_on_stop: int) -> Any:
    try:
        return await _until(stop, coro)
    except _Stopped:
        _out("interrupted")
        return rc_on_stop


def _print_addresses(cluster: Cluster, leader: str) -> None:
    lay = cluster.layout
    _out(f"data dir    {lay.data_dir}  (profile {lay.profile})")
    _out(f"name server {lay.namesrv}  (embeds controller n1)")
    _out(f"controllers {','.join(lay.controller_addrs())}  (leader {leader})")
    _out(f"status page http://{lay.metrics_addrs()[0]}/status  (live; also /metrics, /healthz, /readyz on "
         f"{', '.join(lay.metrics_addrs())})")
    for g, addrs in lay.broker_layout().items():
        _out(f"group {g}    {' '.join(addrs)}  (HA ports +1)")
    for c in cluster.children.values():
        _out(f"pid {c.pid} {c.name} log={c.log_path}")
    if lay.secure:
        _out(f"security    mutual TLS + roles on every process; certificates in {cluster.tls_dir}")
        _out(f"            point the CLI at them: export AUTOSWITCH_PROFILE={cluster.profile_path}")
    else:
        _out("security    OFF (--insecure): plaintext, no authorization")
    _out(f"try: autoswitch admin get-sync-state-set --controller {','.join(lay.controller_addrs())} --json")
    _out(f"     autoswitch produce --namesrv {lay.namesrv} --group g0 --topic demo --count 10")


async def _status_loop(cluster: Cluster, client: Any, stop: asyncio.Event, refresh_s: float) -> None:
    from autoswitch.app.status import gather, render_lines, render_table

    tty = sys.stdout.isatty()
    refresh_s = min(max(refresh_s, 0.2), 60.0)
    warned: set[str] = set()
    while not stop.is_set():
        snap = await gather(client, cluster.layout.broker_layout(), cluster.tls)
        for c in cluster.failed_children():
            if c.name not in warned:
                warned.add(c.name)
                _out(f"warning: {c.name} (pid {c.pid}) exited with {c.exit_code}; log {c.log_path}")
        if tty:
            lay = cluster.layout
            # The address block printed at startup is cleared by the redraw: repeat the essentials.
            header = (time.strftime("%H:%M:%S") + "  autoswitch playground  (Ctrl-C stops everything)\n"
                      f"name server {lay.namesrv}  controllers {','.join(lay.controller_addrs())}\n"
                      f"data and logs {lay.data_dir}  (pids in playground.json)\n")
            # Home + clear-below: redraw in place without scrolling.
            sys.stdout.write("\x1b[H\x1b[J" + "\n".join(render_table(snap, header)) + "\n")
            sys.stdout.flush()
        else:
            for line in render_lines(snap):
                _out(line)
        await wait_event(stop, refresh_s)


# ---------------- the failover demo ----------------

@dataclass
class FailoverResult:
    kill_t: float
    old_master: int
    old_epoch: int
    elected_t: float | None = None
    new_master: int = 0
    new_epoch: int = 0
    new_master_addr: str = ""
    first_ack_t: float | None = None
    first_ack: Ack | None = None
    kill_wall: float = 0.0              # time.time() at the kill, to line up with log timestamps

    @property
    def recovery_s(self) -> float | None:
        return None if self.first_ack_t is None else self.first_ack_t - self.kill_t


async def wait_full_sync_state_set(client: Any, group: str, n: int, timeout_s: float) -> list[int]:
    """Wait until the group's SyncStateSet has n members (the controller elects only from it: killing
    a master whose slaves have not joined yet leaves no clean candidate, and the group stays without
    a master — the safe outcome, but not a failover). Returns the last set seen."""
    deadline = time.monotonic() + timeout_s
    last: list[int] = []
    while True:
        with contextlib.suppress(AutoswitchError, TimeoutError):
            info = await asyncio.wait_for(client.get_replica_info(group), 1.0)
            last = sorted(info.sync_state_set)
            if info.master_broker_id and len(last) >= n:
                return last
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(0.1)


async def watch_election(client: Any, group: str, old_epoch: int, res: FailoverResult, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(AutoswitchError, asyncio.TimeoutError):
            info = await asyncio.wait_for(client.get_replica_info(group), 1.0)
            if info.master_epoch > old_epoch and info.master_broker_id:
                res.elected_t = time.monotonic()
                res.new_master, res.new_epoch = info.master_broker_id, info.master_epoch
                res.new_master_addr = info.master_address
                return
        await asyncio.sleep(0.02)


async def kill_master_and_measure(cluster: Cluster, client: Any, producer: DemoProducer, group: str,
                                  timeout_s: float, freeze: bool = False) -> tuple[FailoverResult, Child]:
    """SIGKILL the group's master while `producer` keeps producing; returns when the producer has an
    ack from another broker (or timeout_s passed). ``freeze``: SIGSTOP it instead (a silent failure:
    its sockets stay open); the caller ends it (cluster.kill9) when done."""
    info = await client.get_replica_info(group)
    victim = cluster.child_by_addr(info.master_address)
    if victim is None or not info.master_broker_id:
        raise PlaygroundError(f"{group}: no master process to kill", master=info.master_address)
    n_acks = len(producer.acks)
    if freeze:
        os.kill(victim.pid, signal.SIGSTOP)
        _log.info("child_frozen", name=victim.name, pid=victim.pid)
    else:
        cluster.kill9(victim)
    res = FailoverResult(time.monotonic(), info.master_broker_id, info.master_epoch, kill_wall=time.time())
    watcher = asyncio.ensure_future(watch_election(client, group, info.master_epoch, res, timeout_s))
    deadline = res.kill_t + timeout_s
    while time.monotonic() < deadline:
        new = [a for a in producer.acks[n_acks:] if a.t >= res.kill_t and a.addr != info.master_address]
        if new:
            res.first_ack, res.first_ack_t = new[0], new[0].t
            break
        await asyncio.sleep(0.005)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(watcher), max(0.1, deadline - time.monotonic()))
    watcher.cancel()
    return res, victim


async def demo_failover(cluster: Cluster, client: Any, args: argparse.Namespace) -> int:
    lay = cluster.layout
    group, topic = "g0", "demo"
    ack_path = lay.data_dir / "demo-acks.jsonl"
    producer = DemoProducer(lay.namesrv, group, topic, ack_path, tls=cluster.tls)
    stop_prod = asyncio.Event()
    wall0 = time.time()
    mono0 = time.monotonic()

    def ts(t: float) -> str:
        return time.strftime("%H:%M:%S", time.gmtime(wall0 + t - mono0)) + f".{int(((wall0 + t - mono0) % 1) * 1000):03d}"

    prod_task = asyncio.ensure_future(producer.run(stop_prod, max_messages=100_000, max_s=120.0))
    try:
        await asyncio.sleep(args.demo_before_s)
        sss = await wait_full_sync_state_set(client, group, lay.replicas, 30.0)
        if len(sss) < lay.replicas:
            _out(f"demo: error: the SyncStateSet of {group} is {sss}, not all {lay.replicas} replicas, after 30 s")
            return 1
        # After a cold start the controllers grant no master lease for a hold period (3 heartbeat
        # timeouts: a restarted controller may have forgotten a DEAD report it made), so the master
        # answers FENCED until then; wait for the first ack, bounded.
        lease_deadline = time.monotonic() + 30.0
        while not producer.acks and time.monotonic() < lease_deadline:
            await asyncio.sleep(0.05)
        before = len(producer.acks)
        _out(f"demo: SyncStateSet of {group} is {{{','.join(map(str, sss))}}}")
        _out(f"demo: producing to {group}/{topic} via name server; {before} acked before the kill")
        if before == 0:
            _out(f"demo: error: nothing acked before the kill (last error {producer.last_error})")
            return 1
        res, victim = await kill_master_and_measure(cluster, client, producer, group, timeout_s=30.0)
        _out(f"{ts(res.kill_t)}  +0.000s  kill -9 {victim.name} (pid {victim.pid}), brokerId {res.old_master}, "
             f"MasterEpoch {res.old_epoch}")
        if res.elected_t is not None:
            _out(f"{ts(res.elected_t)}  +{res.elected_t - res.kill_t:.3f}s  controller elected brokerId "
                 f"{res.new_master} ({res.new_master_addr}), MasterEpoch {res.new_epoch}")
        else:
            _out("demo: error: no new master elected within 30s")
        if res.first_ack is not None:
            a = res.first_ack
            _out(f"{ts(a.t)}  +{a.t - res.kill_t:.3f}s  first acked write after the kill: brokerId {a.broker_id} "
                 f"epoch {a.epoch} ({a.addr}); producer retries {producer.failures}")
        else:
            _out(f"demo: error: no acked write within 30s of the kill (last error {producer.last_error})")
        await asyncio.sleep(args.demo_after_s)
    finally:
        stop_prod.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(prod_task, 5.0)
        await producer.close()
    acked = load_ack_log(ack_path)
    ids = {a["msg_id"] for a in acked}
    final = await client.get_replica_info(group)
    if not final.master_address:
        _out(f"demo: {group} has no master (MasterEpoch {final.master_epoch}): its {len(ids)} acked messages "
             "cannot be read; counted as missing")
    missing = await lost_acked(final.master_address, topic, ids, tls=cluster.tls) if final.master_address else ids
    _out(f"demo: acked {len(ids)} messages (ack log {ack_path}); final master brokerId {final.master_broker_id} "
         f"epoch {final.master_epoch} serves {len(ids) - len(missing)} of them; lost {len(missing)}")
    ok = res.first_ack is not None and res.elected_t is not None and not missing
    if missing:
        _out("demo: LOST acked msg_ids: " + " ".join(sorted(missing)[:20]))
    _out("demo: " + ("PASS" if ok else "FAIL"))
    # The independent check, from what stays on disk after the playground stops (Spark: the
    # pipeline extra, `pip install -e '.[pipeline]'` or `make test`'s setup).
    dirs = " ".join(f"--broker-data {lay.data_dir / f'g0-r{r}'}" for r in range(lay.replicas))
    _out(f"demo: audit it: autoswitch pipeline audit --acks {ack_path} {dirs} "
         f"--events {lay.data_dir / 'controller-n1' / 'events.jsonl'} --out {lay.data_dir / 'audit'}")
    return 0 if ok else 1
