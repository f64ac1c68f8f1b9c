"""Plain (non-async) hooks of the asyncio objects run in a worker thread: a blocking one
never stalls the event loop, and it still sees its Job or Term, raises as an async one
does, and is left behind, its lease released, when its task is cancelled."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import pytest
import redis.asyncio as aredis
from helpers import until

from lockworker import Job, Outcome, StopRequested, aio
from lockworker.testing.server import RedisServer

T = TypeVar("T")

BLOCK = 1.0
"""How long a plain hook blocks its thread."""
STALL = 0.5
"""The largest gap between two ticks of the loop allowed meanwhile: half the block, far
above a tick (10 ms) even on a loaded machine."""


@asynccontextmanager
async def ticking() -> AsyncIterator[list[float]]:
    """A task ticking every 10 ms on the loop; yields the gaps between ticks."""
    gaps: list[float] = []

    async def tick() -> None:
        last = time.monotonic()
        while True:
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    task = asyncio.create_task(tick())
    try:
        yield gaps
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def run(server: RedisServer, scenario: Callable[[Any], Awaitable[T]]) -> T:
    async def main() -> T:
        client = aredis.Redis(host="127.0.0.1", port=server.port)
        try:
            return await asyncio.wait_for(scenario(client), 20)
        finally:
            await client.aclose()

    return asyncio.run(main())


class Seen:
    """What a plain hook saw, from its thread."""

    def __init__(self) -> None:
        self.threads: list[int] = []
        self.lost: list[bool] = []
        self.done = 0

    def blocked(self, handle: Any = None) -> None:
        self.threads.append(threading.get_ident())
        if handle is not None:
            self.lost.append(handle.lost)
            handle.check()  # usable from the thread: neither lost nor stopping
        time.sleep(BLOCK)
        self.done += 1


def test_a_blocking_plain_on_acquired_does_not_stall_the_loop(
    redis_server: RedisServer, namespace: str
) -> None:
    seen = Seen()

    async def scenario(client: Any) -> tuple[Outcome, list[float], int]:
        async with aio.Worker(client, namespace=namespace, handle_signals=False,
                              on_acquired=seen.blocked) as worker, ticking() as gaps:
            outcome = await worker.process("job")
        return outcome, gaps, threading.get_ident()

    outcome, gaps, loop_thread = run(redis_server, scenario)
    assert outcome is Outcome.DONE
    assert seen.threads and seen.threads[0] != loop_thread and seen.lost == [False]
    assert len(gaps) >= 10 and max(gaps) < STALL, max(gaps)


def test_a_blocking_plain_on_failed_does_not_stall_the_loop_and_errors_propagate(
    redis_server: RedisServer, namespace: str
) -> None:
    """A plain on_acquired's exception fails the attempt as an async one's does; the
    plain on_failed that gets it blocks in its thread."""
    failures: list[BaseException] = []

    def fails(job: Job) -> None:
        raise ValueError("boom")

    def on_failed(job: Job, exc: BaseException) -> None:
        failures.append(exc)
        time.sleep(BLOCK)

    async def scenario(client: Any) -> tuple[Outcome, list[float]]:
        async with aio.Worker(client, namespace=namespace, handle_signals=False,
                              max_attempts=1, on_acquired=fails,
                              on_failed=on_failed) as worker, ticking() as gaps:
            outcome = await worker.process("job")
        return outcome, gaps

    outcome, gaps = run(redis_server, scenario)
    assert outcome is Outcome.GAVE_UP
    assert len(failures) == 1 and isinstance(failures[0], ValueError)
    assert max(gaps) < STALL, max(gaps)


def test_stop_requested_from_a_plain_hook_hands_the_job_over(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(client: Any) -> tuple[Outcome, Any]:
        def stops(job: Job) -> None:
            worker.stop()
            with pytest.raises(StopRequested):
                job.check()
            job.check()

        worker = aio.Worker(client, namespace=namespace, handle_signals=False,
                            on_acquired=stops)
        async with worker:
            outcome = await worker.process("job")
            return outcome, await worker.inspect("job")

    outcome, snapshot = run(redis_server, scenario)
    assert outcome is Outcome.STOPPED
    assert snapshot.holder is None and snapshot.attempt == 0  # released, refunded


def test_cancelling_a_plain_hook_releases_the_lease_and_leaves_the_thread_behind(
    redis_server: RedisServer, namespace: str
) -> None:
    """The task ends at once and the lease is released; the thread runs on, sees
    ``job.lost``, and what it returns is discarded."""
    entered = threading.Event()
    go_on = threading.Event()
    after: list[bool] = []

    def holds(job: Job) -> None:
        entered.set()
        go_on.wait(10)
        after.append(job.lost)

    async def scenario(client: Any) -> tuple[Any, float]:
        async with aio.Worker(client, namespace=namespace, lock_timeout=10.0,
                              handle_signals=False, on_acquired=holds) as worker:
            task = asyncio.create_task(worker.process("job"))
            await until(entered.is_set)
            cancelled_at = time.monotonic()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            took = time.monotonic() - cancelled_at
            snapshot = await worker.inspect("job")
            go_on.set()
            await until(lambda: after)
            return snapshot, took

    snapshot, took = run(redis_server, scenario)
    assert snapshot.holder is None and snapshot.attempt == 0
    assert took < 2.0  # a release's round trip, not the thread's 10 s nor the lease's
    assert after == [True]


class PlainLeader(aio.Leader):
    """A plain ``def`` override, in a thread: waits with ``term.wait`` (which blocks
    there), then resigns by stopping."""

    seen: Seen

    def on_acquired(self, term: aio.AsyncTerm) -> None:  # type: ignore[override]
        self.seen.blocked(term)
        assert term.wait(0.05) is False  # a full, uneventful wait in the thread
        self.stop()
        assert term.wait(5.0) is True  # stopping: returns at once


def test_a_blocking_plain_leader_hook_does_not_stall_the_loop(
    redis_server: RedisServer, namespace: str
) -> None:
    seen = Seen()

    async def scenario(client: Any) -> tuple[list[float], int]:
        leader = PlainLeader(client, name=namespace, handle_signals=False)
        leader.seen = seen
        async with ticking() as gaps:
            await leader.run()
        return gaps, threading.get_ident()

    gaps, loop_thread = run(redis_server, scenario)
    assert seen.threads and seen.threads[0] != loop_thread and seen.lost == [False]
    assert max(gaps) < STALL, max(gaps)


def test_a_blocking_plain_on_locked_of_a_follower_does_not_stall_the_loop(
    redis_server: RedisServer, namespace: str
) -> None:
    seen = Seen()

    async def scenario(client: Any) -> list[float]:
        leading = asyncio.Event()

        async def lead(term: aio.AsyncTerm) -> None:
            leading.set()
            await term.wait(30)

        first = aio.Leader(client, name=namespace, handle_signals=False, on_acquired=lead)
        second = aio.Leader(client, name=namespace, handle_signals=False,
                            on_acquired=lead, on_locked=seen.blocked)
        runs = [asyncio.create_task(first.run())]
        await leading.wait()
        async with ticking() as gaps:
            runs.append(asyncio.create_task(second.run()))
            await until(lambda: seen.done)
        first.stop()
        second.stop()
        await asyncio.gather(*runs)
        return gaps

    gaps = run(redis_server, scenario)
    assert seen.done == 1 and len(gaps) >= 10
    assert max(gaps) < STALL, max(gaps)

