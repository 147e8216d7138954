"""Crash-safe file primitives shared by every metadata file (EpochFile, checkpoint, broker
identity, Raft hard state and snapshots)."""

from __future__ import annotations

import os
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a rename or a new/deleted entry in ``directory`` durable."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
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
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if fsync:
        fsync_dir(path.parent)
