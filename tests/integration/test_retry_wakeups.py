"""A failure's wake message says when the job is due again: waiters set their timers
from it, and nobody asks Redis for the job before it is due (asking would only be
answered "not yet"), sync and asyncio."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

import redis
import redis.asyncio as aredis
from helpers import in_thread, wait_for

import lockworker
from lockworker import Outcome, Worker, aio
from lockworker.testing import RedisServer

DELAY = 1.0


class Looks:
    """When this client sent a script on job ``j``'s keys (a look, an acquire)."""

    def __init__(self) -> None:
        self.at: list[float] = []

    def saw(self, args: tuple[Any, ...]) -> None:
        if args[0] == "EVALSHA" and any(isinstance(a, str) and ":{j}:" in a for a in args):
            self.at.append(time.monotonic())


class CountingClient(redis.Redis):
    looks: Looks

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.looks.saw(args)
        return super().execute_command(*args, **options)  # type: ignore[no-untyped-call]


class AsyncCountingClient(aredis.Redis):
    looks: Looks

    async def execute_command(self, *args: Any, **options: Any) -> Any:
        self.looks.saw(args)
        return await super().execute_command(*args, **options)


def test_a_waiter_does_not_look_before_a_failed_job_is_due(
    redis_server: RedisServer, namespace: str
) -> None:
    go, failed_at = threading.Event(), []
    ran: list[float] = []

    def fail_once(job: lockworker.Job) -> None:
        if failed_at:  # the second attempt, if the holder gets it
            ran.append(time.monotonic())
            return
        go.wait(10)
        failed_at.append(time.monotonic())
        raise lockworker.Retry(after=DELAY)

    holder_client = redis_server.client()
    holder = Worker(holder_client, namespace=namespace, handle_signals=False,
                    on_acquired=fail_once, max_attempts=2)
    waiter_client = CountingClient(port=redis_server.port)
    waiter_client.looks = looks = Looks()
    waiter = Worker(waiter_client, namespace=namespace, handle_signals=False,
                    on_acquired=lambda job: ran.append(time.monotonic()), max_attempts=2)
    try:
        held, first = in_thread(lambda: holder.process("j"))
        wait_for(lambda: holder.inspect("j").holder is not None)
        waiting, box = in_thread(lambda: waiter.process("j"))
        # The waiter looked, saw the holder, listened, looked again (a release between
        # its look and its subscription is seen so): now it waits.
        wait_for(lambda: len(looks.at) >= 2)
        go.set()
        held.join(10)
        waiting.join(10)
        assert {box["result"], first["result"]} == {Outcome.DONE, Outcome.DONE_ELSEWHERE}
    finally:
        for w, c in ((holder, holder_client), (waiter, waiter_client)):
            w.close()
            c.close()
    failed = failed_at[0]
    early = [t - failed for t in looks.at if failed < t < failed + DELAY - 0.01]
    assert early == [], f"looked {early} s after the failure, before it was due"
    assert ran and ran[0] - failed >= DELAY - 0.01


def test_an_asyncio_waiter_does_not_look_before_a_failed_job_is_due(
    redis_server: RedisServer, namespace: str
) -> None:
    failed_at: list[float] = []
    ran: list[float] = []

    async def scenario() -> set[Outcome]:
        go = asyncio.Event()

        async def fail_once(job: lockworker.Job) -> None:
            if failed_at:  # the second attempt, if the holder gets it
                ran.append(time.monotonic())
                return
            await go.wait()
            failed_at.append(time.monotonic())
            raise lockworker.Retry(after=DELAY)

        holder_client = aredis.Redis(port=redis_server.port)
        waiter_client = AsyncCountingClient(port=redis_server.port)
        waiter_client.looks = looks = Looks()
        holder = aio.Worker(holder_client, namespace=namespace, handle_signals=False,
                            on_acquired=fail_once, max_attempts=2)

        async def run(job: lockworker.Job) -> None:
            ran.append(time.monotonic())

        waiter = aio.Worker(waiter_client, namespace=namespace, handle_signals=False,
                            on_acquired=run, max_attempts=2)
        held = asyncio.create_task(holder.process("j"))
        deadline = time.monotonic() + 10
        while (await holder.inspect("j")).holder is None:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        waiting = asyncio.create_task(waiter.process("j"))
        while len(looks.at) < 2:  # looked, listened, looked again: now it waits
            assert time.monotonic() < deadline
            await asyncio.sleep(0.005)
        go.set()
        outcomes = {await held, await waiting}
        for w, c in ((holder, holder_client), (waiter, waiter_client)):
            await w.close()
            await c.aclose()
        failed = failed_at[0]
        early = [t - failed for t in looks.at if failed < t < failed + DELAY - 0.01]
        assert early == [], f"looked {early} s after the failure, before it was due"
        return outcomes

    assert asyncio.run(scenario()) == {Outcome.DONE, Outcome.DONE_ELSEWHERE}
    assert ran and ran[0] - failed_at[0] >= DELAY - 0.01
