"""Role-switch hooks: right arguments, time-limited, failures logged, never blocking the caller."""

from __future__ import annotations

import asyncio
import os
import stat
import threading

import pytest
from autoswitch.broker.replicas.hooks import HookConfig, HookRunner, RoleHooks, hooks_for, script_args
from autoswitch.broker.replicas.replicas_manager import RoleChange
from structlog.testing import capture_logs

from autoswitch.base.errors import ConfigError


def change(role="master", old=(2, "10.0.0.2:10911"), new=(1, "10.0.0.1:10911"), epoch=4) -> RoleChange:
    return RoleChange(role, "C", "g1", 1, epoch, old[0], old[1], new[0], new[1], frozenset({1, 2}), 5)


def run(coro):
    return asyncio.run(asyncio.wait_for(coro, 20))


def write_script(tmp_path, body: str):
    p = tmp_path / "hook.sh"
    p.write_text("#!/bin/sh\n" + body)
    p.chmod(p.stat().st_mode | stat.S_IXUSR)
    return str(p)


def test_which_callbacks_fire():
    seen = []
    hooks = RoleHooks(
        on_become_master=[lambda c: seen.append("m")],
        on_become_slave=[lambda c: seen.append("s")],
        on_master_changed=[lambda c: seen.append("changed")],
    )
    assert [n for n, _ in hooks_for(change("master"), hooks)] == ["on_become_master", "on_master_changed"]
    assert [n for n, _ in hooks_for(change("slave", old=(2, "a"), new=(2, "a")), hooks)] == ["on_become_slave"]
    assert [n for n, _ in hooks_for(change("fenced", new=(0, "")), hooks)] == ["on_master_changed"]


def test_script_args_sentinel_style():
    assert script_args(change()) == ["master", "g1", "4", "10.0.0.2:10911", "10.0.0.1:10911"]
    assert script_args(change("slave", old=(0, ""), new=(2, "h:1"))) == ["slave", "g1", "4", "-", "h:1"]


def test_callbacks_get_the_change_sync_and_async():
    got = []

    async def async_cb(c):
        got.append(("async", c.epoch, c.new_master_addr, c.sync_state_set))

    def sync_cb(c):
        got.append(("sync", c.epoch, c.old_master_addr, c.group))

    async def main():
        r = HookRunner(HookConfig(), RoleHooks(on_become_master=[async_cb], on_master_changed=[sync_cb]))
        r.submit(change())
        await r.drain(10)
        return r

    r = run(main())
    assert sorted(got) == [("async", 4, "10.0.0.1:10911", frozenset({1, 2})), ("sync", 4, "10.0.0.2:10911", "g1")]
    assert r.completed == 2 and r.failures == 0


def test_failing_and_hanging_hooks_are_time_limited_and_do_not_block():
    release = threading.Event()
    ran_after = []

    def raising(c):
        raise RuntimeError("user bug")

    async def hanging(c):
        await asyncio.sleep(3600)

    def blocking_thread(c):
        release.wait(30)  # a sync hook stuck in I/O; the runner stops waiting for it

    async def main():
        r = HookRunner(HookConfig(hook_timeout_s=0.2, hook_concurrency=4),
                       RoleHooks(on_become_master=[raising, hanging, blocking_thread, lambda c: ran_after.append(1)]))
        r.submit(change())  # returns at once: the switch is never held up by hooks
        assert r.completed == 0
        await r.drain(10)
        release.set()
        return r

    with capture_logs() as logs:
        r = run(main())
    assert ran_after == [1]
    assert r.completed == 4 and r.failures == 3
    events = [e["event"] for e in logs]
    assert events.count("hook_timeout") == 2 and events.count("hook_failed") == 1


def test_concurrency_is_bounded():
    running = 0
    peak = 0

    async def cb(c):
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1

    async def main():
        r = HookRunner(HookConfig(hook_concurrency=2), RoleHooks(on_become_master=[cb] * 6))
        r.submit(change())
        await r.drain(10)
        return r

    r = run(main())
    assert peak == 2 and r.completed == 6


def test_queue_limit_drops_excess_runs():
    async def cb(c):
        await asyncio.sleep(0.01)

    async def main():
        r = HookRunner(HookConfig(hook_concurrency=1, hook_queue_limit=3), RoleHooks(on_become_master=[cb] * 5))
        r.submit(change())
        await r.drain(10)
        return r

    r = run(main())
    assert r.dropped == 2 and r.completed == 3


def test_script_hook_gets_role_group_epoch_old_new(tmp_path):
    out = tmp_path / "args.txt"
    script = write_script(tmp_path, f'echo "$@" > {out}\n')

    async def main():
        r = HookRunner(HookConfig(role_change_script=script))
        r.submit(change("slave", old=(1, "10.0.0.1:10911"), new=(3, "10.0.0.3:10911"), epoch=7))
        await r.drain(10)
        return r

    r = run(main())
    assert out.read_text().strip() == "slave g1 7 10.0.0.1:10911 10.0.0.3:10911"
    assert r.failures == 0


def test_failing_script_is_logged(tmp_path):
    script = write_script(tmp_path, "echo boom; exit 3\n")

    async def main():
        r = HookRunner(HookConfig(role_change_script=script))
        r.submit(change())
        await r.drain(10)
        return r

    with capture_logs() as logs:
        r = run(main())
    assert r.failures == 1
    failed = [e for e in logs if e["event"] == "hook_failed"]
    assert failed and "exited with 3" in failed[0]["error"] and "boom" in failed[0]["error"]


def test_hanging_script_is_killed_after_the_timeout(tmp_path):
    pidfile = tmp_path / "pid"
    script = write_script(tmp_path, f"echo $$ > {pidfile}\nexec sleep 60\n")

    async def main():
        r = HookRunner(HookConfig(role_change_script=script, hook_timeout_s=0.5))
        r.submit(change())
        await r.drain(10)
        return r

    r = run(main())
    assert r.failures == 1 and r.completed == 1
    pid = int(pidfile.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)  # reaped: gone, not a zombie


def test_bad_config_refused(tmp_path):
    with pytest.raises(ConfigError):
        HookConfig(hook_timeout_s=0).validate()
    with pytest.raises(ConfigError):
        HookConfig(role_change_script=str(tmp_path / "missing.sh")).validate()
