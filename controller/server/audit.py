"""The admin audit trail: one AdminAudit record in the replicated event log per admin call (who,
what, how it ended), and never an admin write without its record (issue 29, item 5).

The handler of an admin call opens an ``AuditCall`` (``begin``) for its duration. A write proposed
meanwhile carries the record in the same Raft append, right behind it, and the state machine fills
in that write's outcome when it applies the record (``AdminAuditRequest.outcome_of_previous``): a
client that gives up (a 2 ms deadline) or a leader change after the append cannot separate the
two. A call that proposes no write (refused before, a read such as SaveSnapshot, MoveLeader,
ChangeMembership) is recorded by its own append afterwards, shielded from the caller's
cancellation; MoveLeader is recorded before it moves the leadership away from the node that
would have to write the record.
"""

from __future__ import annotations

import contextvars
from dataclasses import dataclass
from typing import Any

from autoswitch.controller import messages as msgs
from autoswitch.controller.server.authz import audit_detail

from autoswitch.base.auth import Role, current_caller


@dataclass
class AuditCall:
    actor: str
    action: str
    group: str
    detail: str
    recorded: bool = False

    def request(self, code: int = 0, remark: str = "", outcome_of_previous: bool = False) -> msgs.AdminAuditRequest:
        return msgs.AdminAuditRequest(actor=self.actor[:msgs.MAX_AUDIT_FIELD_LEN], action=self.action,
                                      broker_name=self.group[:127], detail=self.detail, code=code,
                                      remark=remark[:msgs.MAX_AUDIT_FIELD_LEN], outcome_of_previous=outcome_of_previous)


CURRENT: contextvars.ContextVar[AuditCall | None] = contextvars.ContextVar("autoswitch_admin_audit", default=None)


def begin(action: str, request: Any, group: str) -> AuditCall | None:
    """The audit of this call, if the caller is an admin (without authorization there are no names;
    a broker asking for its own election is not an admin call)."""
    caller = current_caller()
    if caller is None or Role.ADMIN not in caller.roles:
        return None
    return AuditCall(caller.name, action, group, audit_detail(request))


def pending() -> AuditCall | None:
    """The current call's audit if no write has carried it yet."""
    call = CURRENT.get()
    return call if call is not None and not call.recorded else None
