"""Consumer groups whose progress survives failover (issue 17), real processes on 127.0.0.1:
3 controllers, a name server, 3 brokers in controller mode (ack mode all), a producer that never
stops. A consumer group reads and commits through the name server while the master is killed
with -9; a new consumer of the same group resumes at or after the last acknowledged commit on the
new master, and no acknowledged message is skipped."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys

import pytest
from autoswitch.broker.client.fetch_client import fetched_messages
from autoswitch.broker.client.route import RetryPolicy, RoutedConsumer
from autoswitch.broker.client.routed_fetch import RoutedFetcher

from autoswitch.proto import broker_pb2 as pb
from tests.integration.failover_harness import TOPIC, FailoverCluster, read_ack_log, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CG = "audit-service"


async def _consume_some(c: FailoverCluster, seen: set[str], commits: list[int], batches: int,
                        via_fetch: bool = False) -> None:
    """Like `autoswitch consume --consumer-group`: fetch, read a batch, process, commit; ``commits``
    gets every offset whose commit was acknowledged. ``via_fetch``: read over the master's fetch
    port, found in its route (`consume --fetch auto`); offsets still over gRPC."""
    rc = RoutedConsumer(c.namesrv, "g1", RetryPolicy(retry_deadline_s=30, rpc_timeout_s=2), c.tls("reader/ops"))
    fetcher = RoutedFetcher(c.namesrv, "g1", RetryPolicy(retry_deadline_s=30, rpc_timeout_s=2), c.tls("reader/ops"))
    try:
        r = await rc.fetch_offset(CG, TOPIC)
        assert r.status == pb.OK, r
        q = r.offset.queue_offset if r.offset.found else 0
        if commits:
            assert r.offset.found and q >= commits[-1], (q, commits[-1])
        for _ in range(batches):
            if via_fetch:
                got = await fetcher.fetch(TOPIC, q, 50)
                assert got.status == pb.OK, got
                seen.update(m.msg_id for m in fetched_messages(got))
                q = got.next_queue_offset
            else:
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
        await fetcher.close()


async def _fetch_across_kill(c: FailoverCluster, master: str) -> None:
    """One RoutedFetcher reads from the master's fetch port, the master is killed -9, and the
    same fetcher's next read is answered by the new master's port (found through the name server)."""
    f = RoutedFetcher(c.namesrv, "g1", RetryPolicy(retry_deadline_s=60, rpc_timeout_s=2), c.tls("reader/ops"))
    try:
        r = await f.fetch(TOPIC, 0, 10)
        assert r.status == pb.OK and len(list(fetched_messages(r))) == 10, r.status
        before = f.addr
        assert before == f"127.0.0.1:{c.broker_fetch_port[master]}"
        c.broker_proc[master].kill9()
        r = await f.fetch(TOPIC, 0, 10)
        assert r.status == pb.OK and [m.queue_offset for m in fetched_messages(r)] == list(range(10))
        assert f.addr is not None and f.addr != before and f.route_refreshes >= 2
    finally:
        await f.close()


def test_a_consumer_group_resumes_after_the_master_is_killed(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path, fetch=True)
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

    asyncio.run(_fetch_across_kill(c, c.master_name()))
    c.wait_master(timeout=60, not_id=m1, min_epoch=e1 + 1)
    # A new consumer of the group (the old one "crashed" with the master): it resumes at or
    # after the last acknowledged commit, on the new master, and goes on committing there; it
    # reads over the new master's fetch port.
    asyncio.run(_consume_some(c, seen, commits, batches=10, via_fetch=True))
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
    rows = json.loads(out.stdout)["result"]["topics"]
    assert [r["topic"] for r in rows] == [TOPIC] and rows[0]["committed"] == commits[-1]
    assert rows[0]["lag"] == rows[0]["log_end"] - rows[0]["committed"]
    typo = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "consumer-progress", "-g", CG + "-typo",
                           "--namesrv", c.namesrv, "--group", "g1", "--json"], capture_output=True, text=True, timeout=60)
    assert typo.returncode == 1 and json.loads(typo.stdout)["error"]["code"] == "NOT_FOUND"
    assert "Traceback" not in typo.stderr


def test_an_unclean_takeover_takes_offsets_back_with_the_messages_and_says_so(procs, tmp_path):
    """Static mode, the operator's unclean takeover: the slave was down while the master acked
    50 more messages and the group's commit of offset 100; the master dies; the slave is made
    master. The commit went with the messages (one log): the group's offset is the last one the
    new master holds (50, never past its log end), and a consumer still at 100 is told
    OFFSET_OUT_OF_RANGE (with the log end) instead of waiting forever for offsets that will be
    reused by new messages."""
    from autoswitch.broker.client.client import AdminClient, ConsumerClient, ProducerClient

    from tests.procs import HOST, free_port, wait_port

    mport, mha, sport, sha = free_port(), free_port(), free_port(), free_port()
    fast_shrink = tmp_path / "master.toml"     # a stopped slave leaves the SyncStateSet after 1 s
    fast_shrink.write_text("[ha]\nha_max_time_slave_not_catchup_s = 1.0\n")
    master = procs.start("master", ["broker", "--group", "g1", "--broker-id", "1", "--role", "master", "--epoch", "1",
                                    "--listen", f"{HOST}:{mport}", "--ha-listen", f"{HOST}:{mha}",
                                    "--data-dir", str(tmp_path / "m"), "--ack-mode", "master",
                                    "--config", str(fast_shrink)])
    slave_args = ["broker", "--group", "g1", "--broker-id", "2", "--role", "slave", "--epoch", "1",
                  "--listen", f"{HOST}:{sport}", "--ha-listen", f"{HOST}:{sha}",
                  "--master-ha", f"{HOST}:{mha}", "--master-addr", f"{HOST}:{mport}",
                  "--data-dir", str(tmp_path / "s"), "--ack-mode", "master"]
    slave = procs.start("slave", slave_args)
    wait_port(mport, proc=master.popen)
    wait_port(sport, proc=slave.popen)
    m_addr, s_addr = f"{HOST}:{mport}", f"{HOST}:{sport}"

    async def status(addr):
        a = AdminClient(addr, max_retries=2)
        try:
            return await a.get_status()
        finally:
            await a.close()

    commit_log = tmp_path / "commits.jsonl"     # what the consumer was told (as `consume --commit-log`)

    async def commit(cons, offset: int) -> None:
        c = await cons.commit_offset(CG, TOPIC, offset)
        assert c.status == pb.OK
        with open(commit_log, "a") as f:
            f.write(json.dumps({"group": c.group, "broker_id": c.broker_id, "epoch": c.epoch, "consumer_group": CG,
                                "topic": TOPIC, "committed": offset}) + "\n")

    async def phase1():
        p, cons = ProducerClient(m_addr, max_retries=2), ConsumerClient(m_addr, max_retries=2)
        try:
            assert (await p.produce(TOPIC, [b"a"] * 50)).ok
            await commit(cons, 50)
            hi = (await status(m_addr)).max_offset
            while (await status(s_addr)).max_offset < hi:        # the slave has both
                await asyncio.sleep(0.05)
            slave.kill9()                                            # and nothing after them
            assert (await p.produce(TOPIC, [b"b"] * 50)).ok         # ack mode master: acked alone
            # readable once the dead slave left the SyncStateSet (confirmOffset = the master's end)
            while len((got := await cons.consume(TOPIC, 50, 100)).messages) < 50:
                assert got.status == pb.OK, got
                await asyncio.sleep(0.1)
            await commit(cons, 100)
        finally:
            await p.close()
            await cons.close()

    asyncio.run(phase1())
    master.kill9()
    slave = procs.start("slave-again", slave_args)
    wait_port(sport, proc=slave.popen)
    out = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "switch-role", "--broker", s_addr,
                          "--role", "master", "--epoch", "2", "--json"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr

    async def phase2():
        cons = ConsumerClient(s_addr, max_retries=2)
        try:
            stale = await cons.consume(TOPIC, 100, 10)               # where the consumer was
            assert stale.status == pb.OFFSET_OUT_OF_RANGE and stale.next_queue_offset == 50, stale
            f = await cons.fetch_offset(CG, TOPIC)
            assert f.status == pb.OK and f.offset.found and f.offset.queue_offset == 50 and not f.offset.clamped
            assert f.offset.log_end == 50
        finally:
            await cons.close()

    asyncio.run(phase2())
    wait_until(lambda: '"consume_offset_out_of_range"' in slave.log_text(), 30, "the broker said so")

    # The audit names the damage: the acknowledged commit of 100 is not in the master's log.
    from autoswitch.pipeline.exports import export_replica
    from autoswitch.pipeline.offsets_audit import audit_offsets

    slave.stop()
    paths = export_replica(tmp_path / "s", "g1", 2, tmp_path / "export" / "b2.index.jsonl")
    offsets = [json.loads(line) for line in open(paths["offsets"])]
    assert [(o["consumer_group"], o["committed"]) for o in offsets] == [(CG, 50)]
    told = [json.loads(line) for line in commit_log.read_text().splitlines()]
    found = audit_offsets({"g1": 2}, offsets, told)
    assert found["offsets_lost"] == 1 and found["lost"][0]["acked_committed"] == 100
    assert found["lost"][0]["master_committed"] == 50


def test_consumer_group_admin_list_describe_and_reset(procs, tmp_path):
    """Issue 33 item 3 (kafka-consumer-groups --list / --describe / --reset-offsets): list the
    groups of every broker group, describe one, and reset its offsets: a dry run first that
    changes nothing, then --execute to the earliest, to a time and to the latest."""
    import time

    from autoswitch.broker.client.route import RoutedProducer

    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)

    def cli(*argv: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *argv, "--namesrv", c.namesrv, "--json",
                            *c.tls_args("admin")], capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout.strip().splitlines()[-1])

    ids: list[str] = []

    async def produce(n: int) -> None:
        p = RoutedProducer(c.namesrv, "g1", tls=c.tls("admin"))
        try:
            for i in range(n):
                res = await p.produce(TOPIC, [f"m{i}".encode()])
                assert res and all(r.status == pb.OK for r in res)
                ids.extend(r.msg_id for r in res)
        finally:
            await p.close()

    asyncio.run(produce(20))
    t_ms = int(time.time() * 1000) + 1
    while int(time.time() * 1000) <= t_ms:    # every later message is born after t_ms
        time.sleep(0.001)
    asyncio.run(produce(10))
    seen: set[str] = set()
    commits: list[int] = []
    asyncio.run(_consume_some(c, seen, commits, batches=1))   # reads 30, commits 30... or fewer
    committed = commits[-1]

    # mqadmin producerConnection / consumerConnection (issue 64): this process produced over gRPC
    # and consumed with commits; the broker names it by address and user agent
    conns = cli("client-connections")
    assert conns["ok"], conns
    mine = [r for r in conns["result"]["connections"] if f"@{os.getpid()})" in r["agent"]]
    assert mine and all(r["agent"].startswith("autoswitch-py/") for r in mine), conns
    assert sum(r["produce_calls"] for r in mine) >= 30 and TOPIC in {t for r in mine for t in r["topics"]}, mine
    assert any(r["commit_calls"] and r["consumer_groups"] == [CG] for r in mine), mine
    by_cg = cli("client-connections", "-g", CG)["result"]["connections"]
    assert by_cg and all(CG in r["consumer_groups"] for r in by_cg), by_cg

    listed = cli("consumer-groups")
    assert listed["ok"], listed
    (row,) = [g for g in listed["result"]["consumer_groups"] if g["consumer_group"] == CG]
    assert row["groups"] == ["g1"] and row["topics"] == [TOPIC] and row["lag"] == 30 - committed, row
    desc = cli("consumer-group", "-g", CG)
    assert desc["ok"] and desc["result"]["offsets"][0]["committed"] == committed, desc
    assert desc["result"]["offsets"][0]["log_end"] == 30 and desc["result"]["offsets"][0]["owner"] is None  # no auth

    dry = cli("reset-offsets", "-g", CG, "--topic", TOPIC, "--to-earliest")
    assert dry["ok"] and not dry["result"]["executed"] and dry["result"]["offsets"][0]["new"] == 0, dry
    assert cli("consumer-group", "-g", CG)["result"]["offsets"][0]["committed"] == committed   # unchanged
    for flag, want in ((["--to-earliest"], 0), (["--to-time", str(t_ms)], 20), (["--to-latest"], 30),
                       (["--to-offset", "999"], 30)):
        done = cli("reset-offsets", "-g", CG, "--topic", TOPIC, *flag, "--execute")
        assert done["ok"] and done["result"]["offsets"][0]["result"] == "committed", done
        now = cli("consumer-group", "-g", CG)["result"]["offsets"][0]
        assert now["committed"] == want, (flag, now)
    # kafka-consumer-groups --shift-by, --by-duration, --all-topics (issue 64)
    for flag, want in ((["--shift-by", "-5"], 25), (["--shift-by", "-100"], 0), (["--shift-by", "7"], 7),
                       (["--by-duration", "PT1H"], 0), (["--by-duration", "PT0.001S"], 30)):
        done = cli("reset-offsets", "-g", CG, "--topic", TOPIC, *flag, "--execute")
        assert done["ok"] and done["result"]["offsets"][0]["new"] == want, (flag, done)
        assert cli("consumer-group", "-g", CG)["result"]["offsets"][0]["committed"] == want, flag
    every = cli("reset-offsets", "-g", CG, "--all-topics", "--to-earliest")
    assert every["ok"] and [(o["topic"], o["new"]) for o in every["result"]["offsets"]] == [(TOPIC, 0)], every
    assert cli("reset-offsets", "-g", CG, "--topic", TOPIC, "--by-duration", "30M")["error"]["code"] == "BAD_USAGE"
    missing = cli("consumer-group", "-g", "nobody")
    assert missing["error"]["code"] == "NOT_FOUND", missing

    # the resets are recorded as an operator's (issue 64 item 2): exported from a copy of the
    # master's store, the consumer's commit is a commit and every reset says so; the offsets
    # audit reports the key as reset by an operator, nothing backwards, nothing lost
    from autoswitch.pipeline.exports import export_replica
    from autoswitch.pipeline.offsets_audit import audit_offsets

    master = c.master_name()
    bid = c.status(master)["broker_id"]
    out = tmp_path / "export" / "m.index.jsonl"
    out.parent.mkdir()
    wait_until(lambda: c.status(master)["confirm_offset"] >= c.status(master)["max_offset"], 30, "all confirmed")
    export_replica(tmp_path / f"broker-{master}", "g1", bid, out, copy_first=True)
    rows = [json.loads(x) for x in out.with_name("m.offsets.jsonl").read_text().splitlines() if x.strip()]
    mine = [r for r in rows if r["consumer_group"] == CG]
    assert [r["operator_reset"] for r in mine][:1] == [False] and mine[-1]["operator_reset"], mine
    assert sum(r["operator_reset"] for r in mine) == 9, mine           # the nine --execute resets above
    told = [{"group": "g1", "consumer_group": CG, "topic": TOPIC, "committed": committed}]
    found = audit_offsets({"g1": bid}, rows, told)
    assert (found["offsets_backwards"], found["offsets_lost"], found["offsets_reset_by_operator"]) == (0, 0, 1), found

    # kafka-consumer-groups --delete: gone from every view; deleting it again finds nothing
    gone = cli("delete-consumer-group", "-g", CG)
    assert gone["ok"] and gone["result"]["groups"] == [{"group": "g1", "result": "deleted", "removed": 1,
                                                       "master_epoch": gone["result"]["groups"][0]["master_epoch"]}]
    wait_until(lambda: cli("consumer-group", "-g", CG).get("error", {}).get("code") == "NOT_FOUND", 30,
               "the tombstone is confirmed")
    assert CG not in [g["consumer_group"] for g in cli("consumer-groups")["result"]["consumer_groups"]]
    assert cli("delete-consumer-group", "-g", CG)["error"]["code"] == "NOT_FOUND"

    # messages (mqadmin queryMsgById): by msg_id, with the body; and the human consume output shows bodies
    found = cli("message", "--msg-id", ids[25])
    assert found["ok"], found
    (m,) = found["result"]["messages"]
    assert (m["group"], m["topic"], m["queue_offset"], m["body"]) == ("g1", TOPIC, 25, "m5"), m
    assert cli("message", "--msg-id", "no-such-id")["error"]["code"] == "NOT_FOUND"
    human = subprocess.run([sys.executable, "-m", "autoswitch", "consume", "--namesrv", c.namesrv, "--group", "g1",
                            "--topic", TOPIC, "--from", "20", "--count", "2", *c.tls_args("admin")],
                           capture_output=True, text=True, timeout=120)
    assert human.returncode == 0 and human.stdout.splitlines()[0].split("\t")[3] == "m0", human.stdout
