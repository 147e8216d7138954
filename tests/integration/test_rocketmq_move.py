"""A running RocketMQ cluster moves onto autoswitch's controllers with a restart of its controller
only (issue 62, docs/rocketmq.md "Moving a running RocketMQ cluster").

RocketMQ 5 brokers of one group run on RocketMQ's own three controllers (DLedger, embedded in name
servers the brokers use only as their controllers) and take acknowledged messages. The operator
exports the group from RocketMQ's controllers (`admin rocketmq-export`), stops them,
starts autoswitch's controllers on their addresses, and imports the group
(`admin rocketmq-import`, checked against the brokers' epoch files first). The brokers keep their
identity files, roles and MasterEpoch: nothing is elected, the master keeps taking messages.
Then kill -9 of the master: autoswitch elects the slave one epoch above, and every acknowledged
message is read back. An export that the brokers are ahead of is refused.

RocketMQ comes from ROCKETMQ_HOME or the fixture in the checkout's parent folder (shared/tools/); the
test skips with the reason when neither is there (tests/integration/rocketmq_harness.py).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest
from autoswitch.controller.client import ControllerClient
from autoswitch.controller.remoting import client as remoting

from tests.integration.controller_harness import Cluster
from tests.integration.rocketmq_harness import RocketMQ, rocketmq_home
from tests.integration.test_rocketmq_brokers import GROUP, TOPIC, _keys, _until, read_back
from tests.procs import HOST, ProcGroup, free_port

HOME, WHY = rocketmq_home()
pytestmark = pytest.mark.skipif(HOME is None, reason=WHY)


def _cli(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "autoswitch", *args, "--json"], capture_output=True, text=True,
                       timeout=120)
    lines = p.stdout.strip().splitlines()
    assert lines, p.stderr[-3000:]
    return json.loads(lines[-1])


def test_a_running_rocketmq_cluster_moves_onto_autoswitch(tmp_path):
    procs = ProcGroup(tmp_path / "logs")
    rmq = RocketMQ(HOME, tmp_path / "rmq")
    # RocketMQ's controllers (DLedger, each embedded in a name server the brokers use only as a
    # controller), as its deployment docs set them up; brokers name all three in controllerAddr
    dledger = {f"n{i}": free_port() for i in range(3)}
    ctls = [f"{HOST}:{p}" for p in dledger.values()]
    try:
        ns = rmq.namesrv("ns")
        peers = ";".join(f"{i}-{HOST}:{p}" for i, p in dledger.items())
        for i in dledger:
            rmq.namesrv(f"ctl-{i}", enableControllerInNamesrv="true", controllerDLegerGroup="move",
                        controllerDLegerPeers=peers, controllerDLegerSelfId=i,
                        controllerStorePath=str(tmp_path / f"rmq-ctl-{i}"))
        for b in ("b1", "b2"):
            rmq.broker(b, ns, ctls)
        rmq.classpath()
        asyncio.run(_run(procs, rmq, tmp_path, ns, ctls))
    except BaseException:
        print(procs.dump_logs(60))
        for n in ("ctl-n0", "b1", "b2"):
            print(rmq.log(n, 40))
        raise
    finally:
        rmq.stop_all()
        procs.stop_all()


async def _run(procs: ProcGroup, rmq: RocketMQ, tmp_path, ns: str, ctls: list[str]) -> None:
    def on_rocketmq():
        lead = remoting.leader(ctls)
        st = remoting.sync_state(lead, GROUP) if lead else None
        return st if st and st.get("masterBrokerId") and len(st.get("inSyncReplicas") or []) == 2 else None
    before = await _until(on_rocketmq, "RocketMQ's controller: a master and both brokers in sync", 240)
    out = rmq.run_client("produce", ns, TOPIC, "rmq", "100", "120", "1", timeout=180)
    assert out and out[-1].startswith("END 100 "), out[-20:]
    acked = _keys(out, "ACK")
    await _until(lambda: all(rmq.has_topic(n, TOPIC) for n in ("b1", "b2")), "the topic on both brokers", 60)

    # 1. export the group from RocketMQ's controller, then stop it
    exported = tmp_path / "rocketmq-state.json"
    ex = _cli("admin", "rocketmq-export", "--from", ";".join(ctls), "--cluster", "C1", "--namesrv", ns,
              "--out", str(exported))
    assert ex["ok"], ex
    [row] = ex["result"]["groups"]
    assert (row["group"], row["master"], row["master_epoch"]) == (GROUP, before["masterBrokerId"], before["masterEpoch"])
    for i in range(3):
        rmq.stop(f"ctl-n{i}")       # the brokers keep serving in their roles meanwhile

    # 2. autoswitch's controllers on the addresses the brokers know: one node per address in their
    # controllerAddr (a node they do not name never hears them, and liveness is a majority's)
    c = Cluster(procs, tmp_path, n=3, remoting=True)
    c.remoting_addrs = dict(zip(c.ids, ctls, strict=True))
    c.start_all()
    c.wait_feature_level()          # ImportGroup is level 3's (a new cluster finalizes it on its own)
    controllers = ",".join(c.addrs.values())

    # an export the brokers are ahead of (read before an election) is refused, nothing written
    stale = json.loads(exported.read_text())
    stale["groups"][0].update(master_epoch=0, master_broker_id=0)   # read before the first election
    (tmp_path / "stale.json").write_text(json.dumps(stale))
    r = _cli("admin", "rocketmq-import", "--file", str(tmp_path / "stale.json"), "--controller", controllers)
    assert not r["ok"] and "changed after it was read" in r["error"]["message"], r

    # 3. import: the group as RocketMQ's controller held it
    r = _cli("admin", "rocketmq-import", "--file", str(exported), "--controller", controllers)
    assert r["ok"], r
    [row] = r["result"]["groups"]
    assert row["result"] == "imported" and not row.get("not_checked"), row
    r = _cli("admin", "rocketmq-import", "--file", str(exported), "--controller", controllers)
    assert r["ok"] and r["result"]["groups"][0]["result"] == "already imported", r

    async with ControllerClient(list(c.addrs.values())) as cl:
        async def both_heard():
            [g] = await cl.get_sync_state_data([GROUP])
            return g if all(m.alive for m in g.members) and len(g.members) == 2 else None
        g = await _until(both_heard, "both brokers heard by autoswitch's controllers", 60)
        info = g.replica_info
        assert (info.master_broker_id, info.master_epoch) == (before["masterBrokerId"], before["masterEpoch"])
        assert sorted(info.sync_state_set) == sorted(x["brokerId"] for x in before["inSyncReplicas"])

        # the brokers kept their roles: the master takes messages at the same epoch
        out2 = rmq.run_client("produce", ns, TOPIC, "moved", "100", "120", "1", timeout=180)
        assert out2 and out2[-1].startswith("END 100 "), out2[-20:]
        acked |= _keys(out2, "ACK")
        [g] = await cl.get_sync_state_data([GROUP])
        assert g.replica_info.master_epoch == before["masterEpoch"], g   # nothing was elected

        # 4. kill -9 of the master: autoswitch elects the slave, one epoch above
        by_id = {m.broker_id: m.address for m in g.members}
        master = g.replica_info.master_broker_id
        victim = next(n for n in ("b1", "b2") if by_id[master].endswith(f":{rmq.ports[n]}"))
        rmq.kill9(victim)

        async def failed_over():
            [g] = await cl.get_sync_state_data([GROUP])
            r = g.replica_info
            return r if r.master_broker_id not in (0, master) else None
        r = await _until(failed_over, "autoswitch elected the other broker", 60)
        assert r.master_epoch == before["masterEpoch"] + 1
    out3 = rmq.run_client("produce", ns, TOPIC, "after", "50", "150", "1", timeout=200)
    assert out3 and out3[-1].startswith("END 50 "), out3[-20:]
    acked |= _keys(out3, "ACK")
    assert len(acked) == 250
    missing = acked - read_back(rmq, ns, acked)
    assert not missing, f"acknowledged but not read back: {sorted(missing)[:20]} ({len(missing)})"
