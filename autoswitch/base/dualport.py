"""One public port for plaintext and TLS clients, for the plaintext -> TLS migration
(docs/security.md): "accept both, then require TLS" without a window in which some peer cannot
reach another.

gRPC serves one security mode per port, so the server listens on two internal loopback ports
(one plaintext, one TLS) and this front owns the public one. The first byte of a connection
tells the two apart (0x16 opens every TLS handshake record; HTTP/2 and our HA frames never start
with it); the connection is then spliced to the matching internal port. TLS stays end to end: the
server sees the client's certificate as if there were no front. Used only while a migration is
in progress (``tls_accept_plaintext``): it costs a copy per byte.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field

from autoswitch.base.log import RateLimitedLog, get_logger
from autoswitch.base.waits import cancel_and_wait

TLS_HANDSHAKE = 0x16
FIRST_BYTE_TIMEOUT_S = 10.0
CHUNK = 64 * 1024
MAX_CONNECTIONS = 10_000


@dataclass
class DualPortFront:
    plain: tuple[str, int]                  # the server's internal plaintext listener
    tls: tuple[str, int]                    # the server's internal TLS listener
    name: str = ""
    max_connections: int = MAX_CONNECTIONS
    counts: dict[str, int] = field(default_factory=lambda: {"plaintext": 0, "tls": 0, "refused": 0})

    def __post_init__(self) -> None:
        self.port = 0
        self._server: asyncio.base_events.Server | None = None
        self._open: set[asyncio.Task] = set()
        self.log = get_logger("dualport", listener=self.name)
        # Which clients still speak plaintext: what an operator needs before requiring TLS.
        self._plain_seen = RateLimitedLog(self.log, interval_s=60.0)

    async def start(self, host: str, port: int) -> int:
        self._server = await asyncio.start_server(self._handle, host, port)
        self.port = self._server.sockets[0].getsockname()[1]
        self.log.warning("accepting_plaintext_and_tls", listen=f"{host}:{self.port}",
                         note="migration mode: plaintext clients are not authenticated")
        return self.port

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        await cancel_and_wait(list(self._open))
        if self._server is not None:
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._open) >= self.max_connections:
            self.counts["refused"] += 1
            writer.close()
            return
        self._open.add(task)
        peer = writer.get_extra_info("peername")
        try:
            first = await asyncio.wait_for(reader.readexactly(1), FIRST_BYTE_TIMEOUT_S)
            kind = "tls" if first[0] == TLS_HANDSHAKE else "plaintext"
            self.counts[kind] += 1
            if kind == "plaintext":
                self._plain_seen.warning(peer[0] if peer else "?", "plaintext_client",
                                         peer=f"{peer[0]}:{peer[1]}" if peer else "?")
            up_r, up_w = await asyncio.open_connection(*(self.tls if kind == "tls" else self.plain))
            up_w.write(first)
            await asyncio.gather(_pipe(reader, up_w), _pipe(up_r, writer))
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        except asyncio.CancelledError:
            # close(): the connection ends here. Not re-raised: asyncio's start_server would log
            # a cancelled client task as an error, and nothing waits on this one but close().
            pass
        finally:
            self._open.discard(task)
            writer.close()


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
    try:
        while data := await src.read(CHUNK):
            dst.write(data)
            await dst.drain()          # backpressure: never more than a chunk or two buffered
        if dst.can_write_eof():
            dst.write_eof()
    except (ConnectionError, OSError):
        dst.close()
