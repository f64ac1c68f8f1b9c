"""Capture lockworker's structlog events in tests."""

from __future__ import annotations

from structlog.testing import capture_logs

capture_events = capture_logs
"""Context manager yielding the list of event dicts logged inside it
(``structlog.testing.capture_logs``): assert on ``event`` names and fields, not text."""
