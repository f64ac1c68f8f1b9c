"""Shared fixtures: a real server started by this test session (never one it did not start),
the metrics installed on a registry of the test's own, and logging as each test found it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import structlog

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
