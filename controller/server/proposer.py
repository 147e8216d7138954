"""The one proposal path of a controller node: every write (a client's, a batch's, an election the
scanner plans, an admin call's audit record) is encoded here, proposed to the consensus layer and
answered with the Reply of its applied entry or a typed NodeReply; linearizable reads pass the
read-index barrier here.

It owns the mapping of consensus errors (controller/raft/errors.py) to reply codes and the
"not the leader, try there" hint, so every caller answers a lost leadership the same way.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Protocol

from autoswitch.controller import messages as msgs
from autoswitch.controller.codes import Code, code_name
from autoswitch.controller.consensus.errors import (
    NotLeader,
    ProposalDropped,
    ProposalTimeout,
    QuorumUnavailable,
)
from autoswitch.controller.server import audit, sm_adapter
from autoswitch.controller.server.service_common import NodeReply

from autoswitch.base.log import EventLogger

if TYPE_CHECKING:
    from autoswitch.controller.consensus import Consensus
    from autoswitch.controller.server.membership_ops import MembershipView


class Histogram(Protocol):
    def observe(self, amount: float) -> None: ...


class Proposer:
    """Writes and linearizable reads of one node, over its consensus layer."""

    def __init__(self, node_id: str, consensus: Consensus, membership: MembershipView, *,
                 propose_timeout_s: float, read_timeout_s: float, max_message_bytes: int,
                 latency: Histogram, log: EventLogger) -> None:
        self.node_id = node_id
        self.consensus = consensus
        self.membership = membership
        self.propose_timeout_s = propose_timeout_s
        self.read_timeout_s = read_timeout_s
        self.max_message_bytes = max_message_bytes
        self.latency = latency
        self.log = log

    @property
    def is_leader(self) -> bool:
        return bool(self.consensus.is_leader)

    def leader_hint(self) -> tuple[str, str]:
        """(leader id, its client address), or ("", "") when no leader with an address is known."""
        lid = self.consensus.leader_id
        addr = self.membership.client_addr(lid) if lid else ""
        return (lid, addr) if lid and addr else ("", "")

    def not_leader(self) -> NodeReply:
        lid, laddr = self.leader_hint()
        if not laddr or lid == self.node_id:
            return NodeReply(Code.CONTROLLER_NOT_LEADER,
                             f"node {self.node_id} is not the leader and knows none (election or no quorum)")
        return NodeReply(Code.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)

    def map_error(self, e: BaseException) -> NodeReply:
        """A consensus-layer failure as the reply its caller gets."""
        if isinstance(e, NodeReply):
            return e
        if isinstance(e, NotLeader):
            lid = e.leader_id or ""
            laddr = self.membership.client_addr(lid) if lid else ""
            return NodeReply(Code.CONTROLLER_NOT_LEADER, f"node {self.node_id} is not the leader", lid, laddr)
        if isinstance(e, QuorumUnavailable):
            return NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE, f"no controller quorum: {e}")
        if isinstance(e, ProposalTimeout | TimeoutError):
            return NodeReply(Code.CONTROLLER_TIMEOUT, f"not committed in time (outcome unknown): {e}")
        if isinstance(e, ProposalDropped):
            return NodeReply(Code.CONTROLLER_QUORUM_UNAVAILABLE, f"{e}")
        self.log.error("raft_error", exc_info=e, kind=type(e).__name__)
        return NodeReply(Code.CONTROLLER_INTERNAL_ERROR, f"{type(e).__name__}: {e}")

    async def write(self, req: msgs.Request) -> msgs.Reply:
        """One write: the Reply of its applied entry; raises NodeReply otherwise."""
        out = (await self.write_many([req]))[0]
        if isinstance(out, NodeReply):
            raise out
        return out

    async def write_many(self, reqs: list[msgs.Request]) -> list[msgs.Reply | NodeReply]:
        """Propose several writes together (one append, one wait); never raises. Each request
        gets its own outcome, exactly as ``write`` would have given it alone: the Reply of its
        applied entry, or a NodeReply (invalid, too large, not leader, no quorum, timeout). An
        admin call not yet audited (audit.pending) has its record appended right behind."""
        if not self.is_leader:
            return [self.not_leader()] * len(reqs)
        out: list[msgs.Reply | NodeReply] = []
        datas: list[bytes] = []
        where: list[int] = []
        for i, req in enumerate(reqs):
            try:
                data = sm_adapter.encode_request(sm_adapter.stamp(req))
            except sm_adapter.BadWrite as e:
                out.append(NodeReply(Code.CONTROLLER_INVALID_REQUEST, str(e)))
                continue
            if len(data) > self.max_message_bytes:
                out.append(NodeReply(Code.CONTROLLER_REQUEST_TOO_LARGE, f"encoded request is {len(data)} bytes"))
                continue
            out.append(_UNSET)
            datas.append(data)
            where.append(i)
        if not datas:
            return out
        call = audit.pending()
        if call is not None:
            self.log.info("admin_call", actor=call.actor, action=call.action, group=call.group, detail=call.detail)
            datas.append(sm_adapter.encode_request(sm_adapter.stamp(call.request(outcome_of_previous=True))))
            call.recorded = True        # before the await: a cancelled caller leaves it proposed
        t0 = time.monotonic()
        results: list[object]
        try:
            results = list(await self.consensus.propose_many(datas, timeout_s=self.propose_timeout_s))
        except Exception as e:  # noqa: BLE001 - nothing was proposed: one typed reply for all
            results = [e] * len(datas)
        self.latency.observe(time.monotonic() - t0)
        if call is not None:
            if isinstance(results[-1], BaseException):
                call.recorded = False       # not known to be in the log: the handler records it alone
            results = results[:-1]
        for i, r in zip(where, results, strict=True):
            out[i] = self.map_error(r) if isinstance(r, BaseException) else _applied(r)
        return out

    async def audit_admin_call(self, call: audit.AuditCall, code: int, remark: str) -> None:
        """The call's AdminAudit record as its own entry (a call whose write did not carry it).
        Without a leader here the call itself failed too; the log line is then its only trace."""
        if code == Code.CONTROLLER_NOT_LEADER:
            # Sent on to the leader (the client follows the redirect, and the leader records the
            # call it carries out): nothing happened here, so nothing to record and no warning
            # that the record could not be written (which read like an audit failure).
            self.log.info("admin_call_redirected", actor=call.actor, action=call.action, group=call.group)
            call.recorded = True
            return
        self.log.info("admin_call", actor=call.actor, action=call.action, group=call.group, detail=call.detail,
                      code=code)
        call.recorded = True
        out = (await self.write_many([call.request(code, remark)]))[0]
        if isinstance(out, NodeReply):
            call.recorded = False
            self.log.warning("admin_audit_not_replicated", actor=call.actor, action=call.action, group=call.group,
                             code=code_name(out.reply_code), reason=out.message)

    async def barrier(self) -> None:
        """Linearizable-read barrier: raises NodeReply unless this node is the leader and caught up."""
        if not self.is_leader:
            raise self.not_leader()
        try:
            await self.consensus.read_index(timeout_s=self.read_timeout_s)
        except Exception as e:  # noqa: BLE001 - typed reply
            raise self.map_error(e) from None


# A write_many slot not answered yet (every one is answered before it returns).
_UNSET = NodeReply(Code.CONTROLLER_INTERNAL_ERROR, "no outcome")


def _applied(result: object) -> msgs.Reply | NodeReply:
    if isinstance(result, msgs.Reply):
        return result
    return NodeReply(Code.CONTROLLER_INTERNAL_ERROR, f"unexpected apply result {type(result).__name__}")
