"""Write the "Ranges" section of docs/configuration.md from autoswitch/base/ranges.py and the
replicated keys' spec (controller/state/sm_config.py); ``--check`` only compares (the unit test does)."""

from __future__ import annotations

import sys
from pathlib import Path

BEGIN = "<!-- ranges:begin (python scripts/gen_config_ranges.py writes this section) -->"
END = "<!-- ranges:end -->"
DOC = Path(__file__).resolve().parent.parent / "docs" / "configuration.md"


def section() -> str:
    from autoswitch.controller.state import sm_config

    from autoswitch.base.ranges import RANGES, describe

    lines = [BEGIN, "", "| table | key | allowed range |", "|---|---|---|"]
    for table, keys in RANGES.items():
        for key, r in keys.items():
            lines.append(f"| `{table}` | `{key}` | {describe(r, key)} |")
    for key, (typ, _default, lo, hi) in sorted(sm_config._SPEC.items()):
        if typ is int:
            lines.append(f"| `SMConfig` | `{key}` | {describe((lo, hi), key)} |")
    lines += ["", END]
    return "\n".join(lines)


def render(doc: str) -> str:
    head, _, rest = doc.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return head + section() + tail


def main(argv: list[str]) -> int:
    doc = DOC.read_text()
    if BEGIN not in doc or END not in doc:
        print(f"{DOC} has no ranges markers", file=sys.stderr)
        return 2
    new = render(doc)
    if "--check" in argv:
        if new != doc:
            print("docs/configuration.md ranges are stale: run python scripts/gen_config_ranges.py", file=sys.stderr)
            return 1
        return 0
    DOC.write_text(new)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
