"""The switch hold's rule (broker/switch_hold.py): when waiting may still change a produce's
answer. Every case names what a broker in that state would answer if it did not wait."""

from __future__ import annotations

import pytest
from autoswitch.broker.switch_hold import SwitchView, settled, switching

HOLD_S = 0.5


def view(role="slave", epoch=3, fence=None, switching_now=False, master_for_s=10.0) -> SwitchView:
    return SwitchView(switching_now, role, epoch, fence, master_for_s)


@pytest.mark.parametrize(("v", "expect", "waits"), [
    # not yet told of the election it was named master of: NOT_MASTER pointing back -> wait
    (view("slave", 3), 4, True),
    # told, a slave of that epoch (the hint was wrong or stale): NOT_MASTER is final
    (view("slave", 4), 4, False),
    (view("slave", 5), 4, False),
    # a broker with no role yet (starting) that knows no such epoch -> wait for its role
    (view("fenced", 0), 4, True),
    # switching (lock held or deposed): any request waits, with or without an expected epoch
    (view("slave", 3, switching_now=True), 4, True),
    (view("master", 3, fence="deposed", switching_now=True), 0, True),
    # the new master, waiting for its first lease: wait; long a master without it: FENCED now
    (view("master", 4, fence="lease_expired", master_for_s=0.01), 4, True),
    (view("master", 4, fence="lease_expired", master_for_s=HOLD_S + 1), 4, False),
    # a master fenced for anything else (stopping, disk stall, handover in doubt): answer now
    (view("master", 4, fence="handover outcome unknown", master_for_s=0.01), 4, False),
    # writable: no wait
    (view("master", 4), 4, False),
    (view("master", 4), 0, False),
    # no expected epoch and no switch: the usual answer at once
    (view("slave", 3), 0, False),
])
def test_settled(v, expect, waits):
    assert settled(v, expect, HOLD_S) is not waits


def test_switching_is_the_lock_or_the_deposed_fence():
    assert switching(True, None) and switching(False, "deposed")
    assert not switching(False, None) and not switching(False, "lease_expired")
