"""A throw-away ZooKeeper server for the playground and the tests: Debian's ``zookeeper`` package
(QuorumPeerMain on the JVM) from a temporary ``zoo.cfg`` on 127.0.0.1, ended by PID. One server,
or ``ensemble`` servers of one ensemble (each its own process, data directory and ports).
tickTime 100 ms, so sessions of 0.2 s up to 60 s are allowed."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from autoswitch.app.launcher import end_process
from autoswitch.base.log import get_logger

_log = get_logger("zkserver")
CLASSPATH = "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar"
MAIN = "org.apache.zookeeper.server.quorum.QuorumPeerMain"


TICK_MS = 100          # the servers' tickTime; [store] zk_tick_ms says it to the controllers

class ZooKeeperNotInstalled(RuntimeError):
    pass


class ZooKeeperServer:
    """``ports``: one client port per server; ``peer_ports``: two per server (quorum, election),
    needed when there is more than one server; ``hosts``: each server's address (default
    127.0.0.1); ``wrap``: a command prefix per server (the tests run each in a network namespace
    of its own: ``ip netns exec NS``)."""

    def __init__(self, ports: list[int], peer_ports: list[tuple[int, int]] | None = None,
                 hosts: list[str] | None = None, wrap: Callable[[int], list[str]] | None = None,
                 min_session_timeout_ms: int = 200) -> None:
        java = shutil.which("java")
        if not java or not Path("/usr/share/java/zookeeper.jar").exists():
            raise ZooKeeperNotInstalled("ZooKeeper is not installed (Debian: apt-get install zookeeper; needs Java)")
        self.java = java
        self.ports = list(ports)
        self.peer_ports = list(peer_ports or [])
        assert len(self.ports) == 1 or len(self.peer_ports) == len(self.ports)
        self.hosts = list(hosts or ["127.0.0.1"] * len(self.ports))
        self.wrap = wrap
        self.min_session_timeout_ms = min_session_timeout_ms   # the shortest session the server grants
        self.dir = Path(tempfile.mkdtemp(prefix="autoswitch-zk-"))
        self.procs: dict[int, subprocess.Popen] = {}

    @property
    def url(self) -> str:
        return "zookeeper://" + ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports, strict=True))

    def _config(self, i: int) -> Path:
        d = self.dir / f"zk{i + 1}"
        (d / "data").mkdir(parents=True, exist_ok=True)
        lines = [f"tickTime={TICK_MS}", f"dataDir={d / 'data'}", f"clientPort={self.ports[i]}",
                 f"clientPortAddress={self.hosts[i]}", f"minSessionTimeout={self.min_session_timeout_ms}", "maxSessionTimeout=60000",
                 "initLimit=50", "syncLimit=20", "admin.enableServer=false", "maxClientCnxns=0",
                 "4lw.commands.whitelist=ruok,srvr"]
        if len(self.ports) > 1:
            (d / "data" / "myid").write_text(f"{i + 1}\n")
            lines += [f"server.{k + 1}={self.hosts[k]}:{q}:{e}" for k, (q, e) in enumerate(self.peer_ports)]
        cfg = d / "zoo.cfg"
        cfg.write_text("\n".join(lines) + "\n")
        return cfg

    def start_one(self, i: int) -> None:
        cfg = self._config(i)
        with open(cfg.parent / "server.log", "ab") as logf:
            self.procs[i] = subprocess.Popen(
                [*(self.wrap(i) if self.wrap else []), self.java, "-Xmx256m", "-cp", CLASSPATH, f"-Dzookeeper.log.dir={cfg.parent}",
                 "-Dzookeeper.root.logger=WARN,CONSOLE", MAIN, str(cfg)],
                stdout=logf, stderr=subprocess.STDOUT, start_new_session=True)

    def start(self, timeout_s: float = 60.0) -> ZooKeeperServer:
        for i in range(len(self.ports)):
            self.start_one(i)
        for i in range(len(self.ports)):
            self.wait_serving(i, timeout_s)
        _log.info("zookeeper_started", ports=self.ports, pids=[p.pid for p in self.procs.values()],
                  data=str(self.dir))
        return self

    def wait_serving(self, i: int, timeout_s: float) -> None:
        """Until server ``i`` answers ``srvr`` with a mode (it has joined a quorum)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            p = self.procs[i]
            if p.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {p.returncode}: see {self.dir / f'zk{i + 1}'}")
            with contextlib.suppress(OSError), socket.create_connection((self.hosts[i], self.ports[i]), 0.5) as s:
                s.sendall(b"srvr")
                s.settimeout(0.5)
                if b"Mode:" in s.recv(4096):
                    return
            time.sleep(0.05)
        raise RuntimeError(f"ZooKeeper on {self.ports[i]} did not serve within {timeout_s} s")

    def mode(self, i: int) -> str:
        """``leader``, ``follower``, ``standalone``, or "" when server ``i`` does not serve."""
        with contextlib.suppress(OSError), socket.create_connection((self.hosts[i], self.ports[i]), 0.5) as s:
            s.sendall(b"srvr")
            s.settimeout(0.5)
            for line in s.recv(4096).decode(errors="replace").splitlines():
                if line.startswith("Mode:"):
                    return line.split(":", 1)[1].strip()
        return ""

    def stop_one(self, i: int) -> None:
        end_process(self.procs.get(i), 10.0)

    def stop(self) -> None:
        """End our servers (by PID) and remove their files."""
        try:
            for i in list(self.procs):
                self.stop_one(i)
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)
