"""RocketMQ's name-server requests on an autoswitch name server with an embedded controller (a real
process, the remoting protocol over TCP): register, route, cluster info, data version, unregister,
and the settings the name server warns about. tests/integration/test_rocketmq_brokers.py runs real
RocketMQ brokers and clients against the same port."""

from __future__ import annotations

import time

from autoswitch.controller.remoting import client as remoting
from autoswitch.controller.remoting import codec

from tests.integration.controller_harness import Cluster
from tests.procs import ProcGroup


def _body(state: int, topics: list[str]) -> bytes:
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
             for t in topics}
    # as fastjson writes it (the body parser also takes its unquoted integer keys)
    return codec.dumps({"topicConfigSerializeWrapper": {"topicConfigTable": table, "dataVersion": {
        "counter": 1, "stateVersion": state, "timestamp": 7}}, "filterServerList": []})


def _register(addr: str, broker: str, bid: int, state: int, **extra) -> codec.Command:
    ext = {"brokerName": "broker-a", "brokerAddr": broker, "clusterName": "C1", "haServerAddr": broker[:-1] + "9",
           "brokerId": bid, "heartbeatTimeoutMillis": 120000, "compressed": False, **extra}
    return remoting.call(addr, 103, ext, _body(state, ["T1"]))


def test_rocketmq_name_server_requests(tmp_path):
    procs = ProcGroup(tmp_path / "logs")
    c = Cluster(procs, tmp_path, n=1, remoting=True, embedded={"n1"})
    try:
        c.start_all()
        addr = c.remoting_addrs["n1"]
        end = time.monotonic() + 60
        while remoting.leader([addr]) is None:
            assert time.monotonic() < end, procs.dump_logs()
            time.sleep(0.1)
        assert remoting.call(addr, 105, {"topic": "T1"}).code == 17          # TOPIC_NOT_EXIST
        assert _register(addr, "127.0.0.1:10911", 0, 1).code == 0
        slave = _register(addr, "127.0.0.1:10921", 2, 1, enableActingMaster=True)
        assert slave.code == 0 and slave.ext["masterAddr"] == "127.0.0.1:10911"
        assert slave.ext["haServerAddr"] == "127.0.0.1:10919"
        route = codec.loads_fastjson(remoting.call(addr, 105, {"topic": "T1"}).body)
        assert route["queueDatas"][0]["writeQueueNums"] == 4
        assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "127.0.0.1:10911", "2": "127.0.0.1:10921"}
        info = codec.loads_fastjson(remoting.call(addr, 106).body)
        assert info["clusterAddrTable"] == {"C1": ["broker-a"]}
        # mqadmin's read-only name-server requests: topic lists, its config, KV configs (none kept)
        assert codec.loads_fastjson(remoting.call(addr, 206).body) == {"topicList": ["T1"]}
        assert codec.loads_fastjson(remoting.call(addr, 224, {"cluster": "C1"}).body) == {"topicList": ["T1"]}
        assert codec.loads_fastjson(remoting.call(addr, 224, {"cluster": "C2"}).body) == {"topicList": []}
        assert "enableControllerInNamesrv=true" in remoting.call(addr, 319).body.decode()
        kv = remoting.call(addr, 101, {"namespace": "ORDER_TOPIC_CONFIG", "key": "T1"})
        assert kv.code == 22 and "No config item" in kv.remark
        assert remoting.call(addr, 219, {"namespace": "ORDER_TOPIC_CONFIG"}).code == 22
        dv = codec.dumps({"counter": 1, "stateVersion": 1, "timestamp": 7})
        same = remoting.call(addr, 322, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10911",
                                         "clusterName": "C1", "brokerId": 0}, dv)
        assert same.code == 0 and same.ext["changed"] == "false"
        # a deposed master's claim with an older stateVersion does not take id 0 back
        assert _register(addr, "127.0.0.1:10921", 0, 2).code == 0
        assert _register(addr, "127.0.0.1:10911", 0, 1).code == 0
        route = codec.loads_fastjson(remoting.call(addr, 105, {"topic": "T1"}).body)
        assert route["brokerDatas"][0]["brokerAddrs"]["0"] == "127.0.0.1:10921"
        assert remoting.call(addr, 104, {"brokerName": "broker-a", "brokerAddr": "127.0.0.1:10921",
                                         "clusterName": "C1", "brokerId": 0}).code == 0
        assert remoting.call(addr, 105, {"topic": "T1"}).code == 17
        # compressed registrations are refused with a reason; bad names too
        r = _register(addr, "127.0.0.1:10931", 3, 1, compressed=True)
        assert r.code == 2005 and "compressedRegister" in r.remark
        assert remoting.call(addr, 103, {"brokerName": "bad name", "brokerAddr": "h:1", "clusterName": "C1",
                                         "brokerId": 1}).code == 2005
        log = procs.dump_logs(400)
        assert "rocketmq_broker_setting_unsafe" in log and "namesrv_master_claim_refused" in log
        assert "Traceback" not in log
    finally:
        procs.stop_all()
