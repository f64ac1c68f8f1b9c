"""The lockworker command against the suite's own server: submit, status, reset, run.

In-process calls of ``main()`` where the command does its work and returns; real
subprocesses for ``run`` (signals, exit codes, stderr) and for bad input.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from helpers import in_thread, wait_for

import lockworker
from lockworker.cli.demo_worker import records_key
from lockworker.cli.kept import Kept
from lockworker.cli.main import main
from lockworker.cli.workers import worker_rows
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer

APP = textwrap.dedent(
    """
    import lockworker

    class Stubborn(lockworker.Worker):
        # Ignores job.stopping: a SIGTERM cannot end it, only the grace period.
        def on_acquired(self, job):
            self.client.set("stubborn:" + job.id, "started")
            self.clock.sleep(60)

    class Boss(lockworker.Leader):
        def on_acquired(self, term):
            while not term.wait(0.05):
                pass

    NOT_A_CLASS = 42

    class Plain:
        pass
    """
)


@pytest.fixture(scope="module")
def redis_server(own_server: RedisServer) -> RedisServer:
    """This module's own server (conftest ``own_server``): its commands list every
    registered namespace, which on the session's server grows with the suite."""
    return own_server


def lockworker_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "lockworker", *args]


@pytest.fixture
def app_dir(tmp_path: Path) -> Path:
    (tmp_path / "cli_app.py").write_text(APP)
    return tmp_path


@pytest.fixture
def procs() -> Iterator[list[subprocess.Popen[str]]]:
    started: list[subprocess.Popen[str]] = []
    yield started
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)


def spawn(procs: list[subprocess.Popen[str]], *args: str) -> subprocess.Popen[str]:
    proc = subprocess.Popen(
        lockworker_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        stdin=subprocess.DEVNULL,
    )
    procs.append(proc)
    return proc


# -- bad input: one line on stderr, non-zero exit ----------------------------------------


@pytest.mark.parametrize(
    ("args", "code", "fragment"),
    [
        (["run", "nope", "--namespace", "n"], 2, "expected MODULE:CLASS"),
        (["run", "no_such_module_xyz:Worker", "--namespace", "n"], 2, "cannot import module"),
        (["run", "cli_app:Missing", "--namespace", "n"], 2, "has no attribute"),
        (["run", "cli_app:NOT_A_CLASS", "--namespace", "n"], 2, "a int, not a subclass"),
        (["run", "cli_app:Plain", "--namespace", "n"], 2, "not a subclass of lockworker"),
        (["run", "lockworker:Worker", "--namespace", "n"], 2, "on_acquired is required"),
        (["run", "cli_app:Boss", "--namespace", "n", "--stream", "s"], 2, "only for Worker"),
        (["run", "cli_app:Stubborn"], 2, "--namespace"),
        (["run", "cli_app:Stubborn", "--namespace", "n", "--lock-timeout", "0"], 2, ">= 0.1"),
        (["run", "cli_app:Stubborn", "--namespace", "n", "--role", "boss"], 2, "invalid choice"),
        (["submit", "s", "j", "{not json"], 2, "not valid JSON"),
        (["frobnicate"], 2, "invalid choice"),
    ],
)
def test_bad_input_is_one_line_and_an_exit_code(
    redis_server: RedisServer, app_dir: Path, args: list[str], code: int, fragment: str
) -> None:
    if args[0] == "run":
        args = [*args, "--app-dir", str(app_dir)]
    out = subprocess.run(
        lockworker_cmd(*args, "--redis", redis_server.url) if args[0] != "frobnicate"
        else lockworker_cmd(*args),
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert out.returncode == code, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert fragment in lines[0]
    assert lines[0].startswith("lockworker")


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_unreachable_redis_is_one_line_before_anything_starts(
    app_dir: Path, scheme: str
) -> None:
    from lockworker.testing.server import free_port

    # nothing listens there (a cluster client's "no startup node reachable" too)
    url = f"{scheme}://127.0.0.1:{free_port()}" + ("/0" if scheme == "redis" else "")
    for args in (
        ["run", "cli_app:Stubborn", "--namespace", "n", "--app-dir", str(app_dir)],
        ["submit", "s", "j"],
        ["status"],
    ):
        out = subprocess.run(
            lockworker_cmd(*args), capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "LOCKWORKER_REDIS_URL": url},
        )
        assert out.returncode == 1, out.stderr
        assert out.stderr.strip().splitlines() == [
            f"lockworker {args[0]}: cannot reach Redis at {url}: "
            + out.stderr.split(f"{url}: ", 1)[1].strip()
        ]


# -- submit, status, reset -----------------------------------------------------------------


def server_micros(client: redis.Redis) -> int:
    """The server's clock in microseconds (where a new job's tokens start)."""
    seconds, micros = client.time()
    return int(seconds) * 1_000_000 + int(micros)


def test_submit_prints_the_entry_id_and_status_shows_jobs_and_leaders(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    assert main(["submit", stream, "j1", '{"n": 1}', "--redis", redis_server.url]) == 0
    said = capsys.readouterr().out.splitlines()
    assert main(["submit", stream, "j2", "--quiet", "--redis", redis_server.url]) == 0
    quiet = capsys.readouterr().out.strip()
    stored = client.xrange(stream_keys(stream).extra("entries"))
    entry = stored[0][0]
    assert stored == [(entry, {"job_id": "j1", "payload": '{"n":1}'}),
                      (quiet, {"job_id": "j2", "payload": "null"})]
    assert said == [
        f"submitted job 'j1' to stream '{stream}' on {redis_server.url}: entry {entry}, "
        'payload {"n":1}',
        "follow it: lockworker status --job j1 (listed once a worker of the stream has "
        "taken it)",
    ]

    started, first_token = time.monotonic(), server_micros(client)
    worker = lockworker.Worker(client, namespace=namespace, on_acquired=lambda job: None)
    assert worker.process("done-job") is lockworker.Outcome.DONE
    failing = lockworker.Worker(
        client, namespace=namespace, max_attempts=1, on_acquired=lambda job: 1 / 0
    )
    assert failing.process("bad-job") is lockworker.Outcome.GAVE_UP
    held = client.set(
        JobKeys.of(namespace, "by-hand").lock, "lw2|7|2|ab|somebody", px=60_000
    )
    assert held
    release = threading.Event()
    holding = lockworker.Worker(
        client, namespace=namespace, lock_timeout=3.0, owner="holder-1",
        on_acquired=lambda job: release.wait(30),
    )
    thread, _box = in_thread(lambda: holding.process("held-job"))
    try:
        wait_for(lambda: inspect(client, JobKeys.of(namespace, "held-job")).holder, timeout=10)
        last_token = server_micros(client)
        assert main(
            ["status", "--namespace", namespace, "--json", "--redis", redis_server.url]
        ) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(["status", "--namespace", namespace, "--redis", redis_server.url]) == 0
        table = capsys.readouterr().out.splitlines()
        # A DONE job is counted, not listed: --job reads it.
        assert main(["status", "--namespace", namespace, "--job", "done-job", "--json",
                     "--redis", redis_server.url]) == 0
        (done_row,) = json.loads(capsys.readouterr().out)["jobs"]
        elapsed = time.monotonic() - started
    finally:
        release.set()
        thread.join(10)
    rows = {r["id"]: r for r in doc["jobs"]}
    assert "done-job" not in rows
    rows["done-job"] = done_row
    assert rows["done-job"]["state"] == "done" and rows["done-job"]["attempt"] == 1
    assert rows["done-job"]["holder"] == worker.owner
    assert rows["bad-job"]["state"] == "gave_up" and rows["bad-job"]["attempt"] == 1
    assert rows["held-job"]["state"] == "held" and rows["held-job"]["holder"] == "holder-1"
    assert rows["held-job"]["attempt"] == 1
    assert "by-hand" not in rows  # no state key yet: only a lock (written by hand here)
    # every figure within what this test did: tokens from the server's clock while it
    # ran, one attempt each, ages within its run, a lease no longer than the lease
    for row in rows.values():
        assert first_token <= row["token"] <= last_token, row
        assert 0 <= row["age"] <= elapsed + 0.05, row
    assert rows["done-job"]["lease_left"] is None and rows["bad-job"]["lease_left"] is None
    assert 0 < rows["held-job"]["lease_left"] <= 3.0

    # The counts by state first (from the index: held, pending, gave_up), then the rows.
    assert table[:2] == ["jobs: 2 (held 1, gave_up 1)", ""]
    assert table[2].split()[:4] == ["KIND", "NAMESPACE", "ID", "STATE"]

    def listed(by_state: dict[str, int]) -> dict[str, int]:
        return {state: n for state, n in by_state.items() if state != "done"}

    counts = doc["counts"]
    assert listed(counts["jobs"]) == {"pending": 0, "held": 1, "gave_up": 1, "foreign": 0}
    assert counts["leaders"] == {"leading": 0, "vacant": 0, "foreign": 0}
    assert list(counts["namespaces"]) == [namespace]
    assert listed(counts["namespaces"][namespace]) == {
        "pending": 0, "held": 1, "gave_up": 1, "foreign": 0
    }
    assert any("bad-job" in line and "gave_up" in line for line in table)
    held_line = next(line.split() for line in table if "held-job" in line)
    assert held_line[:7] == ["job", namespace, "held-job", "held", "holder-1", "1",
                             str(rows["held-job"]["token"])]
    assert re.fullmatch(r"\d+ms|[0-3]\.\ds", held_line[7])  # the lease left: <= 3 s
    worker.close()
    failing.close()
    holding.close()
    client.close()


def server_ms(client: redis.Redis) -> int:
    return server_micros(client) // 1000


def test_status_counts_by_state_first_and_cuts_the_table_to_the_newest_unless_all(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    client = redis_server.client(decode_responses=True)
    failing = lockworker.Worker(
        client, namespace=namespace, max_attempts=1, on_acquired=lambda job: 1 / 0
    )
    others = lockworker.Worker(
        client, namespace=f"{namespace}-b", max_attempts=1, on_acquired=lambda job: 1 / 0
    )
    for i in range(53):  # each given up in a millisecond of its own: j52 is the newest
        assert failing.process(f"j{i}") is lockworker.Outcome.GAVE_UP
        now = server_ms(client)
        wait_for(lambda now=now: server_ms(client) > now, timeout=5)
    for i in range(2):
        assert others.process(f"f{i}") is lockworker.Outcome.GAVE_UP
    failing.close()
    others.close()
    url = ["--redis", redis_server.url]
    capsys.readouterr()

    def ids(lines: list[str]) -> list[str]:
        return [line.split()[2] for line in lines if line.startswith("job ")]

    # Both namespaces (no --namespace would list other tests' jobs too).
    for ns in (namespace, f"{namespace}-b"):
        assert main(["status", "--namespace", ns, *url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "jobs: 53 (gave_up 53)"
    # the newest 50 of the 53, in natural order
    assert ids(out) == [f"j{i}" for i in range(3, 53)] + ["f0", "f1"]
    assert out.count("... and 3 more rows: --all shows every row, --state STATE the jobs "
                     "in one state") == 1
    assert "jobs: 2 (gave_up 2)" in out

    assert main(["status", "--namespace", namespace, "--limit", "2", *url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "jobs: 53 (gave_up 53)"
    assert ids(out) == ["j51", "j52"]
    assert any(line.startswith("... and 51 more rows") for line in out)

    assert main(["status", "--namespace", namespace, "--all", *url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ids(out) == [f"j{i}" for i in range(53)]
    assert not any(line.startswith("...") for line in out)

    # --json is never cut; its counts are those of every job.
    assert main(["status", "--namespace", namespace, "--json", "--limit", "2", *url]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert len(doc["jobs"]) == 53
    assert doc["counts"]["jobs"]["gave_up"] == 53
    assert list(doc["counts"]["namespaces"]) == [namespace]
    assert {
        state: n for state, n in doc["counts"]["namespaces"][namespace].items()
        if state != "done"
    } == {"pending": 0, "held": 0, "gave_up": 53, "foreign": 0}

    # --state cuts its table the same way, and says how many more the index holds
    state = ["status", "--namespace", namespace, "--state", "gave_up"]
    assert main([*state, "--limit", "2", *url]) == 0
    out = capsys.readouterr().out.splitlines()
    assert ids(out) == ["j51", "j52"]
    assert any(line.startswith("... and 51 more rows") for line in out)
    assert main([*state, "--json", *url]) == 0
    assert len(json.loads(capsys.readouterr().out)["jobs"]) == 53
    client.close()


def test_reset_asks_unless_yes_and_refuses_without_a_terminal(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = redis_server.client(decode_responses=True)
    failing = lockworker.Worker(
        client, namespace=namespace, max_attempts=1, on_acquired=lambda job: 1 / 0
    )
    assert failing.process("j") is lockworker.Outcome.GAVE_UP
    url = redis_server.url
    out = subprocess.run(
        lockworker_cmd("reset", "j", "--namespace", namespace, "--redis", url),
        capture_output=True, text=True, stdin=subprocess.DEVNULL, timeout=60, check=False,
    )
    assert out.returncode == 2
    assert "pass --yes" in out.stderr
    assert inspect(client, JobKeys.of(namespace, "j")).status is JobStatus.GAVE_UP

    assert main(["reset", "j", "--namespace", namespace, "--yes", "--redis", url]) == 0
    assert "pending again" in capsys.readouterr().out
    seen = inspect(client, JobKeys.of(namespace, "j"))
    assert seen.status is JobStatus.PENDING and seen.attempt == 0
    failing.close()
    client.close()


# -- run --------------------------------------------------------------------------------------


def test_run_serves_a_stream_and_exits_0_on_sigterm(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[str]]
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    proc = spawn(
        procs, "run", "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
        "--namespace", namespace, "--stream", stream, "--owner", "w1", "--lock-timeout", "2",
        "--log-format", "json",
    )
    readers = stream_keys(stream).extra("readers")
    wait_for(lambda: client.zscore(readers, "w1") is not None, timeout=30)
    for i in range(3):
        lockworker.submit(client, stream, f"j{i}", {"ms": 10})
    wait_for(lambda: client.llen(records_key(namespace)) == 3, timeout=20)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert events[0] == "run.started"
    assert events.count("job.done") == 3
    assert events[-1] == "run.stopped"
    assert "run.stopping" in events
    client.close()


def test_run_sizes_its_client_pool_for_the_concurrency_asked(
    redis_server: RedisServer, namespace: str, procs: list[subprocess.Popen[str]]
) -> None:
    """``--concurrency 150`` on redis-py's default pool (100) would run it out (and
    ``serve`` would say so, ``serve.pool_small``): the command makes its client with
    room for the hooks and the serving's own connections."""
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    proc = spawn(
        procs, "run", "lockworker.cli.demo_worker:DemoWorker", "--redis", redis_server.url,
        "--namespace", namespace, "--stream", stream, "--owner", "w1", "--lock-timeout", "2",
        "--concurrency", "150", "--log-format", "json",
    )
    readers = stream_keys(stream).extra("readers")
    wait_for(lambda: client.zscore(readers, "w1") is not None, timeout=30)
    lockworker.submit(client, stream, "j0", {"ms": 1})
    wait_for(lambda: client.llen(records_key(namespace)) == 1, timeout=20)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    logged = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    started = [e for e in logged if e["event"] == "serve.started"]
    assert [e["concurrency"] for e in started] == [150]
    assert not [e for e in logged if e["event"] == "serve.pool_small"], err
    client.close()


def test_connect_takes_pool_options_and_a_url_s_own_limit_wins(
    redis_server: RedisServer,
) -> None:
    from lockworker.cli.common import connect
    from lockworker.cli.run_aio import connect_async

    sized = connect(redis_server.url, options={"max_connections": 182})
    assert sized.connection_pool.max_connections == 182
    sized.close()
    capped = connect(redis_server.url + "?max_connections=50",
                     options={"max_connections": 182})
    assert capped.connection_pool.max_connections == 50
    capped.close()

    async def aio() -> int:
        client = await connect_async(redis_server.url, socket_timeout=1.0,
                                     options={"max_connections": 182})
        limit = int(client.connection_pool.max_connections)
        await client.aclose()
        return limit

    assert asyncio.run(aio()) == 182


def test_run_exits_1_when_the_grace_period_runs_out(
    redis_server: RedisServer, namespace: str, app_dir: Path,
    procs: list[subprocess.Popen[str]],
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    proc = spawn(
        procs, "run", "cli_app:Stubborn", "--app-dir", str(app_dir), "--redis",
        redis_server.url, "--namespace", namespace, "--stream", stream, "--owner", "w1",
        "--grace", "0.5", "--log-format", "json",
    )
    lockworker.submit(client, stream, "slow")
    wait_for(lambda: client.get("stubborn:slow") == "started", timeout=30)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 1
    assert '"run.grace_expired"' in err
    client.close()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_exits_130_at_once_while_a_job_runs_on(
    redis_server: RedisServer, namespace: str, app_dir: Path, tmp_path: Path,
    sig: signal.Signals,
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    err_path = tmp_path / "run.err"
    with err_path.open("w") as err_file:
        proc = subprocess.Popen(
            lockworker_cmd(
                "run", "cli_app:Stubborn", "--app-dir", str(app_dir), "--redis",
                redis_server.url, "--namespace", namespace, "--stream", stream, "--owner",
                "w1", "--grace", "60", "--lock-timeout", "30", "--log-format", "json",
            ),
            stdout=subprocess.DEVNULL, stderr=err_file, stdin=subprocess.DEVNULL, text=True,
        )
    try:
        job_id = f"slow-{uuid.uuid4().hex[:8]}"  # Stubborn's marker key is not namespaced
        lockworker.submit(client, stream, job_id)
        wait_for(lambda: client.get(f"stubborn:{job_id}") == "started", timeout=30)
        proc.send_signal(sig)
        # the first signal is handled (the job sleeps on: it ignores job.stopping)
        wait_for(lambda: '"run.stopping"' in err_path.read_text(), timeout=10)
        proc.send_signal(sig)
        assert proc.wait(timeout=5) == 130  # not after the job's 60 s, nor the grace's
        err = err_path.read_text()
        assert '"run.interrupted"' in err
        assert "Traceback" not in err
        assert '"run.stopped"' not in err
        # nothing was settled: the job stays held until its lease runs out
        keys = JobKeys.of(namespace, job_id)
        seen = inspect(client, keys)
        assert seen.status is JobStatus.PENDING and seen.holder == "w1"
        assert 0 < client.pttl(keys.lock) <= 30_000
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        client.close()


def test_run_leads_and_status_shows_the_leader(
    redis_server: RedisServer, app_dir: Path, procs: list[subprocess.Popen[str]],
    capsys: pytest.CaptureFixture[str],
) -> None:
    name = f"boss-{uuid.uuid4().hex[:8]}"
    client = redis_server.client(decode_responses=True)
    started, first_token = time.monotonic(), server_micros(client)
    proc = spawn(
        procs, "run", "cli_app:Boss", "--app-dir", str(app_dir), "--redis", redis_server.url,
        "--name", name, "--owner", "leader-1", "--lock-timeout", "2",
    )
    wait_for(lambda: lockworker.Leader.current(client, name) is not None, timeout=30)
    last_token = server_micros(client)
    assert main(["status", "--namespace", "leaders", "--json", "--redis", redis_server.url]) == 0
    elapsed = time.monotonic() - started
    leaders = {r["id"]: r for r in json.loads(capsys.readouterr().out)["leaders"]}
    assert leaders[name]["state"] == "leading" and leaders[name]["holder"] == "leader-1"
    # the term began while this test ran: its token from the server's clock meanwhile,
    # its age within the test, its lease at most the 2 s given
    assert first_token <= leaders[name]["token"] <= last_token
    assert 0 <= leaders[name]["age"] <= elapsed + 0.05
    assert 0 < leaders[name]["lease_left"] <= 2.0
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert lockworker.Leader.current(client, name) is None  # resigned on the way out
    assert main(["status", "--namespace", "leaders", "--json", "--redis", redis_server.url]) == 0
    leaders = {r["id"]: r for r in json.loads(capsys.readouterr().out)["leaders"]}
    assert leaders[name]["state"] == "vacant" and leaders[name]["token"] >= 1
    client.close()


def test_the_dashboard_s_json_log_lines_carry_no_colour_codes(
    redis_server: RedisServer, procs: list[subprocess.Popen[str]]
) -> None:
    """uvicorn hands its records a coloured copy of the message (``color_message``), for
    its own terminal formatter: a JSON line carried it as a field, escape codes and all."""
    import urllib.request

    from lockworker.testing.server import free_port

    port = free_port()
    proc = spawn(procs, "dashboard", "--redis", redis_server.url, "--port", str(port),
                 "--log-format", "json")

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5):
                return True
        except OSError:
            return proc.poll() is not None  # ended: the assertions below say why

    wait_for(answers, timeout=30)
    proc.send_signal(signal.SIGTERM)
    _out, err = proc.communicate(timeout=20)
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("Uvicorn running on" in line["event"] for line in lines), err
    assert "\\u001b" not in err and "\x1b" not in err  # escaped in JSON, or raw


def test_console_script_and_python_dash_m_are_the_same_command() -> None:
    script = Path(sys.executable).parent / "lockworker"
    commands = [[sys.executable, "-m", "lockworker"], [sys.executable, "-m", "lockworker.cli"]]
    if script.exists():  # installed (pip install -e .): the console script too
        commands.append([str(script)])
    for cmd in commands:
        out = subprocess.run(
            [*cmd, "--version"], capture_output=True, text=True, timeout=60, check=False
        )
        assert out.returncode == 0
        assert out.stdout.strip() == f"lockworker {lockworker.__version__}"


def test_status_job_shows_corrupt_and_wrong_type_jobs_as_foreign_and_done_in_natural_order(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str]
) -> None:
    """Values lockworker did not write are never in the index: ``--job`` on their id
    reads them as foreign; ``--state done`` (a walk) lists the DONE jobs only, in
    natural order."""
    namespace = f"st-{uuid.uuid4().hex[:8]}"
    client = redis_server.client(decode_responses=True)
    worker = lockworker.Worker(client, namespace=namespace, on_acquired=lambda job: None)
    for job_id in ("job-10", "job-2", "job-1"):
        assert worker.process(job_id) is lockworker.Outcome.DONE
    client.set(JobKeys.of(namespace, "job-3").state, "lw2|bogus|1|1|ab|x")
    client.rpush(JobKeys.of(namespace, "job-4").state, "not a string")
    capsys.readouterr()  # whatever the worker logged (an earlier main() may have routed it here)
    url = ["--namespace", namespace, "--json", "--redis", redis_server.url]

    def jobs(*args: str) -> list[dict[str, object]]:
        assert main(["status", *url, *args]) == 0
        found: list[dict[str, object]] = json.loads(capsys.readouterr().out)["jobs"]
        return found

    done = jobs("--state", "done")
    assert [(j["id"], j["state"]) for j in done] == [
        ("job-1", "done"), ("job-2", "done"), ("job-10", "done")
    ]
    for job_id in ("job-3", "job-4"):
        assert [(j["id"], j["state"]) for j in jobs("--job", job_id)] == [(job_id, "foreign")]
    assert jobs() == []  # neither DONE nor foreign jobs are listed by default
    worker.close()
    client.close()


def test_status_reads_many_batches_in_pipelines_even_with_the_script_cache_empty(
    redis_server: RedisServer, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lockworker.cli import status

    monkeypatch.setattr(status, "BATCH", 3)  # 22 jobs: 8 batches, 4 round trips
    monkeypatch.setattr(status, "PIPELINED", 2)
    namespace = f"st-{uuid.uuid4().hex[:8]}"
    client = redis_server.client(decode_responses=True)
    worker = lockworker.Worker(client, namespace=namespace, on_acquired=lambda job: None)
    for job_id in (f"job-{i}" for i in range(21)):
        assert worker.process(job_id) is lockworker.Outcome.DONE
    client.set(JobKeys.of(namespace, "job-20").lock, "not a lock value")  # its state is fine
    client.rpush(JobKeys.of(namespace, "job-21").state, "not a string")
    client.script_flush()  # the pipeline loads its script first
    read: list[int] = []
    job_rows = status.job_rows

    def counted(
        client: redis.Redis, keys: list[tuple[str, str, str]], kept: Kept
    ) -> list[status.Row]:
        read.append(len(keys))
        return job_rows(client, keys, kept)

    monkeypatch.setattr(status, "job_rows", counted)
    capsys.readouterr()
    # --state done walks the namespace: all 22 state keys read, the 20 DONE listed
    assert main(["status", "--namespace", namespace, "--state", "done", "--json",
                 "--redis", redis_server.url]) == 0
    jobs = json.loads(capsys.readouterr().out)["jobs"]
    assert read == [22]
    assert [j["id"] for j in jobs] == [f"job-{i}" for i in range(20)]
    assert all(j["state"] == "done" for j in jobs)
    assert all(j["attempt"] == 1 and j["holder"] == worker.owner for j in jobs)
    for job_id in ("job-20", "job-21"):  # the two the walk read as foreign
        assert main(["status", "--namespace", namespace, "--job", job_id, "--json",
                     "--redis", redis_server.url]) == 0
        (row,) = json.loads(capsys.readouterr().out)["jobs"]
        assert (row["id"], row["state"]) == (job_id, "foreign")
    worker.close()
    client.close()


def test_status_shows_the_live_primaries_and_backups_of_a_namespace(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str]
) -> None:
    client = redis_server.client(decode_responses=True)
    primary = lockworker.Worker(client, namespace=namespace, owner="host-a", max_attempts=1,
                                lock_timeout=3.0,
                                on_acquired=lambda job: 1 / 0 if job.id == "bad" else None)
    backup = lockworker.Worker(client, namespace=namespace, owner="host-b", role="backup",
                               lock_timeout=3.0, on_acquired=lambda job: None)
    elsewhere = lockworker.Worker(client, namespace=f"{namespace}-other", owner="host-c",
                                  on_acquired=lambda job: None)
    for worker in (primary, backup, elsewhere):
        assert worker.process("j") in (lockworker.Outcome.DONE,
                                       lockworker.Outcome.DONE_ELSEWHERE)
    assert primary.process("bad") is lockworker.Outcome.GAVE_UP  # a job the table lists
    args = ["status", "--namespace", namespace, "--redis", redis_server.url]
    capsys.readouterr()  # the workers' events, if an earlier test configured logging
    try:
        assert main([*args, "--json"]) == 0
        workers = json.loads(capsys.readouterr().out)["workers"]
        assert main(args) == 0
        table = capsys.readouterr().out.splitlines()
        primary.close()  # a clean stop: no longer listed
        after = worker_rows(client, namespace)
    finally:
        for worker in (primary, backup, elsewhere):
            worker.close()
        client.close()
    assert [(w["owner"], w["role"], w["namespace"]) for w in workers] == [
        ("host-a", "primary", namespace), ("host-b", "backup", namespace)
    ]
    for w in workers:
        assert w["pid"] == os.getpid() and w["host"] and w["run"]
        assert 0 <= w["last_seen"] <= 3.0 and 0 < w["expires_in"] <= 3.0
    assert table[0] == "jobs: 1 (gave_up 1)"  # counts, jobs, the workers, memory
    assert table[2].startswith("KIND")
    at = table.index("", 2) + 1
    assert table[at].split() == ["WORKER", "NAMESPACE", "ROLE", "HOST", "PID", "LAST", "SEEN",
                                 "EXPIRES", "IN"]
    end = table.index("", at)
    assert [line.split()[:3] for line in table[at + 1 : end]] == [
        ["host-a", namespace, "primary"], ["host-b", namespace, "backup"]
    ]
    assert table[end + 1].startswith("server memory: ")
    assert [w.owner for w in after] == ["host-b"]


def test_run_as_a_backup_with_no_primary_takes_jobs_after_its_start_up_grace_and_is_listed(
    redis_server: RedisServer, namespace: str, app_dir: Path,
    procs: list[subprocess.Popen[str]],
) -> None:
    client = redis_server.client(decode_responses=True)
    stream = f"{namespace}-jobs"
    delay = 3.0
    lockworker.submit(client, stream, "alone")
    submitted = time.monotonic()
    proc = spawn(
        procs, "run", "cli_app:Stubborn", "--app-dir", str(app_dir), "--redis",
        redis_server.url, "--namespace", namespace, "--stream", stream, "--owner", "b1",
        "--role", "backup", "--backup-delay", str(delay), "--grace", "0.5",
    )
    wait_for(lambda: client.get("stubborn:alone") == "started", timeout=30)
    # Its start-up grace first: a primary starting beside it would have had the job.
    assert time.monotonic() - submitted >= delay
    # Then no primary serves the namespace: the next job is taken at once, not after
    # its delay.
    lockworker.submit(client, stream, "next")
    sent = time.monotonic()
    wait_for(lambda: client.get("stubborn:next") == "started", timeout=30)
    assert time.monotonic() - sent < delay
    assert [(w.owner, w.role) for w in worker_rows(client, namespace)] == [("b1", "backup")]
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=20)
    assert worker_rows(client, namespace) == []  # left on its way out
    client.close()
