"""The failover section's arithmetic and ``--only failover``'s splice into the page.

Pure logic of the benchmark harness (``benchmarks/`` sits beside the package, not in
it): when the backups count as serving at 0.8x, that measuring section 9 alone
replaces that section and its summary lines while every other figure stays, and how
the targets against the worker frameworks are read.
"""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import report_failover, report_peers, stream_failover  # noqa: E402
from benchmarks.peers import PeerRate, PeersRun, Recovery  # noqa: E402
from benchmarks.stream_failover import FailoverRun  # noqa: E402

PAGE = """# Benchmarks

## Summary

- uncontended Lock acquire+release: 1,037 ops/s
- stream failover, old figures
- beside RQ and Celery, old figures
- scale: 10,000 jobs held

## Machine

| date | then |

## 8. Beyond one server: a 3-master cluster

| 1 server | 2,184 |
{tail}"""

SECTION = [report_failover.HEADING, "", "new figures", ""]
SUMMARY = ["stream failover, new", "beside RQ and Celery, new"]


def test_splice_replaces_the_section_and_its_summary_lines_only() -> None:
    old = PAGE.format(tail=f"\n{report_failover.HEADING}\n\nold figures\n")
    page = report_failover.splice(old, SECTION, SUMMARY)
    assert "old figures" not in page and "new figures" in page
    assert page.count(report_failover.HEADING) == 1
    summary = page.split("## Summary", 1)[1].split("## Machine", 1)[0]
    assert summary.split("\n- ")[1:] == [
        "uncontended Lock acquire+release: 1,037 ops/s",
        "scale: 10,000 jobs held",
        "stream failover, new",
        "beside RQ and Celery, new\n\n",
    ]
    # Everything outside section 9 and those summary lines is as it was.
    assert page.split("## Machine", 1)[1].split(report_failover.HEADING)[0] == (
        old.split("## Machine", 1)[1].split(report_failover.HEADING)[0]
    )


def test_splice_appends_a_section_the_page_lacks_and_keeps_a_later_one() -> None:
    page = report_failover.splice(PAGE.format(tail=""), SECTION, SUMMARY)
    assert page.index("| 1 server | 2,184 |") < page.index(report_failover.HEADING)
    later = PAGE.format(tail=f"\n{report_failover.HEADING}\n\nold\n\n## 10. Later\n\nkept\n")
    page = report_failover.splice(later, SECTION, SUMMARY)
    assert "## 10. Later\n\nkept" in page and "\nold\n" not in page


def _run(how: str = "SIGKILL") -> FailoverRun:
    return FailoverRun(how, "sync", jobs=100, kill_after=25, cap=30.0, lease=2.0)


def test_backups_reaching_the_primarys_pace_after_the_lease_meet_the_target() -> None:
    killed = 10.0
    rows = [(killed - 0.25 + n / 100, "primary", 1) for n in range(25)]  # 100 jobs/s
    rows += [(killed + 2.5 + n / 90, "backup", 2) for n in range(75)]  # 90 jobs/s
    result = _run()
    runs = {f"job-{n}".encode(): b"1" for n in range(100)}
    stream_failover.analyse(result, rows, killed, runs)
    assert 2.49 < (result.first_after or 0) < 2.51
    assert result.steady_after is not None and 2.49 < result.steady_after < 2.51
    assert 0.85 < result.ratio < 0.95
    assert result.left == 0 and result.twice == 0
    assert result.met  # 2.5 s <= the lease + 1 s
    result = _run("SIGTERM")
    stream_failover.analyse(result, rows, killed, runs)
    assert not result.met  # a clean stop must be followed within 1 s


def test_a_crawl_that_runs_out_of_time_is_not_met_and_says_how_many_were_left() -> None:
    killed = 10.0
    rows = [(killed - 0.25 + n / 100, "primary", 1) for n in range(25)]
    rows += [(killed + 0.5 + n / 8, "backup", 2) for n in range(10)]  # 8 jobs/s
    result = _run()
    runs = {f"job-{n}".encode(): b"1" for n in range(35)}
    runs[b"job-0"] = b"2"
    stream_failover.analyse(result, rows, killed, runs)
    assert result.steady_after is None
    assert result.left == 65 and result.twice == 1
    assert result.ratio < 0.1 and not result.met


def test_the_summary_says_why_a_row_misses_the_target() -> None:
    """A ratio printed as 0.80x that is 0.796x, a steady rate reached too late, jobs
    left: each is named beside its row, so the verdict can be read."""
    slow, late, fine = _run("SIGTERM"), _run("SIGKILL"), _run("SIGKILL")
    for run, after, steady in ((slow, 796.0, 0.5), (late, 900.0, 3.5), (fine, 900.0, 1.0)):
        run.before_rate, run.after_rate, run.steady_after = 1000.0, after, steady
    late.left = 3
    section = SimpleNamespace(streams=[slow, late, fine], peers=None)
    (line,) = report_failover.summary(section)  # type: ignore[arg-type]
    assert "SIGTERM sync 0.80x (0.796x < 0.8x)," in line
    assert "SIGKILL sync 0.90x (3 jobs left; 0.8x only after 3.50 s > 3 s)," in line
    assert line.endswith("SIGKILL sync 0.90x; target >= 0.8x within the lease + 1 s after "
                         "SIGKILL, 1 s after SIGTERM: **not met**")


def test_splice_replaces_the_section_under_its_former_heading() -> None:
    """A page written before section 9 had the frameworks gets the new section in place
    of the old one, not beside it."""
    (former,) = report_failover.FORMER_HEADINGS
    old = PAGE.format(tail=f"\n{former}\n\nold figures\n\n## 10. Later\n\nkept\n")
    page = report_failover.splice(old, SECTION, SUMMARY)
    assert former not in page and "old figures" not in page
    assert page.count(report_failover.HEADING) == 1 and "## 10. Later\n\nkept" in page
    assert "beside RQ and Celery, old figures" not in page


def _rate(tool: str, rate: float, concurrency: int = 0, *, once: bool = True) -> PeerRate:
    return PeerRate(tool, jobs=1000, concurrency=concurrency, seconds=1000 / rate,
                    distinct=1000, runs=1000 if once else 1001, server_cpu=0.1,
                    workers_cpu=0.3, commands=12_000, window=1000 / rate)


def test_the_targets_read_the_best_group_row_against_the_frameworks() -> None:
    """Ahead of every framework that ran each job once, and 1.5x the fastest of those
    whose killed worker's job ran again; a framework that is not available or ran a job
    twice does not count, and a target missed names the two rows' costs."""
    rates = [
        _rate("lockworker", 2000, 1), _rate("lockworker", 1500, 4),
        _rate("huey", 3000), _rate("Dramatiq", 1200), _rate("RQ", 5000, once=False),
        PeerRate("arq", 1000, error="not available: ImportError: no"),
    ]
    recoveries = [
        Recovery("huey", "default", 120.0, 30.0),
        Recovery("Dramatiq", "tuned", 120.0, 30.0, latency=5.0, runs_after=1),
        Recovery("lockworker", "tuned", 120.0, 30.0, latency=2.0, runs_after=1),
    ]
    peers = PeersRun(1000, 120.0, 30.0, rates, recoveries)
    ahead, rerun = report_peers.targets(peers, cores=2)
    assert "concurrency 1 2,000 / the fastest, huey 3,000 = 0.67x: **not met** (bound: " in ahead
    assert "12.0 server commands per job" in ahead
    assert rerun.endswith("(Dramatiq did in their trials): lockworker `serve(group=)`, "
                          "concurrency 1 2,000 / Dramatiq 1,200 = 1.67x: met")
    summary = report_peers.summary(peers, cores=2)
    assert "arq not available" in summary[0] and summary[1:] == [ahead, rerun]
