"""Rebuild bench/RESULTS.md: the summary (bench/results/SUMMARY.md) followed by every
bench/results/<name>.md, so each benchmark's page stays the one place its figures are edited."""

from __future__ import annotations

import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
ORDER = ["replication", "produce", "recovery", "controller", "election", "scale", "failover", "rolling", "audit"]


def main() -> None:
    parts = [(RESULTS / "SUMMARY.md").read_text().rstrip() + "\n"]
    names = ORDER + sorted(p.stem for p in RESULTS.glob("*.md") if p.stem not in ORDER + ["SUMMARY"])
    for name in names:
        path = RESULTS / f"{name}.md"
        if not path.exists():
            continue
        body = path.read_text().rstrip()
        # demote headings one level so the file keeps a single top-level title
        body = "\n".join("#" + line if line.startswith("#") else line for line in body.splitlines())
        parts.append(f"\n---\n\n<!-- from bench/results/{name}.md -->\n{body}\n")
    (ROOT / "bench" / "RESULTS.md").write_text("".join(parts))


if __name__ == "__main__":
    main()
