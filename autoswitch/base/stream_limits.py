"""A budget of open streams per server, per caller and per method (issue 29, item 3).

gRPC's ``maximum_concurrent_rpcs`` counts every call, streams included, and answers
RESOURCE_EXHAUSTED before any interceptor once it is full. A caller that opens long-lived streams
(``grpc.health.v1.Health/Watch``, ``WatchReplicaInfo``) could fill it: a producer certificate
opened 1,024 Health/Watch streams on a master and every Produce failed from then on. So streams
are budgeted below that limit, in this order:

- a quarter of ``maximum_concurrent_rpcs`` is never given to streams: unary calls (produce,
  registration, admin calls, liveness queries) always find room;
- callers without the peer, broker or admin role (readers, producers, unknown callers) share at
  most half of it: the streams of the control plane (Raft, heartbeat streams, broker sessions,
  replica-info watches of brokers) keep the rest;
- one caller (its authenticated identity; without authorization there are no callers to tell
  apart, and only the two caps above apply) holds at most ``per_caller`` streams, and at most
  ``per_method`` of one method.

A stream over budget is refused with RESOURCE_EXHAUSTED at once (one rate-limited log line per
caller and method). The decision is a pure object (``StreamBudget``); the interceptor only asks it.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from autoswitch.base.auth import Principal, Role, current_caller
from autoswitch.base.log import RateLimitedLog, get_logger

PRIVILEGED = frozenset({Role.PEER, Role.BROKER, Role.ADMIN})
DEFAULT_PER_CALLER = 256
DEFAULT_PER_METHOD = 64


@dataclass
class StreamBudget:
    max_rpcs: int
    per_caller: int = DEFAULT_PER_CALLER
    per_method: int = DEFAULT_PER_METHOD
    open_total: int = 0
    open_unprivileged: int = 0
    by_caller: dict[str, int] = field(default_factory=dict)
    by_method: dict[tuple[str, str], int] = field(default_factory=dict)
    refused: dict[str, int] = field(default_factory=dict)

    @property
    def total_cap(self) -> int:
        return max(1, self.max_rpcs * 3 // 4)

    @property
    def unprivileged_cap(self) -> int:
        return max(1, self.max_rpcs // 2)

    def acquire(self, caller: str | None, privileged: bool, method: str) -> str | None:
        """Take a slot for a new stream, or say why not (nothing taken then)."""
        if self.open_total >= self.total_cap:
            why = "server_streams"
        elif not privileged and self.open_unprivileged >= self.unprivileged_cap:
            why = "unprivileged_streams"
        elif caller is not None and self.by_caller.get(caller, 0) >= self.per_caller:
            why = "caller_streams"
        elif caller is not None and self.by_method.get((caller, method), 0) >= self.per_method:
            why = "caller_method_streams"
        else:
            self.open_total += 1
            if not privileged:
                self.open_unprivileged += 1
            if caller is not None:
                self.by_caller[caller] = self.by_caller.get(caller, 0) + 1
                self.by_method[(caller, method)] = self.by_method.get((caller, method), 0) + 1
            return None
        self.refused[why] = self.refused.get(why, 0) + 1
        return why

    def release(self, caller: str | None, privileged: bool, method: str) -> None:
        self.open_total -= 1
        if not privileged:
            self.open_unprivileged -= 1
        if caller is not None:
            for d, k in ((self.by_caller, caller), (self.by_method, (caller, method))):
                n = d[k] - 1   # type: ignore[index]
                if n:
                    d[k] = n   # type: ignore[index]
                else:
                    del d[k]   # type: ignore[arg-type]


def _caller(authorized: bool) -> tuple[str | None, bool]:
    p: Principal | None = current_caller() if authorized else None
    if p is None:
        return None, not authorized     # without authorization nobody can be told apart: no class
    return f"{p.via}:{p.name}", bool(p.roles & PRIVILEGED)


def stream_limit_interceptor(budget: StreamBudget, component: str, authorized: bool):
    """A ``grpc.aio.ServerInterceptor`` that holds every streaming call to ``budget``. Put it after
    the authorization interceptor (it reads the caller that one found)."""
    import grpc

    log = RateLimitedLog(get_logger(component))

    async def refuse(context, who: str | None, method: str, why: str) -> None:
        log.warning((who, method), "stream_refused", caller=who or "", method=method, reason=why,
                    open=budget.open_total, cap=budget.total_cap)
        await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED,
                            f"too many open streams ({why.replace('_', ' ')}); close some and retry")

    @contextlib.asynccontextmanager
    async def slot(method: str, context):
        """One stream's slot for the call's life; the call is aborted if there is none."""
        who, privileged = _caller(authorized)
        why = budget.acquire(who, privileged, method)
        if why is not None:
            await refuse(context, who, method, why)
        try:
            yield
        finally:
            budget.release(who, privileged, method)

    def guarded(method: str, call: Callable[..., Any]):
        async def run(arg, context):
            async with slot(method, context):
                result = call(arg, context)
                if inspect.isasyncgen(result):
                    async for item in result:
                        yield item
                else:
                    await result
        return run

    def guarded_unary_reply(method: str, call: Callable[..., Any]):
        async def run(arg, context):
            async with slot(method, context):
                return await call(arg, context)
        return run

    class Interceptor(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation, details):
            handler = await continuation(details)
            if handler is None or handler.unary_unary is not None:
                return handler
            method = details.method.rsplit("/", 1)[-1]
            ser, de = handler.response_serializer, handler.request_deserializer
            if handler.unary_stream is not None:
                return grpc.unary_stream_rpc_method_handler(guarded(method, handler.unary_stream),
                                                            request_deserializer=de, response_serializer=ser)
            if handler.stream_unary is not None:
                return grpc.stream_unary_rpc_method_handler(guarded_unary_reply(method, handler.stream_unary),
                                                            request_deserializer=de, response_serializer=ser)
            return grpc.stream_stream_rpc_method_handler(guarded(method, handler.stream_stream),
                                                         request_deserializer=de, response_serializer=ser)

    return Interceptor()
