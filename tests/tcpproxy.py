"""A small asyncio TCP proxy for tests and benchmarks: delay, blackhole (partition), cut.

Runs in its own thread with its own event loop, so synchronous tests can drive it::

    with TcpProxy(("127.0.0.1", upstream_port)) as proxy:   # proxy.port listens on 127.0.0.1
        proxy.set_delay(0.05)       # every chunk waits 50 ms before it is forwarded
        proxy.blackhole(True)       # accept and read, forward nothing (a silent partition)
        proxy.cut()                 # close every open connection now (RST-like)

A blackhole keeps connections open and swallows bytes in both directions, like a partition
that drops packets: gRPC callers see deadlines expire, not connection errors. New connections
are accepted but never reach the upstream while the blackhole is on. Limits: at most
``max_connections`` pairs; each read is at most 64 KiB.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading

CHUNK = 64 * 1024


class TcpProxy:
    def __init__(self, upstream: tuple[str, int], listen_host: str = "127.0.0.1", listen_port: int = 0,
                 max_connections: int = 256) -> None:
        self.upstream = upstream
        self.listen_host = listen_host
        self.port = listen_port
        self.max_connections = max_connections
        self.delay_s = 0.0
        self.blackholed = False
        self.connections = 0  # accepted since start
        self._loop: asyncio.AbstractEventLoop | None = None
        self._server: asyncio.AbstractServer | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._thread: threading.Thread | None = None
        self._ready = threading.Event()

    # ------------------------------------------------------------ control (any thread)

    def start(self) -> TcpProxy:
        self._thread = threading.Thread(target=self._run, name=f"tcpproxy-{self.upstream[1]}", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("proxy did not start")
        return self

    def set_delay(self, seconds: float) -> None:
        assert 0 <= seconds <= 60
        self.delay_s = seconds

    def blackhole(self, on: bool = True) -> None:
        self.blackholed = on

    def cut(self) -> None:
        """Close every open connection (both sides)."""
        if self._loop is not None:
            asyncio.run_coroutine_threadsafe(self._cut(), self._loop).result(5)

    def stop(self) -> None:
        if self._loop is None:
            return
        asyncio.run_coroutine_threadsafe(self._close(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join(5)
        self._loop = None

    def __enter__(self) -> TcpProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------ the loop thread

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, self.listen_host, self.port, reuse_address=True))
        self.port = self._server.sockets[0].getsockname()[1]
        self._ready.set()
        try:
            loop.run_forever()
        finally:
            loop.close()

    async def _cut(self) -> None:
        for w in list(self._writers):
            with contextlib.suppress(Exception):
                w.transport.abort()
        self._writers.clear()

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
        await self._cut()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        if len(self._writers) >= 2 * self.max_connections:
            writer.transport.abort()
            return
        self._writers.add(writer)
        up_w: asyncio.StreamWriter | None = None
        try:
            # While blackholed, the connection is held and its bytes are swallowed.
            while self.blackholed:
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(reader.read(CHUNK), 0.1)
                if reader.at_eof():
                    return
            try:
                up_r, up_w = await asyncio.open_connection(*self.upstream)
            except OSError:
                return
            self._writers.add(up_w)
            await asyncio.gather(self._pipe(reader, up_w), self._pipe(up_r, writer))
        except TimeoutError:
            pass
        except Exception:  # noqa: BLE001 - a proxy connection dying is normal in these tests
            pass
        finally:
            for w in (writer, up_w):
                if w is not None:
                    self._writers.discard(w)
                    with contextlib.suppress(Exception):
                        w.transport.abort()

    async def _pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await src.read(CHUNK)
                if not data:
                    break
                if self.delay_s:
                    await asyncio.sleep(self.delay_s)
                if self.blackholed:
                    continue  # dropped, like packets into a partition
                dst.write(data)
                await dst.drain()
        except Exception:  # noqa: BLE001
            pass
        finally:
            with contextlib.suppress(Exception):
                dst.transport.abort()
