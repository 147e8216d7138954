"""`autoswitch dump-log DATA_DIR` (kafka-dump-log): the records of a broker's commit log, read
from its files, offline.

It only reads (the files are opened read-only; a running broker's directory may be read, its
unsynced tail then shows as where the records stop). Each segment is read from its start, one
CRC-checked record after another, until the first position that holds no valid record: the end
of what was written (zeros) or damage, which the last line of the segment says with the reason
(`stops`). It does not repair or truncate anything: the broker's own recovery does that.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import mmap
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from autoswitch.broker.cli.consume import body_preview
from autoswitch.broker.storage import quarantine
from autoswitch.broker.storage.record import HEADER_SIZE, parse_record, peek_total
from autoswitch.broker.storage.segment import parse_segment_name
from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base.output import fail_code


def register(sub: Any) -> None:
    p = sub.add_parser("dump-log", help="print the records of a broker's commit log from its files (offline, "
                                        "read-only; kafka-dump-log)")
    p.add_argument("data_dir", help="the broker's --data-dir")
    p.add_argument("--topic", help="only this topic's records")
    p.add_argument("--from", dest="from_offset", type=int, default=0, help="the first physical offset to show")
    p.add_argument("--count", type=int, default=1000, help="records to print at most")
    p.add_argument("--bodies", action="store_true", help="print each body (text, or hex when it is not UTF-8)")
    p.add_argument("--json", action="store_true", help="one JSON line per record, then the envelope")
    p.add_argument("--quarantine", action="store_true",
                   help="read the tails truncations dropped (DATA_DIR/quarantine/) instead of the log")
    p.set_defaults(func=cmd_dump_log)


def segments(log_dir: Path) -> list[tuple[int, Path]]:
    found = [(b, p) for p in log_dir.iterdir() if (b := parse_segment_name(p.name)) is not None]
    return sorted(found)


def records(path: Path, base: int) -> Iterator[dict[str, Any]]:
    """Every valid record of one segment file in order, then (when the records stop before the
    file's end) one ``{"stops": offset, "why": reason}``."""
    if path.stat().st_size == 0:
        return
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as data:   # never written
        yield from _walk(data, base)


def _walk(data: Any, base: int) -> Iterator[dict[str, Any]]:
    pos = 0
    while pos + HEADER_SIZE <= len(data):
        total = peek_total(data, pos)
        if total < HEADER_SIZE or pos + total > len(data):
            break
        try:
            info, body = parse_record(data, pos, pos + total, base + pos)
        except LogCorrupt as e:
            yield {"stops": base + pos, "why": e.message}
            return
        yield {"info": info, "body": body}
        pos += total
    if pos < len(data) and any(data[pos:pos + HEADER_SIZE]):
        yield {"stops": base + pos, "why": "not a whole record"}
    # else: zeros (a preallocated segment's unwritten part), or the end of the file


def cmd_dump_log(args: argparse.Namespace) -> int:
    log_dir = Path(args.data_dir) / ("quarantine" if args.quarantine else "commitlog")
    if not Path(args.data_dir, "commitlog").is_dir():
        return fail_code(args, "NOT_FOUND", f"{Path(args.data_dir, 'commitlog')} does not exist (is {args.data_dir} "
                                            f"a broker's --data-dir?)")
    if args.count < 1 or args.from_offset < 0:
        return fail_code(args, "BAD_USAGE", "--count must be >= 1 and --from >= 0", rc=2)
    shown = 0
    stops: list[dict[str, Any]] = []
    if args.quarantine:
        # each file holds one cut's tail from its start offset (broker/storage/quarantine.py)
        segs = [(f.start, f.path) for f in quarantine.files(Path(args.data_dir))]
    else:
        segs = segments(log_dir)
    for base, path in segs:
        if base + os.path.getsize(path) <= args.from_offset:
            continue
        for r in records(path, base):
            if "stops" in r:
                stops.append({"segment": path.name, "offset": r["stops"], "why": r["why"]})
                print(json.dumps({"warning": {"code": "RECORDS_STOP", **stops[-1]}}), file=sys.stderr)
                continue
            info = r["info"]
            if info.padding or info.phy_offset < args.from_offset or (args.topic and info.topic != args.topic):
                continue
            row = {"phy_offset": info.phy_offset, "size": info.size, "epoch": info.epoch, "topic": info.topic,
                   "queue_offset": info.queue_offset, "msg_id": info.msg_id, "born_ts_ms": info.born_ts_ms,
                   "crc": f"{info.crc:08x}"}
            if args.bodies:
                row["body"] = body_preview(r["body"])
            if args.quarantine:
                row["quarantine_file"] = path.name
            if args.json:
                print(json.dumps(row, separators=(",", ":")))
            else:
                born = dt.datetime.fromtimestamp(info.born_ts_ms / 1000, dt.UTC).isoformat(timespec="milliseconds")
                line = (f"{info.phy_offset}\tepoch={info.epoch}\t{info.topic}@{info.queue_offset}\t{info.msg_id}\t"
                        f"{info.size}B\t{born}")
                print(line + (f"\t{row['body']}" if args.bodies else "")
                      + (f"\t(quarantined in {path.name})" if args.quarantine else ""))
            shown += 1
            if shown >= args.count:
                break
        if shown >= args.count:
            break
    summary = {"data_dir": str(args.data_dir), "segments": len(segs), "records": shown, "stops": stops}
    if args.json:
        print(json.dumps({"ok": True, "command": "dump-log", "result": summary}, sort_keys=True))
    elif not shown:
        # silence read as "the command did nothing" (issue 64, item 9)
        where = (f"no quarantined tails in {log_dir} (nothing was ever cut from this log)" if args.quarantine and not segs
                 else f"no records in {log_dir}" + (f" of topic {args.topic!r}" if args.topic else "")
                 + (f" from offset {args.from_offset}" if args.from_offset else ""))
        print(where)
    return 0
