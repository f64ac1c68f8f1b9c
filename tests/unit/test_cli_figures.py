"""Every figure the command prints is believable: the demo's summary and live view,
``status``'s durations and ages. Pure logic; the end-to-end checks of the printed
figures are in tests/integration/test_cli_demo.py and test_cli.py."""

from __future__ import annotations

import io
import re

from hypothesis import given
from hypothesis import strategies as st

from lockworker.cli.cells import duration
from lockworker.cli.demo_view import Board, Process, View, summarize, summary_lines
from lockworker.cli.status import job_age
from lockworker.model.state import JobStatus, Snapshot

TOKEN_2026 = 1_795_000_000_000_000
"""A first token as the server's clock gives it (microseconds since 1970, in 2026)."""

OWNERS = ["primary", "backup-1", "backup-2"]


def done(attempt: int, owner: str) -> Snapshot:
    return Snapshot(JobStatus.DONE, attempt, TOKEN_2026 + attempt - 1, owner)


def test_handovers_count_attempts_not_tokens() -> None:
    """Tokens start at the server's clock: a job done at its first attempt has a token
    near 1.8e15 and no handover."""
    ids = ["job-000", "job-001", "job-002"]
    states = {"job-000": done(1, "primary"), "job-001": done(2, "backup-1"),
              "job-002": done(1, "backup-2")}
    runs = [("job-000", "primary"), ("job-001", "backup-1"), ("job-002", "backup-2")]
    summary = summarize(ids, OWNERS, runs, states)
    assert summary.handovers == 1
    assert summary.handed_over == {"job-001": 1}
    assert summary.ok and summary.once == ids
    assert sum(summary.done_by.values()) == len(ids)
    lines = summary_lines(summary)
    assert "  handovers (attempts after the first): 1 (job-001 at attempt 2)" in lines
    assert "  done by: primary 1, backup-1 1, backup-2 1" in lines


def test_lost_and_twice_are_named_and_the_counts_add_up() -> None:
    ids = ["a", "b", "c"]
    states = {"a": done(1, "primary"), "b": done(3, "backup-1"),
              "c": Snapshot(JobStatus.GAVE_UP, 3, TOKEN_2026 + 2, "backup-2")}
    runs = [("a", "primary"), ("b", "primary"), ("b", "backup-1")]
    summary = summarize(ids, OWNERS, runs, states)
    assert (summary.once, summary.lost, summary.twice) == (["a"], ["c"], ["b"])
    assert not summary.ok
    assert summary.handovers == 4  # b: attempts 2 and 3; c: attempts 2 and 3
    assert sum(summary.done_by.values()) == len(runs)
    lines = summary_lines(summary)
    assert "  lost: c" in lines and "  done twice: b" in lines


def test_no_handover_prints_zero_and_no_list() -> None:
    summary = summarize(["a"], OWNERS, [("a", "primary")], {"a": done(1, "primary")})
    assert "  handovers (attempts after the first): 0" in summary_lines(summary)


def test_the_live_view_counts_only_done_jobs_as_done() -> None:
    board = Board([Process(name, "backup") for name in OWNERS], total=4, submitted=4)
    board.jobs = {
        "a": done(1, "primary"),
        "b": Snapshot(JobStatus.GAVE_UP, 3, TOKEN_2026 + 2, "primary"),
        "c": Snapshot(JobStatus.PENDING, 1, TOKEN_2026, "", holder="backup-1", pttl_ms=900),
        "d": Snapshot(JobStatus.PENDING, 0, 0, ""),
    }
    first = View(io.StringIO(), live=False).lines(1.0, board)[0]
    assert first.strip().split("  ")[1:] == ["submitted 4/4", "done 1", "in hand 1", "gave up 1"]


SHOWN = re.compile(
    r"^(?:(\d+)ms|(\d+\.\d)s|(\d+)m(\d\d)s|(\d+)h(\d\d)m|(\d+)d(\d\d)h)$"
)


@given(st.floats(min_value=0, max_value=10 * 86400, allow_nan=False))
def test_a_duration_reads_as_what_it_is(seconds: float) -> None:
    """No ``1000ms``, ``60.0s``, ``0m59s`` or ``60m``: each unit below the next, and the
    figure within its unit's rounding of the value."""
    shown = duration(seconds)
    found = SHOWN.match(shown)
    assert found, shown
    ms, s, m, m_s, h, h_m, d, d_h = found.groups()
    if ms is not None:
        value, unit = int(ms) / 1000, 0.001
        assert int(ms) < 1000
    elif s is not None:
        value, unit = float(s), 0.1
        assert 1.0 <= value < 60
    elif m is not None:
        value, unit = int(m) * 60 + int(m_s), 1.0
        assert 1 <= int(m) < 60 and int(m_s) < 60
    elif h is not None:
        value, unit = int(h) * 3600 + int(h_m) * 60, 60.0
        assert 1 <= int(h) < 48 and int(h_m) < 60
    else:
        value, unit = int(d) * 86400 + int(d_h) * 3600, 3600.0
        assert int(d) >= 2 and int(d_h) < 24
    assert value - unit <= seconds <= value + unit, (seconds, shown)


def test_a_negative_duration_is_never_shown() -> None:
    assert duration(-0.2) == "0ms"


def test_a_job_age_is_known_only_within_the_retention() -> None:
    assert job_age(86_400_000 - 1500, 86400.0) == 1.5
    assert job_age(0, 60.0) == 60.0
    assert job_age(-1, 86400.0) is None  # no time to live: written by no worker
    assert job_age(-2, 86400.0) is None  # gone meanwhile
    # the workers keep states longer than --retention says: no age, rather than 0
    assert job_age(86_400_000, 60.0) is None
