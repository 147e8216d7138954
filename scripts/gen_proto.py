"""Generate Python code for proto/autoswitch/proto/*.proto into autoswitch/proto/.

The .proto files live under proto/autoswitch/proto/ so that protoc's import
paths come out as ``autoswitch.proto.x_pb2`` without post-processing.
``--check`` regenerates into a temporary directory and fails if the committed
files differ (the generator version is pinned in pyproject.toml).
"""

from __future__ import annotations

import filecmp
import pathlib
import shutil
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "proto"
PKG = "autoswitch/proto"


def generate(out: pathlib.Path) -> list[pathlib.Path]:
    protos = sorted((SRC / PKG).glob("*.proto"))
    if not protos:
        return []
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{SRC}",
        f"-I{include}",
        f"--python_out={out}",
        f"--pyi_out={out}",
        f"--grpc_python_out={out}",
    ] + [str(p.relative_to(SRC)) for p in protos]
    rc = protoc.main(args)
    if rc != 0:
        raise SystemExit(f"protoc failed with {rc}")
    return sorted(p for p in (out / PKG).glob("*_pb2*.py*"))


def main() -> int:
    check = "--check" in sys.argv[1:]
    if not check:
        generate(ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        produced = generate(pathlib.Path(tmp))
        stale = []
        for p in produced:
            committed = ROOT / PKG / p.name
            if not committed.exists() or not filecmp.cmp(p, committed, shallow=False):
                stale.append(p.name)
        committed_names = {p.name for p in (ROOT / PKG).glob("*_pb2*.py*")}
        extra = committed_names - {p.name for p in produced}
        if stale or extra:
            print(f"generated code is stale: {sorted(stale)} extra: {sorted(extra)}; run `make proto`")
            return 1
        shutil.rmtree(tmp, ignore_errors=True)
    print("generated code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
