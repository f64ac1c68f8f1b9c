"""``Worker.inspect(job_id).history`` and ``Worker.reset_all``, sync and asyncio alike:
a hook that fails, then succeeds; a job that gives up, re-driven."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

import lockworker
from lockworker import InvalidConfig, Outcome, Reset, aio
from lockworker.testing import RedisServer

SIDES = ("sync", "async")


async def scenario(
    side: str, server: RedisServer, namespace: str, hook: Callable[[lockworker.Job], None]
) -> Any:
    """Process job ``a`` (fails once, then done) and jobs ``b``, ``c`` (give up), then
    re-drive the given-up ones; returns what each step said."""
    settings: dict[str, Any] = dict(
        namespace=namespace, handle_signals=False, max_attempts=2, retry_delay=0.0,
        lock_timeout=0.5, owner=f"{side}-owner",
    )
    if side == "sync":
        client = redis.Redis.from_url(server.url, decode_responses=True)
        worker = lockworker.Worker(client, on_acquired=hook, **settings)
        try:
            outcomes = [worker.process(job) for job in ("a", "b", "c")]
            seen_a, seen_b = worker.inspect("a"), worker.inspect("b")
            resets = worker.reset_all("gave_up")
            after = worker.inspect("b")
            return outcomes, seen_a, seen_b, resets, after
        finally:
            worker.close()
            client.close()
    aclient = aredis.Redis.from_url(server.url, decode_responses=True)
    async with aio.Worker(aclient, on_acquired=hook, **settings) as aworker:
        outcomes = [await aworker.process(job) for job in ("a", "b", "c")]
        seen_a, seen_b = await aworker.inspect("a"), await aworker.inspect("b")
        resets = await aworker.reset_all("gave_up")
        after = await aworker.inspect("b")
    await aclient.aclose()
    return outcomes, seen_a, seen_b, resets, after


@pytest.mark.parametrize("side", SIDES)
def test_inspect_shows_each_attempt_and_reset_all_redrives_the_given_up_jobs(
    side: str, redis_server: RedisServer, namespace: str
) -> None:
    calls: list[str] = []

    def run(job: lockworker.Job) -> None:  # a: fails once, then done; b, c: always fail
        calls.append(job.id)
        if job.id != "a" or calls.count("a") == 1:
            raise KeyError(f"no price for attempt {job.attempt}")

    outcomes, seen_a, seen_b, resets, after = asyncio.run(
        scenario(side, redis_server, namespace, run)
    )
    assert outcomes == [Outcome.DONE, Outcome.GAVE_UP, Outcome.GAVE_UP]
    owner = f"{side}-owner"
    assert [(r.attempt, r.owner, r.ending, r.error_type, r.error) for r in seen_a.history] == [
        (1, owner, "failed", "KeyError", "'no price for attempt 1'"),
        (2, owner, "done", None, None),
    ]
    assert [(r.attempt, r.ending) for r in seen_b.history] == [(1, "failed"), (2, "gave_up")]
    assert resets == {"b": Reset.RESET, "c": Reset.RESET}  # a is DONE: left alone
    assert (after.status, after.attempt) == (lockworker.JobStatus.PENDING, 0)
    assert len(after.history) == 2  # the reset keeps the history


def test_reset_all_names_a_bad_state(redis_client: redis.Redis, namespace: str) -> None:
    with lockworker.Worker(
        redis_client, namespace=namespace, handle_signals=False, on_acquired=lambda job: None
    ) as worker, pytest.raises(InvalidConfig, match=r"state must be one of .*'dead'"):
        worker.reset_all("dead")
