"""The one process launcher: `python -m autoswitch ...` children, each in its own session with its
own log file, ended by PID only (SIGTERM, then SIGKILL after a bounded wait). Used by the
playground, the failover benchmark and the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

AUTOSWITCH_ENTRY = ("-m", "autoswitch")


@dataclass
class Child:
    name: str
    args: list[str]
    log_path: Path
    entry: Sequence[str] = AUTOSWITCH_ENTRY   # what follows the interpreter: a module or a script
    env: dict[str, str] = field(default_factory=dict)   # added to this process's environment
    port: int = 0
    group: str = ""
    popen: subprocess.Popen | None = None

    def start(self) -> Child:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env}
        with open(self.log_path, "ab") as logf:
            self.popen = subprocess.Popen(
                [sys.executable, *self.entry, *self.args],
                stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                # Own session: a terminal Ctrl-C reaches only the launcher, which ends children in order.
                start_new_session=True,
            )
        return self

    @property
    def pid(self) -> int:
        assert self.popen is not None
        return self.popen.pid

    @property
    def exit_code(self) -> int | None:
        """The exit status once it has ended (None while it runs or before it started)."""
        return self.popen.returncode if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def kill9(self, wait_s: float = 10.0) -> None:
        if self.popen is not None and self.alive():
            os.kill(self.pid, signal.SIGKILL)
            self.popen.wait(wait_s)

    def stop(self, wait_s: float = 10.0) -> tuple[int | None, bool]:
        """SIGTERM, then SIGKILL after ``wait_s``: (exit code, forced?)."""
        return stop_all([self], wait_s)[0]

    def log_text(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""


def stop_all(children: Iterable[Child], wait_s: float) -> list[tuple[int | None, bool]]:
    """SIGTERM every live child at once, then wait for each within one shared deadline; SIGKILL
    what is left. One (exit code, forced?) per child, in order."""
    children = list(children)
    for c in children:
        if c.alive():
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.pid, signal.SIGTERM)
    out: list[tuple[int | None, bool]] = []
    deadline = time.monotonic() + wait_s
    for c in children:
        if c.popen is None:
            out.append((None, False))
            continue
        try:
            out.append((c.popen.wait(max(0.1, deadline - time.monotonic())), False))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.kill(c.pid, signal.SIGKILL)
            out.append((c.popen.wait(wait_s), True))
    return out


def end_process(proc: subprocess.Popen | None, wait_s: float) -> None:
    """SIGTERM a process we started (by its PID), SIGKILL it if it is still there after ``wait_s``."""
    if proc is None or proc.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, signal.SIGTERM)
    try:
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait(wait_s)
