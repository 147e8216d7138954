"""Installs of two autoswitch versions side by side, for the upgrade test: a release from the
commit docs/releases.toml names, and this working tree (optionally with a planted change).

Each is `pip install --target` of its sources (the C record checker built as in a release),
run as ``python -S -P -m autoswitch`` (-P: not the current directory either) with PYTHONPATH = the install, then this environment's
site-packages for the dependencies: ``-S`` keeps this checkout's editable install (a .pth file)
from lending its own modules to the older version.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from autoswitch.app.launcher import Child

ROOT = Path(__file__).resolve().parents[2]
DEPS = sysconfig.get_paths()["purelib"]


@dataclass(frozen=True)
class Install:
    label: str          # "0.1.0", "HEAD", "HEAD+planted"
    version: str        # what the install says it is
    target: Path

    def child(self, name: str, args: list[str], log_dir: Path) -> Child:
        return Child(name, list(args), log_dir / f"{name}.log", entry=("-S", "-P", "-m", "autoswitch"),
                     env={"PYTHONPATH": f"{self.target}{os.pathsep}{DEPS}"})


def previous_release() -> dict:
    """The newest entry of docs/releases.toml: the release main upgrades from."""
    return tomllib.loads((ROOT / "docs/releases.toml").read_text())["release"][-1]


def _pip_install(src: Path, target: Path) -> None:
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                        "--target", str(target), str(src)], capture_output=True, text=True, timeout=900,
                       env={**os.environ, "PYTHONWARNINGS": "ignore"})
    if r.returncode != 0:
        raise RuntimeError(f"installing {src} failed: {r.stdout[-2000:]}{r.stderr[-3000:]}")


def _version_of(target: Path) -> str:
    r = subprocess.run([sys.executable, "-S", "-P", "-c", "import autoswitch; print(autoswitch.__version__)"],
                       capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": f"{target}{os.pathsep}{DEPS}", "PATH": os.environ.get("PATH", "")})
    if r.returncode != 0:
        raise RuntimeError(f"the install in {target} does not import: {r.stderr[-2000:]}")
    return r.stdout.strip()


def install_commit(commit: str, label: str, work: Path) -> Install:
    """The sources of ``commit`` (git archive: exactly what was committed), installed."""
    src, target = work / f"src-{label}", work / f"site-{label}"
    if not target.exists():
        tar = subprocess.run(["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, timeout=300)
        if tar.returncode != 0:
            raise RuntimeError(f"git archive {commit[:12]}: {tar.stderr.decode(errors='replace')[-1000:]}")
        src.mkdir(parents=True, exist_ok=True)
        with tarfile.open(fileobj=io.BytesIO(tar.stdout)) as t:
            t.extractall(src, filter="data")
        _pip_install(src, target)
    return Install(label, _version_of(target), target)


def copy_tree(dest: Path) -> Path:
    """A copy of the files git knows in this working tree (git ls-files): what a release or an
    install is made from, without build output, caches or run data."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True,
                           timeout=120).stdout.split("\0")
    for f in filter(None, files):
        if (ROOT / f).is_file():
            (dest / f).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / f, dest / f)
    return dest


def install_tree(label: str, work: Path, plant: Callable[[Path], None] | None = None) -> Install:
    """This working tree's files git knows, with ``plant`` applied to the copy (a planted
    incompatible change), installed."""
    src, target = work / f"src-{label}", work / f"site-{label}"
    if not target.exists():
        copy_tree(src)
        if plant is not None:
            plant(src)
        _pip_install(src, target)
    return Install(label, _version_of(target), target)


def plant_epochfile_v2(src: Path) -> None:
    """A planted incompatible change: the EpochFile written as format version 2 (read: 1 and 2,
    as a real next format would be). An older release must refuse such a file by name, not read
    it as damage or start without it."""
    p = src / "epochfile" / "file.py"
    s = p.read_text()
    for old, new in (("\nVERSION = 1\n", "\nVERSION = 2\n"),
                     ("    if version != VERSION:\n", "    if version not in (1, VERSION):\n")):
        assert s.count(old) == 1, f"the planted change no longer applies ({old.strip()!r}): update it"
        s = s.replace(old, new)
    p.write_text(s)
