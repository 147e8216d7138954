"""Coverage-guided fuzzing of the commit-log record reader and checkpoint parser (atheris).

    .venv/bin/python -m tests.fuzz.atheris_record [-runs=100000] [-max_total_time=60] [corpus dirs...]

Oracle: tests.fuzz.test_fuzz_record.check_reader (both walkers agree, accepted prefixes
parse, everything else is a typed CorruptionError). Seeds: tests/fuzz/corpus/record/.
atheris 3.0.0 installs on CPython 3.11; the import is guarded so the module stays importable.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fuzz.harness import run

CORPUS = Path(__file__).parent / "corpus" / "record"


def one_input(data: bytes) -> None:
    from tests.fuzz.test_fuzz_record import check_reader

    check_reader(data)
    # the same bytes ending a segment 64 bytes later (padding / room-for-padding rules)
    check_reader(data, seg_end=len(data) + 64)


def main(argv: list[str] | None = None) -> int:
    return run(argv, one_input, ["autoswitch.broker.storage.checkpoint", "autoswitch.broker.storage.record"], CORPUS)


if __name__ == "__main__":
    sys.exit(main())
