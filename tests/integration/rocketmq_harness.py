"""Real Apache RocketMQ 5 processes for the compatibility tests: a name server, brokers in
controller mode, and a Java client compiled at test time (tests/integration/rocketmq/RmqTool.java).

Where RocketMQ comes from: ``ROCKETMQ_HOME`` (a folder with ``bin/rmq``, as the fixture in
the fixture beside this checkout has, ``shared/tools/rocketmq-5.2.0`` in the checkout's parent folder), else that fixture. Without either, or
without ``java``/``javac``, :func:`rocketmq_home` says why and the tests skip with that reason.
Each process gets its own writable home (its logs) and is ended by its PID.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from tests.procs import HOST, free_block, free_port, wait_port

REPO = Path(__file__).resolve().parents[2]
TOOL_SRC = Path(__file__).with_name("rocketmq") / "RmqTool.java"


def rocketmq_home() -> tuple[Path | None, str]:
    """(the RocketMQ folder, "") or (None, why not)."""
    beside = [str(d / "shared" / "tools" / "rocketmq-5.2.0") for d in REPO.parents]
    for cand in (os.environ.get("ROCKETMQ_HOME", ""), *beside):
        if cand and (Path(cand) / "bin" / "rmq").is_file():
            if shutil.which("java") is None or shutil.which("javac") is None:
                return None, "RocketMQ found but no java/javac on PATH"
            return Path(cand), ""
    return None, "no RocketMQ 5 found (set ROCKETMQ_HOME to a folder with bin/rmq)"


class RocketMQ:
    """Starts RocketMQ processes under ``tmp``; ``stop_all`` ends them by PID."""

    def __init__(self, home: Path, tmp: Path) -> None:
        self.home, self.tmp = home, Path(tmp)
        self.procs: dict[str, subprocess.Popen] = {}
        self.ports: dict[str, int] = {}
        self._classpath = ""

    # ---- processes ----

    def _start(self, name: str, kind: str, conf: dict[str, object], heap: str = "256m") -> subprocess.Popen:
        d = self.tmp / name
        d.mkdir(parents=True, exist_ok=True)
        conf_path = d / f"{kind}.conf"
        conf_path.write_text("".join(f"{k}={v}\n" for k, v in conf.items()))
        env = {**os.environ, "RMQ_HOME_DIR": str(d), "RMQ_HEAP": heap}
        with open(d / "out.log", "ab") as out:
            p = subprocess.Popen(["bash", str(self.home / "bin" / "rmq"), kind, "-c", str(conf_path)], stdout=out,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, start_new_session=True)
        self.procs[name] = p
        return p

    def namesrv(self, name: str = "ns", **extra: object) -> str:
        """A name server (``extra``: more of its settings, e.g. RocketMQ's embedded controller)."""
        port = free_port()
        self.ports[name] = port
        self._start(name, "namesrv", {"listenPort": port, **extra})
        return f"{HOST}:{port}"

    def broker(self, name: str, namesrv: str, controllers: list[str], *, cluster: str = "C1",
               group: str = "broker-a", **extra: object) -> str:
        """A broker of ``group`` in controller mode (brokerId -1: the controller assigns it)."""
        if name not in self.ports:
            # a broker listens on listenPort, listenPort - 2 (its "fast" channel) and haListenPort
            base = free_block(3)
            self.ports[name], self.ports[f"{name}-ha"] = base + 2, base + 1
        port = self.ports[name]
        store = self.tmp / name / "store"
        conf: dict[str, object] = {
            "brokerClusterName": cluster, "brokerName": group, "brokerId": -1, "brokerIP1": HOST,
            "listenPort": port, "haListenPort": self.ports[f"{name}-ha"],
            "namesrvAddr": namesrv, "enableControllerMode": "true", "controllerAddr": ";".join(controllers),
            "storePathRootDir": store, "storePathCommitLog": store / "commitlog",
            "allAckInSyncStateSet": "true", "autoCreateTopicEnable": "true", "flushDiskType": "SYNC_FLUSH",
        }
        conf.update(extra)
        self._start(name, "broker", conf, heap="384m")
        return f"{HOST}:{port}"

    def has_topic(self, name: str, topic: str) -> bool:
        """Broker ``name`` holds ``topic``'s config (its store's topics.json). A topic created
        automatically exists on the master first; a slave copies the master's topics every 10 s,
        and a slave elected before its copy serves no reader of the topic."""
        try:
            return f'"{topic}"' in (self.tmp / name / "store" / "config" / "topics.json").read_text()
        except OSError:
            return False

    def wait_port(self, name: str, timeout: float = 120.0) -> None:
        wait_port(self.ports[name], timeout=timeout)

    def kill9(self, name: str) -> None:
        p = self.procs[name]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait(10)

    def stop(self, name: str) -> None:
        """End one process as its operator would (SIGTERM; SIGKILL after 15 s)."""
        p = self.procs[name]
        if p.poll() is None:
            os.kill(p.pid, signal.SIGTERM)
            try:
                p.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(p.pid, signal.SIGKILL)
                p.wait(10)

    def stop_all(self) -> None:
        for p in self.procs.values():
            if p.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs.values():
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(p.pid, signal.SIGKILL)
                p.wait(10)

    def log(self, name: str, tail: int = 30) -> str:
        out = []
        for f in ("out.log", "logs/rocketmqlogs/broker.log", "logs/rocketmqlogs/namesrv.log"):
            path = self.tmp / name / f
            if path.is_file():
                out.append(f"--- {name}/{f}")
                out.extend(path.read_text(errors="replace").splitlines()[-tail:])
        return "\n".join(out)

    # ---- the Java client and mqadmin ----

    def classpath(self) -> str:
        """RmqTool compiled against the RocketMQ client, once per instance."""
        if not self._classpath:
            out = self.tmp / "tool"
            out.mkdir(parents=True, exist_ok=True)
            lib = subprocess.run(["bash", str(self.home / "bin" / "rmq"), "classpath"], capture_output=True,
                                 text=True, check=True).stdout.strip()
            subprocess.run(["javac", "-d", str(out), "-cp", lib, str(TOOL_SRC)], check=True, capture_output=True,
                           timeout=120)
            self._classpath = f"{out}:{lib}"
        return self._classpath

    def client(self, *args: str, timeout: float) -> subprocess.Popen:
        """RmqTool with ``args`` (produce/consume), its output piped; the caller waits for it."""
        d = self.tmp / "client"
        d.mkdir(parents=True, exist_ok=True)
        return subprocess.Popen(["java", "-Xmx192m", f"-Duser.home={d}", "-cp", self.classpath(), "RmqTool", *args],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL,
                                text=True, start_new_session=True)

    def run_client(self, *args: str, timeout: float) -> list[str]:
        p = self.client(*args, timeout=timeout)
        try:
            out, _ = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            out, _ = p.communicate(timeout=10)
        return out.splitlines()

    def mqadmin(self, *args: str, timeout: float = 90.0) -> str:
        d = self.tmp / "mqadmin"
        d.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "RMQ_HOME_DIR": str(d)}
        p = subprocess.run(["bash", str(self.home / "bin" / "rmq"), "mqadmin", *args], capture_output=True,
                           text=True, timeout=timeout, env=env, stdin=subprocess.DEVNULL)
        return p.stdout + p.stderr
