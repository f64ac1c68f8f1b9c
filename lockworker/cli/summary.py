"""What ``lockworker status`` prints around its rows: the counts by state first, and the
rows cut to ``--limit`` with a line saying how many more there are.

A namespace with hundreds of jobs is read from its counts; the rows are for the few
one is after (``--state``, ``--job``), or all of them with ``--all``. ``--json`` is
never cut: a script gets every row, and the counts beside them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any, Protocol, TypeVar

from lockworker.cli.cells import printable
from lockworker.config import JOB_STATES

DEFAULT_LIMIT = 50
"""Rows a table shows unless ``--limit`` or ``--all`` says otherwise."""
MAX_NAMESPACES = 10
"""Namespaces given a counts line of their own; the rest are summed up in one."""
JOB_KINDS = (*JOB_STATES, "foreign")
"""Every state a job row can have, in the order the counts show them."""
LEADER_KINDS = ("leading", "vacant", "foreign")

T = TypeVar("T")


class Counted(Protocol):
    """A row of the table: a job or a leader, in a namespace, in a state."""

    @property
    def kind(self) -> str: ...
    @property
    def namespace(self) -> str: ...
    @property
    def state(self) -> str: ...


ByState = dict[str, int]


def counts(
    rows: Sequence[Counted], by_namespace: dict[str, ByState] | None = None
) -> dict[str, Any]:
    """``{"jobs": {state: n}, "leaders": {state: n}, "namespaces": {ns: {state: n}}}``,
    every state present (0 if none), namespaces of jobs only, in the rows' order.

    With ``by_namespace`` (the index's counts, :func:`lockworker.cli.indexed.counts`),
    the jobs are counted from it, not from the rows (which are only the newest of each
    state); foreign rows, which the index never holds, are added from the rows."""
    if by_namespace is not None:
        return _indexed(rows, by_namespace)
    jobs: Counter[str] = Counter()
    leaders: Counter[str] = Counter()
    namespaces: dict[str, Counter[str]] = {}
    for row in rows:
        if row.kind == "leader":
            leaders[row.state] += 1
        else:
            jobs[row.state] += 1
            namespaces.setdefault(row.namespace, Counter())[row.state] += 1
    return {
        "jobs": _all_of(jobs, JOB_KINDS),
        "leaders": _all_of(leaders, LEADER_KINDS),
        "namespaces": {ns: _all_of(seen, JOB_KINDS) for ns, seen in namespaces.items()},
    }


def _indexed(rows: Sequence[Counted], by_namespace: dict[str, ByState]) -> dict[str, Any]:
    leaders: Counter[str] = Counter(r.state for r in rows if r.kind == "leader")
    namespaces: dict[str, Counter[str]] = {
        ns: Counter(seen) for ns, seen in by_namespace.items()
    }
    for row in rows:
        if row.kind != "leader" and row.state == "foreign":
            namespaces.setdefault(row.namespace, Counter())["foreign"] += 1
    jobs: Counter[str] = Counter()
    for seen in namespaces.values():
        jobs.update(seen)
    return {
        "jobs": _all_of(jobs, JOB_KINDS),
        "leaders": _all_of(leaders, LEADER_KINDS),
        "namespaces": {ns: _all_of(seen, JOB_KINDS) for ns, seen in namespaces.items()},
    }


def listed_total(rows: Sequence[Counted], by_namespace: dict[str, ByState] | None) -> int:
    """How many rows the table would have with no limit: the leaders, and the jobs of
    the listed states the index counts (``done`` is counted, never listed)."""
    if by_namespace is None:
        return len(rows)
    leaders = sum(1 for r in rows if r.kind == "leader")
    return leaders + sum(
        n for seen in by_namespace.values() for state, n in seen.items() if state != "done"
    )


def _all_of(seen: Counter[str], kinds: Sequence[str]) -> ByState:
    return {kind: seen.get(kind, 0) for kind in kinds}


def _line(label: str, by_state: ByState) -> str:
    """``billing: 207 (pending 20, held 4, done 180, gave_up 3)``: the states with any."""
    parts = ", ".join(f"{state} {n}" for state, n in by_state.items() if n)
    return f"{label}: {sum(by_state.values())}" + (f" ({parts})" if parts else "")


def counts_lines(
    rows: Sequence[Counted], by_namespace: dict[str, ByState] | None = None
) -> list[str]:
    """The counts as the table shows them, before its rows: jobs in all, each namespace
    when there are several, then the leaders if any."""
    found = counts(rows, by_namespace)
    namespaces: dict[str, ByState] = found["namespaces"]
    lines = []
    if namespaces:
        lines.append(_line("jobs", found["jobs"]))
    if len(namespaces) > 1:
        shown = list(namespaces.items())[:MAX_NAMESPACES]
        lines += [_line("  " + printable(ns), by_state) for ns, by_state in shown]
        if len(namespaces) > MAX_NAMESPACES:
            lines.append(f"  and {len(namespaces) - MAX_NAMESPACES} more namespaces")
    if any(found["leaders"].values()):
        lines.append(_line("leaders", found["leaders"]))
    return lines


def cut(rows: Sequence[T], limit: int | None) -> tuple[list[T], int]:
    """The first ``limit`` rows (all if None), and how many were left out."""
    if limit is None or len(rows) <= limit:
        return list(rows), 0
    return list(rows[:limit]), len(rows) - limit


def more_line(left_out: int) -> str:
    """The line under a table cut short."""
    rows = "row" if left_out == 1 else "rows"
    return (f"... and {left_out} more {rows}: --all shows every row, --state STATE the "
            "jobs in one state")
