"""Worker.process end to end on a real server, with threads as the competing processes."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import pytest
import redis
from helpers import in_thread, wait_for
from redis.backoff import NoBackoff
from redis.retry import Retry

import lockworker
from lockworker.runtime import events
from lockworker.testing import RedisServer, capture_events


def test_outcomes_done_and_done_elsewhere(make: Callable[..., lockworker.Worker]) -> None:
    runs: list[int] = []
    a = make(lambda job: runs.append(job.token), owner="a")
    b = make(lambda job: runs.append(job.token), owner="b")
    assert a.process("j", {"n": 1}) is lockworker.Outcome.DONE
    assert b.process("j", {"n": 1}) is lockworker.Outcome.DONE_ELSEWHERE
    # One call in the fleet gets DONE per job: a later call of the same worker did not
    # run it (a duplicate submission, a retried request).
    assert a.process("j") is lockworker.Outcome.DONE_ELSEWHERE
    assert len(runs) == 1 and runs[0] > 0


def test_gave_up_runs_on_gave_up_once_per_process(make: Callable[..., lockworker.Worker]) -> None:
    gave_up: list[str] = []

    def boom(job: lockworker.Job) -> None:
        raise RuntimeError("no")

    a = make(boom, owner="a", max_attempts=2, retry_delay=0.0,
             on_gave_up=lambda job: gave_up.append("a"))
    b = make(boom, owner="b", max_attempts=2, on_gave_up=lambda job: gave_up.append("b"))
    assert a.process("j") is lockworker.Outcome.GAVE_UP
    assert b.process("j") is lockworker.Outcome.GAVE_UP
    assert gave_up == ["a", "b"]
    assert a.inspect("j").attempt == 2


def test_a_failure_hands_over_to_a_waiting_worker_at_once(
    make: Callable[..., lockworker.Worker],
) -> None:
    go = threading.Event()
    failed_at: list[float] = []
    started_at: list[float] = []

    def fail_on_go(job: lockworker.Job) -> None:
        go.wait(10)
        failed_at.append(time.monotonic())
        raise RuntimeError("attempt 1 fails")

    a = make(fail_on_go, owner="a", lock_timeout=5.0)
    b = make(lambda job: started_at.append(time.monotonic()), owner="b", lock_timeout=5.0,
             on_locked=lambda job: None)
    ta, box_a = in_thread(lambda: a.process("j"))
    wait_for(lambda: a.inspect("j").holder == "a")
    with capture_events() as logs:
        tb, box_b = in_thread(lambda: b.process("j"))
        wait_for(lambda: any(e["event"] == events.LOCKED and e["owner"] == "b" for e in logs))
    go.set()
    tb.join(10)
    ta.join(10)
    assert box_b["result"] is lockworker.Outcome.DONE
    assert box_a["result"] is lockworker.Outcome.DONE_ELSEWHERE
    assert started_at[0] - failed_at[0] < 2.5  # the lease was 5 s: it was a wake-up


def test_a_lone_worker_retries_its_failed_attempt_after_retry_delay(
    make: Callable[..., lockworker.Worker],
) -> None:
    attempts: list[int] = []

    def fail_first(job: lockworker.Job) -> None:
        attempts.append(job.attempt)
        if job.attempt == 1:
            raise RuntimeError("first attempt fails")

    worker = make(fail_first, retry_delay=0.05, max_attempts=3)
    assert worker.process("j") is lockworker.Outcome.DONE
    assert attempts == [1, 2]


def test_the_heartbeat_keeps_a_long_job_past_its_lease(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str,
) -> None:
    finished = threading.Event()

    def long_job(job: lockworker.Job) -> None:
        # three leases long; the job must stay held (checked from outside) throughout
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            job.check()
            time.sleep(0.01)
        finished.set()

    worker = make(long_job, lock_timeout=0.5, owner="a")
    other = make(lambda job: None, lock_timeout=0.5, owner="b")
    thread, box = in_thread(lambda: worker.process("j"))
    wait_for(lambda: worker.inspect("j").holder == "a")
    assert other.process("j") is lockworker.Outcome.DONE_ELSEWHERE  # waited, never took it
    thread.join(10)
    assert finished.is_set() and box["result"] is lockworker.Outcome.DONE
    assert worker.inspect("j").attempt == 1


def test_stop_hands_the_job_over_without_spending_an_attempt(
    make: Callable[..., lockworker.Worker],
) -> None:
    tokens: list[int] = []

    def until_stopped(job: lockworker.Job) -> None:
        tokens.append(job.token)
        while True:
            job.check()
            time.sleep(0.005)

    worker = make(until_stopped, owner="a")
    thread, box = in_thread(lambda: worker.process("j"))
    wait_for(lambda: worker.inspect("j").holder == "a")
    worker.stop()
    thread.join(10)
    assert box["result"] is lockworker.Outcome.STOPPED
    seen = worker.inspect("j")
    assert seen.status is lockworker.JobStatus.PENDING and seen.attempt == 0
    assert seen.holder is None and [seen.token] == tokens
    assert worker.process("j") is lockworker.Outcome.STOPPED  # stop is permanent


def test_events_carry_job_attempt_token_and_owner(make: Callable[..., lockworker.Worker]) -> None:
    worker = make(lambda job: None, owner="me")
    with capture_events() as logs:
        worker.process("j")
    logs = [e for e in logs if e["event"].startswith("job.")]  # not the worker's own
    names = [e["event"] for e in logs]
    assert names == [events.ACQUIRED, events.DONE]
    for entry in logs:
        assert (entry["job_id"], entry["owner"], entry["attempt"], entry["token"]) == (
            "j", "me", 1, logs[0]["token"])
    assert logs[0]["token"] > 0 and logs[0]["run"] == worker.run_id


def test_redis_unreachable_raises_after_bounded_retries(namespace: str) -> None:
    server = RedisServer().start()
    # redis-py retries connection errors itself unless told not to; lockworker's bounded
    # retries are the ones under test here.
    client = server.client(
        socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    server.close()
    worker = lockworker.Worker(
        client, namespace=namespace, on_acquired=lambda job: None, handle_signals=False,
        redis_retry=lockworker.RetryPolicy(budget=0.3, initial=0.01, maximum=0.05),
    )
    started = time.monotonic()
    with pytest.raises(lockworker.RedisUnavailable, match="acquire job"):
        worker.process("j")
    assert time.monotonic() - started < 5.0
    worker.close()


def test_subclass_and_functional_forms_both_run(
    redis_client: redis.Redis, namespace: str,
) -> None:
    seen: list[str] = []

    class Sub(lockworker.Worker):
        def on_acquired(self, job: lockworker.Job) -> None:
            seen.append(f"sub:{job.id}")

    with Sub(redis_client, namespace=namespace, handle_signals=False) as sub:
        assert sub.process("a") is lockworker.Outcome.DONE
    with lockworker.Worker(redis_client, namespace=namespace, handle_signals=False,
                           on_acquired=lambda job: seen.append(f"fn:{job.id}")) as fn:
        assert fn.process("b") is lockworker.Outcome.DONE
    assert seen == ["sub:a", "fn:b"]
