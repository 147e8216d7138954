"""Reply codes on the controller's gRPC API and the typed error a client raises for them.

0 and RocketMQ's 2000-2016 keep RocketMQ's meaning (the state machine produces most of them);
29xx are process-level failures that RocketMQ folds into "system error": we keep them apart
so an operator can tell "no quorum" from "bad request" from "timed out".
"""

from __future__ import annotations

from autoswitch.controller.codes import Code

from autoswitch.errors import AutoswitchError

# RocketMQ ResponseCode values: controller/codes.py (the state machine's) is authoritative.
SUCCESS = int(Code.SUCCESS)
NO_PERMISSION = int(Code.NO_PERMISSION)
CONTROLLER_FENCED_MASTER_EPOCH = int(Code.CONTROLLER_FENCED_MASTER_EPOCH)
CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = int(Code.CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH)
CONTROLLER_INVALID_MASTER = int(Code.CONTROLLER_INVALID_MASTER)
CONTROLLER_INVALID_REPLICAS = int(Code.CONTROLLER_INVALID_REPLICAS)
CONTROLLER_MASTER_NOT_AVAILABLE = int(Code.CONTROLLER_MASTER_NOT_AVAILABLE)
CONTROLLER_INVALID_REQUEST = int(Code.CONTROLLER_INVALID_REQUEST)
CONTROLLER_BROKER_NOT_ALIVE = int(Code.CONTROLLER_BROKER_NOT_ALIVE)
CONTROLLER_NOT_LEADER = int(Code.CONTROLLER_NOT_LEADER)
CONTROLLER_BROKER_METADATA_NOT_EXIST = int(Code.CONTROLLER_BROKER_METADATA_NOT_EXIST)
# Process level (ours).
CONTROLLER_QUORUM_UNAVAILABLE = 2901     # no Raft majority: the write was not committed
CONTROLLER_TIMEOUT = 2902                # commit or read barrier not done in time; outcome unknown
CONTROLLER_REQUEST_TOO_LARGE = 2903
CONTROLLER_MALFORMED_REQUEST = 2904      # a field out of range / missing; nothing was proposed
CONTROLLER_UNAVAILABLE = 2905            # client side: no controller reachable
CONTROLLER_INTERNAL_ERROR = 2906         # a bug; logged with a traceback
CONTROLLER_OVERLOADED = 2907             # a limit (watchers, concurrent RPCs) was hit
CONTROLLER_CONFIG_REJECTED = 2908

NAMES = {int(c): c.name for c in Code}
NAMES.update({v: k for k, v in dict(globals()).items() if k.startswith("CONTROLLER_") and isinstance(v, int)})


def code_name(code: int) -> str:
    return NAMES.get(code, f"CODE_{code}")


class ControllerRpcError(AutoswitchError):
    """A controller reply with a non-zero code (or no reachable controller)."""

    code = "CONTROLLER_RPC_ERROR"

    def __init__(self, reply_code: int, message: str, **details) -> None:
        super().__init__(message, reply_code=reply_code, reply_name=code_name(reply_code), **details)
        self.reply_code = reply_code
        self.code = code_name(reply_code)
