"""The pure part of consumer groups: the commit record encoding and the offset table that answers
only with commits at or below confirmOffset, in log order."""

from __future__ import annotations

import pytest
from autoswitch.broker.consumer_offsets import OffsetTable, decode_commit, encode_commit

from autoswitch.base.write_errors import BadRequest


def test_commit_records_round_trip_and_bad_ones_are_refused():
    body = encode_commit("cg", "orders", 42)
    assert decode_commit(body) == (("cg", "orders"), 42)
    for bad in (b"", b"not json", b"[]", b'{"g": "cg", "t": "x", "o": -1}', b'{"g": 1, "t": "x", "o": 1}',
                b'{"g": "cg", "t": "x", "o": true}', b"x" * 5000):
        assert decode_commit(bad) is None, bad
    for args in (("", "t", 1), ("cg", "", 1), ("cg", "__consumer_offsets", 1), ("cg", "t", -1), ("g" * 200, "t", 1)):
        with pytest.raises(BadRequest):
            encode_commit(*args)


def test_the_table_answers_only_confirmed_commits_last_one_wins():
    t = OffsetTable()
    k = ("cg", "orders")
    t.on_append(k, 10, end=100)
    t.on_append(k, 20, end=200)
    t.on_append(("other", "orders"), 5, end=250)
    assert t.value(k, confirm=50) is None          # nothing confirmed yet
    assert t.value(k, confirm=150) == 10
    assert t.value(k, confirm=150) == 10           # idempotent
    assert t.value(k, confirm=200) == 20
    assert t.value(("other", "orders"), confirm=200) is None
    assert t.keys_of("cg") == [k]
    t.on_append(k, 15, end=300)                    # a later commit may move back (a replay): log order wins
    assert t.value(k, confirm=300) == 15


def test_a_group_belongs_to_its_first_committer_in_log_order_and_keys_are_counted():
    from autoswitch.broker.consumer_offsets import OffsetTable, decode_record, encode_commit

    t = OffsetTable()
    for i, (g, topic, who) in enumerate([("billing", "a", "reader/ops"), ("billing", "b", "reader/x"),
                                         ("audit", "a", ""), ("audit", "a", "reader/x")]):
        body = encode_commit(g, topic, i, who)
        key, off, committer = decode_record(body)
        t.on_append(key, off, 100 * (i + 1), committer)
    assert t.owners == {"billing": "reader/ops", "audit": "reader/x"}
    assert t.key_count() == 3 and t.known(("billing", "b")) and not t.known(("billing", "c"))
    t.value(("billing", "a"), 10_000)        # confirmed now: still one key
    assert t.key_count() == 3
    assert decode_record(encode_commit("g", "t", 1)) == (("g", "t"), 1, "")


def test_a_tombstone_deletes_a_group_once_confirmed_and_a_later_commit_starts_it_afresh():
    from autoswitch.broker.consumer_offsets import decode_delete, decode_record, encode_delete

    body = encode_delete("cg", "admin")
    assert decode_delete(body) == "cg" and decode_record(body) is None      # not a commit
    assert decode_delete(encode_commit("cg", "orders", 1)) is None
    for bad in (b'{"g": "", "d": 1}', b'{"g": "cg", "d": 2}', b'{"g": "cg", "t": "x", "d": 1}', b"x" * 5000):
        assert decode_delete(bad) is None, bad
    with pytest.raises(BadRequest):
        encode_delete("")
    t = OffsetTable()
    a, b, other = ("cg", "orders"), ("cg", "bills"), ("keep", "orders")
    t.on_append(a, 10, end=100, committer="reader/app")
    t.on_append(b, 3, end=110, committer="reader/app")
    t.on_append(other, 7, end=120, committer="reader/x")
    assert t.value(a, 120) == 10
    t.on_delete("cg", end=200)
    assert "cg" not in t.owners and t.owners["keep"] == "reader/x"
    assert t.value(a, 150) == 10 and t.value(b, 150) == 3      # not confirmed yet: a failover could undo it
    assert t.value(a, 200) is None and t.value(b, 200) is None and not t.known(a) and not t.known(b)
    assert t.value(other, 200) == 7
    t.on_append(a, 2, end=300, committer="reader/new")         # the group starts afresh, with a new owner
    assert t.value(a, 300) == 2 and t.owners["cg"] == "reader/new"
