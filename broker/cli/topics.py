"""`autoswitch admin topic-list` and `admin topic-route`: which topics a group holds, and which
groups serve a topic (mqadmin's topicList / topicRoute for this broker model: a topic lives in
every group that was produced to)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import Any

from autoswitch.broker.cli.common import bad_target, err, masters, prepare, status_err, target_address, warn

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit, fail_code
from autoswitch.base.tls import tls_from_args
from autoswitch.proto import broker_pb2 as pb


def register(admin_sub) -> None:
    from autoswitch.base.tls import add_tls_args

    a = admin_sub.add_parser("topic-list", help="the topics of one group (its master, or --broker)")
    a.add_argument("--broker", help="HOST:PORT of a replica; or --namesrv + --group (the master)")
    a.add_argument("--namesrv", type=namesrv_list, help="name server(s) HOST:PORT[,HOST:PORT...]")
    a.add_argument("--group", help="broker group (with --namesrv)")
    a.add_argument("--internal", action="store_true", help="also the broker's own topics (consumer offsets)")
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_topic_list)

    def every_group(a: argparse.ArgumentParser) -> None:
        a.add_argument("--namesrv", type=namesrv_list,
                       help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
        a.add_argument("--group", action="append", default=[], help="only this broker group (repeatable; default all)")
        a.add_argument("--timeout", type=float, default=10.0)
        a.add_argument("--json", action="store_true")
        add_tls_args(a)

    a = admin_sub.add_parser("topic-create", help="create a topic or change its settings on every broker group "
                                                  "(mqadmin updateTopic; admin)")
    a.add_argument("--topic", required=True)
    a.add_argument("--max-message-bytes", type=int, default=0, help="largest body (0: the broker's max_message_bytes)")
    a.add_argument("--retention-hours", type=float, default=0.0,
                   help="its messages are served for this long after they were born (0: the log's retention only)")
    every_group(a)
    a.set_defaults(func=cmd_topic_create)
    a = admin_sub.add_parser("topic-delete", help="stop writes to a topic and drop its settings on every broker "
                                                  "group (mqadmin deleteTopic; admin)")
    a.add_argument("--topic", required=True)
    every_group(a)
    a.set_defaults(func=cmd_topic_delete)
    a = admin_sub.add_parser("topic-describe", help="a topic on every broker group: offsets and settings")
    a.add_argument("--topic", required=True)
    every_group(a)
    a.set_defaults(func=cmd_topic_describe)
    a = admin_sub.add_parser("topics", help="every topic of every broker group (kafka-topics --list)")
    a.add_argument("--internal", action="store_true", help="also the broker's own topics")
    every_group(a)
    a.set_defaults(func=cmd_topics)

    a = admin_sub.add_parser("topic-route", help="the groups (masters) that hold a topic, from the name server")
    a.add_argument("--namesrv", type=namesrv_list,
                   help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
    a.add_argument("--topic", required=True)
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_topic_route)


def _rows(r: pb.ListTopicsReply, internal: bool) -> list[dict]:
    return [_topic_row(t) for t in r.topics if internal or not t.internal]


def _topic_row(t: pb.TopicInfo) -> dict:
    return {"topic": t.topic, "min_queue_offset": t.min_queue_offset, "max_queue_offset": t.max_queue_offset,
            "internal": t.internal, "configured": t.configured, "max_message_bytes": t.max_message_bytes or None,
            "deleted": t.deleted, "created_by": t.created_by or None, "retention_hours": t.retention_hours or None}


def cmd_topic_list(args: argparse.Namespace) -> int:
    from autoswitch.broker.client.client import ConsumerClient

    if bad_target(args):
        return 2

    async def run() -> int:
        addr = await target_address(args)
        if addr is None:
            return err(args, NotFound(f"no master route for group {args.group!r} at {args.namesrv}"))
        c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
        try:
            r = await c.list_topics()
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await c.close()
        if r.status != pb.OK:
            return status_err(args, r.status, r.error_message)
        rows = _rows(r, args.internal)
        emit(args, {"broker": addr, "role": r.role, "master_epoch": r.master_epoch, "topics": rows})
        return 0

    return asyncio.run(run())


def cmd_topic_route(args: argparse.Namespace) -> int:
    from autoswitch.broker.client.client import ConsumerClient
    from autoswitch.broker.client.route import NameServerClient

    if not args.namesrv:
        return fail_code(args, "BAD_USAGE", "give --namesrv (or AUTOSWITCH_NAMESRV, or the profile's namesrv)", rc=2)
    try:
        args.tls = tls_from_args(args)
    except AutoswitchError as e:
        return err(args, e)

    async def run() -> int:
        ns = NameServerClient(args.namesrv, args.tls)
        try:
            masters = await ns.master_routes()
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await ns.close()
        found = []
        for group, addr, epoch in masters:
            c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
            try:
                r = await c.list_topics()
            except AutoswitchError as e:
                print(json.dumps({"warning": {"code": e.code, "group": group, "message": e.message}}), file=sys.stderr)
                continue
            finally:
                await c.close()
            for t in r.topics:
                if t.topic == args.topic:
                    found.append({"group": group, "master": addr, "master_epoch": epoch,
                                  "min_queue_offset": t.min_queue_offset, "max_queue_offset": t.max_queue_offset})
        if not found:
            return err(args, NotFound(f"no group's master holds topic {args.topic!r} ({len(masters)} groups asked)"))
        emit(args, {"topic": args.topic, "groups": found})
        return 0

    return asyncio.run(run())


async def _each_master(args: argparse.Namespace, call: Any, admin: bool) -> tuple[list[dict[str, Any]], bool]:
    """``call(client, group, epoch)`` -> a row, on every broker group's master; (rows, all ok).
    ``admin``: an AdminClient (topic changes), else a ConsumerClient (reads)."""
    from autoswitch.broker.client.client import AdminClient, ConsumerClient

    rows: list[dict[str, Any]] = []
    ok = True
    for group, addr, epoch in await masters(args):
        c: Any = (AdminClient if admin else ConsumerClient)(addr, timeout_s=args.timeout, tls=args.tls)
        try:
            row = await call(c, group, epoch)
        except AutoswitchError as e:
            warn(group, e.code, e.message)
            row, ok = {"group": group, "result": f"failed: {e.message}"}, False
        finally:
            await c.close()
        if row is not None:
            ok = ok and not str(row.get("result", "")).startswith("failed")
            rows.append(row)
    return rows, ok


NOT_HERE = "not found"      # a delete on a group that has never had the topic: nothing to change there


def _change(args: argparse.Namespace, what: str, send: Any) -> int:
    bad = prepare(args)
    if bad is not None:
        return bad

    async def one(c: Any, group: str, epoch: int) -> dict[str, Any]:
        r = await send(c)
        if r.status == pb.OK:
            return {"group": group, "result": "created" if r.created else what, "master_epoch": r.epoch}
        if what == "deleted" and r.status == pb.NOT_FOUND:
            return {"group": group, "result": NOT_HERE, "detail": r.error_message}
        return {"group": group, "result": f"failed: {pb.Status.Name(r.status)} {r.error_message}"}

    try:
        rows, ok = asyncio.run(_each_master(args, one, admin=True))
    except AutoswitchError as e:
        return err(args, e)
    out = {"topic": args.topic, "groups": rows}
    if not rows:
        return err(args, NotFound("no broker group has a master route"))
    if not ok:
        return fail_code(args, "NOT_ALL_CHANGED", f"the topic was not {what} on every broker group (see groups)", **out)
    if what == "deleted" and all(r["result"] == NOT_HERE for r in rows):
        return err(args, NotFound(f"no broker group has topic {args.topic!r} ({len(rows)} asked)"))
    emit(args, out)
    return 0


def cmd_topic_create(args: argparse.Namespace) -> int:
    """Creates the topic on every group's master, or changes its settings where it exists (each
    group's row says which)."""
    if args.max_message_bytes < 0 or args.retention_hours < 0:
        return fail_code(args, "BAD_USAGE", "--max-message-bytes and --retention-hours must be >= 0", rc=2)
    return _change(args, "updated", lambda c: c.update_topic(args.topic, args.max_message_bytes, args.retention_hours))


def cmd_topic_delete(args: argparse.Namespace) -> int:
    return _change(args, "deleted", lambda c: c.delete_topic(args.topic))


def _listing(args: argparse.Namespace) -> tuple[list[dict[str, Any]], bool]:
    async def one(c: Any, group: str, epoch: int) -> dict[str, Any]:
        r = await c.list_topics()
        return {"group": group, "master_epoch": epoch, "topics": [_topic_row(t) for t in r.topics]}

    return asyncio.run(_each_master(args, one, admin=False))


def _with_listing(args: argparse.Namespace, show: Any) -> int:
    """``show(listing)`` of every broker group's topics (ListTopics on each master)."""
    bad = prepare(args)
    if bad is not None:
        return bad
    try:
        listing, _ok = _listing(args)
    except AutoswitchError as e:
        return err(args, e)
    return int(show(listing))


def cmd_topic_describe(args: argparse.Namespace) -> int:
    return _with_listing(args, lambda listing: _describe(args, listing))


def _describe(args: argparse.Namespace, listing: list[dict[str, Any]]) -> int:
    rows = [{"group": g["group"], "master_epoch": g["master_epoch"], **t}
            for g in listing for t in g.get("topics", []) if t["topic"] == args.topic]
    if not rows:
        return err(args, NotFound(f"no broker group holds topic {args.topic!r} ({len(listing)} asked)"))
    emit(args, {"topic": args.topic, "groups": [{k: v for k, v in r.items() if k != "topic"} for r in rows]})
    return 0


def cmd_topics(args: argparse.Namespace) -> int:
    return _with_listing(args, lambda listing: _every_topic(args, listing))


def _every_topic(args: argparse.Namespace, listing: list[dict[str, Any]]) -> int:
    by: dict[str, dict[str, Any]] = {}
    for g in listing:
        for t in g.get("topics", []):
            if t["internal"] and not args.internal:
                continue
            row = by.setdefault(t["topic"], {"topic": t["topic"], "groups": [], "messages": 0, "configured": False,
                                             "max_message_bytes": None, "deleted": False})
            row["groups"].append(g["group"])
            row["messages"] += t["max_queue_offset"] - t["min_queue_offset"]
            row["configured"] = row["configured"] or t["configured"]
            row["deleted"] = row["deleted"] or t["deleted"]
            row["max_message_bytes"] = row["max_message_bytes"] or t["max_message_bytes"]
    emit(args, {"topics": [by[k] for k in sorted(by)]})
    return 0
