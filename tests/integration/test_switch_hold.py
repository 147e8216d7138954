"""A produce redirected to a broker as the new master waits for that broker's switch instead of
bouncing back (ProduceRequest.expect_master_epoch, broker key master_switch_hold_ms). Real
processes in static-role mode, switched with SwitchRole; the hold is watched through the
broker's own /metrics (autoswitch_broker_produce_held), never through sleeps.

- held while the broker is still a slave of an older MasterEpoch, written once it is master of it;
- a broker that already knows the epoch (a slave of it) answers NOT_MASTER at once, naming the
  master and the MasterEpoch it knows (the redirect's two halves);
- an epoch nobody will ever reach costs one hold (the configured time) and then NOT_MASTER: the
  hold delays an answer, it never admits a write.
"""

from __future__ import annotations

import asyncio
import urllib.request

import pytest
from autoswitch.broker.client.client import AdminClient, ProducerClient

from autoswitch.proto import broker_pb2 as pb
from tests.integration.test_broker_replication import Node, make_nodes, start
from tests.procs import HOST, free_port
from tests.waiting import until

pytestmark = pytest.mark.integration


def held(metrics_port: int) -> float:
    with urllib.request.urlopen(f"http://{HOST}:{metrics_port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith("autoswitch_broker_produce_held "):
                return float(line.split()[1])
    raise AssertionError("autoswitch_broker_produce_held not exported")


def _pair(procs, tmp_path, hold_ms: int) -> tuple[Node, Node, int]:
    m, s = make_nodes(tmp_path, 2)
    mport = free_port()
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "master")
    start(procs, s, "slave", "--master-switch-hold-ms", str(hold_ms), "--metrics-listen", f"{HOST}:{mport}",
          master=m)
    return m, s, mport


def test_redirected_produce_waits_for_the_switch_and_is_written(procs, tmp_path):
    m, s, mport = _pair(procs, tmp_path, 10_000)

    async def run() -> None:
        c, am, as_ = ProducerClient(s.addr, timeout_s=60), AdminClient(m.addr), AdminClient(s.addr)
        try:
            # The broker already knows MasterEpoch 1 and follows its master: answered at once.
            now = await c.produce("t", [b"a"], expect_master_epoch=1)
            assert now.status == pb.NOT_MASTER, now
            assert (now.master_addr, now.master_epoch) == (m.addr, 1)
            task = asyncio.ensure_future(c.produce("t", [b"b"], ["held-1"], expect_master_epoch=2))
            await until(lambda: held(mport) == 1, "the produce is held", 30)
            assert not task.done()
            assert (await am.switch_role("slave", 2, s.ha_addr, s.addr)).status == pb.OK
            assert (await as_.switch_role("master", 2)).status == pb.OK
            out = await asyncio.wait_for(task, 30)
            assert out.ok, out
            assert [(r.msg_id, r.epoch) for r in out.results] == [("held-1", 2)]
        finally:
            for x in (c, am, as_):
                await x.close()

    asyncio.run(run())
    assert held(mport) == 0


def test_an_epoch_never_reached_is_refused_after_one_hold(procs, tmp_path):
    m, s, mport = _pair(procs, tmp_path, 300)

    async def run() -> None:
        c = ProducerClient(s.addr)
        try:
            out = await c.produce("t", [b"x"], expect_master_epoch=99)
            assert out.status == pb.NOT_MASTER, out
            assert (out.master_addr, out.master_epoch) == (m.addr, 1)
            assert not out.acked()
        finally:
            await c.close()

    asyncio.run(run())
    assert held(mport) == 0
