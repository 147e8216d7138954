"""Reading over the group master's fetch port, found through the name server.

A broker registers its fetch port in its route (``fetch_address``, its ``fetch_listen``).
``RoutedFetcher.fetch`` looks up the master's route, reads over that port (fetch_client.py) and,
as ``RoutedConsumer`` does for the gRPC Consume, looks again after NOT_MASTER / FENCED (and the
other retryable statuses), a lost connection or a busy port, with backoff bounded by the
policy's ``retry_deadline_s`` (then RetriesExhausted). A NOT_MASTER hint names the new master's
gRPC address, not its fetch port, so every re-route asks the name server. Denied (the port's
``reader`` check) and protocol errors are not retried. Consumer-group offsets stay on gRPC
(``RoutedConsumer``).

``RoutedPortProducer`` is ``RoutedProducer`` (its retries, epoch checks and ack log) sending over
the master's fetch port (PRODUCE frames: one message per request without gRPC's per-call cost);
it too asks the name server on every re-route.
"""

from __future__ import annotations

from collections.abc import Sequence

from autoswitch.broker import fetch_codec as fc
from autoswitch.broker.client.client import RETRYABLE, BrokerUnavailable, ProduceOutcome
from autoswitch.broker.client.coalesce import ProduceCoalescer
from autoswitch.broker.client.fetch_client import FetchClient, FetchRefused
from autoswitch.broker.client.route import (
    NameServerClient,
    RetryPolicy,
    RoutedProducer,
    retry_until,
)

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.tls import TLSConfig
from autoswitch.proto import broker_pb2 as pb


class NoFetchPort(AutoswitchError):
    """The group's master registered no fetch port (it runs without ``fetch_listen``)."""

    code = "NO_FETCH_PORT"


async def master_fetch_route(ns: NameServerClient, group: str) -> tuple[str, int] | None:
    """(fetch address, MasterEpoch) of the group's master route; None when none is known;
    NoFetchPort when the master serves no fetch port."""
    route = await ns.master_route(group)
    if route is None:
        return None
    if not route.fetch_address:
        raise NoFetchPort(f"the master of {group} ({route.address}) registered no fetch port "
                          "(its fetch_listen is off)")
    return route.fetch_address, route.master_epoch


class RoutedFetcher:
    def __init__(self, namesrv: str, group: str, policy: RetryPolicy | None = None,
                 tls: TLSConfig | None = None) -> None:
        self.tls = tls or TLSConfig.off()
        self.ns = NameServerClient(namesrv, self.tls)
        self.group = group
        self.policy = (policy or RetryPolicy()).validate()
        self.addr: str | None = None          # the master's fetch port, from its route
        self.route_refreshes = 0
        self._client: FetchClient | None = None

    async def _refresh(self) -> None:
        self.route_refreshes += 1
        route = await master_fetch_route(self.ns, self.group)
        self.addr = route[0] if route is not None else None

    async def _drop(self) -> None:
        if self._client is not None:
            await self._client.close()
            self._client = None
        self.addr = None

    async def fetch(self, topic: str, queue_offset: int, max_count: int = 1000, min_count: int = 0,
                    max_wait_ms: int = 0) -> fc.RecordsReply:
        """One FETCH answered by the group's master: OK, or a status that is not retryable (e.g.
        OFFSET_OUT_OF_RANGE); RetriesExhausted when no master answered within the deadline."""
        async def attempt() -> tuple[fc.RecordsReply | None, str]:
            if self.addr is None:
                await self._refresh()
            if self.addr is None:
                return None, f"no master route for {self.group}"
            try:
                if self._client is None:
                    self._client = FetchClient(self.addr, tls=self.tls, timeout_s=self.policy.rpc_timeout_s)
                reply = await self._client.fetch(topic, queue_offset, max_count, min_count, max_wait_ms)
                if reply.status == pb.OK or reply.status not in RETRYABLE:
                    return reply, ""
                why = f"{pb.Status.Name(reply.status)}: {reply.error_message[:200]}"
            except FetchRefused as e:
                if e.fetch_error != fc.ERR_BUSY:
                    raise
                why = f"busy: {e.message}"
            except (OSError, EOFError, TimeoutError) as e:   # EOFError: asyncio.IncompleteReadError
                why = f"{self.addr}: {type(e).__name__} {e}"
            await self._drop()
            return None, why

        return await retry_until(self.policy, f"fetch {topic}@{queue_offset}", attempt)

    async def close(self) -> None:
        await self._drop()
        await self.ns.close()


class _PortProducer:
    """A FetchClient as RoutedProducer's per-master client: a lost connection, a timeout or a busy
    port is BrokerUnavailable (re-route and retry), as a failed gRPC call is."""

    def __init__(self, addr: str, tls: TLSConfig, timeout_s: float) -> None:
        self.addr = addr
        self.client = FetchClient(addr, tls=tls, timeout_s=timeout_s)

    async def produce(self, topic: str, bodies: Sequence[bytes], msg_ids: Sequence[str],
                      expect_master_epoch: int = 0) -> ProduceOutcome:
        try:
            return await self.client.produce(topic, bodies, msg_ids, expect_master_epoch)
        except FetchRefused as e:
            if e.fetch_error != fc.ERR_BUSY:
                raise
            raise BrokerUnavailable(f"{self.addr} busy: {e.message}", addr=self.addr) from None
        except (OSError, EOFError, TimeoutError) as e:     # EOFError: asyncio.IncompleteReadError
            await self.client.close()
            raise BrokerUnavailable(f"{self.addr}: {type(e).__name__} {e}", addr=self.addr) from None

    async def close(self) -> None:
        await self.client.close()


class RoutedPortProducer(RoutedProducer):
    """RoutedProducer over the group master's fetch port (see the module doc)."""

    def _make(self, addr: str) -> ProduceCoalescer:
        # the port answers one call at a time per connection: one request out (coalesce.py)
        return self.wrap_connection(_PortProducer(addr, self.tls, self.policy.rpc_timeout_s), 1)

    async def _refresh(self, hint: str | None = None, hint_epoch: int = 0) -> None:
        """The master's fetch port from the name server; a NOT_MASTER hint names only a gRPC
        address, so it is not followed."""
        self.stats.route_refreshes += 1
        route = await master_fetch_route(self.ns, self.group)
        self.master, self.master_epoch = route if route is not None else (None, None)
        self.expect_epoch = self.master_epoch or 0
        if self.master_epoch is not None:
            self.highest_epoch = max(self.highest_epoch, self.master_epoch)
