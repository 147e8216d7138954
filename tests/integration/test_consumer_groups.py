"""Consumer groups whose progress survives failover (issue 17), real processes on 127.0.0.1:
3 controllers, a name server, 3 brokers in controller mode (ack mode all), a producer that never
stops. A consumer group reads and commits through the name server while the master is killed
with -9; a new consumer of the same group resumes at or after the last acknowledged commit on the
new master, and no acknowledged message is skipped."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from autoswitch.broker.route import RetryPolicy, RoutedConsumer

from autoswitch.proto import broker_pb2 as pb
from tests.integration.failover_harness import TOPIC, FailoverCluster, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CG = "audit-service"


async def _consume_some(c: FailoverCluster, seen: set[str], commits: list[int], batches: int) -> None:
    """Like `autoswitch consume --consumer-group`: fetch, read a batch, process, commit; ``commits``
    gets every offset whose commit was acknowledged."""
    rc = RoutedConsumer(c.namesrv, "g1", RetryPolicy(retry_deadline_s=30, rpc_timeout_s=2), c.tls("reader/ops"))
    try:
        r = await rc.fetch_offset(CG, TOPIC)
        assert r.status == pb.OK, r
        q = r.offset.queue_offset if r.offset.found else 0
        if commits:
            assert r.offset.found and q >= commits[-1], (q, commits[-1])
        for _ in range(batches):
            reply = await rc.consume(TOPIC, q, 50)
            assert reply.status == pb.OK, reply
            seen.update(m.msg_id for m in reply.messages)
            q = reply.next_queue_offset
            done = await rc.commit_offset(CG, TOPIC, q)
            if done.status == pb.OK:
                commits.append(q)
            await asyncio.sleep(0.02)
    finally:
        await rc.close()


def test_a_consumer_group_resumes_after_the_master_is_killed(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m1, e1 = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)
    acks = tmp_path / "acks.jsonl"
    prod = c.producer("producer", acks, duration_s=400, count=100_000, interval_ms=5)
    wait_until(lambda: len(read_ack_log(acks)) >= 100, 60, "acks before consuming")

    seen: set[str] = set()
    commits: list[int] = []
    asyncio.run(_consume_some(c, seen, commits, batches=10))
    assert commits, "the group committed before the failover"
    before_kill = commits[-1]

    c.broker_proc[c.master_name()].kill9()
    c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    # A new consumer of the group (the old one "crashed" with the master): it resumes at or
    # after the last acknowledged commit, on the new master, and goes on committing there.
    asyncio.run(_consume_some(c, seen, commits, batches=10))
    assert commits[-1] >= before_kill
    rc, forced = prod.stop(60)
    assert rc == 0 and not forced, prod.log_text()[-3000:]
    asyncio.run(_consume_some(c, seen, commits, batches=10_000 // 50))   # drain to the end

    acked = [a["msg_id"] for a in read_ack_log(acks)]
    skipped = [m for m in acked if m not in seen]
    assert not skipped, f"{len(skipped)} acked messages never delivered to the group, e.g. {skipped[:5]}"

    # The operator's view: committed offset, log end, lag.
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "consumer-progress", "-g", CG,
                          "--namesrv", c.namesrv, "--group", "g1", "--json"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["topics"]
    assert [r["topic"] for r in rows] == [TOPIC] and rows[0]["committed"] == commits[-1]
    assert rows[0]["lag"] == rows[0]["log_end"] - rows[0]["committed"]
