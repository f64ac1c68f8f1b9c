"""The benchmark harness still runs end to end (``python -m benchmarks --quick``).

A smoke test only: it checks that every benchmark runs and the report is written, and
asserts nothing about speed (figures on a shared machine are not test material).
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import peers as peer_bench
from benchmarks import stream as stream_bench

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.processes


@pytest.mark.benchrun
@pytest.mark.timeout(330)
def test_quick_benchmark_run_writes_a_report(tmp_path: Path) -> None:
    output = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--output", str(output)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = output.read_text(encoding="utf-8")
    for heading in (
        "## Summary",
        "## Machine",
        "## 1. Uncontended: locks and job cycle",
        "## 2. Contended: processes on one lock",
        "## 3. Handover after a failed attempt",
        "### Leadership: from a leader's stop to the next one's election",
        "## 4. Takeover after SIGKILL",
        "## 5. A stream of jobs: lockworker beside a consumer group",
        "### A process killed mid-stream",
        "### Where each job's commands go",
        "### Memory: a large backlog served",
        "### Three streams through shared groups: 3 masters or 1 server",
        "## 6. Scale: jobs in flight",
        '## 7. The "Redis in Action" marketplace',
        "## 8. Beyond one server: a 3-master cluster",
        "## 9. Failover of a stream, beside the worker frameworks",
        "### The stream's jobs/s before and after its primary goes",
        "### Beside the worker frameworks: jobs/s, and a killed worker's job",
        "## 10. Views with a million finished jobs",
    ):
        assert heading in report
    for row in (
        "| lockworker Lock |",
        "| lockworker Semaphore |",
        "| lockworker aio.Semaphore |",
        "| lockworker compute_once (hit) |",
        "| lockworker aio.compute_once (hit) |",
        "| lockworker compute_once (miss) |",
        "| lockworker aio.compute_once (miss) |",
        "| lockworker script |",
        "| lockworker txn |",
        "| redis-py Lock |",
        "| lockworker aio.Lock |",
        "| redis-py asyncio Lock |",
        "| lockworker aio.Worker |",
        "| lockworker Redlock (3 masters) |",
        "| lockworker Lock (reused) |",
        "| lockworker aio.Lock (4 tasks, 1 process) |",
        "| lockworker aio.Lock (4 processes) |",
        "| lockworker Lock + aio.Lock (2 + 2 processes) |",
        "| redis-py asyncio Lock (4 tasks, 1 process) |",
        "| lockworker Semaphore(limit=2) |",
        "| Leader -> Leader |",
        "| aio.Leader -> aio.Leader |",
        "| Leader -> aio.Leader |",
        "| aio.Leader -> Leader |",
        "| SIGKILL | sync (`Worker`) |",
        "| SIGTERM | sync (`Worker`) |",
        "| SIGKILL | asyncio (`aio.Worker`) |",
        "| SIGTERM | asyncio (`aio.Worker`) |",
        "| lockworker `serve(group=)`, concurrency 1 | 300 |",
        "| lockworker `serve(group=)`, concurrency 4 | 300 |",
        "| lockworker | default |",
        "| lockworker | tuned |",
        "| lockworker serve(), primary + 2 backups, concurrency 1 |",
        "| lockworker serve(), primary + 2 backups, concurrency 64 |",
        "| lockworker aio serve(), primary + 2 backups, concurrency 16 |",
        "| lockworker serve(group=), 3 processes, concurrency 16 |",
        "| floor: a lease and a state key per job, plain redis-py, primary + 2 backups |",
        "| floor: a lease and a state key per job, plain redis-py, 3 processes share a group |",
        "| consumer group, primary reads, 2 backups XAUTOCLAIM |",
        "| consumer group, all 3 read |",
        "| 3-master cluster |",
        "| 1 server |",
    ):
        assert row in report
    # Each serve() row's bound says how often its busiest process waited per job (its
    # voluntary context switches), and so do the rows without the protocol beside them.
    bounds = report.split("**Where the bound lies**", 1)[1].split("\n", 1)[0]
    fanout = len(stream_bench.CONCURRENCY) + len(stream_bench.AIO_CONCURRENCY)
    assert len(re.findall(r"\(busiest process: \d+\.\d waits per job\)", bounds)) == fanout
    waits = report.split("**Waits per job**", 1)[1].split("\n", 1)[0]
    assert len(re.findall(r": \d+\.\d waits per job", waits)) == 3
    section = report.split("## 9. ", 1)[1]
    # Every framework has its jobs/s row; those of the [bench] extra that are installed
    # ran (arq, not in the extra, may say why not), with their killed-worker trials.
    peers = {
        "rq": ("RQ",), "celery": ("Celery (threads)", "Celery (solo)"),
        "dramatiq": ("Dramatiq",), "saq": ("saq",), "streaq": ("streaq",),
        "taskiq_redis": ("taskiq-redis",), "huey": ("huey",), "arq": ("arq",),
    }
    for module, tools in peers.items():
        for tool in tools:
            (row,) = [line for line in section.splitlines() if line.startswith(f"| {tool} | 300 |")]
            if module != "arq" and importlib.util.find_spec(module) is not None:
                assert "not available" not in row, row
    for tool, setting in peer_bench.SETTINGS:
        assert f"| {tool} | {setting} |" in section
    # A trial that broke says so in its row; no job of a jobs/s row ran twice (nothing
    # failed there).
    assert "| error: " not in section
    assert "**no**" not in section.split("### Beside", 1)[1].split("**A killed", 1)[0]
    # Mutual exclusion is a correctness check, not a speed figure: it must hold.
    assert "MUTUAL EXCLUSION BROKEN" not in done.stdout
    assert "| 3-master cluster |" in report and "\nError:" not in report
    for line in (
        "uncontended Lock acquire+release:",
        "uncontended aio.Lock acquire+release:",
        "aio.Worker job cycle (script protocol):",
        "Worker job cycle (script protocol):",
        "uncontended aio.Semaphore acquire+release:",
        "compute_once, cached key:",
        "contended handovers/s, asyncio:",
        "leadership handover, stop to election (median ms):",
        "stream failover, the backups' jobs/s after the primary went",
        "beside the worker frameworks, 3 worker processes: jobs/s",
        "beside the worker frameworks, lockworker in a group ahead of every framework's",
        "stream: `serve()` primary + 2 backups >= 0.8x the primary-only consumer group",
        "stream: a DONE record's server memory <=",
        "stream, 3 streams through shared groups (jobs/s):",
        "views with 10,000 finished jobs, 1,000 held, 10 given up: each < 500 ms:",
    ):
        assert line in done.stdout
    if importlib.util.find_spec("redis_lock") is not None:  # the handover target's peer
        assert "; target no slower than python-redis-lock (" in done.stdout
    stream = report.split("## 5. ", 1)[1].split("## 6. ", 1)[0]
    # The stream rows ran (or say why not: group= not there yet), every job exactly once
    # where no process was killed, and every job at least once where one was.
    assert "error: " not in stream
    assert "**no**" not in stream
    for chart in ("benchmarks-handovers.png", "benchmarks-takeover.png", "benchmarks-stream.png"):
        if f"]({chart})" in report:
            assert (tmp_path / chart).stat().st_size > 0


VIEWS = (
    "`lockworker status`",
    "`lockworker status --namespace orders`",
    "`lockworker status --state gave_up`",
    "`lockworker status --state held`",
    "`lockworker status --job done-7`",
    "`lockworker status --json`",
    "`lockworker reset --namespace orders --state gave_up --yes`",
    '`Worker.reset_all("gave_up")`',
    "dashboard read (`Collector.read`)",
)


@pytest.mark.timeout(150)
def test_only_views_puts_section_10_into_the_page_and_keeps_the_rest(tmp_path: Path) -> None:
    output = tmp_path / "benchmarks.md"
    before = (
        "# Benchmarks\n\n## Summary\n\n- uncontended Lock acquire+release: kept\n"
        "- views with 5 finished jobs: an older run's line, replaced\n\n"
        "## 9. Failover of a stream, beside the worker frameworks\n\nkept\n"
    )
    output.write_text(before, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--only", "views",
         "--views-jobs", "2000", "--output", str(output)],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = output.read_text(encoding="utf-8")
    assert "- uncontended Lock acquire+release: kept" in report
    assert "## 9. Failover of a stream, beside the worker frameworks\n\nkept\n" in report
    assert "an older run's line" not in report
    assert "- views with 2,000 finished jobs, 1,000 held, 10 given up: each < 500 ms:" in report
    section = report.split("## 10. Views with a million finished jobs", 1)[1]
    # Every view ran (a figure, not an error): the resets found and reset the 10
    # given-up jobs on each run (the benchmark checks it), and the fill's keys are there.
    for view in VIEWS:
        row = next(line for line in section.splitlines() if line.startswith(f"| {view} |"))
        assert "error:" not in row and "not run" not in row, row
    keys = re.search(r"\| keys \(`DBSIZE`\) \| ([\d,]+) \|", section)
    assert keys is not None and int(keys.group(1).replace(",", "")) > 2000 + 1000
