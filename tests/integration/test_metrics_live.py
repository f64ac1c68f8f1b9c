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
