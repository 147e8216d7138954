"""A wait longer than a second reports on stderr each second, with the time left; a short one is silent."""

from __future__ import annotations

import asyncio

from autoswitch.base.progress import with_progress


async def _sleep(s: float) -> str:
    await asyncio.sleep(s)
    return "done"


def test_long_wait_shows_progress_short_wait_does_not(capsys):
    assert asyncio.run(with_progress(_sleep(0.05), "quick", 5, force=True)) == "done"
    assert capsys.readouterr().err == ""
    assert asyncio.run(with_progress(_sleep(2.3), "the thing", 10, force=True)) == "done"
    lines = capsys.readouterr().err.splitlines()
    # one line a second after the first second (more under load, never none)
    assert lines and all(line.startswith("... the thing:") and "more" in line for line in lines)
