from __future__ import annotations

import pytest
from autoswitch.broker.config import load_config

from autoswitch.base.errors import ConfigError


def test_file_then_cli_overrides(tmp_path):
    f = tmp_path / "broker.toml"
    f.write_text('group = "g1"\nbroker-id = 2\nack_mode = "master"\ndata_dir = "/d"\n[ha]\nheartbeat_interval_s = 0.5\n')
    cfg = load_config(f, {"ack_mode": "all", "broker_id": None, "listen": "127.0.0.1:1"})
    assert (cfg.group, cfg.broker_id, cfg.ack_mode, cfg.listen) == ("g1", 2, "all", "127.0.0.1:1")
    assert cfg.ha == {"heartbeat_interval_s": 0.5}


def test_namesrv_list_or_comma_string(tmp_path):
    f = tmp_path / "broker.toml"
    f.write_text('data_dir = "/d"\nnamesrv = ["10.0.0.1:9876", "10.0.0.2:9876"]\n')
    assert load_config(f, {}).namesrv == "10.0.0.1:9876,10.0.0.2:9876"
    f.write_text('data_dir = "/d"\nnamesrv = " 10.0.0.1:9876 , 10.0.0.2:9876"\n')
    assert load_config(f, {}).namesrv == "10.0.0.1:9876,10.0.0.2:9876"


def test_broker_table_accepted(tmp_path):
    f = tmp_path / "all.toml"
    f.write_text('[broker]\ngroup = "g2"\ndata_dir = "/d"\n')
    assert load_config(f, {}).group == "g2"


@pytest.mark.parametrize(
    "text,overrides",
    [
        ('data_dir = "/d"\nack_modee = "all"\n', {}),                 # typo is an error, not a default
        ('data_dir = "/d"\n', {"ack_mode": "some"}),
        ('data_dir = "/d"\n', {"role": "slave"}),                     # slave needs master_ha
        ('data_dir = "/d"\n', {"listen": "nohost"}),
        ('data_dir = "/d"\nbroker_id = "2"\n', {}),                   # wrong type
        ('data_dir = "/d"\nmax_request_bytes = 1073741824\n', {}),    # over the hard ceiling
        ('data_dir = "/d"\nmax_message_bytes = 0\n', {}),
        ('data_dir = "/d"\nhandover_timeout_ms = 0\n', {}),           # a handover must have time
        ('data_dir = "/d"\nhandover_timeout_ms = 86400000\n', {}),    # and not hold writes for a day
        ('data_dir = "/d"\nhandover_on_shutdown = "yes"\n', {}),      # wrong type
        ('data_dir = "/d"\nmax_consume_wait_ms = -1\n', {}),
        ('data_dir = "/d"\nmax_waiting_consumes = 10000000\n', {}),
        ('data_dir = "/d"\nnamesrv = "h:1,h:1"\n', {}),                # the same name server twice
        ('data_dir = "/d"\nnamesrv = ["h:1", "nope"]\n', {}),
        ('data_dir = "/d"\nnamesrv = [1]\n', {}),
        ("", {}),                                                       # data_dir required
        ("data_dir = \n", {}),                                          # not TOML
    ],
)
def test_bad_configs_are_typed_errors(tmp_path, text, overrides):
    f = tmp_path / "b.toml"
    f.write_text(text)
    with pytest.raises(ConfigError):
        load_config(f, overrides)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError):
        load_config(tmp_path / "nope.toml", {})


def test_broker_keys_outside_the_broker_table_are_refused(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text('[broker]\ngroup = "g"\n\n[store]\nsegment_bytes = 1\n\n[controller]\nx = 1\n')
    with pytest.raises(ConfigError, match="outside the \\[broker\\] table"):
        load_config(p, {})
    p.write_text('[broker]\ngroup = "g"\n\n[broker.store]\nsegment_bytes = 1048576\n\n[controller]\nx = 1\n')
    cfg = load_config(p, {"data_dir": str(tmp_path / "d"), "role": "master", "broker_id": 1})
    assert cfg.store == {"segment_bytes": 1048576}


def test_log_lines_name_no_broker_id_before_controller_mode_registration(tmp_path):
    """Controller mode: the controller names the brokerId; until then a log line says none,
    not broker_id's unused default (1), which tagged every broker's start as broker 1's."""
    static = load_config(None, {"data_dir": str(tmp_path), "broker_id": 3})
    assert static.known_broker_id == 3
    ctl = load_config(None, {"data_dir": str(tmp_path), "controllers": ["127.0.0.1:9878"]})
    assert ctl.known_broker_id is None
