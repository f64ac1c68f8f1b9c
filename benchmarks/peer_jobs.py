"""The jobs RQ's and Celery's workers run in :mod:`benchmarks.peers` (they import this).

The same two handlers as lockworker's processes there: ``record`` makes one round trip
(counts its run and notes the first start), ``hold`` records its start and then works
for ``seconds`` (the job a worker is killed in the middle of). The Redis the handlers
write to is given by port in each job's arguments.
"""

from __future__ import annotations

import os
import time

import redis

_clients: dict[int, redis.Redis] = {}


def _client(port: int) -> redis.Redis:
    client = _clients.get(port)
    if client is None:
        client = _clients[port] = redis.Redis(host="127.0.0.1", port=port)
    return client


def record(port: int, keyspace: str, n: int) -> None:
    """One round trip: count the run of job ``n``; the first start is kept (SET NX)."""
    pipe = _client(port).pipeline(transaction=False)
    pipe.hincrby(f"{keyspace}:runs", str(n), 1)
    pipe.set(f"{keyspace}:first", f"{time.monotonic():.6f}", nx=True)
    pipe.execute()


def hold(port: int, keyspace: str, seconds: float) -> None:
    """Record this run's start (time, pid), work for ``seconds``, record its end."""
    client = _client(port)
    client.rpush(f"{keyspace}:starts", f"{time.monotonic():.6f} worker {os.getpid()}")
    time.sleep(seconds)
    client.rpush(f"{keyspace}:ends", f"{time.monotonic():.6f} worker {os.getpid()}")
