"""Logging configuration, done here and nowhere else in lockworker.

JSON lines when stderr is not a terminal (supervisord, systemd, containers: one event
per line, machine-readable), coloured console lines on a terminal. ``--log-format``
overrides the guess; ``--log-level`` filters.

The command is an application, so it configures both ``logging`` and structlog: one
handler on the root logger renders every record, lockworker's structlog events and the
standard records of the code it runs (the job classes, redis-py) alike, through
``structlog.stdlib.ProcessorFormatter``.
"""

from __future__ import annotations

import logging
import sys
from typing import Any, TextIO

import structlog

FORMATS = ("auto", "json", "console")
LEVELS = ("debug", "info", "warning", "error")
HANDLER_NAME = "lockworker.cli"
"""The name of the root handler :func:`configure` installs (and replaces when called again)."""


def resolve_format(fmt: str, stream: TextIO) -> str:
    """``json`` or ``console``: ``auto`` picks console only on a terminal."""
    if fmt != "auto":
        return fmt
    isatty = getattr(stream, "isatty", None)
    return "console" if isatty is not None and isatty() else "json"


def _drop_terminal_copy(_logger: Any, _method: str, event: Any) -> Any:
    """Drop uvicorn's ``color_message`` extra: a copy of the message with terminal colour
    codes, meant for uvicorn's own formatter; as a field it put escape codes in every JSON
    line of the dashboard (and said the message twice on the console)."""
    event.pop("color_message", None)
    return event


def configure(fmt: str = "auto", level: str = "info", stream: TextIO | None = None) -> str:
    """Route log events to ``stream`` (stderr) as ``fmt``; return the format used."""
    out = stream or sys.stderr
    chosen = resolve_format(fmt, out)
    threshold = logging.getLevelName(level.upper())
    renderer: Any
    if chosen == "json":
        renderer = structlog.processors.JSONRenderer(sort_keys=False)
    else:
        renderer = structlog.dev.ConsoleRenderer(colors=out.isatty())
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    if chosen == "json":
        shared.append(structlog.processors.format_exc_info)
    handler = logging.StreamHandler(out)
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
            # Records from plain ``logging`` loggers: their extra fields, the logger's
            # name, then what structlog's events get.
            foreign_pre_chain=[
                structlog.stdlib.ExtraAdder(), _drop_terminal_copy,
                structlog.stdlib.add_logger_name, *shared,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(threshold)
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        wrapper_class=structlog.make_filtering_bound_logger(threshold),
        logger_factory=structlog.stdlib.LoggerFactory(),
        cache_logger_on_first_use=False,
    )
    return chosen
