"""Shared fixtures: a real server started by this test session (never one it did not start),
and the metrics installed on a registry of the test's own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

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
