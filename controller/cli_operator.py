"""The operator's day at the command line: preferred masters, maintenance (cordon and drain) of
brokers, hosts and controller members, and the decisions explained (docs/operations.md
"Maintenance mode", "Why was this master elected?")."""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Callable
from typing import Any

from autoswitch.controller.codes import Code, ControllerRpcError

from autoswitch.base.addr import split_hostport
from autoswitch.proto import controller_pb2 as pb


def add_commands(admin: Callable[[str, str, Any], argparse.ArgumentParser]) -> None:
    """The commands of this module, added with ``admin`` (controller/cli.py: common flags)."""
    a = admin("set-preferred-master", "the group's preferred master (with auto_rebalance_masters the leader "
                                      "moves mastership back to it by a graceful handover)", set_preferred)
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", required=True)
    a.add_argument("--broker-id", "-i", type=int, required=True, help="0 clears it")
    a = admin("maintenance", "cordon a broker (or every broker of a host) or a controller member: no elections to "
                             "it, mastership drained away by a graceful handover; `off` undoes it "
                             "(docs/operations.md \"Maintenance mode\")", maintenance)
    a.add_argument("state", choices=("on", "off"))
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", default="",
                   help="the broker's group (with --broker-id)")
    a.add_argument("--broker-id", "-i", type=int, default=0)
    a.add_argument("--host", default="", help="every broker whose registered address is on this host, in every group")
    a.add_argument("--controller-node", default="", help="a controller member's node id instead of a broker")
    a.add_argument("--wait-s", type=float, default=0.0,
                   help="wait up to this long for the drain: until no master is in maintenance (0 = do not wait)")
    a = admin("set-zone-preference", "the zones a group's elections prefer, most preferred first (among the "
                                     "replicas holding every acknowledged message)", set_zone_preference)
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", required=True)
    a.add_argument("--zones", required=True, help="ZONE,ZONE,... (empty: clear)")
    a = admin("explain", "the last decisions about a group: elections, SyncStateSet changes and refusals, with "
                         "every replica and the rule that ruled it out", explain_group)
    a.add_argument("--group", "--broker-name", "-b", dest="broker_name", metavar="GROUP", required=True)
    a.add_argument("--last", type=int, default=0, help="how many (newest first; 0 = every one kept)")


def decision_view(text: str) -> dict:
    """A decision record (controller/state/explain.py) as the CLI prints it."""
    import msgspec
    from autoswitch.controller.state.explain import from_json

    return msgspec.to_builtins(from_json(text))


async def set_preferred(client: Any, args: Any) -> Any:
    r = await client.call("SetPreferredMaster", pb.SetPreferredMasterRequest(broker_name=args.broker_name,
                                                                          broker_id=args.broker_id))
    return _info_result(args, r.replica_info)


async def set_zone_preference(client: Any, args: Any) -> Any:
    zones = [z.strip() for z in args.zones.split(",") if z.strip()]
    r = await client.call("SetZonePreference", pb.SetZonePreferenceRequest(broker_name=args.broker_name, zones=zones))
    return _info_result(args, r.replica_info)


def _info_result(args: Any, info: Any) -> dict:
    """{"replica_info": every raw field} with --json; the group's named columns for people."""
    from autoswitch.controller.cli import replica_view

    return {"replica_info": msg_dict(info)} if args.json else replica_view(info)


async def explain_group(client: Any, args: Any) -> Any:
    r = await client.call("Explain", pb.ExplainRequest(broker_name=args.broker_name, last=args.last))
    return {"group": args.broker_name, "pending": r.pending or None,
            "decisions": [decision_view(x) for x in r.decisions_json]}


async def elect_dry_run(client: Any, args: Any) -> Any:
    r = await client.call("ElectMaster", pb.ElectMasterRequest(
        cluster_name=args.cluster_name, broker_name=args.broker_name, broker_id=args.broker_id,
        designate_elect=args.broker_id > 0, dry_run=True))
    return {"dry_run": True, "decision": decision_view(r.decision_json) if r.decision_json else None}


def msg_dict(m: Any) -> dict:
    from autoswitch.controller.cli import message_dict

    return message_dict(m)


async def maintenance(client: Any, args: Any) -> Any:
    on = args.state == "on"
    named = [bool(args.controller_node), bool(args.host), bool(args.broker_name or args.broker_id)]
    if sum(named) != 1 or (named[2] and not (args.broker_name and args.broker_id)):
        raise ControllerRpcError(Code.CONTROLLER_INVALID_REQUEST,
                                 "name one of: --group G --broker-id ID, --host HOST, --controller-node ID")
    if args.controller_node:
        r = await client.call("SetMaintenance", pb.SetMaintenanceRequest(controller_node_id=args.controller_node,
                                                                      on=on))
        return {"controller": args.controller_node, "maintenance": on,
                "controllers_in_maintenance": list(r.controller_maintenance)}
    targets = [(args.broker_name, args.broker_id)]
    if args.host:
        targets = [(g.replica_info.broker_name, mb.broker_id) for g in await client.get_sync_state_data(())
                   for mb in g.members if split_hostport(mb.address)[0] == args.host]
        if not targets:
            raise ControllerRpcError(Code.CONTROLLER_INVALID_REQUEST, f"no registered broker on host {args.host!r}")
    out = []
    for group, bid in targets:
        r = await client.call("SetMaintenance", pb.SetMaintenanceRequest(broker_name=group, broker_id=bid, on=on))
        row = {"group": group, "broker_id": bid, "maintenance": on, "drain": r.drain or None}
        if args.json:
            row["replica_info"] = msg_dict(r.replica_info)
        else:
            info = r.replica_info
            row.update(master=info.master_broker_id or None, master_epoch=info.master_epoch,
                       sync_state_set=list(info.sync_state_set), in_maintenance=list(info.maintenance))
        out.append(row)
    if on and args.wait_s > 0:
        deadline = time.monotonic() + args.wait_s
        mine = {(g, b) for g, b in targets}
        while True:
            masters = {(g.replica_info.broker_name, g.replica_info.master_broker_id)
                       for g in await client.get_sync_state_data(tuple(sorted({g for g, _ in targets})))}
            still = sorted(mine & masters)
            if not still or time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.1)
        for row in out:
            row["drained"] = (row["group"], row["broker_id"]) not in still
        if still:
            raise ControllerRpcError(Code.CONTROLLER_TIMEOUT,
                                     f"still master after {args.wait_s} s: "
                                     f"{', '.join(f'{g}/{b}' for g, b in still)}; see each row's drain reason",
                                     brokers=out)
    said = [row["drain"] for row in out if row.get("drain")]
    summary = "; ".join(said) if said else (f"{len(out)} broker(s) {'cordoned' if on else 'back in service'}, "
                                            f"no master role moves")
    return {"summary": summary, "brokers": out}
