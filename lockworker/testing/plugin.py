"""pytest fixtures: a real server started by the test session, clients, namespaces.

Enable with ``pytest_plugins = ["lockworker.testing.plugin"]`` in a ``conftest.py``.

- ``redis_server``: one :class:`~lockworker.testing.server.RedisServer` per session,
  on a free loopback port, stopped at the end; never a server the tests did not start.
- ``redis_client``: a client of it (``decode_responses=True``), closed after the test.
- ``namespace``: a fresh namespace per test, so tests never share keys and need no
  FLUSHDB.
- ``redis_cluster``: one :class:`~lockworker.testing.topology.Cluster` of three
  masters per session (``redis_cluster.client()`` for a ``RedisCluster`` client).
- ``redis_sentinel``: one :class:`~lockworker.testing.topology.SentinelGroup` per
  session: a master, two replicas, three sentinels (``redis_sentinel.master_client()``).
  A test that kills a server should start a topology of its own instead.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
import redis

from lockworker.testing.server import RedisServer
from lockworker.testing.topology import Cluster, SentinelGroup


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    with RedisServer() as server:
        yield server


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[Cluster]:
    with Cluster(masters=3) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def redis_sentinel() -> Iterator[SentinelGroup]:
    with SentinelGroup() as group:
        yield group


@pytest.fixture
def redis_client(redis_server: RedisServer) -> Iterator[redis.Redis]:
    client = redis_server.client(decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def namespace() -> str:
    return f"test-{uuid.uuid4().hex[:12]}"
