"""The controller's RocketMQ remoting port against a hostile peer (a real controller process on
127.0.0.1): malformed frames, absurd lengths, unknown codes, forged brokerIds, requests without
required fields, and a peer that sends and never reads. Each gets a typed answer or a closed
connection and a log line; the port keeps serving everyone else and its memory stays bounded."""

from __future__ import annotations

import socket
import struct
import time

import pytest
from autoswitch.controller.remoting import codec

from tests.integration.controller_harness import Cluster
from tests.procs import ProcGroup


def _call(addr: str, cmd: codec.Command, timeout: float = 10.0) -> codec.Command:
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(codec.encode(cmd))
        return _read_one(s)


def _read_one(s: socket.socket) -> codec.Command:
    d = codec.Decoder()
    while True:
        data = s.recv(65536)
        if not data:
            raise ConnectionError("closed")
        got = d.feed(data)
        if got:
            return got[0]


def _rss_kb(pid: int) -> int:
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


@pytest.fixture
def ctl(tmp_path):
    procs = ProcGroup(tmp_path / "logs")
    c = Cluster(procs, tmp_path, n=1, remoting=True)
    try:
        c.start_all()
        addr = c.remoting_addrs["n1"]
        end = time.monotonic() + 60
        while True:       # ready: the remoting port answers and names a leader
            try:
                r = _call(addr, codec.request(1005, 1))
                if r.ext.get("controllerLeaderAddress"):
                    break
            except OSError:
                pass
            assert time.monotonic() < end, procs.dump_logs()
            time.sleep(0.1)
        yield c, addr, procs
    finally:
        procs.stop_all()


def test_typed_answers_to_bad_requests(ctl):
    c, addr, procs = ctl
    r = _call(addr, codec.request(4242, 7))
    assert (r.code, r.opaque, r.is_response) == (3, 7, True) and "4242 not supported" in r.remark
    # a required field missing: INVALID_REQUEST naming it
    r = _call(addr, codec.request(1012, 8, {"clusterName": "C1"}))
    assert r.code == 2005 and "brokerName" in r.remark
    # a number that is not one
    r = _call(addr, codec.request(1013, 9, {"clusterName": "C1", "brokerName": "g", "appliedBrokerId": "x",
                                            "registerCheckCode": "a;1"}))
    assert r.code == 2005 and "appliedBrokerId" in r.remark
    # a forged brokerId that was never applied cannot register (RocketMQ's 2010)
    r = _call(addr, codec.request(1003, 10, {"clusterName": "C1", "brokerName": "g", "brokerId": 99,
                                             "brokerAddress": "127.0.0.1:1"}))
    assert r.code == 2010
    # an alter from someone who is not the master: refused by the state machine
    r = _call(addr, codec.request(1001, 11, {"brokerName": "g", "masterBrokerId": 99, "masterEpoch": 1},
                                  b'{"syncStateSet":[99],"syncStateSetEpoch":1}'))
    assert r.code != 0
    # a body that is not a SyncStateSet
    r = _call(addr, codec.request(1001, 12, {"brokerName": "g", "masterBrokerId": 99, "masterEpoch": 1}, b"[1,2"))
    assert r.code == 2005 and "JSON" in r.remark
    # a one-way heartbeat without brokerId gets no answer; the next request on the connection does
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(codec.encode(codec.request(904, 13, {"brokerName": "g"}, oneway=True))
                  + codec.encode(codec.request(1005, 14)))
        assert _read_one(s).opaque == 14
    log = procs.dump_logs(400)
    assert "remoting_code_not_supported" in log and "remoting_request_refused" in log
    assert "Traceback" not in log


@pytest.mark.parametrize("frame", [
    struct.pack(">i", 2**31 - 1),                         # an absurd length
    struct.pack(">i", 2),                                 # shorter than a header word
    struct.pack(">ii", 20, 4000) + b"x" * 16,             # a header longer than the frame
    struct.pack(">ii", 8, (9 << 24) | 4) + b"abcd",       # an unknown serialize type
    struct.pack(">ii", 8, 4) + b"\xff\xfe{}",             # a header that is not JSON
])
def test_malformed_frames_close_only_that_connection(ctl, frame):
    c, addr, procs = ctl
    host, port = addr.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(frame)
        assert s.recv(100) == b""          # closed, nothing answered
    assert _call(addr, codec.request(1005, 1)).code == 0     # everyone else is served
    assert "remoting_bad_frame" in procs.dump_logs(400)


def test_a_peer_that_never_reads_costs_bounded_memory(ctl):
    c, addr, procs = ctl
    pid = c.proc["n1"].pid
    before = _rss_kb(pid)
    host, port = addr.rsplit(":", 1)
    req = b"".join(codec.encode(codec.request(1010, i)) for i in range(1000))   # each answer ~3 KB
    sent = 0
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        s.settimeout(5.0)
        try:
            for _ in range(100):       # up to 100k requests, ~300 MB of answers if nothing held back
                s.sendall(req)
                sent += 1000
        except (TimeoutError, OSError):
            pass
        grown_mb = (_rss_kb(pid) - before) / 1024
    assert sent < 100_000, "the server kept reading a peer that never reads"
    assert grown_mb < 64, f"the controller grew {grown_mb:.0f} MB for one peer that never reads"
    assert _call(addr, codec.request(1005, 1)).code == 0
