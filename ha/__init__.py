"""autoswitch.ha: AutoSwitchHA replication (codec, sans-IO sessions, SyncStateSet, asyncio adapters)."""

from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import (
    FlushSlaveTimeout,
    FrameError,
    HABusy,
    HAError,
    HAProtocolError,
    InSyncReplicasNotEnough,
    OffsetMismatch,
    SyncStateProposalRejected,
)
from autoswitch.ha.log_api import ReplicaLog
from autoswitch.ha.master import HAMaster, LocalSyncStateProposer, SyncStateProposer
from autoswitch.ha.slave import HASlave

__all__ = [
    "FlushSlaveTimeout",
    "FrameError",
    "HABusy",
    "HAConfig",
    "HAError",
    "HAMaster",
    "HAProtocolError",
    "HASlave",
    "InSyncReplicasNotEnough",
    "LocalSyncStateProposer",
    "OffsetMismatch",
    "ReplicaLog",
    "SyncStateProposalRejected",
    "SyncStateProposer",
]
