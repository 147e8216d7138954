"""Consumer groups across every broker group, the way `kafka-consumer-groups` and mqadmin's
consumerProgress / resetOffsetByTime show them:

- `admin consumer-groups`: every consumer group on every group's master, with its topics and lag;
- `admin consumer-group -g CG`: one consumer group per broker group and topic (committed, log
  end, lag, owner);
- `admin reset-offsets -g CG --topic T|--all-topics --to-earliest|--to-latest|--to-offset N|--to-time T|
  --shift-by N|--by-duration PnDTnHnMnS`:
  the plan first (a dry run unless `--execute`, as kafka-consumer-groups does), then a commit per
  broker group (an admin, or the identity that owns the group);
- `admin delete-consumer-group -g CG`: a tombstone on every broker group that has it (admin).

The masters come from the name servers (GetRoutes), like `admin topic-route`. A broker group whose
master does not answer is a warning line on stderr; the others are still shown.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import re
import time
from typing import Any

from autoswitch.broker.cli.common import err, masters, prepare, warn

from autoswitch.base.addr import namesrv_list
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit, fail, fail_code
from autoswitch.base.tls import add_tls_args
from autoswitch.proto import broker_pb2 as pb

MAX_TIME_SEARCH_STEPS = 64      # a binary search over 2^63 offsets ends well within this


def register(admin_sub: Any) -> None:
    def common(a: argparse.ArgumentParser) -> None:
        a.add_argument("--namesrv", type=namesrv_list,
                       help="name server(s) HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_NAMESRV, or the profile's namesrv)")
        a.add_argument("--group", action="append", default=[], help="only this broker group (repeatable)")
        a.add_argument("--timeout", type=float, default=10.0)
        a.add_argument("--json", action="store_true")
        add_tls_args(a)

    a = admin_sub.add_parser("consumer-groups", help="every consumer group on every broker group: topics and lag")
    common(a)
    a.set_defaults(func=cmd_consumer_groups)
    a = admin_sub.add_parser("consumer-group", help="one consumer group: committed offset, log end and lag per "
                                                    "broker group and topic")
    a.add_argument("-g", "--consumer-group", required=True)
    common(a)
    a.set_defaults(func=cmd_consumer_group)
    a = admin_sub.add_parser("delete-consumer-group", help="remove a consumer group's offsets and owner from "
                                                           "every broker group (admin)")
    a.add_argument("-g", "--consumer-group", required=True)
    common(a)
    a.set_defaults(func=cmd_delete_consumer_group)
    a = admin_sub.add_parser("reset-offsets", help="move a consumer group's offsets (dry run unless --execute)")
    a.add_argument("-g", "--consumer-group", required=True)
    which = a.add_mutually_exclusive_group(required=True)
    which.add_argument("--topic")
    which.add_argument("--all-topics", action="store_true", help="every topic the group has committed on")
    to = a.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the oldest message still in the log")
    to.add_argument("--to-latest", action="store_true", help="the log end: skip everything not read yet")
    to.add_argument("--to-offset", type=int, help="this queue offset (kept within the log)")
    to.add_argument("--to-time", help="the first message born at or after this time: ISO 8601 "
                                      "(2026-11-28T10:00:00Z) or Unix milliseconds")
    to.add_argument("--shift-by", type=int, help="move the committed offset by N (negative: back), kept within "
                                                "the log; from the log start where nothing is committed")
    to.add_argument("--by-duration", help="the first message born within this long before now: ISO 8601 "
                                          "duration, PnDTnHnMnS (PT30M, P1DT2H)")
    a.add_argument("--execute", action="store_true", help="commit the new offsets (default: only show the plan)")
    common(a)
    a.set_defaults(func=cmd_reset_offsets)


async def _progress(args: argparse.Namespace, consumer_group: str) -> list[dict[str, Any]]:
    """One row per (broker group, consumer group, topic) from every master that answers."""
    from autoswitch.broker.client.client import ConsumerClient

    rows: list[dict[str, Any]] = []
    for group, addr, epoch in await masters(args):
        c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
        try:
            r = await c.consumer_progress(consumer_group)
        except AutoswitchError as e:
            warn(group, e.code, e.message)
            continue
        finally:
            await c.close()
        if r.status != pb.OK:
            warn(group, pb.Status.Name(r.status), r.error_message)
            continue
        for o in r.offsets:
            rows.append({"consumer_group": o.consumer_group or consumer_group, "group": group, "topic": o.topic,
                         "committed": o.queue_offset if o.found else None, "log_end": o.log_end,
                         "lag": o.log_end - o.queue_offset if o.found else None, "owner": o.owner or None,
                         "master_epoch": epoch})
    return rows


def cmd_consumer_groups(args: argparse.Namespace) -> int:
    bad = prepare(args)
    if bad is not None:
        return bad
    try:
        rows = asyncio.run(_progress(args, ""))
    except AutoswitchError as e:
        return err(args, e)
    summary: dict[str, dict[str, Any]] = {}
    for r in rows:
        s = summary.setdefault(r["consumer_group"], {"consumer_group": r["consumer_group"], "groups": set(),
                                                     "topics": set(), "lag": 0, "owner": r["owner"]})
        s["groups"].add(r["group"])
        s["topics"].add(r["topic"])
        s["lag"] += r["lag"] or 0
    out = [{**s, "groups": sorted(s["groups"]), "topics": sorted(s["topics"])} for _, s in sorted(summary.items())]
    emit(args, {"consumer_groups": out})
    return 0


def cmd_consumer_group(args: argparse.Namespace) -> int:
    bad = prepare(args)
    if bad is not None:
        return bad
    try:
        rows = asyncio.run(_progress(args, args.consumer_group))
    except AutoswitchError as e:
        return err(args, e)
    if not rows:
        return err(args, NotFound(f"consumer group {args.consumer_group!r} has committed nothing on any broker group"))
    emit(args, {"consumer_group": args.consumer_group, "offsets": [{k: v for k, v in r.items() if k != "consumer_group"}
                                                                   for r in rows],
                "lag": sum(r["lag"] or 0 for r in rows)})
    return 0


def cmd_delete_consumer_group(args: argparse.Namespace) -> int:
    """kafka-consumer-groups --delete: a tombstone on every broker group that has the group; stop
    its consumers first (one that commits again starts the group afresh)."""
    from autoswitch.broker.client.client import ConsumerClient

    bad = prepare(args)
    if bad is not None:
        return bad

    async def run() -> tuple[list[dict[str, Any]], bool]:
        rows: list[dict[str, Any]] = []
        ok = True
        for group, addr, _epoch in await masters(args):
            c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
            try:
                r = await c.delete_consumer_group(args.consumer_group)
            except AutoswitchError as e:
                rows.append({"group": group, "result": f"failed: {e.message}"})
                ok = False
                continue
            finally:
                await c.close()
            if r.status == pb.OK:
                rows.append({"group": group, "result": "deleted", "removed": r.removed, "master_epoch": r.epoch})
            elif r.status != pb.NOT_FOUND:
                rows.append({"group": group, "result": f"failed: {pb.Status.Name(r.status)} {r.error_message}"})
                ok = False
        return rows, ok

    try:
        rows, ok = asyncio.run(run())
    except AutoswitchError as e:
        return err(args, e)
    out = {"consumer_group": args.consumer_group, "groups": rows}
    if not ok:
        return fail(args, {"code": "NOT_ALL_DELETED", "message": "some broker groups did not delete it", **out})
    if not rows:
        return err(args, NotFound(f"consumer group {args.consumer_group!r} has committed nothing on any broker group"))
    emit(args, out)
    return 0


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?")


def parse_duration_ms(text: str) -> int:
    """An ISO 8601 duration as kafka-consumer-groups --by-duration takes it: PnDTnHnMnS."""
    m = _DURATION.fullmatch(text.strip().upper())
    if m is None or not any(m.groups()) or text.strip().upper().endswith("T"):
        raise ValueError(f"--by-duration: expected an ISO 8601 duration such as PT30M or P1DT2H, got {text[:60]!r}")
    d, h, mi, sec = (float(x) if x else 0.0 for x in m.groups())
    return int(((d * 24 + h) * 60 + mi) * 60_000 + sec * 1000)


def parse_time_ms(text: str) -> int:
    """Unix milliseconds, or ISO 8601 (a time without a zone is UTC)."""
    if text.isdigit():
        return int(text)
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"--to-time: expected ISO 8601 (2026-11-28T10:00:00Z) or Unix ms, got {text[:60]!r}") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=dt.UTC)
    return int(t.timestamp() * 1000)


async def offset_at_time(client: Any, topic: str, lo: int, hi: int, ts_ms: int) -> int:
    """The first queue offset in [lo, hi) whose message was born at or after ``ts_ms`` (``hi``
    when none): a binary search, one one-message Consume per step. Born times follow the
    producers' clocks; with several producers they are close to, not exactly, sorted."""
    from autoswitch.broker.client.client import consumed_messages

    steps = 0
    while lo < hi and steps < MAX_TIME_SEARCH_STEPS:
        steps += 1
        mid = (lo + hi) // 2
        r = await client.consume(topic, mid, 1)
        msgs = list(consumed_messages(r)) if r.status == pb.OK else []
        if not msgs:
            hi = mid          # nothing readable there (below confirmOffset): treat as "after"
        elif msgs[0].born_ts_ms >= ts_ms:
            hi = mid
        else:
            lo = mid + 1
    return lo


def cmd_reset_offsets(args: argparse.Namespace) -> int:
    from autoswitch.broker.client.client import ConsumerClient

    bad = prepare(args)
    if bad is not None:
        return bad
    try:
        ts_ms = parse_time_ms(args.to_time) if args.to_time else None
        if args.by_duration:
            ts_ms = int(time.time() * 1000) - parse_duration_ms(args.by_duration)
    except ValueError as e:
        return fail_code(args, "BAD_USAGE", str(e), rc=2)

    async def plan_one(c: Any, group: str, epoch: int, t: Any) -> dict[str, Any]:
        now = await c.fetch_offset(args.consumer_group, t.topic)
        current = now.offset.queue_offset if now.status == pb.OK and now.offset.found else None
        lo, hi = t.min_queue_offset, t.max_queue_offset
        if args.to_earliest:
            target = lo
        elif args.to_latest:
            target = hi
        elif args.to_offset is not None:
            target = min(max(args.to_offset, lo), hi)
        elif args.shift_by is not None:
            target = min(max((lo if current is None else current) + args.shift_by, lo), hi)
        else:
            assert ts_ms is not None
            target = await offset_at_time(c, t.topic, lo, hi, ts_ms)
        return {"group": group, "topic": t.topic, "current": current, "new": target, "log_start": lo, "log_end": hi,
                "master_epoch": epoch}

    async def run() -> tuple[list[dict[str, Any]], bool]:
        plan, ok = [], True
        for group, addr, epoch in await masters(args):
            c = ConsumerClient(addr, timeout_s=args.timeout, tls=args.tls)
            try:
                topics = {t.topic: t for t in (await c.list_topics()).topics}
                if args.all_topics:
                    progress = await c.consumer_progress(args.consumer_group)
                    names = sorted({o.topic for o in progress.offsets if o.found} & set(topics))
                else:
                    names = [args.topic] if args.topic in topics else []   # else: never held here
                for name in names:
                    row = await plan_one(c, group, epoch, topics[name])
                    if args.execute:
                        # recorded as an operator's reset: the audit reports it as a decision
                        r = await c.commit_offset(args.consumer_group, name, row["new"], operator_reset=True)
                        if r.status == pb.OK:
                            row["result"] = "committed"
                        else:
                            row["result"], ok = f"{pb.Status.Name(r.status)}: {r.error_message}", False
                    plan.append(row)
            except AutoswitchError as e:
                warn(group, e.code, e.message)
                ok = False
            finally:
                await c.close()
        return plan, ok

    try:
        plan, ok = asyncio.run(run())
    except AutoswitchError as e:
        return err(args, e)
    if not plan:
        what = f"topic {args.topic!r}" if args.topic else f"a topic consumer group {args.consumer_group!r} committed on"
        return err(args, NotFound(f"no broker group holds {what}"))
    out = {"consumer_group": args.consumer_group, "topic": args.topic or "(all)", "executed": bool(args.execute),
           "offsets": plan}
    if not ok:
        return fail(args, {"code": "NOT_ALL_RESET", "message": "some broker groups were not reset (see offsets)",
                           **out})
    if not args.execute:
        out["note"] = "dry run: nothing changed (add --execute)"
    emit(args, out)
    return 0
