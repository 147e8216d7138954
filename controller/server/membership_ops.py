"""Controller membership as the controller uses it: who the voters are and where they listen,
operator changes (`admin add-controller`, `remove-controller`) and the leader's promotion of
caught-up learners. The rules of a change live in the Raft core (controller/raft/membership.py);
this module turns requests into those changes and keeps the node's views (liveness peers, lease
grants, metadata) on the configuration in force.

The master lease and membership (docs/controller.md "Controller membership" has the argument): a
broker's lease counts grants from its own list of controllers, an election counts DEAD opinions of
a majority of the voters. A node grants only (1) while the configuration in force is applied and
names it a voter, (2) to a broker whose heartbeat names that very configuration (its log index,
learnt from heartbeat replies, which advertise applied configurations only), and (3) when the
broker's lease quorum ``k`` satisfies ``k + majority(V) > |V|`` (rules 1-3 are
controller/failover/lease.py's membership_refusal, part of the one lease rule). The leader (4) waits a heartbeat
timeout after a voter change committed before the next one (voter-change pacing: pacing_wait_ms,
checked here right before every voter change is proposed; the Raft core only tells when it saw
the previous one committed). Then
a lease and an election never stand on configurations two voter changes apart, and adjacent ones
share a member of every majority.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING

from autoswitch.controller.consensus.membership import BadMembership, Member, Membership

from autoswitch.base.log import get_logger

if TYPE_CHECKING:
    from autoswitch.controller.consensus import Consensus

PROMOTE_CHECK_S = 0.2            # how often the leader looks for caught-up learners


def pacing_wait_ms(current: Membership, new: Membership, settled: tuple[int | None, int], gap_ms: int) -> int:
    """How long ``new`` must wait as far as voter-change pacing goes (0: it may be proposed now).
    ``settled``: Consensus.voters_settled(); only a change of voters is paced (learners come and go)."""
    if current.voter_change(new) == 0:
        return 0
    settled_ms, now_ms = settled
    if settled_ms is None:
        return gap_ms
    return max(0, settled_ms + gap_ms - now_ms)


class MembershipView:
    """The node's copy of the configuration in force (set from the Raft driver's callback)."""

    def __init__(self, self_id: str, bootstrap: Membership, config_peers: dict[str, str]) -> None:
        self.self_id = self_id
        self.config_peers = dict(config_peers)
        self.conf = bootstrap
        self.log = get_logger("controller.membership", node=self_id)
        self.listeners: list[Callable[[Membership], None]] = []

    def update(self, conf: Membership, _index: int = 0) -> None:
        """The Raft driver's on_membership callback (it also passes the configuration's index,
        which heartbeat replies take from the applied configuration instead: broker_view)."""
        if conf == self.conf:
            return
        self.conf = conf
        self.log.info("controller_membership", voters=list(conf.voter_ids), learners=list(conf.learner_ids))
        for fn in self.listeners:
            fn(conf)

    def client_addr(self, node_id: str, conf: Membership | None = None) -> str:
        """A member's client address in ``conf`` (default: the configuration in force), else the
        one this node was configured with."""
        m = (conf if conf is not None else self.conf).member(node_id)
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

    def broker_view(self, applied: tuple[int, Membership, bool]) -> tuple[int, list[str]]:
        """(index, voter client addresses) of the newest *applied* configuration, for heartbeat
        replies: a broker must never adopt a configuration that a truncated log may take back."""
        index, conf, _ = applied
        addrs = [self.client_addr(n, conf) for n in conf.voter_ids]
        return index, [a for a in addrs if a]

    @property
    def is_voter(self) -> bool:
        return self.self_id in self.voter_ids


class MembershipChanges:
    """Operator changes, run on the leader. ``raft`` is the node's Consensus (RaftNode)."""

    def __init__(self, raft: Consensus, view: MembershipView, propose_timeout_s: float,
                 voter_change_gap_ms: Callable[[], int]) -> None:
        self.raft = raft
        self.view = view
        self.timeout_s = propose_timeout_s
        self.voter_change_gap_ms = voter_change_gap_ms
        self.log = view.log

    def blocked(self, new: Membership) -> tuple[str | None, int]:
        """(why ``new`` may not be proposed now, or None; for "voter_change_pacing" how many ms
        are left). Checked right before each proposal, with no await in between."""
        why = self.raft.conf_change_blocked()
        if why is not None:
            return why, 0
        wait = pacing_wait_ms(self.raft.membership, new, self.raft.voters_settled(), self.voter_change_gap_ms())
        return ("voter_change_pacing", wait) if wait > 0 else (None, 0)

    def plan(self, action: str, node_id: str, address: str, raft_address: str) -> Membership:
        cur: Membership = self.raft.membership
        if action == "add":
            if not address:
                raise BadMembership("add-controller needs the new member's --address")
            return cur.with_learner(node_id, Member(address, raft_address))
        if action == "remove":
            return cur.without(node_id)
        raise BadMembership(f"unknown membership action {action[:32]!r}")

    async def change(self, action: str, node_id: str, address: str = "", raft_address: str = "",
                     pacing_budget_s: float = 0.0) -> Membership:
        """Propose one change and wait until it is applied here. A change that must wait for the
        previous one (or for the leader's first commit) is retried for up to propose_timeout_s;
        one held back by voter-change pacing waits for it when that ends within
        ``pacing_budget_s`` (what is left of the caller's deadline), else is refused at once."""
        loop = asyncio.get_running_loop()
        start = loop.time()
        deadline = start + self.timeout_s
        while True:
            new = self.plan(action, node_id, address, raft_address)
            why, wait_ms = self.blocked(new)
            if why in (None, "not_leader"):
                break
            if why == "voter_change_pacing":
                wait_s = wait_ms / 1000.0
                if loop.time() + wait_s > max(deadline, start + pacing_budget_s):
                    raise BadMembership(
                        f"membership change refused for now: {why} (a master lease may still count the voters"
                        f" before the previous voter change; retry in {int(wait_s * 1000) + 1} ms)", reason=why)
            elif loop.time() >= deadline:
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
            ready = self.raft.promotable() if is_leader() else []
            if not ready:
                continue
            who = ready[0]
            promoted = self.raft.membership.promoted(who)
            if self.blocked(promoted)[0] is not None:
                continue
            try:
                self.log.info("controller_learner_promoted", member=who)
                await self.raft.propose_membership(promoted, self.timeout_s)
            except Exception as e:     # noqa: BLE001 - lost leadership, a race with an operator change: next round
                self.log.warning("controller_promotion_failed", member=who, error=repr(e))
