"""The futures behind ``RaftNode.propose_many``: one wait per call, one outcome per entry."""

from __future__ import annotations

import asyncio
from typing import Any


class ProposeExpired(Exception):
    """Internal: a proposal's wait ran out (mapped to NotLeader/QuorumUnavailable/ProposalTimeout)."""


def expire(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_exception(ProposeExpired())


def wake_up(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


PENDING = object()


class Proposal:
    """The wait of one ``propose_many`` call: one future for all its entries, resolved with the
    per-entry outcomes (apply result or exception) once the last of them is decided."""

    __slots__ = ("fut", "out", "left", "where")

    def __init__(self, fut: asyncio.Future, n: int) -> None:
        self.fut = fut
        self.out: list[Any] = [PENDING] * n
        self.left = n
        self.where: list[tuple[int, int]] = []    # (log index, position) of the proposed entries

    def decide(self, pos: int, value: Any) -> None:
        if self.out[pos] is not PENDING:
            return
        self.out[pos] = value
        self.left -= 1
        if self.left == 0 and not self.fut.done():
            self.fut.set_result(self.out)
