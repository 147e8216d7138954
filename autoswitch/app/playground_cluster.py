"""The playground's cluster on 127.0.0.1: its layout (ports, groups, profiles, backends), the
processes it starts and ends (by PID only, through app/launcher.py), and the waits for its
readiness. `autoswitch playground`, the benchmarks and the power-loss rounds build on it.

Layout (base port N, default 19876):
  N      name server + embedded controller node n1 (one process, one port)
  N+1    controller n2 (standalone)          N+2  controller n3 (standalone)
  N+10+10*g+2*r   broker replica r of group g (gRPC); +1 is its HA port (RocketMQ's listenPort+1)
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import json
import os
import shutil
import time
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
from autoswitch.base.tls import TLSConfig

HOST = "127.0.0.1"
MARKER = ".autoswitch-playground"   # only a directory carrying it is ever used
PREVIOUS_RUN = "previous-run"       # --fresh: the last run's data, until the new start is ready
FAILED_START = "failed-start"       # a fresh start that failed: its files, the last run's back in place
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
        self.previous: Path | None = None   # the last run's data set aside by a fresh start
        self.tls_dir = layout.data_dir / "tls"
        # What the playground's own clients present (the admin certificate); plaintext if insecure.
        self.tls: TLSConfig = TLSConfig.off()
        self.postgres: PostgresServer | None = None     # backend "sql": the server we started
        self.etcd: EtcdServer | None = None             # backend "etcd": the server we started
        self.zookeeper: ZooKeeperServer | None = None   # backend "zookeeper": the server we started

    # ---------- data directory ----------

    def prepare_dir(self, fresh: bool, wipe: bool = False) -> None:
        """Lock the directory and, with ``fresh``, set the last run's data aside (``previous-run/``)
        until this start is known to succeed (``start_succeeded`` deletes it, ``start_failed`` puts
        it back): a start that fails never costs the data of the run before. ``wipe``: delete it
        at once (the benchmarks' and power-loss rounds' throwaway directories)."""
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
        if wipe:
            for p in d.iterdir():
                if p.is_dir():
                    shutil.rmtree(p)
                elif p.name != MARKER:
                    p.unlink()
        elif fresh:
            self._set_aside()
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
        # with the endpoints, so `autoswitch admin cluster-list` needs no --controller once exported
        self.profile_path.write_text('tls_ca = "ca.pem"\ntls_cert = "admin.pem"\ntls_key = "admin.key"\n'
                                     f'controllers = "{",".join(lay.controller_addrs())}"\n'
                                     f'namesrv = "{lay.namesrv}"\n')

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

    def _set_aside(self) -> None:
        d = self.layout.data_dir
        old = [p for p in d.iterdir() if p.name not in (MARKER, PREVIOUS_RUN, FAILED_START)]
        if not old:
            return
        prev = d / PREVIOUS_RUN
        if prev.exists():
            raise PlaygroundError(f"{prev} holds the data of the run before a fresh start that did not finish; "
                                  "move or delete it first", path=str(prev))
        prev.mkdir()
        for p in old:
            p.rename(prev / p.name)
        self.previous = prev

    def start_succeeded(self) -> None:
        """The fresh start is ready: the last run's data set aside is no longer needed."""
        if self.previous is not None:
            shutil.rmtree(self.previous)
            self.previous = None

    def start_failed(self) -> None:
        """A fresh start did not get ready (its processes are stopped): the last run's data goes
        back in place, this start's files (its logs) into ``failed-start/``."""
        if self.previous is None:
            return
        d = self.layout.data_dir
        failed = d / FAILED_START
        if failed.exists():
            shutil.rmtree(failed)          # an earlier failed start's files: this one's replace them
        failed.mkdir()
        for p in d.iterdir():
            if p.name not in (MARKER, PREVIOUS_RUN, FAILED_START):
                p.rename(failed / p.name)
        for p in self.previous.iterdir():
            p.rename(d / p.name)
        self.previous.rmdir()
        self.previous = None

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
