"""autoswitch.controller.raft: our own Raft (DLedger-style election, sans-IO core, gRPC transport).

Public API (docs/interfaces.md, "Raft"): RaftNode, RaftConfig, StateMachine and the errors below.
"""

from .config import RaftConfig
from .errors import NotLeader, ProposalTimeout, QuorumUnavailable, RaftError, RaftStorageCorrupt
from .node import RaftNode, StateMachine

__all__ = [
    "NotLeader",
    "ProposalTimeout",
    "QuorumUnavailable",
    "RaftConfig",
    "RaftError",
    "RaftNode",
    "RaftStorageCorrupt",
    "StateMachine",
]
