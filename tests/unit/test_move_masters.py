"""`admin move-masters` planning (autoswitch/app/move_masters.plan): which groups move, to whom."""

from __future__ import annotations

from autoswitch.app.move_masters import plan
from autoswitch.proto import controller_pb2 as pb


def group(name: str, master: int, sss: list[int], members: list[tuple[int, str, bool, int]]) -> pb.GroupSyncState:
    g = pb.GroupSyncState()
    g.replica_info.broker_name = name
    g.replica_info.master_broker_id = master
    g.replica_info.master_epoch = 3
    g.replica_info.master_address = next(a for b, a, _, _ in members if b == master) if master else ""
    g.replica_info.sync_state_set.extend(sss)
    for b, addr, alive, off in members:
        g.members.add(broker_id=b, address=addr, alive=alive, max_offset=off)
    return g


def test_moves_only_masters_on_the_host_to_the_most_caught_up_in_sync_slave_elsewhere():
    gs = [
        group("a", 1, [1, 2, 3], [(1, "10.0.0.1:10911", True, 90), (2, "10.0.0.2:10911", True, 80),
                                  (3, "10.0.0.3:10911", True, 85)]),
        group("b", 2, [1, 2], [(1, "10.0.0.1:10921", True, 5), (2, "10.0.0.2:10921", True, 5)]),   # not on host
        group("c", 1, [1, 2], [(1, "10.0.0.1:10931", True, 5), (2, "10.0.0.1:10932", True, 5),     # same host
                               (3, "10.0.0.3:10931", True, 9)]),                                    # not in sync
        group("d", 1, [1, 3], [(1, "10.0.0.1:10941", True, 5), (3, "10.0.0.3:10941", False, 9)]),  # dead
        group("e", 0, [], [(1, "10.0.0.1:10951", True, 5)]),                                       # no master
    ]
    rows = {r["group"]: r for r in plan(gs, "10.0.0.1")}
    assert sorted(rows) == ["a", "c", "d"]
    assert rows["a"]["target"] == 3 and rows["a"]["target_address"] == "10.0.0.3:10911"
    assert rows["c"]["target"] is None and rows["d"]["target"] is None
    assert "no alive in-sync slave on another host" in rows["c"]["result"]
