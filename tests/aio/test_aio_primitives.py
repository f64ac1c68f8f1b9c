"""lockworker.aio's Lock, Semaphore and compute_once beside the sync ones.

Each test is a plain function running one scenario coroutine (:func:`play`), with its
clients made inside it: a ``redis.asyncio.Redis`` (bytes replies) and a sync client
(``decode_responses=True``). A scenario parametrised over ``SIDES`` makes its objects
with :meth:`Env.lock` (or ``semaphore``, ``compute_once``) and calls them through
:func:`do`: awaited on the asyncio side, in a thread on the sync side, so one scenario
asserts both. Mixed scenarios put sync holders (threads) and asyncio holders (tasks) on
one name and check what they recorded: ``time.monotonic()`` on entry and exit of every
critical section, which must never overlap (or exceed the semaphore's limit). Waits are
on conditions with deadlines, never fixed sleeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from helpers import until

from lockworker import AcquireTimeout, InvalidConfig, LockLost, NotHeld
from lockworker.aio.lock import Lock as AsyncLock
from lockworker.aio.once import compute_once as acompute_once
from lockworker.aio.semaphore import Semaphore as AsyncSemaphore
from lockworker.aio.wake import AsyncWaits
from lockworker.primitives import AlreadyHeld, Lock, Semaphore, compute_once
from lockworker.runtime.wake import CONFIRM_TIMEOUT
from lockworker.testing import Cluster, RedisServer, capture_events

T = TypeVar("T")

SIDES = ("sync", "async")
TTL = 30.0
PROMPT = 10.0
"""Generous bound for what should take milliseconds, far below ``TTL``: a handover
within it came from a grant or a message, not from an expiry."""


@dataclass
class Env:
    server: RedisServer
    namespace: str
    sync: redis.Redis
    aio: redis.asyncio.Redis

    def lock(self, side: str, name: str = "res", **kwargs: Any) -> Any:
        kwargs.setdefault("namespace", self.namespace)
        return (Lock(self.sync, name, **kwargs) if side == "sync"
                else AsyncLock(self.aio, name, **kwargs))

    def semaphore(self, side: str, limit: int = 2, name: str = "pool", **kwargs: Any) -> Any:
        kwargs.setdefault("namespace", self.namespace)
        return (Semaphore(self.sync, name, limit, **kwargs) if side == "sync"
                else AsyncSemaphore(self.aio, name, limit, **kwargs))

    async def compute_once(self, side: str, key: str, fn: Callable[[], Any], **kwargs: Any) -> Any:
        kwargs.setdefault("namespace", self.namespace)
        if side == "sync":
            return await asyncio.to_thread(compute_once, self.sync, key, fn, **kwargs)
        return await acompute_once(self.aio, key, fn, **kwargs)

    def queued(self, primitive: Any) -> int:
        return int(self.sync.zcard(primitive.keys.extra("queue")))


def play(server: RedisServer, namespace: str, scenario: Callable[[Env], Awaitable[T]]) -> T:
    """Run ``scenario`` on a new loop with fresh clients, closed afterwards."""

    async def main() -> T:
        # Sync holders block in threads: more of them than the default pool has.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=16))
        env = Env(server, namespace, server.client(decode_responses=True),
                  redis.asyncio.Redis(host="127.0.0.1", port=server.port))
        try:
            return await scenario(env)
        finally:
            await env.aio.aclose()
            env.sync.close()

    return asyncio.run(main())


async def do(obj: Any, method: str, *args: Any, **kwargs: Any) -> Any:
    """``obj.method(...)``: awaited on an asyncio object, in a thread on a sync one."""
    call = getattr(obj, method)
    if inspect.iscoroutinefunction(call):
        return await call(*args, **kwargs)
    return await asyncio.to_thread(call, *args, **kwargs)


@contextlib.asynccontextmanager
async def holding(obj: Any) -> AsyncIterator[Any]:
    """``async with obj`` on the asyncio side, ``with obj`` (in threads) on the sync one."""
    if hasattr(obj, "__aenter__"):
        async with obj:
            yield obj
    else:
        await asyncio.to_thread(obj.__enter__)
        try:
            yield obj
        finally:
            await asyncio.to_thread(obj.__exit__, None, None, None)




def leftovers(env: Env, lock: Any) -> list[str]:
    """Keys of ``lock`` other than its token counter: none once nobody holds or waits."""
    keys = sorted(str(k) for k in env.sync.scan_iter(match=lock.keys.extra("*")))
    return [k for k in keys if k != lock.keys.state]


def renewals(obj: Any) -> Any:
    """The object's background renewal (thread or task), None when it renews nothing."""
    return obj._heartbeat if hasattr(obj, "_heartbeat") else obj._renewals


# -- Lock, the same scenario on each side ----------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_lock_acquire_release_tokens_and_states(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        a, b = env.lock(side), env.lock(side)
        assert a.token is None and not await do(a, "locked")
        assert await do(a, "acquire")
        first = a.token
        assert await do(a, "locked") and await do(a, "owned") and not await do(b, "owned")
        assert a.held and not a.lost
        assert not await do(b, "acquire", blocking=False)
        if side == "async":
            # A sync call runs in any pool thread here, and from another thread than the
            # holder's an acquire waits its turn; test_lock.py refuses the holder's own.
            with pytest.raises(AlreadyHeld):
                await do(a, "acquire")
        await do(a, "release")
        assert a.token == first and not a.held and not await do(a, "locked")
        with pytest.raises(NotHeld):
            await do(a, "release")
        with pytest.raises(NotHeld):
            await do(a, "extend")
        assert await do(b, "acquire", blocking=False)
        assert b.token > first
        await do(b, "release")
        assert leftovers(env, a) == []

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_lock_expired_is_lost_on_release_and_extend(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        lock, other = env.lock(side, ttl=0.1), env.lock(side, ttl=5.0)
        assert await do(lock, "acquire")
        token = lock.token
        assert await do(other, "acquire", timeout=5.0)  # woken by the expiry
        assert lock.lost
        with capture_events() as logged, pytest.raises(LockLost) as info:
            await do(lock, "release")
        assert info.value.token == token and not lock.held
        assert [e["event"] for e in logged] == ["lock.lost"]
        await do(other, "extend", 7.0)
        assert env.sync.pttl(other.keys.lock) > 5000
        env.sync.delete(other.keys.lock)  # as if it had expired
        with pytest.raises(LockLost):
            await do(other, "extend")
        assert not other.held

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_lock_context_manager_times_out_then_holds_and_releases(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        holder = env.lock(side)
        assert await do(holder, "acquire")
        started = time.monotonic()
        with pytest.raises(AcquireTimeout):
            async with holding(env.lock(side, timeout=0.2)):
                pytest.fail("entered a held lock")
        assert 0.15 <= time.monotonic() - started < PROMPT
        assert env.queued(holder) == 0  # the timed-out waiter left its place
        await do(holder, "release")
        async with holding(env.lock(side, timeout=1.0)) as lock:
            assert await do(lock, "owned")
        assert not lock.held and not await do(lock, "locked")

    play(redis_server, namespace, scenario)


@pytest.mark.parametrize("side", SIDES)
def test_lock_auto_renew_outlives_its_ttl_stops_at_release_and_reports_a_loss(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        lock, other = env.lock(side, ttl=0.3, auto_renew=True), env.lock(side)
        assert await do(lock, "acquire")
        assert not await do(other, "acquire", timeout=0.8)  # over 2.5 TTLs: renewed
        assert await do(lock, "owned") and not lock.lost
        await do(lock, "release")
        assert renewals(lock) is None
        with capture_events() as logged:
            assert await do(lock, "acquire")
            env.sync.delete(lock.keys.lock)  # taken away behind its back
            await until(lambda: lock.lost)
        assert "lock.lost" in [e["event"] for e in logged]
        with pytest.raises(LockLost):
            await do(lock, "release")

    play(redis_server, namespace, scenario)


def test_lock_events_and_keys_are_the_same_on_both_sides(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> list[list[tuple[str, list[str]]]]:
        seen = []
        for side in SIDES:
            lock = env.lock(side)
            with capture_events() as logged:
                assert await do(lock, "acquire")
                await do(lock, "release")
            seen.append([(e["event"], sorted(e)) for e in logged])
            assert logged[0]["token"] == logged[1]["token"] == lock.token
        assert env.lock("sync").keys == env.lock("async").keys
        return seen

    sync_events, async_events = play(redis_server, namespace, scenario)
    assert sync_events == async_events
    assert [event for event, _ in sync_events] == ["lock.acquired", "lock.released"]


# -- Lock, sync and asyncio holders on one name ----------------------------------------


def test_sync_and_async_locks_exclude_each_other_over_a_recorded_history(
    redis_server: RedisServer, namespace: str
) -> None:
    """Two threads and two tasks contend for one lock for 0.7 s; every critical
    section (entry and exit on the monotonic clock, with its token) is recorded."""
    sections: list[tuple[float, float, int, str]] = []
    record = threading.Lock()

    def enter_and_exit(lock: Any, who: str) -> None:
        enter = time.monotonic()
        token = lock.token
        exit_ = time.monotonic()
        with record:
            sections.append((enter, exit_, token, who))

    async def scenario(env: Env) -> None:
        stop_at = time.monotonic() + 0.7

        def thread(who: str) -> None:
            client = env.server.client(decode_responses=True)
            lock = Lock(client, "shared", namespace=env.namespace, ttl=TTL)
            while time.monotonic() < stop_at:
                assert lock.acquire(timeout=PROMPT)
                enter_and_exit(lock, who)
                lock.release()
            client.close()

        async def task(who: str) -> None:
            lock = AsyncLock(env.aio, "shared", namespace=env.namespace, ttl=TTL)
            while time.monotonic() < stop_at:
                assert await lock.acquire(timeout=PROMPT)
                enter_and_exit(lock, who)
                await lock.release()

        await asyncio.gather(
            asyncio.to_thread(thread, "sync-0"), asyncio.to_thread(thread, "sync-1"),
            task("async-0"), task("async-1"),
        )

    play(redis_server, namespace, scenario)
    by_token = sorted(sections, key=lambda s: s[2])
    assert len({s[2] for s in sections}) == len(sections), "a token was handed out twice"
    for before, after in itertools.pairwise(by_token):
        assert before[1] <= after[0], f"overlap: {before} and {after}"
    assert [s[2] for s in sorted(sections)] == [s[2] for s in by_token]
    counts = {who: sum(1 for s in sections if s[3] == who) for who in
              ("sync-0", "sync-1", "async-0", "async-1")}
    assert min(counts.values()) >= 3, counts  # first come, first served: all get turns
    kinds = [s[3].split("-")[0] for s in by_token]
    assert ("sync", "async") in set(itertools.pairwise(kinds))
    assert ("async", "sync") in set(itertools.pairwise(kinds))


def test_sync_and_async_waiters_are_granted_the_lock_in_order_of_arrival(
    redis_server: RedisServer, namespace: str
) -> None:
    """A sync holder, then waiters of alternating sides queued one after another: each
    release grants the next waiter at once (a 30 s TTL would show a missed grant)."""
    order: list[int] = []

    async def scenario(env: Env) -> None:
        holder = env.lock("sync", ttl=TTL)
        assert await do(holder, "acquire")

        async def waiter(i: int, lock: Any) -> None:
            assert await do(lock, "acquire", timeout=PROMPT)
            order.append(i)
            await do(lock, "release")

        waiting = []
        for i in range(4):
            lock = env.lock(SIDES[(i + 1) % 2], ttl=TTL)  # async, sync, async, sync
            waiting.append(asyncio.create_task(waiter(i, lock)))
            await until(lambda n=i + 1: env.queued(holder) == n)  # type: ignore[misc]
        started = time.monotonic()
        await do(holder, "release")
        await asyncio.gather(*waiting)
        assert time.monotonic() - started < PROMPT < TTL
        assert leftovers(env, holder) == []

    play(redis_server, namespace, scenario)
    assert order == [0, 1, 2, 3]


# -- Lock, cancellation ---------------------------------------------------------------


class _Deaf(AsyncLock):
    """An asyncio Lock that, once queued, stops reading its grant list: a grant pushed
    to it lies there unread, as when its task is cancelled with the reply in flight."""

    queued = asyncio.Event  # replaced per object by an event of the running loop

    async def _await_grant(self, *_: Any) -> tuple[int, int] | None:
        self.queued.set()  # type: ignore[call-arg]
        await asyncio.Event().wait()  # until cancelled
        return None


def test_a_cancelled_waiter_passes_on_a_grant_that_reached_it(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        holder = env.lock("sync", ttl=TTL)
        assert await do(holder, "acquire")
        deaf = _Deaf(env.aio, "res", namespace=env.namespace, ttl=TTL)
        deaf.queued = asyncio.Event()  # type: ignore[assignment]
        cancelled = asyncio.create_task(deaf.acquire())
        await asyncio.wait_for(deaf.queued.wait(), PROMPT)  # type: ignore[call-arg]
        after = env.lock("sync", ttl=TTL)
        behind = asyncio.create_task(do(after, "acquire", timeout=PROMPT))
        await until(lambda: env.queued(holder) == 2)
        await do(holder, "release")  # grants the lock to the deaf waiter
        assert env.sync.llen(env.sync.keys(deaf.keys.extra("grant:*"))[0]) == 1
        cancelled.cancel()
        with pytest.raises(asyncio.CancelledError):
            await cancelled
        started = time.monotonic()
        assert await behind  # passed on at once, not after the deaf waiter's TTL
        assert time.monotonic() - started < PROMPT < TTL
        assert after.token == holder.token + 2 and not deaf.held
        await do(after, "release")
        assert leftovers(env, holder) == []

    play(redis_server, namespace, scenario)


def test_a_waiter_cancelled_while_blocked_leaves_the_queue(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        holder = env.lock("async", ttl=TTL)
        assert await holder.acquire()
        waiter = env.lock("async", ttl=TTL)
        task = asyncio.create_task(waiter.acquire())
        await until(lambda: env.queued(holder) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert env.queued(holder) == 0 and not waiter.held
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(waiter.acquire(), 0.2)
        assert env.queued(holder) == 0
        await holder.release()  # nobody queued: the lock is freed, granted to no one
        assert not await holder.locked() and leftovers(env, holder) == []

    play(redis_server, namespace, scenario)


def test_a_task_cancelled_inside_async_with_releases_even_if_cancelled_again(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        entered = asyncio.Event()

        async def hold(lock: AsyncLock) -> None:
            async with lock:
                entered.set()
                await asyncio.Event().wait()  # until cancelled

        for again in (False, True):
            lock = env.lock("async", ttl=TTL)
            key = lock.keys.lock
            entered.clear()
            with capture_events() as logged:
                task = asyncio.create_task(hold(lock))
                await asyncio.wait_for(entered.wait(), PROMPT)
                assert await lock.owned()
                task.cancel()
                if again:
                    await asyncio.sleep(0)  # into __aexit__, awaiting the release
                    task.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task
                await until(lambda: not env.sync.exists(key))  # noqa: B023 (awaited here)
                await until(lambda: "lock.released" in [e["event"] for e in logged])
            assert not lock.held

    play(redis_server, namespace, scenario)


# -- Semaphore --------------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_semaphore_limit_release_and_refusals(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    async def scenario(env: Env) -> None:
        a, b, c = (env.semaphore(side) for _ in range(3))
        with pytest.raises(NotHeld):
            await do(a, "release")
        assert await do(a, "acquire", blocking=False) and await do(b, "acquire", blocking=False)
        assert not await do(c, "acquire", blocking=False)
        assert await do(a, "holders") == 2
        with pytest.raises(InvalidConfig, match="limit=5"):
            await do(env.semaphore(side, limit=5), "acquire", blocking=False)
        assert not await do(c, "acquire", timeout=0.2)
        assert env.queued(a) == 0  # the timed-out waiter left
        await do(a, "release")
        async with holding(env.semaphore(side, timeout=1.0)) as held:
            assert held.held and await do(held, "holders") == 2
        await do(b, "release")
        assert await do(a, "holders") == 0

    play(redis_server, namespace, scenario)


def test_sync_and_async_holders_never_exceed_the_semaphore_limit(
    redis_server: RedisServer, namespace: str
) -> None:
    """Limit 2; two threads and three tasks take permits for 0.7 s. At no moment
    do more than two recorded sections overlap (a recorded section lies inside the
    permit's hold, so this bounds the holders too)."""
    sections: list[tuple[float, float, str]] = []

    async def scenario(env: Env) -> None:
        stop_at = time.monotonic() + 0.7

        def thread(who: str) -> None:
            client = env.server.client(decode_responses=True)
            sem = Semaphore(client, "limit", 2, namespace=env.namespace, ttl=TTL)
            while time.monotonic() < stop_at:
                with sem:
                    sections.append((time.monotonic(), time.monotonic(), who))
            client.close()

        async def task(who: str) -> None:
            sem = AsyncSemaphore(env.aio, "limit", 2, namespace=env.namespace, ttl=TTL)
            while time.monotonic() < stop_at:
                async with sem:
                    enter = time.monotonic()
                    await asyncio.sleep(0)  # let the other tasks run while holding
                    sections.append((enter, time.monotonic(), who))

        await asyncio.gather(
            asyncio.to_thread(thread, "sync-0"), asyncio.to_thread(thread, "sync-1"),
            *(task(f"async-{i}") for i in range(3)),
        )

    play(redis_server, namespace, scenario)
    changes = sorted([(s[0], 1) for s in sections] + [(s[1], -1) for s in sections],
                     key=lambda change: (change[0], change[1]))
    inside = list(itertools.accumulate(change for _, change in changes))
    assert max(inside) <= 2
    assert {s[2].split("-")[0] for s in sections} == {"sync", "async"}
    assert len(sections) > 20


def test_semaphore_cancelled_waiter_leaves_and_cancelled_holder_gives_back(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        holder = env.semaphore("sync", limit=1)
        assert await do(holder, "acquire")
        waiter = env.semaphore("async", limit=1)
        task = asyncio.create_task(waiter.acquire())
        await until(lambda: env.queued(holder) == 1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert env.queued(holder) == 0 and not waiter.held
        await do(holder, "release")
        entered = asyncio.Event()

        async def hold() -> None:
            async with waiter:
                entered.set()
                await asyncio.Event().wait()  # until cancelled

        task = asyncio.create_task(hold())
        await asyncio.wait_for(entered.wait(), PROMPT)
        assert await waiter.holders() == 1
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert await waiter.holders() == 0 and not waiter.held

    play(redis_server, namespace, scenario)


def test_tasks_that_listen_at_once_on_a_new_hub_are_confirmed_at_once(
    redis_server: RedisServer, namespace: str
) -> None:
    """The first task subscribes (its connection still being made) while the others
    start the reader: each enters on the server's confirmation, not on the timeout."""

    async def scenario(env: Env) -> float:
        waits = AsyncWaits(env.aio)
        started = time.monotonic()

        async def enter() -> float:
            async with waits.listen(f"{env.namespace}:channel") as event:
                assert not event.is_set()  # confirmed, not given up on
                return time.monotonic() - started

        return max(await asyncio.gather(*(enter() for _ in range(3))))

    assert play(redis_server, namespace, scenario) < CONFIRM_TIMEOUT / 2


# -- compute_once ----------------------------------------------------------------------


@pytest.mark.parametrize("side", SIDES)
def test_compute_once_computes_once_serves_the_cache_and_never_caches_errors(
    redis_server: RedisServer, namespace: str, side: str
) -> None:
    calls: list[int] = []

    def fn() -> dict[str, Any]:
        calls.append(1)
        return {"rows": [1, 2], "ok": True}

    def boom() -> int:
        raise ValueError("backend down")

    async def scenario(env: Env) -> None:
        with capture_events() as logged:
            first = await env.compute_once(side, "k", fn, ttl=5.0)
        assert first == await env.compute_once(side, "k", fn, ttl=5.0) == {"rows": [1, 2],
                                                                          "ok": True}
        assert calls == [1] and "once.computed" in [e["event"] for e in logged]
        with pytest.raises(ValueError, match="backend down"):
            await env.compute_once(side, "e", boom, ttl=5.0)
        assert env.sync.get(f"lw:once:{env.namespace}:{{e}}:value") is None
        with pytest.raises(TypeError, match="JSON"):
            await env.compute_once(side, "e", lambda: {1, 2}, ttl=5.0)
        assert await env.compute_once(side, "e", lambda: 7, ttl=5.0) == 7

    play(redis_server, namespace, scenario)


def test_async_compute_once_awaits_a_coroutine_function(
    redis_server: RedisServer, namespace: str
) -> None:
    async def build() -> list[int]:
        await asyncio.sleep(0)
        return [4, 2]

    async def scenario(env: Env) -> None:
        assert await acompute_once(env.aio, "c", build, ttl=5.0, namespace=env.namespace) == [
            4, 2]
        assert await env.compute_once("sync", "c", lambda: None, ttl=5.0) == [4, 2]

    play(redis_server, namespace, scenario)


def test_compute_once_computes_once_for_sync_and_async_callers(
    redis_server: RedisServer, namespace: str
) -> None:
    """Three threads and three tasks at once: one computes, the others are woken by
    the stored value (a 30 s lock would show a missed wake-up)."""
    calls: list[float] = []
    release = threading.Event()

    def fn() -> list[int]:
        calls.append(time.monotonic())
        assert release.wait(PROMPT)
        return [42]

    async def scenario(env: Env) -> list[Any]:
        def thread() -> Any:
            client = env.server.client(decode_responses=True)
            try:
                return compute_once(client, "hot", fn, ttl=TTL, lock_timeout=TTL,
                                    namespace=env.namespace)
            finally:
                client.close()

        async def task() -> Any:
            # fn blocks on a threading.Event: a thread keeps the loop free meanwhile.
            return await acompute_once(env.aio, "hot", lambda: asyncio.to_thread(fn),
                                       ttl=TTL, lock_timeout=TTL, namespace=env.namespace)

        callers = [asyncio.to_thread(thread) for _ in range(3)] + [task() for _ in range(3)]
        results = asyncio.gather(*callers)
        wake = f"lw:once:{env.namespace}:{{hot}}:wake"
        await until(lambda: calls and env.sync.pubsub_numsub(wake)[0][1] >= 3)
        stored = time.monotonic()
        release.set()
        values = await results
        assert time.monotonic() - stored < PROMPT < TTL
        return list(values)

    assert play(redis_server, namespace, scenario) == [[42]] * 6
    assert len(calls) == 1


def test_a_cancelled_computing_task_lets_a_waiter_compute(
    redis_server: RedisServer, namespace: str
) -> None:
    async def scenario(env: Env) -> None:
        started = asyncio.Event()

        async def forever() -> int:
            started.set()
            await asyncio.Event().wait()  # until cancelled
            return 0

        with capture_events() as logged:
            computing = asyncio.create_task(
                acompute_once(env.aio, "k", forever, ttl=5.0, lock_timeout=TTL,
                              namespace=env.namespace)
            )
            await asyncio.wait_for(started.wait(), PROMPT)
            waiting = asyncio.create_task(env.compute_once("sync", "k", lambda: "mine", ttl=5.0))
            wake = f"lw:once:{env.namespace}:{{k}}:wake"
            await until(lambda: env.sync.pubsub_numsub(wake)[0][1] >= 2)
            begun = time.monotonic()
            computing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await computing
            assert await waiting == "mine"
            assert time.monotonic() - begun < PROMPT < TTL
        failed = [e for e in logged if e["event"] == "once.failed"]
        assert [e["error"] for e in failed] == ["CancelledError"]

    play(redis_server, namespace, scenario)


# -- arguments ------------------------------------------------------------------------


REFUSED: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = [
    ("lock", (), {"ttl": 0}),
    ("lock", (), {"ttl": "1"}),
    ("lock", (), {"auto_renew": 1}),
    ("lock", (), {"timeout": -1}),
    ("lock", (), {"namespace": ""}),
    ("lock", (), {"name": ""}),
    ("semaphore", (0,), {}),
    ("semaphore", (1.5,), {}),
    ("semaphore", (2,), {"ttl": -1}),
    ("semaphore", (2,), {"timeout": float("nan")}),
    ("once", (), {"ttl": 0}),
    ("once", (), {"ttl": 1, "lock_timeout": -1}),
    ("once", (), {"ttl": 1, "timeout": "x"}),
    ("once", (), {"ttl": 1, "codec": object()}),
    ("once", (), {"ttl": 1, "fn": 3}),
    ("once", (), {"ttl": 1, "key": ""}),
]


def test_bad_arguments_are_refused_alike_on_both_sides(
    redis_server: RedisServer, namespace: str
) -> None:
    async def refusal(env: Env, side: str, kind: str, args: tuple[Any, ...],
                      kwargs: dict[str, Any]) -> tuple[type[BaseException], str]:
        options = dict(kwargs)
        try:
            if kind == "lock":
                name = options.pop("name", "x")
                await do(env.lock(side, name, **options), "acquire", timeout=0)
            elif kind == "semaphore":
                env.semaphore(side, *args, **options)
            else:
                key, fn = options.pop("key", "k"), options.pop("fn", lambda: 1)
                await env.compute_once(side, key, fn, **options)
        except (InvalidConfig, TypeError) as exc:
            return type(exc), str(exc)
        pytest.fail(f"{side} accepted {kind} {args} {kwargs}")

    async def scenario(env: Env) -> None:
        for kind, args, kwargs in REFUSED:
            sync = await refusal(env, "sync", kind, args, kwargs)
            assert sync == await refusal(env, "async", kind, args, kwargs), (kind, args, kwargs)
        with pytest.raises(InvalidConfig, match="timeout"):
            await env.lock("async").acquire(timeout="soon")
        for make in (lambda c: AsyncLock(c, "x"), lambda c: AsyncSemaphore(c, "x", 1)):
            with pytest.raises(InvalidConfig, match=r"redis\.asyncio"):
                make(env.sync)
            with pytest.raises(InvalidConfig, match="client"):
                make("localhost")
        with pytest.raises(InvalidConfig, match=r"redis\.asyncio"):
            await acompute_once(env.sync, "k", lambda: 1, ttl=1.0)  # type: ignore[arg-type]

    play(redis_server, namespace, scenario)


# -- a cluster ------------------------------------------------------------------------


@pytest.mark.processes
def test_the_asyncio_primitives_on_a_cluster_beside_sync_ones(
    redis_cluster: Cluster, namespace: str
) -> None:
    """Through ``redis.asyncio.RedisCluster``: a lock handed over from a sync holder,
    a semaphore shared with a sync holder, and compute_once."""

    async def scenario() -> None:
        node = redis_cluster.masters[0]
        aclient = redis.asyncio.RedisCluster(host="127.0.0.1", port=node.port)
        sclient = redis_cluster.client(decode_responses=True, socket_timeout=2.0)
        try:
            holder = Lock(sclient, "handover", namespace=namespace, ttl=TTL)
            assert holder.acquire()
            waiter = AsyncLock(aclient, "handover", namespace=namespace, ttl=TTL)
            got = asyncio.create_task(waiter.acquire(timeout=PROMPT))
            await until(lambda: sclient.zcard(holder.keys.extra("queue")) == 1)
            await asyncio.to_thread(holder.release)
            assert await got and waiter.token == holder.token + 1
            await waiter.release()
            first = Semaphore(sclient, "pool", 1, namespace=namespace, ttl=TTL)
            assert first.acquire()
            second = AsyncSemaphore(aclient, "pool", 1, namespace=namespace, ttl=TTL)
            assert not await second.acquire(blocking=False)
            entered = asyncio.create_task(second.acquire(timeout=PROMPT))
            await until(lambda: sclient.zcard(first.keys.extra("queue")) == 1)
            await asyncio.to_thread(first.release)
            assert await entered and await second.holders() == 1
            await second.release()
            assert await acompute_once(aclient, "c", lambda: [1], ttl=5.0,
                                       namespace=namespace) == [1]
            assert compute_once(sclient, "c", lambda: [2], ttl=5.0, namespace=namespace) == [1]
        finally:
            await aclient.aclose()
            sclient.close()

    asyncio.run(scenario())
