"""Worker properties beyond the outcome tests: who takes the next attempt after a
failure, what a stopped job's check() raises, and how fast a waiter learns of it."""

from __future__ import annotations

import re
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


@pytest.fixture
def default_lock_timeout() -> float:
    """This module's workers hold 5 s leases, so a fast handover is surely a wake-up."""
    return 5.0


def test_the_failing_process_steps_back_and_a_waiter_takes_attempt_two(
    make: Callable[..., lockworker.Worker],
) -> None:
    """a fails attempt 1 while b and c wait: one of the waiters, never a, runs attempt 2,
    and long before the 5 s lease would have ended."""
    go = threading.Event()
    runs: list[tuple[str, int, int]] = []
    failed_at: list[float] = []
    started_at: list[float] = []
    lock = threading.Lock()

    def a_hook(job: lockworker.Job) -> None:
        with lock:
            runs.append(("a", job.attempt, job.token))
        go.wait(10)
        failed_at.append(time.monotonic())
        raise RuntimeError("attempt fails")

    def waiter(name: str) -> Callable[[lockworker.Job], None]:
        def hook(job: lockworker.Job) -> None:
            started_at.append(time.monotonic())
            with lock:
                runs.append((name, job.attempt, job.token))
        return hook

    a = make(a_hook, owner="a")  # the default schedule: the first handover is at once
    b = make(waiter("b"), owner="b")
    c = make(waiter("c"), owner="c")
    ta, box_a = in_thread(lambda: a.process("j"))
    wait_for(lambda: a.inspect("j").holder == "a")
    with capture_events() as logs:
        tb, box_b = in_thread(lambda: b.process("j"))
        tc, box_c = in_thread(lambda: c.process("j"))
        wait_for(lambda: {e["owner"] for e in logs if e["event"] == events.LOCKED} >= {"b", "c"})
    go.set()
    for thread in (ta, tb, tc):
        thread.join(15)
    outcomes = {box_a.get("result"), box_b.get("result"), box_c.get("result")}
    assert outcomes == {lockworker.Outcome.DONE, lockworker.Outcome.DONE_ELSEWHERE}
    assert box_a["result"] is lockworker.Outcome.DONE_ELSEWHERE
    assert [r[1] for r in runs] == [1, 2]
    assert runs[1][0] in {"b", "c"} and runs[1][2] > runs[0][2]
    assert started_at[0] - failed_at[0] < 2.5  # woken, not waiting out the 5 s lease


def test_check_raises_stop_requested_after_stop_and_no_attempt_is_spent(
    make: Callable[..., lockworker.Worker],
) -> None:
    raised: list[BaseException] = []
    holding = threading.Event()

    def until_stopped(job: lockworker.Job) -> None:
        holding.set()
        try:
            wait_for(lambda: job.stopping, timeout=10)
            job.check()
        except BaseException as exc:
            raised.append(exc)
            raise

    worker = make(until_stopped, owner="a")
    thread, box = in_thread(lambda: worker.process("j"))
    assert holding.wait(10)
    worker.stop()
    thread.join(10)
    assert len(raised) == 1 and isinstance(raised[0], lockworker.StopRequested)
    assert box["result"] is lockworker.Outcome.STOPPED
    seen = worker.inspect("j")
    assert seen.attempt == 0 and seen.holder is None
    other = make(lambda job: None, owner="b")
    assert other.process("j") is lockworker.Outcome.DONE
    assert other.inspect("j").attempt == 1  # the stopped attempt cost nothing


def test_stop_of_a_waiting_worker_returns_stopped_at_once(
    make: Callable[..., lockworker.Worker],
) -> None:
    release = threading.Event()
    holder = make(lambda job: release.wait(10) and None, owner="a")
    waiter = make(lambda job: None, owner="b")
    th, box_h = in_thread(lambda: holder.process("j"))
    wait_for(lambda: holder.inspect("j").holder == "a")
    with capture_events() as logs:
        tw, box_w = in_thread(lambda: waiter.process("j"))
        wait_for(lambda: any(e["event"] == events.LOCKED and e["owner"] == "b" for e in logs))
    stopped_at = time.monotonic()
    waiter.stop()
    tw.join(10)
    assert box_w["result"] is lockworker.Outcome.STOPPED
    assert time.monotonic() - stopped_at < 2.0  # not after the 5 s lease
    release.set()
    th.join(10)
    assert box_h["result"] is lockworker.Outcome.DONE


def test_on_lost_and_lost_flag_when_the_lease_is_taken_away(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str,
) -> None:
    """Deleting the lease behind the holder's back: its next renewal is refused, it is
    told (on_lost, job.lost, check() raises LockLost), attempt 1 never counts as done,
    and the job is finished by attempt 2."""
    lost: list[int] = []
    checked: list[BaseException] = []

    def work(job: lockworker.Job) -> None:
        if job.attempt > 1:
            return
        redis_client.delete(f"lw:job:{namespace}:{{j}}:lock")
        wait_for(lambda: job.lost, timeout=10)
        try:
            job.check()
        except lockworker.LockLost as exc:
            checked.append(exc)

    worker = make(work, owner="a", lock_timeout=0.6, on_lost=lambda job: lost.append(job.attempt))
    assert worker.process("j") is lockworker.Outcome.DONE
    assert lost == [1] and len(checked) == 1
    seen = worker.inspect("j")
    assert seen.status is lockworker.JobStatus.DONE and seen.attempt == 2


@pytest.mark.parametrize("which", ["lock", "state"])
def test_process_raises_on_a_foreign_value_and_leaves_it_alone(
    make: Callable[..., lockworker.Worker], redis_client: redis.Redis, namespace: str,
    which: str,
) -> None:
    key = f"lw:job:{namespace}:{{j}}:{which}"
    redis_client.set(key, "not ours")
    ran: list[int] = []
    worker = make(lambda job: ran.append(job.attempt))
    with pytest.raises(lockworker.ForeignValueError, match=re.escape(key)):
        worker.process("j")
    assert ran == [] and redis_client.get(key) == "not ours"


def test_a_holder_that_loses_redis_mid_job_marks_the_job_lost(namespace: str) -> None:
    """The server dies while on_acquired runs: renewals fail, the holder's own clock says
    the lease is over, and it is told (job.lost, on_lost) instead of carrying on blind."""
    server = RedisServer().start()
    client = server.client(
        socket_connect_timeout=0.2, socket_timeout=0.2, retry=Retry(NoBackoff(), 0)
    )
    lost: list[int] = []
    seen_lost = threading.Event()

    def work(job: lockworker.Job) -> None:
        server.kill()
        wait_for(lambda: job.lost, timeout=10)
        seen_lost.set()

    worker = lockworker.Worker(
        client, namespace=namespace, on_acquired=work, handle_signals=False,
        lock_timeout=0.6, on_lost=lambda job: lost.append(job.attempt),
        redis_retry=lockworker.RetryPolicy(budget=0.3, initial=0.01, maximum=0.05),
    )
    try:
        with pytest.raises(lockworker.RedisUnavailable):
            worker.process("j")
        assert seen_lost.is_set() and lost == [1]
    finally:
        worker.close()
        server.close()


def test_the_local_hook_sees_the_payload_as_json_gives_it_back(
    redis_client: redis.Redis, namespace: str
) -> None:
    """A tuple reached the local hook as a tuple while other processes saw a list."""
    seen: list[object] = []
    worker = lockworker.Worker(
        redis_client, namespace=namespace, on_acquired=lambda job: seen.append(job.payload)
    )
    assert worker.process("p", payload={"items": (1, 2), "nested": [("a", None)]}) is (
        lockworker.Outcome.DONE
    )
    assert seen == [{"items": [1, 2], "nested": [["a", None]]}]
    worker.close()


def test_an_outage_is_reported_as_it_happens_and_names_the_job(namespace: str) -> None:
    """While Redis was down, process() retried for its whole budget without a line and
    then raised an error that did not name the job. Now every failed try is a
    ``redis.retry`` warning naming the step and job, and so is the final error."""
    with RedisServer() as server:
        client = server.client(retry=Retry(NoBackoff(), 0))  # lockworker's retries only
        worker = lockworker.Worker(
            client, namespace=namespace, on_acquired=lambda job: None,
            redis_retry=lockworker.RetryPolicy(budget=0.5, initial=0.02, maximum=0.1),
        )
        server.stop()
        with capture_events() as logs, pytest.raises(lockworker.RedisUnavailable) as error:
            worker.process("nightly-7")
    assert "acquire job (job 'nightly-7')" in str(error.value)
    retries = [e for e in logs if e["event"] == events.REDIS_RETRY]
    assert len(retries) >= 2
    assert all(e["log_level"] == "warning" for e in retries)
    assert all(e["step"] == "acquire job (job 'nightly-7')" for e in retries)
    assert [e["tries"] for e in retries] == list(range(1, len(retries) + 1))
    worker.close()
    client.close()
