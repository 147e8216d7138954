"""controller/server/alerts.py: the notification script gets every alert, is killed at its timeout, never
blocks the caller, and is bounded; watchers get the same alerts."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

from autoswitch.controller.server.alerts import ALL, Alerter
from autoswitch.controller.server.watchers import Watchers


def script(tmp: Path, body: str) -> str:
    p = tmp / "notify.sh"
    p.write_text("#!/bin/sh\n" + body + "\n")
    os.chmod(p, 0o755)
    return str(p)


async def settle(a: Alerter, within_s: float = 20.0) -> None:
    deadline = time.monotonic() + within_s
    while a.in_flight and time.monotonic() < deadline:
        await asyncio.wait(list(a.in_flight), timeout=deadline - time.monotonic())


def test_script_gets_kind_group_and_json_and_watchers_the_alert(tmp_path):
    out = tmp_path / "got.txt"

    async def run():
        w = Watchers(4, 8)
        q = w.subscribe(ALL)
        a = Alerter("n1", script(tmp_path, f'printf "%s|%s|%s\\n" "$1" "$2" "$3" >> {out}'), 10, 4, w)
        a.emit("master_elected", "g1", 123, master=2, epoch=5, reason="controller:crash:ranked", unclean=False)
        await settle(a)
        assert a.sent == 1 and a.failed == 0
        got = q.get_nowait()
        assert (got.kind, got.group, got.detail["master"]) == ("master_elected", "g1", 2)
    asyncio.run(run())
    kind, group, js = out.read_text().strip().split("|", 2)
    assert (kind, group) == ("master_elected", "g1")
    assert json.loads(js)["detail"]["epoch"] == 5 and json.loads(js)["node_id"] == "n1"


def test_a_hanging_script_is_killed_and_never_blocks(tmp_path):
    async def run():
        a = Alerter("n1", script(tmp_path, "sleep 30"), 0.3, 2, Watchers(4, 8))
        t0 = time.monotonic()
        for i in range(5):
            a.emit("no_master", f"g{i}", 1)
        assert time.monotonic() - t0 < 1.0, "emit waited for the script"
        assert len(a.in_flight) == 2 and a.dropped == 3          # bounded: the rest skip the script
        await settle(a)
        assert a.failed == 2 and a.sent == 0
    asyncio.run(run())


def test_a_failing_script_is_counted(tmp_path):
    async def run():
        a = Alerter("n1", script(tmp_path, "echo boom >&2; exit 3"), 5, 2, Watchers(4, 8))
        a.emit("master_crashed", "g1", 1, master=1, epoch=2)
        await settle(a)
        assert a.failed == 1
    asyncio.run(run())


def test_emit_once_per_kind_group_and_epoch():
    async def run():
        w = Watchers(4, 64)
        q = w.subscribe(ALL)
        a = Alerter("n1", "", 1, 1, w)
        assert a.emit_once("liveness_disagreement", "g1", 3, 1, master=1) is not None
        assert a.emit_once("liveness_disagreement", "g1", 3, 2, master=1) is None
        assert a.emit_once("master_lease_refused", "g1", 3, 3, master=1) is not None   # another kind
        assert a.emit_once("liveness_disagreement", "g1", 4, 4, master=1) is not None  # a new MasterEpoch
        assert q.qsize() == 3
    asyncio.run(run())
