"""The CRC trailer of our small binary files (EpochFile, store checkpoint, Raft hard state): the
body, then its zlib CRC-32 big-endian. Written whole with ``fsutil.write_atomic``, so a file is
either the old image or the new one; the CRC catches what the disk did to it since."""

from __future__ import annotations

import struct
import zlib

TRAILER = struct.Struct(">I")


def seal(body: bytes) -> bytes:
    return body + TRAILER.pack(zlib.crc32(body))


def sealed_body(data: bytes | memoryview) -> memoryview | None:
    """The body of a sealed image, or None when it is shorter than a trailer or its CRC does not
    match (the caller raises its own typed corruption error, naming the file)."""
    n = len(data)
    if n < TRAILER.size:
        return None
    body = memoryview(data)[: n - TRAILER.size]
    if zlib.crc32(body) != TRAILER.unpack_from(data, n - TRAILER.size)[0]:
        return None
    return body
