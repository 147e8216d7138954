"""Quarantined log tails: before a store cuts its log (a slave truncating to its new master's
consistent point, an unclean recovery, a reset of a log that shares nothing with its master's), the bytes it is about to drop are copied, whole records
as they were, to ``<data dir>/quarantine/e<epoch>-<start>-<end>.log``: an operator can read them
back (``autoswitch dump-log DATA_DIR --quarantine``) and replay what matters. Nothing reads them
otherwise; the operator deletes them.

A cut larger than ``quarantine_max_bytes`` is not copied (logged ``truncated_tail_not_quarantined``,
critical): a runaway copy must not fill the disk the log needs. The copy is written and fsynced
under a temporary name and renamed before the cut's intent is recorded, so after any crash the
file is either whole or absent (and the cut not yet begun).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.fsutil import fsync_dir, fsync_fd

DIR = "quarantine"
_NAME = re.compile(r"^e(\d{1,19})-(\d{20})-(\d{20})\.log$")


@dataclass(frozen=True)
class QuarantineFile:
    path: Path
    epoch: int          # the last MasterEpoch of the log before the cut
    start: int          # the physical offset of its first byte
    end: int


def file_name(epoch: int, start: int, end: int) -> str:
    return f"e{epoch}-{start:020d}-{end:020d}.log"


def parse_name(name: str) -> tuple[int, int, int] | None:
    m = _NAME.match(name)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None


def files(data_dir: Path) -> list[QuarantineFile]:
    d = Path(data_dir) / DIR
    if not d.is_dir():
        return []
    out = []
    for p in d.iterdir():
        parsed = parse_name(p.name)
        if parsed is not None:
            out.append(QuarantineFile(p, *parsed))
    return sorted(out, key=lambda f: (f.start, f.path.name))


def save(data_dir: Path, chunks: Iterator[tuple[int, bytes, Any]], epoch: int, start: int, end: int) -> Path:
    """Copy ``chunks`` (whole-record chunks from ``start``, the commit log's ``iter_chunks``) up
    to ``end`` into a new quarantine file, durably."""
    d = Path(data_dir) / DIR
    d.mkdir(exist_ok=True)
    path = d / file_name(epoch, start, end)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    try:
        for pos, data, _seg in chunks:
            if pos >= end:
                break
            view = memoryview(data)[: end - pos]
            while view:
                view = view[os.write(fd, view):]
        fsync_fd(fd, what=str(tmp))
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_dir(d)
    return path


def keep_tail(data_dir: Path, log: Any, offset: int, epoch: int, cap: int, logger: Any) -> Path | None:
    """Before a cut to ``offset``: copy ``[offset, log end)`` of ``log`` (a CommitLog) to a
    quarantine file, or say loudly why not (over ``cap``, or the copy failed: the cut must still
    happen, a replica cannot follow its master otherwise)."""
    end = log.max_offset
    size = end - offset
    if size <= 0:
        return None
    if size > cap:
        logger.critical("truncated_tail_not_quarantined", offset=offset, end=end, bytes=size,
                        quarantine_max_bytes=cap, epoch=epoch,
                        action="these bytes are dropped without a copy: raise quarantine_max_bytes to keep one")
        return None
    try:
        path = save(data_dir, log.iter_chunks(offset), epoch, offset, end)
    except (OSError, AutoswitchError) as e:     # LogCorrupt on a damaged tail, or the disk
        logger.critical("truncated_tail_not_quarantined", offset=offset, end=end, bytes=size, epoch=epoch,
                        error=str(e)[:300])
        return None
    logger.warning("truncated_tail_quarantined", offset=offset, end=end, bytes=size, epoch=epoch, path=str(path),
                   read_with=f"autoswitch dump-log {data_dir} --quarantine")
    return path
