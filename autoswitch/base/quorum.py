"""The one majority rule, shared by the Raft core, the controller's liveness verdicts and the
broker's master lease: they must count alike for the lease argument to hold."""

from __future__ import annotations


def majority(n: int) -> int:
    """Smallest number of members that is more than half of ``n``."""
    return n // 2 + 1
