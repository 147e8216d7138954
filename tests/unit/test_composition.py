"""The broker is built by one composition root (broker/process.py) that passes in what it needs:
no runtime module sets an attribute on a Broker from outside broker/server.py (issue 60 item 2).
Read on the source: an assignment to ``broker.x``, ``b.x`` or ``self.broker.x`` anywhere else fails."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BROKER_NAMES = {"broker", "b"}


def _pokes(tree: ast.AST) -> list[tuple[int, str]]:
    out = []
    for n in ast.walk(tree):
        targets = n.targets if isinstance(n, ast.Assign) else [n.target] if isinstance(n, ast.AugAssign | ast.AnnAssign) else []
        for t in targets:
            if not isinstance(t, ast.Attribute):
                continue
            v = t.value
            if (isinstance(v, ast.Name) and v.id in BROKER_NAMES) or (isinstance(v, ast.Attribute) and v.attr == "broker"):
                out.append((t.lineno, ast.unparse(t)))
    return out


def test_no_runtime_module_sets_an_attribute_on_the_broker():
    found = {}
    for folder in ("broker", "ha", "controller", "autoswitch"):
        for path in (ROOT / folder).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            if rel == "broker/server.py" or path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            if pokes := _pokes(ast.parse(path.read_text())):
                found[rel] = pokes
    assert found == {}, found


def test_the_composition_root_serves_and_wires_controller_mode():
    tree = ast.parse((ROOT / "broker/process.py").read_text())
    names = {n.name for n in tree.body if isinstance(n, ast.AsyncFunctionDef | ast.FunctionDef)}
    assert {"serve", "start_replicas"} <= names
    service = ast.parse((ROOT / "broker/service.py").read_text())
    assert not {n.name for n in service.body if isinstance(n, ast.AsyncFunctionDef)} & {"serve"}, \
        "the gRPC adapter does not run the process"
