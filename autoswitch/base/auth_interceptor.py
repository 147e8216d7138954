"""The one gRPC server interceptor per server that authenticates and authorizes every call with
a ``Guard`` (autoswitch/base/auth.py) before its handler runs, each message of a streaming call
too, and ends an open stream whose token is revoked meanwhile."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

from autoswitch.base.auth import MISSING_ROLE_KEY, Denied, Guard, Principal, current_caller, set_caller

REVALIDATE_S = 1.0     # how often an open stream's token is looked up again


def _method_name(full: str) -> str:
    return full.rsplit("/", 1)[-1]


def server_interceptor(guard: Guard, peer_identity: Callable[[Any], str | None],
                       peer_cluster: Callable[[Any], str | None] | None = None):
    """A ``grpc.aio.ServerInterceptor`` that authenticates and authorizes every call with ``guard``
    before its handler runs (each message of a streaming call too). ``peer_cluster``: the cluster
    binding of the caller's certificate (checked when the guard knows its own)."""
    import grpc

    async def deny(context, e: Denied) -> None:
        context.set_trailing_metadata(((MISSING_ROLE_KEY, e.role.value),))
        await context.abort(grpc.StatusCode.PERMISSION_DENIED, str(e))

    def who(context) -> Principal | None:
        cluster = peer_cluster(context) if peer_cluster is not None and guard.authn.own_cluster is not None else None
        return guard.authn.principal(peer_identity(context), context.invocation_metadata(), cluster)

    async def admitted(method: str, request: Any, context) -> Principal | None:
        """A unary request's caller, checked (the call is aborted if denied) and made current."""
        p = who(context)
        try:
            set_caller(guard.check(p, method, request))
        except Denied as e:
            await deny(context, e)
        return p

    async def checked(method: str, context, it: AsyncIterator[Any]) -> AsyncIterator[Any]:
        p = who(context)
        try:
            guard.check_open(p, method)
        except Denied as e:
            await deny(context, e)
        set_caller(p)
        return _each(method, p, it, context)

    def _each(method: str, p: Principal | None, it: AsyncIterator[Any], context) -> AsyncIterator[Any]:
        async def gen():
            async for req in it:
                try:
                    # a token is looked up again for every message: one revoked meanwhile stops here
                    guard.check(who(context) if p is not None and p.via == "token" else p, method, req)
                except Denied as e:
                    await deny(context, e)
                yield req
        return gen()

    async def _watched(method: str, p: Principal | None, context, produce) -> AsyncIterator[Any]:
        """Yield what ``produce`` (an async generator, or a coroutine writing with context.write)
        yields; a caller that came with a token is looked up again every REVALIDATE_S while the
        stream is open, and its stream ends with PERMISSION_DENIED once the token is revoked."""
        import asyncio

        agen = produce if inspect.isasyncgen(produce) else None
        if p is None or p.via != "token":       # certificates are not revoked per stream: no watch
            if agen is not None:
                async for item in agen:
                    yield item
            else:
                await produce
            return
        pending: asyncio.Future | None = None
        try:
            while True:
                pending = asyncio.ensure_future(agen.__anext__() if agen is not None else produce)
                while True:
                    done, _ = await asyncio.wait({pending}, timeout=REVALIDATE_S)
                    if done:
                        break
                    try:
                        guard.check_open(who(context), method)
                    except Denied as e:
                        pending.cancel()
                        guard.log.info("stream_ended_revoked", caller=p.name, method=method)
                        await deny(context, e)
                try:
                    item = pending.result()
                except StopAsyncIteration:
                    return
                pending = None
                if agen is None:
                    return
                yield item
        finally:
            if pending is not None and not pending.done():
                pending.cancel()
            if agen is not None:
                await agen.aclose()

    class Interceptor(grpc.aio.ServerInterceptor):
        async def intercept_service(self, continuation, details):
            handler = await continuation(details)
            if handler is None:
                return None
            method = _method_name(details.method)
            ser, de = handler.response_serializer, handler.request_deserializer
            if handler.unary_unary is not None:
                inner = handler.unary_unary

                async def uu(request, context):
                    await admitted(method, request, context)
                    return await inner(request, context)
                return grpc.unary_unary_rpc_method_handler(uu, request_deserializer=de, response_serializer=ser)
            if handler.unary_stream is not None:
                inner_us = handler.unary_stream

                async def us(request, context):
                    p = await admitted(method, request, context)
                    async for item in _watched(method, p, context, inner_us(request, context)):
                        yield item
                return grpc.unary_stream_rpc_method_handler(us, request_deserializer=de, response_serializer=ser)
            if handler.stream_unary is not None:
                inner_su = handler.stream_unary

                async def su(request_iterator, context):
                    return await inner_su(await checked(method, context, request_iterator), context)
                return grpc.stream_unary_rpc_method_handler(su, request_deserializer=de, response_serializer=ser)
            inner_ss = handler.stream_stream

            async def ss(request_iterator, context):
                it = await checked(method, context, request_iterator)
                async for item in _watched(method, current_caller(), context, inner_ss(it, context)):
                    yield item
            return grpc.stream_stream_rpc_method_handler(ss, request_deserializer=de, response_serializer=ser)

    return Interceptor()
