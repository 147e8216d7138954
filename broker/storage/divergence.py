"""The durable record of a divergence: this replica's range digests found bytes of ``[start, end)``
in MasterEpoch ``epoch`` that differ from its master's (docs/replication.md, "Range digests").

Kept in ``<data dir>/diverged`` (temp + fsync + rename, CRC-sealed) from the moment the mismatch
is found until a repair re-verified the range: across a master change and a restart of this
replica. While it exists the replica reports itself diverged (never a clean election candidate),
and a new HA session cuts the range away before it fetches (``cut``: the cut happened, the range
is being fetched again). Before, the flag lived in the HA slave of one role and was forgotten at
the next one, and the new master's digests might never compare that range again (issue 58,
item 4).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from pathlib import Path

from autoswitch.broker.storage.store_errors import LogCorrupt

from autoswitch.base import crcfile
from autoswitch.base.fsutil import fsync_dir, write_atomic

FILE = "diverged"
_BODY = struct.Struct(">BQQQB")     # version, epoch, start, end, cut
VERSION = 1


@dataclass(frozen=True)
class Divergence:
    epoch: int
    start: int
    end: int
    cut: bool = False       # the range was cut away (repairing: fetched again from the master)


def load(directory: Path) -> Divergence | None:
    path = directory / FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    body = crcfile.sealed_body(data)
    if body is None or len(body) != _BODY.size:
        raise LogCorrupt("the divergence record is damaged (its CRC or size does not match)", path=str(path))
    version, epoch, start, end, cut = _BODY.unpack(body)
    if version != VERSION or not start < end or cut not in (0, 1):
        raise LogCorrupt(f"the divergence record is invalid (version {version}, [{start}, {end}))", path=str(path))
    return Divergence(epoch, start, end, bool(cut))


def save(directory: Path, d: Divergence) -> None:
    write_atomic(directory / FILE, crcfile.seal(_BODY.pack(VERSION, d.epoch, d.start, d.end, int(d.cut))))


def clear(directory: Path) -> None:
    path = directory / FILE
    if path.exists():
        path.unlink()
        fsync_dir(directory)
