"""autoswitch.controller.raft: our own Raft (DLedger-style election, sans-IO core, gRPC transport).

Public API (docs/interfaces.md, "Raft"): RaftNode, RaftConfig, StateMachine and the errors below.
RaftNode/StateMachine are imported lazily so that the sans-IO parts (core, storage, harness) load
without gRPC, e.g. in the simulator.
"""

from typing import Any

from autoswitch.controller.consensus.errors import (
    NotLeader,
    ProposalTimeout,
    QuorumUnavailable,
    RaftError,
    RaftStopped,
)

from .config import RaftConfig
from .errors import RaftStorageCorrupt

__all__ = [
    "NotLeader",
    "ProposalTimeout",
    "QuorumUnavailable",
    "RaftConfig",
    "RaftError",
    "RaftNode",
    "RaftStopped",
    "RaftStorageCorrupt",
    "StateMachine",
]


def __getattr__(name: str) -> Any:
    if name in ("RaftNode", "StateMachine"):
        from . import node

        return getattr(node, name)
    raise AttributeError(name)
