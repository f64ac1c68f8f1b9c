"""``lockworker run`` of ``lockworker.aio`` classes: real daemons against the suite's server.

An asyncio Worker daemon serves the stream beside a sync one (sync primary, asyncio
backup: every job done once, and a SIGKILLed primary's job taken over with attempt 2),
hands a job over on SIGTERM, follows the same exit codes; asyncio Leader daemons elect
one leader; ``--metrics-port`` counts an asyncio daemon's jobs; what the asyncio
daemons cannot do is refused in one line.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from helpers import present, reap, wait_for
from prometheus_client.parser import text_string_to_metric_families

import lockworker
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import inspect
from lockworker.testing import RedisServer
from lockworker.testing.server import free_port

pytestmark = pytest.mark.processes

APP = textwrap.dedent(
    """
    import asyncio, json, threading
    import lockworker
    from lockworker import aio

    def entry(side, worker, job):
        return json.dumps({"job": job.id, "owner": worker.owner, "attempt": job.attempt,
                           "side": side})

    class SyncRecorder(lockworker.Worker):
        def on_acquired(self, job):
            self.client.rpush(self.namespace + ":did", entry("sync", self, job))
            if (job.payload or {}).get("hang_on") == self.owner:
                threading.Event().wait(60)  # killed before it returns

    class AsyncRecorder(aio.Worker):
        async def on_acquired(self, job):
            await self.client.rpush(self.namespace + ":did", entry("async", self, job))
            while (job.payload or {}).get("hold_on") == self.owner:
                job.check()  # StopRequested once stopping: the job is handed over
                await asyncio.sleep(0.01)
            if (job.payload or {}).get("ignore_stop_on") == self.owner:
                await asyncio.sleep(60)  # a stop cannot end it, only the process's exit

    class AsyncBoss(aio.Leader):
        async def on_acquired(self, term):
            await self.client.rpush(self.name + ":terms", json.dumps(
                {"owner": self.owner, "token": term.token}))
            while not await term.wait(0.05):
                pass

        async def on_locked(self, term):
            await self.client.sadd(self.name + ":followers", self.owner)

    def traced(worker, job_id, payload):
        # A subclass's own step before each job: record it; veto some jobs.
        worker.client.rpush(worker.namespace + ":processed", job_id)
        return (payload or {}).get("veto")

    class TracedSync(SyncRecorder):
        def process(self, job_id, payload=None):
            if traced(self, job_id, payload):
                return lockworker.Outcome.STOPPED  # not resolved: the stream stays
            return super().process(job_id, payload)

    class TracedAsync(AsyncRecorder):
        async def process(self, job_id, payload=None):
            await self.client.rpush(self.namespace + ":processed", job_id)
            if (payload or {}).get("veto"):
                return lockworker.Outcome.STOPPED
            return await super().process(job_id, payload)

    class TxnWorker(aio.Worker):
        def __init__(self, client, **options):
            super().__init__(client, protocol="txn", **options)

        async def on_acquired(self, job):
            pass
    """
)


class Daemons:
    """``lockworker run`` processes of the app against one server, their stderr in files."""

    def __init__(self, server: RedisServer, tmp: Path) -> None:
        self.server = server
        self.tmp = tmp
        (tmp / "aio_app.py").write_text(APP)
        self.namespace = f"aio-run-{uuid.uuid4().hex[:8]}"
        self.stream = f"{self.namespace}-jobs"
        self.client = server.client(decode_responses=True)
        self.procs: dict[str, subprocess.Popen[bytes]] = {}

    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "lockworker", *args]

    def run(self, owner: str, target: str, *options: str) -> subprocess.Popen[bytes]:
        with (self.tmp / f"{owner}.err").open("wb") as err:
            proc = subprocess.Popen(
                self.command(
                    "run", f"aio_app:{target}", "--app-dir", str(self.tmp), "--redis",
                    self.server.url, "--owner", owner, "--log-format", "json", *options,
                ),
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err,
            )
        self.procs[owner] = proc
        return proc

    def worker(self, owner: str, target: str, *options: str) -> subprocess.Popen[bytes]:
        return self.run(
            owner, target, "--namespace", self.namespace, "--stream", self.stream, *options
        )

    def submit(self, job_id: str, payload: dict[str, Any] | None = None) -> None:
        """``lockworker submit``, as an operator would."""
        extra = [] if payload is None else [json.dumps(payload)]
        subprocess.run(
            self.command("submit", self.stream, job_id, *extra, "--redis", self.server.url),
            stdin=subprocess.DEVNULL, capture_output=True, timeout=60, check=True,
        )

    def registered(self, owner: str) -> bool:
        readers = stream_keys(self.stream).extra("readers")
        return self.client.zscore(readers, owner) is not None

    def did(self) -> list[dict[str, Any]]:
        return [json.loads(r) for r in self.client.lrange(f"{self.namespace}:did", 0, -1)]

    def events(self, owner: str) -> list[dict[str, Any]]:
        lines = (self.tmp / f"{owner}.err").read_text().splitlines()
        return [json.loads(line) for line in lines if line.startswith("{")]

    def stderr(self, owner: str) -> str:
        return (self.tmp / f"{owner}.err").read_text()

    def status(self, job_id: str) -> JobStatus:
        return inspect(self.client, JobKeys.of(self.namespace, job_id)).status

    def close(self) -> None:
        reap(self.procs.values())
        self.client.close()


@pytest.fixture
def daemons(redis_server: RedisServer, tmp_path: Path) -> Iterator[Daemons]:
    d = Daemons(redis_server, tmp_path)
    yield d
    d.close()


def test_an_asyncio_backup_beside_a_sync_primary_does_each_job_once_and_takes_over(
    daemons: Daemons,
) -> None:
    timing = ("--lock-timeout", "1", "--backup-delay", "1")
    # The primary is registered first: the backup's own registration reads it, so the
    # backup defers to it from its first job (one started at the same moment serves
    # until it hears of the primary, which is allowed, but not this test's property).
    daemons.worker("primary", "SyncRecorder", "--role", "primary", *timing)
    wait_for(lambda: present(daemons.client, daemons.namespace, "primary"), timeout=30)
    backup = daemons.worker("backup", "AsyncRecorder", "--role", "backup", *timing)
    wait_for(lambda: daemons.registered("primary") and daemons.registered("backup"),
             timeout=30)
    for i in range(3):
        daemons.submit(f"a-{i}")
    wait_for(lambda: len(daemons.did()) == 3, timeout=20)
    assert {(r["owner"], r["side"]) for r in daemons.did()} == {("primary", "sync")}

    # The primary dies holding a job: the asyncio backup takes it over, then serves on.
    daemons.submit("hang", {"hang_on": "primary"})
    wait_for(lambda: any(r["job"] == "hang" for r in daemons.did()), timeout=20)
    daemons.procs["primary"].kill()
    for i in range(3):
        daemons.submit(f"b-{i}")
    wait_for(lambda: len(daemons.did()) == 8, timeout=30)
    records = daemons.did()
    hang = [(r["owner"], r["side"], r["attempt"]) for r in records if r["job"] == "hang"]
    assert hang == [("primary", "sync", 1), ("backup", "async", 2)]
    others = sorted(r["job"] for r in records if r["job"] != "hang")
    assert others == ["a-0", "a-1", "a-2", "b-0", "b-1", "b-2"]  # each once
    assert {r["owner"] for r in records if r["job"].startswith("b-")} == {"backup"}
    assert all(daemons.status(job) is JobStatus.DONE for job in [*others, "hang"])

    backup.send_signal(signal.SIGTERM)
    assert backup.wait(timeout=20) == 0
    events = daemons.events("backup")
    assert events[0]["event"] == "run.started" and events[0]["asyncio"] is True
    assert events[-1]["event"] == "run.stopped"
    done_here = [e["job_id"] for e in events if e["event"] == "job.done"]
    assert sorted(done_here) == ["b-0", "b-1", "b-2", "hang"]
    assert len(daemons.did()) == 8  # nothing ran again while stopping


@pytest.mark.parametrize("target", ["TracedSync", "TracedAsync"])
def test_a_daemon_runs_every_job_through_the_classs_own_process_and_honours_it(
    daemons: Daemons, target: str
) -> None:
    proc = daemons.worker("t", target)
    wait_for(lambda: daemons.registered("t"), timeout=30)
    ids = [lockworker.submit(daemons.client, daemons.stream, job_id, payload)
           for job_id, payload in [("first", None), ("veto", {"veto": True}), ("last", None)]]
    # Jobs run side by side (concurrency 4): the order they end in is not the stream's.
    wait_for(lambda: sorted(r["job"] for r in daemons.did()) == ["first", "last"], timeout=20)
    # Every delivery went through the class's process (the veto's ends at once, but in
    # its own slot: it need not come before the others' jobs are done).
    wait_for(lambda: sorted(daemons.client.lrange(f"{daemons.namespace}:processed", 0, -1))
             == ["first", "last", "veto"], timeout=20)
    # The override said "veto" was not resolved: the saved position stays before it,
    # past "first" (the stream is trimmed up to it, in the same step), never further.
    keys = stream_keys(daemons.stream)
    wait_for(lambda: daemons.client.hget(keys.extra("positions"), "t") == ids[0], timeout=20)
    entries = daemons.client.xrange(keys.extra("entries"))
    assert [entry_id for entry_id, _fields in entries] == ids[1:]
    assert daemons.status("veto") is JobStatus.PENDING
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0


def test_sigterm_hands_a_checked_job_over_at_once_and_exits_0(daemons: Daemons) -> None:
    # A lease far longer than the test: only a handover lets the other daemon in.
    holder = daemons.worker("a", "AsyncRecorder", "--lock-timeout", "30")
    wait_for(lambda: present(daemons.client, daemons.namespace, "a"), timeout=30)
    daemons.worker("b", "SyncRecorder", "--role", "backup", "--backup-delay", "0.2",
                   "--lock-timeout", "30")
    wait_for(lambda: daemons.registered("a") and daemons.registered("b"), timeout=30)
    daemons.submit("held", {"hold_on": "a"})
    wait_for(lambda: [r["owner"] for r in daemons.did()] == ["a"], timeout=20)

    signalled = time.monotonic()
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=20) == 0
    wait_for(lambda: daemons.status("held") is JobStatus.DONE, timeout=10)
    assert time.monotonic() - signalled < 10  # not the 30 s lease, nor the 10 s grace
    assert [(r["owner"], r["attempt"]) for r in daemons.did()] == [("a", 1), ("b", 1)]
    events = [e["event"] for e in daemons.events("a")]
    assert events.index("run.stopping") < events.index("job.released")
    assert events[-1] == "run.stopped"
    assert "run.grace_expired" not in events


def test_a_stop_the_hook_ignores_exits_1_when_the_grace_runs_out(daemons: Daemons) -> None:
    proc = daemons.worker("g", "AsyncRecorder", "--grace", "0.5")
    wait_for(lambda: daemons.registered("g"), timeout=30)
    daemons.submit("stubborn", {"ignore_stop_on": "g"})
    wait_for(lambda: len(daemons.did()) == 1, timeout=20)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 1
    events = [e["event"] for e in daemons.events("g")]
    assert events[-1] == "run.grace_expired" and "run.stopped" not in events


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_second_signal_exits_130_at_once_while_an_async_hook_runs_on(
    daemons: Daemons, sig: signal.Signals
) -> None:
    proc = daemons.worker("i", "AsyncRecorder", "--grace", "60", "--lock-timeout", "30")
    wait_for(lambda: daemons.registered("i"), timeout=30)
    daemons.submit("stubborn", {"ignore_stop_on": "i"})
    wait_for(lambda: len(daemons.did()) == 1, timeout=20)
    proc.send_signal(sig)
    wait_for(lambda: '"run.stopping"' in daemons.stderr("i"), timeout=10)
    proc.send_signal(sig)
    assert proc.wait(timeout=5) == 130  # not after the hook's 60 s, nor the grace's
    err = daemons.stderr("i")
    assert '"run.interrupted"' in err and "Traceback" not in err
    assert '"run.stopped"' not in err
    # nothing was settled: the job stays held until its lease runs out
    seen = inspect(daemons.client, JobKeys.of(daemons.namespace, "stubborn"))
    assert seen.status is JobStatus.PENDING and seen.holder == "i"


def test_asyncio_leader_daemons_elect_one_and_hand_over_on_sigterm(
    daemons: Daemons,
) -> None:
    name = daemons.namespace
    options = ("--name", name, "--lock-timeout", "2")
    first = daemons.run("l1", "AsyncBoss", *options)
    wait_for(lambda: lockworker.Leader.current(daemons.client, name) is not None, timeout=30)
    leading = lockworker.Leader.current(daemons.client, name)
    assert leading is not None and leading.holder == "l1"
    second = daemons.run("l2", "AsyncBoss", *options)
    wait_for(lambda: daemons.client.sismember(f"{name}:followers", "l2"), timeout=30)
    still = lockworker.Leader.current(daemons.client, name)
    assert still is not None and (still.holder, still.token) == ("l1", leading.token)

    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=20) == 0

    def next_leader() -> Any:
        now = lockworker.Leader.current(daemons.client, name)
        return now if now is not None and now.holder == "l2" else None

    taken = wait_for(next_leader, timeout=10)
    assert taken.token > leading.token
    terms = [json.loads(t) for t in daemons.client.lrange(f"{name}:terms", 0, -1)]
    assert [(t["owner"], t["token"]) for t in terms] == [
        ("l1", leading.token), ("l2", taken.token)
    ]
    second.send_signal(signal.SIGTERM)
    assert second.wait(timeout=20) == 0
    assert lockworker.Leader.current(daemons.client, name) is None  # resigned on the way out
    events = daemons.events("l1")
    assert events[0]["event"] == "run.started" and events[0]["kind"] == "leader"
    assert events[0]["asyncio"] is True and events[-1]["event"] == "run.stopped"


@pytest.mark.parametrize("target", ["AsyncBoss", "AsyncRecorder"])
def test_a_waiting_asyncio_daemon_exits_at_once_on_sigterm(
    daemons: Daemons, target: str
) -> None:
    """A follower, or a backup waiting on a held job: each listens for wake-ups, so its
    process has a reader task when it stops. It exits within the release's round trip
    and the process's own start-up and shutdown, on every Python (before 3.12 the
    reader could miss asyncio.run's final cancel and read on for about 7 s)."""
    name = daemons.namespace
    if target == "AsyncBoss":
        options = ("--name", name, "--lock-timeout", "30")
        daemons.run("holder", "AsyncBoss", *options)
        wait_for(lambda: lockworker.Leader.current(daemons.client, name), timeout=30)
        waiter = daemons.run("waiter", "AsyncBoss", *options)
        wait_for(lambda: daemons.client.sismember(f"{name}:followers", "waiter"), timeout=30)
    else:
        daemons.worker("holder", "AsyncRecorder", "--lock-timeout", "30")
        wait_for(lambda: daemons.registered("holder"), timeout=30)
        daemons.submit("held", {"hold_on": "holder"})
        wait_for(lambda: len(daemons.did()) == 1, timeout=20)
        waiter = daemons.worker("waiter", "AsyncRecorder", "--lock-timeout", "30")
        wait_for(lambda: '"job.locked"' in daemons.stderr("waiter"), timeout=30)
    signalled = time.monotonic()
    waiter.send_signal(signal.SIGTERM)
    assert waiter.wait(timeout=20) == 0
    assert time.monotonic() - signalled < 3.0
    assert [e["event"] for e in daemons.events("waiter")][-1] == "run.stopped"


def scrape(port: int) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text) for s in family.samples
    }


def answers(port: int) -> bool:
    try:
        scrape(port)
    except OSError:
        return False
    return True


def test_metrics_of_an_asyncio_daemon_count_the_jobs_it_did(daemons: Daemons) -> None:
    port, ns, jobs = free_port(), daemons.namespace, 5
    proc = daemons.worker("m", "AsyncRecorder", "--metrics-port", str(port),
                          "--metrics-host", "127.0.0.1")
    wait_for(lambda: answers(port) and daemons.registered("m"), timeout=30)
    for i in range(jobs):
        lockworker.submit(daemons.client, daemons.stream, f"m-{i}")

    def metric(name: str, **labels: str) -> float | None:
        return scrape(port).get((name, frozenset({"namespace": ns, **labels}.items())))

    wait_for(lambda: metric("lockworker_job_outcomes_total", outcome="done") == jobs,
             timeout=20)
    assert len(daemons.did()) == jobs  # one daemon: it did every job, each once
    assert metric("lockworker_attempt_duration_seconds_count") == jobs
    assert metric("lockworker_leases_held") == 0
    assert metric("lockworker_job_outcomes_total", outcome="failed") == 0
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 0
    started = daemons.events("m")[0]
    assert started["metrics"] == f"http://127.0.0.1:{port}/metrics"


REPLICATED = (
    "--durability: lockworker.aio supports durability='local' only (for 'replicated' use "
    "lockworker.Worker)"
)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["AsyncRecorder", "--durability", "replicated"],
         f"{REPLICATED}, got durability='replicated'; aio_app:AsyncRecorder is a "
         "lockworker.aio.Worker"),
        (["AsyncBoss", "--durability", "replicated"],
         "--durability: lockworker.aio supports durability='local' only (for 'replicated' "
         "use lockworker.Leader), got durability='replicated'; aio_app:AsyncBoss is a "
         "lockworker.aio.Leader"),
        (["TxnWorker"], "lockworker.aio supports protocol='script' only"),
        (["AsyncBoss", "--concurrency", "2"], "--concurrency: only for Worker classes"),
    ],
    ids=["replicated-worker", "replicated-leader", "txn", "leader-concurrency"],
)
def test_what_the_asyncio_daemons_cannot_do_is_one_line_and_exit_2(
    redis_server: RedisServer, tmp_path: Path, args: list[str], fragment: str,
) -> None:
    (tmp_path / "aio_app.py").write_text(APP)
    target, *options = args
    out = subprocess.run(
        [sys.executable, "-m", "lockworker", "run", f"aio_app:{target}", "--app-dir",
         str(tmp_path), "--namespace", "n", "--redis", redis_server.url, *options],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 2, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("lockworker run: ")
    assert fragment in line


@pytest.mark.parametrize("scheme", ["redis", "redis+cluster"])
def test_an_unreachable_redis_is_one_line_and_exit_1_for_an_asyncio_leader(
    tmp_path: Path, scheme: str
) -> None:
    """The asyncio client's PING (a Leader has no other client) fails as the sync one's."""
    (tmp_path / "aio_app.py").write_text(APP)
    url = f"{scheme}://127.0.0.1:{free_port()}"  # nothing listens there
    out = subprocess.run(
        [sys.executable, "-m", "lockworker", "run", "aio_app:AsyncBoss", "--app-dir",
         str(tmp_path), "--name", "n", "--redis", url],
        capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 1, out.stderr
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith(f"lockworker run: cannot reach Redis at {url}: ")

