"""What the Raft driver needs from a network: deliver inbound messages, send outbound ones, say when a
batch has left. The gRPC adapter (``transport.GrpcRaftTransport``) is one implementation; TLS, other
wires or an in-memory network plug in here without touching the driver."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .messages import Message

Deliver = Callable[[list[Message]], None]


class RaftTransport(Protocol):
    async def start(self, deliver: Deliver) -> None:
        """Begin accepting inbound messages (handed to ``deliver``, on the event loop) and sending."""

    def send(self, msgs: list[Message]) -> None:
        """Queue messages to their peers; never blocks. Messages to unknown peers are dropped."""

    def set_members(self, addrs: dict[str, str]) -> None:
        """The membership changed: talk to (and accept) exactly these peers, node id -> address."""

    def handed_over(self, msgs: list[Message]) -> bool:
        """Have these messages left this process's queues (the driver then may reuse their buffers)?"""

    async def stop(self) -> None:
        """Stop sending and accepting; idempotent."""
