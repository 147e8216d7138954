"""Bad input gets a typed error, never INTERNAL or a traceback. Real processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys

import grpc
import pytest

from autoswitch.proto import broker_pb2 as pb
from autoswitch.proto import broker_pb2_grpc as pbg
from tests.procs import HOST, free_port, wait_port

pytestmark = pytest.mark.integration


def _master(procs, data_dir, name: str = "b"):
    port, ha = free_port(), free_port()
    p = procs.start(name, ["broker", "--group", "g1", "--role", "master", "--epoch", "1", "--listen",
                           f"{HOST}:{port}", "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(data_dir),
                           "--ack-mode", "master"])
    wait_port(port, proc=p.popen)
    return p, f"{HOST}:{port}"


def _produce(addr: str, msgs: list[pb.ProduceMessage]) -> pb.ProduceReply:
    with grpc.insecure_channel(addr) as ch:
        return pbg.BrokerServiceStub(ch).Produce(pb.ProduceRequest(topic="t", messages=msgs), timeout=60)


def test_negative_born_ts_and_off_boundary_digest_are_bad_requests(procs, tmp_path):
    _, addr = _master(procs, tmp_path / "b")
    r = _produce(addr, [pb.ProduceMessage(body=b"x", msg_id="a", born_ts_ms=-5),
                        pb.ProduceMessage(body=b"y", msg_id="b", born_ts_ms=1_700_000_000_000)])
    assert [x.status for x in r.results] == [pb.BAD_REQUEST, pb.OK]
    assert "born_ts_ms" in r.error_message
    with grpc.insecure_channel(addr) as ch:
        d = pbg.BrokerServiceStub(ch).LogDigest(pb.LogDigestRequest(from_offset=3, to_offset=-1), timeout=60)
    assert d.status == pb.BAD_REQUEST and "record boundary" in d.error_message
    assert str(tmp_path) not in d.error_message, "no data path in a client's error"
    with grpc.insecure_channel(addr) as ch:
        d = pbg.BrokerServiceStub(ch).LogDigest(pb.LogDigestRequest(from_offset=0, to_offset=-1), timeout=60)
    assert d.status == pb.OK


@contextlib.contextmanager
def _small_tmpfs(path, size: str):
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], check=True)
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root (CI runs as root)")
def test_disk_full_is_storage_full(procs, tmp_path):
    with _small_tmpfs(tmp_path / "small", "3m") as d:
        p, addr = _master(procs, d / "b")
        statuses = set()
        for i in range(200):                  # 200 x 60 KB > 3 MB: the disk fills on the way
            r = _produce(addr, [pb.ProduceMessage(body=b"z" * 60_000, msg_id=f"m{i}")])
            statuses.add(r.status)
            if r.status == pb.STORAGE_FULL:
                assert "disk full" in r.error_message
                break
        assert pb.STORAGE_FULL in statuses and pb.INTERNAL not in statuses, statuses
        assert p.alive(), "the broker keeps running"
        p.stop()


def test_controller_config_errors_exit_2_without_traceback(tmp_path):
    def run(cfg_bytes: bytes) -> subprocess.CompletedProcess:
        f = tmp_path / "c.toml"
        f.write_bytes(cfg_bytes)
        return subprocess.run([sys.executable, "-m", "autoswitch", "controller", "--node-id", "n1", "--peers",
                               f"n1={HOST}:{free_port()}", "--data-dir", str(tmp_path / "d"), "--config", str(f)],
                              capture_output=True, text=True, timeout=120)

    for content, what in ((b"\x00\x01\xff\xfe binary", "UTF-8"), (b"[raft]\nno_such_key = 1\n", "no_such_key")):
        r = run(content)
        assert r.returncode == 2, r.stderr
        assert "CONFIG_ERROR" in r.stderr and what in r.stderr
        assert "Traceback" not in r.stderr
