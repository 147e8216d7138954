"""Real bugs the simulator found, each as a minimal deterministic test (docs/verification.md)."""

from __future__ import annotations

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
    leader = net.wait_leader(3_000)
    assert leader in ("a", "c")
    idx = net.propose(leader, b"k=new")
    assert net.run_until(lambda: net.nodes["b"].sm.last_index >= idx, 3_000), \
        f"follower b stuck at {net.nodes['b'].core.log.last_index()} (leader at {idx})"
    assert net.nodes["b"].sm.kv == net.nodes[leader].sm.kv
