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


# Ports are handed out in order round this process's slice, from a random start: a port comes back
# only after every other port of the slice has been handed out since, long after the test that had
# it ended (a remembered set of every port ever handed out filled a worker's slice in one suite run
# and left no 40-port block); a port still held then is skipped because it does not bind.
_ring: tuple[tuple[int, int], int] | None = None     # (slice, next port to try)


def _take(n: int) -> int:
    """The first of the next ``n`` consecutive ports that all bind now, walking the slice in order."""
    global _ring
    low, high = listen_port_range()
    if n > high - low + 1:
        raise RuntimeError(f"{n} ports do not fit in {low}..{high}")
    cursor = _ring[1] if _ring is not None and _ring[0] == (low, high) else _rng.randint(low, high)
    for _ in range(high - low + 1):                  # each try moves on by at least one port
        base = cursor if cursor + n - 1 <= high else low
        busy = next((p for p in range(base, base + n) if not bindable(p)), None)
        if busy is None:
            _ring = ((low, high), base + n)
            return base
        cursor = busy + 1
    _ring = ((low, high), cursor)
    raise RuntimeError(f"no {n} consecutive free ports in {low}..{high}")


def free_port() -> int:
    """A port nothing listens on now, outside the ephemeral range; two calls in one test never
    return the same port (see ``_take``)."""
    return _take(1)


def free_block(n: int) -> int:
    """A base port whose next ``n`` ports are free now, inside ``listen_port_range`` (this
    worker's slice under pytest-xdist); a playground or a benchmark cluster takes base..base+n-1,
    and no later ``free_port``/``free_block`` hands them out until the slice has come round."""
    return _take(n)


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
