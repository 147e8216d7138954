"""A request's events applied to copies of the groups (and config) they touch: checked against the
invariants, then committed to the state at once, or dropped (a rejected request leaves no trace)."""

from __future__ import annotations

from autoswitch.controller.messages import (
    AdminAuditEvent,
    ControllerMaintenanceEvent,
    Event,
    FeatureLevelEvent,
    MemberLevelEvent,
    UpdateConfigEvent,
)
from autoswitch.controller.state.sm_config import SMConfig
from autoswitch.controller.state.sm_state import (
    ControllerState,
    GroupState,
    apply_config,
    apply_controller_maintenance,
    apply_group_event,
    apply_member_level,
    check_group_invariants,
    commit_group,
)


class Staged:
    """Copies of the touched groups/config with the events applied, not yet committed."""

    __slots__ = ("state", "groups", "config", "feature_level", "controller_maintenance", "member_levels", "after")

    def __init__(self, state: ControllerState) -> None:
        self.state = state
        self.groups: dict[str, GroupState | None] = {}
        self.config: SMConfig | None = None
        self.feature_level: int | None = None
        self.controller_maintenance: frozenset[str] | None = None
        self.member_levels: dict[str, int] | None = None
        # The touched group's state right after each applied event (for the history records).
        # Each event applies to a fresh copy, so these objects are never mutated afterwards.
        self.after: list[GroupState | None] = []

    def group(self, name: str) -> GroupState | None:
        if name in self.groups:
            return self.groups[name]
        return self.state.groups.get(name)

    def apply(self, ev: Event) -> None:
        if isinstance(ev, AdminAuditEvent):       # a record only
            self.after.append(self.group(ev.broker_name))
            return
        if isinstance(ev, UpdateConfigEvent):
            if self.config is None:
                self.config = self.state.config.copy()
            apply_config(self.config, ev)
            self.after.append(self.group(ev.broker_name))
            return
        if isinstance(ev, FeatureLevelEvent):
            self.feature_level = ev.level
            self.after.append(None)
            return
        if isinstance(ev, MemberLevelEvent):
            self.member_levels = apply_member_level(
                self.member_levels if self.member_levels is not None else self.state.member_levels, ev)
            self.after.append(None)
            return
        if isinstance(ev, ControllerMaintenanceEvent):
            members = self.controller_maintenance
            self.controller_maintenance = apply_controller_maintenance(
                members if members is not None else self.state.controller_maintenance, ev)
            self.after.append(None)
            return
        name = ev.broker_name
        cur = self.group(name)
        new = apply_group_event(cur.copy() if cur is not None else None, ev, self.state.tombstones.get(name))
        self.groups[name] = new
        self.after.append(new)

    def check(self) -> None:
        for name, new in self.groups.items():
            check_group_invariants(self.state.groups.get(name), new, self.state.tombstones.get(name))

    def commit(self) -> None:
        for name, new in self.groups.items():
            commit_group(self.state, name, self.state.groups.get(name), new)
        if self.config is not None:
            self.state.config = self.config
        if self.feature_level is not None:
            self.state.feature_level = self.feature_level
        if self.controller_maintenance is not None:
            self.state.controller_maintenance = self.controller_maintenance
        if self.member_levels is not None:
            self.state.member_levels = self.member_levels
