"""The pure cores load no I/O framework: importing one in a fresh interpreter must not pull in
asyncio or grpc (they are driven by explicit inputs; the adapters own the event loop and sockets)."""

from __future__ import annotations

import subprocess
import sys

import pytest

PURE = [
    "autoswitch.ha.codec", "autoswitch.ha.config", "autoswitch.ha.master_session", "autoswitch.ha.slave_session",
    "autoswitch.ha.sync_state", "autoswitch.ha.commit_point", "autoswitch.epochfile", "autoswitch.controller.raft.core",
    "autoswitch.controller.raft.raftlog", "autoswitch.controller.state.statemachine", "autoswitch.controller.failover.liveness",
    "autoswitch.controller.failover.lease",
    "autoswitch.controller.failover.takeover",
    "autoswitch.broker.replicas.lease", "autoswitch.broker.replicas.replicas_manager",
]


@pytest.mark.parametrize("module", PURE)
def test_pure_module_loads_no_io_framework(module):
    code = f"import sys, {module}; print(sorted(m for m in ('asyncio', 'grpc') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]", f"{module} loads {out.stdout.strip()}"


def test_broker_start_loads_no_console_or_metrics_libraries():
    """What a broker imports to serve with metrics off, and logging: rich (structlog's console
    renderer, which we never use) and the Prometheus client are not loaded; each cost every start
    tens of milliseconds (docs/operations.md "Process start"). rich stays importable afterwards."""
    code = (
        "import sys, autoswitch.broker.service, autoswitch.broker.cli\n"
        "from autoswitch.base import log\n"
        "log.configure('info'); log.get_logger('probe').info('probe_event')\n"
        "print(sorted(m for m in ('rich', 'prometheus_client') if m in sys.modules))\n"
        "import rich.table\n"
        "print('rich ok')\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.split() == ["[]", "rich", "ok"], out.stdout
    assert '"event":"probe_event"' in out.stderr
