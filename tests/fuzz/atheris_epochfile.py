"""Coverage-guided fuzzing of the EpochFile parser (atheris).

    .venv/bin/python -m tests.fuzz.atheris_epochfile [-runs=100000] [-max_total_time=60] [corpus dirs...]

Oracle: tests.fuzz.test_fuzz_epochfile.check_parser (EpochFileCorrupt or a valid cache that
re-encodes to the same bytes). Seeds: tests/fuzz/corpus/epochfile/. The atheris import is
guarded so the module stays importable where atheris is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fuzz.harness import run

CORPUS = Path(__file__).parent / "corpus" / "epochfile"


def one_input(data: bytes) -> None:
    from tests.fuzz.test_fuzz_epochfile import check_parser

    check_parser(data)


def main(argv: list[str] | None = None) -> int:
    return run(argv, one_input, ["autoswitch.epochfile.cache", "autoswitch.epochfile.file"], CORPUS)


if __name__ == "__main__":
    sys.exit(main())
