"""The cluster bench-failover and bench-rolling share: the playground launcher ("fast" profile,
3 controllers one of which is embedded in the name server, one group x 3 replicas) with the
routed DemoProducer writing one message at a time, and the end-of-run durability check."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.procs import free_block

HOST = "127.0.0.1"
GROUP, TOPIC = "g0", "bench"


def pct(xs: list[float], q: float) -> float | None:
    if not xs:
        return None
    s = sorted(xs)
    # nearest-rank: with 20 samples p99 is the maximum
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 1)) - 1))
    return round(s[k], 3)


@dataclass
class ProducingCluster:
    cluster: Any            # autoswitch.app.playground_cluster.Cluster
    client: Any             # autoswitch.controller.client.ControllerClient
    producer: Any           # autoswitch.app.demo_traffic.DemoProducer
    base_port: int
    ack_path: Path
    _stop: asyncio.Event
    _task: asyncio.Future

    async def settle(self, log: Any, what: str, min_acks: int = 20) -> None:
        """Before a round: a full SyncStateSet and ``min_acks`` more acks (each bounded)."""
        from autoswitch.app.demo_traffic import wait_full_sync_state_set

        if len(await wait_full_sync_state_set(self.client, GROUP, 3, 30)) < 3:
            log(f"{what}: SyncStateSet did not reach 3 members within 30 s; going on anyway")
        n0 = len(self.producer.acks)
        t_wait = time.monotonic() + 10
        while len(self.producer.acks) < n0 + min_acks and time.monotonic() < t_wait:
            await asyncio.sleep(0.02)

    def restart(self, child: Any) -> Any:
        """Start a stopped broker again (same port, same data dir); its new Child."""
        g, r = child.name.split("-")[1:3]
        return self.cluster.start_broker(int(g[1:]), int(r[1:]))

    async def finish(self, log: Any, what: str) -> tuple[int, int]:
        """Stop producing; (acked, acked but not served by the final master)."""
        from autoswitch.app.demo_traffic import load_ack_log, lost_acked

        self._stop.set()
        with contextlib.suppress(BaseException):
            await asyncio.wait_for(self._task, 10)
        acked = {a["msg_id"] for a in load_ack_log(self.ack_path)}
        final = await self.client.get_replica_info(GROUP)
        if not final.master_address:
            log(f"{what}: no master at the end: every acked message counts as unavailable")
            return len(acked), len(acked)
        missing = await lost_acked(final.master_address, TOPIC, acked, wait_s=15, tls=self.cluster.tls)
        return len(acked), len(missing)


async def start_cluster(cluster: Any, client: Any, timeout_s: float = 60) -> None:
    """The playground's cluster up for a benchmark: controllers, a leader, brokers, every master."""
    cluster.start_controllers()
    await cluster.wait_ports(list(cluster.children.values()), timeout_s)
    await cluster.wait_leader(client, timeout_s)
    cluster.start_brokers()
    await cluster.wait_masters(client, timeout_s)


@contextlib.asynccontextmanager
async def producing_cluster(data_dir: Path, *, max_s: float, tls: bool = False, broker_extra: tuple[str, ...] = (),
                            producer_rpc_timeout_s: float = 2.0, backend: str = "raft") -> AsyncIterator[ProducingCluster]:
    """Start the cluster, wait for masters, start producing (bounded by ``max_s``); stop every
    process it started, by PID, on the way out. ``producer_rpc_timeout_s``: how long one produce
    may hang on a frozen master before the producer retries; ``backend``: the playground's
    controller backend (raft, sql = a PostgreSQL started for the run, sqlite)."""
    from autoswitch.controller.client import ControllerClient

    from autoswitch.app.demo_traffic import DemoProducer
    from autoswitch.app.playground_cluster import Cluster, Layout

    base = free_block(30)
    layout = Layout(data_dir, base_port=base, groups=1, replicas=3, cluster="bench", profile="fast",
                    broker_extra=list(broker_extra), secure=tls, backend=backend)
    cluster = Cluster(layout)
    cluster.prepare_dir(fresh=True, wipe=True)
    client = ControllerClient(layout.controller_addrs(), deadline_s=2.0, max_attempts=4, rpc_timeout_s=1.0,
                              tls=cluster.tls)
    stop = asyncio.Event()
    producer = None
    task: asyncio.Future | None = None
    try:
        await start_cluster(cluster, client)
        ack_path = data_dir / "acks.jsonl"
        producer = DemoProducer(layout.namesrv, GROUP, TOPIC, ack_path, tls=cluster.tls,
                                rpc_timeout_s=producer_rpc_timeout_s)
        task = asyncio.ensure_future(producer.run(stop, max_messages=10_000_000, max_s=max_s))
        yield ProducingCluster(cluster, client, producer, base, ack_path, stop, task)
    finally:
        stop.set()
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(BaseException):
                await task
        if producer is not None:
            await producer.close()
        await client.close()
        cluster.stop_all()
        cluster.release_dir()
