"""What the topologies share: ports, waiting, commands, constants."""

from __future__ import annotations

import contextlib
import random
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import redis

from lockworker.errors import LockworkerError
from lockworker.testing.server import free_port

T = TypeVar("T")

HOST = "127.0.0.1"
BUS_OFFSET = 10000
"""A cluster node also listens on ``port + 10000``: the cluster bus."""
SLOTS = 16384
NODE_TIMEOUT_MS = 1000
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
READY_TIMEOUT = 20.0
FAST_SYNC = ("--repl-diskless-sync-delay", "0")
"""A replica's first sync starts at once (the server's default waits 5 s for others)."""


class TopologyError(LockworkerError):
    """A topology did not start, or did not reach the state waited for, in time."""


def wait(what: str, probe: Callable[[], T | None], timeout: float) -> T:
    """Poll ``probe`` (connection errors count as not yet) until it returns a value."""
    deadline = time.monotonic() + timeout
    while True:
        with contextlib.suppress(redis.RedisError, OSError):
            value = probe()
            if value is not None and value is not False:
                return value
        if time.monotonic() >= deadline:
            raise TopologyError(f"{what}: not within {timeout}s")
        time.sleep(0.02)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_cluster_port() -> int:
    """A free loopback port whose cluster bus port (``port + 10000``) is free too.

    Both are taken below the system's ephemeral port range, so the outgoing connections
    of clients cannot occupy the bus port between this check and the node's bind.
    """
    high = _ephemeral_low() - BUS_OFFSET - 1
    for _ in range(200):
        port = random.randint(10000, high) if high > 10000 else free_port()
        if port + BUS_OFFSET <= 65535 and _bindable(port) and _bindable(port + BUS_OFFSET):
            return port
    raise TopologyError("no free port pair (port, port + 10000) on 127.0.0.1")


def info(client: redis.Redis, section: str) -> dict[str, Any]:
    """One section of INFO as a dict."""
    return dict(client.info(section))


def command(client: redis.Redis, *args: Any) -> Any:
    """A raw command (CLUSTER ..., SENTINEL ...) to the one server of ``client``."""
    return client.execute_command(*args)  # type: ignore[no-untyped-call]


def in_sync(client: redis.Redis) -> bool:
    """True if ``client``'s server is a replica whose link to its master is up."""
    replication = info(client, "replication")
    return replication.get("role") == "slave" and replication.get("master_link_status") == "up"
