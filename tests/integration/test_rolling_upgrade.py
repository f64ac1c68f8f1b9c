"""A rolling upgrade from the previous release: its processes, beside this release's,
read the state this release writes (a failed attempt's due time, a DONE that folded in
its attempt) correctly.

The previous release (0.2.0) is built from its commit, found by its tag ``v0.2.0`` or
else by its release commit's message, into a wheel, installed alone in a virtual
environment of its own (its dependencies from this one, as in test_wheel_install.py),
and run as separate processes on the suite's server. Release 0.2.0 parses state values
with a strict grammar: the due time sits where it reads a run (a failure's is empty),
so it accepts the value and ignores the field. It does not honour the schedule (it
takes the next attempt when it sees the job free, as 0.2.0 always did), which
docs/deployment.md says; it never misreads a job or reports it foreign.

Release 0.3.0 (built the same way, from its tag or release commit) writes no entry in
the namespace's index: the jobs it resolved are listed once ``lockworker index`` has
run, and a job this release moves later is indexed by that step, without it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest
import redis
from helpers import LEASE, RETENTION, grant, held, sh, who

import lockworker
from lockworker.cli.main import main as cli_main
from lockworker.model.codec import decode_state
from lockworker.model.index import Kind
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant, JobStatus, Outcome, Settle, Snapshot
from lockworker.protocol import ScriptProtocol
from lockworker.protocol import index as reading
from lockworker.testing import RedisServer
from tests.faults.release import release_commit as find_release

pytestmark = pytest.mark.processes

ROOT = Path(__file__).resolve().parents[2]
PREVIOUS = "0.2.0"
LAST = "0.3.0"
LATER_MS = 600_000

OLD_SIDE = textwrap.dedent("""
    import json, sys
    import redis, lockworker
    from lockworker.model.codec import Holder
    from lockworker.model.keys import JobKeys
    from lockworker.protocol import ScriptProtocol

    url, namespace, action, job_id, max_attempts = sys.argv[1:6]
    client = redis.Redis.from_url(url)
    ran = []
    worker = lockworker.Worker(
        client, namespace=namespace, owner="old", handle_signals=False,
        max_attempts=int(max_attempts), on_acquired=lambda job: ran.append(job.attempt),
    )
    out = {"version": lockworker.__version__, "file": lockworker.__file__}
    if action == "inspect":
        seen = worker.inspect(job_id)
        out.update(status=seen.status.value, attempt=seen.attempt, token=seen.token,
                   owner=seen.owner, holder=seen.holder)
    elif action == "process":
        out.update(outcome=worker.process(job_id).value, ran=ran)
    elif action == "fail":
        protocol, keys = ScriptProtocol(client), JobKeys.of(namespace, job_id)
        who = Holder("old", "0123456789abcdef")
        grant = protocol.acquire(keys, who, 5000, int(max_attempts), 60000)
        settled = protocol.fail(keys, who.value(grant.token, grant.attempt),
                                int(max_attempts), 60000)
        out.update(settled=settled.value, attempt=grant.attempt)
    elif action == "grant":
        protocol, keys = ScriptProtocol(client), JobKeys.of(namespace, job_id)
        grant = protocol.acquire(keys, Holder("old", "0123456789abcdef"), 60000,
                                 int(max_attempts), 60000)
        out.update(attempt=grant.attempt, token=grant.token)
    worker.close()
    print(json.dumps(out))
""")



def release_commit(version: str = PREVIOUS) -> str:
    """A release's commit: its tag, else the commit whose message starts
    ``Release <version>``; skipped outside a git checkout that has either."""
    found = find_release(version)
    if found is None:
        pytest.skip(f"no tag v{version} nor a 'Release {version}' commit in a git checkout")
    return found


@pytest.fixture(scope="module")
def old_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose ``lockworker`` is the previous release, built from its commit."""
    return built(PREVIOUS, tmp_path_factory)


@pytest.fixture(scope="module")
def last_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose ``lockworker`` is release 0.3.0, the last without the index."""
    return built(LAST, tmp_path_factory)


def built(version: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Python whose ``lockworker`` is ``version``, built from its commit."""
    commit = release_commit(version)
    src = tmp_path_factory.mktemp("old-src")
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True,
        check=True,
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    dist = tmp_path_factory.mktemp("old-dist")
    sh(sys.executable, "-m", "build", "--wheel", "--outdir", dist, src, cwd=src)
    (wheel,) = dist.glob(f"lockworker-{version}-*.whl")
    venv = tmp_path_factory.mktemp("old-venv")
    sh(sys.executable, "-m", "venv", "--without-pip", venv, cwd=venv)
    python = venv / "bin" / "python"
    sh(sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index",
       "--disable-pip-version-check", "-q", wheel, cwd=venv)
    site = sh(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])",
              cwd=venv).stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def old(python: Path, server: RedisServer, namespace: str, action: str, job: str, *,
        max_attempts: int = 3, version: str = PREVIOUS) -> dict[str, Any]:
    out = sh(python, "-c", OLD_SIDE, server.url, namespace, action, job, str(max_attempts),
             cwd=python.parent)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["version"] == version and Path(result["file"]).is_relative_to(
        python.parents[1]
    ), result
    return result


def fail_later(client: redis.Redis, keys: JobKeys, max_attempts: int = 3) -> Grant:
    """This release fails attempt 1 and sets the next attempt 10 minutes ahead."""
    protocol = ScriptProtocol(client)
    g = grant(protocol, keys, "new", max_attempts=max_attempts)
    assert protocol.fail(keys, held(g, "new"), max_attempts, RETENTION,
                         delay_ms=LATER_MS) is Settle.RELEASED
    state = decode_state(client.get(keys.state))
    assert state is not None and state.due_ms is not None
    return g


def test_the_previous_release_reads_a_due_time_and_ignores_it(
    old_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    keys = JobKeys.of(namespace, "later")
    g = fail_later(redis_client, keys)
    seen = old(old_python, redis_server, namespace, "inspect", "later")
    assert (seen["status"], seen["attempt"], seen["token"], seen["owner"], seen["holder"]) == (
        "pending", 1, g.token, "new", None
    )
    # 0.2.0 does not honour the schedule: it takes attempt 2 now, as it always did ...
    ran = old(old_python, redis_server, namespace, "process", "later")
    assert (ran["outcome"], ran["ran"]) == ("done", [2])
    # ... and this release reads what it wrote.
    protocol = ScriptProtocol(redis_client)
    done = protocol.acquire(keys, who("new"), LEASE, 3, RETENTION)
    assert isinstance(done, Snapshot) and done.status is JobStatus.DONE
    assert (done.attempt, done.token, done.owner) == (2, g.token + 1, "old")


def test_the_previous_release_gives_up_a_job_with_a_due_time_as_it_did(
    old_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    """A process of 0.2.0 with fewer attempts finds them spent: it gives the job up,
    keeping the field it ignores; this release reads GAVE_UP."""
    keys = JobKeys.of(namespace, "spent")
    fail_later(redis_client, keys, max_attempts=3)
    ran = old(old_python, redis_server, namespace, "process", "spent", max_attempts=1)
    assert (ran["outcome"], ran["ran"]) == ("gave_up", [])
    seen = ScriptProtocol(redis_client).inspect(keys)
    assert (seen.status, seen.attempt, seen.due_ms) == (JobStatus.GAVE_UP, 1, None)


def test_a_failure_written_by_the_previous_release_is_due_at_once_here(
    old_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    failed = old(old_python, redis_server, namespace, "fail", "old-failure")
    assert (failed["settled"], failed["attempt"]) == ("released", 1)
    keys = JobKeys.of(namespace, "old-failure")
    assert ScriptProtocol(redis_client).inspect(keys).due_ms is None
    with lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, on_acquired=lambda job: None
    ) as worker:
        assert worker.process("old-failure") is Outcome.DONE
    assert worker.inspect("old-failure").attempt == 2


def test_the_previous_release_serves_a_job_with_a_history_and_writes_none(
    old_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    """0.2.0 never reads the history key: it takes and finishes a job that has one, and
    the record this release left open (the attempt whose lease 0.2.0 saw run out, or
    the one before its grant) reads as lost here, never as running."""
    keys = JobKeys.of(namespace, "with-history")
    protocol = ScriptProtocol(redis_client)
    given = grant(protocol, keys, "new")
    assert protocol.release(keys, held(given, "new"), RETENTION) is Settle.RELEASED
    g = grant(protocol, keys, "new", lease_ms=50)  # a known job's grant: its record written
    redis_client.pexpire(keys.lock, 1)
    ran = old(old_python, redis_server, namespace, "process", "with-history")
    assert (ran["outcome"], ran["ran"]) == ("done", [2])
    seen = protocol.inspect(keys, history=True)
    assert (seen.status, seen.attempt, seen.owner) == (JobStatus.DONE, 2, "old")
    assert [(r.attempt, r.token, r.owner, r.ending) for r in seen.history] == [
        (1, given.token, "new", "released"), (1, g.token, "new", "lost")
    ]


def test_the_last_release_takes_over_a_first_attempt_that_wrote_no_record(
    last_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    """This release's grant of a new job writes no history record (its lease and state
    imply it). A 0.3.0 process reads the job held by its lease, and once the lease ran
    out takes the next attempt, fenced above it; the stale holder's DONE is refused.
    0.3.0 does not know the implied record: its history shows its own attempt from 2
    on (docs/deployment.md says so)."""
    keys = JobKeys.of(namespace, "implied")
    protocol = ScriptProtocol(redis_client)
    g = grant(protocol, keys, "new", lease_ms=60_000)
    assert redis_client.exists(keys.history) == 0
    seen = old(last_python, redis_server, namespace, "inspect", "implied", version=LAST)
    assert (seen["status"], seen["attempt"], seen["token"], seen["holder"]) == (
        "pending", 1, g.token, "new"
    )
    redis_client.pexpire(keys.lock, 1)
    ran = old(last_python, redis_server, namespace, "process", "implied", version=LAST)
    assert (ran["outcome"], ran["ran"]) == ("done", [2])
    assert protocol.complete(keys, held(g, "new"), RETENTION) is Settle.NOT_HOLDER
    done = protocol.inspect(keys, history=True)
    assert (done.status, done.attempt, done.token, done.owner) == (
        JobStatus.DONE, 2, g.token + 1, "old"
    )
    assert [(r.attempt, r.token, r.owner, r.ending) for r in done.history] == [
        (2, g.token + 1, "old", "done")
    ]


def test_this_release_takes_over_a_first_attempt_the_last_release_recorded(
    last_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    """A job 0.3.0 granted wrote its record at the grant (the form this release reads
    too): this release reads it running, and closes it as lost when it takes the next
    attempt once the lease ran out."""
    keys = JobKeys.of(namespace, "recorded")
    granted = old(last_python, redis_server, namespace, "grant", "recorded", version=LAST)
    protocol = ScriptProtocol(redis_client)
    (running,) = protocol.inspect(keys, history=True).history
    assert (running.attempt, running.token, running.owner, running.ending) == (
        1, granted["token"], "old", None
    )
    assert redis_client.delete(keys.lock) == 1  # its lease ran out
    g = grant(protocol, keys, "new")
    assert (g.attempt, g.token) == (2, granted["token"] + 1)
    assert protocol.complete(keys, held(g, "new"), RETENTION) is Settle.DONE
    records = protocol.inspect(keys, history=True).history
    assert [(r.attempt, r.owner, r.ending) for r in records] == [
        (1, "old", "lost"), (2, "new", "done")
    ]


def test_the_previous_release_reads_a_folded_done_as_done(
    old_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
) -> None:
    """A job this release finished at its first clean attempt keeps that attempt in its
    DONE state (after the run, where 0.2.0 reads a longer run): 0.2.0 reads it DONE,
    with its attempt, token and owner, and never runs it again."""
    keys = JobKeys.of(namespace, "folded")
    protocol = ScriptProtocol(redis_client)
    g = grant(protocol, keys, "new")
    assert protocol.complete(keys, held(g, "new"), RETENTION) is Settle.DONE
    state = decode_state(redis_client.get(keys.state))
    assert state is not None and state.took_ms is not None
    seen = old(old_python, redis_server, namespace, "inspect", "folded")
    assert (seen["status"], seen["attempt"], seen["token"], seen["owner"], seen["holder"]) == (
        "done", 1, g.token, "new", None
    )
    ran = old(old_python, redis_server, namespace, "process", "folded")
    assert (ran["outcome"], ran["ran"]) == ("done_elsewhere", [])


def test_jobs_the_last_release_resolved_are_listed_after_the_index_command(
    last_python: Path, redis_server: RedisServer, redis_client: redis.Redis, namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Jobs 0.3.0 gave up, failed and finished have no index entry; ``lockworker
    index`` lists each in its kind (the DONE one not at all). A job 0.3.0 left that
    this release moves later is indexed by that step, without the command."""
    def listed() -> dict[str, Kind]:
        return {e.job_id: kind for kind in Kind
                for e in reading.listed(redis_client, namespace, kind)}

    def by_last(action: str, job: str, max_attempts: int = 3) -> dict[str, Any]:
        return old(last_python, redis_server, namespace, action, job,
                   max_attempts=max_attempts, version=LAST)

    assert by_last("fail", "spent", max_attempts=1)["settled"] == "gave_up"
    assert by_last("fail", "failed")["settled"] == "released"
    assert by_last("fail", "later")["settled"] == "released"
    assert by_last("process", "done")["outcome"] == "done"
    assert listed() == {}
    # This release moves "later" before the command runs: its step writes its entry.
    protocol = ScriptProtocol(redis_client)
    g = grant(protocol, JobKeys.of(namespace, "later"), "new")
    assert listed() == {"later": Kind.HELD}

    assert cli_main(["index", "--namespace", namespace, "--redis", redis_server.url,
                     "--retention", str(60)]) == 0
    assert f"namespace {namespace}: marked indexed" in capsys.readouterr().out
    assert listed() == {"spent": Kind.GAVE_UP, "failed": Kind.PENDING, "later": Kind.HELD}
    # ... and the steps of this release move the entries the command wrote.
    assert protocol.complete(JobKeys.of(namespace, "later"), held(g, "new"),
                             RETENTION) is Settle.DONE
    with lockworker.Worker(redis_client, namespace=namespace, handle_signals=False,
                           on_acquired=lambda job: None) as worker:
        assert worker.process("failed") is Outcome.DONE
    assert listed() == {"spent": Kind.GAVE_UP}
