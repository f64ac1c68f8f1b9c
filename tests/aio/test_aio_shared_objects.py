"""One object, many tasks: lockworker.aio's Lock, Redlock, Semaphore, Leader and
compute_once shared by the tasks of one loop.

The asyncio twin of tests/integration/test_shared_objects.py: a ``Lock`` or
``Redlock`` object's tasks take turns, a ``Semaphore`` object refuses a second task,
a ``Leader`` runs once at a time, ``compute_once`` calls are independent. Holds are
recorded with the token each holder believed it had (``time.monotonic()`` on entry
and exit): no two holds of one name overlap, no token is held twice.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import redis.asyncio
from helpers import until
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockworker import AlreadyHeld, ConcurrentUse, aio
from lockworker.aio.lock import Lock
from lockworker.aio.once import compute_once
from lockworker.aio.redlock import Redlock
from lockworker.aio.semaphore import Semaphore
from lockworker.testing import RedisServer

T = TypeVar("T")


@dataclass(frozen=True)
class Hold:
    name: str
    token: int | None
    entered: float
    left: float


def violations(holds: list[Hold]) -> list[str]:
    found = []
    for name, group in itertools.groupby(sorted(holds, key=lambda h: h.name), lambda h: h.name):
        ordered = sorted(group, key=lambda h: h.entered)
        found += [f"{a} overlaps {b}" for a, b in itertools.pairwise(ordered)
                  if b.entered < a.left]
        tokens = [h.token for h in ordered]
        found += [f"{name}: token changed under its holder" for t in tokens if t is None]
        if len(set(tokens)) != len(tokens):
            found.append(f"{name}: a token held twice: {tokens}")
    return found


def play(server: RedisServer, scenario: Callable[[redis.asyncio.Redis], Awaitable[T]]) -> T:
    async def main() -> T:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            return await asyncio.wait_for(scenario(client), 20)
        finally:
            await client.aclose()

    return asyncio.run(main())


Step = tuple[int, str, float]
STEPS = st.tuples(
    st.integers(0, 2), st.sampled_from(["with", "try", "timed"]), st.sampled_from([0.0, 0.002])
)


async def use(locks: dict[int, Any], steps: list[Step], holds: list[Hold]) -> None:
    for index, how, work in steps:
        lock = locks[index]
        if how == "with":
            await lock.__aenter__()
            got = True
        else:
            got = await (lock.acquire(blocking=False) if how == "try"
                         else lock.acquire(timeout=0.05))
        if not got:
            continue
        entered, token = time.monotonic(), lock.token
        await asyncio.sleep(work)
        same = lock.token == token and lock.held
        left = time.monotonic()
        await lock.release()
        holds.append(Hold(str(index), token if same else None, entered, left))


@pytest.mark.parametrize("kind", ["lock", "redlock"])
@settings(max_examples=12, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(plan=st.lists(st.lists(STEPS, min_size=1, max_size=6), min_size=2, max_size=5))
def test_tasks_sharing_lock_objects_never_overlap_and_never_share_a_token(
    redis_server: RedisServer, kind: str, plan: list[list[Step]]
) -> None:
    namespace = f"shared-{time.monotonic_ns()}"

    async def scenario(client: redis.asyncio.Redis) -> None:
        def make(index: int) -> Any:
            if kind == "lock":
                return Lock(client, f"res{index}", namespace=namespace, ttl=10.0)
            return Redlock([client], f"res{index}", namespace=namespace, ttl=10.0,
                           retry_delay=0.01)

        locks = {i: make(i) for i in range(3)}
        holds: list[Hold] = []
        await asyncio.gather(*(use(locks, steps, holds) for steps in plan))
        assert not violations(holds), violations(holds)
        assert all(not lock.held for lock in locks.values())
        wanted = sum(1 for steps in plan for _, how, _ in steps if how == "with")
        assert len(holds) >= wanted

    play(redis_server, scenario)


def test_a_task_holding_a_shared_lock_cannot_take_it_again_but_others_wait(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(client: redis.asyncio.Redis) -> None:
        lock = Lock(client, "res", namespace=namespace, ttl=10.0)
        assert await lock.acquire()
        first = lock.token
        with pytest.raises(AlreadyHeld):
            await lock.acquire()
        assert not await asyncio.create_task(lock.acquire(blocking=False))
        began = time.monotonic()
        assert not await asyncio.create_task(lock.acquire(timeout=0.1))
        assert time.monotonic() - began >= 0.1
        # A waiter cancelled in its turn's queue leaves it; the next one is served.
        cancelled = asyncio.create_task(lock.acquire())
        waiting = asyncio.create_task(lock.acquire())
        await until(lambda: len(lock._turns._queue) == 2)
        cancelled.cancel()
        await until(lambda: len(lock._turns._queue) == 1)
        assert lock.token == first
        await lock.release()
        assert await waiting and lock.held and lock.token > first
        assert not await lock.acquire(blocking=False)  # ``waiting``'s hold, not ours
        await lock.release()  # any task may release, as with an asyncio.Lock
        assert not lock.held and not await lock.locked()

    play(redis_server, scenario)


def test_a_shared_semaphore_refuses_another_task_while_it_acquires_or_holds(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(client: redis.asyncio.Redis) -> None:
        other = Semaphore(client, "pool", 1, namespace=namespace, ttl=10.0)
        shared = Semaphore(client, "pool", 1, namespace=namespace, ttl=10.0)
        assert await other.acquire()
        waiting = asyncio.create_task(shared.acquire(timeout=10.0))
        await until(lambda: shared._turns._user is not None)
        with pytest.raises(ConcurrentUse, match="another task"):
            await shared.acquire(blocking=False)
        await other.release()
        assert await waiting and shared.held
        with pytest.raises(ConcurrentUse):  # held by that task
            await shared.acquire()
        assert await shared.holders() == 1
        await shared.release()
        assert await shared.holders() == 0
        async with shared:
            with pytest.raises(AlreadyHeld):
                await shared.acquire()

    play(redis_server, scenario)


def test_tasks_racing_on_one_semaphore_never_hold_two_permits_through_it(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(client: redis.asyncio.Redis) -> None:
        shared = Semaphore(client, "pool", 8, namespace=namespace, ttl=10.0)
        holds: list[Hold] = []

        async def run() -> None:
            for _ in range(5):
                try:
                    got = await shared.acquire(timeout=1.0)
                except ConcurrentUse:
                    await asyncio.sleep(0)
                    continue
                assert got
                entered = time.monotonic()
                await asyncio.sleep(0.001)
                left = time.monotonic()
                await shared.release()
                holds.append(Hold("pool", len(holds), entered, left))

        await asyncio.gather(*(run() for _ in range(6)))
        assert not violations(holds) and holds
        assert await shared.holders() == 0 and not shared.held

    play(redis_server, scenario)


def test_an_asyncio_leader_object_runs_once_at_a_time(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(client: redis.asyncio.Redis) -> None:
        entered: list[int] = []

        async def lead(term: aio.AsyncTerm) -> None:
            entered.append(term.token)
            while not await term.wait(0.05):
                pass

        leader = aio.Leader(client, name=namespace, on_acquired=lead, handle_signals=False,
                            lock_timeout=2.0)
        first = asyncio.create_task(leader.run())
        await until(lambda: entered)
        with pytest.raises(ConcurrentUse):
            await leader.run()
        assert not first.done() and len(entered) == 1
        leader.stop()
        await first
        assert len(entered) == 1 and await aio.Leader.current(client, namespace) is None

    play(redis_server, scenario)


@settings(max_examples=8, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(keys=st.lists(st.sampled_from("abc"), min_size=2, max_size=8))
def test_compute_once_from_many_tasks_computes_each_key_once(
    redis_server: RedisServer, keys: list[str]
) -> None:
    namespace = f"once-{time.monotonic_ns()}"
    calls: dict[str, int] = {}

    def fn(key: str) -> Callable[[], Any]:
        async def compute() -> Any:
            calls[key] = calls.get(key, 0) + 1
            await asyncio.sleep(0.01)
            return {"key": key, "n": calls[key]}
        return compute

    async def scenario(client: redis.asyncio.Redis) -> list[Any]:
        return list(await asyncio.gather(
            *(compute_once(client, k, fn(k), ttl=30, namespace=namespace) for k in keys)
        ))

    results = play(redis_server, scenario)
    assert calls == {k: 1 for k in set(keys)}
    assert results == [{"key": k, "n": 1} for k in keys]
