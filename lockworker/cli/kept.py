"""The options that say how long the workers keep a job's record: ``lockworker run``
sets them (``--retention``, ``--done-retention``); ``status`` and the dashboard read
them back, to tell a job's age from its state key's time to live.

One place, so the defaults the commands assume are the defaults the workers use
(:data:`lockworker.serving.settings.DAY` and :data:`~.DONE_RETENTION`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

from lockworker.serving.settings import DAY, DONE_RETENTION

RETENTION_HELP = f"(default: {DAY:.0f}, one day)"
DONE_HELP = f"(default: {DONE_RETENTION:.0f}, one hour)"


@dataclass(frozen=True)
class Kept:
    """How long the workers keep a job's state: ``retention`` for a pending or given-up
    job, ``done`` for a DONE one (``done_retention``)."""

    retention: float = DAY
    done: float = DONE_RETENTION

    def of(self, status: str) -> float:
        """The time to live a state of ``status`` was written with."""
        return self.done if status == "done" else self.retention


def kept(args: argparse.Namespace) -> Kept:
    """What the command's options say the workers keep."""
    return Kept(args.retention, args.done_retention)


def add_run_options(run: argparse.ArgumentParser, positive: Callable[[str], float]) -> None:
    """``lockworker run``: how long the Worker keeps what it finished."""
    run.add_argument(
        "--retention", type=positive, metavar="SECONDS",
        help=f"Worker only: how long a given-up job (and a pending one's attempt count) "
        f"is kept {RETENTION_HELP}",
    )
    run.add_argument(
        "--done-retention", type=positive, metavar="SECONDS",
        help=f"Worker only: how long a DONE job's record is kept; a duplicate of its id "
        f"inside it is recognised as done, after it runs again {DONE_HELP}",
    )


def add_age_options(
    parser: argparse.ArgumentParser, positive: Callable[[str], float], what: str
) -> None:
    """``status``, the dashboard: the workers' settings, to tell a job's age."""
    parser.add_argument(
        "--retention", type=positive, default=DAY, metavar="SECONDS",
        help=f"the workers' retention, to tell a job's age from its key's time to live"
        f"{what} {RETENTION_HELP}",
    )
    parser.add_argument(
        "--done-retention", type=positive, default=DONE_RETENTION, metavar="SECONDS",
        help=f"the workers' done retention, to tell a DONE job's age {DONE_HELP}",
    )
