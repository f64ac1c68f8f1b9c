"""Capture lockworker's events in tests."""

from __future__ import annotations

from collections.abc import Iterator, MutableMapping
from contextlib import contextmanager
from typing import Any

import structlog
from structlog.testing import capture_logs


@contextmanager
def capture_events(*args: Any, **kwargs: Any) -> Iterator[list[MutableMapping[str, Any]]]:
    """Yield the list of event dicts logged inside the ``with`` block.

    ``structlog.testing.capture_logs`` (same arguments): assert on ``event`` names and
    fields, not text. Inside the block structlog counts as configured, so every
    lockworker event goes to the list, whenever its object was built. If structlog was
    not configured before, it is not afterwards either: lockworker's events go back to
    the standard ``logging`` module.
    """
    was_configured = structlog.is_configured()
    try:
        with capture_logs(*args, **kwargs) as entries:
            yield entries
    finally:
        if not was_configured:
            structlog.reset_defaults()
