"""`autoswitch admin transfer-master`: a graceful handover of a group's master (broker/replicas/handover.py)."""

from __future__ import annotations

import argparse

from autoswitch.broker.cli.common import bad_target, err, status_err, target_address

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.output import emit, fail_code
from autoswitch.base.progress import with_progress


def cmd_transfer_master(args: argparse.Namespace) -> int:
    import asyncio

    from autoswitch.broker.client.client import AdminClient

    from autoswitch.proto import broker_pb2 as pb

    if (args.to is not None and args.to < 1) or not (0.1 <= args.timeout <= 300):
        return fail_code(args, "BAD_USAGE", "--to must be >= 1, --timeout in [0.1, 300]", rc=2)
    if bad_target(args):
        return 2

    async def run() -> int:
        try:
            addr = await target_address(args)
        except AutoswitchError as e:
            return err(args, e)
        if not addr:
            return status_err(args, pb.NOT_MASTER, f"no master of {args.group} is known to the name server")
        client = AdminClient(addr, timeout_s=10.0, tls=args.tls)
        try:
            r = await with_progress(client.transfer_master(args.to or 0, int(args.timeout * 1000)),
                                    "waiting for the handover (the master drains to its target)", args.timeout)
        except AutoswitchError as e:
            return err(args, e)
        finally:
            await client.close()
        if r.status != pb.OK:
            return status_err(args, r.status, r.error_message)
        out = {"handed_over": True, "target": r.target, "master_id": r.master_id, "master_epoch": r.master_epoch,
               "master_addr": r.master_addr, "waited_ms": r.waited_ms}
        emit(args, out)
        return 0

    return asyncio.run(run())
