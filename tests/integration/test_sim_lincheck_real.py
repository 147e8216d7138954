"""Linearizability of real controller processes: 3 controllers, concurrent clients racing on
GetNextBrokerId / ApplyBrokerId (RocketMQ's registration handshake, a counter with idempotent
claims) while the Raft leader is killed once. The history (client invoke/return times, results)
is written as JSON lines and checked by tests/sim/lincheck.py."""

from __future__ import annotations

import asyncio
import random
import time

import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.codes import Code, ControllerRpcError

from tests.integration.controller_harness import Cluster, wait_leader
from tests.sim.lincheck import BrokerIdModel, Op, check, dump_jsonl, load_jsonl

pytestmark = pytest.mark.integration

CLIENTS = 4
RUN_S = 5.0
MAX_OPS_PER_CLIENT = 400
GROUPS = [f"lin{i}" for i in range(12)]
MAX_ID = 40          # well below MAX_REPLICAS_PER_GROUP: an apply never hits the replica limit


async def client_loop(cid: int, spec: str, stop_at: float, history: list[Op]) -> None:
    rng = random.Random(cid)
    async with ControllerClient(spec, deadline_s=4, rpc_timeout_s=1.5) as c:
        for n in range(MAX_OPS_PER_CLIENT):
            if time.monotonic() >= stop_at:
                return
            g = rng.choice(GROUPS)
            t0 = time.monotonic()
            try:
                nxt = await c.get_next_broker_id("lin", g)
                history.append(Op(cid, g, ("next",), nxt, t0, time.monotonic()))
            except ControllerRpcError:
                history.append(Op(cid, g, ("next",), None, t0, None))
                continue
            if nxt > MAX_ID:
                continue
            # mostly claim the id we read (races with other clients), sometimes a stale or
            # future one, sometimes re-claim an id with our own earlier code (idempotence)
            bid = nxt if rng.random() < 0.7 else max(1, nxt + rng.choice((-2, -1, 1)))
            code = f"c{cid}-{g}-{bid}" if rng.random() < 0.8 else f"c{cid}-{n}"
            t1 = time.monotonic()
            try:
                await c.apply_broker_id("lin", g, bid, code)
                history.append(Op(cid, g, ("apply", bid, code), "ok", t1, time.monotonic()))
            except ControllerRpcError as e:
                if e.reply_code == int(Code.CONTROLLER_BROKER_ID_INVALID):
                    history.append(Op(cid, g, ("apply", bid, code), "invalid", t1, time.monotonic()))
                else:   # timeout / unavailable: it may or may not have committed
                    history.append(Op(cid, g, ("apply", bid, code), None, t1, None))


def test_controller_history_with_leader_kill_is_linearizable(procs, tmp_path):
    cl = Cluster(procs, tmp_path)
    cl.start_all()
    history: list[Op] = []

    async def scenario() -> str:
        async with ControllerClient(cl.spec, deadline_s=15) as c:
            leader = await wait_leader(c)
        stop_at = time.monotonic() + RUN_S
        tasks = [asyncio.create_task(client_loop(i, cl.spec, stop_at, history)) for i in range(CLIENTS)]
        await asyncio.sleep(RUN_S * 0.35)
        cl.kill9(next(n for n, a in cl.addrs.items() if a == leader))
        await asyncio.gather(*tasks)
        return leader

    asyncio.run(scenario())
    path = tmp_path / "history.jsonl"
    dump_jsonl(history, path)
    ops = load_jsonl(path)
    applied_ok = [o for o in ops if o.input[0] == "apply" and o.output == "ok"]
    assert len(ops) >= 40 and applied_ok, f"too little traffic: {len(ops)} ops"
    r = check(ops, BrokerIdModel())
    assert r.ok, f"{r.detail}; history in {path}; linearizable prefix: {r.partial[-10:]}"
    print(f"lincheck: {r.ops} ops on {r.keys} groups, {len(applied_ok)} claims, "
          f"{sum(o.ret is None for o in ops)} unknown outcomes, {r.steps} search steps")

    # the checker bites on this very history: a read that went back in time after a completed claim
    for i in range(len(ops) - 1, -1, -1):
        o = ops[i]
        if o.input[0] == "next" and o.output is not None and o.output > 1 and any(
                a.key == o.key and a.ret is not None and a.ret < o.call for a in applied_ok):
            forged = ops[:i] + [Op(o.client, o.key, o.input, 1, o.call, o.ret)] + ops[i + 1:]
            assert not check(forged, BrokerIdModel()).ok
            break
    else:
        raise AssertionError("no read to forge")
