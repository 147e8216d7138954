"""serve() in-process on a real store: the attach/detach seam used by controller mode, and the
fenced start (no role -> no reads, no writes)."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.broker.client.client import ConsumerClient, ProducerClient
from autoswitch.broker.config import load_config
from autoswitch.broker.process import serve
from autoswitch.broker.server import ControllerSeams

from autoswitch.proto import broker_pb2 as pb
from tests.procs import free_port
from tests.waiting import until

pytestmark = pytest.mark.integration


async def _ready(cond, task: asyncio.Task) -> None:
    """Wait until serve() has attached; a serve() that died is reported at once."""
    def attached() -> bool:
        if task.done():
            task.result()
            raise AssertionError("serve() returned before attaching")
        return cond()
    await until(attached, "serve() attached", interval_s=0.02)


def test_attach_runs_after_start_and_detach_before_stop(tmp_path):
    port = free_port()
    cfg = load_config(None, {"data_dir": str(tmp_path / "d"), "listen": f"127.0.0.1:{port}",
                             "ha_listen": f"127.0.0.1:{free_port()}", "role": "fenced"})
    calls: list[str] = []

    async def main():
        stop = asyncio.Event()

        async def attach(broker):
            calls.append(f"attach:{broker.role}")

            async def detach():
                # The store must still be open: detach runs before the broker stops.
                calls.append(f"detach:store_closed={broker.store._closed}")

            return detach

        task = asyncio.create_task(serve(cfg, stop, attach))
        await _ready(lambda: bool(calls), task)
        p = ProducerClient(f"127.0.0.1:{port}", max_retries=0)
        c = ConsumerClient(f"127.0.0.1:{port}", max_retries=0)
        try:
            r = await p.produce("t", [b"x"])
            assert r.status == pb.FENCED and r.results[0].status == pb.FENCED
            assert (await c.consume("t", 0, 10)).status == pb.FENCED
        finally:
            await p.close()
            await c.close()
        stop.set()
        assert await task == 0

    asyncio.run(main())
    assert calls[0] == "attach:fenced"
    assert calls[1] == "detach:store_closed=False"


def test_lease_fence_blocks_writes_until_renewed(tmp_path):
    port = free_port()
    # controller mode, with the test in the ReplicasManager's place: attach hands the broker the
    # write fence (what the core answers) and makes it master, as start_replicas and the core do
    cfg = load_config(None, {"data_dir": str(tmp_path / "d"), "listen": f"127.0.0.1:{port}",
                             "ha_listen": f"127.0.0.1:{free_port()}", "controllers": [f"127.0.0.1:{free_port()}"],
                             "ack_mode": "master"})
    fence: list[str | None] = [None]

    async def main():
        stop = asyncio.Event()
        got: list = []

        async def attach(broker):
            broker.enter_controller_mode(ControllerSeams(write_fence=lambda: fence[0]))
            broker.adopt_broker_id(1)
            await broker.become_master(1, frozenset({1}), 1)
            got.append(broker)
            return None

        task = asyncio.create_task(serve(cfg, stop, attach))
        await _ready(lambda: bool(got), task)
        broker = got[0]
        p = ProducerClient(f"127.0.0.1:{port}", max_retries=0)
        try:
            assert (await p.produce("t", [b"a"])).ok
            end = broker.store.max_offset
            fence[0] = "no controller majority for 6 s"
            broker.fence_changed(fence[0])
            r = await p.produce("t", [b"b"])
            assert r.status == pb.FENCED and broker.store.max_offset == end, "fenced: nothing appended"
            fence[0] = None
            broker.fence_changed(None)
            r = await p.produce("t", [b"c"])
            assert r.ok and r.results[0].queue_offset == 1
        finally:
            await p.close()
        stop.set()
        assert await task == 0

    asyncio.run(main())
