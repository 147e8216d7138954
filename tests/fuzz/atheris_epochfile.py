"""Coverage-guided fuzzing of the EpochFile parser (atheris).

    .venv/bin/python -m tests.fuzz.atheris_epochfile [-runs=100000] [-max_total_time=60] [corpus dirs...]

Oracle: tests.fuzz.test_fuzz_epochfile.check_parser (EpochFileCorrupt or a valid cache that
re-encodes to the same bytes). Seeds: tests/fuzz/corpus/epochfile/. The atheris import is
guarded so the module stays importable where atheris is missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

try:
    import atheris
except ImportError:  # pragma: no cover - depends on the environment
    atheris = None

CORPUS = Path(__file__).parent / "corpus" / "epochfile"


def one_input(data: bytes) -> None:
    from tests.fuzz.test_fuzz_epochfile import check_parser

    check_parser(data)


def main(argv: list[str] | None = None) -> int:
    if atheris is None:
        print("atheris is not installed: .venv/bin/pip install atheris==3.0.0", file=sys.stderr)
        return 2
    args = list(sys.argv if argv is None else argv)
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(CORPUS))
    with atheris.instrument_imports():
        import autoswitch.epochfile.cache  # noqa: F401
        import autoswitch.epochfile.file  # noqa: F401
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0


if __name__ == "__main__":
    sys.exit(main())
