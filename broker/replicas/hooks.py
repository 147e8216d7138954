"""Role-switch hooks: Python callbacks and a Sentinel-style reconfig script.

Hooks run AFTER the role switch, in the background, with bounded concurrency and a
per-hook time limit: a slow, failing or hanging hook is logged and never delays the
switch (a master that waits on a user script is a master that is not serving).

Script hook (like Redis Sentinel's ``client-reconfig-script``): called as
``PATH <role> <group> <epoch> <old-master> <new-master>`` where role is
master|slave|fenced and a missing master is ``-``. Exit code 0 = ok; anything else,
a timeout (the process is killed by its PID) or a failure to start is logged.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import signal
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from autoswitch.broker.replicas.replicas_manager import RoleChange

from autoswitch.base.errors import ConfigError
from autoswitch.base.log import get_logger
from autoswitch.base.waits import cancel_and_wait

Callback = Callable[[RoleChange], Awaitable[None] | None]
_NONE = "-"
_MAX_OUTPUT_LOGGED = 2048


@dataclass(frozen=True)
class HookConfig:
    role_change_script: str | None = None
    hook_timeout_s: float = 5.0
    hook_concurrency: int = 2  # hooks running at once
    hook_queue_limit: int = 64  # waiting hook runs; beyond this the oldest waiting run is dropped

    def validate(self) -> HookConfig:
        if not (0 < self.hook_timeout_s <= 600):
            raise ConfigError("hook_timeout_s must be in (0, 600]", key="hook_timeout_s")
        if not (1 <= self.hook_concurrency <= 64):
            raise ConfigError("hook_concurrency must be in [1, 64]", key="hook_concurrency")
        if not (1 <= self.hook_queue_limit <= 10_000):
            raise ConfigError("hook_queue_limit must be in [1, 10000]", key="hook_queue_limit")
        if self.role_change_script is not None and not os.access(self.role_change_script, os.X_OK):
            raise ConfigError(f"role change script {self.role_change_script!r} is not an executable file",
                              key="role_change_script")
        return self


@dataclass
class RoleHooks:
    """User callbacks; each gets the RoleChange. Sync callbacks run in a worker thread."""

    on_become_master: list[Callback] = field(default_factory=list)
    on_become_slave: list[Callback] = field(default_factory=list)
    on_master_changed: list[Callback] = field(default_factory=list)


def script_args(change: RoleChange) -> list[str]:
    return [
        change.role,
        change.group,
        str(change.epoch),
        change.old_master_addr or _NONE,
        change.new_master_addr or _NONE,
    ]


def hooks_for(change: RoleChange, hooks: RoleHooks) -> list[tuple[str, Callback]]:
    """Which callbacks a change fires, in order: role first, then master_changed."""
    out: list[tuple[str, Callback]] = []
    if change.role == "master":
        out += [("on_become_master", cb) for cb in hooks.on_become_master]
    elif change.role == "slave":
        out += [("on_become_slave", cb) for cb in hooks.on_become_slave]
    if (change.old_master_id, change.old_master_addr) != (change.new_master_id, change.new_master_addr):
        out += [("on_master_changed", cb) for cb in hooks.on_master_changed]
    return out


class HookRunner:
    """Runs hooks for each RoleChange in the background of the running event loop."""

    def __init__(self, config: HookConfig | None = None, hooks: RoleHooks | None = None) -> None:
        self.config = (config or HookConfig()).validate()
        self.hooks = hooks or RoleHooks()
        self._sem = asyncio.Semaphore(self.config.hook_concurrency)
        self._tasks: set[asyncio.Task] = set()
        self._waiting = 0
        self._log = get_logger("broker.hooks")
        self.completed = 0  # runs finished (ok, failed or timed out), for status and tests
        self.failures = 0
        self.dropped = 0

    def submit(self, change: RoleChange) -> None:
        """Never blocks and never raises: the role switch is already done."""
        jobs: list[tuple[str, Callable[[], Awaitable[None]]]] = []
        for name, cb in hooks_for(change, self.hooks):
            jobs.append((name, functools.partial(self._run_callback, cb, change)))
        if self.config.role_change_script:
            jobs.append(("role_change_script", lambda: self._run_script(change)))
        for name, job in jobs:
            if self._waiting >= self.config.hook_queue_limit:
                self.dropped += 1
                self._log.warning("hook_dropped", hook=name, reason="queue_full", group=change.group,
                                  epoch=change.epoch, limit=self.config.hook_queue_limit)
                continue
            self._waiting += 1
            task = asyncio.get_running_loop().create_task(self._guarded(name, job, change))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _guarded(self, name: str, job: Callable[[], Awaitable[None]], change: RoleChange) -> None:
        log = self._log.bind(hook=name, group=change.group, brokerId=change.broker_id, epoch=change.epoch,
                             role=change.role)
        try:
            async with self._sem:
                self._waiting -= 1
                try:
                    await asyncio.wait_for(job(), self.config.hook_timeout_s)
                    log.info("hook_done")
                except TimeoutError:
                    self.failures += 1
                    log.warning("hook_timeout", timeoutS=self.config.hook_timeout_s)
                except asyncio.CancelledError:
                    raise
                except Exception as e:  # noqa: BLE001 - a user hook may raise anything; it must not take us down
                    self.failures += 1
                    log.warning("hook_failed", error=repr(e))
                finally:
                    self.completed += 1
        except asyncio.CancelledError:
            log.info("hook_cancelled")
            raise

    async def _run_callback(self, cb: Callback, change: RoleChange) -> None:
        if inspect.iscoroutinefunction(cb):
            await cb(change)
            return
        # A sync callback may block; a thread keeps the loop free. If it hangs, the timeout stops
        # waiting for it (Python cannot kill a thread) and the semaphore slot is released.
        res = await asyncio.to_thread(cb, change)
        if inspect.isawaitable(res):
            await res

    async def _run_script(self, change: RoleChange) -> None:
        path = self.config.role_change_script
        assert path is not None
        args = script_args(change)
        proc = await asyncio.create_subprocess_exec(
            path, *args, stdin=asyncio.subprocess.DEVNULL, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT, start_new_session=True,
        )
        try:
            out, _ = await proc.communicate()
        except asyncio.CancelledError:
            # Timed out (wait_for cancels us) or shutting down: end the script we started and its
            # children, by the id of the session we created for it.
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(Exception):
                await asyncio.shield(proc.wait())
            raise
        text = out[-_MAX_OUTPUT_LOGGED:].decode(errors="replace") if out else ""
        if proc.returncode != 0:
            raise RuntimeError(f"role change script exited with {proc.returncode}: {text.strip()}")
        self._log.info("role_change_script_ok", args=args, output=text.strip())

    async def drain(self, timeout_s: float | None = None) -> None:
        """Wait for running hooks (tests, shutdown); each is already time-limited."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout_s)

    async def close(self) -> None:
        await cancel_and_wait(list(self._tasks), timeout_s=5)
