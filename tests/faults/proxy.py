"""A loopback TCP proxy whose behaviour can be switched while clients use it.

Modes:

- ``pass``: forward bytes both ways;
- ``blackhole``: accept connections and bytes, forward nothing (a cut-off network
  that does not reset connections: clients find out by their socket timeouts);
- ``close``: close every connection now, and every new one at once, until the mode
  changes (a server or network that resets connections);
- ``delay``: forward every chunk ``delay_ms`` after it was read (a slow network; a
  request/response round trip takes twice the delay).

Threads are bounded: one acceptor, and two pumps per connection for at most
``max_connections`` connections (further ones are closed at once).
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time

MODES = ("pass", "blackhole", "close", "delay")
POLL = 0.05
"""Seconds a blocked thread waits before looking at the proxy's state again."""


class _Conn:
    def __init__(self, client: socket.socket, upstream: socket.socket) -> None:
        self.client = client
        self.upstream = upstream
        self.closed = threading.Event()

    def close(self) -> None:
        if self.closed.is_set():
            return
        self.closed.set()
        for sock in (self.client, self.upstream):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                sock.close()


class Proxy:
    """Listens on 127.0.0.1:``port`` and forwards to 127.0.0.1:``upstream_port``."""

    def __init__(self, upstream_port: int, *, max_connections: int = 128) -> None:
        self.upstream_port = upstream_port
        self.max_connections = max_connections
        self.mode = "pass"
        self.delay = 0.0
        self.accepted = 0
        self.refused = 0
        self.dropped = 0
        """Chunks read and forwarded nowhere (black-holed), so far."""
        self.cut = 0
        """Connections closed by a switch to ``close``, so far."""
        self._conns: set[_Conn] = set()
        self._mutex = threading.Lock()
        self._closed = threading.Event()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self._listener.settimeout(POLL)
        self.port: int = self._listener.getsockname()[1]
        self._acceptor = threading.Thread(target=self._accept, name="proxy-accept", daemon=True)
        self._acceptor.start()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def connections(self) -> int:
        with self._mutex:
            return len(self._conns)

    def set_mode(self, mode: str, delay_ms: float = 0.0) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
        with self._mutex:
            self.mode, self.delay = mode, max(0.0, delay_ms) / 1000.0
            doomed = list(self._conns) if mode == "close" else []
            self.cut += len(doomed)
        for conn in doomed:
            conn.close()

    def pass_through(self) -> None:
        self.set_mode("pass")

    def blackhole(self) -> None:
        self.set_mode("blackhole")

    def close_all(self) -> None:
        self.set_mode("close")

    def delay_by(self, ms: float) -> None:
        self.set_mode("delay", ms)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._mutex:
                refuse = self.mode == "close" or len(self._conns) >= self.max_connections
            if refuse:
                self.refused += 1
                with contextlib.suppress(OSError):
                    client.close()
                continue
            try:
                upstream = socket.create_connection(("127.0.0.1", self.upstream_port), 1.0)
            except OSError:
                self.refused += 1
                client.close()
                continue
            conn = _Conn(client, upstream)
            for sock in (client, upstream):
                sock.settimeout(POLL)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._mutex:
                self._conns.add(conn)
                self.accepted += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(
                    target=self._pump, args=(conn, src, dst), name="proxy-pump", daemon=True
                ).start()

    def _pump(self, conn: _Conn, src: socket.socket, dst: socket.socket) -> None:
        try:
            while not conn.closed.is_set():
                try:
                    data = src.recv(65536)
                except TimeoutError:
                    continue
                if not data:
                    return
                read_at = time.monotonic()
                with self._mutex:
                    mode, delay = self.mode, self.delay
                    self.dropped += mode == "blackhole"
                if mode == "blackhole":
                    continue
                if mode == "delay" and conn.closed.wait(
                    max(0.0, read_at + delay - time.monotonic())
                ):
                    return
                view = memoryview(data)
                while view and not conn.closed.is_set():
                    try:
                        view = view[dst.send(view):]
                    except TimeoutError:
                        continue
        except OSError:
            return
        finally:
            conn.close()
            with self._mutex:
                self._conns.discard(conn)

    def close(self) -> None:
        """Stop accepting and close every connection."""
        self._closed.set()
        with contextlib.suppress(OSError):
            self._listener.close()
        self._acceptor.join(timeout=2)
        with self._mutex:
            conns = list(self._conns)
        for conn in conns:
            conn.close()

    def __enter__(self) -> Proxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
