"""The body of the broker's own records (consumer offsets in ``__consumer_offsets``, topic
settings in ``__topics``): a small JSON object. One bounded parse for every kind, so a record too
large or not an object is refused the same way whichever table reads it."""

from __future__ import annotations

from typing import Any

import orjson

MAX_BODY_BYTES = 1024            # the largest body of an internal record (names are <= 255 bytes)


def load_doc(body: bytes) -> dict[str, Any] | None:
    """The record's JSON object, or None when the body is too large, not JSON or not an object."""
    if len(body) > MAX_BODY_BYTES:
        return None
    try:
        d = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return d if isinstance(d, dict) else None
