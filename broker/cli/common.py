"""Helpers every broker CLI command shares: typed errors in the output envelope, the target check."""

from __future__ import annotations

import argparse
import json
import sys

from autoswitch.base.errors import AutoswitchError, NotFound
from autoswitch.base.output import fail, fail_code
from autoswitch.base.tls import tls_from_args


def err(args: argparse.Namespace, e: AutoswitchError) -> int:
    return fail(args, e)


def status_err(args: argparse.Namespace, status: int, message: str) -> int:
    from autoswitch.proto import broker_pb2 as pb

    return fail_code(args, pb.Status.Name(status), message)


async def target_address(args: argparse.Namespace) -> str | None:
    """``--broker``, or the address of ``--group``'s master from the ``--namesrv`` name server
    (None: it knows none, e.g. a failover in progress). Call after ``bad_target``."""
    if not args.namesrv:
        return args.broker
    from autoswitch.broker.client.route import NameServerClient

    ns = NameServerClient(args.namesrv, args.tls)
    try:
        return await ns.lookup_master(args.group)
    finally:
        await ns.close()


def bad_target(args: argparse.Namespace) -> bool:
    if bool(args.broker) == bool(args.namesrv) or (args.namesrv and not args.group):
        fail_code(args, "BAD_USAGE", "give either --broker, or --namesrv (or AUTOSWITCH_NAMESRV, or the profile's "
                  "namesrv) with --group")
        return True
    try:
        args.tls = tls_from_args(args)     # read and checked once, here
    except AutoswitchError as e:
        fail(args, e)
        return True
    return False


# ---- commands that ask every broker group's master (from the name servers' routes) ----

async def masters(args: argparse.Namespace) -> list[tuple[str, str, int]]:
    """(broker group, master address, MasterEpoch) of every group (or of ``args.group``)."""
    from autoswitch.broker.client.route import NameServerClient

    ns = NameServerClient(args.namesrv, args.tls)
    try:
        masters = await ns.master_routes()
    finally:
        await ns.close()
    if args.group:
        masters = [m for m in masters if m[0] in args.group]
        missing = sorted(set(args.group) - {m[0] for m in masters})
        if missing:
            raise NotFound(f"no master route for broker group(s) {', '.join(missing)}", groups=missing)
    return masters


def warn(group: str, code: str, message: str) -> None:
    """A broker group that did not answer: one line on stderr, the command goes on with the rest."""
    print(json.dumps({"warning": {"code": code, "group": group, "message": message}}), file=sys.stderr)


def prepare(args: argparse.Namespace) -> int | None:
    """The name servers given (flag, env or profile) and the TLS settings read: None, or the exit code."""
    if not args.namesrv:
        return fail_code(args, "BAD_USAGE", "give --namesrv (or AUTOSWITCH_NAMESRV, or the profile's namesrv)", rc=2)
    try:
        args.tls = tls_from_args(args)
    except AutoswitchError as e:
        return fail(args, e, rc=2 if e.code == "CONFIG_ERROR" else 1)
    return None
