"""EpochCache rules and the consistent-point algorithm (docs/storage.md "1. EpochFile")."""

from __future__ import annotations

import pytest
from autoswitch.epochfile import (
    ConsistentPoint,
    EpochCache,
    EpochEntry,
    EpochRuleError,
    NoConsistentPoint,
    entries_to_record,
    find_consistent_point,
)


def cache(*pairs: tuple[int, int]) -> EpochCache:
    return EpochCache(EpochEntry(e, s) for e, s in pairs)


def test_append_strict_rules():
    c = cache((1, 100))
    with pytest.raises(EpochRuleError):
        c.append(1, 200)  # same epoch
    with pytest.raises(EpochRuleError):
        c.append(0, 200)  # epoch must be > 0 and increasing
    with pytest.raises(EpochRuleError):
        c.append(2, 99)  # start going backwards
    with pytest.raises(EpochRuleError):
        c.append(2, -1)
    c.append(2, 100)  # zero-message epoch 1 is allowed and kept
    c.append(5, 100)
    assert c.entries() == [EpochEntry(1, 100), EpochEntry(2, 100), EpochEntry(5, 100)]


def test_first_last_find_by_epoch_end_offset():
    c = cache((1, 100), (2, 300), (3, 300), (4, 500))
    assert c.first() == EpochEntry(1, 100)
    assert c.last() == EpochEntry(4, 500)
    assert c.find_by_epoch(3) == EpochEntry(3, 300)
    assert c.find_by_epoch(7) is None
    assert c.end_offset(1, 700) == 300
    assert c.end_offset(2, 700) == 300  # zero-message epoch ends where it starts
    assert c.end_offset(4, 700) == 700
    with pytest.raises(EpochRuleError):
        c.end_offset(9, 700)
    assert EpochCache().first() is None and EpochCache().last() is None


def test_find_by_offset_prefers_newest_non_empty():
    c = cache((1, 100), (2, 300), (3, 300), (4, 500))
    assert c.find_by_offset(99, 700) is None
    assert c.find_by_offset(100, 700) == EpochEntry(1, 100)
    assert c.find_by_offset(299, 700) == EpochEntry(1, 100)
    assert c.find_by_offset(300, 700) == EpochEntry(3, 300)  # epoch 2 holds nothing
    assert c.find_by_offset(699, 700) == EpochEntry(4, 500)
    assert c.find_by_offset(700, 700) is None
    assert EpochCache().find_by_offset(0, 10) is None


def test_truncate_suffix_from_offset_keeps_entry_starting_at_cut():
    c = cache((1, 100), (2, 300), (3, 500))
    c.truncate_suffix_from_offset(500)
    assert c.last() == EpochEntry(3, 500)
    c.truncate_suffix_from_offset(450)
    assert c.entries() == [EpochEntry(1, 100), EpochEntry(2, 300)]
    c.truncate_suffix_from_offset(0)
    assert c.entries() == []


def test_truncate_suffix_after_epoch():
    c = cache((1, 100), (2, 300), (3, 300), (4, 500))
    c.truncate_suffix_after_epoch(3)
    assert c.last() == EpochEntry(3, 300)
    c.truncate_suffix_after_epoch(1)
    assert c.entries() == [EpochEntry(1, 100)]


def test_truncate_prefix():
    c = cache((1, 0), (2, 100), (3, 100), (4, 200))
    c.truncate_prefix(50)
    assert c.entries() == [EpochEntry(1, 50), EpochEntry(2, 100), EpochEntry(3, 100), EpochEntry(4, 200)]
    c.truncate_prefix(100)  # epoch 1 is wholly below; zero-message epoch 2 starts at 100: kept
    assert c.entries() == [EpochEntry(2, 100), EpochEntry(3, 100), EpochEntry(4, 200)]
    c.truncate_prefix(150)
    assert c.entries() == [EpochEntry(3, 150), EpochEntry(4, 200)]
    c.truncate_prefix(10_000)  # the last entry always stays
    assert c.entries() == [EpochEntry(4, 10_000)]
    d = cache((1, 0), (2, 0), (3, 0))  # zero-message epochs at the very start survive
    d.truncate_prefix(0)
    assert len(d) == 3


def test_copy_is_independent():
    c = cache((1, 0))
    d = c.copy()
    d.append(2, 10)
    assert c.entries() == [EpochEntry(1, 0)] and len(d) == 2


# --- consistent point -------------------------------------------------------------
def test_worked_example_450():
    local = cache((1, 100), (2, 300), (3, 500))
    master = [EpochEntry(1, 100), EpochEntry(2, 300), EpochEntry(3, 450)]
    # epoch 3 starts differ; epoch 2 matches: min(local end 500, master end 450)
    assert find_consistent_point(local, 700, master, 900) == ConsistentPoint(450, 2)


def test_worked_example_no_point():
    local = cache((1, 100), (2, 300), (3, 500))
    master = [EpochEntry(1, 200), EpochEntry(2, 500)]
    with pytest.raises(NoConsistentPoint) as ei:
        find_consistent_point(local, 700, master, 900)
    assert ei.value.reason == "diverged" and ei.value.code == "NO_CONSISTENT_POINT"


def test_same_master_new_epoch_is_found():
    # #9689: master re-elected with a new epoch; slave has only the old one.
    local = cache((1, 0))
    master = [EpochEntry(1, 0), EpochEntry(2, 100)]
    assert find_consistent_point(local, 100, master, 300) == ConsistentPoint(100, 1)


def test_zero_message_epoch_matches():
    local = cache((1, 0), (2, 100))  # slave learnt epoch 2 but no bytes of it
    master = [EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 100)]
    assert find_consistent_point(local, 100, master, 250) == ConsistentPoint(100, 2)


def test_slave_ahead_is_cut_to_master_end():
    local = cache((1, 0))
    master = [EpochEntry(1, 0), EpochEntry(2, 60)]
    assert find_consistent_point(local, 100, master, 80) == ConsistentPoint(60, 1)


def test_master_shorter_in_same_epoch():
    local = cache((1, 0))
    assert find_consistent_point(local, 100, [EpochEntry(1, 0)], 40) == ConsistentPoint(40, 1)


def test_empty_local_and_master_give_clear_reasons():
    with pytest.raises(NoConsistentPoint) as ei:
        find_consistent_point(EpochCache(), 0, [EpochEntry(1, 0)], 10)
    assert ei.value.reason == "local_empty"
    with pytest.raises(NoConsistentPoint) as ei:
        find_consistent_point(cache((1, 0)), 10, [], 0)
    assert ei.value.reason == "master_empty"


def test_entries_to_record_includes_zero_message_epochs():
    local = cache((1, 0))
    master = [EpochEntry(1, 0), EpochEntry(2, 100), EpochEntry(3, 100), EpochEntry(4, 300)]
    assert entries_to_record(local, master, 3) == [EpochEntry(2, 100), EpochEntry(3, 100)]
    assert entries_to_record(EpochCache(), master, 1) == [EpochEntry(1, 0)]
