"""structlog configuration, done here and nowhere else in lockworker.

JSON lines when stderr is not a terminal (supervisord, systemd, containers: one event
per line, machine-readable), coloured console lines on a terminal. ``--log-format``
overrides the guess; ``--log-level`` filters.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

FORMATS = ("auto", "json", "console")
LEVELS = ("debug", "info", "warning", "error")


def resolve_format(fmt: str, stream: TextIO) -> str:
    """``json`` or ``console``: ``auto`` picks console only on a terminal."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> str:
    """Route structlog events to ``stream`` (stderr) as ``fmt``; return the format used."""
    out = stream or sys.stderr
    chosen = resolve_format(fmt, out)
    renderer: Any
    if chosen == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    processors: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if chosen == "json":
        processors.append(structlog.processors.format_exc_info)
    processors.append(renderer)
    structlog.configure(
        processors=processors,
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelName(level.upper())
        ),
        logger_factory=structlog.PrintLoggerFactory(out),
        cache_logger_on_first_use=False,
    )
    return chosen
