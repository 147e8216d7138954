"""The limits every part agrees on live once, in autoswitch/base/limits.py: no runtime module
defines one of its names again or renames one (an alias drifts: the address limit was 255 in one
place, 256 and 300 in two others, until issue 31 made it one)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.sources import runtime_files

ROOT = Path(__file__).resolve().parents[2]
LIMITS = ROOT / "autoswitch" / "base" / "limits.py"


def _assigned(tree: ast.AST) -> list[tuple[str, ast.expr | None, int]]:
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            out += [(t.id, node.value, node.lineno) for t in node.targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out.append((node.target.id, node.value, node.lineno))
    return out


SHARED = {name for name, _v, _l in _assigned(ast.parse(LIMITS.read_text()))}


def test_the_shared_limits_are_found():
    assert {"MAX_NAME_LEN", "MAX_ADDRESS_LEN", "MAX_BROKER_ID", "MAX_INCARNATION_LEN"} <= SHARED


def test_no_module_restates_or_renames_a_shared_limit():
    bad = []
    for path, text in runtime_files():
        if path == LIMITS:
            continue
        for name, value, line in _assigned(ast.parse(text)):
            alias = isinstance(value, ast.Name | ast.Attribute) and (
                getattr(value, "id", None) in SHARED or getattr(value, "attr", None) in SHARED)
            if name in SHARED or alias:
                bad.append(f"{path.relative_to(ROOT)}:{line} {name}")
    assert not bad, "use autoswitch.base.limits directly: " + ", ".join(bad)
