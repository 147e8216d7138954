"""Inputs straight from a cluster, so an incident takes one command: every replica's data
directory (group and brokerId from its identity file; exported from a temporary copy, so a
running or crashed broker's store is left untouched) and the controllers' applied-event history
(ExportEvents, paged)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from autoswitch.pipeline.errors import InputNotFound, PipelineError

from autoswitch.base.log import get_logger

log = get_logger("pipeline.collect")

MAX_EVENT_LINES = 10_000_000
PAGE_LINES = 10_000


def export_data_dirs(dirs: list[str], out: Path) -> list[dict]:
    """Export each broker data dir into ``out`` (``<group>-<brokerId>.index.jsonl`` and siblings)."""
    from autoswitch.broker.replicas.identity import IdentityStore
    from autoswitch.pipeline.exports import export_replica

    out.mkdir(parents=True, exist_ok=True)
    done = []
    for d in dirs:
        path = Path(d)
        if not path.is_dir():
            raise InputNotFound(f"--broker-data {path} is not a directory", path=str(path))
        ident = IdentityStore(path).load().identity
        if ident is None:
            raise InputNotFound(f"{path} has no broker identity file (not a controller-mode broker's data dir, or "
                                "it never registered); use export-log with --group and --broker-id", path=str(path))
        res = export_replica(path, ident.group, ident.broker_id, out / f"{ident.group}-{ident.broker_id}.index.jsonl",
                             copy_first=True)
        log.info("replica_exported", dataDir=str(path), group=ident.group, brokerId=ident.broker_id,
                 records=res["records"])
        done.append(res)
    return done


def fetch_events(controllers: str, tls: Any, out: Path) -> int:
    """The applied-event history from the controllers (any node: every node has it) into ``out``."""
    from autoswitch.controller.client import ControllerClient
    from autoswitch.controller.codes import ControllerRpcError

    from autoswitch.proto import controller_pb2 as pb

    async def run() -> int:
        n, line = 0, 0
        async with ControllerClient([a.strip() for a in controllers.split(",") if a.strip()], tls=tls) as c:
            with open(out, "w") as f:
                while n < MAX_EVENT_LINES:
                    r = await c.call("ExportEvents", pb.ExportEventsRequest(from_line=line, max_lines=PAGE_LINES),
                                     leader=False)
                    for text in r.lines:
                        json.loads(text)        # refuse anything that is not a JSON line, by name
                        f.write(text.rstrip("\n") + "\n")
                        n += 1
                    line = r.next_line
                    if r.eof or not r.lines:
                        break
        return n

    try:
        n = asyncio.run(run())
    except ControllerRpcError as e:
        raise PipelineError(f"cannot read the event history from {controllers}: {e.message}") from None
    except ValueError as e:
        raise PipelineError(f"the controllers sent an event line that is not JSON: {e}") from None
    log.info("events_fetched", controllers=controllers, lines=n, out=str(out))
    return n
