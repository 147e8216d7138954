"""`autoswitch admin unclean-recover -b G [--broker-id ID] [--confirm TOKEN]`: a guided unclean
recovery (docs/operations.md "Guided unclean recovery").

Without ``--confirm`` it only reads: the group's replicas from the controllers, each live one's
log (EpochFile end, record digests over the part where their logs differ: the ``LogRanges`` cut
at one record per range) and the plan (autoswitch/app/unclean_plan.py): how many acknowledged
messages each choice loses, what each other replica truncates (copied to its quarantine/ first),
the proposal and a token. With ``--confirm TOKEN`` it computes the plan again and, when the token
is the same (nothing changed), asks the controllers for the operator's unclean election of the
proposal (or ``--broker-id``): admin role, audited, the token recorded with the election.
"""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from autoswitch.app.unclean_plan import Plan, ReplicaLog, plan
from autoswitch.app.verify_group import log_ranges
from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import emit, fail, fail_code
from autoswitch.base.tls import tls_from_args
from autoswitch.ha.digest import RangeDigest

COARSE_BYTES = 1 << 20        # first pass: where the live logs start to differ
FINE_BYTES = 64               # second pass: one range per record (every record is longer than this)
MAX_PAGES = 4096              # LogRanges calls per replica and pass (1024 ranges each)


class RecoveryRefused(AutoswitchError):
    code = "UNCLEAN_RECOVERY_REFUSED"


def register(sub: Any, admin_sub: Any) -> None:
    from autoswitch.base.tls import add_tls_args

    a = admin_sub.add_parser("unclean-recover", help="plan (and with --confirm carry out) the recovery of a group "
                                                     "with no clean replica left: what each choice loses")
    a.add_argument("--controller", default=None, help="HOST:PORT[,HOST:PORT...] (env AUTOSWITCH_CONTROLLERS, or "
                                                      "the profile's controllers)")
    a.add_argument("--group", "--broker-name", "-b", dest="group", required=True)
    a.add_argument("--cluster-name", "-c", default="")
    a.add_argument("--broker-id", "-i", type=int, default=0, help="the replica to elect (default: the proposal)")
    a.add_argument("--confirm", default="", help="the token the plan printed: carry it out")
    a.add_argument("--timeout", type=float, default=30.0, help="seconds per call")
    a.add_argument("--json", action="store_true")
    add_tls_args(a)
    a.set_defaults(func=cmd_unclean_recover)


async def _listing(addr: str, lo: int, hi: int, size: int, args: argparse.Namespace) -> list[RangeDigest]:
    return await log_ranges(addr, lo, hi, size, args.tls, args.timeout, max_pages=MAX_PAGES, complete=True)


async def _plan(args: argparse.Namespace) -> tuple[Plan, Any]:
    from autoswitch.broker.client.client import AdminClient
    from autoswitch.controller.client import ControllerClient

    async with ControllerClient(args.controller, deadline_s=args.timeout, tls=args.tls) as cc:
        groups = await cc.get_sync_state_data([args.group])
    if not groups or not groups[0].members:
        raise NotFound(f"the controllers know no replica of group {args.group!r}")
    g = groups[0]
    info = g.replica_info
    if info.master_broker_id:
        raise RecoveryRefused(f"group {args.group} has a master (broker {info.master_broker_id}, MasterEpoch "
                              f"{info.master_epoch}): nothing to recover")
    confirm = max((m.confirm_offset for m in g.members), default=0)
    live: dict[int, dict[str, Any]] = {}
    for m in g.members:
        if not m.alive:
            continue
        c = AdminClient(m.address, max_retries=1, timeout_s=args.timeout, tls=args.tls)
        try:
            e = await c.get_broker_epoch()
        except AutoswitchError:
            continue
        finally:
            await c.close()
        confirm = max(confirm, int(e.confirm_offset))
        live[m.broker_id] = {"address": m.address, "min": int(e.min_offset), "max": int(e.max_offset),
                             "epoch": max((int(x.epoch) for x in e.epochs), default=0),
                             "clean": bool(m.clean_shutdown), "in_sync": bool(m.in_sync)}
    if not live:
        raise NotFound(f"no replica of group {args.group!r} is alive and answering")
    lo = max(r["min"] for r in live.values())
    hi = min(r["max"] for r in live.values())
    coarse = await asyncio.gather(*(_listing(r["address"], lo, hi, COARSE_BYTES, args)
                                    for r in live.values()))
    # the coarse ranges are cut alike on every replica (same from and to): the fine comparison
    # starts at the end of the last one all of them hold alike
    start = lo
    for row in zip(*coarse, strict=False):
        if len(set(row)) > 1:
            break
        start = row[0][2]
    fine = await asyncio.gather(*(_listing(r["address"], start, r["max"], FINE_BYTES, args)
                                  for r in live.values()))
    replicas = {b: ReplicaLog(b, r["address"], r["max"], r["epoch"], r["clean"], r["in_sync"], recs)
                for (b, r), recs in zip(live.items(), fine, strict=True)}
    return plan(args.group, int(info.master_epoch), confirm, start, replicas,
                sync_state_set_epoch=int(info.sync_state_set_epoch)), info


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    from autoswitch.controller.client import ControllerClient
    from autoswitch.proto import controller_pb2 as cpb

    p, info = await _plan(args)
    out = p.to_dict()
    choice = args.broker_id or p.proposal
    if choice not in {c.broker_id for c in p.choices}:
        raise RecoveryRefused(f"broker {choice} is not a live replica of {args.group}")
    out["choice"] = choice
    if not args.confirm:
        out["next"] = (f"autoswitch admin unclean-recover -b {args.group} -i {choice} --confirm {p.token}  "
                       f"(elects broker {choice}; the others' cut tails go to their quarantine/ first: "
                       f"autoswitch dump-log DATA_DIR --quarantine)")
        return out
    if args.confirm != p.token:
        # never the current token: a script must read the plan to confirm it (issue 64, item 8)
        raise RecoveryRefused(f"token {args.confirm!r} is not the current plan's (mistyped, or the group or a "
                              f"replica's log changed since): run without --confirm and read the plan again")
    async with ControllerClient(args.controller, deadline_s=args.timeout, tls=args.tls) as cc:
        r = await cc.call("ElectMaster", cpb.ElectMasterRequest(
            cluster_name=args.cluster_name or info.cluster_name, broker_name=args.group, broker_id=choice,
            designate_elect=True, unclean_recovery=p.token))
    out["elected"] = {"master": int(r.replica_info.master_broker_id), "master_epoch": int(r.replica_info.master_epoch)}
    return out


def cmd_unclean_recover(args: argparse.Namespace) -> int:
    if args.broker_id < 0:
        return fail_code(args, "BAD_USAGE", "--broker-id must be >= 1", rc=2)
    try:
        args.tls = tls_from_args(args)
        result = asyncio.run(_run(args))
    except AutoswitchError as e:
        return fail(args, e)
    emit(args, result)
    return 0
