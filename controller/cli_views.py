"""Operator views of the controller cluster, the way etcdctl and Redis Sentinel show theirs:
`admin endpoint-health` (etcdctl endpoint health), `admin member-list` (etcdctl member list),
`admin ckquorum` (Sentinel CKQUORUM) and `admin alarm-list` (etcdctl alarm list). Each asks every listed controller at once, so a dead or
cut-off machine costs its timeout once, not once per machine."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from autoswitch.base.errors import AutoswitchError


class QuorumUnavailable(AutoswitchError):
    code = "CONTROLLER_QUORUM_UNAVAILABLE"


async def ask_every_node(client: Any, timeout_s: float) -> list[dict]:
    """GetMetaData from every address of ``client`` at once: one dict per address, with
    ``took_ms`` and either the node's answer (fields of GetMetaDataReply) or ``error``."""
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    async def one(addr: str) -> dict:
        t0 = time.monotonic()
        try:
            r = await client.call_node(addr, "GetMetaData", pb.GetMetaDataRequest(), timeout_s=timeout_s)
        except ControllerRpcError as e:
            return {"address": addr, "took_ms": round((time.monotonic() - t0) * 1000, 1), "error": e.message}
        return {"address": addr, "took_ms": round((time.monotonic() - t0) * 1000, 1), "reply": r}

    return list(await asyncio.gather(*(one(a) for a in client.addresses)))


async def endpoint_health(client: Any, args: Any) -> Any:
    """One row per listed controller: healthy when it answers and knows a leader (etcd's rule:
    a member without a leader cannot serve a linearizable read)."""
    rows = []
    for n in await ask_every_node(client, min(args.timeout_s, 5.0)):
        r = n.get("reply")
        healthy = r is not None and bool(r.leader_id)
        why = n.get("error") or ("" if healthy else "no leader known")
        rows.append({"endpoint": n["address"], "healthy": healthy, "took_ms": n["took_ms"],
                     "node_id": r.node_id if r is not None else None, "error": why or None})
    if not any(row["healthy"] for row in rows):
        raise QuorumUnavailable("no listed controller is healthy", endpoints=rows)
    return {"endpoints": rows}


async def member_list(client: Any, args: Any) -> Any:
    """The membership as the member with the newest configuration sees it: id, client address,
    voter or learner, whether it leads, and whether that member reaches it."""
    nodes = [n for n in await ask_every_node(client, min(args.timeout_s, 5.0)) if "reply" in n]
    if not nodes:
        raise QuorumUnavailable("no listed controller answered")
    best = max(nodes, key=lambda n: (n["reply"].config_index, n["reply"].is_leader))["reply"]
    members = [{"node_id": p.node_id, "address": p.address, "role": p.role or "voter",
                "leader": p.node_id == best.leader_id, "reachable": p.reachable} for p in best.peers]
    return {"cluster_id": best.cluster_id, "leader": best.leader_id or None, "members": members}


async def ckquorum(client: Any, args: Any) -> Any:
    """Sentinel's CKQUORUM for the controllers: OK when a majority of the voters answer and agree
    on one leader; else QUORUM_UNAVAILABLE (exit 1) saying how many answered of how many needed."""
    nodes = await ask_every_node(client, min(args.timeout_s, 5.0))
    answered = [n["reply"] for n in nodes if "reply" in n]
    if not answered:
        raise QuorumUnavailable(f"none of the {len(nodes)} listed controllers answered")
    best = max(answered, key=lambda r: (r.config_index, r.is_leader))
    voters = sorted(p.node_id for p in best.peers if (p.role or "voter") == "voter")
    up = sorted({r.node_id for r in answered if r.node_id in voters})
    need = len(voters) // 2 + 1
    leaders = sorted({r.leader_id for r in answered if r.leader_id})
    out = {"voters": voters, "answering": up, "needed": need, "leader": leaders[0] if len(leaders) == 1 else None}
    if len(up) < need:
        raise QuorumUnavailable(f"{len(up)} of {len(voters)} voters answer, {need} needed for a quorum "
                                f"(not answering: {', '.join(v for v in voters if v not in up)}; the list "
                                "given may also leave some out)", **out)
    if len(leaders) != 1:
        raise QuorumUnavailable(f"{len(up)} voters answer but they name {len(leaders)} leaders "
                                f"({', '.join(leaders) or 'none'}): an election is running", **out)
    out["status"] = f"OK {len(up)} of {len(voters)} voters answer, a quorum needs {need}, leader {leaders[0]}"
    return out


async def alarm_list(client: Any, args: Any) -> Any:
    """The leader's standing alarms (and with ``--all`` the last cleared ones): what is wrong now,
    since when, how often it was raised and why (controller/server/alarms.py)."""
    import json

    from autoswitch.proto import controller_pb2 as pb

    r = await client.call("ListAlarms", pb.ListAlarmsRequest(include_cleared=args.all))
    rows = []
    for a in r.alarms:
        detail = json.loads(a.detail_json or "{}")
        if not args.json:     # one readable column for people, not one per key (--json keeps the map)
            detail = "; ".join(f"{k}={v}" for k, v in sorted(detail.items()) if k != "epoch") or None
        row: dict[str, Any] = {"kind": a.kind, "group": a.group, "epoch": None if a.epoch < 0 else a.epoch,
                               "first_ts_ms": a.first_ms, "last_ts_ms": a.last_ms, "count": a.count,
                               "detail": detail}
        if a.cleared_ms:
            row.update(cleared_ts_ms=a.cleared_ms, cleared_by=a.cleared_by)
        rows.append(row)
    standing = sum(1 for x in rows if "cleared_ts_ms" not in x)
    out: dict[str, Any] = {"summary": f"{standing} alarm{'s' if standing != 1 else ''} standing"
                                      + (f" ({r.dropped} dropped at the bound)" if r.dropped else ""),
                           "standing": standing, "alarms": rows}
    return out
