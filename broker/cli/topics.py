"""`autoswitch admin topic-list` and `admin topic-route`: which topics a group holds, and which
groups serve a topic (mqadmin's topicList / topicRoute for this broker model: a topic lives in
every group that was produced to)."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys

from autoswitch.broker.cli.common import bad_target, err, status_err, target_address

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

    a = admin_sub.add_parser("topic-route", help="the groups (masters) that hold a topic, from the name server")
    a.add_argument("--namesrv", type=namesrv_list,
                   help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
    a.add_argument("--topic", required=True)
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_topic_route)


def _rows(r: pb.ListTopicsReply, internal: bool) -> list[dict]:
    return [{"topic": t.topic, "min_queue_offset": t.min_queue_offset, "max_queue_offset": t.max_queue_offset,
             "internal": t.internal} for t in r.topics if internal or not t.internal]


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
