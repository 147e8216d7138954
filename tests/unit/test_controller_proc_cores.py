"""Pure parts of the controller process: name server routes, config, heartbeat table, event log, watchers."""

from __future__ import annotations

import asyncio
import json

import pytest
from autoswitch.controller import config as cfgmod
from autoswitch.controller.namesrv import RouteError, RouteTable
from autoswitch.controller.server.eventlog import EventLog
from autoswitch.controller.server.watchers import Watchers
from autoswitch.controller.state.history import HistoryRecord

from autoswitch.base.errors import ConfigError
from autoswitch.proto import namesrv_pb2 as npb


def route(bid, role, epoch, group="g1", addr=None):
    return npb.BrokerRoute(cluster_name="c", broker_name=group, broker_id=bid,
                           address=addr or f"127.0.0.1:{10000 + bid}", role=role, master_epoch=epoch)


class TestRouteTable:
    def test_highest_epoch_master_wins_and_stale_master_never_overrides(self):
        t = RouteTable(default_ttl_s=30)
        assert t.register(route(1, "master", 1), 0, now=0) == (True, 1)
        # failover: broker 2 becomes master at epoch 2
        assert t.register(route(2, "master", 2), 0, now=1) == (True, 2)
        # the old master re-registers (it has not learnt yet): not accepted as master
        assert t.register(route(1, "master", 1), 0, now=2) == (False, 2)
        assert t.master("g1", now=2).broker_id == 2

    def test_fetch_address_is_kept_with_the_route(self):
        t = RouteTable(default_ttl_s=30)
        r = route(1, "master", 1)
        r.fetch_address = "127.0.0.1:10913"
        t.register(r, 0, now=0)
        assert t.master("g1", now=0).fetch_address == "127.0.0.1:10913"
        t.register(route(1, "master", 1), 0, now=1)            # re-registered without one: gone
        assert t.master("g1", now=1).fetch_address == ""

    def test_routes_expire_without_reregistration(self):
        t = RouteTable(default_ttl_s=10)
        t.register(route(1, "master", 3), 0, now=0)
        t.register(route(2, "slave", 3), 5.0, now=0)
        assert [r.broker_id for r in t.routes(now=4)] == [1, 2]
        assert [r.broker_id for r in t.routes(now=6)] == [1]
        assert t.master("g1", now=11) is None
        assert t.expire(now=11) == 2 and len(t) == 0

    def test_expired_new_master_lets_lookup_fall_back_to_live_routes_only(self):
        t = RouteTable(default_ttl_s=10)
        t.register(route(1, "master", 1), 0, now=0)
        t.register(route(2, "master", 2), 1.0, now=0)
        assert t.master("g1", now=0.5).broker_id == 2
        assert t.master("g1", now=2).broker_id == 1

    @pytest.mark.parametrize("bad", [
        route(0, "master", 1), route(1, "leader", 1), route(1, "master", -1),
        npb.BrokerRoute(broker_name="", broker_id=1, address="a:1", role="slave"),
        npb.BrokerRoute(broker_name="g", broker_id=1, address="", role="slave"),
        npb.BrokerRoute(broker_name="g" * 300, broker_id=1, address="a:1", role="slave"),
        npb.BrokerRoute(broker_name="g", broker_id=1, address="a:1", role="slave", fetch_address="f" * 300),
    ])
    def test_bad_routes_rejected(self, bad):
        with pytest.raises(RouteError):
            RouteTable().register(bad, 0, now=0)

    def test_table_is_bounded(self):
        t = RouteTable(default_ttl_s=10, max_routes=2)
        t.register(route(1, "slave", 0), 0, now=0)
        t.register(route(2, "slave", 0), 0, now=0)
        with pytest.raises(OverflowError):
            t.register(route(3, "slave", 0), 0, now=1)
        t.register(route(3, "slave", 0), 0, now=20)   # after expiry there is room again
        assert [r.broker_id for r in t.routes(now=20)] == [3]


class TestConfig:
    def test_toml_then_cli_overrides(self, tmp_path):
        p = tmp_path / "c.toml"
        p.write_text('[controller]\nheartbeat_timeout_ms = 6000\npeer_query_timeout_s = 1\n'
                     'enable_elect_unclean_master = true\n[raft]\nheartbeat_interval_ms = 50\n')
        c = cfgmod.load(p, node_id="n1", peers="n1=127.0.0.1:9001,n2=127.0.0.1:9002", data_dir="/tmp/x",
                        propose_timeout_s=2.0)
        assert c.peer_query_timeout_s == 1.0 and c.propose_timeout_s == 2.0
        assert c.sm == {"heartbeat_timeout_ms": "6000", "enable_elect_unclean_master": "true"}
        assert c.raft == {"heartbeat_interval_ms": 50}
        assert c.peers == {"n1": "127.0.0.1:9001", "n2": "127.0.0.1:9002"} and c.listen_addr == "127.0.0.1:9001"

    @pytest.mark.parametrize("toml,kw", [
        ("[controller]\nheartbeat_timout_ms = 6\n", {}),                    # typo -> error, not ignored
        ("[controller]\nheartbeat_timeout_ms = 'x'\n", {}),
        ("[controller]\npropose_timeout_s = 'x'\n", {}),
        ("", {"node_id": "n9"}),                                            # not in peers
        ("", {"peers": "n1=127.0.0.1"}),
        ("[controller\n", {}),
    ])
    def test_bad_config_is_a_config_error(self, tmp_path, toml, kw):
        p = tmp_path / "c.toml"
        p.write_text(toml)
        args = dict(node_id="n1", peers="n1=127.0.0.1:9001", data_dir="/tmp/x")
        args.update(kw)
        with pytest.raises(ConfigError):
            cfgmod.load(p, **args)

    def test_runtime_update_is_all_or_nothing(self):
        c = cfgmod.load(None, node_id="n1", peers="n1=127.0.0.1:9001", data_dir="/tmp/x")
        assert c.update_runtime({"propose_timeout_s": "1.0", "notify_broker_role_changed": "false"})
        assert c.propose_timeout_s == 1.0 and c.notify_broker_role_changed is False
        for bad in ({"propose_timeout_s": "2", "node_id": "n2"}, {"propose_timeout_s": "-1"},
                    {"notify_broker_role_changed": "maybe"}):
            with pytest.raises(ConfigError):
                c.update_runtime(bad)
        assert c.propose_timeout_s == 1.0 and c.node_id == "n1"


def test_a_master_claim_newer_than_the_controllers_view_wakes_the_poll_at_once():
    """A standalone name server accepts a master route only as the controllers' last poll says;
    a broker registering at a newer MasterEpoch (just handed over to) makes it poll now instead
    of up to a second later. The claim alone never makes the route a master."""
    from types import SimpleNamespace as NS

    from autoswitch.controller.namesrv import NameServerServicer, PolledAuthority

    auth = PolledAuthority(interval_s=1.0)
    auth.update([NS(replica_info=NS(broker_name="g1", master_broker_id=1, master_epoch=1))])
    table = RouteTable(default_ttl_s=30, authority=auth)
    table.on_unknown_master = auth.claimed
    svc = NameServerServicer(table, clock=lambda: 0.0)
    ctx = NS(peer=lambda: "ipv4:127.0.0.1:5000")

    def register(bid: int, epoch: int):
        return asyncio.run(svc.RegisterRoute(npb.RegisterRouteRequest(route=route(bid, "master", epoch)), ctx))

    assert register(1, 1).accepted_as_master and not auth._wake.is_set()
    r = register(2, 2)                       # the controllers' view still says broker 1 at epoch 1
    assert not r.accepted_as_master and auth._wake.is_set()
    auth._wake.clear()
    register(3, 1)                           # an old or forged claim at a known epoch: no early poll
    assert not auth._wake.is_set()
    auth.update([NS(replica_info=NS(broker_name="g1", master_broker_id=2, master_epoch=2))])
    assert table.master("g1", now=0.0).broker_id == 2      # the next poll makes it the master


def test_eventlog_skips_replayed_indices_and_cuts_torn_tail(tmp_path):
    p = tmp_path / "events.jsonl"

    def rec(index: int, event: str) -> HistoryRecord:
        return HistoryRecord(ts_ms=1, index=index, group="g", event=event, master_broker_id=None, master_epoch=0,
                             sync_state_set=(), sync_state_set_epoch=0, reason="", unclean=False)

    e = EventLog(p)
    assert e.append(rec(1, "a")) and e.append(rec(2, "b"))
    e.close()
    e = EventLog(p)
    assert not e.append(rec(2, "b"))          # re-applied after restart: skipped
    e.close()
    with open(p, "ab") as f:
        f.write(b'{"index": 3, "ty')                # crash mid-line
    e = EventLog(p)
    assert len(e) == 2 and e.last_index == 2
    assert e.append(rec(3, "c"))
    lines, nxt, eof = e.read(1, 10)
    assert [json.loads(x)["event"] for x in lines] == ["b", "c"] and nxt == 3 and eof
    assert e.read(0, 1) == ([lines[0].replace('"b"', '"a"').replace('"index":2', '"index":1')], 1, False)
    e.close()


def test_watchers_bounded_and_slow_subscriber_dropped():
    async def go():
        w = Watchers(max_watchers=2, queue_size=2)
        q1 = w.subscribe("g")
        q2 = w.subscribe("g")
        assert w.subscribe("h") is None
        for i in range(2):
            assert w.publish("g", i) == 2
        q1.get_nowait()
        q1.get_nowait()
        w.publish("g", 2)                       # q2 is full: dropped with an end marker
        assert q1.get_nowait() == 2
        assert q2.get_nowait() is None and len(w) == 1
        w.close_all()
        assert q1.get_nowait() is None and len(w) == 0

    asyncio.run(go())


def test_liveness_opinions_roundtrip_the_wire():
    from autoswitch.controller.api import BrokerReport
    from autoswitch.controller.failover.liveness import NodeOpinion, Opinion
    from autoswitch.controller.failover.peers import opinion_from_pb, opinion_to_pb

    rep = BrokerReport(broker_id=2, epoch=3, max_offset=1 << 40, confirm_offset=7, election_priority=-1,
                       clean_shutdown=False, diverged=True)    # a peer's evidence says it too
    for op in (NodeOpinion(Opinion.ALIVE, 12, rep), NodeOpinion(Opinion.DEAD, 11000, rep),
               NodeOpinion(Opinion.UNKNOWN, -1, None)):
        back = opinion_from_pb(opinion_to_pb(("g", 2), op))
        assert back.opinion is op.opinion and back.last_heard_ms_ago == op.last_heard_ms_ago
        assert back.report == op.report


def test_a_follower_whose_match_index_stands_still_is_named():
    """Issue 59, item 2: a follower wedged at an index (its log conflicting with the leader's)
    never hashes the next marker; the leader names it once its match stood still for the window
    while the commit moved on, and not a follower that keeps up or is merely idle."""
    from autoswitch.controller.server.state_check import stuck_followers

    seen: dict[str, tuple[int, float]] = {}
    assert stuck_followers(seen, 10, {"n2": 10, "n3": 7}, 0.0, 10.0) == []
    assert stuck_followers(seen, 20, {"n2": 20, "n3": 7}, 5.0, 10.0) == []
    assert stuck_followers(seen, 30, {"n2": 30, "n3": 7}, 10.5, 10.0) == ["n3"]
    # it moves again: no longer named; an idle cluster (match == commit) never names anyone
    assert stuck_followers(seen, 30, {"n2": 30, "n3": 30}, 30.0, 10.0) == []
    assert stuck_followers(seen, 30, {"n2": 30, "n3": 30}, 100.0, 10.0) == []
