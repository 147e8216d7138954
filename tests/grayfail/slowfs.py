"""A disk that is slow or hangs on command, for gray-failure tests (issue 32): tests/grayfail/slowfs.c,
a FUSE pass-through built on first use into .venv/slowfs, mounted over a data directory.

    with SlowFs(backing_dir, mount_dir) as fs:
        ...                 # a process writes under mount_dir
        fs.set("hang")      # every write, fsync and create now waits; reads are still served
        fs.set("delay 200") # each of them waits 200 ms
        fs.set("ok")
        fs.set("fsync-eio") # every fsync fails with EIO (writes pass); also "fsync-hang",
                            # "write-eio", "write-enospc"
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
SOURCE = Path(__file__).resolve().parent / "slowfs.c"
BUILD_DIR = ROOT / ".venv" / "slowfs"
MOUNT_WAIT_S = 10.0
APPLY_WAIT_S = 30.0       # a loaded machine may hold the control thread back; readiness, not a timing


class Unavailable(Exception):
    """slowfs cannot run here: the reason (not root, no /dev/fuse, no libfuse3 headers)."""


def binary() -> Path:
    if os.geteuid() != 0:
        raise Unavailable("not root: FUSE mounts need root on these machines")
    if not Path("/dev/fuse").exists():
        raise Unavailable("no /dev/fuse")
    exe = BUILD_DIR / "slowfs"
    if exe.exists() and exe.stat().st_mtime >= SOURCE.stat().st_mtime:
        return exe
    if shutil.which("pkg-config") is None:
        raise Unavailable("no pkg-config (scripts/system_deps.sh installs it)")
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "fuse3"], capture_output=True, text=True)
    if flags.returncode != 0:
        raise Unavailable("no libfuse3 development files (apt-get install libfuse3-dev)")
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["cc", "-O2", "-Wall", "-o", str(exe), str(SOURCE), *flags.stdout.split(), "-pthread"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Unavailable(f"slowfs did not build: {r.stderr[-500:]}")
    return exe


class SlowFs:
    def __init__(self, backing: Path, mount: Path) -> None:
        self.backing, self.mount = Path(backing), Path(mount)
        self.control = self.backing.parent / f".{self.backing.name}.slowfs"
        self._proc: subprocess.Popen | None = None

    def __enter__(self) -> SlowFs:
        exe = binary()
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mount.mkdir(parents=True, exist_ok=True)
        self.set("ok")
        self.control.with_name(self.control.name + ".applied").unlink(missing_ok=True)   # a previous mount's
        self._proc = subprocess.Popen([str(exe), str(self.backing), str(self.mount), str(self.control), "-f"],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.monotonic() + MOUNT_WAIT_S
        while not os.path.ismount(self.mount):
            if self._proc.poll() is not None or time.monotonic() > deadline:
                err = self._proc.stderr.read().decode(errors="replace")[-500:] if self._proc.stderr else ""
                self.__exit__(None, None, None)
                raise Unavailable(f"slowfs did not mount {self.mount}: {err}")
            time.sleep(0.02)
        return self

    def set(self, line: str) -> None:
        """"ok", "delay MS", "hang", "fsync-eio", "fsync-hang", "write-eio" or "write-enospc"; returns once
        slowfs applied it (while it runs)."""
        tmp = self.control.with_suffix(".tmp")
        tmp.write_text(line + "\n")
        os.replace(tmp, self.control)
        if self._proc is None or self._proc.poll() is not None:
            return
        ack = self.control.with_name(self.control.name + ".applied")
        deadline = time.monotonic() + APPLY_WAIT_S
        while time.monotonic() < deadline:
            if ack.exists() and ack.read_text().strip() == line:
                return
            time.sleep(0.005)
        raise Unavailable(f"slowfs did not apply {line!r} within {APPLY_WAIT_S} s")

    def __exit__(self, *exc: object) -> None:
        if self.control.exists():
            self.set("ok")        # let anything blocked finish before the unmount
        if os.path.ismount(self.mount):
            subprocess.run(["umount", "-l", str(self.mount)], capture_output=True)
        if self._proc is not None:
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()        # our own child, by PID
                self._proc.wait(5)


def broker_disks(stack: contextlib.ExitStack, work: Path, names: Iterable[str]) -> dict[str, SlowFs]:
    """A slowfs disk under each broker's data directory (``work/broker-<name>``, as the failover
    harness names it; backed by ``work/disk-<name>``), unmounted when ``stack`` closes."""
    return {n: stack.enter_context(SlowFs(work / f"disk-{n}", work / f"broker-{n}")) for n in names}
