"""A RocketMQ master that starts again takes a new MasterEpoch (real controllers, the remoting
protocol). A RocketMQ broker that becomes master at the epoch its epoch file ends with cuts that
epoch's entry and writes it again at its current end (AutoSwitchHAService.changeToMaster), after
which no slave finds a consistent point with it: `make bench-rocketmq ARGS="--schedule 9689"`
showed replication stopped for good when the controllers let a restarted master resume its
epoch. A slave's start changes nothing."""

from __future__ import annotations

from autoswitch.controller.remoting import client as remoting

from tests.integration.controller_harness import Cluster
from tests.integration.test_remoting_followers import C, G, _until
from tests.procs import ProcGroup


def test_a_rocketmq_master_that_registers_again_gets_a_new_epoch(tmp_path):
    procs = ProcGroup(tmp_path / "logs")
    c = Cluster(procs, tmp_path, n=1, remoting=True)
    try:
        c.start_all()
        c.wait_feature_level()      # the rule is level 3's (a new cluster finalizes it on its own)
        addr = next(iter(c.remoting_addrs.values()))
        _until("a leader", lambda: remoting.leader([addr]))
        for bid in (1, 2):
            assert remoting.call(addr, 1013, {"clusterName": C, "brokerName": G, "appliedBrokerId": bid,
                                              "registerCheckCode": f"127.0.0.1:{bid};1"}).code == 0
            assert remoting.call(addr, 1003, {"clusterName": C, "brokerName": G, "brokerId": bid,
                                              "brokerAddress": f"127.0.0.1:{bid}"}).code == 0

        def beat() -> None:
            for bid in (1, 2):
                remoting.Connection(addr).send_oneway(904, {
                    "clusterName": C, "brokerName": G, "brokerId": bid, "brokerAddr": f"127.0.0.1:{bid}",
                    "epoch": 0, "maxOffset": 0, "confirmOffset": 0, "heartbeatTimeoutMills": 10000})
            return True

        def elected():
            beat()
            r = remoting.call(addr, 1002, {"clusterName": C, "brokerName": G, "brokerId": 1, "designateElect": True})
            return r.code == 0 and r
        r = _until("broker 1 elected", elected)
        epoch = int(r.ext["masterEpoch"])
        # the slave starts again: nothing changes
        assert remoting.call(addr, 1003, {"clusterName": C, "brokerName": G, "brokerId": 2,
                                          "brokerAddress": "127.0.0.1:2"}).code == 0
        st = remoting.sync_state(addr, G)
        assert (st["masterBrokerId"], st["masterEpoch"]) == (1, epoch), st
        # the master starts again: the same master at a new MasterEpoch (it is the only member of
        # its set), never the epoch its file ends with
        assert remoting.call(addr, 1003, {"clusterName": C, "brokerName": G, "brokerId": 1,
                                          "brokerAddress": "127.0.0.1:1"}).code == 0
        st = remoting.sync_state(addr, G)
        assert (st["masterBrokerId"], st["masterEpoch"]) == (1, epoch + 1), st
    except BaseException:
        print(procs.dump_logs(60))
        raise
    finally:
        procs.stop_all()
