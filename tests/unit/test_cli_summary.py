"""What ``lockworker status`` prints before and after its rows: counts, and the cut."""

from __future__ import annotations

import pytest

from lockworker.cli import summary
from lockworker.cli.main import parse
from lockworker.cli.status import Row


def row(kind: str, namespace: str, state: str) -> Row:
    return Row(kind, namespace, "x", state, None, None, 0, None, None)


def test_counts_by_state_then_by_namespace_then_leaders() -> None:
    rows = [row("leader", "leaders", "leading"), row("leader", "leaders", "vacant")]
    rows += [row("job", "billing", "done")] * 3 + [row("job", "billing", "held")]
    rows += [row("job", "mail", "gave_up"), row("job", "mail\n", "foreign")]
    assert summary.counts_lines(rows) == [
        "jobs: 6 (held 1, done 3, gave_up 1, foreign 1)",
        "  billing: 4 (held 1, done 3)",
        "  mail: 1 (gave_up 1)",
        "  mail\\n: 1 (foreign 1)",
        "leaders: 2 (leading 1, vacant 1)",
    ]
    # One namespace: no line of its own; no leaders: no leaders line.
    assert summary.counts_lines([row("job", "a", "pending")]) == ["jobs: 1 (pending 1)"]
    assert summary.counts_lines([]) == []


def test_many_namespaces_are_summed_up_after_the_first_ones() -> None:
    rows = [row("job", f"ns{i}", "done") for i in range(summary.MAX_NAMESPACES + 3)]
    lines = summary.counts_lines(rows)
    assert len(lines) == 1 + summary.MAX_NAMESPACES + 1
    assert lines[-1] == "  and 3 more namespaces"


def test_the_cut_and_its_line() -> None:
    assert summary.cut([1, 2, 3], 2) == ([1, 2], 1)
    assert summary.cut([1, 2, 3], 3) == ([1, 2, 3], 0)
    assert summary.cut([1, 2, 3], None) == ([1, 2, 3], 0)
    assert summary.more_line(1).startswith("... and 1 more row:")


def test_limit_and_all_options() -> None:
    assert parse(["status"]).limit == summary.DEFAULT_LIMIT
    assert parse(["status", "--limit", "7"]).limit == 7
    assert parse(["status", "--all"]).all
    with pytest.raises(SystemExit):
        parse(["status", "--all", "--limit", "3"])
    with pytest.raises(SystemExit):
        parse(["status", "--limit", "0"])
    assert parse(["submit", "s", "j", "-q"]).quiet
