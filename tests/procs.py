"""Helpers for tests that start real processes on 127.0.0.1.

Processes are started with their own log file, tracked by PID, and ended only
by that PID (SIGKILL for crash tests, SIGTERM otherwise).
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import subprocess
import time
from pathlib import Path

from autoswitch.app.launcher import AUTOSWITCH_ENTRY, Child

HOST = "127.0.0.1"


_handed_out: set[int] = set()
_rng = random.Random()
# Listening ports come from below the kernel's ephemeral range: a port handed out from inside it
# can be taken by any outgoing connection before the server binds it (bench-failover's elected
# broker once found its HA port held that way). Above the playground's default ports.
LISTEN_PORTS_FROM = 21000


def listen_port_range() -> tuple[int, int]:
    """[low, high] for listening ports in tests and benchmarks.

    Under pytest-xdist (``make test`` runs the suite on several workers) each worker takes its own
    slice: a port is handed out before the process that binds it starts, so two workers drawing
    from one range could hand out the same port to two clusters starting at once.
    """
    try:
        ephemeral_low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        ephemeral_low = 32768
    low, high = LISTEN_PORTS_FROM, max(LISTEN_PORTS_FROM + 1000, ephemeral_low - 1)
    worker, count = _xdist_worker()
    if count > 1:
        width = (high - low + 1) // count
        low, high = low + worker * width, low + (worker + 1) * width - 1
    return low, high


def _xdist_worker() -> tuple[int, int]:
    """(this worker's number, the number of workers); (0, 1) outside pytest-xdist."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")   # "gw0", "gw1", ...
    try:
        count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
        worker = int(name[2:]) if name.startswith("gw") else -1
    except ValueError:
        return 0, 1
    return (worker, count) if 0 <= worker < count else (0, 1)


def bindable(port: int) -> bool:
    with contextlib.closing(socket.socket(socket.AF_INET, socket.SOCK_STREAM)) as s:
        try:
            s.bind((HOST, port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range, and not handed out before by
    this process (two "free" ports of one cluster must differ)."""
    low, high = listen_port_range()
    for _ in range(1000):
        port = _rng.randint(low, high)
        if port not in _handed_out and bindable(port):
            _handed_out.add(port)
            return port
    raise RuntimeError("no unused port found in 1000 tries")


def free_block(n: int) -> int:
    """A base port whose next ``n`` ports are free now, inside ``listen_port_range`` (this
    worker's slice under pytest-xdist), none handed out before by this process; the block is
    recorded as handed out (a playground or a benchmark cluster takes base..base+n-1)."""
    low, high = listen_port_range()
    for _ in range(200):
        base = _rng.randint(low, high - n)
        block = range(base, base + n)
        if not any(p in _handed_out for p in block) and all(bindable(p) for p in block):
            _handed_out.update(block)
            return base
    raise RuntimeError(f"no free block of {n} ports in 200 tries")


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
