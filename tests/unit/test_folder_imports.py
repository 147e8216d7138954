"""No two sibling folders import each other (issue 60, item 3: controller/failover and
controller/server did, 18 arrows down and 15 up). A folder is a package directory of the runtime
(pyproject.toml's package-dir); its modules may import a sibling folder or be imported by it, not
both. Parent and child folders are not siblings: a package's top-level modules (messages, config)
are shared by its sub-packages."""

from __future__ import annotations

import ast
import tomllib
from collections import defaultdict
from pathlib import Path

from tests.sources import ROOT, runtime_files

PACKAGE_DIRS: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]


def _folder(module: str) -> str | None:
    parts = module.split(".")
    for i in range(len(parts), 0, -1):
        if ".".join(parts[:i]) in PACKAGE_DIRS:
            return PACKAGE_DIRS[".".join(parts[:i])]
    return None


def _edges() -> dict[tuple[str, str], str]:
    """(importing folder, imported folder) -> one example (file:line module)."""
    out: dict[tuple[str, str], str] = {}
    for path, text in runtime_files():
        here = str(path.relative_to(ROOT).parent)
        for node in ast.walk(ast.parse(text)):
            names: list[str] = []
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                there = _folder(name) if name.startswith("autoswitch") else None
                if there is not None and there != here:
                    out.setdefault((here, there), f"{path.relative_to(ROOT)}:{node.lineno} {name}")
    return out


def _siblings(a: str, b: str) -> bool:
    return Path(a).parent == Path(b).parent


def test_no_two_sibling_folders_import_each_other():
    edges = _edges()
    both = sorted((a, b) for (a, b) in edges if a < b and (b, a) in edges and _siblings(a, b))
    assert not both, "; ".join(f"{a} <-> {b} ({edges[(a, b)]} | {edges[(b, a)]})" for a, b in both)


def test_the_check_sees_the_arrows():
    edges = _edges()
    by_folder = defaultdict(set)
    for a, b in edges:
        by_folder[a].add(b)
    assert "controller/failover" in by_folder["controller/server"], "the server drives the failover rules"
