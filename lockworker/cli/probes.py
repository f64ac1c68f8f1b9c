"""``lockworker run --metrics-port``'s HTTP server: ``/healthz``, ``/readyz`` and the metrics.

- ``GET /healthz``: 200 while the process is alive, its heartbeat renewing on time;
  else 503 (a liveness probe: restart the process);
- ``GET /readyz``: 200 while it takes work: started, not stopping, Redis answering a
  PING (cached for a second), and alive; else 503 (a readiness probe: send no work);
- any other path: the Prometheus metrics, as before.

Each probe answers in plain text, one line saying why (``heartbeat on time: 2 lease(s)
held``, ``Redis unreachable: ConnectionError: ...``). What the answers mean is decided
in :mod:`lockworker.model.health` and read in :mod:`lockworker.runtime.health`; here is
only HTTP (the standard library's WSGI server, a thread per request, as
``prometheus_client`` serves its metrics).
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from lockworker.cli import topology_urls
from lockworker.clock import SystemClock
from lockworker.model.health import Bounds, Verdict
from lockworker.runtime.health import Probes, RedisPing

PING_TIMEOUT = 0.5
"""Seconds a probe's PING may take (Kubernetes waits one second for a probe's answer)."""

PATHS = ("/healthz", "/readyz")

StartResponse = Callable[[str, list[tuple[str, str]]], Any]
App = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


def bounds(lock_timeout: float, socket_timeout: float, client_retries: int) -> Bounds:
    """How late is too late for a daemon's heartbeat (:class:`Bounds`): a renewal may
    start up to a period late (at least a second: a loaded host), and one may be in
    flight for its lease, then for the client's own retries of the last try (each a
    socket timeout and up to a second of backoff)."""
    period = lock_timeout / 3
    return Bounds(
        late=max(period, 1.0),
        call=lock_timeout + (client_retries + 1) * (socket_timeout + 1.0),
    )


def for_daemon(daemon: Any, url: str, socket_timeout: float) -> Probes:
    """The probes of ``daemon`` (any of ``lockworker run``'s four kinds: each has a
    heartbeat with a ``pulse()``, a ``stopping`` flag and its client), with a PING
    client of ``url`` of its own: short timeouts, no retries."""
    heartbeat = daemon._heartbeat  # the daemon's renewals: Heartbeat or AsyncHeartbeat
    return Probes(
        pulse=heartbeat.pulse, stopping=lambda: bool(daemon.stopping),
        redis=RedisPing(pinger(url), SystemClock()), clock=SystemClock(),
        bounds=bounds(daemon.lock_timeout, socket_timeout, client_retries(daemon.client)),
    )


def client_retries(client: Any) -> int:
    """How many times ``client`` retries a command itself (redis-py 6 and later: ten
    by default) before lockworker's retry policy sees the error. redis-py 5's ``Retry``
    has no ``get_retries`` yet: its count is read where that keeps it."""
    retry = getattr(client, "get_retry", lambda: None)()
    if retry is None:
        return 0
    count = getattr(retry, "get_retries", None)
    return int(count() if count is not None else retry._retries)


def pinger(url: str) -> Callable[[], object]:
    """PING ``url`` through a client of its own, made at the first PING (a cluster
    client connects when it is made: failing then is an answer too)."""
    made: list[Any] = []

    def ping() -> object:
        if not made:
            made.append(ping_client(url))
        return made[0].ping()

    return ping


def ping_client(url: str) -> Any:
    """A client of ``url`` for the probes' PING: a timeout of :data:`PING_TIMEOUT`, no
    retries (the cached answer is retried at the next probe)."""
    options: dict[str, Any] = {
        "socket_timeout": PING_TIMEOUT, "socket_connect_timeout": PING_TIMEOUT,
        "retry": Retry(NoBackoff(), 0),
    }
    if topology_urls.is_topology(url):
        return topology_urls.client(topology_urls.parse(url), **options)
    return redis.Redis.from_url(url, max_connections=2, **options)


def app(probes: Probes, metrics: App) -> App:
    """A WSGI application: the probes at :data:`PATHS`, ``metrics`` on every other path."""

    def answer(environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path not in PATHS:
            return metrics(environ, start_response)
        method = environ.get("REQUEST_METHOD", "GET")
        if method not in ("GET", "HEAD"):
            start_response("405 Method Not Allowed", [("Allow", "GET, HEAD")])
            return [b""]
        verdict = probes.healthz() if path == "/healthz" else probes.readyz()
        body = (verdict.reason + "\n").encode()
        start_response(status(verdict), [
            ("Content-Type", "text/plain; charset=utf-8"),
            ("Content-Length", str(len(body))), ("Cache-Control", "no-store"),
        ])
        return [b"" if method == "HEAD" else body]

    return answer


def status(verdict: Verdict) -> str:
    return "200 OK" if verdict.ok else "503 Service Unavailable"


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        """Log nothing: a probe every few seconds is no news."""


def serve(application: App, port: int, host: str) -> WSGIServer:
    """Serve ``application`` on ``host:port`` from a daemon thread, for the life of the
    process. Raises ``OSError`` if it cannot listen there."""
    found = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, address = found[0][0], found[0][4][0]  # an IPv6 host needs an IPv6 socket

    class Server(ThreadingMixIn, WSGIServer):
        address_family = family
        daemon_threads = True

    server = make_server(str(address), port, application, Server, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="lockworker-http", daemon=True).start()
    return server
