"""Whether a client's pool can lend what ``serve(concurrency=n)`` may ask of it
(lockworker.runtime.pools): judged from the client object alone, no server."""

from __future__ import annotations

from typing import Any

import redis
import redis.asyncio
from hypothesis import given
from hypothesis import strategies as st

from lockworker.runtime import pools


@given(limit=st.integers(1, 2_000), concurrency=st.integers(1, 2_000), aio=st.booleans())
def test_a_pool_is_short_exactly_when_it_lends_fewer_than_the_hooks_and_the_serving_hold(
    limit: int, concurrency: int, aio: bool
) -> None:
    kind: Any = redis.asyncio.Redis if aio else redis.Redis
    client = kind(max_connections=limit)
    short = pools.shortfall(client, concurrency)
    if limit >= concurrency + pools.OWN:
        assert short is None
    else:
        assert short == {
            "max_connections": limit, "concurrency": concurrency,
            "advice_max_connections": concurrency + pools.SPARE,
        }
        assert short["advice_max_connections"] >= concurrency + pools.OWN


def test_redis_py_default_pool_is_judged_by_its_own_limit() -> None:
    client = redis.Redis()  # redis-py 8 lends 100 by default; any default is read
    limit = client.connection_pool.max_connections
    assert pools.lends_at_most(client) == limit
    assert pools.shortfall(client, limit - pools.OWN) is None
    assert pools.shortfall(client, limit - pools.OWN + 1) is not None


def test_a_pool_that_waits_for_a_free_connection_is_never_short() -> None:
    sync = redis.Redis(connection_pool=redis.BlockingConnectionPool(max_connections=2))
    aio = redis.asyncio.Redis(
        connection_pool=redis.asyncio.BlockingConnectionPool(max_connections=2)
    )
    assert pools.lends_at_most(sync) is None and pools.lends_at_most(aio) is None
    assert pools.shortfall(sync, 500) is None and pools.shortfall(aio, 500) is None


class _NoSinglePool:
    """A client without one pool (a cluster client keeps one per node)."""


class _Logged:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, Any]]] = []

    def warning(self, event: str, **fields: Any) -> None:
        self.warnings.append((event, fields))


def test_a_client_without_one_pool_or_without_a_numeric_limit_is_left_alone() -> None:
    assert pools.shortfall(_NoSinglePool(), 10_000) is None
    odd = redis.Redis()
    odd.connection_pool.max_connections = None  # type: ignore[assignment]
    assert pools.shortfall(odd, 10_000) is None


def test_say_if_short_warns_once_with_the_figures_or_says_nothing() -> None:
    log = _Logged()
    pools.say_if_short(log, redis.Redis(max_connections=50), 64)
    pools.say_if_short(log, redis.Redis(max_connections=500), 64)
    assert log.warnings == [(pools.POOL_SMALL, {
        "max_connections": 50, "concurrency": 64, "advice_max_connections": 96,
    })]


class _Pool:
    """A pool class whose default lends ``limit``."""

    limit = 100

    def __init__(self) -> None:
        self.max_connections = self.limit


@given(limit=st.integers(1, 1_000), concurrency=st.integers(1, 1_000))
def test_a_client_made_for_a_serving_gets_a_pool_that_is_not_short(
    limit: int, concurrency: int
) -> None:
    pool_class = type("Pool", (_Pool,), {"limit": limit})
    options = pools.client_options(concurrency, pool_class)
    client = redis.Redis(max_connections=options.get("max_connections", limit))
    assert pools.shortfall(client, concurrency) is None
    # Only raised where the default would be short, and then with the advice's room.
    if limit >= concurrency + pools.OWN:
        assert options == {}
    else:
        assert options == {"max_connections": concurrency + pools.SPARE}


def test_redis_py_default_pools_are_raised_only_past_their_own_limit() -> None:
    for pool_class in (redis.ConnectionPool, redis.asyncio.ConnectionPool):
        limit = pool_class().max_connections
        assert pools.client_options(limit - pools.OWN, pool_class) == {}
        assert pools.client_options(limit - pools.OWN + 1, pool_class) == {
            "max_connections": limit - pools.OWN + 1 + pools.SPARE
        }
