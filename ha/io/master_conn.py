"""One slave's connection on the HA master: its state, reading frames, and the transfer loop
that sends the log. HAMaster (ha/io/master.py) accepts the connection, checks the handshake and
feeds the acks to its cores; what to send and when is MasterSession's decision."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from autoswitch.ha.codec import MasterSideDecoder, encode_transfer_header
from autoswitch.ha.config import SMALL_FRAME_BYTES, TLS_SLICE, HAConfig
from autoswitch.ha.master_digests import MasterDigests
from autoswitch.ha.master_session import MasterSession

from autoswitch.base.errors import AutoswitchError
from autoswitch.base.waits import wait_event


class SlaveConn:
    """A handshaken slave connection. ``wake`` is set when the transfer loop has something to
    look at (an append it wants, an ack a held tail waits for, digests to send)."""

    __slots__ = ("session", "writer", "addr", "wake", "task", "closed", "log", "incarnation")

    def __init__(self, session: MasterSession, writer: asyncio.StreamWriter, addr: str, log,
                 incarnation: str = "") -> None:
        self.incarnation = incarnation
        self.session = session
        self.writer = writer
        self.addr = addr
        self.wake = asyncio.Event()
        self.task: asyncio.Task | None = None
        self.closed = False
        self.log = log

    def close(self) -> None:
        """Idempotent; cancels the transfer loop unless called from it."""
        if self.closed:
            return
        self.closed = True
        self.session.close()
        if self.task is not None and self.task is not asyncio.current_task():
            self.task.cancel()
        self.writer.close()


async def read_frames(reader: asyncio.StreamReader, dec: MasterSideDecoder, timeout_s: float,
                      chunk: int) -> list:
    """The next whole frames from the slave (handshake, acks, digest reports)."""
    async with asyncio.timeout(timeout_s):     # a scope, not wait_for's task per call: once per ack
        while True:
            data = await reader.read(chunk)
            if not data:
                raise ConnectionResetError("slave closed the connection")
            dec.feed(data)
            if frames := dec.frames():
                return frames


async def transfer_loop(conn: SlaveConn, cfg: HAConfig, digests: MasterDigests, clock: Callable[[], float],
                        confirm_offset: Callable[[], int], wake_all: Callable[[], None]) -> None:
    """Send what the session decides until the connection closes; an error closes it (never the
    master)."""
    session, writer = conn.session, conn.writer
    # Under TLS a large frame goes out in TLS_SLICE pieces, each drained: the TLS transports hand all
    # the ciphertext of one write to their socket transport at once, outside the buffer drain()
    # waits on (issue 59, item 3), so a slave that stops reading holds at most one slice more.
    tls = writer.get_extra_info("ssl_object") is not None
    try:
        while not conn.closed:
            digests.send_to(conn)
            frame = session.poll_transfer(clock(), confirm_offset())
            if frame is None:
                conn.wake.clear()
                if session.held_until is not None:      # a small tail waits for an ack
                    await wait_event(conn.wake, max(0.0, session.held_until - clock()))
                elif not session.has_pending():
                    wait = max(0.0, cfg.heartbeat_interval_s - (clock() - session.last_send_time))
                    await wait_event(conn.wake, wait + 0.001)
                continue
            head = encode_transfer_header(frame)
            body = frame.body
            if 0 < len(body) <= SMALL_FRAME_BYTES:
                writer.write(head + body)       # one send: a one-message frame is mostly syscall
            elif tls and len(body) > TLS_SLICE:
                writer.write(head)
                view = memoryview(body)
                for i in range(0, len(view), TLS_SLICE):
                    writer.write(view[i:i + TLS_SLICE])
                    await writer.drain()
            else:
                writer.write(head)
                if body:
                    writer.write(body)
            if body and digests.fed(frame):
                wake_all()
            await writer.drain()
            if len(body) > SMALL_FRAME_BYTES:
                await asyncio.sleep(0)      # drain() does not yield while the socket keeps up
    except asyncio.CancelledError:
        raise
    except (ConnectionError, OSError) as e:
        conn.log.info("slave_transfer_stopped", detail=str(e))
        conn.close()
    except AutoswitchError as e:    # protocol errors, and store errors such as retention under us
        conn.log.error("slave_transfer_failed", reason=getattr(e, "reason", e.code), detail=e.message)
        conn.close()
    except Exception as e:
        conn.log.error("slave_transfer_failed", exc_info=e, error=type(e).__name__)
        conn.close()
