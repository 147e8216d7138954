"""The guided unclean recovery's plan (autoswitch/app/unclean_plan.py): what each choice of a
live replica loses in acknowledged messages, from the replicas' record digests."""

from __future__ import annotations

from autoswitch.app.unclean_plan import ReplicaLog, plan


def recs(epoch: int, start: int, n: int, size: int = 100, salt: int = 0) -> list[tuple[int, int, int, int]]:
    return [(epoch, start + i * size, start + (i + 1) * size, hash((epoch, start + i * size, salt)) & 0xFFFF)
            for i in range(n)]


def rep(bid: int, records, clean=False) -> ReplicaLog:
    return ReplicaLog(bid, f"h:{bid}", records[-1][2] if records else 0, records[-1][0] if records else 0, clean,
                      False, records)


def test_the_replica_that_loses_least_is_proposed_and_each_loss_is_counted():
    base = recs(1, 0, 10)
    ahead = rep(2, base + recs(2, 1000, 5))            # holds 5 more records of epoch 2
    behind = rep(3, base)
    p = plan("g", 3, confirm=1500, start=0, replicas={2: ahead, 3: behind})
    by = {c.broker_id: c for c in p.choices}
    assert p.proposal == 2 and by[2].lost_acked == 0 and by[3].lost_acked == 5
    assert by[3].lost_first == [1000, 1100, 1200, 1300, 1400]
    assert by[3].truncates == {2: (1000, 500)} and by[2].truncates == {}
    assert p.unrecoverable_bytes == 0


def test_a_diverged_lower_epoch_write_is_not_acked_data():
    base = recs(1, 0, 5)
    newer = rep(2, base + recs(3, 500, 3))                 # the later master's records
    older = rep(3, base + recs(2, 500, 4, salt=1))          # an old master's unacked tail at the same offsets
    p = plan("g", 4, confirm=800, start=0, replicas={2: newer, 3: older})
    by = {c.broker_id: c for c in p.choices}
    assert by[2].lost_acked == 0 and by[3].lost_acked == 3 and p.proposal == 2
    assert by[2].truncates == {3: (500, 400)}


def test_acked_bytes_no_live_replica_holds_are_reported_and_tokens_follow_the_inputs():
    a = rep(2, recs(1, 0, 5))
    p = plan("g", 2, confirm=900, start=0, replicas={2: a})
    assert p.unrecoverable_bytes == 400 and p.notes
    q = plan("g", 2, confirm=900, start=0, replicas={2: rep(2, recs(1, 0, 6))})
    assert p.token != q.token and p.token == plan("g", 2, confirm=900, start=0, replicas={2: a}).token


def test_every_row_agrees_with_the_notes_on_what_is_lost():
    """Issue 64 item 8: the notes said bytes were lost whatever the choice while each choice's row
    said lost_acked_messages 0. Each row now counts the unrecoverable bytes too and says so in words."""
    base = recs(1, 0, 5)
    two = rep(2, base + recs(2, 500, 2))          # holds 2 acknowledged records the other lacks
    three = rep(3, base)
    p = plan("g", 3, confirm=900, start=0, replicas={2: two, 3: three})     # 700..900: on no live replica
    assert p.unrecoverable_bytes == 200
    rows = {c["broker_id"]: c for c in p.to_dict()["choices"]}
    assert rows[2]["lost_acked_messages"] == 0 and rows[2]["lost_acked_bytes"] == 200
    assert rows[2]["loses"] == "only the 200 unrecoverable bytes"
    assert rows[3]["lost_acked_messages"] == 2 and rows[3]["lost_acked_bytes"] == 400
    assert rows[3]["loses"] == "2 acknowledged messages (200 B) other replicas hold, and the 200 unrecoverable bytes"
    assert rows[3]["cuts"] == "broker 2 from 500 (200 B)" and rows[2]["cuts"] == "nothing"
    assert "every choice's lost_acked_bytes" in p.notes[0]
