"""A backup's held-back deliveries (lockworker.daemons.defer) on a real server.

While a primary serves, a backup under ``serve`` looks at its deliveries in batches,
``backup_delay`` after they came: a job found held is held back again (until the next
look or its lease's end), and so is a free job until it has lain free for
``backup_delay``; anything else goes to ``process`` with what was seen. A handover (a
failure due again at once, a release) or the primary's departure hands everything over
at once.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis

import lockworker
from lockworker.daemons.defer import Deferrals
from lockworker.daemons.jobrun import JobRun
from lockworker.daemons.sources import Delivery
from lockworker.model.keys import JobKeys
from lockworker.model.presence import handover_channel
from lockworker.model.state import Grant, JobStatus, Outcome, Snapshot
from lockworker.protocol import ScriptProtocol
from lockworker.protocol import batch as protocol_batch
from lockworker.runtime import events
from lockworker.serving import rules
from lockworker.serving.held import Held, Sighting
from tests.helpers import held, wait_for, who

LEASE_MS, MAX, RETENTION_MS = 30_000, 3, 60_000


@pytest.fixture
def pair(redis_client: redis.Redis, namespace: str) -> Iterator[tuple[Any, Any]]:
    """A primary registered in the namespace and a backup that sees it serving."""
    primary = lockworker.Worker(
        redis_client, namespace=namespace, owner="primary", on_acquired=lambda job: None,
        handle_signals=False,
    )
    backup = lockworker.Worker(
        redis.Redis(connection_pool=redis_client.connection_pool), namespace=namespace,
        owner="backup", role="backup", backup_delay=5.0, on_acquired=lambda job: None,
        handle_signals=False,
    )
    primary._presence.start()
    backup._presence.start()
    wait_for(lambda: rules.deferring(backup), timeout=10)
    yield primary, backup
    for w in (backup, primary):
        w.stop()
        w.close()


class Recorder:
    """The dispatch of a Deferrals: when each delivery was handed over, and with what."""

    def __init__(self) -> None:
        self.handed: dict[str, tuple[float, Snapshot | None]] = {}
        self.free: dict[str, tuple[float, int] | None] = {}

    def __call__(self, delivery: Delivery, seen: Sighting | None) -> bool:
        self.free[delivery.job_id] = None if seen is None else seen.free
        self.handed[delivery.job_id] = (time.monotonic(), None if seen is None else seen.snapshot)
        return True


def calls_of(method: str, worker: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids of ``worker``'s runs that call ``JobRun.<method>``, as they do."""
    called: list[str] = []
    real = getattr(JobRun, method)

    def counted(run: JobRun) -> Any:
        if run.w is worker:
            called.append(run.keys.job_id)
        return real(run)

    monkeypatch.setattr(JobRun, method, counted)
    return called


def job_channels_of(worker: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The job ids whose own wake channel ``worker``'s runs listen on, as they do."""
    return calls_of("subscribe", worker, monkeypatch)


def hold(client: redis.Redis, namespace: str, job_id: str, lease_ms: int = LEASE_MS) -> Grant:
    g = ScriptProtocol(client).acquire(
        JobKeys.of(namespace, job_id), who("primary"), lease_ms, MAX, RETENTION_MS
    )
    assert isinstance(g, Grant)
    return g


def test_a_failure_due_at_once_hands_a_held_back_job_over_at_once(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any]
) -> None:
    """backup_delay is 5 s: the job is handed over within a second of the failure, not
    at the next look, with what a look saw just after it (free, one attempt spent)."""
    _, backup = pair
    g = hold(redis_client, namespace, "job")
    recorder = Recorder()
    deferrals = Deferrals(backup, recorder)
    deferrals.add(Delivery("job", None))
    try:
        channel = handover_channel(namespace)
        wait_for(lambda: backup._hub.hub().subscribed(channel), timeout=10)
        failed_at = time.monotonic()
        ScriptProtocol(redis_client).fail(
            JobKeys.of(namespace, "job"), held(g, "primary"), MAX, RETENTION_MS
        )
        wait_for(lambda: "job" in recorder.handed, timeout=3)
    finally:
        deferrals.close()
    at, seen = recorder.handed["job"]
    assert at - failed_at < 1.0
    assert seen is not None and seen.holder is None and seen.attempt == 1


def test_a_held_job_stays_held_back_and_a_done_one_is_settled_without_a_contest(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any]
) -> None:
    """Held: not handed over while its lease runs (a look every backup_delay). DONE by
    the primary: settled at the look after it (reported ``job.done_elsewhere`` as its
    contest would), never handed to a contest."""
    _, backup = pair
    backup.backup_delay = 0.2
    hold(redis_client, namespace, "held")
    g = hold(redis_client, namespace, "done")
    ScriptProtocol(redis_client).complete(
        JobKeys.of(namespace, "done"), held(g, "primary"), RETENTION_MS
    )
    recorder = Recorder()
    settled: list[str] = []
    deferrals = Deferrals(backup, recorder, lambda d: settled.append(d.job_id))
    reported: list[tuple[str, dict[str, Any]]] = []

    def observe(logger: str, event: str, fields: dict[str, Any]) -> None:
        if event == events.DONE_ELSEWHERE and fields.get("owner") == "backup":
            reported.append((fields["job_id"], fields))

    events.add_observer(observe)
    looks: list[int] = []
    real_send = protocol_batch.send

    def counted(client: redis.Redis, steps: Any) -> list[Any]:
        looks.append(len(steps))
        return real_send(client, steps)

    try:
        protocol_batch.send = counted  # type: ignore[assignment]
        due = time.monotonic() + 0.2  # delivered together: due together
        for job_id in ("held", "done"):
            deferrals.held.push(due, Delivery(job_id, None))
        deferrals.start()
        wait_for(lambda: settled == ["done"], timeout=5)
        wait_for(lambda: len(looks) >= 4, timeout=5)  # the held one looked at again
    finally:
        protocol_batch.send = real_send  # type: ignore[assignment]
        events.remove_observer(observe)
        deferrals.close()
    assert recorder.handed == {}  # neither went to a contest
    assert looks[0] == 2  # both in one round trip
    assert [(job, f["by"], f["attempt"]) for job, f in reported] == [("done", "primary", 1)]


def test_a_held_back_job_is_looked_at_again_at_its_leases_end(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any]
) -> None:
    """A holder that died: its lease (0.6 s) ends long before backup_delay (5 s); the
    job is handed over just after it, free."""
    _, backup = pair
    hold(redis_client, namespace, "job", lease_ms=600)
    started = time.monotonic()
    recorder = Recorder()
    deferrals = Deferrals(backup, recorder)
    backup.backup_delay = 5.0
    deferrals.held.delay = 0.3  # the first look soon; the next one capped by the lease
    deferrals.add(Delivery("job", None))
    try:
        wait_for(lambda: "job" in recorder.handed, timeout=4)
    finally:
        deferrals.close()
    at, seen = recorder.handed["job"]
    assert 0.55 < at - started < 2.0
    assert seen is not None and seen.holder is None


def test_the_primarys_departure_hands_everything_over_at_once(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any]
) -> None:
    primary, backup = pair
    for i in range(3):
        hold(redis_client, namespace, f"j{i}")
    recorder = Recorder()
    deferrals = Deferrals(backup, recorder)
    for i in range(3):
        deferrals.add(Delivery(f"j{i}", None))
    try:
        left = time.monotonic()
        primary.stop()  # leaves the namespace's presence, and says so
        wait_for(lambda: len(recorder.handed) == 3, timeout=5)
    finally:
        deferrals.close()
    assert max(at for at, _ in recorder.handed.values()) - left < 2.0


def test_a_backup_behind_a_fast_primary_resolves_every_job_without_a_contest(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """End to end through serve: a primary and a backup serve the same 60 jobs; the
    backup sees every one DONE elsewhere through its process() (an override sees each),
    in a few batched looks, and never listens on a job's own channel."""
    primary, backup = pair
    backup.backup_delay = 0.3
    jobs = [(f"job-{i}", None) for i in range(60)]
    subscribed = job_channels_of(backup, monkeypatch)
    seen_by_backup: list[tuple[str, Outcome]] = []
    real_process = backup.process

    def process(job_id: str, payload: Any = None) -> Outcome:
        outcome = real_process(job_id, payload)
        seen_by_backup.append((job_id, outcome))
        return outcome

    backup.process = process  # type: ignore[method-assign]
    looks: list[int] = []
    real_send = protocol_batch.send

    def counted(client: redis.Redis, steps: Any) -> list[Any]:
        if client is backup.client:
            looks.append(len(steps))
        return real_send(client, steps)

    monkeypatch.setattr(protocol_batch, "send", counted)
    primary.serve(jobs, concurrency=8)
    serving = threading.Thread(target=backup.serve, args=(jobs,), kwargs={"concurrency": 8})
    serving.start()
    serving.join(30)
    assert not serving.is_alive()
    assert sorted(seen_by_backup) == sorted((j, Outcome.DONE_ELSEWHERE) for j, _ in jobs)
    assert subscribed == []
    assert sum(looks) == 60 and len(looks) <= 6


def test_a_backup_settles_a_fast_primarys_jobs_without_a_contest_unless_process_is_overridden(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same serving without an override of process: every job the backup's looks
    saw DONE is settled there (no run, no slot), reported ``job.done_elsewhere`` once
    each, as a contest would. (With an override, the test above: it sees every job.)"""
    primary, backup = pair
    backup.backup_delay = 0.3
    jobs = [(f"job-{i}", None) for i in range(60)]
    runs = calls_of("run", backup, monkeypatch)  # a contest per job run
    reported: list[str] = []

    def observe(logger: str, event: str, fields: dict[str, Any]) -> None:
        if event == events.DONE_ELSEWHERE and fields.get("owner") == "backup":
            reported.append(fields["job_id"])

    events.add_observer(observe)
    try:
        primary.serve(jobs, concurrency=8)
        serving = threading.Thread(target=backup.serve, args=(jobs,), kwargs={"concurrency": 8})
        serving.start()
        serving.join(30)
    finally:
        events.remove_observer(observe)
    assert not serving.is_alive()
    assert runs == []
    assert sorted(reported) == sorted(j for j, _ in jobs)


def test_a_free_job_is_held_back_until_it_lay_free_for_backup_delay(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any]
) -> None:
    """Nobody ever took the job: the first look, 0.3 s after it came, sees it free and
    unknown to the server, so it has lain free since it came: handed over at once with
    that free clock, so its contest competes at once instead of letting it lie again."""
    _, backup = pair
    recorder = Recorder()
    deferrals = Deferrals(backup, recorder)
    deferrals.held.delay = 0.3
    looks: list[float] = []
    real_send = protocol_batch.send

    def counted(client: redis.Redis, steps: Any) -> list[Any]:
        if any(step.keys.job_id == "job" for step in steps):
            looks.append(time.monotonic())
        return real_send(client, steps)

    started = time.monotonic()
    try:
        protocol_batch.send = counted  # type: ignore[assignment]
        deferrals.add(Delivery("job", None))
        wait_for(lambda: "job" in recorder.handed, timeout=5)
    finally:
        protocol_batch.send = real_send  # type: ignore[assignment]
        deferrals.close()
    at, seen = recorder.handed["job"]
    free = recorder.free["job"]
    assert len(looks) == 1
    assert seen is not None and seen.status is JobStatus.PENDING and seen.holder is None
    assert free is not None and started <= free[0] <= looks[0] - 0.2  # since it came
    assert at - free[0] >= 0.3 - 0.06  # a look may come a moment early (IDLE_WAIT)
    assert at - started < 2.0


def test_a_job_nobody_took_has_lain_free_since_it_came_one_taken_before_since_seen() -> None:
    """The free clock of a job the server does not know (no token: nobody ever took
    it) starts when it was delivered; one with a token (taken and given back before)
    starts at the look that first saw it free, as nobody can tell when it was freed."""
    fresh, used = Delivery("fresh", None), Delivery("used", None)
    held_back = Held(0.5)
    held_back.hold(10.0, fresh)
    held_back.hold(10.0, used)
    assert held_back.take(10.49, everything=False) == []  # due at 10.55, taken from 10.5
    assert held_back.take(10.5, everything=False) == [fresh, used]
    never = Snapshot(JobStatus.PENDING, 0, 0, "")
    freed = Snapshot(JobStatus.PENDING, 1, 7, "other")
    looked = [(fresh, JobKeys.of("ns", "fresh")), (used, JobKeys.of("ns", "used"))]
    handed, _ = held_back.after_look(looked, [never, freed], 10.5, True)
    assert handed == [(fresh, Sighting(never, (10.0, 0)))]
    assert len(held_back) == 1  # the one taken before lies free from 10.5 on
    handed, _ = held_back.after_look(looked[1:], [freed], 11.0, True)
    assert handed == [(used, Sighting(freed, (10.5, 7)))]


def test_a_free_job_taken_and_given_back_meanwhile_starts_its_free_clock_again() -> None:
    held_back = Held(1.0)
    delivery = Delivery("job", None)
    keys = JobKeys.of("ns", "job")
    free = Snapshot(JobStatus.PENDING, 0, 0, "")
    again = Snapshot(JobStatus.PENDING, 1, 7, "other")  # held and released in between
    handed, _ = held_back.after_look([(delivery, keys)], [free], 10.0, True)
    assert handed == [] and len(held_back) == 1
    handed, _ = held_back.after_look([(delivery, keys)], [again], 11.0, True)
    assert handed == []  # a new token: it has lain free only since 11.0
    handed, _ = held_back.after_look([(delivery, keys)], [again], 12.0, True)
    assert handed == [(delivery, Sighting(again, (11.0, 7)))]
    # Not deferring (no primary), or everything handed over at once: no holding back.
    for deferring, hold_free in ((False, True), (True, False)):
        handed, _ = Held(1.0).after_look(
            [(delivery, keys)], [free], 10.0, deferring, hold_free=hold_free
        )
        assert [d for d, _ in handed] == [delivery]


def test_a_backup_takes_a_job_the_live_primary_leaves_free_without_waiting_in_a_contest(
    redis_client: redis.Redis, namespace: str, pair: tuple[Any, Any],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The primary serves, but never sees these jobs: the backup takes each one
    backup_delay after it came (it lay free that long: nobody ever took it), not two
    (a look, then a delay from the look), and its contest competes at once: no
    listening on the job's channel, no waiting."""
    del pair  # a primary serves the namespace (and never sees these jobs)
    ran: dict[str, float] = {}
    backup = lockworker.Worker(
        redis.Redis(connection_pool=redis_client.connection_pool), namespace=namespace,
        owner="backup-2", role="backup", backup_delay=1.0, handle_signals=False,
        on_acquired=lambda job: ran.setdefault(job.id, time.monotonic()),
    )
    backup._presence.start()
    wait_for(lambda: rules.deferring(backup), timeout=10)
    subscribed = job_channels_of(backup, monkeypatch)
    jobs = [(f"job-{i}", None) for i in range(5)]
    started = time.monotonic()
    serving = threading.Thread(target=backup.serve, args=(jobs,), kwargs={"concurrency": 4})
    serving.start()
    serving.join(30)
    backup.close()
    assert not serving.is_alive()
    assert sorted(ran) == sorted(j for j, _ in jobs)
    assert all(1.0 - 0.06 <= at - started < 1.8 for at in ran.values()), {
        j: at - started for j, at in ran.items()
    }
    assert subscribed == []
