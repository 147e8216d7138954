"""LazyFS for the power-loss rounds: find or build the binary, mount one file system per process
data directory, and drop every byte a process wrote but did not fsync ("clear-cache").

LazyFS is a FUSE file system with its own page cache that writes through to a backing directory only
on fsync; its clear-cache command throws away whatever was not synced, as a power cut does (file data,
new files and renames whose directory was not fsynced). It is not part of this repository: the
binary is taken from ``LAZYFS_BIN``, or built into .venv/lazyfs from a source tree with a
``build.sh`` (``LAZYFS_SRC``, or the shared tools folder beside the checkout on our CI machines).
docs/operations-powerloss.md says how to get one. Mounting needs root and /dev/fuse.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
BUILD_DIR = ROOT / ".venv" / "lazyfs"
MOUNT_WAIT_S = 15.0
CLEAR_WAIT_S = 30.0
CONFIG = """[faults]
fifo_path="{fifo}"
fifo_path_completed="{done}"
[cache]
apply_eviction=false
[cache.simple]
custom_size="{cache}"
blocks_per_page=1
[filesystem]
log_all_operations=false
logfile="{log}"
"""


class Unavailable(Exception):
    """LazyFS cannot run here (not root, no /dev/fuse, no source, build failed): the reason."""


def _source() -> Path | None:
    cands = [os.environ.get("LAZYFS_SRC"), str(ROOT.parent / "shared" / "tools" / "lazyfs"),
             "/work/shared/tools/lazyfs"]
    for c in cands:
        if c and (Path(c) / "build.sh").exists():
            return Path(c)
    return None


def binary() -> Path:
    """The lazyfs binary, built on first use into .venv/lazyfs (about a minute)."""
    if os.geteuid() != 0:
        raise Unavailable("not root: FUSE mounts for LazyFS need root on these machines")
    if not Path("/dev/fuse").exists():
        raise Unavailable("no /dev/fuse")
    given = os.environ.get("LAZYFS_BIN")
    if given:
        if not Path(given).is_file():
            raise Unavailable(f"LAZYFS_BIN={given} is not a file")
        return Path(given)
    exe = BUILD_DIR / "lazyfs"
    if exe.exists():
        return exe
    src = _source()
    if src is None:
        raise Unavailable("LazyFS not found: set LAZYFS_BIN to a built lazyfs, or LAZYFS_SRC to its source "
                          "(docs/operations-powerloss.md)")
    r = subprocess.run([str(src / "build.sh"), str(BUILD_DIR)], capture_output=True, text=True, timeout=900)
    if r.returncode != 0 or not exe.exists():
        raise Unavailable(f"LazyFS build failed (rc {r.returncode}): {(r.stderr or r.stdout)[-400:]}")
    return exe


class Mount:
    """One LazyFS over ``mount_dir`` (backed by ``backing``), run by us in the foreground and
    ended by its PID."""

    def __init__(self, exe: Path, mount_dir: Path, backing: Path, work: Path, cache: str = "2gb") -> None:
        self.exe, self.mount_dir, self.backing, self.work = exe, mount_dir, backing, work
        self.fifo, self.done = work / "faults.fifo", work / "done.fifo"
        self.cfg = work / "lazyfs.toml"
        self.cache = cache
        self.proc: subprocess.Popen | None = None
        self.clears = 0

    def start(self) -> None:
        for d in (self.mount_dir, self.backing, self.work):
            d.mkdir(parents=True, exist_ok=True)
        for f in (self.fifo, self.done):
            if not f.exists():
                os.mkfifo(f)
        self.cfg.write_text(CONFIG.format(fifo=self.fifo, done=self.done, cache=self.cache,
                                          log=self.work / "lazyfs.log"))
        log = open(self.work / "lazyfs.out", "ab")  # noqa: SIM115 - handed to the child
        env = dict(os.environ, LD_LIBRARY_PATH=str(self.exe.parent / "lib"))
        self.proc = subprocess.Popen(
            [str(self.exe), str(self.mount_dir), "--config-path", str(self.cfg), "-o", "allow_other",
             "-o", "modules=subdir", "-o", f"subdir={self.backing}", "-f"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        deadline = time.monotonic() + MOUNT_WAIT_S
        while not os.path.ismount(self.mount_dir):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise Unavailable(f"LazyFS did not mount {self.mount_dir}: see {self.work / 'lazyfs.out'}")
            time.sleep(0.05)

    def clear_cache(self) -> None:
        """Lose every unsynced write; returns once LazyFS says it is done. Call it only after the
        process using the mount is dead (kill -9), as a power cut would find it."""
        fd = os.open(self.done, os.O_RDONLY | os.O_NONBLOCK)    # open the reader first: no missed reply
        try:
            with open(self.fifo, "w") as f:
                f.write("lazyfs::clear-cache\n")
            deadline = time.monotonic() + CLEAR_WAIT_S
            got = b""
            while b"finished::clear-cache" not in got:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"LazyFS clear-cache on {self.mount_dir} not confirmed in {CLEAR_WAIT_S} s")
                try:
                    chunk = os.read(fd, 4096)
                except BlockingIOError:
                    chunk = b""
                got += chunk
                if not chunk:
                    time.sleep(0.01)
        finally:
            os.close(fd)
        self.clears += 1

    def stop(self) -> None:
        if os.path.ismount(self.mount_dir):
            subprocess.run(["fusermount3", "-u", "-z", str(self.mount_dir)], capture_output=True, timeout=30)
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
