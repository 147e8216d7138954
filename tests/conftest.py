from __future__ import annotations

import pytest

from tests.procs import ProcGroup, free_port


@pytest.fixture
def procs(tmp_path, request):
    """Real processes for one test; ended by PID at teardown, logs shown on failure."""
    group = ProcGroup(tmp_path / "logs")
    yield group
    failed = getattr(request.node, "rep_call", None)
    if failed is not None and failed.failed:
        print(group.dump_logs())
    group.stop_all()


@pytest.fixture
def port_factory():
    return free_port


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
