"""The repository explains itself: nothing in it cites the planning notes it was built from."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_no_file_cites_notes_outside_the_repo():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    # Spelled in parts so this file does not match itself.
    needles = ("-".join(("DESIGN", "NOTES")), "/".join(("..", "shared", "")))
    hits = []
    for name in files:
        p = ROOT / name
        if p.suffix in (".so", ".png", ".parquet") or not p.is_file():
            continue
        text = p.read_text(errors="ignore")
        hits += [f"{name}: {n}" for n in needles if n in text]
    assert not hits, hits
