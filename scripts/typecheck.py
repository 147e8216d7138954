"""Run mypy over the ``autoswitch.*`` packages as they are installed, strict on the sans-IO cores.

The source folders map onto the package by pyproject.toml's ``[tool.setuptools.package-dir]``
(``controller/`` is ``autoswitch.controller``, ...), which the editable install resolves with an
import hook that mypy cannot follow. So this builds the package tree the hook stands for out of
symbolic links in a temporary folder and points mypy at it; the modules and their strictness are
in ``[tool.mypy]`` of pyproject.toml (``STRICT`` below: the cores the simulators drive).

Usage: python scripts/typecheck.py   (exit status: mypy's; its report on stdout)
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# The sans-IO cores (decisions driven by explicit inputs and a clock): every function typed, no
# implicit Any. The rest of the package is not checked yet (docs/roadmap.md, issue 31).
STRICT = (
    "autoswitch.epochfile",
    "autoswitch.ha.codec",
    "autoswitch.ha.commit_point",
    "autoswitch.ha.master_session",
    "autoswitch.ha.slave_session",
    "autoswitch.ha.sync_state",
    "autoswitch.controller.raft.core",
    "autoswitch.controller.raft.raftlog",
    "autoswitch.controller.raft.progress",
    "autoswitch.controller.raft.quorum",
    "autoswitch.controller.raft.readonly",
    "autoswitch.controller.raft.membership",
    "autoswitch.controller.raft.messages",
    "autoswitch.controller.statemachine",
    "autoswitch.controller.election",
    "autoswitch.controller.liveness",
    "autoswitch.broker.replicas_manager",
    "autoswitch.broker.rm_commands",
    "autoswitch.broker.rm_registration",
    "autoswitch.broker.rm_role",
    "autoswitch.broker.rm_proposals",
    "autoswitch.broker.lease",
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


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="autoswitch-typecheck-") as tmp:
        package_tree(Path(tmp))
        args = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
                "--cache-dir", str(ROOT / ".venv" / "mypy-cache")]
        for m in STRICT:
            args += ["-m", m] if not (ROOT / m.split(".", 1)[1].replace(".", "/")).is_dir() else ["-p", m]
        env = dict(os.environ, MYPYPATH=tmp)
        return subprocess.run(args, cwd=tmp, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
