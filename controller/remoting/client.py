"""A blocking remoting client: one request, one answer (the benchmarks' and tools' probe of any
RocketMQ controller, ours or RocketMQ's own). The codec does the bytes; this only moves them."""

from __future__ import annotations

import itertools
import socket
from typing import Any

from autoswitch.controller.remoting import codec
from autoswitch.controller.remoting.codec import Command, RemotingError

_opaque = itertools.count(1)


def call(addr: str, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None,
         timeout: float = 3.0) -> Command:
    """Send one request to ``addr`` (HOST:PORT) and return its answer. OSError when unreachable or
    silent past ``timeout``; RemotingError when the answer breaks the protocol."""
    conn = Connection(addr, timeout)
    try:
        return conn.call(code, ext, body)
    finally:
        conn.close()


class Connection:
    """One kept connection for many requests in turn (a probe that polls every few ms would
    otherwise measure its own connection set-ups). Reconnects after a failure."""

    def __init__(self, addr: str, timeout: float = 3.0) -> None:
        self.addr, self.timeout = addr, timeout
        self._sock: socket.socket | None = None
        self._dec = codec.Decoder()

    def call(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None) -> Command:
        try:
            self._connect()
            assert self._sock is not None
            opaque = next(_opaque) & 0x7FFFFFFF
            self._sock.sendall(codec.encode(codec.request(code, opaque, ext, body)))
            while True:
                data = self._sock.recv(65536)
                if not data:
                    raise ConnectionError(f"{self.addr} closed the connection")
                for cmd in self._dec.feed(data):
                    if cmd.is_response and cmd.opaque == opaque:
                        return cmd
        except (OSError, RemotingError):
            self.close()
            raise

    def send_oneway(self, code: int, ext: dict[str, Any] | None = None, body: bytes | None = None) -> None:
        """A one-way request (a heartbeat): nothing is answered."""
        try:
            self._connect()
            assert self._sock is not None
            self._sock.sendall(codec.encode(codec.request(code, next(_opaque) & 0x7FFFFFFF, ext, body, oneway=True)))
        except OSError:
            self.close()
            raise

    def _connect(self) -> None:
        if self._sock is None:
            host, port = self.addr.rsplit(":", 1)
            self._sock = socket.create_connection((host, int(port)), timeout=self.timeout)
            self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._dec = codec.Decoder()

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def leader(addrs: list[str], timeout: float = 2.0) -> str | None:
    """The controller leader's remoting address as any of ``addrs`` names it (1005), or None."""
    for a in addrs:
        try:
            r = call(a, 1005, timeout=timeout)
        except (OSError, RemotingError):
            continue
        if r.code == 0 and r.ext.get("controllerLeaderAddress"):
            return r.ext["controllerLeaderAddress"]
    return None


def sync_state(addr: str | Connection, group: str, timeout: float = 3.0) -> dict[str, Any] | None:
    """The group's replicas as the controller at ``addr`` reports them (1006): masterBrokerId,
    masterEpoch, inSyncReplicas, ...; None when it does not answer with them."""
    body = codec.dumps([group])
    r = addr.call(1006, body=body) if isinstance(addr, Connection) else call(addr, 1006, body=body, timeout=timeout)
    if r.code != 0 or not r.body:
        return None
    table = codec.loads_fastjson(r.body).get("replicasInfoTable") or {}
    got = table.get(group)
    return got if isinstance(got, dict) else None
