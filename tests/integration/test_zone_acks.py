"""Issue 35 item 2(b) with real processes: acks that span zones (min_in_sync_zones).

Three brokers, two in zone za and one in zb, each with min_in_sync_zones 2 (ack mode all). While
the SyncStateSet spans both zones writes are acknowledged; with the zb replica gone the master
refuses them (IN_SYNC_REPLICAS_NOT_ENOUGH naming the zones) and no consumer sees one; back in sync,
they are acknowledged again. Then the zb replica and the master die: the za survivor is elected,
and the election says it cannot keep the promise (the controllers learn min_in_sync_zones and the
zones from heartbeats), in `admin explain` and the log line."""

from __future__ import annotations

import asyncio

import pytest
from autoswitch.broker.client.client import ProducerClient

from autoswitch.proto import broker_pb2 as pb
from tests.integration.controller_harness import admin
from tests.integration.failover_harness import TOPIC, FailoverCluster, consume_all, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

ZONE = {"b1": "za", "b2": "za", "b3": "zb"}


def _produce(addr: str, body: bytes) -> tuple[int, str]:
    async def run() -> tuple[int, str]:
        c = ProducerClient(addr, timeout_s=10)
        try:
            out = await c.produce(TOPIC, [body])
        finally:
            await c.close()
        return out.status, out.error_message

    return asyncio.run(run())


def test_acks_span_zones_and_an_election_that_cannot_keep_them_says_so(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    for name, zone in ZONE.items():
        c.broker_extra_args[name] = ["--zone", zone, "--min-in-sync-zones", "2"]
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    ctl = ",".join(c.ctl_addrs.values())
    if ZONE[c.master_name()] == "zb":          # the scenario wants the master where two replicas are
        to = c.status("b1")["broker_id"]
        assert admin("transfer-master", "--broker", c.broker_addr(c.master_name()), "--to", str(to))["ok"]
        m1, e1 = c.wait_master(timeout=60, min_epoch=e1 + 1)
        c.wait_sync_state_set({1, 2, 3}, timeout=60)
    master = c.master_name()
    addr = c.broker_addr(master)
    survivor = next(n for n in ZONE if n != master and ZONE[n] == "za")
    status, msg = _produce(addr, b"spans-both")
    assert status == pb.OK, msg

    c.broker_proc["b3"].kill9()
    before = c.status(master)["confirm_offset"]

    def refused_for_zones() -> str | None:
        s, m = _produce(addr, b"one-zone")
        assert s in (pb.OK, pb.IN_SYNC_REPLICAS_NOT_ENOUGH, pb.FLUSH_SLAVE_TIMEOUT), (pb.Status.Name(s), m)
        return m if s == pb.IN_SYNC_REPLICAS_NOT_ENOUGH and "min_in_sync_zones 2" in m else None

    said = wait_until(refused_for_zones, 30, "writes refused for spanning one zone")
    assert "['za']" in said, said
    # nothing written since reached a consumer: confirmOffset stood still on the master
    assert c.status(master)["confirm_offset"] == before
    seen = {m.body for m in consume_all(addr)}
    assert b"spans-both" in seen and b"one-zone" not in seen

    c.start_broker("b3")
    wait_until(lambda: _produce(addr, b"both-again")[0] == pb.OK, 60, "acks once zb is back in sync")

    # zb and then the master die: the survivor in za is elected, and the decision says what it cannot keep
    c.broker_proc["b3"].kill9()
    c.broker_proc[master].kill9()
    m2, e2 = c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    assert c.name_of_id(m2) == survivor
    decisions = admin("explain", "--controller", ctl, "--group", "g1")["result"]["decisions"]
    won = next(d for d in decisions if d["outcome"] == "elected" and d["master_epoch"] == e2)
    assert any("live replicas span 1 zone(s) ['za']" in w for w in won["warnings"]), won
    assert "min_in_sync_zones 2" in won["summary"], won
    assert any("zone_promise_at_risk" in p.log_text() for p in c.ctl_proc.values())
    s, m = _produce(c.broker_addr(survivor), b"alone")
    assert s == pb.IN_SYNC_REPLICAS_NOT_ENOUGH and "min_in_sync_zones 2" in m, (pb.Status.Name(s), m)
