"""The servicer's input checks: whatever arrives, a typed reply code and nothing malformed proposed.

The node behind the servicer is a small recording stand-in (the servicer is what is under test):
it records what would be proposed and answers like a leader that applied it.
"""

from __future__ import annotations

import asyncio

from autoswitch.controller import config as cfgmod
from autoswitch.controller import messages as m
from autoswitch.controller.codes import Code
from autoswitch.controller.server.membership_ops import MembershipView
from autoswitch.controller.server.service import ControllerServicer
from hypothesis import given, settings
from hypothesis import strategies as st

from autoswitch.base.addr import is_hostport
from autoswitch.base.limits import MAX_NAME_LEN
from autoswitch.proto import controller_pb2 as pb


class RecordingNode:
    """What the servicer calls (controller/server/node_api.py ServedNode), recording instead of acting."""

    node_id = "n1"
    is_leader = True
    term = 1
    state_check = None

    def __init__(self) -> None:
        self.config = cfgmod.load(None, node_id="n1", peers="n1=127.0.0.1:9", data_dir="/nonexistent")
        self.proposed: list[object] = []
        self.membership = MembershipView("n1", self.config.bootstrap_membership(), self.config.peers)
        self.proposer = _Proposer(self.proposed)
        self.liveness = _Liveness(self.proposed)
        self.elections = _Elections(self.proposed, self.proposer)

    class sm:  # noqa: N801 - the node's state-machine adapter surface used by heartbeats
        feature_level = 1

        @staticmethod
        def master_of(group):
            return 3, 1

    def controllers_for_brokers(self) -> tuple[int, list[str]]:
        return 0, []

    def leader_hint(self):
        return "n1", "127.0.0.1:9"

    async def query(self, req):
        return m.Reply()


class _Proposer:
    def __init__(self, proposed: list[object]) -> None:
        self.proposed = proposed

    async def write(self, req):
        self.proposed.append(req)
        return m.Reply()

    async def audit_admin_call(self, call, code, remark) -> None:
        pass      # auditing is the node's (tests/integration/test_secure_cluster_attacks.py)


class _Liveness:
    def __init__(self, proposed: list[object]) -> None:
        self.proposed = proposed

    def record_heartbeat(self, hb) -> bool:
        self.proposed.append(("heartbeat", hb.group, hb.report.broker_id))
        return True

    def check_incarnation(self, group, broker_id, incarnation, call, crashed_before=False, previous=None) -> None:
        pass      # no other process is alive here (the real check: test_broker_incarnation.py)

    def incarnation_conflict(self, group, broker_id, incarnation) -> str:
        return ""

    def registration_refused(self, req) -> bool:
        return False

    async def check_registration(self, req) -> None:
        pass      # (the real checks: test_broker_incarnation.py, test_cloned_broker.py)

    def stated_min_in_sync(self, group, broker_id) -> int:
        return 0

    def heard_all(self, group, broker_ids) -> bool:
        return True


class _Elections:
    def __init__(self, proposed: list[object], proposer: _Proposer) -> None:
        self.proposed = proposed
        self.proposer = proposer

    async def elect(self, cluster, group, broker_id, designate, trigger, dry_run=False, unclean_recovery=""):
        self.proposed.append(("elect", group, broker_id))
        return m.Reply()

    async def alter_sync_state_set(self, req):
        return await self.proposer.write(req)

    async def clean_broker_data(self, req):
        return await self.proposer.write(req)


names = st.one_of(st.text(max_size=300), st.sampled_from(["", "g1", "a" * 255, "a" * 256, "x\ny", "\x00"]))
ids = st.one_of(st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1), st.sampled_from([0, 1, -1]))
addrs = st.one_of(st.text(max_size=40), st.sampled_from(["127.0.0.1:1", "h:0", "h:65536", ":1", "h:x", "h:99"]))
KNOWN = {0, Code.CONTROLLER_MALFORMED_REQUEST, Code.CONTROLLER_REQUEST_TOO_LARGE}


def well_formed_name(v: str) -> bool:
    return 0 < len(v) <= MAX_NAME_LEN and not any(c in v for c in "\n\r\0")


def well_formed_addr(v: str) -> bool:
    return is_hostport(v)      # the one address rule (its own cases: tests/unit/test_addr.py)


@settings(max_examples=150, deadline=None)
@given(group=names, bid=ids, addr=addrs, epoch=ids, members=st.lists(ids, max_size=6))
def test_any_request_gets_a_typed_code_and_only_valid_ones_are_proposed(group, bid, addr, epoch, members):
    node = RecordingNode()
    s = ControllerServicer(node)

    async def go():
        replies = [
            await s.RegisterBroker(pb.RegisterBrokerRequest(cluster_name="c", broker_name=group, broker_id=bid,
                                                            broker_address=addr), None),
            await s.AlterSyncStateSet(pb.AlterSyncStateSetRequest(
                broker_name=group, master_broker_id=bid, master_epoch=epoch, new_sync_state_set=members,
                sync_state_set_epoch=epoch), None),
            await s.ElectMaster(pb.ElectMasterRequest(cluster_name="c", broker_name=group, broker_id=bid,
                                                      designate_elect=True), None),
            await s.BrokerHeartbeat(pb.BrokerHeartbeatRequest(broker_name=group, broker_id=bid, epoch=epoch), None),
        ]
        return replies

    replies = asyncio.run(go())
    assert all(r.header.code in KNOWN and r.header.node_id == "n1" for r in replies)
    for p in node.proposed:
        if isinstance(p, tuple):            # ("elect" | "heartbeat", group, brokerId)
            assert well_formed_name(p[1]) and p[2] >= 1, p
            continue
        assert well_formed_name(p.broker_name), p
        if isinstance(p, m.RegisterBrokerRequest):
            assert p.broker_id >= 1 and well_formed_addr(p.broker_address)
        if isinstance(p, m.AlterSyncStateSetRequest):
            assert p.master_epoch >= 0 and p.sync_state_set_epoch >= 0
            assert p.new_sync_state_set and all(b >= 1 for b in p.new_sync_state_set)
            assert len(set(p.new_sync_state_set)) == len(p.new_sync_state_set)


def test_oversized_request_is_refused_before_anything_happens():
    node = RecordingNode()
    s = ControllerServicer(node)
    big = pb.ElectMasterRequest(cluster_name="c" * (node.config.max_message_bytes + 1), broker_name="g")
    r = asyncio.run(s.ElectMaster(big, None))
    assert r.header.code == Code.CONTROLLER_REQUEST_TOO_LARGE and node.proposed == []


def test_follower_redirect_carries_the_leader():
    node = RecordingNode()
    node.is_leader = False

    async def refuse(req):
        from autoswitch.controller.server.service_common import NodeReply

        raise NodeReply(Code.CONTROLLER_NOT_LEADER, "not leader")

    node.query = refuse
    r = asyncio.run(ControllerServicer(node).GetReplicaInfo(pb.GetReplicaInfoRequest(broker_name="g"), None))
    assert r.header.code == Code.CONTROLLER_NOT_LEADER and r.header.leader_addr == "127.0.0.1:9"


def test_a_heartbeat_stating_absurd_settings_is_refused_before_it_is_recorded():
    """A broker's stated min_in_sync_replicas, ack mode and incarnation end up in election
    requests (BrokerLiveInfo): out of range there, they would make every election of the group
    malformed. They are checked where the heartbeat enters, like its other fields."""
    node = RecordingNode()
    s = ControllerServicer(node)
    bad = [dict(min_in_sync_replicas=-1), dict(min_in_sync_replicas=65), dict(ack_mode="everyone"),
           dict(incarnation="x" * 65)]
    for fields in bad:
        r = asyncio.run(s.BrokerHeartbeat(pb.BrokerHeartbeatRequest(broker_name="g", broker_id=1, **fields), None))
        assert r.header.code == Code.CONTROLLER_MALFORMED_REQUEST, (fields, r.header)
    assert node.proposed == [], "nothing recorded"
    ok = pb.BrokerHeartbeatRequest(broker_name="g", broker_id=1, min_in_sync_replicas=64, ack_mode="quorum",
                                   incarnation="a" * 64)
    assert asyncio.run(s.BrokerHeartbeat(ok, None)).header.code == 0


def test_heartbeat_health_is_checked_and_carried_to_the_election_evidence():
    """Health signals and the digest verdict come from the broker: unknown signal names, a degraded
    flag that disagrees with its reasons, and absurd figures are refused (CONTROLLER_MALFORMED_REQUEST);
    valid ones reach the liveness report and the BrokerLiveInfo an election carries."""
    from autoswitch.controller.failover.liveness import live_info
    from autoswitch.controller.server.service_common import checked_heartbeat

    node = RecordingNode()
    s = ControllerServicer(node)
    bad = [dict(degraded=True), dict(degraded_reasons=["disk"]), dict(degraded=True, degraded_reasons=["fsync"] * 2),
           dict(degraded_reasons=["fsync"]), dict(append_ms=float("nan")), dict(fsync_ms=-2.0),
           dict(loop_lag_ms=1e12)]
    for fields in bad:
        r = asyncio.run(s.BrokerHeartbeat(pb.BrokerHeartbeatRequest(broker_name="g", broker_id=1, **fields), None))
        assert r.header.code == Code.CONTROLLER_MALFORMED_REQUEST, (fields, r.header)
    ok = pb.BrokerHeartbeatRequest(broker_name="g", broker_id=1, degraded=True, degraded_reasons=["fsync", "loop_lag"],
                                   append_ms=-1.0, fsync_ms=812.5, loop_lag_ms=300.0, diverged=True)
    assert asyncio.run(s.BrokerHeartbeat(ok, None)).header.code == 0
    hb = checked_heartbeat(ok)
    assert hb.report.degraded and hb.report.health.reasons == ("fsync", "loop_lag")
    assert hb.report.health.fsync_ms == 812.5 and live_info(hb.report).diverged
