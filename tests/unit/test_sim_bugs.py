"""Each planted bug (tests/sim only, never in production code) is caught within its bound."""

from __future__ import annotations

import pytest

from tests.sim.bugs import CATCH_BOUND, first_catch
from tests.sim.common import BUGS


def test_every_planted_bug_has_a_bound():
    assert set(CATCH_BOUND) == set(BUGS)


@pytest.mark.parametrize("bug", BUGS)
def test_sim_planted_bug_is_caught(bug):
    found = first_catch(bug, CATCH_BOUND[bug])
    assert found is not None, f"planted bug {bug} not caught within {CATCH_BOUND[bug]} seeds"
