"""Acceptance (issue 32, part 2, the slave half): a slave that stalls with its connection up leaves
the SyncStateSet at `slave_stall_timeout_s`, not at the 15 s catch-up timeout, so writes in ack
mode `all` go on without it; it comes back once it acks again.

Real processes (static roles: master, two slaves). One slave is frozen with SIGSTOP (its TCP
connection stays open, no ack arrives: what a hung disk or a frozen event loop looks like to the
master). Counted, not timed: a write is acknowledged while the slave is still frozen, and the
master's log says why the member left (`stalled`).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal

import pytest
from autoswitch.broker.client.client import ProducerClient

from autoswitch.proto import broker_pb2 as pb
from tests.integration.test_broker_replication import (
    TOPIC,
    epoch_info,
    make_nodes,
    start,
    wait_caught_up,
    wait_until,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]


def _produce(addr: str, body: bytes) -> int:
    async def go() -> int:
        c = ProducerClient(addr, timeout_s=30)
        try:
            return (await c.produce(TOPIC, [body])).status
        finally:
            await c.close()

    return asyncio.run(go())


def test_a_frozen_slave_leaves_the_set_at_the_stall_timeout(procs, tmp_path):
    m, s2, s3 = make_nodes(tmp_path, 3)
    cfg = tmp_path / "master.toml"
    # The catch-up timeout far away: only the stall rule can take the frozen slave out in time.
    cfg.write_text("[ha]\nha_max_time_slave_not_catchup_s = 600\nslave_stall_timeout_s = 2.0\n")
    start(procs, m, "master", "--epoch", "1", "--ack-mode", "all", "--ack-timeout", "30", config=cfg)
    start(procs, s2, "slave", master=m)
    start(procs, s3, "slave", master=m)
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2, 3], 60, "both slaves in the SyncStateSet")
    assert _produce(m.addr, b"before") == pb.OK
    os.kill(s3.proc.pid, signal.SIGSTOP)
    try:
        # this write waits for the frozen slave until the stall rule takes it out; then acked
        assert _produce(m.addr, b"while frozen") == pb.OK
        assert epoch_info(m).sync_state_set == [1, 2]
        assert _produce(m.addr, b"still frozen") == pb.OK
        events = [json.loads(x) for x in m.proc.log_text().splitlines() if x.startswith("{")]
        left = [e for e in events if e.get("event") == "sync_state_set_proposed" and e.get("leaving")]
        assert left and left[-1]["leaving"] == {"3": "stalled"}, left
    finally:
        os.kill(s3.proc.pid, signal.SIGCONT)
    wait_caught_up(m, [s2, s3])
    wait_until(lambda: epoch_info(m).sync_state_set == [1, 2, 3], 60, "the slave back in the SyncStateSet")
    assert _produce(m.addr, b"after") == pb.OK
