"""The shared `main()` of the atheris harnesses (tests/fuzz/atheris_*.py).

Each harness supplies its oracle (`one_input`), the modules to instrument for coverage, and its
seed corpus; this runs libFuzzer over them. atheris is imported lazily so every harness stays
importable (and listable by run_atheris) where atheris is missing.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def run(argv: list[str] | None, one_input: Callable[[bytes], None], instrument: Sequence[str],
        corpus: Path | Callable[[], Path]) -> int:
    try:
        import atheris
    except ImportError:  # pragma: no cover - depends on the environment
        print("atheris is not installed: .venv/bin/pip install atheris==3.0.0", file=sys.stderr)
        return 2
    args = list(sys.argv if argv is None else argv)
    if not any(not a.startswith("-") for a in args[1:]):
        args.append(str(corpus() if callable(corpus) else corpus))
    with atheris.instrument_imports():
        for name in instrument:
            importlib.import_module(name)
    atheris.Setup(args, one_input)
    atheris.Fuzz()
    return 0
