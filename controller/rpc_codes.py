"""Reply codes on the controller's gRPC API and the typed error a client raises for them.

0 and RocketMQ's 2000-2016 keep RocketMQ's meaning (the state machine produces most of them);
29xx are process-level failures that RocketMQ folds into "system error": we keep them apart
so an operator can tell "no quorum" from "bad request" from "timed out".
"""

from __future__ import annotations

from autoswitch.errors import AutoswitchError

SUCCESS = 0
# RocketMQ ResponseCode values (the state-machine engineer's codes.py is authoritative for 2000-2016).
CONTROLLER_FENCED_MASTER_EPOCH = 2000
CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
CONTROLLER_INVALID_MASTER = 2002
CONTROLLER_INVALID_REPLICAS = 2003
CONTROLLER_MASTER_NOT_AVAILABLE = 2004
CONTROLLER_INVALID_REQUEST = 2005
CONTROLLER_BROKER_NOT_ALIVE = 2006
CONTROLLER_NOT_LEADER = 2007
CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
# Process level (ours).
CONTROLLER_QUORUM_UNAVAILABLE = 2901     # no Raft majority: the write was not committed
CONTROLLER_TIMEOUT = 2902                # commit or read barrier not done in time; outcome unknown
CONTROLLER_REQUEST_TOO_LARGE = 2903
CONTROLLER_MALFORMED_REQUEST = 2904      # a field out of range / missing; nothing was proposed
CONTROLLER_UNAVAILABLE = 2905            # client side: no controller reachable
CONTROLLER_INTERNAL_ERROR = 2906         # a bug; logged with a traceback
CONTROLLER_OVERLOADED = 2907             # a limit (watchers, concurrent RPCs) was hit
CONTROLLER_CONFIG_REJECTED = 2908

NAMES = {v: k for k, v in dict(globals()).items() if k.isupper() and isinstance(v, int)}


def code_name(code: int) -> str:
    return NAMES.get(code, f"CODE_{code}")


class ControllerRpcError(AutoswitchError):
    """A controller reply with a non-zero code (or no reachable controller)."""

    code = "CONTROLLER_RPC_ERROR"

    def __init__(self, reply_code: int, message: str, **details) -> None:
        super().__init__(message, reply_code=reply_code, reply_name=code_name(reply_code), **details)
        self.reply_code = reply_code
        self.code = code_name(reply_code)
