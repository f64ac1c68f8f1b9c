"""Shared fixtures: a real server started by this test session (never one it did not start),
the metrics installed on a registry of the test's own, and logging as each test found it."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

from tests.helpers import leftovers

pytest_plugins = ["lockworker.testing.plugin"]


@pytest.fixture
def metrics_registry() -> Iterator[Any]:
    """A fresh ``CollectorRegistry`` with lockworker's metrics installed for the test
    (imported here, so the suite's other tests never import prometheus_client)."""
    from prometheus_client import CollectorRegistry

    from lockworker import metrics

    fresh = CollectorRegistry()
    installed = metrics.install(fresh)
    yield fresh
    installed.uninstall()


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    """A test that runs the CLI's ``main()`` in-process configures logging and structlog
    for the whole process (a handler on the test's captured stderr, a level): undo it,
    so later tests' events are neither filtered out nor written to a closed stream."""
    configured, saved = structlog.is_configured(), structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield
    if configured:
        structlog.configure(**saved)
    else:  # "configured" is itself state: lockworker routes events by it
        structlog.reset_defaults()
    root.handlers[:] = handlers
    root.setLevel(level)


GUARDED = frozenset({"unit", "integration", "aio"})
"""The directories whose tests end with nothing of theirs still running."""


@pytest.fixture(autouse=True)
def _nothing_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail a test that leaves a thread of its own running, or a Redlock call pending,
    after its fixtures are torn down. Closes every wake hub first (idle hubs linger by
    design; the next test's waiters get new ones).

    Why: such a thread outlives its test and keeps working while later tests run, say
    redis-py retrying a server its test stopped; redis-py's backoff draws from the
    global ``random``, and a Hypothesis test drawing meanwhile sees its state change
    (``HypothesisDeprecationWarning``, an error in this suite)."""
    if GUARDED.isdisjoint(request.node.path.relative_to(request.config.rootpath).parts):
        yield
        return
    before = set(threading.enumerate())
    yield
    left = leftovers(before)
    assert not left, f"still running after the test: {left}"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """On a redis-py older than a cluster client needs (lockworker.redispy: the suite's
    compatibility pass runs the oldest declared), the tests on a real cluster skip,
    naming the release; tests/unit/test_redispy.py checks the refusal they would meet."""
    import redis

    from lockworker import redispy

    for item in items:
        if "redis_cluster" not in getattr(item, "fixturenames", ()):
            continue
        asyncio = "aio" in item.nodeid or "asyncio" in item.nodeid
        need = redispy.ASYNC_CLUSTER if asyncio else redispy.SYNC_CLUSTER
        if redispy.installed() < need:
            release = ".".join(map(str, need))
            item.add_marker(pytest.mark.skip(
                reason=f"a{'n asyncio' if asyncio else ''} cluster client needs redis-py "
                       f"{release}; {redis.__version__} is installed"
            ))
