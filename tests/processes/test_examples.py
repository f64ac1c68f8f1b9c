"""The examples run, against the suite's own server, and say what they promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run(script: str, server: RedisServer, *args: str) -> str:
    env = {**os.environ, "LOCKWORKER_REDIS_URL": server.url}
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / script), *args],
        env=env, capture_output=True, text=True, timeout=120, check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_cluster_example_resolves_every_job_the_same_way_everywhere(
    redis_server: RedisServer,
) -> None:
    out = run("cluster.py", redis_server, "--processes", "3", "--jobs", "4")
    summary = out.split("Summary", 1)[1].strip().splitlines()
    assert len(summary) == 4
    for line in summary:
        assert ": done after" in line or ": gave_up after 5 attempt(s)" in line
    # every process reports one outcome per job, and they agree with the summary
    for job in range(1, 5):
        outcomes = {line.rsplit("-> ", 1)[1] for line in out.splitlines()
                    if f"job-{job} -> " in line}
        assert outcomes <= {"done", "done_elsewhere"} or outcomes == {"gave_up"}


def test_fencing_example_refuses_the_stale_holders_write(redis_server: RedisServer) -> None:
    out = run("fencing.py", redis_server)
    assert "backup: took over attempt 2 with a larger token, store accepted write: True" in out
    assert "holder: attempt 1, lost=True, store accepted write: False" in out
    assert "store holds: written by the backup" in out


def test_asyncio_example_does_each_job_once_and_hands_over_a_cancelled_one_at_once(
    redis_server: RedisServer,
) -> None:
    out = run("asyncio_mixed.py", redis_server)
    done = [line for line in out.splitlines() if ": done once, by " in line]
    assert len(done) == 6
    tasks_line = next(line for line in out.splitlines() if line.startswith("outcomes in"))
    assert tasks_line.split(": ")[1].split(" done,")[0].strip() == str(
        6 - sum("by thread" in line for line in done)
    )
    nightly = next(line for line in out.splitlines() if line.startswith("nightly:"))
    assert "done by the thread" in nightly
    assert float(nightly.split("thread ")[1].split(" s later")[0]) < 15.0  # not the 30 s lease
