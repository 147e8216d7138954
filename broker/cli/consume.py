"""`autoswitch consume` (with consumer groups) and `autoswitch admin consumer-progress`."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from autoswitch.broker.cli.common import bad_target, err, status_err
from autoswitch.broker.config import parse_hostport
from autoswitch.broker.storage.record import StoredMessage

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.output import emit, fail_code


def msg_to_dict(m: StoredMessage) -> dict:
    try:
        body: Any = m.body.decode("utf-8")
    except UnicodeDecodeError:
        body = m.body.hex()
    return {
        "msg_id": m.msg_id,
        "topic": m.topic,
        "queue_offset": m.queue_offset,
        "phy_offset": m.phy_offset,
        "born_ts_ms": m.born_ts_ms,
        "size": len(m.body),
        "body": body,
    }


BODY_PREVIEW = 200      # characters of a body in the human output (--json has all of it)


def body_preview(body: bytes) -> str:
    """One line a person can read: the text with control characters escaped, or hex when it is
    not UTF-8; cut at BODY_PREVIEW characters."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        text = "hex:" + body[: BODY_PREVIEW // 2].hex()
    else:
        text = text.encode("unicode_escape").decode("ascii") if not text.isprintable() else text
    return text if len(text) <= BODY_PREVIEW else text[:BODY_PREVIEW] + "..."


def cmd_consume(args: argparse.Namespace) -> int:
    import asyncio

    from autoswitch.broker.client.client import ConsumerClient, consumed_messages
    from autoswitch.broker.client.fetch_client import FetchClient, fetched_messages
    from autoswitch.broker.client.route import RetryPolicy
    from autoswitch.broker.client.routed_fetch import RoutedFetcher
    from autoswitch.broker.fetch_codec import RecordsReply

    from autoswitch.proto import broker_pb2 as pb

    if args.count < 0 or args.from_offset < 0 or not (1 <= args.batch <= 10_000):
        return fail_code(args, "BAD_USAGE", "bad --count/--from/--batch", rc=2)
    if bad_target(args):
        return 2
    if args.fetch == "auto":
        if not args.namesrv:
            return fail_code(args, "BAD_USAGE", "--fetch auto needs --namesrv (the master's route names its fetch port)",
                             rc=2)
    elif args.fetch:
        try:
            parse_hostport(args.fetch, "--fetch")
        except AutoswitchError as e:
            return fail_code(args, "BAD_USAGE", e.message, rc=2)

    async def run() -> int:
        if args.namesrv:
            from autoswitch.broker.client.route import RoutedConsumer

            client: Any = RoutedConsumer(args.namesrv, args.group, RetryPolicy(rpc_timeout_s=args.timeout),
                                         args.tls)
        else:
            client = ConsumerClient(args.broker, timeout_s=args.timeout, tls=args.tls)
        fetcher: FetchClient | RoutedFetcher | None = None
        if args.fetch == "auto":
            fetcher = RoutedFetcher(args.namesrv, args.group, RetryPolicy(rpc_timeout_s=args.timeout), args.tls)
        elif args.fetch:
            fetcher = FetchClient(args.fetch, tls=args.tls, timeout_s=args.timeout)
        cg = args.consumer_group
        commit_log = open(args.commit_log, "a", encoding="utf-8") if cg and args.commit_log else None  # noqa: SIM115
        got = resets = 0
        q = args.from_offset
        try:
            if cg:
                r = await client.fetch_offset(cg, args.topic)
                if r.status != pb.OK:
                    return status_err(args, r.status, r.error_message)
                if r.offset.clamped:
                    print(json.dumps({"warning": {"code": "OFFSET_CLAMPED", "consumer_group": cg, "topic": args.topic,
                                                  "committed": r.offset.committed_beyond,
                                                  "log_end": r.offset.log_end}}), file=sys.stderr)
                if r.offset.found:
                    q = r.offset.queue_offset
            while got < args.count:
                n = min(args.batch, args.count - got)
                reply = (await fetcher.fetch(args.topic, q, n) if fetcher is not None
                         else await client.consume(args.topic, q, n, record_runs=True))
                if reply.status == pb.OFFSET_OUT_OF_RANGE and resets < MAX_OFFSET_RESETS:
                    # An unclean election took back messages we had read: restart from the group's
                    # committed offset (never past the log end), else from the log end. Said.
                    resets += 1
                    to = reply.next_queue_offset
                    if cg:
                        r = await client.fetch_offset(cg, args.topic)
                        if r.status == pb.OK and r.offset.found:
                            to = min(r.offset.queue_offset, reply.next_queue_offset)
                    print(json.dumps({"warning": {"code": "OFFSET_RESET", "topic": args.topic, "from": q, "to": to,
                                                  "message": reply.error_message}}), file=sys.stderr)
                    q = to
                    continue
                if reply.status != pb.OK:
                    return status_err(args, reply.status, reply.error_message)
                if not reply.runs:
                    break
                for m in (fetched_messages(reply) if isinstance(reply, RecordsReply) else consumed_messages(reply)):
                    got += 1
                    if args.json:
                        print(json.dumps(msg_to_dict(m), separators=(",", ":")))
                    else:
                        print(f"{m.queue_offset}\t{m.msg_id}\t{len(m.body)}B\t{body_preview(m.body)}")
                sys.stdout.flush()           # processed (printed) before committed: at-least-once
                q = reply.next_queue_offset
                if cg:
                    c = await client.commit_offset(cg, args.topic, q)
                    if c.status != pb.OK:
                        return status_err(args, c.status, c.error_message)
                    if commit_log is not None:
                        commit_log.write(json.dumps({"group": c.group, "broker_id": c.broker_id, "epoch": c.epoch,
                                                     "consumer_group": cg, "topic": args.topic, "committed": q,
                                                     "ack_ts_ms": int(time.time() * 1000)}) + "\n")
                        commit_log.flush()
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await client.close()
            if fetcher is not None:
                await fetcher.close()
            if commit_log is not None:
                commit_log.close()
        emit(args, {"consumed": got, "topic": args.topic, "next_queue_offset": q, "offset_resets": resets})
        return 0

    return asyncio.run(run())


MAX_OFFSET_RESETS = 10     # per run: a consumer that keeps falling off the log end stops, with the error


def cmd_consumer_progress(args: argparse.Namespace) -> int:
    import asyncio

    from autoswitch.broker.client.client import ConsumerClient

    from autoswitch.proto import broker_pb2 as pb

    if bad_target(args):
        return 2

    async def run() -> int:
        if args.namesrv:
            from autoswitch.broker.client.route import RetryPolicy, RoutedConsumer

            client: Any = RoutedConsumer(args.namesrv, args.group, RetryPolicy(rpc_timeout_s=args.timeout), args.tls)
        else:
            client = ConsumerClient(args.broker, timeout_s=args.timeout, tls=args.tls)
        try:
            r = await client.consumer_progress(args.consumer_group)
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await client.close()
        if r.status != pb.OK:
            return status_err(args, r.status, r.error_message)
        if not any(o.found for o in r.offsets):
            # an empty answer is not a success: the group never committed here (a typo, another cluster)
            return fail_code(args, "NOT_FOUND", f"consumer group {args.consumer_group!r} has no committed offset "
                             "on this group's master")
        rows = [{"topic": o.topic, "committed": o.queue_offset if o.found else None, "log_end": o.log_end,
                 "lag": max(0, o.log_end - o.queue_offset), "clamped": o.clamped,
                 "committed_beyond": o.committed_beyond if o.clamped else None} for o in r.offsets]
        emit(args, {"consumer_group": args.consumer_group, "topics": rows})
        return 0

    return asyncio.run(run())
