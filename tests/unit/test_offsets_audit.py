"""The consumer-offset part of the audit (pipeline/offsets_audit.py), on hand-made rows."""

from __future__ import annotations

from autoswitch.pipeline.offsets_audit import audit_offsets


def _rec(bid, cg, topic, committed, phy, epoch=1, group="g1"):
    return {"group": group, "broker_id": bid, "consumer_group": cg, "topic": topic, "committed": committed,
            "phy_offset": phy, "epoch": epoch}


def test_clean_history_has_no_findings():
    rows = [_rec(1, "cg", "t", 10, 100), _rec(1, "cg", "t", 20, 200), _rec(2, "cg", "t", 99, 300)]  # 2: a slave
    r = audit_offsets({"g1": 1}, rows, [{"group": "g1", "consumer_group": "cg", "topic": "t", "committed": 20}])
    assert (r["offsets_lost"], r["offsets_backwards"], r["keys"]) == (0, 0, 1)


def test_an_acked_commit_missing_from_the_master_is_lost_and_a_lower_one_is_backwards():
    rows = [_rec(2, "cg", "t", 50, 100), _rec(2, "cg", "t", 40, 250, epoch=2)]
    told = [{"group": "g1", "consumer_group": "cg", "topic": "t", "committed": c, "epoch": 1} for c in (50, 100)]
    r = audit_offsets({"g1": 2}, rows, told)
    assert r["offsets_lost"] == 1 and r["lost"][0]["acked_committed"] == 100 and r["lost"][0]["master_committed"] == 40
    assert r["offsets_backwards"] == 1 and r["backwards"][0]["from"] == 50 and r["backwards"][0]["to"] == 40
    # a group the master never heard of, but a consumer was told about: lost too
    r2 = audit_offsets({"g1": 2}, [], told)
    assert r2["offsets_lost"] == 1 and r2["lost"][0]["master_committed"] is None


def test_an_operators_reset_is_reported_as_such_not_as_backwards_or_lost():
    """Issue 64 item 2: a deliberate reset-offsets --execute made a loss-free run UNSAFE_REPLICAS."""
    rows = [_rec(1, "cg", "t", 50, 100), {**_rec(1, "cg", "t", 0, 200), "operator_reset": True},
            _rec(1, "cg", "t", 20, 300), _rec(1, "cg2", "t", 30, 310), _rec(1, "cg2", "t", 10, 320)]
    told = [{"group": "g1", "consumer_group": "cg", "topic": "t", "committed": 50},
            {"group": "g1", "consumer_group": "cg2", "topic": "t", "committed": 30}]
    r = audit_offsets({"g1": 1}, rows, told)
    assert r["offsets_reset_by_operator"] == 1 and r["reset_by_operator"][0]["from"] == 50
    assert r["reset_by_operator"][0]["to"] == 0
    # the consumer's own moves are still judged: cg2 went backwards and lost its acknowledged 30
    assert r["offsets_backwards"] == 1 and r["backwards"][0]["consumer_group"] == "cg2"
    assert r["offsets_lost"] == 1 and r["lost"][0]["consumer_group"] == "cg2"
