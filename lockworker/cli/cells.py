"""The cells of the CLI's tables: one line each, durations short, ids in natural
order, columns aligned. Shared by ``status``, a job's history and the dashboard."""

from __future__ import annotations

import re
from collections.abc import Sequence

_DIGITS = re.compile(r"([0-9]+)")


def natural(text_: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders ``job-2`` before ``job-10``."""
    return tuple(
        (0, int(part)) if part.isdigit() else (1, part)
        for part in _DIGITS.split(text_) if part
    )


def printable(cell: str) -> str:
    """A cell on one line: control characters (a newline in an id) escaped."""
    if cell.isprintable():
        return cell
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in cell)


def duration(seconds: float | None) -> str:
    """``850ms``, ``12.3s``, ``4m05s``, ``3h07m``, ``2d05h``; ``-`` when unknown."""
    if seconds is None:
        return "-"
    seconds = max(0.0, seconds)
    if seconds < 0.9995:  # below what rounds to 1000ms
        return f"{seconds * 1000:.0f}ms"
    if seconds < 59.95:  # below what rounds to 60.0s
        return f"{seconds:.1f}s"
    minutes, secs = divmod(round(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 48:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def aligned(cells: Sequence[Sequence[str]]) -> str:
    """Rows of cells as lines, each column as wide as its widest cell, two spaces apart
    (one format per table: 10,000 rows are a blink, not a second)."""
    widths = [max(map(len, column)) for column in zip(*cells, strict=True)]
    line = "  ".join([*(f"{{:<{w}}}" for w in widths[:-1]), "{}"])
    return "\n".join(line.format(*row).rstrip() for row in cells)
