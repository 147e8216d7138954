"""Real bugs the simulator found, each as a minimal deterministic test (docs/verification.md)."""

from __future__ import annotations

import asyncio
import json

from autoswitch.controller.raft.harness import SimNet
from autoswitch.controller.raft.messages import Entry, HardState, Snapshot
from autoswitch.controller.raft.storage import MemoryStorage


def _storage(hs: HardState, entries: list[Entry], snap: Snapshot | None = None) -> MemoryStorage:
    st = MemoryStorage()
    st.durable.hard_state = hs
    st.durable.entries = list(entries)
    st.durable.snapshot = snap
    return st


def _follower_b_catches_up(net: SimNet) -> None:
    """a or c leads; a new entry reaches follower b, whose state then equals the leader's."""
    leader = net.wait_leader(3_000)
    assert leader in ("a", "c")
    idx = net.propose(leader, b"k=new")
    assert net.run_until(lambda: net.nodes["b"].sm.last_index >= idx, 3_000), \
        f"follower b stuck at {net.nodes['b'].core.log.last_index()} (leader at {idx})"
    assert net.nodes["b"].sm.kv == net.nodes[leader].sm.kv


def test_follower_diverging_exactly_at_leader_snapshot_index_is_repaired():
    """Sim seed 240 (phase A): the leader compacted through index 3 (term 2); a follower holds
    a stale entry 3 of term 1. The reject's back-off stopped at the compaction point, so the
    leader kept probing prev=3/term 2 forever instead of sending its snapshot: the follower
    never caught up (liveness), and with one more node down the group could not commit."""
    snap = Snapshot(3, 2, json.dumps({"kv": {"k": "3"}, "last": 3}).encode())
    up_to_date = [Entry(4, 2, b"k=4")]
    stale = [Entry(1, 1, b"k=1"), Entry(2, 1, b"k=2"), Entry(3, 1, b"k=3stale")]
    net = SimNet(["a", "b", "c"], seed=1, storages={
        "a": _storage(HardState(2, None, 3), up_to_date, snap),
        "b": _storage(HardState(1, None, 0), stale),
        "c": _storage(HardState(2, None, 3), up_to_date, snap),
    })
    _follower_b_catches_up(net)


def test_heartbeat_replies_without_lease_granted_do_not_extend_the_master_lease(tmp_path):
    """Sim seed 200 (phase B, ReplicasManager brain): a master isolated long enough for the
    controller majority to hold a DEAD report and commit a newer MasterEpoch comes back; the
    controllers answer its heartbeats with lease_granted=false, but the adapter counts them,
    the lease is renewed and the deposed master acknowledges a write in the old epoch before
    its next replica-info poll (docs/design.md §1 broken; interfaces.md: only replies with
    lease_granted may count)."""
    import dataclasses

    from tests.unit.test_rm_adapter import make, wait_for

    async def main():
        api, broker, a = make(tmp_path)
        real = api.heartbeat
        deny = {"on": False}

        async def heartbeat(controller_addr, hb, timeout_s):
            reply = await real(controller_addr, hb, timeout_s)
            return dataclasses.replace(reply, lease_granted=not deny["on"])

        api.heartbeat = heartbeat
        await a.start()
        await wait_for(a.may_acknowledge, "master with lease")
        deny["on"] = True     # every controller now refuses to grant (DEAD hold / newer epoch applied)
        try:
            await wait_for(lambda: not a.may_acknowledge(), "lease expired", limit_s=3.0)
        finally:
            await a.stop()

    asyncio.run(asyncio.wait_for(main(), 20))


def test_proposal_with_unknown_outcome_keeps_counting_the_union():
    """Sim seed 152 (phase B, ReplicasManager brain): master 1 proposes {1,3}; the controller
    commits it but the reply is lost; the RPC times out, ReplicasManager reports a failed
    proposal and SyncStateTracker.on_proposal_failed drops the proposed set. Broker 3 then
    crashes; message 20 is acked by {1} alone while the controller's SyncStateSet is {1,3}:
    broker 3 is electable without an acknowledged message."""
    from autoswitch.ha.config import HAConfig
    from autoswitch.ha.sync_state import SyncStateTracker

    t = SyncStateTracker(1, 1, frozenset({1}), 1, HAConfig(), now=0.0)
    t.on_connect(3, False, 0.0)
    t.on_ack(3, 100, 0.0, 100)
    prop = t.tick(0.1, 100)
    assert prop is not None and prop.new_set == frozenset({1, 3})
    t.on_proposal_failed(0.6)          # RPC timeout: the controller may well have committed {1,3}
    t.on_disconnect(3, 0.7)
    assert not t.is_acked(200, 200), "acked by the master alone while {1,3} may be the SyncStateSet"



def test_unknown_outcome_is_resolved_by_a_confirming_proposal():
    """The unresolved proposal must not block writes forever once its member is gone: the master
    re-proposes its set, the controller's epoch moves past the proposal's base, and acks count
    the master's set alone again."""
    from autoswitch.ha.config import HAConfig
    from autoswitch.ha.sync_state import SyncStateTracker

    t = SyncStateTracker(1, 1, frozenset({1}), 1, HAConfig(), now=0.0)
    t.on_connect(3, False, 0.0)
    t.on_ack(3, 100, 0.0, 100)
    assert t.tick(0.1, 100).new_set == frozenset({1, 3})
    t.on_proposal_failed(0.6)
    t.on_disconnect(3, 0.7)
    confirm = t.tick(60.0, 200)
    assert confirm is not None and confirm.new_set == frozenset({1})
    assert not t.is_acked(200, 200)
    t.on_proposal_accepted(frozenset({1}), 2, 60.1)
    assert t.is_acked(200, 200)


def test_follower_with_newer_term_entries_at_the_probe_index_catches_up():
    """Sim seed 1511 (phase A, found when the fault menu grew): the leader (term 5) holds entries
    14-16 of term 2; a follower holds 14-16 of term 3 and 17-20 of term 4 (appended by leaders that
    lost). The follower answered every probe at prev=16/term 2 with hint 16 (term 3); the leader's
    back-off kept 16 (its own term there, 2, is below 3), so it probed prev=16 for ever: the
    follower never caught up, and one more node down would have stopped the group."""
    common = [Entry(i, 1, f"k=c{i}".encode()) for i in range(1, 14)]
    leader_log = common + [Entry(i, 2, f"k=l{i}".encode()) for i in (14, 15, 16)] + [Entry(17, 5, b"k=l17")]
    stale = common + [Entry(i, 3, f"k=s{i}".encode()) for i in (14, 15, 16)] + \
        [Entry(i, 4, f"k=s{i}".encode()) for i in (17, 18, 19, 20)]
    net = SimNet(["a", "b", "c"], seed=1, storages={
        "a": _storage(HardState(5, None, 13), leader_log),
        "b": _storage(HardState(5, None, 13), stale),
        "c": _storage(HardState(5, None, 13), leader_log),
    })
    _follower_b_catches_up(net)


def test_a_catching_up_member_does_not_hold_two_split_candidates_in_one_term():
    """Phase A with wiped data directories (seeds 81, 85, 90, 101): a wiped member catching up
    answered every vote with REJECT_SMALL_LEDGER_END_INDEX ("my log is longer"), so the two live
    voters, split in one term (each voted for itself), counted a majority of "wait, someone has
    more" and re-asked the same term for ever: no leader. Its answer is now a plain no, and the
    candidates go to the next term as after any split vote."""
    log = [Entry(1, 1, b"k=1"), Entry(2, 1, b"k=2")]
    # seed 1: b and c pass their pre-votes at once and split the vote of term 3 (7 of seeds 0-399
    # had no leader within 5 s before the fix)
    net = SimNet(["a", "b", "c"], seed=1, storages={
        "a": MemoryStorage(),                            # wiped: it learns of the cluster from the votes
        "b": _storage(HardState(2, None, 2), log),
        "c": _storage(HardState(2, None, 2), log),
    })
    leader = net.wait_leader(5_000)
    assert leader in ("b", "c"), "no leader: the candidates stayed in one term"
    idx = net.propose(leader, b"k=3")
    assert net.run_until(lambda: net.nodes["a"].sm.last_index >= idx, 5_000), "the wiped member caught up"
