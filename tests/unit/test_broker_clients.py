"""Who is connected (broker/clients.py; `admin client-connections`)."""

from __future__ import annotations

from autoswitch.broker import clients
from autoswitch.broker.clients import IDLE_MS, ClientTable, grpc_peer


def test_a_client_is_its_address_and_agent_with_what_it_did():
    t = ClientTable()
    a = dict(address="10.0.0.5:41000", agent="autoswitch-py/0.2.0 (h@1) grpc-python/1.85", via="grpc")
    t.seen(**a, kind="produce", topic="T1", now_ms=1000)
    t.seen(**a, kind="produce", topic="T2", now_ms=2000)
    t.seen(**a, kind="commit", topic="T1", consumer_group="CG", now_ms=3000)
    t.seen(address="10.0.0.6:5", agent="fetch-port", via="port", kind="consume", topic="T1", now_ms=2500)
    [c, port] = t.clients(4000)
    assert (c.first_ms, c.last_ms, c.calls, c.topics, c.consumer_groups) == (
        1000, 3000, {"produce": 2, "commit": 1}, {"T1", "T2"}, {"CG"})
    assert c.roles == ["consumer", "producer"] and port.roles == ["consumer"] and port.via == "port"
    assert [x.address for x in t.clients(3000 + IDLE_MS + 1)] == []        # idle for too long: gone
    assert grpc_peer("ipv4:127.0.0.1:5000") == "127.0.0.1:5000" and grpc_peer("ipv6:[::1]:7") == "[::1]:7"


def test_the_table_is_bounded(monkeypatch):
    monkeypatch.setattr(clients, "MAX_CLIENTS", 2)
    monkeypatch.setattr(clients, "MAX_NAMES_PER_CLIENT", 2)
    t = ClientTable()
    for i, topic in enumerate(("a", "b", "c")):
        t.seen(address=f"h:{i}", agent="x", via="grpc", kind="produce", topic=topic, now_ms=i)
    assert [c.address for c in t.clients(3)] == ["h:2", "h:1"]          # the least recently seen went
    for topic in ("a", "b", "c"):
        t.seen(address="h:2", agent="x", via="grpc", kind="produce", topic=topic, now_ms=4)
    [c, _] = t.clients(5)
    assert len(c.topics) == 2 and c.names_truncated
