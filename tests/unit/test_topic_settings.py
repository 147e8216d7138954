"""The pure part of topic settings (broker/topic_settings.py): records and the table."""

from __future__ import annotations

import pytest
from autoswitch.broker.topic_settings import TopicSettings, TopicTable, decode, encode_delete, encode_settings

from autoswitch.base.write_errors import BadRequest


def test_records_round_trip_and_bad_ones_are_refused():
    assert decode(encode_settings("orders", 100, "admin", 5)) == ("orders", TopicSettings(100, "admin", 5))
    assert decode(encode_settings("orders", None, "", 5)) == ("orders", TopicSettings(None, "", 5))
    assert decode(encode_delete("orders", "admin", 6)) == ("orders", None)
    for bad in (b"", b"[]", b'{"t": ""}', b'{"t": "x", "m": 0}', b'{"t": "x", "m": "1"}', b'{"t": "x", "ts": 1.5}',
                b'{"t": 3}', b"x" * 5000):
        assert decode(bad) is None, bad
    for args in (("", 1), ("__topics", 1), ("x" * 300, 1), ("ok", 0)):
        with pytest.raises(BadRequest):
            encode_settings(args[0], args[1], "", 0)


def test_the_table_limits_refuses_deleted_and_unknown_topics_and_the_last_record_wins():
    t = TopicTable()
    assert t.size_limit("a", 1000) == 1000 and t.refusal("a", auto_create=True, in_log=False) is None
    assert "does not exist" in t.refusal("a", auto_create=False, in_log=False)
    assert t.refusal("a", auto_create=False, in_log=True) is None           # a topic from before stays usable
    t.apply("a", TopicSettings(100))
    assert t.size_limit("a", 1000) == 100 and t.size_limit("a", 50) == 50   # never above the broker's
    assert t.refusal("a", auto_create=False, in_log=False) is None
    t.apply("a", None)
    assert "deleted" in t.refusal("a", auto_create=True, in_log=True) and t.size_limit("a", 1000) == 1000
    t.apply("a", TopicSettings(None))
    assert t.refusal("a", auto_create=False, in_log=True) is None and "a" not in t.deleted


def test_retention_records_and_the_cutoff():
    from autoswitch.broker.topic_settings import retention_cutoff_ms

    assert decode(encode_settings("t", None, "", 1, retention_hours=2.5)) == ("t", TopicSettings(None, "", 1, 2.5))
    for bad in (b'{"t": "x", "r": 0}', b'{"t": "x", "r": "1"}', b'{"t": "x", "r": 1e9}'):
        assert decode(bad) is None, bad
    with pytest.raises(BadRequest):
        encode_settings("t", None, "", 1, retention_hours=0.0)
    assert retention_cutoff_ms(TopicSettings(retention_hours=1.0), 10_000_000) == 10_000_000 - 3_600_000
    assert retention_cutoff_ms(TopicSettings(), 5) is None and retention_cutoff_ms(None, 5) is None
