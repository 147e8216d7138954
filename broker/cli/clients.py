"""`autoswitch admin client-connections`: the clients every broker served in the last five
minutes (mqadmin consumerConnection / producerConnection, `kafka-consumer-groups --describe
--members`): from where, what they say they are, since when, what they did and on which topics
and consumer groups (broker/clients.py). The brokers come from the name servers' routes; a
broker that does not answer is a warning line on stderr, the others are still shown."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from autoswitch.broker.cli.common import err, prepare, warn

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit
from autoswitch.base.tls import add_tls_args


def register(admin_sub: Any) -> None:
    a = admin_sub.add_parser("client-connections", help="the clients every broker served in the last five minutes: "
                                                        "address, client and version, since when, produce/consume "
                                                        "calls, topics and consumer groups")
    a.add_argument("--namesrv", type=namesrv_list,
                   help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
    a.add_argument("--group", action="append", default=[], help="only this broker group (repeatable)")
    a.add_argument("--topic", default="", help="only clients that used this topic")
    a.add_argument("--consumer-group", "-g", default="", help="only clients that used this consumer group")
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_client_connections)


async def _rows(args: argparse.Namespace) -> list[dict[str, Any]]:
    from autoswitch.broker.client.client import ConsumerClient
    from autoswitch.broker.client.route import NameServerClient

    ns = NameServerClient(args.namesrv, args.tls)
    try:
        brokers = await ns.broker_routes()
    finally:
        await ns.close()
    if args.group:
        missing = sorted(set(args.group) - {b[0] for b in brokers})
        if missing:
            raise NotFound(f"no route for broker group(s) {', '.join(missing)}", groups=missing)
        brokers = [b for b in brokers if b[0] in args.group]

    async def one(group: str, broker_id: int, addr: str) -> list[dict[str, Any]]:
        c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls, max_retries=1)
        try:
            r = await c.list_clients()
        except AutoswitchError as e:
            warn(group, e.code, f"broker {broker_id} at {addr}: {e.message}")
            return []
        finally:
            await c.close()
        return [{"group": group, "broker_id": broker_id, "broker_role": r.role, "client": x.address,
                 "agent": x.agent, "via": x.via, "first_seen_ts_ms": x.first_seen_ms,
                 "last_seen_ts_ms": x.last_seen_ms, "produce_calls": x.produce_calls,
                 "consume_calls": x.consume_calls, "commit_calls": x.commit_calls, "topics": list(x.topics),
                 "consumer_groups": list(x.consumer_groups), **({"more_names": True} if x.names_truncated else {})}
                for x in r.clients]

    found = await asyncio.gather(*(one(g, bid, addr) for g, bid, addr, _role in brokers))
    rows = [row for rs in found for row in rs]
    if args.topic:
        rows = [r for r in rows if args.topic in r["topics"]]
    if args.consumer_group:
        rows = [r for r in rows if args.consumer_group in r["consumer_groups"]]
    return rows


def cmd_client_connections(args: argparse.Namespace) -> int:
    bad = prepare(args)
    if bad is not None:
        return bad
    try:
        rows = asyncio.run(_rows(args))
    except AutoswitchError as e:
        return err(args, e)
    clients = {r["client"] for r in rows}
    emit(args, {"summary": f"{len(clients)} client{'s' if len(clients) != 1 else ''} on {len({(r['group'], r['broker_id']) for r in rows})} "
                           f"broker(s) in the last five minutes", "connections": rows})
    return 0
