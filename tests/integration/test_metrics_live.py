"""lockworker.metrics counting a real Worker and a real Leader against the suite's server."""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis
from helpers import wait_for
from prometheus_client import CollectorRegistry

import lockworker


def test_a_hook_that_raises_once_is_one_failure_then_done(
    metrics_registry: CollectorRegistry, make: Callable[..., lockworker.Worker], namespace: str
) -> None:
    calls: list[int] = []

    def flaky(job: lockworker.Job) -> None:
        calls.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    worker = make(flaky, retry_delay=0)
    assert worker.process("invoice-1") is lockworker.Outcome.DONE
    assert calls == [1, 2]

    def sample(metric: str, **labels: str) -> float | None:
        return metrics_registry.get_sample_value(metric, {"namespace": namespace, **labels})

    outcomes = "lockworker_job_outcomes_total"
    assert sample(outcomes, outcome="failed") == 1
    assert sample(outcomes, outcome="done") == 1
    assert sample(outcomes, outcome="gave_up") == 0
    assert sample("lockworker_attempt_duration_seconds_count") == 2
    assert sample("lockworker_leases_held") == 0


def test_the_leader_gauge_is_1_while_leading_and_0_after(
    metrics_registry: CollectorRegistry, redis_client: redis.Redis, namespace: str
) -> None:
    def lead(term: lockworker.Term) -> None:
        while not term.wait(0.05):
            pass

    leader = lockworker.Leader(
        redis_client, name=namespace, lock_timeout=1.0, on_acquired=lead, handle_signals=False
    )

    def leading() -> float | None:
        return metrics_registry.get_sample_value("lockworker_leader", {"name": namespace})

    thread = threading.Thread(target=leader.run, daemon=True)
    thread.start()
    try:
        wait_for(lambda: leading() == 1)
    finally:
        leader.stop()
        thread.join(timeout=10)
        leader.close()
    assert not thread.is_alive()
    assert leading() == 0


def test_schedule_metrics_follow_the_ticks_of_a_served_schedule(
    metrics_registry: CollectorRegistry, redis_client: redis.Redis, namespace: str
) -> None:
    """Ticks run and skipped are counted as the schedule's hash counts them, each once;
    every tick's lateness is observed; the gauges an alert needs are the hash's."""
    from lockworker.protocol import text
    from lockworker.protocol.schedules import decode_progress, schedule_key

    release = threading.Event()

    def hook(job: lockworker.Job) -> None:
        if job.id.startswith("slow@"):
            release.wait(2.5)  # past two ticks of its 1 s schedule: they are skipped

    worker = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=hook, handle_signals=False,
        lock_timeout=2.0,
    )
    source = lockworker.ScheduleSource(
        redis_client, [lockworker.Every("beat", 1), lockworker.Every("slow", 1)]
    )
    # As if nobody had served "beat" for 5 s: catch_up="latest" drops the missed ticks.
    missed_since = int(redis_client.time()[0]) - 5
    redis_client.hset(schedule_key(namespace, "beat"),
                      mapping={"last": missed_since, "resolved": missed_since})
    thread = threading.Thread(
        target=worker.serve, args=(source,), kwargs={"concurrency": 2}, daemon=True
    )
    thread.start()

    def sample(metric: str, name: str, **labels: str) -> float:
        found = metrics_registry.get_sample_value(
            metric, {"namespace": namespace, "schedule": name, **labels}
        )
        return 0.0 if found is None else found

    ticks = "lockworker_schedule_ticks_total"
    try:
        wait_for(lambda: sample(ticks, "slow", outcome="skipped") >= 1, timeout=15)
        wait_for(lambda: sample(ticks, "beat", outcome="ran") >= 3, timeout=15)
    finally:
        worker.stop()
        thread.join(10)
        worker.close()
    for name in ("beat", "slow"):
        raw = redis_client.hgetall(schedule_key(namespace, name))
        seen = decode_progress({text(k): text(v) for k, v in raw.items()})
        assert sample(ticks, name, outcome="ran") == seen.ran
        assert sample(ticks, name, outcome="skipped") == seen.skipped
        assert sample(ticks, name, outcome="dropped") == seen.dropped
        admitted = sample("lockworker_schedule_lateness_seconds_count", name)
        assert admitted >= seen.ran  # each tick admitted to run (some may still be open)
        assert sample("lockworker_schedule_lateness_seconds_bucket", name, le="10.0") == admitted
        assert sample("lockworker_schedule_period_seconds", name) == 1
        assert seen.last_ran is not None
        assert sample("lockworker_schedule_last_completed_seconds", name) == seen.last_ran
    assert sample(ticks, "beat", outcome="skipped") == 0
    assert sample(ticks, "beat", outcome="dropped") >= 3  # of the 4 or 5 missed
