"""The jobs the worker frameworks run in :mod:`benchmarks.peers` (they import this).

The same two handlers as lockworker's processes there: ``record`` makes one round trip
(counts its run and notes the first start), ``hold`` records its start and then works
for ``seconds`` (the job a worker is killed in the middle of). The Redis the handlers
write to is given by port in each job's arguments. The asyncio frameworks (arq, saq,
streaq, taskiq) run ``arecord`` and ``ahold``: the same commands, in the same one round
trip, through ``redis.asyncio``.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time

import redis
import redis.asyncio

_clients: dict[int, redis.Redis] = {}
_aclients: dict[int, redis.asyncio.Redis] = {}
_lock = threading.Lock()


def _client(port: int) -> redis.Redis:
    """One client per port, made under a lock: a worker's threads take their first job
    at the same moment, and when each made a client of its own (all but one then
    dropped), about one fresh process in ten had a pipeline wait out redis-py's 5 s
    socket timeout and be sent again (a 5 s hole in the jobs/s, and a run counted
    twice)."""
    with _lock:
        client = _clients.get(port)
        if client is None:
            client = _clients[port] = redis.Redis(host="127.0.0.1", port=port)
    return client


def record(port: int, keyspace: str, n: int | str) -> None:
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


def _aclient(port: int) -> redis.asyncio.Redis:
    """One asyncio client per port (each worker process runs one event loop)."""
    client = _aclients.get(port)
    if client is None:
        client = _aclients[port] = redis.asyncio.Redis(host="127.0.0.1", port=port)
    return client


async def arecord(port: int, keyspace: str, n: int | str) -> None:
    """:func:`record` through ``redis.asyncio``: the same two commands, one round trip."""
    pipe = _aclient(port).pipeline(transaction=False)
    pipe.hincrby(f"{keyspace}:runs", str(n), 1)
    pipe.set(f"{keyspace}:first", f"{time.monotonic():.6f}", nx=True)
    await pipe.execute()


async def ahold(port: int, keyspace: str, seconds: float) -> None:
    """:func:`hold` through ``redis.asyncio``."""
    client = _aclient(port)
    await client.rpush(f"{keyspace}:starts", f"{time.monotonic():.6f} worker {os.getpid()}")
    await asyncio.sleep(seconds)
    await client.rpush(f"{keyspace}:ends", f"{time.monotonic():.6f} worker {os.getpid()}")
