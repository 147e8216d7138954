"""Coverage-guided fuzzing of the Raft log reader (atheris).

    .venv/bin/python -m tests.fuzz.atheris_raftlog [-runs=100000] [-max_total_time=60] [corpus dirs...]

Oracle: tests.fuzz.test_fuzz_raftlog.read (valid contiguous entries or a typed
RaftStorageCorrupt; any other exception is a crash). Seeds: tests/fuzz/corpus/raftlog/.
atheris 3.0.0 installs on CPython 3.11; the import is guarded so the module stays importable.
"""

from __future__ import annotations

import sys
from pathlib import Path

from tests.fuzz.harness import run

CORPUS = Path(__file__).parent / "corpus" / "raftlog"


def one_input(data: bytes) -> None:
    from tests.fuzz.test_fuzz_raftlog import read

    read(data)


def main(argv: list[str] | None = None) -> int:
    return run(argv, one_input, ["autoswitch.controller.raft.codec"], CORPUS)


if __name__ == "__main__":
    sys.exit(main())
