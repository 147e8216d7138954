"""Coverage-guided fuzzing of the HA decoders + sessions with atheris (libFuzzer).

    .venv/bin/python -m tests.fuzz.atheris_ha [-runs=100000] [-max_total_time=60] [corpus dirs...]

The first input byte picks the side (even: master side, odd: slave side); the rest is the
byte stream. Seeds: tests/fuzz/corpus/ha/. A crash is any exception other than a typed
AutoswitchError (or a broken invariant). atheris 3.0.0 installs on CPython 3.11; the import is
guarded so the module can be imported (and listed) where it is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fuzz.harness import run

CORPUS = Path(__file__).parent / "corpus" / "ha"


def one_input(data: bytes) -> None:
    from tests.fuzz.test_fuzz_ha import drive_master_side, drive_slave_side

    if not data:
        return
    body = data[1:]
    cut = len(body) // 2
    if data[0] % 2 == 0:
        drive_master_side(body, cut)
    else:
        drive_slave_side(body, cut)


def _seeds() -> Path:
    """The committed corpus, with the side byte each file name implies."""
    seed_dir = Path("/tmp") / "atheris-ha-seeds"
    seed_dir.mkdir(exist_ok=True)
    for p in CORPUS.glob("*.bin"):
        side = b"\x00" if p.name.startswith("master-") else b"\x01"
        (seed_dir / p.name).write_bytes(side + p.read_bytes())
    return seed_dir


def main(argv: list[str] | None = None) -> int:
    return run(argv, one_input,
               ["autoswitch.ha.codec", "autoswitch.ha.master_session", "autoswitch.ha.slave_session"], _seeds)


if __name__ == "__main__":
    sys.exit(main())
