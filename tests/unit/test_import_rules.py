"""The layers, checked on the source: every import of every runtime module (lazy imports inside
functions included) must respect the package boundaries written in docs/architecture.md.

    base (autoswitch.base)        <- everything; imports nothing else from autoswitch
    epochfile                     <- base only
    ha (pure cores)               <- base, epochfile; never asyncio or grpc (only ha.master, ha.master_conn, ha.slave may)
    controller                    <- base, proto; never broker or ha
    controller.consensus (seam)   <- base; never an implementation (raft, store)
    controller.raft (core)        <- never grpc or the generated protobuf (only the transport adapter may);
                                     never asyncio (only the node, its proposals and the transport may)
    controller.store              <- never raft; of SQL, only the SQL backend (and the factory, lazily)
    controller.state              <- the replicated state machine: base and the controller's vocabulary
                                     (messages, codes) only; no asyncio, grpc, consensus or server
    broker                        <- base, epochfile, ha, proto (not controller_pb2) and, of the
                                     controller, only its client interface autoswitch.controller.api
    app (CLI, playground, status) <- anything; no library module imports it
    pipeline                      <- an optional extra; no runtime module imports it
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Source folder -> package, as mapped in pyproject.toml.
PACKAGE_DIRS = {
    "autoswitch": "autoswitch",
    "controller": "autoswitch.controller",
    "broker": "autoswitch.broker",
    "ha": "autoswitch.ha",
    "epochfile": "autoswitch.epochfile",
    "pipeline": "autoswitch.pipeline",
}


@dataclass(frozen=True)
class Import:
    module: str   # the importing module
    target: str   # the absolute name it imports (for `from X import y`, both X and X.y are recorded)
    line: int


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT)
    base = PACKAGE_DIRS[rel.parts[0]]
    parts = list(rel.with_suffix("").parts[1:])
    if parts and parts[-1] == "__init__":
        parts.pop()
    return ".".join([base, *parts])


def _runtime_modules() -> dict[str, Path]:
    out = {}
    for folder in PACKAGE_DIRS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                continue
            out[_module_name(path)] = path
    return out


def _imports(module: str, source: str, *, is_pkg: bool) -> list[Import]:
    tree = ast.parse(source)
    found = []
    for node in ast.walk(tree):   # every import, also those inside functions and TYPE_CHECKING blocks
        if isinstance(node, ast.Import):
            found += [Import(module, alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_pkg else anchor[:-1]
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([node.module] if node.module else []))
            else:
                base = node.module or ""
            found.append(Import(module, base, node.lineno))
            found += [Import(module, f"{base}.{alias.name}", node.lineno) for alias in node.names]
    return found


ALL_IMPORTS = [imp for mod, path in _runtime_modules().items() for imp in _imports(mod, path.read_text(), is_pkg=path.name == "__init__.py")]


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _violations(importer: str, forbidden, *, allow=()) -> list[str]:
    """Imports by modules under `importer` of a name matching `forbidden` (a predicate), not in `allow`."""
    return sorted({f"{i.module}:{i.line} imports {i.target}" for i in ALL_IMPORTS
                   if _under(i.module, importer) and forbidden(i.target)
                   and not any(_under(i.module, a) for a in allow)})


def _autoswitch_outside(*allowed: str):
    return lambda t: _under(t, "autoswitch") and not any(_under(t, a) for a in allowed)


HA_ADAPTERS = ("autoswitch.ha.io.master", "autoswitch.ha.io.master_conn", "autoswitch.ha.io.slave")
RAFT_ADAPTER = ("autoswitch.controller.raft.transport",)
RAFT_ASYNC = ("autoswitch.controller.raft.node", "autoswitch.controller.raft.proposals",
              "autoswitch.controller.raft.transport")
SQL_BACKEND = ("autoswitch.controller.store.sql", "autoswitch.controller.store.base")

RULES = {
    "base imports nothing else from autoswitch":
        lambda: _violations("autoswitch.base", _autoswitch_outside("autoswitch.base")),
    "epochfile imports only the shared base":
        lambda: _violations("autoswitch.epochfile", _autoswitch_outside("autoswitch.base", "autoswitch.epochfile")),
    "pure ha modules import neither asyncio nor grpc":
        lambda: _violations("autoswitch.ha", lambda t: _under(t, "asyncio") or _under(t, "grpc"),
                            allow=HA_ADAPTERS),
    "ha imports only base, epochfile and itself":
        lambda: _violations("autoswitch.ha", _autoswitch_outside(
            "autoswitch.base", "autoswitch.epochfile", "autoswitch.ha")),
    "Raft core modules import neither grpc nor generated protobuf":
        lambda: _violations("autoswitch.controller.raft",
                            lambda t: _under(t, "grpc") or _under(t, "autoswitch.proto"), allow=RAFT_ADAPTER),
    "Raft core modules import no asyncio":
        lambda: _violations("autoswitch.controller.raft", lambda t: _under(t, "asyncio"), allow=RAFT_ASYNC),
    "the consensus seam imports no implementation of it":
        lambda: _violations("autoswitch.controller.consensus", lambda t: _under(t, "autoswitch.controller.raft")
                            or _under(t, "autoswitch.controller.store")),
    "the store backends never import Raft":
        lambda: _violations("autoswitch.controller.store", lambda t: _under(t, "autoswitch.controller.raft")),
    "only the SQL backend imports SQL modules":
        lambda: _violations("autoswitch.controller.store", lambda t: _under(t, "sqlalchemy")
                            or _under(t, "autoswitch.controller.store.sql"), allow=SQL_BACKEND),
    "the state machine imports only base and the controller's vocabulary":
        lambda: _violations("autoswitch.controller.state", lambda t: _under(t, "asyncio") or _under(t, "grpc")
                            or _autoswitch_outside("autoswitch.base", "autoswitch.controller.state",
                                                   "autoswitch.controller.messages",
                                                   "autoswitch.controller.codes")(t)),
    "controller never imports broker or ha":
        lambda: _violations("autoswitch.controller",
                            lambda t: _under(t, "autoswitch.broker") or _under(t, "autoswitch.ha")),
    "broker never imports controller_pb2":
        lambda: _violations("autoswitch.broker", lambda t: _under(t, "autoswitch.proto.controller_pb2")
                            or _under(t, "autoswitch.proto.controller_pb2_grpc")),
    "broker uses only the controller's client interface":
        lambda: _violations("autoswitch.broker", lambda t: _under(t, "autoswitch.controller")
                            and not _under(t, "autoswitch.controller.api")),
    "runtime code never imports the pipeline":
        lambda: _violations("autoswitch", lambda t: _under(t, "autoswitch.pipeline"),
                            allow=("autoswitch.pipeline",)),
    "no library module imports the application layer":
        lambda: _violations("autoswitch", lambda t: _under(t, "autoswitch.app"),
                            allow=("autoswitch.app", "autoswitch.__main__")),
}


@pytest.mark.parametrize("rule", sorted(RULES))
def test_import_rule(rule):
    bad = RULES[rule]()
    assert not bad, f"{rule}:\n  " + "\n  ".join(bad)


def test_the_walker_sees_lazy_and_relative_imports():
    """The checker itself must see imports inside functions and resolve relative ones, or every rule
    above would pass vacuously."""
    src = ("from . import sibling\nfrom .. import up\ndef f():\n    import grpc\n"
           "    from autoswitch.proto import controller_pb2\n")
    got = {i.target for i in _imports("autoswitch.broker.probe", src, is_pkg=False)}
    assert {"autoswitch.broker.sibling", "autoswitch.up", "grpc",
            "autoswitch.proto.controller_pb2"} <= got
    assert len(ALL_IMPORTS) > 500, "the walker found too few imports: is the source tree mapped?"
