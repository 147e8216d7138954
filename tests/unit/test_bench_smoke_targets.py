"""Every `make bench-*` target is in the CI smoke (bench/smoke.py): a benchmark nobody runs rots
(issue 63: bench-scale failed for a week)."""

from __future__ import annotations

import re
from pathlib import Path

from bench.smoke import TARGETS

ROOT = Path(__file__).resolve().parents[2]


def test_the_smoke_runs_every_bench_target():
    make = (ROOT / "Makefile").read_text()
    targets = set(re.findall(r"^(bench-[a-z-]+):", make, flags=re.M)) - {"bench-smoke"}
    assert targets, "no bench targets found in the Makefile"
    assert {n.split()[0] for n in TARGETS} == targets
    assert "bench-smoke" in (ROOT / ".ci" / "run").read_text()
