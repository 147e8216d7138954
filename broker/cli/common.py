"""Helpers every broker CLI command shares: typed errors in the output envelope, the target check."""

from __future__ import annotations

import argparse

from autoswitch.base.errors import AutoswitchError
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
