"""The storage simulator (tests/sim/store_sim.py) in the default suite: the real MessageStore on
the simulated disk (power cuts that lose and tear unsynced writes, failed fsyncs, bit flips) for
50 seeds, zero violations; the same seed gives the same run; and the simulated disk keeps its
own promises (what a sync covers survives a power cut, a failed sync loses its writes).
Reproduce a seed with ``python -c "from tests.sim.store_sim import run_seed; print(run_seed(N))"``."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autoswitch.base.fsutil import FsyncFailed
from tests.sim import store_sim
from tests.sim.sim_disk import SimDisk

CHUNK = 25
SEEDS = 50


@pytest.mark.parametrize("start", range(0, SEEDS, CHUNK))
def test_store_seeds_have_no_violation(start):
    totals = {"acked": 0, "restarts": 0}
    for seed in range(start, start + CHUNK):
        st = store_sim.run_seed(seed)
        totals["acked"] += st.acked
        totals["restarts"] += st.restarts
    # the runs did something: acknowledged messages checked across many restarts
    assert totals["acked"] > 1000 and totals["restarts"] > 5 * CHUNK, totals


def test_same_seed_same_run():
    a, b = store_sim.run_seed(7), store_sim.run_seed(7)
    assert (a.messages, a.acked, a.restarts, a.disk) == (b.messages, b.acked, b.restarts, b.disk)


def test_sim_disk_keeps_synced_bytes_and_loses_a_failed_syncs_writes():
    disk = SimDisk(random.Random(1))
    folder = disk.folder(Path("/sim/log"))
    f = folder.open("a")
    f.pwrite(b"synced", 0)
    f.sync(data_only=True)
    folder.sync()
    f.pwrite(b"-lost-by-eio", 6)
    disk.fail_syncs = 1
    with pytest.raises(FsyncFailed):
        f.sync(data_only=True)
    f.sync(data_only=True)          # "succeeds": the pages were marked clean
    for _ in range(20):
        disk.power_cut()
        assert bytes(folder.open("a").pread(100, 0)) == b"synced"
    g = folder.open("b")            # never synced, its folder neither: may vanish
    g.pwrite(b"x" * 100, 0)
    disk.power_cut()
    assert "a" in folder.names()
