"""Bad arguments are refused before any Redis call, naming the argument."""

from __future__ import annotations

import asyncio
from typing import Any

import fakeredis
import pytest

import lockworker


def ok(job: lockworker.Job) -> None:
    """A valid on_acquired."""


GOOD: dict[str, Any] = {"namespace": "ns", "on_acquired": ok}

CASES: list[tuple[dict[str, Any], type[Exception], str]] = [
    ({"namespace": ""}, lockworker.InvalidConfig, "namespace"),
    ({"namespace": "   "}, lockworker.InvalidConfig, "namespace"),
    ({"namespace": 3}, lockworker.InvalidConfig, "namespace"),
    ({"lock_timeout": 0}, lockworker.InvalidConfig, "lock_timeout"),
    ({"lock_timeout": -1.5}, lockworker.InvalidConfig, "lock_timeout"),
    ({"lock_timeout": "5"}, lockworker.InvalidConfig, "lock_timeout"),
    ({"lock_timeout": True}, lockworker.InvalidConfig, "lock_timeout"),
    ({"max_attempts": 0}, lockworker.InvalidConfig, "max_attempts"),
    ({"max_attempts": 2.5}, lockworker.InvalidConfig, "max_attempts"),
    ({"max_attempts": True}, lockworker.InvalidConfig, "max_attempts"),
    ({"max_attempts": "3"}, lockworker.InvalidConfig, "max_attempts"),
    ({"lock_timeout": None}, lockworker.InvalidConfig, "lock_timeout"),
    ({"lock_timeout": float("inf")}, lockworker.InvalidConfig, "lock_timeout"),
    ({"owner": ""}, lockworker.InvalidConfig, "owner"),
    ({"retention": 5.0, "lock_timeout": 10.0}, lockworker.InvalidConfig, "retention"),
    ({"retention": 10.0, "lock_timeout": 10.0}, lockworker.InvalidConfig, "retention"),
    ({"retention": True}, lockworker.InvalidConfig, "retention"),
    ({"done_retention": 10.0, "lock_timeout": 10.0}, lockworker.InvalidConfig, "done_retention"),
    ({"done_retention": 0}, lockworker.InvalidConfig, "done_retention"),
    ({"done_retention": "1h"}, lockworker.InvalidConfig, "done_retention"),
    ({"done_retention": float("inf")}, lockworker.InvalidConfig, "done_retention"),
    ({"retry_delay": -1}, lockworker.InvalidConfig, "retry_delay"),
    ({"retry_delay": float("nan")}, lockworker.InvalidConfig, "retry_delay"),
    ({"retry_delay": float("inf")}, lockworker.InvalidConfig, "retry_delay"),
    ({"retry_delay": True}, lockworker.InvalidConfig, "retry_delay"),
    ({"backup_delay": float("nan")}, lockworker.InvalidConfig, "backup_delay"),
    ({"backup_delay": float("inf")}, lockworker.InvalidConfig, "backup_delay"),
    ({"backup_delay": False}, lockworker.InvalidConfig, "backup_delay"),
    ({"retention": float("nan")}, lockworker.InvalidConfig, "retention"),
    ({"retention": 1e12}, lockworker.InvalidConfig, "retention"),
    ({"lock_timeout": float("nan")}, lockworker.InvalidConfig, "lock_timeout"),
    ({"max_attempts": float("inf")}, lockworker.InvalidConfig, "max_attempts"),
    ({"protocol": "lua"}, lockworker.InvalidConfig, "protocol"),
    ({"role": "leader"}, lockworker.InvalidConfig, "role"),
    ({"on_acquired": "not callable"}, lockworker.InvalidHook, "on_acquired"),
    ({"on_locked": 42}, lockworker.InvalidHook, "on_locked"),
    ({"on_gave_up": "x"}, lockworker.InvalidHook, "on_gave_up"),
    ({"on_lost": 1}, lockworker.InvalidHook, "on_lost"),
    ({"on_failed": object()}, lockworker.InvalidHook, "on_failed"),
]


@pytest.mark.parametrize(("change", "error", "named"), CASES)
def test_bad_worker_arguments_raise_a_clear_error(
    change: dict[str, Any], error: type[Exception], named: str
) -> None:
    with pytest.raises(error, match=named):
        lockworker.Worker(fakeredis.FakeRedis(), **{**GOOD, **change})


def test_a_worker_without_on_acquired_may_be_built_but_runs_no_job() -> None:
    """An operator's script builds one to inspect and reset; asked to run jobs, it
    refuses with the same clear error, before any Redis call."""
    worker = lockworker.Worker(fakeredis.FakeRedis(), namespace="ns", handle_signals=False)
    try:
        for run in (lambda: worker.process("j"), lambda: worker.serve([("j", None)])):
            with pytest.raises(lockworker.InvalidConfig, match=r"on_acquired is required to "
                               r"process jobs .*may inspect and reset"):
                run()
    finally:
        worker.close()


def test_an_asyncio_worker_without_on_acquired_runs_no_job() -> None:
    from lockworker.aio import Worker as AsyncWorker

    async def main() -> None:
        worker = AsyncWorker(fakeredis.FakeAsyncRedis(), namespace="ns", handle_signals=False)
        try:
            with pytest.raises(lockworker.InvalidConfig, match="on_acquired is required"):
                await worker.process("j")
            with pytest.raises(lockworker.InvalidConfig, match="on_acquired is required"):
                await worker.serve([("j", None)])
        finally:
            await worker.close()

    asyncio.run(main())


def test_errors_are_also_the_stdlib_types_callers_catch() -> None:
    assert issubclass(lockworker.InvalidConfig, ValueError)
    assert issubclass(lockworker.InvalidHook, TypeError)
    for error in (lockworker.InvalidConfig, lockworker.LockLost, lockworker.RedisUnavailable,
                  lockworker.ForeignValueError, lockworker.StopRequested):
        assert issubclass(error, lockworker.LockworkerError)


@pytest.mark.parametrize("job_id", ["", "  ", None, 7])
def test_bad_job_ids_are_refused(job_id: Any) -> None:
    worker = lockworker.Worker(fakeredis.FakeRedis(), **GOOD)
    with pytest.raises(lockworker.InvalidConfig, match="job_id"):
        worker.process(job_id)


@pytest.mark.parametrize("payload", [object(), {1, 2}, float("nan"), {"a": b"bytes"}])
def test_payloads_that_cannot_be_serialised_are_refused(payload: Any) -> None:
    redis = fakeredis.FakeRedis()
    worker = lockworker.Worker(redis, **GOOD)
    with pytest.raises(lockworker.InvalidConfig, match="payload"):
        worker.process("j", payload)
    assert redis.keys() == []  # refused before any Redis call


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: lockworker.Worker(fakeredis.FakeRedis(), **GOOD, retry_delay=float("nan")),
         "retry_delay must be a finite number of seconds >= 0, got nan (or a tenacity wait "
         "strategy, or a function of the failed attempt's number returning seconds)"),
        (lambda: lockworker.Worker(fakeredis.FakeRedis(), **GOOD, backup_delay=float("inf")),
         "backup_delay must be a finite number of seconds >= 0, got inf"),
        (lambda: lockworker.Worker(fakeredis.FakeRedis(), **GOOD, max_attempts=True),
         "max_attempts must be an int >= 1, got True"),
        (lambda: lockworker.Lock(fakeredis.FakeRedis(), "l", timeout=float("nan")),
         "timeout must be None or a finite number of seconds >= 0, got nan"),
        (lambda: lockworker.Lock(fakeredis.FakeRedis(), "l", ttl=1e20),
         "ttl must be at most 1000000000 seconds, got 1e+20"),
        (lambda: lockworker.Semaphore(fakeredis.FakeRedis(), "s", True),
         "limit must be an int >= 1, got True"),
        (lambda: lockworker.Redlock([fakeredis.FakeRedis()], "r", drift_factor=float("nan")),
         "drift_factor must be a finite number >= 0 and < 1, got nan"),
        (lambda: lockworker.Redlock([fakeredis.FakeRedis()], "r", retry_delay=None),
         "retry_delay must be a finite number of seconds >= 0, got None"),
        (lambda: lockworker.RetryPolicy(budget=float("nan")),
         "retry budget must be a finite number of seconds > 0, got nan"),
    ],
)
def test_a_refusal_names_the_argument_the_value_and_the_rule(
    make: Any, message: str
) -> None:
    with pytest.raises(lockworker.InvalidConfig) as refused:
        make()
    assert str(refused.value) == message


def test_valid_numbers_of_any_real_type_are_taken_as_floats() -> None:
    worker = lockworker.Worker(
        fakeredis.FakeRedis(), **GOOD, lock_timeout=5, retry_delay=0, backup_delay=0,
    )
    assert worker.lock_timeout == 5.0 and isinstance(worker.lock_timeout, float)
    assert worker.retry_schedule(1) == 0.0 and isinstance(worker.retry_schedule(1), float)
    assert lockworker.RetryPolicy(budget=3).budget == 3.0


def _products() -> list[tuple[str, Any, Any]]:
    """(name, sync maker, async maker) of every product, each taking a client."""
    from lockworker import Leader, Lock, Semaphore, Worker, aio, compute_once

    def hook(_: object) -> None:
        return None

    return [
        ("Worker", lambda c: Worker(c, namespace="n", on_acquired=hook),
         lambda c: aio.Worker(c, namespace="n", on_acquired=hook)),
        ("Leader", lambda c: Leader(c, name="n", on_acquired=hook),
         lambda c: aio.Leader(c, name="n", on_acquired=hook)),
        ("Lock", lambda c: Lock(c, "x"), lambda c: aio.Lock(c, "x")),
        ("Semaphore", lambda c: Semaphore(c, "x", 2), lambda c: aio.Semaphore(c, "x", 2)),
        ("compute_once", lambda c: compute_once(c, "k", lambda: 1, ttl=1.0), None),
    ]


@pytest.mark.parametrize("name", [p[0] for p in _products()])
def test_each_side_refuses_the_other_sides_client_and_names_its_twin(name: str) -> None:
    """A redis.asyncio client given to a sync product would return coroutines nobody
    awaits; a sync client given to an asyncio product would block its loop."""
    import asyncio

    import redis.asyncio

    _, make_sync, make_async = next(p for p in _products() if p[0] == name)

    async def scenario() -> None:
        aclient = redis.asyncio.Redis()
        try:
            twin = rf"redis\.asyncio.*lockworker\.aio\.{name}"
            with pytest.raises(lockworker.InvalidConfig, match=twin):
                make_sync(aclient)
        finally:
            await aclient.aclose()
        if make_async is not None:
            twin = rf"redis\.asyncio client.*lockworker\.{name}"
            with pytest.raises(lockworker.InvalidConfig, match=twin):
                make_async(redis.Redis())

    asyncio.run(scenario())
