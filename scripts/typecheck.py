"""Run mypy over the ``autoswitch.*`` packages as they are installed: strict on the sans-IO cores,
basic (every function body checked, annotations not required) on every other runtime module.

The source folders map onto the package by pyproject.toml's ``[tool.setuptools.package-dir]``
(``controller/`` is ``autoswitch.controller``, ...), which the editable install resolves with an
import hook that mypy cannot follow. So this builds the package tree the hook stands for out of
symbolic links in a temporary folder and points mypy at it; the modules and their strictness are
in ``[tool.mypy]`` of pyproject.toml (``STRICT`` below: the cores the simulators drive); the basic
run's flags are ``BASIC_FLAGS`` below and it covers every module under the package folders.

Usage: python scripts/typecheck.py   (exit status: mypy's; its report on stdout)
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The sans-IO cores (decisions driven by explicit inputs and a clock): every function typed, no
# implicit Any. The rest of the package gets the basic run.
STRICT = (
    "autoswitch.epochfile",
    "autoswitch.ha.codec",
    "autoswitch.ha.digest",
    "autoswitch.ha.commit_point",
    "autoswitch.ha.master_session",
    "autoswitch.ha.slave_session",
    "autoswitch.ha.sync_state",
    "autoswitch.controller.raft.core",
    "autoswitch.controller.raft.bounds",
    "autoswitch.controller.raft.raftlog",
    "autoswitch.controller.raft.progress",
    "autoswitch.controller.raft.quorum",
    "autoswitch.controller.raft.readonly",
    "autoswitch.controller.raft.membership",
    "autoswitch.controller.raft.messages",
    "autoswitch.controller.state.statemachine",
    "autoswitch.controller.state.sm_state",
    "autoswitch.controller.state.sm_snapshot",
    "autoswitch.controller.state.staged",
    "autoswitch.controller.state.history",
    "autoswitch.controller.state.election",
    "autoswitch.controller.failover.lease",
    "autoswitch.controller.failover.takeover",
    "autoswitch.controller.failover.liveness",
    "autoswitch.controller.failover.gray",
    "autoswitch.broker.health",
    "autoswitch.broker.replicas.replicas_manager",
    "autoswitch.broker.replicas.rm_commands",
    "autoswitch.broker.replicas.rm_registration",
    "autoswitch.broker.replicas.rm_role",
    "autoswitch.broker.replicas.rm_proposals",
    "autoswitch.broker.replicas.rm_fence",
    "autoswitch.broker.replicas.rm_handover",
    "autoswitch.broker.replicas.rm_config",
    "autoswitch.broker.replicas.lease",
)


def package_tree(dest: Path) -> Path:
    """``dest/autoswitch``: the installed package's layout, as links to the source folders."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    top = dest / "autoswitch"
    top.mkdir()
    for entry in (ROOT / mapping["autoswitch"]).iterdir():
        if entry.name != "__pycache__":
            (top / entry.name).symlink_to(entry)
    for package, folder in mapping.items():
        parts = package.split(".")
        if len(parts) == 2:                   # autoswitch.X; deeper ones live inside their parent
            (top / parts[1]).unlink(missing_ok=True)
            (top / parts[1]).symlink_to(ROOT / folder)
    return top


# The basic run: what mypy checks without a config, plus the bodies of unannotated functions.
BASIC_FLAGS = ("--python-version", "3.11", "--ignore-missing-imports", "--follow-imports", "silent",
               "--check-untyped-defs")


def runtime_modules() -> list[str]:
    """Every module of the installed package (generated protobuf code aside), by its import name."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    out: set[str] = set()
    for package, folder in mapping.items():
        for path in (ROOT / folder).glob("*.py"):
            if path.name == "__init__.py":
                if len(ast.parse(path.read_text()).body) > 1:   # more than a docstring: code of its own
                    out.add(package)
            elif not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                out.add(f"{package}.{path.stem}")
    return sorted(out)


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="autoswitch-typecheck-") as tmp:
        package_tree(Path(tmp))
        env = dict(os.environ, MYPYPATH=tmp)
        strict = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                  "--cache-dir", str(ROOT / ".venv" / "mypy-cache")]
        for m in STRICT:
            strict += ["-m", m] if not (ROOT / m.split(".", 1)[1].replace(".", "/")).is_dir() else ["-p", m]
        print("mypy, strict: the sans-IO cores", flush=True)
        rc = subprocess.run(strict, cwd=tmp, env=env).returncode
        # an empty config file, so pyproject.toml's strict settings stay out of the basic run
        empty = Path(tmp) / "basic.ini"
        empty.write_text("[mypy]\n")
        basic = [sys.executable, "-m", "mypy", "--config-file", str(empty), *BASIC_FLAGS,
                 "--cache-dir", str(ROOT / ".venv" / "mypy-cache-basic")]
        for m in runtime_modules():
            if not any(m == s or m.startswith(s + ".") for s in STRICT):
                basic += ["-m", m]
        print("mypy, basic: every other runtime module", flush=True)
        return rc or subprocess.run(basic, cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
