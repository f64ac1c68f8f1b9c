"""Serving's lane in threads (lockworker.daemons.lane): the jobs a contest would take
at once are claimed in batches and their completions group-committed, with the
events, hooks and guarantees of ``process``.

Against a real server: claims and completions share round trips; each job is still
acquired, run and marked done once, with its ``job.acquired`` and ``job.done``
events; a failing hook is settled as ``process`` settles it and the job done on its
next attempt; an override of ``process`` sees every job (the lane stays shut); a
backup while a primary serves does not take the lane; a stop lets the jobs in the
lane end.
"""

from __future__ import annotations

import collections
import threading
from typing import Any

import pytest
import redis
from helpers import AtOnce

import lockworker
from lockworker import Job, Outcome, Worker
from lockworker.daemons import lane
from lockworker.daemons.jobrun import JobRun
from lockworker.model.keys import JobKeys
from lockworker.model.state import JobStatus
from lockworker.protocol import script
from lockworker.testing.events import capture_events


class Sends:
    """Counts the lane's round trips, by what they carry (claims, completions or
    both), and their steps, by script."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count: collections.Counter[str] = collections.Counter()
        self.steps: collections.Counter[str] = collections.Counter()
        self.lock = threading.Lock()
        real = lane.send

        def send(client: Any, steps: list[Any]) -> list[Any]:
            kinds = collections.Counter(
                "claim" if step.script is script._ACQUIRE else "settle" for step in steps
            )
            with self.lock:
                self.count["both" if len(kinds) == 2 else next(iter(kinds))] += 1
                self.steps.update(kinds)
            return real(client, steps)

        monkeypatch.setattr(lane, "send", send)


def test_claims_and_completions_share_round_trips_and_each_job_is_done_once(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = 300
    sends = Sends(monkeypatch)
    ran: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()

    def work(job: Job) -> None:
        with lock:
            ran[job.id] += 1
        redis_client.rpush(f"{namespace}:ran", job.id)  # a round trip of its own

    worker = Worker(redis_client, namespace=namespace, on_acquired=work,
                    handle_signals=False)
    with capture_events() as events:
        worker.serve([(f"job-{i}", {"n": i}) for i in range(jobs)], concurrency=32)
    statuses = [worker.inspect(f"job-{i}") for i in range(jobs)]
    worker.close()
    assert {(s.status, s.attempt, s.owner) for s in statuses} == {
        (JobStatus.DONE, 1, worker.owner)
    }
    assert ran == collections.Counter({f"job-{i}": 1 for i in range(jobs)})
    assert sends.steps == {"claim": jobs, "settle": jobs}  # every job through the lane
    assert sum(sends.count.values()) < jobs  # claims and completions share round trips
    by_event = collections.Counter(e["event"] for e in events if "job_id" in e)
    assert by_event["job.acquired"] == jobs and by_event["job.done"] == jobs


def test_a_failing_hook_in_the_lane_is_settled_as_process_settles_it(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sends = Sends(monkeypatch)
    calls: list[tuple[str, int]] = []

    def work(job: Job) -> None:
        calls.append(("acquired", job.attempt))
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    def failed(job: Job, exc: BaseException) -> None:
        calls.append(("failed", job.attempt))

    worker = Worker(redis_client, namespace=namespace, on_acquired=work,
                    on_failed=failed, handle_signals=False, retry_delay=0)
    worker.serve([("job", None)], concurrency=4)
    seen = worker.inspect("job")
    worker.close()
    assert calls == [("acquired", 1), ("failed", 1), ("acquired", 2)]
    assert (seen.status, seen.attempt) == (JobStatus.DONE, 2)
    assert sends.steps["claim"] == 1  # the first attempt in the lane, the rest a contest


def test_a_job_whose_done_is_refused_takes_a_slot_again_before_its_contest_goes_on(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A job gives its slot back when its hook returns, so the next job starts while
    its DONE is on the way. If that DONE is refused (its lease was lost meanwhile),
    the job's contest goes on, and may run its hook again: only in a slot taken again,
    so hooks never run more than ``concurrency`` at once."""
    at_once = AtOnce()
    runs: list[tuple[str, int]] = []

    def work(job: Job) -> None:
        with at_once.running():
            runs.append((job.id, job.attempt))
            if job.id == "first" and job.attempt == 1:
                # The lease is gone before the DONE: the complete step is refused.
                redis_client.delete(JobKeys.of(namespace, "first").lock)
            elif job.id == "second":
                # Holds the one slot past the moment "first"'s contest, going on after
                # the loss (it waits about a second first), would run its hook again.
                threading.Event().wait(1.5)

    worker = Worker(redis_client, namespace=namespace, on_acquired=work,
                    handle_signals=False)
    worker.serve([("first", None), ("second", None)], concurrency=1)
    statuses = {job: worker.inspect(job) for job in ("first", "second")}
    worker.close()
    assert at_once.most == 1
    assert sorted(runs) == [("first", 1), ("first", 2), ("second", 1)]
    assert (statuses["first"].status, statuses["first"].attempt) == (JobStatus.DONE, 2)
    assert statuses["second"].status is JobStatus.DONE


def test_an_override_of_process_sees_every_job_and_the_lane_stays_shut(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []

    class Counting(Worker):
        def process(self, job_id: str, payload: Any = None) -> Outcome:
            seen.append(job_id)
            return super().process(job_id, payload)

    sends = Sends(monkeypatch)
    worker = Counting(redis_client, namespace=namespace, on_acquired=lambda job: None,
                      handle_signals=False)
    worker.serve([(f"job-{i}", None) for i in range(20)], concurrency=4)
    worker.close()
    assert sorted(seen) == sorted(f"job-{i}" for i in range(20))
    assert sends.count == {}


def test_a_backup_while_a_primary_serves_does_not_take_the_lane(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its contest looks first and competes only after ``backup_delay``: the lane, which
    competes at once, would take the primary's work."""
    primary = Worker(redis_client, namespace=namespace, on_acquired=lambda job: None,
                     handle_signals=False)
    primary.process("warm")  # registered: the namespace has a primary
    sends = Sends(monkeypatch)
    backup = Worker(redis_client, namespace=namespace, role="backup", backup_delay=0.05,
                    on_acquired=lambda job: None, handle_signals=False)
    assert backup.process("warm-too") in (Outcome.DONE,)  # its view reads the primary
    backup.serve([(f"job-{i}", None) for i in range(5)], concurrency=4)
    backup.close()
    primary.close()
    assert sends.count == {}


def test_a_stop_lets_the_jobs_in_the_lane_end_and_leaves_the_rest_unresolved(
    redis_client: redis.Redis, namespace: str
) -> None:
    stream = f"{namespace}-jobs"
    for i in range(50):
        lockworker.submit(redis_client, stream, f"job-{i}")
    ran: list[str] = []
    worker: Worker

    def work(job: Job) -> None:
        ran.append(job.id)
        if len(ran) == 10:
            worker.stop()

    worker = Worker(redis_client, namespace=namespace, on_acquired=work,
                    handle_signals=False)
    source = lockworker.StreamSource(redis_client, stream, owner="reader", block=0.05)
    worker.serve(source, concurrency=4)
    worker.close()
    statuses = {f"job-{i}": worker.inspect(f"job-{i}").status for i in range(50)}
    # Every job that ran is done; none is left held; the source resumes after them.
    assert all(statuses[job] is JobStatus.DONE for job in ran)
    assert all(worker.inspect(f"job-{i}").holder is None for i in range(50))
    position = source.position()
    assert position is not None


@pytest.mark.parametrize("concurrency", [1, 8])  # 1: the lane in the serving thread
def test_a_served_job_runs_the_attempt_process_runs_and_its_done_goes_in_a_batch(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch,
    concurrency: int,
) -> None:
    jobs = 40
    sends = Sends(monkeypatch)
    calls: collections.Counter[str] = collections.Counter()
    lock = threading.Lock()
    for method in ("hooked", "send_done"):
        real = getattr(JobRun, method)

        def counted(run: JobRun, *args: Any, _real: Any = real, _name: str = method) -> Any:
            with lock:
                calls[_name] += 1
            return _real(run, *args)

        monkeypatch.setattr(JobRun, method, counted)
    worker = Worker(redis_client, namespace=namespace, on_acquired=lambda job: None,
                    handle_signals=False)
    worker.serve([(f"job-{i}", None) for i in range(jobs)], concurrency=concurrency)
    statuses = [worker.inspect(f"job-{i}").status for i in range(jobs)]
    worker.close()
    assert statuses == [JobStatus.DONE] * jobs
    assert sends.steps == {"claim": jobs, "settle": jobs}  # every job through the lane
    assert calls == {"hooked": jobs}  # each hook in JobRun's attempt, no DONE sent alone
