"""Issue 59, item 4: every decompression in the product is bounded by its limit in memory."""

from __future__ import annotations

import subprocess
import sys
import zlib

import pytest

from autoswitch.base.inflate import STEP, InflateTooLarge, inflate

_BOMB_RUN = """
import resource, struct, zlib
from autoswitch.controller.state.sm_snapshot import _SNAP_HEADER, _SNAP_MAGIC, _SNAP_VERSION, decode_snapshot
from autoswitch.controller.state.sm_state import SnapshotCorrupt
payload = zlib.compress(b"\\0" * (1 << 30), 9)           # 1 GiB of zeros in about 1 MB
data = _SNAP_HEADER.pack(_SNAP_MAGIC, _SNAP_VERSION, zlib.crc32(payload), len(payload)) + payload
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    decode_snapshot(data)
except SnapshotCorrupt as e:
    print("refused", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
"""


def test_a_snapshot_bomb_is_refused_before_it_inflates():
    """restore-member's decoder, in a process of its own (its peak memory is the measure): before
    the fix the loop stopped at the limit and its final flush inflated the other ~2 GB at once."""
    out = subprocess.run([sys.executable, "-c", _BOMB_RUN], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    word, grown_mib = out.stdout.split()
    assert word == "refused" and int(grown_mib) < 400, out.stdout    # the 128 MiB limit and a step


def test_what_fits_inflates_whole_and_garbage_is_a_zlib_error():
    data = bytes(range(256)) * 40_000
    assert inflate(zlib.compress(data), len(data)) == data
    assert inflate(zlib.compress(b""), 0) == b""
    with pytest.raises(InflateTooLarge):
        inflate(zlib.compress(data), len(data) - 1)
    assert len(inflate(zlib.compress(b"x" * (3 * STEP)), 3 * STEP)) == 3 * STEP
    with pytest.raises(zlib.error):
        inflate(b"not zlib at all", 1 << 20)
