"""Helpers every broker CLI command shares: typed errors as JSON on stderr, the target check."""

from __future__ import annotations

import argparse
import json
import sys

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.tls import tls_from_args


def err(e: AutoswitchError, as_json: bool = True) -> int:
    print(json.dumps({"error": e.to_dict()}), file=sys.stderr)
    return 1


def status_err(status: int, message: str) -> int:
    from autoswitch.proto import broker_pb2 as pb

    print(json.dumps({"error": {"code": pb.Status.Name(status), "message": message}}), file=sys.stderr)
    return 1


async def target_address(args: argparse.Namespace) -> str | None:
    """``--broker``, or the address of ``--group``'s master from the ``--namesrv`` name server
    (None: it knows none, e.g. a failover in progress). Call after ``bad_target``."""
    if not args.namesrv:
        return args.broker
    from .route import NameServerClient

    ns = NameServerClient(args.namesrv, args.tls)
    try:
        return await ns.lookup_master(args.group)
    finally:
        await ns.close()


def bad_target(args: argparse.Namespace) -> bool:
    if bool(args.broker) == bool(args.namesrv) or (args.namesrv and not args.group):
        print(json.dumps({"error": {"code": "BAD_USAGE",
                                    "message": "give either --broker, or --namesrv with --group"}}), file=sys.stderr)
        return True
    try:
        args.tls = tls_from_args(args)     # read and checked once, here
    except AutoswitchError as e:
        print(json.dumps({"error": e.to_dict()}), file=sys.stderr)
        return True
    return False
