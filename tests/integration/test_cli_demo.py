"""``lockworker demo`` end to end: a short run succeeds and leaves no key behind,
Ctrl-C cleans up; and ``scripts/demo.sh`` installs only once."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
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


EVENT = re.compile(r"^ *([0-9.]+)s  (\S.*)$", re.M)
PROGRESS = re.compile(r"submitted (\d+)/(\d+)  done (\d+)  in hand (\d+)")
PROCESS_LINE = re.compile(r"^ +(primary|backup-1|backup-2) +\w+ +done +(\d+)  (.*)$", re.M)


def figure(pattern: str, text: str) -> re.Match[str]:
    found = re.search(pattern, text, re.M)
    assert found, (pattern, text)
    return found


def check_believable(out: str, *, jobs: int, duration: float, lock_timeout: float,
                     backup_delay: float, wall: float) -> None:
    """Every figure the demo printed, against what the run could have produced: the
    demo kills the primary once, holding job number jobs // 3, after the jobs before it
    were done."""
    kill_index = jobs // 3
    killed_job = f"job-{kill_index:03d}"
    elapsed = float(figure(r"^  elapsed: ([0-9.]+)s$", out).group(1))
    assert duration <= elapsed <= wall

    done = figure(r"^  done by: primary (\d+), backup-1 (\d+), backup-2 (\d+)$", out)
    counts = [int(n) for n in done.groups()]
    assert sum(counts) == jobs  # every job done once: one completed run each
    assert counts[0] <= kill_index  # the primary died holding job kill_index

    handovers = figure(r"^  handovers \(attempts after the first\): (\d+)(.*)$", out)
    # at least the killed job's, at most one per job killed mid-run (one)
    assert 1 <= int(handovers.group(1)) <= 1, handovers.group(0)
    assert handovers.group(2) == f" ({killed_job} at attempt 2)"

    takeover = figure(r"^  takeover after SIGKILL: ([0-9.]+)s by (backup-[12]) ", out)
    seconds = float(takeover.group(1))
    # not before the dead lease ran out (renewed every third of it, so at least two
    # thirds of it were left, more than the delay; less the few ms the demo takes to
    # reap the killed primary); within the lease and the delay (paid while the dead
    # primary's registration runs), plus generous slack for a loaded machine
    assert backup_delay - 0.05 <= seconds <= lock_timeout + backup_delay + 5.0
    assert seconds <= elapsed

    events = [(float(at), what) for at, what in EVENT.findall(out)]
    times = [at for at, _ in events]
    assert times == sorted(times) and all(0 <= at <= elapsed + 0.05 for at in times)
    kill_at = next(at for at, what in events if what.startswith("SIGKILL primary"))
    took = next(at for at, what in events if f"took over {killed_job} (attempt 2)" in what)
    assert abs((took - kill_at) - seconds) <= 0.011  # the same figure, rounded
    for killed in re.findall(r"killed at ([0-9.]+)s", out):
        assert float(killed) == kill_at

    progress = [tuple(int(n) for n in m) for m in PROGRESS.findall(out)]
    assert progress and progress[-1] == (jobs, jobs, jobs, 0)
    for submitted, total, done_now, in_hand in progress:
        assert total == jobs and done_now + in_hand <= submitted <= jobs
    for _name, n, _doing in PROCESS_LINE.findall(out):
        assert 0 <= int(n) <= jobs


def test_a_short_demo_on_a_given_server_does_every_job_once_and_leaves_no_key(
    redis_server: RedisServer,
) -> None:
    client = redis_server.client(decode_responses=True)
    before = set(client.scan_iter(count=1000))
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-m", "lockworker", "demo", "--jobs", "9", "--duration", "1.5",
         "--redis", redis_server.url, "--seed", "1", "--lock-timeout", "1",
         "--backup-delay", "0.3"],
        capture_output=True, text=True, timeout=90, check=False,
    )
    wall = time.monotonic() - started
    assert out.returncode == 0, out.stdout + out.stderr
    assert "jobs done exactly once: 9/9   lost: 0   done twice: 0" in out.stdout
    assert "SIGKILL primary while it holds job-003" in out.stdout
    check_believable(out.stdout, jobs=9, duration=1.5, lock_timeout=1.0, backup_delay=0.3,
                     wall=wall)
    found = re.search(r"namespace (demo-[0-9a-f]+)", out.stdout)
    assert found, out.stdout
    after = set(client.scan_iter(count=1000))
    # keys of earlier tests may have expired meanwhile; none may have been added
    assert after - before == set()
    assert not [key for key in after if found.group(1) in key]
    client.close()


def test_the_demo_reads_only_its_own_redis_option() -> None:
    """``$LOCKWORKER_REDIS_URL`` (here: nothing listens there) does not move the demo
    off its embedded server."""
    from lockworker.testing.server import free_port

    out = subprocess.run(
        [sys.executable, "-m", "lockworker", "demo", "--jobs", "3", "--duration", "0.3"],
        capture_output=True, text=True, timeout=90, check=False,
        env={**os.environ, "LOCKWORKER_REDIS_URL": f"redis://127.0.0.1:{free_port()}/0"},
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "jobs done exactly once: 3/3" in out.stdout


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


SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def test_demo_sh_says_what_it_installs_and_installs_only_once(tmp_path: Path) -> None:
    """``scripts/_venv.sh`` against a stand-in ``.venv/bin/python`` that logs its calls."""
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "_venv.sh").write_text((SCRIPTS / "_venv.sh").read_text())
    (tmp_path / "scripts" / "probe.sh").write_text(
        'source "$(dirname "$0")/_venv.sh" server\necho ready\n'
    )
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    python = tmp_path / ".venv" / "bin" / "python"
    python.parent.mkdir(parents=True)
    python.write_text(f'#!/bin/sh\necho "$*" >> {tmp_path / "calls.log"}\n')
    python.chmod(0o755)

    def probe() -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(tmp_path / "scripts" / "probe.sh")], capture_output=True, text=True,
            timeout=60, check=False,
        )

    first = probe()
    assert first.returncode == 0, first.stderr
    assert first.stdout == "ready\n"
    assert len(first.stderr.strip().splitlines()) == 1  # one line: what it installs
    assert "installing lockworker[server] into .venv" in first.stderr
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert any(call.startswith("-m pip install") for call in calls)

    second = probe()
    assert second.returncode == 0, second.stderr
    assert (second.stdout, second.stderr) == ("ready\n", "")
    again = (tmp_path / "calls.log").read_text().splitlines()[len(calls):]
    assert not any("pip" in call for call in again)  # only the check that it imports
