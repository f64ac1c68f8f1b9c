"""examples/supervisord/supervisord.conf under a real supervisord, against the suite's server.

The config is used as shipped, with only the timings shortened (lease 2 s, grace 3 s,
backup delay 0.4 s) so the test is quick: SIGKILL of the primary (supervisord restarts
it) and ``supervisorctl stop`` of the primary both lose no job and run none twice, and
the graceful stop hands the job in hand over at once (woken by the release, not left
to the lease).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from helpers import wait_for

import lockworker
from lockworker.cli.demo_worker import records_key
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "examples" / "supervisord" / "supervisord.conf"
HOST = socket.gethostname()


class Supervised:
    """A supervisord running the example config in a temp dir."""

    def __init__(self, server: RedisServer, tmp: Path) -> None:
        self.tmp = tmp
        self.namespace = f"sv-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        text = CONFIG.read_text()
        for old, new in (
            ("--namespace demo ", f"--namespace {self.namespace} "),
            ("--stream demo-jobs ", f"--stream {self.stream} "),
            ("--lock-timeout 5 ", "--lock-timeout 2 "),
            ("--grace 10 ", "--grace 3 "),
            ("--backup-delay 0.5", "--backup-delay 0.4"),
            ("stopwaitsecs=15", "stopwaitsecs=6"),
        ):
            assert old in text, old
            text = text.replace(old, new)
        self.conf = tmp / "supervisord.conf"
        self.conf.write_text(text)
        bindir = str(Path(sys.executable).parent)
        self.env = {
            **os.environ,
            "LOCKWORKER_REDIS_URL": server.url,
            "LOCKWORKER_DIR": str(tmp),
            "PATH": bindir + os.pathsep + os.environ.get("PATH", ""),
        }
        self.client = server.client(decode_responses=True)
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "supervisor.supervisord", "-c", str(self.conf)],
            env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )

    def owner(self, program: str) -> str:
        return f"{HOST}-{program}"

    def ctl(self, *args: str) -> str:
        out = subprocess.run(
            [sys.executable, "-m", "supervisor.supervisorctl", "-c", str(self.conf), *args],
            env=self.env, capture_output=True, text=True, timeout=30, check=False,
        )
        return out.stdout

    def pid(self, program: str) -> int:
        out = self.ctl("pid", f"lockworker:{program}").strip()
        return int(out) if out.isdigit() else 0  # not running: "0" or an error line

    def registered(self, program: str) -> bool:
        readers = stream_keys(self.stream).extra("readers")
        return self.client.zscore(readers, self.owner(program)) is not None

    def records(self) -> list[dict[str, Any]]:
        raw = self.client.lrange(records_key(self.namespace), 0, -1)
        return [json.loads(r) for r in raw]

    def holder(self, job_id: str) -> str | None:
        return inspect(self.client, JobKeys.of(self.namespace, job_id)).holder

    def done(self, job_ids: list[str]) -> bool:
        return all(
            inspect(self.client, JobKeys.of(self.namespace, j)).status is JobStatus.DONE
            for j in job_ids
        )

    def log_events(self, program: str) -> list[dict[str, Any]]:
        lines = (self.tmp / f"{program}.log").read_text().splitlines()
        events = []
        for line in lines:
            if line.startswith("{"):
                events.append(json.loads(line))
        return events

    def believes_a_primary_serves(self, program: str) -> bool:
        """The backup's last word on its namespace's primaries was not "gone"."""
        said = [e["event"] for e in self.log_events(program)
                if e["event"] in ("presence.primary_gone", "presence.primary_serving")]
        return not said or said[-1] == "presence.primary_serving"

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # supervisord stops its programs first
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.client.close()


@pytest.fixture
def supervised(redis_server: RedisServer, tmp_path: Path) -> Iterator[Supervised]:
    s = Supervised(redis_server, tmp_path)
    yield s
    s.close()


def stamp(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["timestamp"]).replace("Z", "+00:00")).timestamp()


def test_kill_and_stop_of_the_primary_under_supervisord(supervised: Supervised) -> None:
    s = supervised
    programs = ("primary", "backup-1", "backup-2")
    wait_for(lambda: all(s.registered(p) for p in programs), timeout=45)

    # A live primary does the jobs.
    first = [f"a-{i}" for i in range(6)]
    for job_id in first:
        lockworker.submit(s.client, s.stream, job_id, {"ms": 50})
    wait_for(lambda: s.done(first), timeout=20)
    assert {r["owner"] for r in s.records()} == {s.owner("primary")}

    # SIGKILL the primary in the middle of a job: supervisord restarts it, and the job
    # is finished once, by whoever takes it over when the dead lease ends.
    lockworker.submit(s.client, s.stream, "killed", {"ms": 50, "first_run_ms": 60_000})
    wait_for(lambda: s.holder("killed") == s.owner("primary"), timeout=20)
    old_pid = s.pid("primary")
    os.kill(old_pid, signal.SIGKILL)
    second = [f"b-{i}" for i in range(6)]
    for job_id in second:
        lockworker.submit(s.client, s.stream, job_id, {"ms": 50})
    wait_for(lambda: s.done(["killed", *second]), timeout=30)
    wait_for(lambda: 0 < s.pid("primary") != old_pid, timeout=30)  # restarted
    wait_for(lambda: s.registered("primary"), timeout=30)
    # Backups that saw the primary gone (its registration ran out) compete at once until
    # they see it serve again: wait until neither believes it gone any more.
    wait_for(lambda: all(s.believes_a_primary_serves(b) for b in ("backup-1", "backup-2")),
             timeout=30)

    # supervisorctl stop: the primary hands the job in hand over; a backup has it
    # at once (its release wakes the backups, which wait backup_delay).
    lockworker.submit(s.client, s.stream, "handed", {"ms": 1500})
    wait_for(lambda: s.holder("handed") == s.owner("primary"), timeout=20)
    assert "stopped" in s.ctl("stop", "lockworker:primary")
    wait_for(lambda: s.done(["handed"]), timeout=20)
    third = [f"c-{i}" for i in range(4)]
    for job_id in third:
        lockworker.submit(s.client, s.stream, job_id, {"ms": 50})
    wait_for(lambda: s.done(third), timeout=20)

    stopping = [e for e in s.log_events("primary") if e["event"] == "run.stopping"]
    stopped = [e for e in s.log_events("primary") if e["event"] == "run.stopped"]
    assert len(stopping) == 1 and len(stopped) == 1  # exited cleanly, after the SIGTERM
    acquired = [
        e for p in ("backup-1", "backup-2") for e in s.log_events(p)
        if e["event"] == "job.acquired" and e.get("job_id") == "handed"
    ]
    assert len(acquired) == 1
    handover = stamp(acquired[0]) - stamp(stopping[0])
    # Woken by the release, the backup waits only its 0.4 s backup_delay; one that was
    # not woken would look again only as the 2 s lease ran out.
    assert 0 <= handover < 1.6, handover
    assert "STOPPED" in s.ctl("status", "lockworker:primary")  # stopped, not crashed

    # Every job done, exactly once.
    jobs = [*first, "killed", *second, "handed", *third]
    counts = Counter(r["job"] for r in s.records())
    assert {j: counts[j] for j in jobs} == dict.fromkeys(jobs, 1)
    assert s.done(jobs)
