"""docs/releases.toml names every release and the commit it was cut from (issue 34 item 1); main
carries a version after the newest release; the CHANGELOG describes each release."""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from autoswitch import __version__
from autoswitch.base import features

ROOT = Path(__file__).resolve().parents[2]
RELEASES = tomllib.loads((ROOT / "docs/releases.toml").read_text())["release"]


def _key(v: str) -> tuple:
    m = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.dev(\d+))?", v)
    assert m, f"not a version: {v!r}"
    major, minor, patch, dev = m.groups()
    return int(major), int(minor), int(patch), 0 if dev is None else -1   # a .dev precedes its release


def test_releases_are_listed_in_order_and_main_is_past_the_newest():
    versions = [r["version"] for r in RELEASES]
    assert versions == sorted(versions, key=_key) and len(set(versions)) == len(versions)
    for r in RELEASES:
        assert re.fullmatch(r"[0-9a-f]{40}", r["commit"]) and re.fullmatch(r"\d{4}-\d{2}-\d{2}", r["date"])
        assert 1 <= r["feature_level"] <= features.SUPPORTED_LEVEL
    newest = RELEASES[-1]["version"]
    assert _key(__version__)[:3] > _key(newest)[:3] or __version__ == newest, (__version__, newest)
    changelog = (ROOT / "docs/CHANGELOG.md").read_text()
    for v in versions:
        assert f"## {v} " in changelog, f"docs/CHANGELOG.md has no section for {v}"


def test_each_release_commit_carries_its_version():
    for r in RELEASES:
        have = subprocess.run(["git", "cat-file", "-e", f"{r['commit']}^{{commit}}"], cwd=ROOT, capture_output=True)
        if have.returncode != 0:
            pytest.skip(f"release commit {r['commit'][:12]} is not in this clone's history (a shallow clone)")
        src = subprocess.run(["git", "show", f"{r['commit']}:autoswitch/base/version.py"], cwd=ROOT,
                             capture_output=True, text=True, check=True).stdout
        assert f'VERSION = "{r["version"]}"' in src, f"{r['commit'][:12]} is not release {r['version']}"
