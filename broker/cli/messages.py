"""`autoswitch admin message --msg-id ID [--topic T]`: find a message by its msg_id (mqadmin
queryMsgById) on every broker group's master, and print it with its body.

A msg_id here is the producer's (a UUID unless it chose one); it names no offset, and the broker
keeps no index by msg_id, so the lookup reads the topic (or every topic) from the oldest message
on, in record runs, until it finds the id or has read `--max-scan` messages per broker group
(then it says so: not found within the scan is not "does not exist"). Reading is what a
consumer does: the reader role, only messages below confirmOffset.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from autoswitch.broker.cli.common import err, masters, prepare, warn
from autoswitch.broker.cli.consume import msg_to_dict

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit
from autoswitch.base.tls import add_tls_args
from autoswitch.proto import broker_pb2 as pb

SCAN_BATCH = 1000
MAX_SCAN_CEILING = 100_000_000


def register(admin_sub: Any) -> None:
    a = admin_sub.add_parser("message", help="find a message by msg_id on every broker group (mqadmin queryMsgById)")
    a.add_argument("--msg-id", required=True)
    a.add_argument("--topic", help="only this topic (default: every topic but the broker's own)")
    a.add_argument("--namesrv", type=namesrv_list,
                   help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
    a.add_argument("--group", action="append", default=[], help="only this broker group (repeatable)")
    a.add_argument("--max-scan", type=int, default=1_000_000, help="messages read per broker group at most")
    a.add_argument("--timeout", type=float, default=10.0)
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_message)


async def find_in_group(client: Any, topics: list[Any], msg_id: str, budget: int) -> tuple[Any | None, int]:
    """(the message, or None; messages read) scanning ``topics`` (TopicInfo) from their oldest."""
    from autoswitch.broker.client.client import consumed_messages

    read = 0
    for t in topics:
        q = t.min_queue_offset
        while q < t.max_queue_offset and read < budget:
            r = await client.consume(t.topic, q, min(SCAN_BATCH, budget - read), record_runs=True)
            if r.status != pb.OK:
                raise AutoswitchError(f"Consume {t.topic}@{q}: {pb.Status.Name(r.status)} {r.error_message}")
            msgs = list(consumed_messages(r))
            if not msgs:
                break
            read += len(msgs)
            for m in msgs:
                if m.msg_id == msg_id:
                    return m, read
            q = r.next_queue_offset
    return None, read


def cmd_message(args: argparse.Namespace) -> int:
    from autoswitch.broker.client.client import ConsumerClient

    if not (1 <= args.max_scan <= MAX_SCAN_CEILING):
        return err(args, AutoswitchError(f"--max-scan must be in [1, {MAX_SCAN_CEILING}]"))
    bad = prepare(args)
    if bad is not None:
        return bad

    async def run() -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
        found, scanned = [], []
        for group, addr, epoch in await masters(args):
            c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
            try:
                topics = [t for t in (await c.list_topics()).topics
                          if not t.internal and (args.topic is None or t.topic == args.topic)]
                m, read = await find_in_group(c, topics, args.msg_id, args.max_scan)
            except AutoswitchError as e:
                warn(group, e.code, e.message)
                continue
            finally:
                await c.close()
            scanned.append({"group": group, "read": read, "complete": read < args.max_scan})
            if m is not None:
                found.append({"group": group, "master": addr, "master_epoch": epoch, **msg_to_dict(m)})
        return found, scanned

    try:
        found, scanned = asyncio.run(run())
    except AutoswitchError as e:
        return err(args, e)
    if not found:
        partial = [s["group"] for s in scanned if not s["complete"]]
        more = f"; --max-scan reached in {', '.join(partial)}" if partial else ""
        return err(args, NotFound(f"no message {args.msg_id!r} in {len(scanned)} broker group(s){more}",
                                  scanned=scanned))
    emit(args, {"messages": found})
    return 0
