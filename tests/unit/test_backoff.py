"""The one retry back-off: doubles from min to max, jitter within [50 %, 100 %] of the step, reset."""

from __future__ import annotations

import pytest

from autoswitch.base.backoff import Backoff


def test_doubles_up_to_the_cap_and_resets():
    b = Backoff(0.1, 1.0, jitter=False)
    assert [round(b.next(), 3) for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    assert b.attempt == 6
    b.reset()
    assert b.next() == 0.1


def test_jitter_stays_within_half_to_full_step():
    draws = iter([0.0, 1.0, 0.5])
    b = Backoff(0.2, 10.0, rand=lambda: next(draws))
    assert [round(b.next(), 3) for _ in range(3)] == [0.1, 0.4, 0.6]


def test_many_failures_never_overflow():
    b = Backoff(0.001, 5.0, jitter=False)
    for _ in range(10_000):
        d = b.next()
    assert d == 5.0


@pytest.mark.parametrize("lo,hi", [(0, 1), (-1, 1), (2, 1)])
def test_bad_bounds_are_refused(lo, hi):
    with pytest.raises(ValueError):
        Backoff(lo, hi)
