"""The gray-failure disk (tests/grayfail/slowfs.c) does what the tests that use it rely on: writes
and fsyncs wait while it is told to delay or hang, reads never do, and everything is passed through."""

from __future__ import annotations

import os
import threading
import time

import pytest

from tests.grayfail.slowfs import SlowFs, Unavailable

pytestmark = pytest.mark.integration


def test_slowfs_delays_and_hangs_writes_but_not_reads(tmp_path):
    try:
        fs = SlowFs(tmp_path / "back", tmp_path / "mnt").__enter__()
    except Unavailable as e:
        pytest.skip(f"slowfs cannot run here: {e}")
    try:
        path = tmp_path / "mnt" / "seg"
        fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
        os.write(fd, b"a" * 4096)
        os.fsync(fd)
        fs.set("delay 300")
        t0 = time.monotonic()
        os.pwrite(fd, b"b" * 4096, 4096)
        assert time.monotonic() - t0 >= 0.25
        fs.set("hang")
        done = threading.Event()

        def writer() -> None:
            os.pwrite(fd, b"c" * 4096, 8192)
            os.fsync(fd)
            done.set()

        t = threading.Thread(target=writer)
        t.start()
        assert not done.wait(0.5), "a write went through while the disk hangs"
        assert os.pread(fd, 4, 0) == b"aaaa", "reads must still be served"
        fs.set("ok")
        assert done.wait(10), "the write never finished after the disk came back"
        t.join()
        os.close(fd)
        assert (tmp_path / "back" / "seg").read_bytes() == b"a" * 4096 + b"b" * 4096 + b"c" * 4096
    finally:
        fs.__exit__(None, None, None)
