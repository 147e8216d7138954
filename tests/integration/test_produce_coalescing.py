"""Concurrent sends of one routed producer share requests (broker/client/coalesce.py), on real
processes: 3 controllers, a name server, 3 brokers in controller mode (ack mode all, flush sync),
each serving a fetch port. 24 tasks share one RoutedProducer over gRPC and 24 share one
RoutedPortProducer over the fetch port (which takes one call at a time per connection: before the
coalescer, two tasks on one port producer read each other's replies); each send gets exactly its
own acknowledgements, the producers send fewer requests than calls, the master is killed with -9
between two waves and the same producers go on, and every acknowledged message is read back from
the new master. `autoswitch produce --namesrv --producers 8` does the same from the command line."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from autoswitch.broker.client.route import RetryPolicy, RoutedProducer
from autoswitch.broker.client.routed_fetch import RoutedPortProducer

from tests.integration.failover_harness import TOPIC, FailoverCluster, consume_all

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
SENDERS = 24
PER_SENDER = 15


async def _wave(producers: dict[str, RoutedProducer], wave: int) -> dict[str, list[str]]:
    """Every producer's SENDERS tasks send PER_SENDER calls of 1-3 messages each; returns the
    acknowledged msg_ids per producer (each call's results checked against its own ids)."""
    acked: dict[str, list[str]] = {name: [] for name in producers}

    async def sender(name: str, p: RoutedProducer, k: int) -> None:
        for i in range(PER_SENDER):
            n = 1 + (k + i) % 3
            ids = [f"{name}-w{wave}-{k}-{i}-{j}" for j in range(n)]
            results = await p.produce(TOPIC, [f"body {x}".encode() for x in ids], ids)
            assert [r.msg_id for r in results] == ids          # its own, in its order
            assert len({(r.epoch, r.phy_offset) for r in results}) == n
            acked[name].extend(ids)

    await asyncio.gather(*(sender(name, p, k) for name, p in producers.items() for k in range(SENDERS)))
    return acked


def test_concurrent_sends_share_requests_across_a_failover(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, fetch=True)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    policy = RetryPolicy(retry_deadline_s=60, rpc_timeout_s=3)
    victim = c.broker_proc[c.master_name()]

    async def go() -> tuple[dict[str, list[str]], dict[str, int], int]:
        producers: dict[str, RoutedProducer] = {
            "grpc": RoutedProducer(c.namesrv, "g1", policy=policy, tls=c.tls("producer/app")),
            "port": RoutedPortProducer(c.namesrv, "g1", policy=policy, tls=c.tls("producer/app")),
        }
        try:
            first = await _wave(producers, 1)
            sent = {name: p.requests_sent for name, p in producers.items()}
            calls = SENDERS * PER_SENDER
            for name, n in sent.items():
                assert 0 < n < calls, (name, n, calls)         # calls shared requests
            victim.kill9()
            second = await _wave(producers, 2)
            return {k: first[k] + second[k] for k in first}, sent, calls
        finally:
            for p in producers.values():
                await p.close()

    acked, sent, calls = asyncio.run(go())
    c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    cli = subprocess.run([sys.executable, "-m", "autoswitch", "produce", "--namesrv", c.namesrv, "--group", "g1",
                          "--topic", TOPIC, "--count", "300", "--producers", "8", "--size", "32", "--json",
                          *c.tls_args("producer/app")], capture_output=True, text=True, timeout=120)
    lines = [json.loads(x) for x in cli.stdout.splitlines() if x.strip()]
    assert cli.returncode == 0 and lines[-1]["ok"] and lines[-1]["result"]["acked"] == 300, cli.stdout[-2000:] + cli.stderr[-2000:]
    acked["cli"] = [x["msg_id"] for x in lines[:-1]]
    assert len(set(acked["cli"])) == 300
    on_master = {m.msg_id for m in consume_all(c.broker_addr(c.master_name()), TOPIC, tls=c.tls())}
    for name, ids in acked.items():
        if name != "cli":
            assert len(ids) == len(set(ids)) == 2 * sum(1 + x % 3 for k in range(SENDERS)
                                                        for x in range(k, k + PER_SENDER))
        missing = set(ids) - on_master
        assert not missing, (name, len(missing), sorted(missing)[:5])
    print({"requests_first_wave": sent, "calls_per_producer_and_wave": calls})
