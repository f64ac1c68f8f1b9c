"""Fixtures of the process tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from cluster import Cluster

from lockworker.testing import RedisServer


@pytest.fixture
def cluster(
    redis_server: RedisServer, redis_client: redis.Redis, namespace: str
) -> Iterator[Cluster]:
    c = Cluster(redis_server, redis_client, namespace)
    yield c
    c.stop_all()
