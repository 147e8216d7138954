"""The test harness's listening ports: each pytest-xdist worker draws from its own slice."""

from __future__ import annotations

import pytest

from tests import procs


@pytest.fixture
def no_worker(monkeypatch):
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    return monkeypatch


def test_one_process_draws_from_the_whole_range(no_worker):
    low, high = procs.listen_port_range()
    assert low == procs.LISTEN_PORTS_FROM and high > low + 1000


@pytest.mark.parametrize("count", [2, 3])
def test_workers_get_disjoint_slices_inside_the_range(no_worker, count):
    whole = procs.listen_port_range()
    slices = []
    for w in range(count):
        no_worker.setenv("PYTEST_XDIST_WORKER", f"gw{w}")
        no_worker.setenv("PYTEST_XDIST_WORKER_COUNT", str(count))
        slices.append(procs.listen_port_range())
    for (lo, hi), (lo2, _) in zip(slices[:-1], slices[1:], strict=True):
        assert lo < hi < lo2                          # ordered, disjoint
    assert slices[0][0] == whole[0] and slices[-1][1] <= whole[1]
    assert all(hi - lo > 1000 for lo, hi in slices)   # room for the playground's 36-port blocks


@pytest.mark.parametrize("name,count", [("gw5", "2"), ("main", "2"), ("gwx", "2"), ("gw0", "many")])
def test_an_unexpected_worker_name_falls_back_to_the_whole_range(no_worker, name, count):
    whole = procs.listen_port_range()
    no_worker.setenv("PYTEST_XDIST_WORKER", name)
    no_worker.setenv("PYTEST_XDIST_WORKER_COUNT", count)
    assert procs.listen_port_range() == whole


def test_a_port_block_stays_in_the_slice_and_is_not_handed_out_again_until_the_slice_comes_round(no_worker):
    no_worker.setenv("PYTEST_XDIST_WORKER", "gw1")
    no_worker.setenv("PYTEST_XDIST_WORKER_COUNT", "2")
    low, high = procs.listen_port_range()
    width = high - low + 1
    first = procs.free_block(40)
    taken = set(range(first, first + 40))
    assert low <= first and first + 39 <= high
    # a whole suite's worth of clusters: far more ports than the slice holds (a set of every port
    # ever handed out once filled the slice and left no room for a 40-port block)
    handed = 40
    while handed < 3 * width:
        n = 40 if handed % 400 == 0 else 1
        base = procs.free_block(n) if n > 1 else procs.free_port()
        block = set(range(base, base + n))
        assert low <= base and base + n - 1 <= high
        if handed + n <= width - 200:                # the first lap: nothing comes back yet
            assert not block & taken, (handed, base)
        taken |= block
        handed += n
    assert len(taken) > width - 100                  # it walked the slice (a few may be held by others)


def test_a_port_held_by_a_listener_is_never_handed_out(no_worker):
    import socket
    with socket.socket() as held:
        held.bind((procs.HOST, 0))
        port = held.getsockname()[1]
        no_worker.setattr(procs, "listen_port_range", lambda: (port - 2, port + 2))
        no_worker.setattr(procs, "_ring", None)
        got = {procs.free_port() for _ in range(12)}
        assert port not in got and got <= set(range(port - 2, port + 3))
        with pytest.raises(RuntimeError, match="no 3 consecutive free ports"):
            procs.free_block(3)                      # every 3-block of 5 ports crosses the held one
