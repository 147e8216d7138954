"""snapshot-save never replaces what it was not asked to, and a snapshot that decompresses to far
more than any real state is refused in bounded memory (issue 29, risks)."""

from __future__ import annotations

import os
import resource
import struct
import zlib

import pytest
from autoswitch.controller.snapshot_restore import RestoreRefused, save_snapshot_file
from autoswitch.controller.state.sm_snapshot import MAX_SNAPSHOT_JSON_BYTES, decode_snapshot, encode_snapshot
from autoswitch.controller.state.sm_state import ControllerState, SnapshotCorrupt


def _snap() -> bytes:
    return encode_snapshot(ControllerState(), 7)


def test_an_existing_file_is_not_replaced_without_force(tmp_path):
    victim = tmp_path / "passwd"
    victim.write_text("root:x:0:0\n")
    with pytest.raises(RestoreRefused, match="exists"):
        save_snapshot_file(victim, _snap())
    assert victim.read_text() == "root:x:0:0\n"
    save_snapshot_file(victim, _snap(), force=True)
    assert decode_snapshot(victim.read_bytes())[1] == 7


def test_a_new_file_is_private_and_a_symlink_or_directory_is_refused(tmp_path):
    out = tmp_path / "snap.bin"
    save_snapshot_file(out, _snap())
    assert os.stat(out).st_mode & 0o777 == 0o600
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "elsewhere")
    for p in (link, tmp_path):
        with pytest.raises(RestoreRefused, match="not a regular file"):
            save_snapshot_file(p, _snap(), force=True)
    assert not (tmp_path / "elsewhere").exists()


def test_a_zip_bomb_snapshot_is_refused_in_bounded_memory():
    c = zlib.compressobj(9)        # built in chunks: the test itself never holds the big text
    chunk = b" " * (1 << 20)
    parts = [c.compress(b"[")] + [c.compress(chunk) for _ in range((MAX_SNAPSHOT_JSON_BYTES >> 20) + 64)]
    payload = b"".join([*parts, c.compress(b"]"), c.flush()])
    assert len(payload) < 2 << 20
    data = struct.pack(">4sHIQ", b"ASSM", 1, zlib.crc32(payload), len(payload)) + payload
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with pytest.raises(SnapshotCorrupt, match="decompresses to more than"):
        decode_snapshot(data)
    grown_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    assert grown_kib < (MAX_SNAPSHOT_JSON_BYTES >> 10) + (128 << 10), grown_kib
