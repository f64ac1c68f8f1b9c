"""A backup that trails its primary (lockworker.serving.trail), on a real server.

A primary is registered and serving (its presence); the jobs' steps that a primary
would make are made here directly, so each test decides what the primary does. The
backup serves the stream with ``serve``: it reads no entry while the progress moves,
takes a job over at once when a failure hands it over, and finds a job the progress
stood behind for ``backup_delay`` (passed over, or its holder dead) by itself.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lockworker
from lockworker import Job, StreamSource
from lockworker.model.keys import JobKeys
from lockworker.model.presence import handover_channel
from lockworker.model.state import Grant
from lockworker.protocol import ScriptProtocol
from lockworker.serving import rules
from tests.helpers import held, in_thread, wait_for, who

MAX, RETENTION_MS = 3, 60_000


class Ran:
    """The backup's hook: when it ran each job, and with which attempt."""

    def __init__(self) -> None:
        self.runs: dict[str, tuple[float, int]] = {}
        self.lock = threading.Lock()

    def __call__(self, job: Job) -> None:
        with self.lock:
            self.runs[job.id] = (time.monotonic(), job.attempt)


class Reading(StreamSource):
    """A fan-out reader that records the entries it hands ``serve``, and which of them
    a handover asked for."""

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self.handed: list[tuple[str, bool]] = []
        self.read_at: dict[str, float] = {}

    def _decode(self, entry_id: str, fields: dict[str, str], urgent: bool = False) -> Any:
        delivery = super()._decode(entry_id, fields, urgent)
        if delivery is not None:
            self.handed.append((delivery.job_id, urgent))
            self.read_at.setdefault(delivery.job_id, time.monotonic())
        return delivery


@pytest.fixture
def backup_delay() -> float:
    return 5.0


@pytest.fixture
def trailing(
    redis_client: redis.Redis, namespace: str, backup_delay: float
) -> Iterator[tuple[Any, Reading, Ran, str]]:
    """A registered primary (presence only) and a backup serving the stream behind it."""
    stream = f"{namespace}-jobs"
    primary = lockworker.Worker(
        redis_client, namespace=namespace, owner="primary", on_acquired=lambda job: None,
        handle_signals=False,
    )
    ran = Ran()
    backup = lockworker.Worker(
        redis.Redis(connection_pool=redis_client.connection_pool), namespace=namespace,
        owner="backup", role="backup", backup_delay=backup_delay, on_acquired=ran,
        handle_signals=False, lock_timeout=1.0,
    )
    primary._presence.start()
    backup._presence.start()
    wait_for(lambda: rules.deferring(backup), timeout=10)
    source = Reading(redis_client, stream, owner="backup", block=0.05)
    thread, box = in_thread(lambda: backup.serve(source, concurrency=4))
    wait_for(lambda: backup._hub.hub().subscribed(handover_channel(namespace)) or
             "error" in box, timeout=10)
    try:
        yield backup, source, ran, stream
    finally:
        for w in (backup, primary):
            w.stop()
        thread.join(10)
        for w in (backup, primary):
            w.close()
    assert "error" not in box, box


def take(client: redis.Redis, namespace: str, job_id: str, lease_ms: int) -> Grant:
    """The primary's grant of ``job_id``."""
    g = ScriptProtocol(client).acquire(
        JobKeys.of(namespace, job_id), who("primary"), lease_ms, MAX, RETENTION_MS
    )
    assert isinstance(g, Grant)
    return g


@pytest.mark.parametrize("backup_delay", [2.0])
def test_a_failure_handed_over_is_read_at_once_though_the_backup_never_read_the_job(
    redis_client: redis.Redis, namespace: str, trailing: tuple[Any, Reading, Ran, str],
) -> None:
    """The job is younger than backup_delay (2 s) and the progress moves: the trailing
    backup has not read it. The primary's failure (due again at once) publishes the
    handover; the backup reads the entry then, marked urgent, well within backup_delay
    (its contest then decides as a contest of a job it had read would: here, with no
    primary process to retry it, it runs the second attempt)."""
    _, source, ran, stream = trailing
    lockworker.submit(redis_client, stream, "f")
    g = take(redis_client, namespace, "f", 30_000)
    time.sleep(0.3)  # the backup polls meanwhile (the wait under test is the next one)
    assert source.handed == []  # trailing: the job is neither old nor handed over
    failed_at = time.monotonic()
    ScriptProtocol(redis_client).fail(
        JobKeys.of(namespace, "f"), held(g, "primary"), MAX, RETENTION_MS
    )
    wait_for(lambda: "f" in source.read_at, timeout=5)
    assert source.read_at["f"] - failed_at < 1.0
    assert source.handed == [("f", True)]
    wait_for(lambda: "f" in ran.runs, timeout=10)
    assert ran.runs["f"][1] == 2


@pytest.mark.parametrize("backup_delay", [0.3])
def test_a_job_the_progress_stands_behind_is_found_once_it_stood_for_backup_delay(
    redis_client: redis.Redis, namespace: str, trailing: tuple[Any, Reading, Ran, str],
) -> None:
    """The primary took ``stuck`` and died (its presence still runs; its lease of 1 s
    ends), while it resolved later jobs: the progress stands behind ``stuck``. The
    backup reads the entries past it once it stood still for backup_delay, and takes
    ``stuck`` over at its lease's end; the later jobs it reads are settled DONE
    elsewhere, never run."""
    _, source, ran, stream = trailing
    lockworker.submit(redis_client, stream, "stuck")
    take(redis_client, namespace, "stuck", 1_000)
    later = [f"later{i}" for i in range(3)]
    for job_id in later:
        lockworker.submit(redis_client, stream, job_id)
        g = take(redis_client, namespace, job_id, 30_000)
        ScriptProtocol(redis_client).complete(
            JobKeys.of(namespace, job_id), held(g, "primary"), RETENTION_MS
        )
    wait_for(lambda: "stuck" in ran.runs, timeout=10)
    assert ran.runs["stuck"][1] == 2
    assert set(ran.runs) == {"stuck"}
    handed = [job_id for job_id, urgent in source.handed if not urgent]
    assert handed[0] == "stuck"
