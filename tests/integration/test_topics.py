"""Issue 33 item 3, topics (mqadmin updateTopic / deleteTopic / topicStatus, kafka-topics), against
real processes: settings are records of the replicated log, so a failover keeps them (RocketMQ's
helm #33: topics gone after a master switch); a deleted topic takes no writes until created again;
with `--no-auto-create-topics` only created topics take writes."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from autoswitch.broker.client.client import AdminClient, ProducerClient

from autoswitch.proto import broker_pb2 as pb
from tests.integration.failover_harness import GROUP, FailoverCluster, wait_until
from tests.procs import HOST, free_port, wait_port

pytestmark = pytest.mark.integration


def _status(addr: str, topic: str, body: bytes) -> int:
    async def go() -> int:
        p = ProducerClient(addr, timeout_s=10)
        try:
            out = await p.produce(topic, [body])
        finally:
            await p.close()
        return out.status

    return asyncio.run(go())


def test_topic_settings_survive_a_failover_and_delete_stops_writes(procs, tmp_path):
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    m, epoch = c.wait_master(timeout=60)
    c.wait_sync_state_set({1, 2, 3}, timeout=60)

    def cli(*argv: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *argv, "--namesrv", c.namesrv, "--json"],
                           capture_output=True, text=True, timeout=120)
        return json.loads(r.stdout.strip().splitlines()[-1])

    made = cli("topic-create", "--topic", "orders", "--max-message-bytes", "100")
    assert made["ok"] and [g["result"] for g in made["result"]["groups"]] == ["created"], made
    master = c.broker_addr(c.master_name())
    assert _status(master, "orders", b"x" * 200) == pb.MESSAGE_TOO_LARGE
    assert _status(master, "orders", b"x" * 50) == pb.OK
    (row,) = cli("topic-describe", "--topic", "orders")["result"]["groups"]
    assert row["configured"] and row["max_message_bytes"] == 100 and row["max_queue_offset"] == 1, row

    # the master dies: the new one holds the setting (it is in the replicated log)
    c.broker_proc[c.master_name()].kill9()
    c.wait_master(timeout=60, not_id=m, min_epoch=epoch + 1)
    master = c.broker_addr(c.master_name())
    assert _status(master, "orders", b"x" * 200) == pb.MESSAGE_TOO_LARGE
    assert _status(master, "orders", b"x" * 50) == pb.OK
    wait_until(lambda: cli("topic-describe", "--topic", "orders").get("ok"), 60, "the new master's route")

    gone = cli("topic-delete", "--topic", "orders")
    assert gone["ok"], gone
    assert _status(master, "orders", b"x") == pb.NOT_ALLOWED
    listed = {t["topic"]: t for t in cli("topics")["result"]["topics"]}
    assert listed["orders"]["deleted"] and listed["orders"]["messages"] == 2, listed
    assert cli("topic-delete", "--topic", "orders")["ok"] is False           # already deleted: NOT_FOUND
    assert cli("topic-create", "--topic", "orders")["ok"]                    # writable again, no limit of its own
    assert _status(master, "orders", b"x" * 200) == pb.OK
    again = cli("topic-create", "--topic", "orders", "--max-message-bytes", "300")
    assert [g["result"] for g in again["result"]["groups"]] == ["updated"], again


def test_topic_names_and_what_the_commands_answer(procs, tmp_path):
    """Issue 64 item 7: a new topic's name follows RocketMQ's and Kafka's rules ('bad topic/name'
    and '../../escape' were accepted); topic-delete of a topic no group has is NOT_FOUND (it was
    NOT_ALL_CHANGED); a produce to a deleted topic is refused with the broker's reason and status,
    not RETRIES_EXHAUSTED with 0 retries."""
    c = FailoverCluster(procs, tmp_path)
    c.start_all()
    c.wait_master(timeout=60)

    def run(*argv: str) -> tuple[int, dict]:
        r = subprocess.run([sys.executable, "-m", "autoswitch", *argv, "--json"], capture_output=True, text=True,
                           timeout=120)
        return r.returncode, json.loads(r.stdout.strip().splitlines()[-1])

    for bad in ("bad topic/name", "../../escape", "..", "x" * 250, "tab\there"):
        code, out = run("admin", "topic-create", "--topic", bad, "--namesrv", c.namesrv)
        assert code != 0 and not out["ok"], (bad, out)
        assert "cannot be created" in json.dumps(out), (bad, out)
    master = c.broker_addr(c.master_name())
    assert _status(master, "bad topic/name", b"x") == pb.NOT_ALLOWED          # nor by a produce
    for good in ("Orders_2024-12.eu|%x", "a" * 249):
        code, out = run("admin", "topic-create", "--topic", good, "--namesrv", c.namesrv)
        assert code == 0 and [g["result"] for g in out["result"]["groups"]] == ["created"], (good, out)

    # issue 64 item 5: the master's effective identity and role, not its start-up file's
    m_id, _epoch = c.wait_master(timeout=60)
    code, out = run("admin", "broker-config", "--namesrv", c.namesrv, "--group", GROUP, "--key", "broker_id",
                    "--key", "role")
    assert code == 0 and out["result"]["config"] == [
        {"key": "broker_id", "value": m_id, "runtime": False, "source": "controllers"},
        {"key": "role", "value": "master", "runtime": False, "source": "controllers"}], out

    code, out = run("admin", "topic-delete", "--topic", "never-there", "--namesrv", c.namesrv)
    assert code != 0 and out["error"]["code"] == "NOT_FOUND", out

    assert run("admin", "topic-delete", "--topic", "a" * 249, "--namesrv", c.namesrv)[0] == 0
    code, out = run("produce", "--namesrv", c.namesrv, "--group", GROUP, "--topic", "a" * 249, "--count", "1")
    assert code != 0 and out["error"]["code"] == "NOT_ALLOWED" and "was deleted" in out["error"]["message"], out


def test_without_auto_create_only_created_topics_take_writes(procs, tmp_path):
    port, ha = free_port(), free_port()
    p = procs.start("b", ["broker", "--group", "g1", "--role", "master", "--epoch", "1", "--listen", f"{HOST}:{port}",
                          "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / "b"), "--ack-mode", "master",
                          "--no-auto-create-topics"])
    wait_port(port, proc=p.popen)
    addr = f"{HOST}:{port}"
    assert _status(addr, "new", b"x") == pb.NOT_ALLOWED

    async def create() -> pb.TopicChangeReply:
        a = AdminClient(addr, timeout_s=10)
        try:
            return await a.update_topic("new")
        finally:
            await a.close()

    assert asyncio.run(create()).status == pb.OK
    assert _status(addr, "new", b"x") == pb.OK


def test_runtime_broker_config_get_and_set(procs, tmp_path):
    """mqadmin getBrokerConfig / updateBrokerConfig: a runtime key changes the running broker at
    once (auto_create_topics here); a key that needs a restart, a bad value, or one bad change of
    two is refused with nothing applied."""
    port, ha = free_port(), free_port()
    p = procs.start("b", ["broker", "--group", "g1", "--role", "master", "--epoch", "1", "--listen", f"{HOST}:{port}",
                          "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / "b"), "--ack-mode", "master"])
    wait_port(port, proc=p.popen)
    addr = f"{HOST}:{port}"

    def cli(*argv: str) -> tuple[int, dict]:
        r = subprocess.run([sys.executable, "-m", "autoswitch", "admin", *argv, "--broker", addr, "--json"],
                           capture_output=True, text=True, timeout=120)
        return r.returncode, json.loads(r.stdout.strip().splitlines()[-1])

    rc, out = cli("broker-config", "--key", "auto_create_topics", "--key", "listen")
    assert rc == 0 and out["result"]["config"] == [
        {"key": "auto_create_topics", "value": True, "runtime": True, "source": "file"},
        {"key": "listen", "value": addr, "runtime": False, "source": "file"}], out
    assert _status(addr, "t1", b"x") == pb.OK
    rc, out = cli("broker-config-set", "-k", "auto_create_topics=false", "-k", "ack_timeout_s=2.5")
    assert rc == 0 and {c["key"]: c["value"] for c in out["result"]["config"]} == {
        "auto_create_topics": False, "ack_timeout_s": 2.5}, out
    assert _status(addr, "t2", b"x") == pb.NOT_ALLOWED          # in force at once
    rc, out = cli("broker-config", "--key", "auto_create_topics", "--key", "max_inflight_produce")
    assert [c["source"] for c in out["result"]["config"]] == ["runtime", "file"], out
    assert _status(addr, "t1", b"x") == pb.OK                   # a topic already in the log stays writable
    for bad in (["-k", "listen=127.0.0.1:1"], ["-k", "ack_timeout_s=soon"], ["-k", "ack_timeout_s=0"],
                ["-k", "auto_create_topics=true", "-k", "max_inflight_produce=0"], ["-k", "nonsense"]):
        rc, out = cli("broker-config-set", *bad)
        assert rc != 0 and not out["ok"], (bad, out)
    # issue 64 item 6: a typo is an unknown key with a suggestion, not "needs a restart"
    rc, out = cli("broker-config-set", "-k", "ack_timout_s=3")
    assert rc != 0 and "unknown broker config key 'ack_timout_s'" in out["error"]["message"], out
    assert "did you mean 'ack_timeout_s'" in out["error"]["message"], out
    rc, out = cli("broker-config", "--key", "auto_create_topics")
    assert out["result"]["config"][0]["value"] is False                  # the refused pair applied nothing
    assert "broker_config_updated" in p.log_text()


def test_a_topics_own_retention_hides_messages_born_before_it(procs, tmp_path):
    """Per-topic retention (kafka-topics --config retention.ms): messages born before now -
    retention_hours are no longer served, on the gRPC Consume and the queue offsets it reports;
    other topics keep theirs; clearing it serves them again (the bytes stay until the log's
    retention)."""
    import time

    import grpc
    from autoswitch.broker.client.client import ConsumerClient, consumed_messages

    from autoswitch.proto import broker_pb2_grpc as pbg

    port, ha = free_port(), free_port()
    p = procs.start("b", ["broker", "--group", "g1", "--role", "master", "--epoch", "1", "--listen", f"{HOST}:{port}",
                          "--ha-listen", f"{HOST}:{ha}", "--data-dir", str(tmp_path / "b"), "--ack-mode", "master"])
    wait_port(port, proc=p.popen)
    addr = f"{HOST}:{port}"
    now = int(time.time() * 1000)
    with grpc.insecure_channel(addr) as ch:
        stub = pbg.BrokerServiceStub(ch)
        for topic in ("short", "other"):
            born = [now - 2 * 3_600_000] * 3 + [now] * 2             # three born two hours ago, two now
            r = stub.Produce(pb.ProduceRequest(topic=topic, messages=[
                pb.ProduceMessage(body=f"m{i}".encode(), msg_id=f"{topic}-{i}", born_ts_ms=b)
                for i, b in enumerate(born)]), timeout=30)
            assert r.status == pb.OK, r

    async def scenario() -> None:
        admin = AdminClient(addr, timeout_s=10)
        reader = ConsumerClient(addr, timeout_s=10)
        try:
            assert (await admin.update_topic("short", retention_hours=1.0)).status == pb.OK

            async def ids(topic: str) -> list[str]:
                return [m.msg_id for m in consumed_messages(await reader.consume(topic, 0, 100))]

            assert await ids("short") == ["short-3", "short-4"]
            assert await ids("other") == [f"other-{i}" for i in range(5)]
            topics = {t.topic: t for t in (await reader.list_topics()).topics}
            assert topics["short"].min_queue_offset == 3 and topics["short"].retention_hours == 1.0
            assert topics["other"].min_queue_offset == 0
            assert (await admin.update_topic("short")).status == pb.OK        # no retention of its own
            assert await ids("short") == [f"short-{i}" for i in range(5)]
        finally:
            await admin.close()
            await reader.close()

    asyncio.run(scenario())
