"""autoswitch.ha: AutoSwitchHA replication.

The package itself loads only the pure parts (config, errors, the ReplicaLog protocol); the codec,
sessions and SyncStateSet tracker are pure modules too. The asyncio adapters live in their own
folder, ``autoswitch.ha.io`` (``master``: HAMaster, ``master_conn``, ``slave``: HASlave), so the
layering shows in the tree and importing a pure module never loads asyncio.
"""

from autoswitch.ha.config import HAConfig
from autoswitch.ha.errors import (
    FrameError,
    HABusy,
    HAError,
    HAProtocolError,
    OffsetMismatch,
    SyncStateProposalRejected,
)
from autoswitch.ha.log_api import ReplicaLog

from autoswitch.base.write_errors import FlushSlaveTimeout, InSyncReplicasNotEnough

__all__ = [
    "FlushSlaveTimeout",
    "FrameError",
    "HABusy",
    "HAConfig",
    "HAError",
    "HAProtocolError",
    "InSyncReplicasNotEnough",
    "OffsetMismatch",
    "ReplicaLog",
    "SyncStateProposalRejected",
]
