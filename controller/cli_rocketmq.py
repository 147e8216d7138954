"""Moving a running RocketMQ cluster onto autoswitch's controllers (docs/rocketmq.md "Moving a
running RocketMQ cluster"): ``admin rocketmq-export`` reads each broker group from RocketMQ's
controller leader into a file; ``admin rocketmq-import`` checks that file against the brokers'
own epoch files and writes each group into autoswitch's controllers unchanged (brokerIds,
addresses, master, MasterEpoch, SyncStateSet and its epoch), so the brokers keep their identity
files and roles, and nothing of theirs changes when their controllers do."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

from autoswitch.controller.codes import ControllerRpcError

from autoswitch.base.addr import split_hostport_list
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.output import emit, fail
from autoswitch.proto import controller_pb2 as pb

MAX_SOURCES = 16


def add_commands(admin: Callable[[str, str, Any], argparse.ArgumentParser], admin_sub: Any) -> None:
    a = admin_sub.add_parser("rocketmq-export", help="read every broker group of a running RocketMQ controller "
                                                     "(1006) into a file, for `admin rocketmq-import`")
    a.add_argument("--from", dest="source", required=True,
                   help="RocketMQ controller addresses HOST:PORT[;HOST:PORT...] (its controllerAddr); the leader is found")
    a.add_argument("--cluster", "-c", required=True, help="the brokers' brokerClusterName")
    a.add_argument("--group", "--broker-name", "-b", dest="groups", metavar="GROUP", action="append", default=[],
                   help="a broker group (repeatable)")
    a.add_argument("--namesrv", "-n", default="", help="or: every group of --cluster as this RocketMQ name server lists it")
    a.add_argument("--out", required=True, help="the file to write")
    a.add_argument("--timeout-s", type=float, default=3.0, help="per request")
    a.add_argument("--json", action="store_true", help="machine-readable output")
    a.set_defaults(func=_export)
    a = admin("rocketmq-import", "write the groups of a `rocketmq-export` file into these controllers, unchanged "
                                 "(checked first against the brokers' epoch files)", _import)
    a.add_argument("--file", required=True, help="the file `admin rocketmq-export` wrote")
    a.add_argument("--no-verify-brokers", action="store_true",
                   help="do not ask the brokers for their epoch files first (1007; needs them reachable from here)")
    a.add_argument("--dry-run", action="store_true", help="check the file and the brokers; change nothing")


def _export(args: Any) -> int:
    from autoswitch.controller.remoting import rocketmq_state as rs

    try:
        sources = split_hostport_list(args.source.replace(";", ","), MAX_SOURCES)
        if bool(args.groups) == bool(args.namesrv):
            raise rs.RocketMQStateError("name the groups with --group, or a name server with --namesrv (one of them)")
        names = sorted(set(args.groups)) or rs.group_names(args.namesrv, args.cluster, args.timeout_s)
        export = rs.read_controller(sources, args.cluster, names, args.timeout_s)
        rs.dump(export, Path(args.out))
    except AutoswitchError as e:
        return fail(args, e)
    except ValueError as e:
        return fail(args, {"code": "BAD_ARGUMENT", "message": str(e)})
    emit(args, {"file": args.out, "from": export.source,
                "groups": [_row(g) for g in export.groups]})
    return 0


def _row(g: Any) -> dict[str, Any]:
    return {"group": g.broker_name, "cluster": g.cluster_name, "master": g.master_broker_id or None,
            "master_epoch": g.master_epoch, "sync_state_set": list(g.sync_state_set),
            "sync_state_set_epoch": g.sync_state_set_epoch,
            "brokers": ", ".join(f"{r.broker_id}={r.address}" for r in g.replicas)}


async def _import(client: Any, args: Any) -> Any:
    from autoswitch.controller.remoting import rocketmq_state as rs

    export = rs.load(Path(args.file))
    rows: list[dict[str, Any]] = []
    # every group is checked before anything is written: a file behind its brokers imports nothing
    for g in export.groups:
        row = _row(g)
        if not args.no_verify_brokers:
            seen, unread = await asyncio.to_thread(rs.check_against_brokers, g, args.timeout_s)
            row["broker_epochs"] = ", ".join(f"{b}={e}" for b, e in sorted(seen.items())) or None
            if unread:
                row["not_checked"] = "; ".join(f"{b}: {why}" for b, why in sorted(unread.items()))
        rows.append(row)
    if args.dry_run:
        return {"dry_run": True, "groups": rows}
    for g, row in zip(export.groups, rows, strict=True):
        try:
            r = await client.call("ImportGroup", pb.ImportGroupRequest(
                cluster_name=g.cluster_name, broker_name=g.broker_name,
                brokers=[pb.ImportedBroker(broker_id=x.broker_id, address=x.address) for x in g.replicas],
                master_broker_id=g.master_broker_id, master_epoch=g.master_epoch,
                sync_state_set=list(g.sync_state_set), sync_state_set_epoch=g.sync_state_set_epoch,
                source=f"rocketmq:{export.source}"))
        except ControllerRpcError as e:
            done = [x["group"] for x in rows if x.get("result")]
            raise ControllerRpcError(e.reply_code, f"{g.broker_name}: {e.message}",
                                     imported=done, not_imported=[x.broker_name for x in export.groups
                                                                  if x.broker_name not in done]) from None
        row["result"] = r.header.message or "imported"
    return {"groups": rows}
