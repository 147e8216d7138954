"""`autoswitch admin move-masters --from-host HOST`: every master on one machine hands over to
an in-sync slave on another, one group at a time (before maintenance of that machine; RocketMQ
operators script this from clusterList, Kafka's is a reassignment plan).

The groups and their masters come from the controllers; each move is the graceful handover the
master itself carries out (TransferMaster, the same as `admin transfer-master`), to the in-sync
slave with the highest offset that is not on the host. A group whose in-sync slaves are all on
that host is not moved and is reported. `--dry-run` prints the plan and changes nothing. Exit 0
when every planned move succeeded, 1 otherwise (the rows say which).
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from autoswitch.base.addr import split_hostport
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.output import emit, fail
from autoswitch.base.tls import tls_from_args

MOVE_REASON = "move-masters"


def register(sub: Any, admin_sub: Any) -> None:
    from autoswitch.base.tls import add_tls_args

    a = admin_sub.add_parser("move-masters", help="every master on a host hands over to an in-sync slave elsewhere")
    a.add_argument("--controller", default=None,
                   help="HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_CONTROLLERS, or the profile's controllers)")
    a.add_argument("--from-host", required=True, help="the host (as in the brokers' addresses) to move masters off")
    a.add_argument("--dry-run", action="store_true", help="print the plan, change nothing")
    a.add_argument("--timeout", type=float, default=5.0, help="seconds each master may hold writes while it drains")
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_move_masters)


def host_of(address: str) -> str:
    return split_hostport(address)[0].strip("[]")


def plan(groups: list[Any], host: str) -> list[dict[str, Any]]:
    """One row per group whose master is on ``host``: the target (an alive in-sync slave on
    another host with the highest max offset) or why there is none."""
    rows = []
    for g in groups:
        info = g.replica_info
        if not info.master_broker_id or host_of(info.master_address) != host:
            continue
        candidates = [m for m in g.members if m.broker_id != info.master_broker_id and m.alive
                      and m.broker_id in info.sync_state_set and host_of(m.address) != host]
        row: dict[str, Any] = {"group": info.broker_name, "master": info.master_broker_id,
                               "master_address": info.master_address, "master_epoch": info.master_epoch}
        if candidates:
            best = max(candidates, key=lambda m: (m.max_offset, -m.broker_id))
            row.update(target=best.broker_id, target_address=best.address)
        else:
            row.update(target=None, result="not moved: no alive in-sync slave on another host")
        rows.append(row)
    return rows


def cmd_move_masters(args: argparse.Namespace) -> int:
    from autoswitch.broker.client.client import AdminClient
    from autoswitch.controller.client import ControllerClient
    from autoswitch.proto import broker_pb2 as pb

    try:
        tls = tls_from_args(args)
    except AutoswitchError as e:
        return fail(args, e, rc=2 if e.code == "CONFIG_ERROR" else 1)

    async def run() -> tuple[list[dict[str, Any]], bool]:
        async with ControllerClient(args.controller, deadline_s=30, tls=tls) as ctl:
            rows = plan(list(await ctl.get_sync_state_data(())), args.from_host)
        ok = all(r["target"] is not None for r in rows)
        if args.dry_run:
            # a plan, whatever it says: the rows tell which masters could not move (an error
            # envelope for "nothing would move" read as a failed command; issue 64, item 9)
            for r in rows:
                if r["target"] is not None:
                    r["result"] = f"would move to broker {r['target']}"
            return rows, True
        for r in rows:                  # one group at a time: each drain pauses that group's writes
            if r["target"] is None:
                continue
            client = AdminClient(r["master_address"], timeout_s=10.0, tls=tls)
            try:
                reply = await client.transfer_master(r["target"], int(args.timeout * 1000), reason=MOVE_REASON)
            except AutoswitchError as e:
                r["result"], ok = f"failed: {e.message}", False
                continue
            finally:
                await client.close()
            if reply.status == pb.OK:
                r.update(result="moved", new_master=reply.master_id, new_epoch=reply.master_epoch)
            else:
                r["result"], ok = f"failed: {pb.Status.Name(reply.status)} {reply.error_message}", False
        return rows, ok

    try:
        rows, ok = asyncio.run(run())
    except AutoswitchError as e:
        return fail(args, e)
    movable = sum(1 for r in rows if r["target"] is not None)
    out = {"from_host": args.from_host, "dry_run": bool(args.dry_run), "groups": rows,
           "summary": (f"{movable} of {len(rows)} masters on {args.from_host} " + ("would move" if args.dry_run
                       else "moved") if rows else f"no master on {args.from_host}")}
    if not ok:
        return fail(args, {"code": "NOT_ALL_MOVED", "message": "some masters were not moved (see groups)", **out})
    emit(args, out)
    return 0
