"""The controller's one code table: every reply code, of the state machine and of the process, and
the typed error a client raises for a non-zero one.

0, 16 and 2000-2016 are RocketMQ's ``ResponseCode`` values (remoting/protocol/ResponseCode.java,
5.1+; older 4.x/5.0 clients numbered 2010-2012 differently); the state machine produces most of
them. 29xx are process-level failures that RocketMQ folds into "system error": kept apart so an
operator can tell "no quorum" from "bad request" from "timed out".
"""

from __future__ import annotations

from enum import IntEnum

from autoswitch.base.errors import AutoswitchError


class Code(IntEnum):
    SUCCESS = 0
    # RocketMQ answers a blacklisted runtime-config key with NO_PERMISSION.
    NO_PERMISSION = 16
    CONTROLLER_FENCED_MASTER_EPOCH = 2000
    CONTROLLER_FENCED_SYNC_STATE_SET_EPOCH = 2001
    CONTROLLER_INVALID_MASTER = 2002
    CONTROLLER_INVALID_REPLICAS = 2003
    CONTROLLER_MASTER_NOT_AVAILABLE = 2004
    CONTROLLER_INVALID_REQUEST = 2005
    CONTROLLER_BROKER_NOT_ALIVE = 2006
    CONTROLLER_NOT_LEADER = 2007
    CONTROLLER_BROKER_METADATA_NOT_EXIST = 2008
    CONTROLLER_INVALID_CLEAN_BROKER_METADATA = 2009
    CONTROLLER_BROKER_NEED_TO_BE_REGISTERED = 2010
    CONTROLLER_MASTER_STILL_EXIST = 2011
    CONTROLLER_ELECT_MASTER_FAILED = 2012
    CONTROLLER_ALTER_SYNC_STATE_SET_FAILED = 2013
    CONTROLLER_BROKER_ID_INVALID = 2014
    CONTROLLER_JRAFT_INTERNAL_ERROR = 2015
    CONTROLLER_BROKER_LIVE_INFO_NOT_EXISTS = 2016
    # Process level (ours).
    CONTROLLER_QUORUM_UNAVAILABLE = 2901     # no Raft majority: the write was not committed
    CONTROLLER_TIMEOUT = 2902                # commit or read barrier not done in time; outcome unknown
    CONTROLLER_REQUEST_TOO_LARGE = 2903
    CONTROLLER_MALFORMED_REQUEST = 2904      # a field out of range / missing; nothing was proposed
    CONTROLLER_UNAVAILABLE = 2905            # client side: no controller reachable
    CONTROLLER_INTERNAL_ERROR = 2906         # a bug; logged with a traceback
    CONTROLLER_OVERLOADED = 2907             # a limit (watchers, concurrent RPCs) was hit
    CONTROLLER_CONFIG_REJECTED = 2908
    CONTROLLER_PERMISSION_DENIED = 2909     # client side: the caller lacks the role (gRPC PERMISSION_DENIED)
    CONTROLLER_BROKER_INCARNATION_CONFLICT = 2910   # another process of this brokerId is alive: refused
    CONTROLLER_STATE_CORRUPT = 2911          # this member's state differs from the others' (state hash check): no reads
    CONTROLLER_FEATURE_UNSUPPORTED = 2912    # the cluster finalized a feature level this member does not support
    CONTROLLER_FEATURE_REFUSED = 2913        # finalize-features refused: a member is behind, or records would be unreadable


def code_name(code: int) -> str:
    try:
        return Code(code).name
    except ValueError:
        return f"CODE_{code}"


class ControllerRpcError(AutoswitchError):
    """A controller reply with a non-zero code (or no reachable controller)."""

    code = "CONTROLLER_RPC_ERROR"

    def __init__(self, reply_code: int, message: str, **details) -> None:
        super().__init__(message, reply_code=reply_code, reply_name=code_name(reply_code), **details)
        self.reply_code = reply_code
        self.code = code_name(reply_code)
