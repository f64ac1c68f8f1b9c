"""``lockworker demo`` end to end: a short run succeeds, and Ctrl-C cleans up."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import wait_for

from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes


def children(pid: int) -> set[int]:
    """Pids whose parent is ``pid`` (Linux /proc)."""
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_short_demo_does_every_job_exactly_once(redis_server: RedisServer) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "lockworker", "demo", "--jobs", "9", "--duration", "1.5",
         "--redis", redis_server.url, "--seed", "1"],
        capture_output=True, text=True, timeout=90, check=False,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "jobs done exactly once: 9/9   lost: 0   done twice: 0" in out.stdout
    assert "SIGKILL primary while it holds job-003" in out.stdout
    assert "took over job-003 (attempt 2)" in out.stdout
    assert "handovers (attempts after the first): 1" in out.stdout


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_ctrl_c_stops_everything_the_demo_started(tmp_path: Path) -> None:
    log = tmp_path / "demo.out"
    with log.open("w") as out:
        demo = subprocess.Popen(
            [sys.executable, "-m", "lockworker", "demo", "--jobs", "40", "--duration", "20"],
            stdout=out, stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    try:
        wait_for(lambda: "reading the stream" in log.read_text(), timeout=60)
        started = children(demo.pid)
        assert len(started) == 4  # the embedded server and three workers
        demo.send_signal(signal.SIGINT)
        assert demo.wait(timeout=30) == 130
        assert "interrupted" in log.read_text()
        wait_for(lambda: not any(alive(pid) for pid in started), timeout=10)
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
