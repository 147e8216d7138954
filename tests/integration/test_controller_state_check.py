"""Acceptance (issue 32, part 1): controllers compare a hash of their state at the same applied
index; a member whose state differs raises the alarm, stops answering reads and votes, and says
what to do.

Real processes (3 controllers, name server, 3 brokers). One follower's newest snapshot file is
rewritten while it is down: a registered broker's address changed, the snapshot's CRCs made
valid again, so only a comparison can tell. Restarted, it rebuilds its state from that snapshot
and the log after it; the next check finds it alone with its hash: it silences itself (its
GetStateHash says why, its reads answer CONTROLLER_STATE_CORRUPT), the other two keep serving.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from autoswitch.controller.codes import Code, ControllerRpcError
from autoswitch.controller.raft import codec as raft_codec
from autoswitch.controller.raft.membership import pack_snapshot, snapshot_membership
from autoswitch.controller.state.sm_snapshot import decode_snapshot, encode_snapshot

from autoswitch.proto import controller_pb2 as pb
from tests.integration.failover_harness import GROUP, FailoverCluster, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

CONTROLLER_TOML = "state_check_interval_s = 1.0\n[raft]\nsnapshot_every = 8\n"


def _call(c: FailoverCluster, nid: str, method: str, req) -> object:
    from autoswitch.controller.client import ControllerClient

    async def go():
        async with ControllerClient(c.controllers, deadline_s=3.0, rpc_timeout_s=1.0, tls=c.tls()) as cc:
            return await cc.call_node(c.ctl_addrs[nid], method, req)

    return asyncio.run(go())


def _hash_reply(c: FailoverCluster, nid: str, index: int) -> pb.GetStateHashReply:
    return _call(c, nid, "GetStateHash", pb.GetStateHashRequest(index=index))


def _checked_index(c: FailoverCluster) -> int:
    """An index at which every member has recorded its state hash, all equal."""
    def ready():
        md = _call(c, "n1", "GetMetaData", pb.GetMetaDataRequest())
        for index in range(md.applied_index, max(0, md.applied_index - 40), -1):
            rs = [_hash_reply(c, n, index) for n in c.ctl_ids]
            if all(r.found for r in rs):
                assert len({r.hash for r in rs}) == 1, [r.hash for r in rs]
                return index
        return None

    return wait_until(ready, 60, "a state hash every member recorded")


def _corrupt_newest_snapshot(data_dir: Path) -> None:
    snaps = sorted((data_dir / "raft").glob("snapshot-*.snap"))
    assert snaps, f"no snapshot in {data_dir}"
    path = snaps[-1]
    snap = raft_codec.decode_snapshot(path.read_bytes(), str(path))
    conf, conf_index, data = snapshot_membership(snap.data)
    state, index = decode_snapshot(data)
    g = state.groups[GROUP]
    bid, rec = sorted(g.brokers.items())[0]
    g.brokers[bid] = dataclasses.replace(rec, address="127.0.0.1:9")     # valid, and wrong
    blob = pack_snapshot(conf, encode_snapshot(state, index), conf_index or 0)
    path.write_bytes(raft_codec.encode_snapshot(dataclasses.replace(snap, data=blob)))


def test_a_member_whose_state_differs_silences_itself(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, controller_toml=CONTROLLER_TOML)
    c.start_all()
    c.wait_master(timeout=30)
    c.wait_sync_state_set({1, 2, 3}, timeout=30)
    _checked_index(c)                        # equal states compare equal: no false alarm
    leader = _call(c, "n1", "GetMetaData", pb.GetMetaDataRequest()).leader_id
    odd = next(n for n in c.ctl_ids if n != leader)
    wait_until(lambda: list((tmp_path / f"ctl-{odd}" / "raft").glob("snapshot-*.snap")), 60,
               f"a snapshot on {odd}")
    c.ctl_proc[odd].kill9()
    _corrupt_newest_snapshot(tmp_path / f"ctl-{odd}")
    c.start_controller(odd)

    def silenced():
        md = _call(c, odd, "GetMetaData", pb.GetMetaDataRequest())
        r = _hash_reply(c, odd, md.applied_index)
        return r.corrupt or None

    why = wait_until(silenced, 60, f"{odd} finds its state differs")
    assert "majority" in why, why
    with pytest.raises(ControllerRpcError) as ei:
        _call(c, odd, "GetReplicaInfo", pb.GetReplicaInfoRequest(broker_name=GROUP))
    assert ei.value.reply_code == Code.CONTROLLER_STATE_CORRUPT and "recover-member" in ei.value.message
    for n in c.ctl_ids:
        if n != odd:
            md = _call(c, n, "GetMetaData", pb.GetMetaDataRequest())
            assert not _hash_reply(c, n, md.applied_index).corrupt
            assert md.leader_id != odd
    # the healthy majority keeps serving: reads on it, and the odd member never leads
    r = _call(c, leader, "GetReplicaInfo", pb.GetReplicaInfoRequest(broker_name=GROUP))
    assert r.header.code == 0 and r.replica_info.master_broker_id
    log = c.ctl_proc[odd].log_text()
    assert "state_hash_mismatch" in log and "recover-member" in log
