"""Config typos and wrong types: one error naming every bad key and its rule, "did you mean" for a
close key (issue 15 item 5)."""

from __future__ import annotations

import pytest
from autoswitch.broker.config import load_config
from autoswitch.controller.config import load as load_controller

from autoswitch.base.errors import ConfigError


def test_broker_typo_suggests_the_key(tmp_path):
    f = tmp_path / "b.toml"
    f.write_text("[broker]\nheartbeat_timout_ms = 5000\n")
    with pytest.raises(ConfigError) as ei:
        load_config(f, {"data_dir": str(tmp_path / "d")})
    assert "did you mean 'heartbeat_timeout_ms'" in ei.value.message


def test_every_wrong_type_is_named_at_once(tmp_path):
    f = tmp_path / "b.toml"
    f.write_text('[broker]\nack_timeout_s = "x"\nmax_inflight_produce = true\nhandover_on_shutdown = 1\n')
    with pytest.raises(ConfigError) as ei:
        load_config(f, {"data_dir": str(tmp_path / "d")})
    msg = ei.value.message
    assert "'ack_timeout_s' must be a number" in msg and "'max_inflight_produce' must be an integer" in msg
    assert "'handover_on_shutdown' must be true or false" in msg
    assert ei.value.details["keys"] == ["ack_timeout_s", "handover_on_shutdown", "max_inflight_produce"]


def test_controller_and_raft_typos(tmp_path):
    f = tmp_path / "c.toml"
    f.write_text("[controller]\nscan_intervall_ms = 100\n")
    with pytest.raises(ConfigError) as ei:
        load_controller(f, node_id="n1", peers="n1=127.0.0.1:1", data_dir=str(tmp_path))
    assert "did you mean 'scan_interval_ms'" in ei.value.message
    f.write_text("[raft]\nheartbeat_interval_ms = \"fast\"\n")
    with pytest.raises(ConfigError) as ei:
        load_controller(f, node_id="n1", peers="n1=127.0.0.1:1", data_dir=str(tmp_path))
    assert "[raft] key 'heartbeat_interval_ms' must be an integer" in ei.value.message
