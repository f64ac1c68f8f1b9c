"""Serving the dashboard in the test process (uvicorn in a thread) and asking it over
real HTTP, so a test can hand it a collector of its own."""

from __future__ import annotations

import contextlib
import http.client
import threading
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import uvicorn
from helpers import wait_for

from lockworker.testing.server import free_port


@contextlib.contextmanager
def serving(app: Any, host: str = "127.0.0.1") -> Iterator[str]:
    """``app`` served on a free port of ``host``; yields its base URL on 127.0.0.1."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(
        app, host=host, port=port, log_config=None, access_log=False, lifespan="on",
    ))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: server.started, timeout=30)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: str
    cookies: dict[str, str]


def ask(
    base: str, path: str, *, method: str = "GET", form: dict[str, str] | None = None,
    headers: dict[str, str] | None = None, cookies: dict[str, str] | None = None,
) -> Reply:
    """One request, redirects not followed."""
    where = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
    sent = dict(headers or {})
    if cookies:
        sent["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
    body = None
    if form is not None:
        body = urllib.parse.urlencode(form)
        sent["Content-Type"] = "application/x-www-form-urlencoded"
    try:
        conn.request(method, path, body=body, headers=sent)
        response = conn.getresponse()
        got = {k.lower(): v for k, v in response.getheaders()}
        jar = {}
        for name, value in response.getheaders():
            if name.lower() == "set-cookie":
                key, _, rest = value.partition("=")
                jar[key] = rest.split(";", 1)[0]
        return Reply(response.status, got, response.read().decode(), jar)
    finally:
        conn.close()
