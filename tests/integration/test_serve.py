"""Worker.serve over iterables: bounded concurrency, one run per job id, clean stop."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from helpers import RETENTION, AtOnce, FailingReports, ReportFailed, grant, held, wait_for

import lockworker
from lockworker import InvalidConfig, Job, JobStatus, Worker
from lockworker.model.keys import JobKeys
from lockworker.protocol import ScriptProtocol
from lockworker.testing import capture_events


def make_worker(client: redis.Redis, namespace: str, **kwargs: Any) -> Worker:
    kwargs.setdefault("lock_timeout", 2.0)
    return Worker(client, namespace=namespace, handle_signals=False, **kwargs)


def serve_in_thread(worker: Worker, source: Any, **kwargs: Any) -> threading.Thread:
    thread = threading.Thread(target=worker.serve, args=(source,), kwargs=kwargs, daemon=True)
    thread.start()
    return thread


def test_every_job_once_and_concurrency_bound_enforced(
    redis_client: redis.Redis, namespace: str
) -> None:
    at_once = AtOnce()
    done: list[str] = []

    def on_acquired(job: Job) -> None:
        with at_once.running():
            # Hold the slot for a while so that extra jobs, if the bound leaked, would
            # pile up.
            threading.Event().wait(0.15)
            done.append(job.id)

    with make_worker(redis_client, namespace, on_acquired=on_acquired) as worker:
        worker.serve([(f"job-{i}", {"n": i}) for i in range(9)], concurrency=3)
    assert sorted(done) == sorted(f"job-{i}" for i in range(9))
    assert at_once.most == 3


def test_one_slow_job_does_not_hold_up_the_others(
    redis_client: redis.Redis, namespace: str
) -> None:
    fast_done: list[str] = []
    slow_saw: list[int] = []

    def on_acquired(job: Job) -> None:
        if job.id == "slow":
            # Finishes only once every fast job finished: a serial serve would time out.
            wait_for(lambda: len(fast_done) == 5, timeout=10)
            slow_saw.append(len(fast_done))
        else:
            fast_done.append(job.id)

    jobs = [("slow", None)] + [(f"fast-{i}", None) for i in range(5)]
    with make_worker(redis_client, namespace, on_acquired=on_acquired) as worker:
        worker.serve(jobs, concurrency=2)
    assert slow_saw == [5]


def test_same_job_id_never_runs_twice_at_once(redis_client: redis.Redis, namespace: str) -> None:
    lock = threading.Lock()
    running: set[str] = set()
    overlaps: list[str] = []
    calls: list[Any] = []

    def on_acquired(job: Job) -> None:
        with lock:
            if job.id in running:
                overlaps.append(job.id)
            running.add(job.id)
            calls.append(job.payload)
        threading.Event().wait(0.05)
        with lock:
            running.discard(job.id)

    jobs = [("a", 1), ("a", 2), ("b", 3), ("a", 4)]
    with make_worker(redis_client, namespace, on_acquired=on_acquired) as worker:
        worker.serve(jobs, concurrency=4)
        assert worker.inspect("a").status is JobStatus.DONE
    assert overlaps == []
    assert sorted(calls) == [1, 3]  # the repeats of "a" found it done


def test_jobs_held_by_a_dead_holder_park_and_free_slots_serve_new_jobs(
    redis_client: redis.Redis, namespace: str
) -> None:
    """More jobs held elsewhere than slots: the new jobs run while the held ones wait
    (parked, holding no slot), and the held ones are taken over when their leases end."""
    protocol = ScriptProtocol(redis_client)
    stalled = [f"stalled-{i}" for i in range(3)]
    for job_id in stalled:  # a holder that never renews: a process killed mid-job
        grant(protocol, JobKeys.of(namespace, job_id), "dead", lease_ms=1500)
    lease_end = time.monotonic() + 1.5
    at_once = AtOnce()
    ran: list[tuple[str, float]] = []

    def on_acquired(job: Job) -> None:
        with at_once.running():
            ran.append((job.id, time.monotonic()))
            threading.Event().wait(0.02)

    fresh = [f"new-{i}" for i in range(4)]
    # stalled-0 twice: the second delivery waits behind the parked first one.
    jobs = [(j, None) for j in stalled + fresh + ["stalled-0"]]
    worker = make_worker(redis_client, namespace, on_acquired=on_acquired)
    thread = serve_in_thread(worker, jobs, concurrency=2)
    try:
        wait_for(lambda: all(worker.inspect(j).status is JobStatus.DONE for j in fresh))
        assert time.monotonic() < lease_end
        assert [worker.inspect(j).holder for j in stalled] == ["dead"] * 3
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        worker.stop()
        worker.close()
    assert sorted(j for j, _ in ran) == sorted(stalled + fresh)  # each once
    assert all(t >= lease_end - 0.05 for j, t in ran if j in stalled)
    assert at_once.most <= 2
    for job_id in stalled:
        seen = worker.inspect(job_id)
        assert (seen.status, seen.owner, seen.attempt) == (JobStatus.DONE, worker.owner, 2)


def test_a_parked_job_wakes_when_its_live_holder_releases_it(
    redis_client: redis.Redis, namespace: str
) -> None:
    """The wake message, not the (long) lease's end, ends a parked job's wait."""
    protocol = ScriptProtocol(redis_client)
    keys = JobKeys.of(namespace, "held")
    g = grant(protocol, keys, "alive", lease_ms=30_000)
    ran: list[str] = []
    worker = make_worker(redis_client, namespace, on_acquired=lambda job: ran.append(job.id))
    thread = serve_in_thread(worker, [("held", None), ("new", None)], concurrency=1)
    try:
        # One slot, and the held job came first: "new" runs only if "held" parked.
        wait_for(lambda: ran == ["new"])
        released_at = time.monotonic()
        protocol.release(keys, held(g, "alive"), RETENTION)
        thread.join(timeout=10)
        assert not thread.is_alive()
        assert ran == ["new", "held"]
        assert time.monotonic() - released_at < 5.0  # the lease had 30 s left
    finally:
        worker.stop()
        worker.close()
    assert worker.inspect("held").status is JobStatus.DONE


def test_stop_hands_over_polite_jobs_and_lets_others_finish(
    redis_client: redis.Redis, namespace: str
) -> None:
    started: set[str] = set()
    finished: list[str] = []

    def on_acquired(job: Job) -> None:
        started.add(job.id)
        if job.id == "polite":
            while True:
                job.check()  # raises StopRequested once stopping
                threading.Event().wait(0.01)
        wait_for(lambda: job.stopping, timeout=10)
        finished.append(job.id)

    def source() -> Iterator[tuple[str, Any]]:
        yield ("polite", None)
        yield ("finisher", None)
        yield ("never", None)

    worker = make_worker(redis_client, namespace, on_acquired=on_acquired)
    thread = serve_in_thread(worker, source(), concurrency=2)
    wait_for(lambda: started == {"polite", "finisher"})
    t0 = time.monotonic()
    worker.stop()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert time.monotonic() - t0 < 2.0
    worker.close()
    assert finished == ["finisher"]
    polite = worker.inspect("polite")
    assert (polite.status, polite.attempt, polite.holder) == (JobStatus.PENDING, 0, None)
    assert worker.inspect("finisher").status is JobStatus.DONE
    assert "never" not in started


def test_refused_jobs_are_skipped_and_the_rest_served(
    redis_client: redis.Redis, namespace: str
) -> None:
    done: list[str] = []
    jobs = [("ok-1", None), ("", None), ("bad-payload", {1, 2}), ("ok-2", None)]
    with make_worker(redis_client, namespace, on_acquired=lambda job: done.append(job.id)) as w:
        w.serve(jobs, concurrency=1)
    assert done == ["ok-1", "ok-2"]


@pytest.mark.parametrize("concurrency", [0, -1, True, 2.0, "4"])
def test_concurrency_validated(
    redis_client: redis.Redis, namespace: str, concurrency: Any
) -> None:
    with make_worker(redis_client, namespace, on_acquired=lambda job: None) as worker, \
            pytest.raises(InvalidConfig, match="concurrency"):
        worker.serve([], concurrency=concurrency)


@pytest.mark.parametrize("source", [5, "job-id", None, [("only-an-id",)]])
def test_bad_source_rejected(redis_client: redis.Redis, namespace: str, source: Any) -> None:
    with make_worker(redis_client, namespace, on_acquired=lambda job: None) as worker, \
            pytest.raises(InvalidConfig, match="source"):
        worker.serve(source)


def test_redis_unavailable_stops_serving_and_is_raised(redis_server: Any, namespace: str) -> None:
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    # Nothing listens on port 1; the client's own retries are off so the budget rules.
    dead = redis.Redis(host="127.0.0.1", port=1, retry=Retry(NoBackoff(), 0))
    worker = Worker(
        dead, namespace=namespace, handle_signals=False, on_acquired=lambda job: None,
        redis_retry=lockworker.RetryPolicy(budget=0.2),
    )
    with pytest.raises(lockworker.RedisUnavailable):
        worker.serve([("a", None), ("b", None)], concurrency=1)
    worker.close()


def test_past_the_park_limit_jobs_wait_in_their_slot_and_every_one_is_served_once(
    redis_client: redis.Redis, namespace: str
) -> None:
    """More jobs held elsewhere than PARK_LIMIT: the first PARK_LIMIT park, the next
    ones wait in their slots (the fallback), the rest wait for a slot; when the holder
    releases them all, each job runs exactly once, never two attempts at once and
    never more than ``concurrency`` at a time."""
    from lockworker.runtime.park import PARK_LIMIT

    concurrency = 2
    protocol = ScriptProtocol(redis_client)
    ids = [f"held-{i}" for i in range(PARK_LIMIT + concurrency + 6)]
    holds = [(JobKeys.of(namespace, j), grant(protocol, JobKeys.of(namespace, j), "alive",
                                              lease_ms=60_000)) for j in ids]
    lock = threading.Lock()
    running: set[str] = set()
    ran: list[str] = []
    overlaps: list[str] = []
    most = 0

    def on_acquired(job: Job) -> None:
        nonlocal most
        with lock:
            if job.id in running:
                overlaps.append(job.id)
            running.add(job.id)
            ran.append(job.id)
            most = max(most, len(running))
        threading.Event().wait(0.001)  # long enough for a leaked slot to show
        with lock:
            running.discard(job.id)

    worker = make_worker(redis_client, namespace, on_acquired=on_acquired, lock_timeout=30.0)
    with capture_events() as logged:
        thread = serve_in_thread(worker, [(j, None) for j in ids], concurrency=concurrency)
        try:
            parked = lambda: sum(e["event"] == "job.parked" for e in logged)  # noqa: E731
            # Settled: every job that could start has seen the holder (PARK_LIMIT parked,
            # then one in each slot); the rest wait for a slot and log nothing yet.
            wait_for(lambda: sum(e["event"] == "job.locked" for e in logged)
                     >= PARK_LIMIT + concurrency, timeout=30)
            assert parked() == PARK_LIMIT  # the ones past the limit waited in a slot
            assert ran == []  # every slot is taken by a job waiting in it
            for keys, g in holds:
                protocol.release(keys, held(g, "alive"), RETENTION)
            thread.join(60)
            assert not thread.is_alive()
        finally:
            worker.stop()
            worker.close()
    assert sorted(ran) == sorted(ids) and overlaps == [] and most <= concurrency
    assert all(worker.inspect(j).status is JobStatus.DONE for j in ids)


@pytest.mark.parametrize(
    ("through", "fails"),
    [("lane", "resolved"), ("process", "resolved"),
     ("lane", "resolving on entry"), ("lane", "resolving on exit")],
)
def test_a_source_whose_report_raises_stops_the_serving_with_that_error(
    redis_client: redis.Redis, namespace: str, through: str, fails: str
) -> None:
    """``delivery.resolved()`` is the source's code, and so is its ``resolving()``,
    which the lane enters around the reports it makes together: if either raises, the
    serving stops and raises that error once the running jobs ended, as for any error
    of the serving, and does not hang (the lane's thread, or a pool thread, died with
    it before). The jobs themselves are DONE: only their report failed."""

    class Overriding(Worker):
        def process(self, job_id: str, payload: Any = None) -> lockworker.Outcome:
            return super().process(job_id, payload)

    kind = Worker if through == "lane" else Overriding
    worker = kind(redis_client, namespace=namespace, handle_signals=False,
                  on_acquired=lambda job: None)
    source = FailingReports(fails)
    raised: list[BaseException] = []

    def serving() -> None:
        try:
            worker.serve(source, concurrency=2)
        except BaseException as exc:
            raised.append(exc)

    thread = threading.Thread(target=serving, daemon=True)
    thread.start()
    thread.join(10.0)
    assert not thread.is_alive(), "serve hung after the source's report raised"
    assert len(raised) == 1 and isinstance(raised[0], ReportFailed)
    if fails == "resolved":
        assert worker.inspect("job-3").status is JobStatus.DONE
    worker.close()
