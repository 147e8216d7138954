"""apache/rocketmq #10812 on autoswitch's controllers (real processes, the remoting protocol): a
broker whose controller list names only a follower heartbeats only there, while its master's
SyncStateSet change goes to the leader. RocketMQ's controller never counts that broker alive
(`make bench-rocketmq ARGS="--schedule 10812"` shows it); autoswitch's leader asks its peers, so
the broker joins the set."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

from autoswitch.controller.remoting import client as remoting
from autoswitch.controller.remoting import codec

from tests.integration.controller_harness import Cluster
from tests.procs import ProcGroup

C, G = "C1", "broker-a"


def _until(what: str, cond, limit_s: float = 60.0):
    end = time.monotonic() + limit_s
    last = None
    while time.monotonic() < end:
        try:
            last = cond()
        except OSError as e:
            last = e
        if last and not isinstance(last, Exception):
            return last
        time.sleep(0.1)
    raise AssertionError(f"{what}: not within {limit_s} s (last: {last!r})")


def _alarms(controllers: str, *extra: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "autoswitch", "admin", "alarm-list", "--controller", controllers,
                        "--json", *extra], capture_output=True, text=True, timeout=60)
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["ok"], out
    return out["result"]


def _heartbeats(stop: threading.Event, targets: dict[int, list[str]], epoch: int) -> None:
    """RocketMQ brokers' one-way heartbeats (904), every 0.3 s until ``stop``: brokerId -> the
    controllers it names (read each round: a test may change them)."""
    def beat() -> None:
        conns: dict[str, remoting.Connection] = {}
        for _ in range(2000):           # bounded: the test ends it long before
            if stop.is_set():
                break
            for b, aa in list(targets.items()):
                for a in list(aa):
                    ext = {"clusterName": C, "brokerName": G, "brokerId": b, "brokerAddr": f"127.0.0.1:{b}",
                           "epoch": epoch, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMills": 10000}
                    try:
                        conns.setdefault(f"{b}@{a}", remoting.Connection(a)).send_oneway(904, ext)
                    except OSError:
                        pass
            time.sleep(0.3)
        for conn in conns.values():
            conn.close()

    threading.Thread(target=beat, daemon=True).start()


def test_a_broker_heard_only_by_a_follower_joins_the_sync_state_set(tmp_path):
    procs = ProcGroup(tmp_path / "logs")
    c = Cluster(procs, tmp_path, n=3, remoting=True)
    stop = threading.Event()
    try:
        c.start_all()
        addrs = list(c.remoting_addrs.values())
        leader = _until("a leader", lambda: remoting.leader(addrs))
        follower = next(a for a in addrs if a != leader)
        for bid in (1, 2):
            assert remoting.call(leader, 1013, {"clusterName": C, "brokerName": G, "appliedBrokerId": bid,
                                                "registerCheckCode": f"127.0.0.1:{bid};1"}).code == 0
            assert remoting.call(leader, 1003, {"clusterName": C, "brokerName": G, "brokerId": bid,
                                                "brokerAddress": f"127.0.0.1:{bid}"}).code == 0
        # broker 1 heartbeats every controller; broker 2 knows only the follower
        _heartbeats(stop, {1: addrs, 2: [follower]}, epoch=0)
        r = _until("broker 1 elected", lambda: (x := remoting.call(
            leader, 1002, {"clusterName": C, "brokerName": G, "brokerId": 1, "designateElect": True})).code == 0 and x)
        epoch, sss_epoch = int(r.ext["masterEpoch"]), int(r.ext["syncStateSetEpoch"])
        # the master proposes {1, 2}: the leader never heard broker 2 itself, the follower did
        alter = remoting.call(leader, 1001, {"brokerName": G, "masterBrokerId": 1, "masterEpoch": epoch},
                              codec.dumps({"syncStateSet": [1, 2], "syncStateSetEpoch": sss_epoch}))
        assert alter.code == 0, alter
        assert codec.loads_fastjson(alter.body)["syncStateSet"] == [1, 2]
        # an election still needs a majority to hear its candidate: broker 2 is not electable
        nope = remoting.call(leader, 1002, {"clusterName": C, "brokerName": G, "brokerId": 2, "designateElect": True})
        assert nope.code != 0, nope
    except BaseException:
        print(procs.dump_logs(80))
        raise
    finally:
        stop.set()
        procs.stop_all()


def test_a_master_heard_only_by_a_minority_is_failed_over_with_an_alert(tmp_path):
    """A RocketMQ broker whose controllerAddr names one controller of three: only that one hears
    it, so a majority holds it dead and the group is failed over although it runs (RocketMQ
    brokers have no lease to stop them; with allAckInSyncStateSet nothing acknowledged is lost,
    but the group ends without a master). The leader says why: `master_heard_by_minority`."""
    procs = ProcGroup(tmp_path / "logs")
    c = Cluster(procs, tmp_path, n=3, remoting=True)
    stop = threading.Event()
    try:
        c.start_all()
        addrs = list(c.remoting_addrs.values())
        leader = _until("a leader", lambda: remoting.leader(addrs))
        follower = next(a for a in addrs if a != leader)
        assert remoting.call(leader, 1013, {"clusterName": C, "brokerName": G, "appliedBrokerId": 1,
                                            "registerCheckCode": "127.0.0.1:1;1"}).code == 0
        assert remoting.call(leader, 1003, {"clusterName": C, "brokerName": G, "brokerId": 1,
                                            "brokerAddress": "127.0.0.1:1"}).code == 0
        # it heartbeats every controller until it is master, then only the follower (its list)
        targets = {1: addrs}
        _heartbeats(stop, targets, epoch=1)
        r = _until("broker 1 elected", lambda: (x := remoting.call(
            leader, 1002, {"clusterName": C, "brokerName": G, "brokerId": 1, "designateElect": True})).code == 0 and x)
        epoch = int(r.ext["masterEpoch"])
        targets[1] = [follower]
        # a majority stops hearing it: the leader fails it over (nobody else: no master) and says why
        _until("the master failed over", lambda: (st := remoting.sync_state(leader, G)) is not None
               and st["masterEpoch"] > epoch and not st.get("masterBrokerId"), 60)
        leader_node = next(n for n, a in c.remoting_addrs.items() if a == leader)
        log = c.proc[leader_node].log_text()
        alerts = [ln for ln in log.splitlines() if '"alert"' in ln and "master_heard_by_minority" in ln]
        assert alerts and '"alive_votes":1' in alerts[0], log[-3000:]
        # `admin alarm-list` (etcdctl alarm list): both stand until a master is elected again
        ctl = ",".join(c.addrs.values())
        standing = _alarms(ctl)
        assert {(a["kind"], a["epoch"]) for a in standing["alarms"]} == {
            ("master_heard_by_minority", epoch), ("no_master", epoch + 1)}, standing
        assert standing["standing"] == 2
        targets[1] = addrs              # heard by every controller again: it is elected, the alarms end
        _until("broker 1 elected again", lambda: remoting.call(
            leader, 1002, {"clusterName": C, "brokerName": G, "brokerId": 1}).code in (0, 2011), 60)
        _until("the alarms cleared", lambda: _alarms(ctl)["standing"] == 0, 30)
        cleared = [a for a in _alarms(ctl, "--all")["alarms"] if a["kind"] in ("master_heard_by_minority", "no_master")]
        assert len(cleared) == 2, cleared
        assert all(a["cleared_by"].startswith("master 1 elected at MasterEpoch") for a in cleared), cleared
    except BaseException:
        print(procs.dump_logs(80))
        raise
    finally:
        stop.set()
        procs.stop_all()
