"""Feature levels (autoswitch/base/features.py) and their place in the controller's replicated
state: the finalize rules, the FinalizeFeatures entry, snapshots and the refusal of a level a
member does not run."""

from __future__ import annotations

import pytest
from autoswitch.controller.messages import (
    FinalizeFeaturesRequest,
    MalformedRequest,
    decode_request,
    encode_request,
)
from autoswitch.controller.state.sm_snapshot import SnapshotCorrupt, decode_snapshot, encode_snapshot
from autoswitch.controller.state.statemachine import ControllerStateMachine

from autoswitch.base import features
from autoswitch.base.features import Level, plan_finalize, unsupported

# a table as later releases will have it: 2 can be lowered past, 3 cannot
LEVELS = {1: Level(1, "0.1.0", "baseline", False), 2: Level(2, "0.2.0", "safe", True),
          3: Level(3, "0.3.0", "new records", False)}


def test_this_build_runs_the_baseline():
    assert features.BASELINE_LEVEL == 1 and features.SUPPORTED_LEVEL >= 1
    assert set(features.LEVELS) == set(range(1, features.SUPPORTED_LEVEL + 1))


def test_raising_needs_every_member_and_names_who_is_behind():
    members = {"controller n1": 3, "controller n2": 2, "broker g1/1": 0, "broker g1/2": 3}
    p = plan_finalize(3, 1, members, LEVELS)
    assert not p.ok and p.behind == {"broker g1/1": 0, "controller n2": 2}
    assert "controller n2 (supports 2)" in p.reason and "broker g1/1 (no level heard" in p.reason
    ok = plan_finalize(2, 1, {k: 3 for k in members}, LEVELS)
    assert ok.ok and ok.changed
    same = plan_finalize(1, 1, members, LEVELS)
    assert same.ok and not same.changed


def test_unknown_levels_are_refused():
    p = plan_finalize(4, 1, {"controller n1": 9}, LEVELS)
    assert not p.ok and "unknown" in p.reason and "1..3" in p.reason


def test_lowering_only_past_levels_whose_records_stay_readable():
    assert plan_finalize(1, 2, {}, LEVELS).ok                   # 2 is downgrade-safe
    p = plan_finalize(2, 3, {}, LEVELS)
    assert not p.ok and "written at level 3 cannot be read at level 2" in p.reason
    assert not plan_finalize(1, 3, {}, LEVELS).ok
    # a member behind does not block a lowering (it is what lowering is for)
    assert plan_finalize(1, 2, {"broker g1/1": 1}, LEVELS).ok


def test_a_member_refuses_a_level_it_does_not_run():
    assert unsupported(1, 1) is None
    why = unsupported(2, 1)
    assert why is not None and "finalized feature level is 2" in why and "up to 1" in why


def test_the_level_is_replicated_state_and_survives_snapshots():
    sm = ControllerStateMachine()
    assert sm.state.feature_level == 1
    r = sm.apply(1, encode_request(FinalizeFeaturesRequest(level=1, ts_ms=1)))
    assert r.ok and r.remark == "unchanged"
    r = sm.apply(2, encode_request(FinalizeFeaturesRequest(level=2, ts_ms=2)))
    assert r.ok and sm.state.feature_level == 2
    state, index = decode_snapshot(sm.snapshot())
    assert state.feature_level == 2 and index == 2
    # the baseline is not written: a snapshot without it reads as level 1
    assert decode_snapshot(ControllerStateMachine().snapshot())[0].feature_level == 1


def test_bad_levels_never_enter_the_state():
    with pytest.raises(MalformedRequest):
        decode_request(b'{"t":"FinalizeFeatures","level":0,"ts_ms":1}')
    with pytest.raises(MalformedRequest):
        decode_request(b'{"t":"FinalizeFeatures","level":true,"ts_ms":1}')
    sm = ControllerStateMachine()
    sm.state.feature_level = 0        # as a damaged snapshot would carry it
    with pytest.raises(SnapshotCorrupt):
        decode_snapshot(encode_snapshot(sm.state, 1))
