"""Crash-safe file primitives shared by every metadata file (EpochFile, checkpoint, broker
identity, Raft hard state and snapshots)."""

from __future__ import annotations

import os
from pathlib import Path

from autoswitch.base.errors import AutoswitchError


class FsyncFailed(AutoswitchError):
    """An fsync (or fdatasync) returned an error. After that the page cache cannot be trusted:
    Linux may have dropped the dirty pages and marked them clean, so a later fsync "succeeds"
    without the data (PostgreSQL's rule since 2018: PANIC, never retry). Whoever owns the files
    stops using them; a broker process ends and its next start is unclean (docs/storage.md,
    "A failed fsync")."""

    code = "FSYNC_FAILED"


def fsync_fd(fd: int, data_only: bool = False, what: str = "") -> None:
    """fsync (``data_only``: fdatasync) ``fd``; any error is a ``FsyncFailed`` naming ``what``."""
    try:
        if data_only:
            os.fdatasync(fd)
        else:
            os.fsync(fd)
    except OSError as e:
        raise FsyncFailed(f"fsync of {what or f'fd {fd}'} failed: {e.strerror or e}", path=what,
                          errno=e.errno) from e


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new/deleted entry in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        fsync_fd(fd, what=str(directory))
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, fsync: bool = True, suffix: str = ".tmp", mode: int = 0o644) -> None:
    """temp + fsync + rename + fsync(dir): after a crash the file holds the old or the new content.

    ``fsync=False`` keeps the rename (readers never see a torn file) but gives up durability;
    it exists for Raft's fsync-off test/bench mode only.
    """
    tmp = path.with_name(path.name + suffix)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if fsync:
            fsync_fd(fd, what=str(tmp))
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
