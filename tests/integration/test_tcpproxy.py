"""tests/tcpproxy.py forwards, delays, blackholes (bytes swallowed, connection kept) and cuts."""

from __future__ import annotations

import socket
import threading

import pytest

from tests.tcpproxy import TcpProxy

pytestmark = pytest.mark.integration


def _echo_server() -> tuple[socket.socket, int]:
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)

    def serve() -> None:
        while True:
            try:
                conn, _ = srv.accept()
            except OSError:
                return

            def echo(c: socket.socket = conn) -> None:
                with c:
                    while data := c.recv(4096):
                        c.sendall(data)

            threading.Thread(target=echo, daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    return srv, srv.getsockname()[1]


def test_forward_blackhole_cut():
    srv, port = _echo_server()
    try:
        with TcpProxy(("127.0.0.1", port)) as proxy:
            c = socket.create_connection(("127.0.0.1", proxy.port), timeout=5)
            c.sendall(b"hello")
            assert c.recv(100) == b"hello"
            proxy.set_delay(0.05)
            c.sendall(b"slow")
            assert c.recv(100) == b"slow"
            proxy.set_delay(0)
            proxy.blackhole(True)
            c.sendall(b"lost")
            c.settimeout(0.5)
            with pytest.raises(TimeoutError):
                c.recv(100)  # swallowed, and the connection stays open
            proxy.blackhole(False)
            c.settimeout(5)
            c.sendall(b"back")
            assert c.recv(100) == b"back"
            proxy.cut()
            c.settimeout(5)
            try:
                data = c.recv(100)
            except ConnectionResetError:
                data = b""
            assert data == b"", "cut closes the connection"
            c.close()
    finally:
        srv.close()
