"""Fixtures of the topology tests: clients of the session's cluster and sentinel group.

The topologies themselves come from ``lockworker.testing.plugin`` (``redis_cluster``,
``redis_sentinel``); tests that crash a server start a topology of their own.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from redis.cluster import RedisCluster

from lockworker.testing import Cluster, SentinelGroup

SOCKET_TIMEOUT = 2.0
"""Shorter than every lease these tests use, as the Worker's documentation asks."""


@pytest.fixture
def cluster_client(redis_cluster: Cluster) -> Iterator[RedisCluster]:
    client = redis_cluster.client(decode_responses=True, socket_timeout=SOCKET_TIMEOUT)
    yield client
    client.close()


@pytest.fixture
def sentinel_master(redis_sentinel: SentinelGroup) -> Iterator[redis.Redis]:
    client = redis_sentinel.master_client(decode_responses=True, socket_timeout=SOCKET_TIMEOUT)
    yield client
    client.close()
