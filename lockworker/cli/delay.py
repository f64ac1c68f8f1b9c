"""``lockworker submit``'s command line, and when a delayed job is due.

``--in 30s`` (or ``90``, ``5m``, ``1.5h``, ``2d``) and ``--at 2026-11-30T06:00:00Z``
(ISO 8601 with a UTC offset) submit a job due later, by the server's clock: it waits
off the stream until then (:mod:`lockworker.daemons.submit`).
"""

from __future__ import annotations

import argparse
import re
from datetime import datetime, timezone
from typing import Any

from lockworker import config
from lockworker.errors import InvalidConfig

UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
"""The units ``--in`` takes (none: seconds)."""
_SPAN = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([smhd]?)\s*$")


def parse_in(text: str) -> float:
    """``--in``: a delay, a number of seconds or of ``s``, ``m``, ``h`` or ``d``."""
    found = _SPAN.match(text.lower())
    if found is None:
        raise argparse.ArgumentTypeError(
            f"expected a delay like 90, 30s, 5m, 1.5h or 2d, got {text!r}"
        )
    delay = float(found[1]) * UNITS[found[2] or "s"]
    try:
        config.due(delay, None)
    except InvalidConfig as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return delay


def parse_at(text: str) -> datetime:
    """``--at``: an ISO 8601 time with its UTC offset (``Z`` or ``+02:00``); a time
    without one is refused, since which zone it meant is a guess."""
    raw = text.strip()
    if raw[-1:] in ("Z", "z"):
        raw = raw[:-1] + "+00:00"  # Python 3.10's fromisoformat does not read Z
    try:
        moment = datetime.fromisoformat(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected an ISO 8601 time like 2026-11-30T06:00:00Z, got {text!r}"
        ) from None
    if moment.utcoffset() is None:
        raise argparse.ArgumentTypeError(
            f"expected a time with its UTC offset (Z, +02:00...), got {text!r}: a time "
            "without one could mean any zone"
        )
    return moment


def add_parser(sub: Any, common: argparse.ArgumentParser) -> None:
    """The ``submit`` command."""
    submit = sub.add_parser(
        "submit", parents=[common], help="add a job to a stream (now, or due later)",
        description="Add job JOB_ID with payload PAYLOAD_JSON (JSON, default: none) to "
        "the stream STREAM that `lockworker run` workers serve; say what was added, "
        "where (its entry id), and the command that follows the job. With --in or --at "
        "the job is due later, by the server's clock: it waits off the stream until "
        "then (the jobs after it run meanwhile), and the readers of the stream add it "
        "when it is due.",
    )
    submit.add_argument("stream", metavar="STREAM")
    submit.add_argument("job_id", metavar="JOB_ID")
    submit.add_argument("payload", metavar="PAYLOAD_JSON", nargs="?", default=None)
    submit.add_argument("--quiet", "-q", action="store_true",
                        help="print only the entry id (delayed:<id> for a job that waits)")
    when = submit.add_mutually_exclusive_group()
    when.add_argument("--in", dest="delay", type=parse_in, metavar="DELAY",
                      help="due after DELAY: seconds, or 30s, 5m, 1.5h, 2d "
                      "(default: now)")
    when.add_argument("--at", type=parse_at, metavar="TIME",
                      help="due at TIME, ISO 8601 with its UTC offset, e.g. "
                      "2026-11-30T06:00:00Z (default: now)")


def due_text(due_ms: int) -> str:
    """A due time, in UTC to the millisecond: ``2026-11-30 06:00:00.000 UTC``."""
    moment = datetime.fromtimestamp(due_ms / 1000.0, timezone.utc)
    return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{due_ms % 1000:03d} UTC"
