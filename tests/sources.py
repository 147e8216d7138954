"""The repository's hand-written runtime modules, for the tests that read the code itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("autoswitch", "controller", "broker", "ha", "epochfile", "pipeline")


def runtime_files() -> Iterator[tuple[Path, str]]:
    """Every hand-written runtime module (generated protobuf code aside) and its text."""
    for folder in FOLDERS:
        for path in (ROOT / folder).rglob("*.py"):
            if not path.name.endswith(("_pb2.py", "_pb2_grpc.py")):
                yield path, path.read_text()
