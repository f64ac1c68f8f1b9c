"""``lockworker status --job`` / ``--state`` and ``reset --state``: why a job gave up,
what is dead, and re-driving it, against the suite's own server."""

from __future__ import annotations

import io
import json
import threading

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker.cli.main import main
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer


class Invoice(lockworker.Worker):
    def on_acquired(self, job: lockworker.Job) -> None:
        if job.id.startswith("invoice-4"):
            raise ValueError(f"{job.id}: customer <x> has no VAT number")


@pytest.fixture
def jobs(redis_server: RedisServer, namespace: str) -> redis.Redis:
    """invoice-43 and invoice-44 gave up (two attempts each), invoice-1 is done."""
    client = redis_server.client(decode_responses=True)
    with Invoice(
        client, namespace=namespace, owner="host-a", max_attempts=2, retry_delay=0.0,
        lock_timeout=0.4, handle_signals=False,
    ) as worker:
        for job in ("invoice-43", "invoice-44", "invoice-1"):
            worker.process(job)
    return client


def test_status_job_shows_each_attempt_and_its_error(
    jobs: redis.Redis, redis_server: RedisServer, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = redis_server.url
    assert main(["status", "--job", "invoice-43", "--namespace", namespace, "--redis", url]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[-2:] == ["LAST", "ERROR"]
    assert [line.split()[2] for line in lines[1:2]] == ["invoice-43"]
    assert "ValueError: invoice-43: customer <x> has no VAT number" in lines[1]
    attempts = lines[lines.index(next(x for x in lines if x.startswith("ATTEMPT"))) :]
    assert [line.split()[0] for line in attempts[1:]] == ["1", "2"]
    assert [line.split()[2] for line in attempts[1:]] == ["host-a", "host-a"]
    assert ["failed" in attempts[1], "gave_up" in attempts[2]] == [True, True]

    args = ["status", "--job", "invoice-43", "--json", "--redis", url]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    # Without --namespace, every namespace's invoice-43 (other tests of this server's
    # session may have one): ours is among them.
    (row,) = [r for r in doc["jobs"] if r["namespace"] == namespace]
    assert (row["id"], row["state"], doc["leaders"], doc["workers"]) == (
        "invoice-43", "gave_up", [], []
    )
    assert [(h["attempt"], h["ending"], h["error_type"], h["owner"]) for h in row["history"]] == [
        (1, "failed", "ValueError", "host-a"), (2, "gave_up", "ValueError", "host-a")
    ]
    assert row["history"][1]["error"] == "invoice-43: customer <x> has no VAT number"
    assert "on_acquired" in row["history"][1]["traceback"]


def test_status_state_lists_the_dead_jobs_with_their_last_error(
    jobs: redis.Redis, redis_server: RedisServer, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = redis_server.url
    assert main(["status", "--state", "gave_up", "--namespace", namespace, "--json",
                 "--redis", url]) == 0
    rows = json.loads(capsys.readouterr().out)["jobs"]
    assert [(r["id"], r["last_error"]) for r in rows] == [
        ("invoice-43", "ValueError: invoice-43: customer <x> has no VAT number"),
        ("invoice-44", "ValueError: invoice-44: customer <x> has no VAT number"),
    ]
    assert all("history" not in r for r in rows)
    assert main(["status", "--state", "done", "--namespace", namespace, "--redis", url]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[:2] == ["jobs: 1 (done 1)", ""]
    assert [line.split()[2] for line in table[3:]] == ["invoice-1"]
    assert table[3].split()[-1] == "-"


def test_reset_state_redrives_every_dead_job_after_asking(
    jobs: redis.Redis, redis_server: RedisServer, namespace: str,
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    url = redis_server.url
    command = ["reset", "--state", "gave_up", "--namespace", namespace, "--redis", url]
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    assert main(command) == 1
    out = capsys.readouterr().out
    assert "2 gave_up job(s)" in out and "not reset" in out
    assert inspect(jobs, JobKeys.of(namespace, "invoice-43")).status is JobStatus.GAVE_UP

    monkeypatch.setattr("sys.stdin", io.StringIO("y\n"))
    monkeypatch.setattr("sys.stdin.isatty", lambda: True, raising=False)
    assert main(command) == 0
    assert "2 job(s) in namespace" in capsys.readouterr().out
    for job in ("invoice-43", "invoice-44"):
        seen = inspect(jobs, JobKeys.of(namespace, job), history=True)
        assert (seen.status, seen.attempt, len(seen.history)) == (JobStatus.PENDING, 0, 2)
    assert inspect(jobs, JobKeys.of(namespace, "invoice-1")).status is JobStatus.DONE
    assert main([*command, "--yes"]) == 0
    assert "nothing to reset" in capsys.readouterr().out


def test_reset_state_held_refuses_as_a_single_reset_does(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    client = redis_server.client(decode_responses=True)
    release = threading.Event()
    holding = lockworker.Worker(
        client, namespace=namespace, lock_timeout=3.0, handle_signals=False,
        on_acquired=lambda job: release.wait(30),
    )
    thread, _box = in_thread(lambda: holding.process("busy"))
    try:
        wait_for(lambda: inspect(client, JobKeys.of(namespace, "busy")).holder, timeout=10)
        command = ["reset", "--state", "held", "--namespace", namespace, "--yes",
                   "--redis", redis_server.url]
        assert main(command) == 1
        assert "pass --force" in capsys.readouterr().err
        assert inspect(client, JobKeys.of(namespace, "busy")).holder is not None
    finally:
        release.set()
        thread.join(10)
        holding.close()
    assert main(["reset", "--namespace", namespace, "--yes", "--redis",
                 redis_server.url]) == 2
    assert "JOB_ID, or --state" in capsys.readouterr().err
