"""RocketMQ's name-server rules on the sans-IO route table (controller/remoting/routes.py)."""

from __future__ import annotations

import pytest
from autoswitch.controller.remoting.routes import RocketRoutes, RouteRefused


def _body(state: int = 1, topics: dict | None = None) -> dict:
    table = {t: {"topicName": t, "readQueueNums": 4, "writeQueueNums": 4, "perm": 6, "topicSysFlag": 0}
             for t in (topics if topics is not None else ["T"])}
    return {"topicConfigSerializeWrapper": {"topicConfigTable": table,
                                            "dataVersion": {"counter": 1, "stateVersion": state, "timestamp": 5}},
            "filterServerList": []}


def _reg(rt: RocketRoutes, addr: str, bid: int, now: int = 0, state: int = 1, **kw) -> tuple[bool, str, str]:
    return rt.register(cluster="C1", name="broker-a", addr=addr, broker_id=bid, ha_addr=addr[:-1] + "9",
                       body=_body(state, kw.get("topics")), timeout_ms=kw.get("timeout_ms", 10_000), now_ms=now)


def test_master_topics_route_and_a_slave_learns_the_master():
    rt = RocketRoutes()
    assert _reg(rt, "h:1001", 0) == (True, "", "")
    assert _reg(rt, "h:1002", 2, topics=["Other"]) == (True, "h:1001", "h:1009")
    route = rt.route("T", 1)
    assert route["queueDatas"] == [{"brokerName": "broker-a", "readQueueNums": 4, "writeQueueNums": 4, "perm": 6,
                                    "topicSysFlag": 0}]
    assert route["brokerDatas"][0]["brokerAddrs"] == {"0": "h:1001", "2": "h:1002"}
    assert rt.route("Other", 1) is None          # a slave's topics are not the group's
    info = rt.cluster_info(1)
    assert info["clusterAddrTable"] == {"C1": ["broker-a"]} and "broker-a" in info["brokerAddrTable"]


def test_the_higher_state_version_keeps_id_0_and_a_role_change_moves_the_id():
    rt = RocketRoutes()
    _reg(rt, "h:1001", 0, state=1)
    _reg(rt, "h:1002", 2, state=1)
    # h:1002 is elected at MasterEpoch 2 and registers as id 0; the old master's entry goes
    assert _reg(rt, "h:1002", 0, state=2)[0]
    # the deposed master, not yet told, claims id 0 with its old epoch: refused
    assert _reg(rt, "h:1001", 0, state=1)[0] is False
    assert rt.route("T", 1)["brokerDatas"][0]["brokerAddrs"] == {"0": "h:1002"}
    # told, it registers as a slave and is answered with the new master
    assert _reg(rt, "h:1001", 1, state=2) == (True, "h:1002", "h:1009")
    assert rt.route("T", 1)["brokerDatas"][0]["brokerAddrs"] == {"0": "h:1002", "1": "h:1001"}


def test_a_slave_is_answered_with_the_controllers_master_before_it_registers_as_id_0():
    hint: dict[str, str] = {}
    rt = RocketRoutes(lambda name: hint.get(name))
    _reg(rt, "h:1001", 0)
    _reg(rt, "h:1002", 2)
    hint["broker-a"] = "h:1002"          # the controllers elected h:1002; it has not re-registered yet
    assert _reg(rt, "h:1003", 3) == (True, "h:1002", "h:1009")


def test_registrations_expire_and_refresh():
    rt = RocketRoutes()
    _reg(rt, "h:1001", 0, now=0, timeout_ms=5_000)
    assert rt.refresh("h:1001", {"counter": 1, "stateVersion": 1, "timestamp": 5}, 4_000) is False
    assert rt.refresh("h:1001", {"counter": 2}, 4_500) is True          # changed: it registers again
    assert rt.route("T", 9_000) is not None                             # refreshed at 4.5 s
    assert rt.route("T", 10_000) is None and len(rt) == 0


@pytest.mark.parametrize("kw", [dict(name="bad name"), dict(addr="nohost"), dict(cluster=""),
                                dict(broker_id=-3)])
def test_bad_registrations_are_refused(kw):
    rt = RocketRoutes()
    args = dict(cluster="C1", name="broker-a", addr="h:1", broker_id=0, ha_addr="", body={}, timeout_ms=0, now_ms=0)
    with pytest.raises(RouteRefused):
        rt.register(**{**args, **kw})
    # a body that is not a RegisterBrokerBody registers no topics, nothing worse
    assert rt.register(**{**args, "body": ["x"]})[0] and rt.route("T", 0) is None


def test_a_registration_with_one_new_topic_keeps_the_others():
    """A broker registers a topic it just created alone (registerSingleTopicAll): the master's other
    topics keep their routes, as on RocketMQ's name server. A broker that becomes master starts
    from what it registers."""
    rt = RocketRoutes()
    _reg(rt, "h:1001", 0, topics=["T1", "T2"])
    _reg(rt, "h:1001", 0, now=1, topics=["%RETRY%cg"])
    assert rt.topics(2) == ["%RETRY%cg", "T1", "T2"]
    assert rt.route("T1", 2) is not None
    _reg(rt, "h:1002", 2, now=3, topics=["T1", "T2", "T3"])       # a slave's list is not the group's
    assert rt.route("T3", 4) is None
    _reg(rt, "h:1002", 0, now=5, state=2, topics=["T1"])          # the slave becomes master
    assert rt.topics(6) == ["T1"]
