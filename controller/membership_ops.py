"""Controller membership as the controller uses it: who the voters are and where they listen,
operator changes (`admin add-controller`, `remove-controller`) and the leader's promotion of
caught-up learners. The rules of a change live in the Raft core (controller/raft/membership.py);
this module turns requests into those changes and keeps the node's views (liveness peers, lease
grants, metadata) on the configuration in force.

The master lease and membership (docs/controller.md "Controller membership"): a broker's lease
counts grants from its own list of controllers, an election counts DEAD opinions of a majority of
the voters. A node grants only while it is a voter in its newest configuration, and only to a
broker whose lease quorum ``k`` (majority of its list, sent in every heartbeat) satisfies
``k + majority(V) > |V|`` for the voters ``V``: then the k granting voters and any majority of
voters share a member, whatever list the broker was configured with.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from autoswitch.controller.raft.membership import BadMembership, Member, Membership
from autoswitch.controller.raft.quorum import majority

from autoswitch.base.log import get_logger

PROMOTE_CHECK_S = 0.2            # how often the leader looks for caught-up learners


def lease_quorum_ok(broker_quorum: int, voters: int) -> bool:
    """May a voter grant a lease counted ``broker_quorum``-of-N by the broker? 0 = not stated
    (brokers before membership changes): granted as before."""
    if broker_quorum <= 0:
        return True
    return broker_quorum + majority(voters) > voters


class MembershipView:
    """The node's copy of the configuration in force (set from the Raft driver's callback)."""

    def __init__(self, self_id: str, bootstrap: Membership, config_peers: dict[str, str]) -> None:
        self.self_id = self_id
        self.config_peers = dict(config_peers)
        self.conf = bootstrap
        self.index = 0                 # log index of the configuration in force (0 = bootstrap)
        self.log = get_logger("controller.membership", node=self_id)
        self.listeners: list[Callable[[Membership], None]] = []

    def update(self, conf: Membership, index: int = 0) -> None:
        if conf == self.conf:
            return
        self.conf = conf
        self.index = index
        self.log.info("controller_membership", voters=list(conf.voter_ids), learners=list(conf.learner_ids))
        for fn in self.listeners:
            fn(conf)

    def client_addr(self, node_id: str) -> str:
        m = self.conf.member(node_id)
        return (m.client if m is not None and m.client else "") or self.config_peers.get(node_id, "")

    @property
    def voter_ids(self) -> tuple[str, ...]:
        return self.conf.voter_ids

    def voter_addrs(self) -> dict[str, str]:
        return {n: self.client_addr(n) for n in self.voter_ids}

    def member_addrs(self) -> dict[str, tuple[str, str]]:
        """node id -> (client address, "voter" | "learner") of every member."""
        out = {n: (self.client_addr(n), "voter") for n in self.voter_ids}
        out.update({n: (self.client_addr(n), "learner") for n in self.conf.learner_ids})
        return out

    def broker_view(self) -> tuple[int, list[str]]:
        """(index, voter client addresses) for heartbeat replies; (0, []) until the first change
        (brokers keep their configured list)."""
        if self.index == 0:
            return 0, []
        return self.index, [a for a in self.voter_addrs().values() if a]

    @property
    def is_voter(self) -> bool:
        return self.self_id in self.voter_ids

    def grants_lease_to(self, broker_quorum: int) -> bool:
        return self.is_voter and lease_quorum_ok(broker_quorum, len(self.voter_ids))


class MembershipChanges:
    """Operator changes, run on the leader. ``raft`` is the RaftNode."""

    def __init__(self, raft: Any, view: MembershipView, propose_timeout_s: float) -> None:
        self.raft = raft
        self.view = view
        self.timeout_s = propose_timeout_s
        self.log = view.log

    def plan(self, action: str, node_id: str, address: str, raft_address: str) -> Membership:
        cur: Membership = self.raft.membership
        if action == "add":
            if not address:
                raise BadMembership("add-controller needs the new member's --address")
            return cur.with_learner(node_id, Member(address, raft_address))
        if action == "remove":
            return cur.without(node_id)
        raise BadMembership(f"unknown membership action {action[:32]!r}")

    async def change(self, action: str, node_id: str, address: str = "", raft_address: str = "") -> Membership:
        """Propose one change and wait until it is applied here. A change that must wait for the
        previous one (or for the leader's first commit) is retried for up to propose_timeout_s."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.timeout_s
        while True:
            new = self.plan(action, node_id, address, raft_address)
            why = self.raft.conf_change_blocked()
            if why in (None, "not_leader"):
                break
            if loop.time() >= deadline:
                raise BadMembership(f"membership change refused for now: {why}", reason=why)
            await asyncio.sleep(0.05)
        self.log.info("controller_membership_change", action=action, member=node_id, address=address)
        await self.raft.propose_membership(new, self.timeout_s)
        return self.raft.membership

    async def promote_loop(self, is_leader: Callable[[], bool], stopped: asyncio.Event) -> None:
        """Leader: a learner whose log reached the commit index becomes a voter (one at a time)."""
        while not stopped.is_set():
            try:
                await asyncio.wait_for(stopped.wait(), PROMOTE_CHECK_S)
                return
            except TimeoutError:
                pass
            if not is_leader() or self.raft.conf_change_blocked() is not None:
                continue
            ready = self.raft.promotable()
            if not ready:
                continue
            who = ready[0]
            try:
                self.log.info("controller_learner_promoted", member=who)
                await self.raft.propose_membership(self.raft.membership.promoted(who), self.timeout_s)
            except Exception as e:     # noqa: BLE001 - lost leadership, a race with an operator change: next round
                self.log.warning("controller_promotion_failed", member=who, error=repr(e))
