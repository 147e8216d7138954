"""Who is connected: the clients a broker served lately (mqadmin consumerConnection /
producerConnection, `kafka-consumer-groups --describe --members`; `admin client-connections`).

A client is its address and what it says it is: the gRPC user agent (autoswitch's SDK names itself
``autoswitch-py/<version> (<host>@<pid>)``; other gRPC clients send their library's), or
``fetch-port`` for a connection of the fetch port. Per client: since when and until when it was
seen, how many produce / consume / commit calls it made, the topics and consumer groups it used.
Pure, the clock passed in; bounded (``MAX_CLIENTS``, the least recently seen go first) and a
client not seen for ``IDLE_MS`` is gone (gRPC does not tell a server when a connection closes).
"""

from __future__ import annotations

from dataclasses import dataclass, field

MAX_CLIENTS = 10_000
MAX_NAMES_PER_CLIENT = 16       # topics, consumer groups: the first ones seen (``names_truncated`` past them)
IDLE_MS = 300_000
MAX_AGENT_LEN = 200
KINDS = ("produce", "consume", "commit")


@dataclass
class Client:
    address: str
    agent: str
    via: str                    # "grpc" or "port"
    first_ms: int
    last_ms: int
    calls: dict[str, int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    consumer_groups: set[str] = field(default_factory=set)
    names_truncated: bool = False   # it used more topics or consumer groups than are listed

    @property
    def roles(self) -> list[str]:
        return sorted({"producer" if k == "produce" else "consumer" for k in self.calls})


def grpc_peer(peer: str) -> str:
    """``ipv4:127.0.0.1:5000`` / ``ipv6:[::1]:5000`` (gRPC's form) as HOST:PORT."""
    for prefix in ("ipv4:", "ipv6:"):
        if peer.startswith(prefix):
            return peer[len(prefix):]
    return peer


class ClientTable:
    def __init__(self) -> None:
        self._by_key: dict[tuple[str, str], Client] = {}

    def seen(self, *, address: str, agent: str, kind: str, via: str, now_ms: int, topic: str = "",
             consumer_group: str = "") -> None:
        assert kind in KINDS, kind
        agent = agent[:MAX_AGENT_LEN]
        key = (address, agent)
        c = self._by_key.get(key)
        if c is None:
            if len(self._by_key) >= MAX_CLIENTS:
                self._expire(now_ms)
                if len(self._by_key) >= MAX_CLIENTS:
                    del self._by_key[min(self._by_key, key=lambda k: self._by_key[k].last_ms)]
            c = self._by_key[key] = Client(address, agent, via, now_ms, now_ms)
        c.last_ms = max(c.last_ms, now_ms)
        c.calls[kind] = c.calls.get(kind, 0) + 1
        for name, names in ((topic, c.topics), (consumer_group, c.consumer_groups)):
            if name and name not in names:
                if len(names) < MAX_NAMES_PER_CLIENT:
                    names.add(name)
                else:
                    c.names_truncated = True

    def clients(self, now_ms: int) -> list[Client]:
        """The clients seen within IDLE_MS, the most recently seen first."""
        self._expire(now_ms)
        return sorted(self._by_key.values(), key=lambda c: (-c.last_ms, c.address))

    def _expire(self, now_ms: int) -> None:
        for k in [k for k, c in self._by_key.items() if now_ms - c.last_ms > IDLE_MS]:
            del self._by_key[k]
