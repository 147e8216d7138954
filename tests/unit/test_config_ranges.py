"""Every numeric config key has a range, checked at every way in (issue 29, item 10): TOML files,
the command line and runtime updates. The real CLI is run for the values that disabled the
controller or its failover before (exit 2, CONFIG_ERROR, no traceback)."""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import pytest
from autoswitch.broker.config import BrokerConfig, load_config
from autoswitch.broker.storage.store_config import StoreConfig
from autoswitch.controller import config as ccfg
from autoswitch.controller.config import ControllerConfig
from autoswitch.controller.raft.config import RaftConfig
from autoswitch.controller.store.config import StoreBackendConfig
from autoswitch.ha.config import HAConfig

from autoswitch.base.errors import ConfigError
from autoswitch.base.ranges import RANGES

CLASSES = (ControllerConfig, RaftConfig, StoreBackendConfig, BrokerConfig, StoreConfig, HAConfig)


def _numeric(cls) -> dict[str, object]:
    out = {}
    for f in dataclasses.fields(cls):
        d = f.default
        if isinstance(d, int | float) and not isinstance(d, bool):
            out[f.name] = d
    return out


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_every_numeric_key_has_a_range_holding_its_default(cls):
    ranges = RANGES[cls.__name__]
    fields = _numeric(cls)
    assert sorted(set(fields) - set(ranges)) == [], "numeric keys without a range"
    assert sorted(set(ranges) - set(fields)) == [], "ranges of keys that do not exist"
    for k, d in fields.items():
        lo, hi = ranges[k]
        assert lo <= d <= hi, (k, d, ranges[k])


def test_the_docs_list_every_range():
    r = subprocess.run([sys.executable, "scripts/gen_config_ranges.py", "--check"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr


BAD = (0, -1, 1 << 63, math.inf, math.nan)


@pytest.mark.parametrize("key", sorted(RANGES["RaftConfig"]))
def test_raft_keys_refuse_out_of_range(key):
    lo, hi = RANGES["RaftConfig"][key]
    for v in (lo - 1, hi + 1, *((math.inf, math.nan) if isinstance(_numeric(RaftConfig)[key], float) else ())):
        with pytest.raises(ConfigError) as e:
            ccfg._checked_raft({key: v})
        assert key in str(e.value)


@pytest.mark.parametrize("key", sorted(RANGES["BrokerConfig"]))
def test_broker_keys_refuse_out_of_range(tmp_path, key):
    lo, hi = RANGES["BrokerConfig"][key]
    is_float = isinstance(_numeric(BrokerConfig)[key], float)
    for v in (lo - 1, hi + 1, *((math.inf, math.nan) if is_float else ())):
        with pytest.raises(ConfigError) as e:
            load_config(None, {"data_dir": str(tmp_path), key: v})
        assert key in str(e.value)


@pytest.mark.parametrize("key", sorted(RANGES["ControllerConfig"]))
def test_controller_keys_refuse_out_of_range_in_files_and_at_runtime(tmp_path, key):
    lo, hi = RANGES["ControllerConfig"][key]
    is_float = isinstance(_numeric(ControllerConfig)[key], float)
    base = {"node_id": "n1", "peers": {"n1": "127.0.0.1:9"}, "data_dir": str(tmp_path)}
    for v in (lo - 1, hi + 1, *((math.inf, math.nan) if is_float else ())):
        with pytest.raises(ConfigError) as e:
            ccfg.load(None, **base, **{key: v})
        assert key in str(e.value)
    cfg = ccfg.load(None, **base)
    if key in ccfg.RUNTIME_KEYS:
        for raw in ("inf", "nan", "-1", "0", str(1 << 63)):
            with pytest.raises(ConfigError):
                cfg.update_runtime({key: raw})
        assert getattr(cfg, key) == _numeric(ControllerConfig)[key], "a refused update changed nothing"


def _controller_cli(tmp_path, toml: str) -> subprocess.CompletedProcess:
    p = tmp_path / "c.toml"
    p.write_text(toml)
    return subprocess.run([sys.executable, "-m", "autoswitch", "controller", "--config", str(p), "--node-id", "n1",
                           "--peers", "n1=127.0.0.1:1", "--data-dir", str(tmp_path / "d")],
                          capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("toml,needle", [
    ("[controller]\npeer_query_timeout_s = inf\n", "peer_query_timeout_s"),
    ("[controller]\n[raft]\ntick_interval_ms = 0\n", "tick_interval_ms"),
    ("[controller]\n[raft]\nmax_entry_bytes = 0\n", "max_entry_bytes"),
    ("[controller]\nmax_concurrent_rpcs = 9223372036854775807\n", "max_concurrent_rpcs"),
    ("[controller]\n[controller.sm]\nheartbeat_timeout = 100\n", "heartbeat_timeout"),
    ("[controller]\n[controller.sm]\nheartbeat_timeout_ms = -1\n", "heartbeat_timeout_ms"),
    ("auth = true\n[controller]\n", "outside the [controller] table"),
    ("[controller]\n[rafts]\ntick_interval_ms = 10\n", "rafts"),
    ("[controller]\nmetrics_listen = \"127.0.0.1:99999\"\n", "metrics_listen"),
    ("[controller]\n[raft]\nlisten_addr = 5\n", "listen_addr"),
    ("[controller]\nbackend = \"sql\"\n[store]\nurl = \"nonsense://x\"\n", "url"),
])
def test_the_controller_refuses_bad_files_with_config_error(tmp_path, toml, needle):
    r = _controller_cli(tmp_path, toml)
    assert r.returncode == 2, (r.returncode, r.stderr[-1500:])
    assert "Traceback" not in r.stderr
    last = json.loads([x for x in r.stderr.splitlines() if x.startswith("{")][-1])
    err = last.get("error", last)       # the CLI's error envelope, or the startup_failed log line
    assert err["code"] == "CONFIG_ERROR" and needle in err["message"], r.stderr[-1500:]


def test_the_broker_refuses_a_metrics_port_out_of_range(tmp_path):
    p = tmp_path / "b.toml"
    p.write_text('metrics_listen = "127.0.0.1:99999"\n')
    r = subprocess.run([sys.executable, "-m", "autoswitch", "broker", "--config", str(p), "--data-dir", str(tmp_path / "d"),
                        "--role", "master", "--epoch", "1", "--listen", "127.0.0.1:1", "--ha-listen", "127.0.0.1:2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-1500:]
    err = json.loads([x for x in r.stderr.splitlines() if x.startswith("{")][-1])["error"]
    assert err["code"] == "CONFIG_ERROR" and "metrics_listen" in err["message"]


def test_ranges_are_written_in_units_only_for_byte_quantities():
    """A count's bound is a plain number: broker_id's bound 2**53 once read "8388608 GiB"."""
    from autoswitch.base.ranges import describe, range_problem

    assert describe(RANGES["BrokerConfig"]["broker_id"], "broker_id") == f"[1, {1 << 53}]"
    assert describe(RANGES["HAConfig"]["max_slaves"], "max_slaves") == "[1, 1024]"
    assert describe((1024, 1 << 30), "max_batch_bytes") == "[1 KiB, 1 GiB]"
    assert describe((64, 1 << 30), "read_chunk_size") == "[64, 1 GiB]"
    problem = range_problem("BrokerConfig", "broker_id", 0)
    assert problem is not None and "GiB" not in problem and str(1 << 53) in problem
