"""Decompression bounded by its limit (issue 59, item 4): a zlib bomb never costs more memory than
the limit allows, whatever the compressed size says.

``zlib.decompressobj().flush()`` inflates everything still pending in one step, with no bound: a
loop that stopped at its limit and then flushed once more inflated the whole bomb anyway (a 1 MB
snapshot of zeros cost 2 GB in ``restore-member`` before it was refused). Here every step asks for
at most ``STEP`` bytes, the total is checked after each, and ``flush`` is called only once the
input is consumed and the output has stopped (nothing is left for it to produce)."""

from __future__ import annotations

import zlib

STEP = 1 << 20


class InflateTooLarge(ValueError):
    """The data inflates to more than the limit (checked before more than a step past it exists)."""


def inflate(data: bytes, limit: int) -> bytes:
    """The zlib-inflated ``data``, at most ``limit`` bytes: InflateTooLarge past it, zlib.error
    when it is not a zlib stream."""
    d = zlib.decompressobj()
    parts: list[bytes] = []
    total = 0
    rest = data
    while True:
        part = d.decompress(rest, STEP)
        rest = d.unconsumed_tail
        total += len(part)
        if total > limit:
            raise InflateTooLarge(f"inflates to more than {limit} bytes")
        parts.append(part)
        if not rest and len(part) < STEP:
            break           # the input is consumed and the output stopped short of a step
    tail = d.flush()        # nothing pending by now: a few bytes at most
    total += len(tail)
    if total > limit:
        raise InflateTooLarge(f"inflates to more than {limit} bytes")
    parts.append(tail)
    return b"".join(parts)
