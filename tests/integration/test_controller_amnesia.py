"""A controller that lost its Raft files refuses to start; `recover-member` is the way back.
Real 3-node clusters on 127.0.0.1, real files."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.raft import codec

from autoswitch.proto import controller_pb2 as pb
from tests.integration.controller_harness import Cluster, wait_leader
from tests.integration.failover_harness import wait_until
from tests.waiting import until

pytestmark = pytest.mark.integration

WRITES = 10          # below the harness's snapshot_every (16): the whole history is in the log


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "autoswitch", *args], capture_output=True, text=True, timeout=120)


async def _write(cl: Cluster, first: int, n: int) -> None:
    async with ControllerClient(cl.spec, deadline_s=60) as c:
        await wait_leader(c)
        for i in range(first, first + n):
            await c.apply_broker_id("c1", f"g{i}", 1, f"k{i}")


async def _groups(cl: Cluster, nid: str) -> int:
    async with ControllerClient(cl.addrs[nid], deadline_s=60) as c:
        m = await c.call_node(cl.addrs[nid], "GetMetaData", pb.GetMetaDataRequest(), timeout_s=30)
        return int(m.groups)


def _written_cluster(procs, tmp_path) -> Cluster:
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    asyncio.run(_write(cl, 0, WRITES))

    async def n3_has_all() -> bool:          # a majority committed them; n3 may lag on a busy machine
        return await _groups(cl, "n3") == WRITES

    asyncio.run(until(n3_has_all, "n3 applied every write", interval_s=0.05))
    return cl


def _start_fails(cl: Cluster, nid: str) -> dict:
    r = _cli("controller", *cl.node_args(nid))
    assert r.returncode == 2, (r.returncode, r.stderr[-2000:])
    line = [x for x in r.stderr.splitlines() if '"startup_failed"' in x]
    assert line, r.stderr[-2000:]
    return json.loads(line[-1])


def test_deleted_segments_refuse_to_start(procs, tmp_path):
    cl = _written_cluster(procs, tmp_path)
    cl.stop("n3")
    raft = cl.data_dir("n3") / "raft"
    segs = sorted(raft.glob("seg-*.log"))
    assert segs
    for p in segs:
        p.unlink()
    err = _start_fails(cl, "n3")
    assert err["code"] == "RAFT_STORAGE_CORRUPT" and "seg-" in err["message"] and "recover-member" in err["message"]
    # The whole raft directory gone: the event history says entries were applied here.
    for p in raft.iterdir():
        p.unlink()
    raft.rmdir()
    err = _start_fails(cl, "n3")
    assert "events.jsonl" in err["message"] and "recover-member" in err["message"]


def test_segment_truncated_at_a_frame_boundary_refuses_to_start(procs, tmp_path):
    cl = _written_cluster(procs, tmp_path)
    cl.stop("n3")
    seg = sorted((cl.data_dir("n3") / "raft").glob("seg-*.log"))[-1]
    buf = seg.read_bytes()
    frames = codec.scan_segment(buf, str(seg), is_last=True).frames
    cut = next(off for off, frame in frames if frame and frame[-1].index >= 3)
    with open(seg, "r+b") as f:             # exactly at a frame boundary: no torn tail to notice
        f.truncate(cut)
    err = _start_fails(cl, "n3")
    assert err["code"] == "RAFT_STORAGE_CORRUPT" and "committed entries are gone" in err["message"]


def test_recover_member_rejoins_only_with_a_quorum_and_catches_up(procs, tmp_path):
    cl = _written_cluster(procs, tmp_path)
    cl.stop("n3")
    for p in (cl.data_dir("n3") / "raft").glob("seg-*.log"):
        p.unlink()                                           # the replaced disk

    # Too few others: with n2 down too, n1 alone is no quorum of 3.
    cl.stop("n2")
    r = _cli("recover-member", *cl.node_args("n3"), "--timeout-s", "2")
    assert r.returncode == 2 and "RECOVER_REFUSED" in r.stderr and "quorum" in r.stderr, r.stderr[-2000:]
    cl.start("n2")

    r = _cli("recover-member", *cl.node_args("n3"), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    env = json.loads(r.stdout)
    assert env["ok"] and env["command"] == "recover-member"
    out = env["result"]
    assert out["recovered"] == "n3" and set(out["answered"]) == {"n1", "n2"} and out["term"] >= 1
    assert (cl.data_dir("n3") / "raft" / "catch_up").exists()

    cl.start("n3")
    asyncio.run(_write(cl, WRITES, 3))                     # the cluster keeps committing

    async def caught_up() -> bool:
        return await _groups(cl, "n3") == WRITES + 3
    asyncio.run(until(caught_up, "n3 caught up", interval_s=0.1))
    assert not (cl.data_dir("n3") / "raft" / "catch_up").exists()
    log = cl.proc["n3"].log_path.read_text()
    assert '"raft_catching_up"' in log and '"raft_caught_up"' in log
    # A running node is never "recovered" under itself.
    r = _cli("recover-member", *cl.node_args("n3"))
    assert r.returncode == 2 and "stop it" in r.stderr


def test_recover_member_catches_up_while_the_same_leader_stays(procs, tmp_path):
    """Issue 29, item 6: the leader kept the recovered node's old match index and ignored its
    rejections; the node never caught up while that leader stayed, and the cluster ran on two of
    three without saying so."""
    cl = _written_cluster(procs, tmp_path)

    async def leader_id() -> str:
        async with ControllerClient(cl.spec, deadline_s=60) as c:
            await wait_leader(c)
            for _ in range(1200):           # a node may not name the leader right after an election
                md = await c.get_metadata()
                if md.leader_id:
                    return md.leader_id
                await asyncio.sleep(0.05)
            raise AssertionError("no node names a leader")

    leader = asyncio.run(leader_id())
    lost = next(n for n in ("n1", "n2", "n3") if n != leader)
    cl.stop(lost)
    for p in (cl.data_dir(lost) / "raft").glob("seg-*.log"):
        p.unlink()
    r = _cli("recover-member", *cl.node_args(lost), "--json")
    assert r.returncode == 0, r.stderr[-2000:]
    cl.start(lost)
    asyncio.run(_write(cl, WRITES, 3))

    async def caught_up() -> bool:
        return await _groups(cl, lost) == WRITES + 3
    asyncio.run(until(caught_up, f"{lost} caught up under the same leader", interval_s=0.1))
    assert asyncio.run(leader_id()) == leader, "the leader changed: the test did not test what it says"
    assert not (cl.data_dir(lost) / "raft" / "catch_up").exists()


def test_a_wholly_wiped_data_directory_rejoins_only_as_a_catching_up_member(procs, tmp_path):
    """Issue 30 item 3: the whole data directory gone (not just the Raft files: nothing says
    entries were applied here), the node restarted with the same id. It used to count as a fresh
    member that votes and grants at once; now the first sign of the cluster's log (the leader's
    heartbeat) turns it into a catching-up member (durable marker, no votes, no campaign, no
    lease grants) until the leader brought it up to its commit index."""
    import shutil

    cl = _written_cluster(procs, tmp_path)
    # the cluster must remember n3 ran here (its feature level recorded) for the alarm below; a
    # member wiped before that is indistinguishable from a first start (and says so)
    wait_until(lambda: any("member_level:n3=" in cl.proc[n].log_text() for n in ("n1", "n2", "n3")), 60,
               "n3's feature level recorded")
    cl.kill9("n3")
    shutil.rmtree(cl.data_dir("n3"))
    cl.start("n3")

    async def n3_caught_up() -> bool:
        async with ControllerClient(cl.addrs["n3"], deadline_s=30) as c:
            m = await c.call_node(cl.addrs["n3"], "GetMetaData", pb.GetMetaDataRequest(), timeout_s=10)
            return int(m.groups) == WRITES
    asyncio.run(until(n3_caught_up, "the wiped node caught up from the leader", interval_s=0.05))
    # the state arrives with the snapshot; the node says it caught up when the leader's next
    # message shows it at the commit index (a moment later on a busy machine)
    wait_until(lambda: "raft_caught_up" in cl.proc["n3"].log_text(), 60, "n3 says it caught up")
    text = cl.proc["n3"].log_text()
    assert "raft_empty_node_catching_up" in text and "raft_caught_up" in text, text[-3000:]
    assert "controller_rejoined_with_empty_data_dir" in text, text[-3000:]
    # a member again: it applies what the cluster writes next
    asyncio.run(_write(cl, WRITES, 3))

    async def n3_has_more() -> bool:
        return await _groups(cl, "n3") == WRITES + 3
    asyncio.run(until(n3_has_more, "the rejoined node applies new writes", interval_s=0.05))


def test_the_last_controller_of_a_first_deployment_raises_no_false_alarm(procs, tmp_path):
    """Issue 58, item 7: on a normal first deployment the controller that starts last finds a
    cluster with a log and no log of its own. It catches up before voting, as a wiped one does,
    but without the wiped-directory warning (operators would learn to ignore it): it says it is a
    first start once it has caught up and sees the cluster never recorded it."""
    cl = Cluster(procs, tmp_path)
    cl.start("n1")
    cl.start("n2")

    async def write_two() -> None:          # n1 and n2 elect a leader and commit entries
        async with ControllerClient(f"{cl.addrs['n1']},{cl.addrs['n2']}", deadline_s=60) as c:
            await wait_leader(c)
            for i in range(5):
                await c.apply_broker_id("c1", f"g{i}", 1, f"k{i}")
    asyncio.run(write_two())
    cl.start("n3")

    async def n3_has_all() -> bool:
        return await _groups(cl, "n3") == 5
    asyncio.run(until(n3_has_all, "n3 caught up", interval_s=0.05))
    async def said() -> bool:
        return "controller_first_start_caught_up" in cl.proc["n3"].log_text()
    asyncio.run(until(said, "n3 said it is a first start", interval_s=0.05))
    text = cl.proc["n3"].log_text()
    assert "raft_empty_node_catching_up" in text, text[-3000:]
    assert '"level":"warning"' not in "\n".join(x for x in text.splitlines() if "empty" in x or "rejoined" in x), \
        text[-3000:]
    assert "controller_rejoined_with_empty_data_dir" not in text
