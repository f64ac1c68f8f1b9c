"""A reset re-drives a stream's job: a daemon serving the stream runs it again, with no
resubmission, whichever path resets it; where its payload was not kept, the reset says
so with the command that submits it again."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import redis
from helpers import RETENTION, grant, held, until, wait_for

import lockworker
from lockworker import Job, StreamSource
from lockworker.cli.main import main
from lockworker.daemons.redrive import reset_job
from lockworker.daemons.sources import stream_keys
from lockworker.model.keys import JobKeys
from lockworker.model.redrive import Origin, decode_origin, origin_key
from lockworker.model.state import JobStatus, Reset
from lockworker.protocol import ScriptProtocol, inspect
from lockworker.testing import RedisServer, capture_events


@dataclass
class Daemon:
    """A worker serving a stream in a thread; its hook fails while ``broken`` is set."""

    client: redis.Redis
    namespace: str
    stream: str
    broken: threading.Event = field(default_factory=threading.Event)
    runs: list[tuple[str, Any]] = field(default_factory=list)
    worker: lockworker.Worker | None = None
    thread: threading.Thread | None = None

    def start(self, group: str | None = None) -> None:
        def on_acquired(job: Job) -> None:
            self.runs.append((job.id, job.payload))
            if self.broken.is_set():
                raise ValueError("customer 42 has no VAT number")

        self.worker = lockworker.Worker(
            self.client, namespace=self.namespace, max_attempts=2, retry_delay=0.0,
            lock_timeout=1.0, handle_signals=False, on_acquired=on_acquired,
        )
        source = StreamSource(self.client, self.stream, owner="host-a", group=group)
        self.thread = threading.Thread(target=self.worker.serve, args=(source,), daemon=True)
        self.thread.start()

    def status(self, job_id: str) -> JobStatus:
        return inspect(self.client, JobKeys.of(self.namespace, job_id)).status

    def entries(self) -> int:
        return int(self.client.xlen(stream_keys(self.stream).extra("entries")))

    def stop(self) -> None:
        if self.worker is not None:
            self.worker.stop()
            # the reader notices the stop when its XREAD returns: an entry ends the block
            # at once rather than at its end
            lockworker.submit(self.client, self.stream, "end-of-test")
        if self.thread is not None:
            self.thread.join(10)
        if self.worker is not None:
            self.worker.close()


@pytest.fixture(params=[None, "billing-group"], ids=["fan-out", "group"])
def daemon(
    request: pytest.FixtureRequest, redis_server: RedisServer, namespace: str
) -> Iterator[Daemon]:
    """A stream's job ``invoice-43`` that gave up in a serving daemon, whose entry is
    gone from the stream (every reader passed it), its payload kept by the daemon."""
    client = redis_server.client(decode_responses=True)
    served = Daemon(client, namespace, f"billing-{uuid.uuid4().hex[:8]}")
    served.broken.set()
    served.start(group=request.param)
    lockworker.submit(client, served.stream, "invoice-43", {"customer": 42})
    try:
        wait_for(lambda: served.status("invoice-43") is JobStatus.GAVE_UP)
        wait_for(lambda: served.entries() == 0)  # trimmed: the stream has it no more
        kept = decode_origin(client.get(origin_key(JobKeys.of(namespace, "invoice-43"))))
        assert kept is not None and kept.stream == served.stream
        served.broken.clear()  # the cause is fixed
        yield served
    finally:
        served.stop()


def ran_again(served: Daemon) -> None:
    wait_for(lambda: served.status("invoice-43") is JobStatus.DONE)
    assert served.runs == [("invoice-43", {"customer": 42})] * 3  # two failed, one done


def test_worker_reset_runs_the_job_again_without_a_resubmission(daemon: Daemon) -> None:
    assert daemon.worker is not None
    with capture_events() as seen:
        assert daemon.worker.reset("invoice-43") is True
    ran_again(daemon)
    reset = [e for e in seen if e["event"] == "job.reset"]
    assert [(e["job_id"], e["redriven"]) for e in reset] == [("invoice-43", daemon.stream)]


def test_reset_all_from_a_worker_without_hooks_runs_the_dead_jobs_again(
    daemon: Daemon,
) -> None:
    operator = lockworker.Worker(daemon.client, namespace=daemon.namespace)  # no hook
    try:
        assert operator.reset_all("gave_up") == {"invoice-43": Reset.RESET}
    finally:
        operator.close()
    ran_again(daemon)


def test_cli_reset_of_one_job_runs_it_again(
    daemon: Daemon, redis_server: RedisServer, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["reset", "invoice-43", "--namespace", daemon.namespace, "--yes",
                 "--redis", redis_server.url]) == 0
    out = capsys.readouterr().out
    assert "pending again, and was added to stream" in out and daemon.stream in out
    ran_again(daemon)


def test_cli_reset_state_runs_the_dead_jobs_again(
    daemon: Daemon, redis_server: RedisServer, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["reset", "--state", "gave_up", "--namespace", daemon.namespace, "--yes",
                 "--redis", redis_server.url]) == 0
    assert "1 job(s) in namespace" in capsys.readouterr().out
    ran_again(daemon)


def test_the_dashboards_reset_runs_the_job_again(daemon: Daemon) -> None:
    from lockworker.cli.web.view import Collector

    done = Collector(daemon.client).reset(daemon.namespace, "invoice-43", "gave_up")
    assert (done.result, done.stream) == (Reset.RESET, daemon.stream)
    ran_again(daemon)


def test_a_job_run_again_that_gives_up_again_is_kept_again(daemon: Daemon) -> None:
    assert daemon.worker is not None
    daemon.broken.set()
    assert daemon.worker.reset("invoice-43")
    wait_for(lambda: len(daemon.runs) == 4 and daemon.status("invoice-43") is JobStatus.GAVE_UP)
    daemon.broken.clear()
    assert daemon.worker.reset("invoice-43")
    wait_for(lambda: daemon.status("invoice-43") is JobStatus.DONE)


def test_a_reset_whose_payload_was_not_kept_says_how_to_submit_it(
    redis_server: RedisServer, namespace: str, capsys: pytest.CaptureFixture[str],
) -> None:
    client = redis_server.client(decode_responses=True)

    def fails(job: Job) -> None:
        raise ValueError("no")

    with lockworker.Worker(
        client, namespace=namespace, max_attempts=1, handle_signals=False, on_acquired=fails,
    ) as worker:
        worker.process("by-hand")  # no stream: nothing kept
        with capture_events() as seen:
            assert worker.reset("by-hand") is True
    [event] = [e for e in seen if e["event"] == "job.reset"]
    assert event["log_level"] == "warning" and event["redriven"] is None
    assert event["resubmit"] == "lockworker submit STREAM by-hand 'PAYLOAD_JSON'"

    worker_done = lockworker.Worker(
        client, namespace=namespace, handle_signals=False, on_acquired=lambda job: None
    )
    with worker_done:
        worker_done.process("done-once")
    assert main(["reset", "done-once", "--namespace", namespace, "--yes",
                 "--redis", redis_server.url]) == 0
    out = capsys.readouterr().out
    assert "nothing will run it" in out
    assert "lockworker submit STREAM done-once 'PAYLOAD_JSON'" in out


def test_a_reset_of_a_job_still_in_hand_adds_no_entry(
    redis_server: RedisServer, namespace: str,
) -> None:
    """A pending job (here: failed, its retry due in a minute) is in the hands of the
    process serving it, whose entry is not resolved: its origin is not re-added."""
    client = redis_server.client(decode_responses=True)
    protocol = ScriptProtocol(client)
    keys = JobKeys.of(namespace, "retrying")
    stream = f"billing-{uuid.uuid4().hex[:8]}"
    client.set(origin_key(keys), Origin(stream, '{"customer": 42}').encode())
    g = grant(protocol, keys, "a")
    protocol.fail(keys, held(g, "a"), 3, RETENTION, delay_ms=60_000)
    done = reset_job(client, protocol, keys, RETENTION)
    assert (done.result, done.resolved, done.redriven) == (Reset.RESET, False, False)
    assert client.exists(stream_keys(stream).extra("entries")) == 0
    gave_up = JobKeys.of(namespace, "dead")  # the same origin, on a given-up job: re-added
    client.set(origin_key(gave_up), Origin(stream, '{"customer": 42}').encode())
    g = grant(protocol, gave_up, "a", max_attempts=1)
    protocol.fail(gave_up, held(g, "a"), 1, RETENTION)
    done = reset_job(client, protocol, gave_up, RETENTION, expect="gave_up")
    assert (done.redriven, done.stream) == (True, stream)
    [(entry, fields)] = client.xrange(stream_keys(stream).extra("entries"))
    assert entry == done.entry and fields == {"job_id": "dead", "payload": '{"customer": 42}'}


def test_an_asyncio_worker_keeps_and_re_drives_a_streams_dead_job(
    redis_server: RedisServer, namespace: str,
) -> None:
    import asyncio

    import redis.asyncio as aredis

    from lockworker import aio

    client = redis_server.client(decode_responses=True)
    stream = f"billing-{uuid.uuid4().hex[:8]}"
    broken = [True]
    runs: list[Any] = []

    async def on_acquired(job: Job) -> None:
        runs.append(job.payload)
        if broken[0]:
            raise ValueError("no VAT number")

    def status(wanted: JobStatus) -> bool:
        return inspect(client, JobKeys.of(namespace, "invoice-7")).status is wanted

    async def scenario() -> None:
        aclient = aredis.Redis.from_url(redis_server.url, decode_responses=True)
        async with aio.Worker(
            aclient, namespace=namespace, max_attempts=2, retry_delay=0.0, lock_timeout=1.0,
            handle_signals=False, on_acquired=on_acquired,
        ) as worker:
            source = StreamSource(client, stream, owner="host-a", block=0.05)
            serving = asyncio.ensure_future(worker.serve(source))
            lockworker.submit(client, stream, "invoice-7", {"customer": 7})
            await until(lambda: status(JobStatus.GAVE_UP))
            # the daemon keeps the origin as it gives up
            await until(lambda: client.exists(origin_key(JobKeys.of(namespace, "invoice-7"))))
            broken[0] = False
            assert await worker.reset("invoice-7") is True
            await until(lambda: status(JobStatus.DONE))
            worker.stop()
            await asyncio.wait_for(serving, 10)
        await aclient.aclose()

    asyncio.run(scenario())
    assert runs == [{"customer": 7}] * 3
