"""Issue 35 item 2 with real processes in network namespaces (tests/chaos/zones.py): the master's
whole zone (its broker and a controller) is cut off under acked produce; the next master is in
the zone the group prefers among the survivors (over the replica a data-only ranking picks), its
election names the lost zone, and nothing acknowledged or consumed is lost."""

from __future__ import annotations

import pytest

from tests.chaos import netns, zones

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def test_a_cut_zone_moves_the_master_to_the_preferred_surviving_zone(tmp_path):
    why = netns.can_run()
    if why is not None:
        pytest.skip(f"needs network namespaces: {why}")    # the CI machines run as root
    (tmp_path / "logs").mkdir()
    res = zones.run(tmp_path, seconds=12)
    assert res["problems"] == [], res
    assert res["acked_after_cut"] > 0 and res["new_master"] != res["old_master"], res
