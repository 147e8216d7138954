"""Typed errors of the consensus layer, raised alike by our Raft and by the store backends (stable
``code`` strings for CLIs and clients). They carry Raft's names because Raft defined them first."""

from __future__ import annotations

from typing import Any

from autoswitch.base.errors import AutoswitchError


class RaftError(AutoswitchError):
    code = "RAFT_ERROR"


class NotLeader(RaftError):
    """This node cannot serve the request; ``leader_id``/``leader_addr`` point at who can (or None)."""

    code = "NOT_LEADER"

    def __init__(self, leader_id: str | None, leader_addr: str | None = None, message: str | None = None) -> None:
        super().__init__(message or f"not leader; leader is {leader_id!r} at {leader_addr!r}",
                         leader_id=leader_id, leader_addr=leader_addr)
        self.leader_id = leader_id
        self.leader_addr = leader_addr


class ProposalTimeout(RaftError):
    """The entry was not applied in time; it may still commit later (the caller must be idempotent)."""

    code = "PROPOSAL_TIMEOUT"


class QuorumUnavailable(RaftError):
    """The leader cannot currently reach a majority (or its uncommitted backlog is full)."""

    code = "QUORUM_UNAVAILABLE"


class ProposalDropped(RaftError):
    """Raised by the sans-IO core; the driver maps it to NotLeader / QuorumUnavailable."""

    code = "PROPOSAL_DROPPED"

    def __init__(self, reason: str, **details: Any) -> None:
        super().__init__(f"proposal dropped: {reason}", reason=reason, **details)
        self.reason = reason


class RaftStopped(RaftError):
    """The node is stopped, or stopped itself because persisting failed (disk full, I/O error)."""

    code = "RAFT_STOPPED"
