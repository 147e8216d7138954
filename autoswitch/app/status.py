"""Status of a local cluster: gather (controller + every broker, bounded RPCs) and render.

Gathering is one async call with a deadline per RPC; rendering is a pure function of the
snapshot so the table can be tested without processes and printed either in place (ANSI,
on a TTY) or as plain lines (pipes, logs, tests parse them).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

# One status RPC must never stall the refresh loop: a dead broker answers nothing.
RPC_TIMEOUT_S = 0.5
MAX_GROUPS = 100


@dataclass
class ReplicaRow:
    address: str
    broker_id: int = 0          # from the controller (0 = not registered yet)
    role: str = "-"             # as the broker reports it ("down" when it does not answer)
    epoch: int = 0
    max_offset: int = -1
    confirm_offset: int = -1
    alive: bool | None = None   # the controller's liveness opinion
    in_sync: bool | None = None


@dataclass
class GroupRow:
    group: str
    master_id: int = 0
    master_addr: str = ""
    master_epoch: int = 0
    sync_state_set: list[int] = field(default_factory=list)
    sync_state_set_epoch: int = 0
    replicas: list[ReplicaRow] = field(default_factory=list)


@dataclass
class Snapshot:
    groups: list[GroupRow]
    controller_error: str = ""
    leader: str = ""


async def _broker_status(addr: str, tls: Any) -> Any | None:
    from autoswitch.base.errors import AutoswitchError
    from autoswitch.broker.client.client import AdminClient

    c = AdminClient(addr, timeout_s=RPC_TIMEOUT_S, max_retries=0, tls=tls)
    try:
        return await c.get_status()
    except (TimeoutError, AutoswitchError):
        return None
    finally:
        with contextlib.suppress(Exception):
            await c.close()


async def gather(controller_client: Any, layout: dict[str, list[str]], tls: Any = None) -> Snapshot:
    """layout: group -> broker gRPC addresses we started (the controller may not know them yet);
    tls: the credentials for the brokers (a TLSConfig; None = plaintext)."""
    from autoswitch.base.errors import AutoswitchError

    assert len(layout) <= MAX_GROUPS
    by_group: dict[str, Any] = {}
    err = ""
    try:
        for g in await asyncio.wait_for(controller_client.get_sync_state_data(list(layout)), 2.0):
            by_group[g.replica_info.broker_name] = g
    except (TimeoutError, AutoswitchError) as e:
        err = getattr(e, "code", type(e).__name__)
    addrs = [a for addrs in layout.values() for a in addrs]
    statuses = dict(zip(addrs, await asyncio.gather(*(_broker_status(a, tls) for a in addrs)), strict=True))
    rows = []
    for group, addrs_g in layout.items():
        row = GroupRow(group)
        g = by_group.get(group)
        members = {}
        if g is not None:
            ri = g.replica_info
            row.master_id, row.master_addr, row.master_epoch = ri.master_broker_id, ri.master_address, ri.master_epoch
            row.sync_state_set = sorted(ri.sync_state_set)
            row.sync_state_set_epoch = ri.sync_state_set_epoch
            members = {m.address: m for m in g.members}
        for a in addrs_g:
            r = ReplicaRow(a)
            m = members.get(a)
            if m is not None:
                r.broker_id, r.alive, r.in_sync = m.broker_id, m.alive, m.in_sync
            s = statuses[a]
            if s is None:
                r.role = "down"
            else:
                r.role, r.epoch = s.role, s.master_epoch
                r.max_offset, r.confirm_offset = s.max_offset, s.confirm_offset
                if not r.broker_id:
                    r.broker_id = s.broker_id
            row.replicas.append(r)
        rows.append(row)
    return Snapshot(rows, controller_error=err)


def _fmt_set(s: list[int]) -> str:
    return "{" + ",".join(str(x) for x in s) + "}"


def render_table(snap: Snapshot, header: str = "") -> list[str]:
    """Fixed-width table, one line per replica, for the in-place (TTY) view."""
    out = [header] if header else []
    if snap.controller_error:
        out.append(f"controller: {snap.controller_error} (retrying)")
    out.append(f"{'group':<8} {'master':<24} {'epoch':>5} {'SyncStateSet':<14} "
               f"{'id':>3} {'address':<16} {'role':<7} {'maxOffset':>10} {'confirm':>10} alive")
    for g in snap.groups:
        master = f"{g.master_id}@{g.master_addr}" if g.master_id else "none"
        first = True
        for r in g.replicas:
            lead = (f"{g.group:<8} {master:<24} {g.master_epoch:>5} {_fmt_set(g.sync_state_set):<14}" if first
                    else " " * 54)
            first = False
            alive = "-" if r.alive is None else ("yes" if r.alive else "no")
            out.append(f"{lead} {r.broker_id or '-':>3} {r.address:<16} {r.role:<7} "
                       f"{_off(r.max_offset):>10} {_off(r.confirm_offset):>10} {alive}")
    return out


def _off(v: int) -> str:
    return "-" if v < 0 else str(v)


def render_lines(snap: Snapshot) -> list[str]:
    """One self-contained `key=value` line per group for non-TTY output (stable for scripts/tests)."""
    out = []
    for g in snap.groups:
        reps = " ".join(
            f"{r.broker_id or '-'}:{r.address}:{r.role}:{_off(r.max_offset)}/{_off(r.confirm_offset)}"
            for r in g.replicas)
        master = f"{g.master_id}@{g.master_addr}" if g.master_id else "none"
        out.append(f"status group={g.group} master={master} epoch={g.master_epoch} "
                   f"sss={_fmt_set(g.sync_state_set)} replicas={reps}"
                   + (f" controller_error={snap.controller_error}" if snap.controller_error else ""))
    return out
