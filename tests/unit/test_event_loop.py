"""autoswitch/base/event_loop: the loop a server runs on (``event_loop``)."""

from __future__ import annotations

import asyncio
import sys

import pytest
from autoswitch.broker.config import BrokerConfig

from autoswitch.base import event_loop
from autoswitch.base.errors import ConfigError


async def _which() -> str:
    return "uvloop" if type(asyncio.get_running_loop()).__module__.startswith("uvloop") else "asyncio"


def test_each_loop_runs_what_it_names():
    assert event_loop.run(_which(), "uvloop") == "uvloop"
    assert event_loop.run(_which(), "asyncio") == "asyncio"


def test_a_missing_uvloop_falls_back_to_asyncio_and_says_so(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "uvloop", None)     # what `import uvloop` meets when it is not installed
    assert event_loop.run(_which(), "uvloop", group="g") == "asyncio"
    out = capsys.readouterr()
    assert "event_loop_fallback" in out.out + out.err


def test_the_broker_config_refuses_an_unknown_loop(tmp_path):
    assert BrokerConfig(data_dir=str(tmp_path)).validate().event_loop == "uvloop"
    with pytest.raises(ConfigError) as e:
        BrokerConfig(data_dir=str(tmp_path), event_loop="tokio").validate()
    assert e.value.details.get("key") == "event_loop"
