"""Helpers for tests that start real processes on 127.0.0.1.

Processes are started with their own log file, tracked by PID, and ended only
by that PID (SIGKILL for crash tests, SIGTERM otherwise).
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
from pathlib import Path

from autoswitch.app.launcher import AUTOSWITCH_ENTRY, Child

HOST = "127.0.0.1"


_handed_out: set[int] = set()


def free_port() -> int:
    """A port nothing listens on now and this test process has not handed out before: the kernel
    may give the same ephemeral port to two binds in a row once the first socket closed, and two
    "free" ports of one cluster must differ."""
    for _ in range(1000):
        with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
            s.bind((HOST, 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port
    raise RuntimeError("no unused port found in 1000 tries")


def wait_port(port: int, timeout: float = 15.0, proc: subprocess.Popen | None = None) -> None:
    # Readiness: a dead process fails at once; the bound only ends a stuck start, so it never
    # drops below 60 s (Python start-up alone takes seconds on a loaded 2-core machine).
    timeout = max(timeout, 60.0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.pid} exited with {proc.returncode} before port {port} opened")
        with contextlib.closing(socket.socket()) as s:
            s.settimeout(0.2)
            if s.connect_ex((HOST, port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"port {port} did not open within {timeout}s")


CRASH_RUN = str(Path(__file__).resolve().parent / "crash_run.py")


def Proc(name: str, args: list[str], log_dir: Path, env: dict | None = None,  # noqa: N802 - reads as a class
         crash_at: str | None = None) -> Child:
    """One `python -m autoswitch ...` child (autoswitch.app.launcher). ``crash_at``: run it through
    tests/crash_run.py with that crash point armed (the process exits 86 when it gets there)."""
    entry = AUTOSWITCH_ENTRY if crash_at is None else (CRASH_RUN, crash_at)
    return Child(name, list(args), Path(log_dir) / f"{name}.log", entry=entry, env=dict(env or {}))


class ProcGroup:
    """Starts processes and guarantees they are ended (by PID) at teardown."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self.procs: list[Child] = []

    def start(self, name: str, args: list[str], env: dict | None = None, crash_at: str | None = None) -> Child:
        p = Proc(name, args, self.log_dir, env, crash_at).start()
        self.procs.append(p)
        return p

    def stop_all(self) -> None:
        for p in reversed(self.procs):
            with contextlib.suppress(Exception):
                p.stop(5)

    def dump_logs(self, tail: int = 40) -> str:
        out = []
        for p in self.procs:
            lines = p.log_text().splitlines()[-tail:]
            out.append(f"----- {p.name} (pid {p.popen.pid if p.popen else '-'}) -----")
            out.extend(lines)
        return "\n".join(out)
