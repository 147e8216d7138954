"""RocketMQ's name-server routes, sans-IO (docs/rocketmq.md "The name server"): what RocketMQ
brokers register (103), refresh (322) and withdraw (104), and what clients and mqadmin read (105,
106, and the topic lists 206 and 224), with RocketMQ's rules and a clock passed in.

- A broker registers as brokerId 0 when it is its group's master and with its controller-assigned
  id otherwise; a broker that changes role drops the id it had before (same address).
- When two brokers claim id 0, the higher ``stateVersion`` wins (a broker sets it to its
  MasterEpoch at every role change): a deposed master that re-registers cannot take the route back.
- A registration lives ``heartbeatTimeoutMillis`` (RocketMQ's default 120 s) unless refreshed.
- A master's topics are the group's queues (slaves' topic lists are ignored, as RocketMQ does); a
  master's registration adds to the topics it registered before (one new topic comes alone).
- Better than RocketMQ: a slave's answer names the master the controllers elected (``master_hint``:
  group -> the master's broker address), with the HA address that broker registered, so a slave
  need not wait for the new master's own registration (RocketMQ answers from id 0 only, which may
  still be the dead master's for up to 30 s).

Bounded: brokers (``MAX_BROKERS``), topics (``MAX_TOPICS``), names and addresses by length.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoswitch.base.addr import AddressError, split_hostport

MASTER_ID = 0
DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
MAX_BROKERS = 10_000
MAX_TOPICS = 100_000
MAX_TOPICS_PER_BROKER = 20_000
MAX_NAME = 255
# RocketMQ's topic and broker-name characters (TopicValidator), plus what cluster names use.
NAME_RE = re.compile(r"[A-Za-z0-9_%|\-.]+")


class RouteRefused(ValueError):
    """A registration the table will not take (a bad name or address, a full table)."""


@dataclass
class BrokerEntry:
    cluster: str
    name: str
    addr: str
    broker_id: int
    ha_addr: str
    state_version: int
    data_version: Any
    last_ms: int
    timeout_ms: int
    topics: dict[str, dict[str, int]] = field(default_factory=dict)

    def alive(self, now_ms: int) -> bool:
        return now_ms - self.last_ms <= self.timeout_ms


def check_name(v: str, what: str) -> str:
    if not v or len(v) > MAX_NAME or not NAME_RE.fullmatch(v):
        raise RouteRefused(f"{what} {v[:64]!r} is not a RocketMQ name")
    return v


def check_addr(v: str, what: str) -> str:
    try:
        split_hostport(v)
    except AddressError as e:
        raise RouteRefused(f"{what} {v[:64]!r}: {e}") from None
    return v


def _dict(v: Any) -> dict[str, Any]:
    return v if isinstance(v, dict) else {}


def _queue(cfg: Any) -> dict[str, int] | None:
    """A TopicConfig's queue data, or None when it is not one."""
    if not isinstance(cfg, dict):
        return None
    out = {}
    for k, default in (("readQueueNums", 16), ("writeQueueNums", 16), ("perm", 6), ("topicSysFlag", 0)):
        v = cfg.get(k, default)
        if type(v) is not int or not 0 <= v <= 1 << 16:
            return None
        out[k] = v
    return out


class RocketRoutes:
    def __init__(self, master_hint: Callable[[str], str | None] = lambda name: None) -> None:
        self.master_hint = master_hint
        self._by_addr: dict[str, BrokerEntry] = {}

    def __len__(self) -> int:
        return len(self._by_addr)

    def register(self, *, cluster: str, name: str, addr: str, broker_id: int, ha_addr: str, body: Any,
                 timeout_ms: int, now_ms: int) -> tuple[bool, str, str]:
        """(taken, masterAddr, haServerAddr) for the broker's answer. ``body`` is its
        RegisterBrokerBody as parsed JSON. Not taken: another live broker holds id 0 with a higher
        stateVersion (RocketMQ answers such a registration with nothing either)."""
        check_name(cluster, "clusterName")
        check_name(name, "brokerName")
        check_addr(addr, "brokerAddr")
        if ha_addr:
            check_addr(ha_addr, "haServerAddr")
        if not 0 <= broker_id < 1 << 31:
            raise RouteRefused(f"brokerId {broker_id} out of range")
        timeout_ms = min(max(timeout_ms or DEFAULT_TIMEOUT_MS, 1000), MAX_TIMEOUT_MS)
        wrapper = _dict(body.get("topicConfigSerializeWrapper") if isinstance(body, dict) else None)
        dv = _dict(wrapper.get("dataVersion"))
        state = dv.get("stateVersion", 0)
        state = state if type(state) is int else 0
        table = _dict(wrapper.get("topicConfigTable"))
        if len(table) > MAX_TOPICS_PER_BROKER:
            raise RouteRefused(f"{len(table)} topics from one broker (at most {MAX_TOPICS_PER_BROKER})")
        topics = {}
        for t, cfg in table.items():
            q = _queue(cfg)
            if q is not None and isinstance(t, str) and len(t) <= MAX_NAME and NAME_RE.fullmatch(t):
                topics[t] = q
        self._expire(now_ms)
        old = self._by_addr.get(addr)
        if broker_id == MASTER_ID and old is not None and old.broker_id == MASTER_ID and old.name == name:
            # A registration adds to the topics a master registered before, as RocketMQ's name
            # server does (deleteTopicWithBrokerRegistration is off by default): a broker sends a
            # 103 with only the one topic it just created (registerSingleTopicAll), and replacing
            # the table with it dropped every other topic's route until the next full registration
            # 30 s later (tests/integration/test_rocketmq_brokers.py's topicList caught it)
            topics = {**old.topics, **topics}
        if broker_id == MASTER_ID:
            holder = self._holder(name, MASTER_ID, now_ms)
            if holder is not None and holder.addr != addr and holder.state_version > state:
                return False, "", ""
        if addr not in self._by_addr and len(self._by_addr) >= MAX_BROKERS:
            raise RouteRefused(f"the name server holds {MAX_BROKERS} brokers")
        if broker_id == MASTER_ID and len(self._topic_names() | set(topics)) > MAX_TOPICS:
            raise RouteRefused(f"more than {MAX_TOPICS} topics")
        # the id this address held before (a role change), and the id another address held
        for other in [e for e in self._by_addr.values() if e.name == name and e.broker_id == broker_id
                      and e.addr != addr]:
            del self._by_addr[other.addr]
        self._by_addr[addr] = BrokerEntry(cluster, name, addr, broker_id, ha_addr, state, dv, now_ms, timeout_ms,
                                          topics if broker_id == MASTER_ID else {})
        if broker_id == MASTER_ID:
            return True, "", ""
        master = self.master_of(name, now_ms)
        return True, (master.addr if master else ""), (master.ha_addr if master else "")

    def master_of(self, name: str, now_ms: int) -> BrokerEntry | None:
        """The controllers' master when it registered here (under any id), else id 0."""
        hint = self.master_hint(name)
        if hint:
            e = self._by_addr.get(hint)
            if e is not None and e.name == name and e.alive(now_ms):
                return e
        return self._holder(name, MASTER_ID, now_ms)

    def unregister(self, name: str, addr: str, broker_id: int) -> bool:
        e = self._by_addr.get(addr)
        if e is None or e.name != name or e.broker_id != broker_id:
            return False
        del self._by_addr[addr]
        return True

    def refresh(self, addr: str, data_version: Any, now_ms: int) -> bool:
        """QUERY_DATA_VERSION: the broker is alive; True when what it holds differs from what it
        registered (it registers again)."""
        e = self._by_addr.get(addr)
        if e is None or not e.alive(now_ms):
            return True
        e.last_ms = now_ms
        return e.data_version != data_version

    def route(self, topic: str, now_ms: int) -> dict[str, Any] | None:
        """TopicRouteData, or None when no live master serves ``topic``."""
        self._expire(now_ms)
        masters = [e for e in self._by_addr.values() if e.broker_id == MASTER_ID and topic in e.topics]
        if not masters:
            return None
        queues: list[dict[str, Any]] = [{"brokerName": e.name, **e.topics[topic]} for e in masters]
        names = sorted({e.name for e in masters})
        return {"queueDatas": sorted(queues, key=lambda q: q["brokerName"]),
                "brokerDatas": [self._broker_data(n) for n in names], "filterServerTable": {}}

    def cluster_info(self, now_ms: int) -> dict[str, Any]:
        self._expire(now_ms)
        clusters: dict[str, set[str]] = {}
        for e in self._by_addr.values():
            clusters.setdefault(e.cluster, set()).add(e.name)
        names = sorted({e.name for e in self._by_addr.values()})
        return {"brokerAddrTable": {n: self._broker_data(n) for n in names},
                "clusterAddrTable": {c: sorted(ns) for c, ns in sorted(clusters.items())}}

    def topics(self, now_ms: int, cluster: str | None = None) -> list[str]:
        """The topics live masters serve (206), or those of ``cluster``'s groups (224)."""
        self._expire(now_ms)
        return sorted({t for e in self._by_addr.values()
                       if e.broker_id == MASTER_ID and (cluster is None or e.cluster == cluster) for t in e.topics})

    def _broker_data(self, name: str) -> dict[str, Any]:
        members = [e for e in self._by_addr.values() if e.name == name]
        return {"cluster": members[0].cluster if members else "", "brokerName": name,
                "brokerAddrs": {str(e.broker_id): e.addr for e in sorted(members, key=lambda e: e.broker_id)},
                "enableActingMaster": False}

    def _holder(self, name: str, broker_id: int, now_ms: int) -> BrokerEntry | None:
        for e in self._by_addr.values():
            if e.name == name and e.broker_id == broker_id and e.alive(now_ms):
                return e
        return None

    def _topic_names(self) -> set[str]:
        return {t for e in self._by_addr.values() for t in e.topics}

    def _expire(self, now_ms: int) -> None:
        for addr in [a for a, e in self._by_addr.items() if not e.alive(now_ms)]:
            del self._by_addr[addr]
