"""A small TCP proxy that delays every chunk (tc netem is not available): order is kept per
direction, each chunk waits ``delay_ms`` (+ uniform jitter) before it is forwarded."""

from __future__ import annotations

import asyncio
import contextlib
import random

MAX_CHUNK = 64 << 10
MAX_CONNS = 256


class DelayProxy:
    def __init__(self, target: tuple[str, int], delay_ms: float, jitter_ms: float = 0.0, seed: int = 0) -> None:
        self.target = target
        self.delay_ms = delay_ms
        self.jitter_ms = jitter_ms
        self.rng = random.Random(seed)
        self.server: asyncio.base_events.Server | None = None
        self.port: int | None = None
        self.conns = 0
        self._tasks: set[asyncio.Task] = set()

    async def start(self, host: str = "127.0.0.1") -> int:
        self.server = await asyncio.start_server(self._accept, host, 0)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        for t in list(self._tasks):
            t.cancel()
        for t in list(self._tasks):
            with contextlib.suppress(BaseException):
                await t

    async def _accept(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        if self.conns >= MAX_CONNS:
            w.close()
            return
        self.conns += 1
        try:
            ur, uw = await asyncio.wait_for(asyncio.open_connection(*self.target), 3)
        except (TimeoutError, OSError):
            self.conns -= 1
            w.close()
            return
        for a, b in ((r, uw), (ur, w)):
            t = asyncio.create_task(self._pipe(a, b))
            self._tasks.add(t)
            t.add_done_callback(self._tasks.discard)

    async def _pipe(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        q: asyncio.Queue = asyncio.Queue(maxsize=1024)

        async def sender() -> None:
            while True:
                due, data = await q.get()
                if data is None:
                    break
                await asyncio.sleep(max(0.0, due - loop.time()))
                w.write(data)
                await w.drain()

        st = asyncio.create_task(sender())
        try:
            while True:
                data = await r.read(MAX_CHUNK)
                if not data:
                    break
                d = (self.delay_ms + self.rng.uniform(0, self.jitter_ms)) / 1000.0
                await q.put((loop.time() + d, data))
            await q.put((0, None))
            await st
        except (OSError, asyncio.CancelledError):
            pass
        finally:
            st.cancel()
            with contextlib.suppress(Exception):
                w.close()
