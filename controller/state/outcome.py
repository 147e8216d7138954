"""What a state-machine decider returns beside its events: the reply's code, remark, the group
whose view the reply carries, and data."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from autoswitch.controller.codes import Code
from autoswitch.controller.messages import Event


@dataclass
class Outcome:
    code: int = Code.SUCCESS
    remark: str = ""
    group: str | None = None          # reply carries this group's (staged) view
    broker_id: int | None = None
    data: Any = None
    # (outcome word, rule, verdicts) of an election: the decision record's (controller/state/explain.py)
    explain: Any = None


def reject(code: int, remark: str, group: str | None = None) -> tuple[list[Event], Outcome]:
    return [], Outcome(code, remark, group)
