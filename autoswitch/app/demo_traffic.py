"""Traffic against a playground cluster and what it shows: the routed demo producer, the check
that every acknowledged message is still served, and the failover measurement (kill -9 or
SIGSTOP a master while producing; time to the first ack from its successor). Used by the
failover demo, bench/failover.py, bench/backends.py, bench/rolling.py and the power-loss rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from autoswitch.app.launcher import Child
from autoswitch.app.playground_cluster import Cluster, PlaygroundError
from autoswitch.base.errors import AutoswitchError
from autoswitch.base.log import get_logger
from autoswitch.base.tls import TLSConfig

_log = get_logger("playground")


@dataclass
class Ack:
    t: float            # time.monotonic() when the ack arrived
    msg_id: str
    broker_id: int
    epoch: int
    addr: str


class DemoProducer:
    """One message at a time to a group's master, through the routed producer every client uses
    (autoswitch.broker.client.route.RoutedProducer: name-server route, NOT_MASTER redirects, same msg_id
    on every retry, acks counted only under the routed MasterEpoch, the ack log). It retries in
    short windows so a stop request is seen within about a second, and times every ack."""

    def __init__(self, namesrv: str, group: str, topic: str, ack_log: Path, *, rpc_timeout_s: float = 2.0,
                 backoff_min_s: float = 0.02, backoff_max_s: float = 0.1, body_size: int = 256,
                 tls: TLSConfig | None = None) -> None:
        from autoswitch.broker.client.route import RetryPolicy, RoutedProducer

        policy = RetryPolicy(backoff_min_s=backoff_min_s, backoff_max_s=backoff_max_s, retry_deadline_s=1.0,
                             rpc_timeout_s=rpc_timeout_s)
        self._p = RoutedProducer(namesrv, group, ack_log=ack_log, policy=policy, tls=tls)
        self.topic = topic
        self.body = b"x" * body_size
        self.acks: list[Ack] = []
        self.last_error = ""

    @property
    def failures(self) -> int:
        """Attempts that were not acknowledged (retries of the routed producer)."""
        return self._p.stats.retries

    async def send_one(self, stop: asyncio.Event, deadline: float) -> Ack | None:
        """Retry one new message until acked, stop is set, or the deadline passes."""
        from autoswitch.broker.client.route import RetriesExhausted

        msg_id = uuid.uuid4().hex
        while not stop.is_set() and time.monotonic() < deadline:
            try:
                results = await self._p.produce(self.topic, [self.body], [msg_id])
            except RetriesExhausted as e:
                self.last_error = e.message[:200]
                continue
            ack = Ack(time.monotonic(), msg_id, self._p.last_ack_broker_id, results[0].epoch, self._p.master or "")
            self.acks.append(ack)
            return ack
        return None

    async def run(self, stop: asyncio.Event, max_messages: int, max_s: float) -> None:
        deadline = time.monotonic() + max_s
        for _ in range(max_messages):
            if stop.is_set() or time.monotonic() >= deadline:
                return
            await self.send_one(stop, deadline)

    async def close(self) -> None:
        await self._p.close()


async def read_all_ids(addr: str, topic: str, max_messages: int = 1_000_000,
                       tls: TLSConfig | None = None) -> set[str]:
    """Every msg_id the broker serves for topic (below its confirmOffset), queue offset 0 onwards."""
    from autoswitch.broker.client.client import ConsumerClient
    from autoswitch.proto import broker_pb2 as pb

    c = ConsumerClient(addr, timeout_s=5.0, max_retries=3, tls=tls)
    ids: set[str] = set()
    q = 0
    try:
        while len(ids) < max_messages:
            reply = await c.consume(topic, q, 1000)
            if reply.status != pb.OK:
                raise PlaygroundError(f"consume from {addr}: {pb.Status.Name(reply.status)} {reply.error_message}")
            if not reply.messages:
                return ids
            ids.update(m.msg_id for m in reply.messages)
            q = reply.next_queue_offset
    finally:
        await c.close()
    return ids


async def lost_acked(addr: str, topic: str, acked: set[str], wait_s: float = 10.0,
                     tls: TLSConfig | None = None) -> set[str]:
    """Acked ids the (final) master does not serve; retried until wait_s for confirmOffset to settle."""
    deadline = time.monotonic() + wait_s
    while True:
        missing = acked - await read_all_ids(addr, topic, tls=tls)
        if not missing or time.monotonic() >= deadline:
            return missing
        await asyncio.sleep(0.5)


def load_ack_log(path: Path) -> list[dict]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if line.strip():
            out.append(json.loads(line))
    return out


@dataclass
class FailoverResult:
    kill_t: float
    old_master: int
    old_epoch: int
    elected_t: float | None = None
    new_master: int = 0
    new_epoch: int = 0
    new_master_addr: str = ""
    first_ack_t: float | None = None
    first_ack: Ack | None = None
    kill_wall: float = 0.0              # time.time() at the kill, to line up with log timestamps

    @property
    def recovery_s(self) -> float | None:
        return None if self.first_ack_t is None else self.first_ack_t - self.kill_t


async def wait_full_sync_state_set(client: Any, group: str, n: int, timeout_s: float,
                                   interval_s: float = 0.1) -> list[int]:
    """Wait until the group's SyncStateSet has n members (the controller elects only from it: killing
    a master whose slaves have not joined yet leaves no clean candidate, and the group stays without
    a master — the safe outcome, but not a failover). Returns the last set seen."""
    deadline = time.monotonic() + timeout_s
    last: list[int] = []
    while True:
        with contextlib.suppress(AutoswitchError, TimeoutError):
            info = await asyncio.wait_for(client.get_replica_info(group), 1.0)
            last = sorted(info.sync_state_set)
            if info.master_broker_id and len(last) >= n:
                return last
        if time.monotonic() >= deadline:
            return last
        await asyncio.sleep(interval_s)


async def watch_election(client: Any, group: str, old_epoch: int, res: FailoverResult, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(AutoswitchError, asyncio.TimeoutError):
            info = await asyncio.wait_for(client.get_replica_info(group), 1.0)
            if info.master_epoch > old_epoch and info.master_broker_id:
                res.elected_t = time.monotonic()
                res.new_master, res.new_epoch = info.master_broker_id, info.master_epoch
                res.new_master_addr = info.master_address
                return
        await asyncio.sleep(0.02)


async def kill_master_and_measure(cluster: Cluster, client: Any, producer: DemoProducer, group: str,
                                  timeout_s: float, freeze: bool = False) -> tuple[FailoverResult, Child]:
    """SIGKILL the group's master while `producer` keeps producing; returns when the producer has an
    ack from another broker (or timeout_s passed). ``freeze``: SIGSTOP it instead (a silent failure:
    its sockets stay open); the caller ends it (cluster.kill9) when done."""
    info = await client.get_replica_info(group)
    victim = cluster.child_by_addr(info.master_address)
    if victim is None or not info.master_broker_id:
        raise PlaygroundError(f"{group}: no master process to kill", master=info.master_address)
    n_acks = len(producer.acks)
    if freeze:
        os.kill(victim.pid, signal.SIGSTOP)
        _log.info("child_frozen", name=victim.name, pid=victim.pid)
    else:
        cluster.kill9(victim)
    res = FailoverResult(time.monotonic(), info.master_broker_id, info.master_epoch, kill_wall=time.time())
    watcher = asyncio.ensure_future(watch_election(client, group, info.master_epoch, res, timeout_s))
    deadline = res.kill_t + timeout_s
    while time.monotonic() < deadline:
        new = [a for a in producer.acks[n_acks:] if a.t >= res.kill_t and a.addr != info.master_address]
        if new:
            res.first_ack, res.first_ack_t = new[0], new[0].t
            break
        await asyncio.sleep(0.005)
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(watcher), max(0.1, deadline - time.monotonic()))
    watcher.cancel()
    return res, victim
