"""Fixtures shared by the integration tests of the worker and the protocol."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis

import lockworker
from lockworker.model.keys import JobKeys
from lockworker.protocol import LockProtocol, ScriptProtocol
from lockworker.protocol.txn import TxnProtocol
from lockworker.testing import RedisServer

Hook = Callable[[lockworker.Job], None]


@pytest.fixture(scope="module")
def own_server() -> Iterator[RedisServer]:
    """A server of the module's own, for tests that read every registered namespace,
    stream or leader (``lockworker status``, the dashboard's views): on the session's
    server those grow with every test run before, and so would their time. A module
    uses it as its ``redis_server`` (each test still has its own namespace)."""
    with RedisServer() as server:
        yield server


@pytest.fixture
def default_lock_timeout() -> float:
    """The lease of workers made by ``make``; a module overrides it to change it."""
    return 2.0


@pytest.fixture
def make(
    redis_client: redis.Redis, namespace: str, default_lock_timeout: float
) -> Iterator[Callable[..., lockworker.Worker]]:
    """Build workers in the test's namespace; they are stopped and closed afterwards."""
    made: list[lockworker.Worker] = []

    def factory(on_acquired: Hook, **kwargs: Any) -> lockworker.Worker:
        kwargs.setdefault("lock_timeout", default_lock_timeout)
        kwargs.setdefault("handle_signals", False)
        worker = lockworker.Worker(
            redis_client, namespace=namespace, on_acquired=on_acquired, **kwargs
        )
        made.append(worker)
        return worker

    yield factory
    for worker in made:
        worker.stop()
        worker.close()


@pytest.fixture(params=["script", "txn"])
def protocol(request: pytest.FixtureRequest, redis_client: redis.Redis) -> LockProtocol:
    """Each protocol test runs against both implementations."""
    return ScriptProtocol(redis_client) if request.param == "script" else TxnProtocol(redis_client)


@pytest.fixture
def keys(namespace: str) -> JobKeys:
    return JobKeys.of(namespace, "job")
