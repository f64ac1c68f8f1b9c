"""The demo's live view: who holds what, refreshed in place on a terminal.

On a terminal the block of status lines is redrawn in place (ANSI cursor-up and
clear), with events printed above it as they happen; elsewhere (a pipe, CI) events are
printed as they happen and a progress line at most once a second, so the output reads
well as a log.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TextIO

from lockworker.model.state import JobStatus, Snapshot

PROGRESS_EVERY = 1.0
"""Seconds between two progress lines when not on a terminal."""


@dataclass
class Process:
    """One worker process of the demo, as the view shows it."""

    name: str
    role: str
    killed_at: float | None = None


@dataclass
class Board:
    """What the demo knows at one moment."""

    processes: list[Process]
    total: int
    submitted: int = 0
    jobs: dict[str, Snapshot] = field(default_factory=dict)
    done_by: Counter[str] = field(default_factory=Counter)

    def count(self, status: JobStatus) -> int:
        return sum(1 for s in self.jobs.values() if s.status is status)

    def held_by(self, owner: str) -> list[str]:
        return sorted(j for j, s in self.jobs.items() if s.holder == owner)


class View:
    """Draws a :class:`Board` on ``out``."""

    def __init__(self, out: TextIO, *, live: bool) -> None:
        self.out = out
        self.live = live
        self._drawn = 0
        self._last_progress = float("-inf")

    def event(self, at: float, message: str) -> None:
        """A line that stays (printed above the live block)."""
        self._erase()
        self.out.write(f"{at:6.2f}s  {message}\n")
        self.out.flush()

    def lines(self, at: float, board: Board) -> list[str]:
        held = sum(1 for s in board.jobs.values() if s.holder is not None)
        gave_up = board.count(JobStatus.GAVE_UP)
        lines = [
            f"{at:6.2f}s  submitted {board.submitted}/{board.total}  "
            f"done {board.count(JobStatus.DONE)}  in hand {held}"
            + (f"  gave up {gave_up}" if gave_up else "")
        ]
        for p in board.processes:
            if p.killed_at is not None:
                doing = f"killed at {p.killed_at:.2f}s"
            else:
                jobs = board.held_by(p.name)
                doing = "holds " + ", ".join(jobs) if jobs else "idle"
            lines.append(
                f"         {p.name:<9} {p.role:<8} done {board.done_by[p.name]:>3}  {doing}"
            )
        return lines

    def draw(self, at: float, board: Board, *, final: bool = False) -> None:
        """Redraw the block (terminal) or print a progress line (at most once a second)."""
        if self.live:
            self._erase()
            lines = self.lines(at, board)
            self.out.write("\n".join(lines) + "\n")
            self.out.flush()
            self._drawn = 0 if final else len(lines)
        elif final or at - self._last_progress >= PROGRESS_EVERY:
            self._last_progress = at
            self.out.write("\n".join(self.lines(at, board)) + "\n")
            self.out.flush()

    def _erase(self) -> None:
        if self.live and self._drawn:
            self.out.write(f"\x1b[{self._drawn}F\x1b[J")
            self._drawn = 0


@dataclass(frozen=True)
class Summary:
    """The figures the demo ends with, each from what Redis holds at the end."""

    total: int
    once: list[str]
    """Jobs DONE, with exactly one completed run recorded."""
    lost: list[str]
    """Jobs with no completed run."""
    twice: list[str]
    """Jobs with more than one completed run."""
    done_by: dict[str, int]
    """Completed runs per process (their sum is the number of runs recorded)."""
    handed_over: dict[str, int]
    """Jobs that took more than one attempt, and how many attempts after the first
    (from the attempt count: tokens start at the server's clock, not at 1)."""

    @property
    def handovers(self) -> int:
        return sum(self.handed_over.values())

    @property
    def ok(self) -> bool:
        return len(self.once) == self.total


def summarize(
    ids: list[str], owners: list[str], runs: list[tuple[str, str]],
    states: dict[str, Snapshot],
) -> Summary:
    """The :class:`Summary` of jobs ``ids`` done by processes ``owners``, from the
    completed ``runs`` recorded (``(job, owner)`` each) and the jobs' final states."""
    counts = Counter(job for job, _owner in runs)
    by_owner = Counter(owner for _job, owner in runs)
    return Summary(
        total=len(ids),
        once=[j for j in ids if counts[j] == 1 and states[j].status is JobStatus.DONE],
        lost=[j for j in ids if counts[j] == 0],
        twice=[j for j in ids if counts[j] > 1],
        done_by={owner: by_owner[owner] for owner in owners},
        handed_over={j: states[j].attempt - 1 for j in ids if states[j].attempt > 1},
    )


def summary_lines(summary: Summary) -> list[str]:
    """The summary's lines about the jobs (the demo adds the takeover and the time)."""
    s = summary
    by = ", ".join(f"{owner} {n}" for owner, n in s.done_by.items())
    which = ", ".join(f"{j} at attempt {n + 1}" for j, n in s.handed_over.items())
    lines = [
        f"  jobs done exactly once: {len(s.once)}/{s.total}"
        f"   lost: {len(s.lost)}   done twice: {len(s.twice)}",
        f"  done by: {by}",
        f"  handovers (attempts after the first): {s.handovers}"
        + (f" ({which})" if which else ""),
    ]
    for label, jobs in (("lost", s.lost), ("done twice", s.twice)):
        if jobs:
            lines.append(f"  {label}: {', '.join(jobs)}")
    return lines
