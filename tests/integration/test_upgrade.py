"""Issue 34 item 4, the short version of `make upgrade-test` (tests/upgrade/run.py): one group of
three brokers, three controllers and a name server of the previous release (docs/releases.toml)
under acked produce and a consumer group, replaced one process at a time by this tree and rolled
back; then the planted incompatible change (an EpochFile of format version 2) refused by name on
the way back. Nothing acked is lost in either."""

from __future__ import annotations

import pytest

from tests.upgrade.run import planted, run

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]


def test_rolling_upgrade_and_rollback_lose_nothing_and_the_consumer_group_resumes(tmp_path):
    res = run(tmp_path / "rolling", groups=1, installs=tmp_path)
    assert "error" not in res, res.get("error")
    assert res["steps"] == 14 and res["master_restarts"] == 2, res
    assert res["from"] != res["to"] and res["versions_after_upgrade"] == [res["to"]], res
    assert res["acked"] > 0 and res["lost_acked"] == 0, res
    assert res["consumer_resumed"] and not res["refused"], res
    print(f"upgrade {res['from']} -> {res['to']} -> back: {res['acked']} acked, largest ack gap per master restart "
          f"p99 {res['gap_ms_p99']} ms")


def test_a_planted_incompatible_format_is_refused_by_name_on_rollback(tmp_path):
    res = planted(tmp_path / "planted", installs=tmp_path)
    assert "error" not in res, res.get("error")
    assert res["written_version"] == 2 and res["exit_code"] == 2 and res["refused_cleanly"], res
    assert "format version 2" in res["message"] and "reads version 1" in res["message"], res
    assert res["acked"] > 0 and res["lost_acked"] == 0, res
