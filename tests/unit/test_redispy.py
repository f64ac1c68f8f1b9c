"""A cluster client on too old a redis-py is refused at construction, naming the release
it needs (lockworker.redispy); a single server's client never is.

The clients here are never connected: the check reads only their kind. On such a
redis-py the suite's tests on a real cluster skip, naming the release (tests/conftest.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import fakeredis
import pytest
import redis
import redis.asyncio
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.cluster import RedisCluster

import lockworker
import lockworker.aio
from lockworker import redispy


def ok(_job: object) -> None:
    """A hook that is never run."""


def unconnected(kind: type[Any]) -> Any:
    """A client of ``kind`` made without its constructor (which would connect)."""
    return kind.__new__(kind)


@pytest.fixture
def old_redis_py(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(redis, "__version__", "5.0.8")


SYNC: dict[str, Callable[[Any], object]] = {
    "Worker": lambda c: lockworker.Worker(c, namespace="ns", on_acquired=ok),
    "Leader": lambda c: lockworker.Leader(c, name="boss", on_acquired=ok),
    "Lock": lambda c: lockworker.Lock(c, "l"),
}
ASYNC: dict[str, Callable[[Any], object]] = {
    "aio.Worker": lambda c: lockworker.aio.Worker(c, namespace="ns", on_acquired=ok),
    "aio.Lock": lambda c: lockworker.aio.Lock(c, "l"),
}


@pytest.mark.parametrize("make", SYNC.values(), ids=SYNC.keys())
@pytest.mark.usefixtures("old_redis_py")
def test_a_cluster_client_on_redis_py_5_is_refused_naming_6_1(
    make: Callable[[Any], object],
) -> None:
    with pytest.raises(lockworker.RedisPyTooOld) as info:
        make(unconnected(RedisCluster))
    assert "needs redis-py 6.1 or later, and 5.0.8 is installed" in str(info.value)
    assert "pip install 'redis>=6.1'" in str(info.value)
    assert (info.value.needed, info.value.installed) == ("6.1", "5.0.8")
    assert isinstance(info.value, lockworker.InvalidConfig)


@pytest.mark.parametrize("make", ASYNC.values(), ids=ASYNC.keys())
@pytest.mark.parametrize("version", ["5.0.8", "7.4.1"])
def test_an_asyncio_cluster_client_before_redis_py_8_is_refused_naming_8_0(
    make: Callable[[Any], object], version: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Not as "not a redis.asyncio client", which redis-py 5's (no ``pubsub``) once was."""
    monkeypatch.setattr(redis, "__version__", version)
    with pytest.raises(lockworker.RedisPyTooOld, match=r"asyncio RedisCluster client .* "
                       rf"needs redis-py 8\.0 or later, and {version} is installed"):
        make(unconnected(AsyncRedisCluster))


@pytest.mark.usefixtures("old_redis_py")
def test_a_single_servers_client_is_never_refused_for_its_redis_py() -> None:
    lockworker.Worker(fakeredis.FakeRedis(), namespace="ns", on_acquired=ok)
    lockworker.aio.Worker(fakeredis.FakeAsyncRedis(), namespace="ns", on_acquired=ok)
    redispy.require(redis.Redis())
    redispy.require(redis.asyncio.Redis())


def test_releases_are_read_as_major_and_minor() -> None:
    assert redispy.installed("5.0.8") == (5, 0)
    assert redispy.installed("6.1.0b2") == (6, 1)
    assert redispy.installed("10.2") == (10, 2)
    assert redispy.installed() >= (5, 0)


@pytest.mark.parametrize(("version", "refused"), [("6.0.0", True), ("6.1.0", False)])
def test_the_sync_cluster_needs_exactly_6_1(
    version: str, refused: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(redis, "__version__", version)
    client = unconnected(RedisCluster)
    if refused:
        with pytest.raises(lockworker.RedisPyTooOld):
            redispy.require(client)
    else:
        redispy.require(client)
