"""Group commit on the asyncio side (lockworker.aio.batcher): the sync side's batch,
awaited; a cancelled task's queued step is never sent."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aredis

from lockworker.aio import batcher as aio_batcher
from lockworker.aio.batcher import AsyncBatcher
from lockworker.model.keys import JobKeys
from lockworker.model.state import Grant
from lockworker.protocol.script import acquire_step
from lockworker.testing.server import RedisServer
from tests.helpers import until, who

LEASE_MS, MAX, RETENTION_MS = 10_000, 3, 60_000


def hold_alone(monkeypatch: pytest.MonkeyPatch) -> asyncio.Event:
    """Hold every step sent alone until the returned event is set (a batch in flight)."""
    gate = asyncio.Event()
    real_alone = aio_batcher._alone

    async def held_alone(client: Any, step: Any) -> Any:
        await gate.wait()
        return await real_alone(client, step)

    monkeypatch.setattr(aio_batcher, "_alone", held_alone)
    return gate


def acquires(namespace: str, n: int) -> tuple[list[JobKeys], list[Any]]:
    """``n`` jobs' keys and an acquire step for each."""
    keys = [JobKeys.of(namespace, f"j{i}") for i in range(n)]
    return keys, [acquire_step(k, who("me"), LEASE_MS, MAX, RETENTION_MS) for k in keys]


def test_steps_awaited_while_a_batch_is_in_flight_share_the_next_round_trip(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sizes: list[int] = []
    real_send = aio_batcher.send

    async def counted(client: Any, steps: Any) -> list[Any]:
        sizes.append(len(steps))
        return await real_send(client, steps)

    monkeypatch.setattr(aio_batcher, "send", counted)
    gate = hold_alone(monkeypatch)

    async def scenario() -> tuple[list[Any], list[Any]]:
        client = aredis.Redis.from_url(redis_server.url)
        batcher = AsyncBatcher(client)
        keys, steps = acquires(namespace, 11)
        first = asyncio.create_task(batcher(steps[0]))
        await asyncio.sleep(0)
        others = [asyncio.create_task(batcher(s)) for s in steps[1:]]
        cancelled = others.pop(3)  # its step waits in the queue: cancelled, never sent
        await until(lambda: len(batcher._queue) == 10)
        cancelled.cancel()
        gate.set()
        results = await asyncio.gather(first, *others)
        locks = [await client.get(k.lock) for k in keys]
        await client.aclose()
        return results, locks

    results, locks = asyncio.run(scenario())
    assert sizes == [9]  # the first alone; the 9 left of 10 queued in one batch
    assert all(isinstance(r, Grant) and r.attempt == 1 for r in results)
    assert locks[4] is None  # the cancelled task's job was never taken
    assert sum(lock is not None for lock in locks) == 10


def test_one_batcher_per_asyncio_client(redis_server: RedisServer) -> None:
    client = aredis.Redis.from_url(redis_server.url)
    assert aio_batcher.batcher_for(client) is aio_batcher.batcher_for(client)


def test_a_task_cancelled_as_it_was_handed_the_lead_hands_it_on(
    redis_server: RedisServer, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The lead of the next batch went to a queued step whose task was cancelled before
    it ran: the lead must pass on (or to nobody, the batcher idle), never be lost with
    it, or every later step would wait for a batch nobody sends."""
    gate = hold_alone(monkeypatch)
    doomed: list[asyncio.Task[Any]] = []

    class Cancelling(AsyncBatcher):
        def _pass_lead(self) -> None:
            super()._pass_lead()
            while doomed:  # the task just handed the lead is cancelled before it runs
                doomed.pop().cancel()

    async def scenario() -> Any:
        client = aredis.Redis.from_url(redis_server.url)
        batcher = Cancelling(client)
        _, steps = acquires(namespace, 3)
        first = asyncio.create_task(batcher(steps[0]))
        await asyncio.sleep(0)
        second = asyncio.create_task(batcher(steps[1]))
        await until(lambda: len(batcher._queue) == 1)
        doomed.append(second)
        gate.set()
        await first
        with pytest.raises(asyncio.CancelledError):
            await second
        third = await asyncio.wait_for(batcher(steps[2]), 5)
        await client.aclose()
        return third

    assert isinstance(asyncio.run(scenario()), Grant)
