"""lockworker.aio.Redlock over three real masters, beside the sync Redlock.

Each test runs one coroutine on a new loop with fresh clients (``redis.asyncio`` ones
with bytes replies, sync ones with ``decode_responses=True``). Critical sections are
recorded with ``time.monotonic()`` on entry and exit, and must never overlap; waits
are on conditions with deadlines.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import itertools
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, TypeVar

import pytest
import redis
import redis.asyncio
from helpers import until
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from lockworker import (
    AcquireTimeout,
    InvalidConfig,
    LockLost,
    NotHeld,
    QuorumNotReached,
    RedisUnavailable,
)
from lockworker import Redlock as SyncRedlock
from lockworker.aio import Redlock
from lockworker.aio.wake import hub_for as ahub_for
from lockworker.primitives import AlreadyHeld
from lockworker.runtime.wake import hub_for as shub_for
from lockworker.testing import RedisServer, capture_events

T = TypeVar("T")
PROMPT = 10.0
"""Generous bound for what takes milliseconds."""


@pytest.fixture(scope="module")
def masters() -> Iterator[list[RedisServer]]:
    servers = [RedisServer().start() for _ in range(3)]
    yield servers
    for s in servers:
        s.close()


def aclients(servers: list[RedisServer]) -> list[redis.asyncio.Redis]:
    """Fresh clients: a dead master costs a refused connection, never a retry."""
    return [
        redis.asyncio.Redis(host="127.0.0.1", port=s.port, socket_timeout=2.0,
                            socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0))
        for s in servers
    ]


def sclients(servers: list[RedisServer]) -> list[redis.Redis]:
    return [s.client(decode_responses=True, socket_timeout=2.0) for s in servers]


def play(scenario: Callable[[list[redis.asyncio.Redis]], Awaitable[T]],
         servers: list[RedisServer]) -> T:
    """Run ``scenario`` with fresh asyncio clients on a new loop, closed afterwards."""

    async def main() -> T:
        clients = aclients(servers)
        try:
            return await scenario(clients)
        finally:
            for c in clients:
                await c.aclose()

    return asyncio.run(main())


def test_acquire_release_tokens_and_states(masters: list[RedisServer], namespace: str) -> None:
    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        a = Redlock(clients, "r", ttl=5.0, namespace=namespace)
        b = Redlock(aclients(masters), "r", ttl=5.0, namespace=namespace, retry_count=0)
        assert a.token is None and not await a.locked()
        assert await a.acquire()
        first = a.token
        assert first is not None and a.held and not a.lost and 0 < a.validity <= 5.0
        assert await a.locked() and await a.owned() and not await b.owned()
        assert a.quorum == 2 and a.unreachable == {}
        assert not await b.acquire(blocking=False)
        assert not await b.acquire()  # one attempt: retry_count=0
        with pytest.raises(AlreadyHeld):
            await a.acquire()
        await a.extend(3.0)
        await a.release()
        assert a.token == first and not a.held and not await a.locked()
        with pytest.raises(NotHeld):
            await a.release()
        with pytest.raises(NotHeld):
            await a.extend()
        assert await b.acquire(blocking=False)
        assert b.token is not None and b.token > first
        await b.release()
        async with Redlock(clients, "r", ttl=5.0, namespace=namespace) as c:
            assert await c.owned() and c.token is not None and c.token > b.token
        assert not c.held and not await c.locked()
        with pytest.raises(AcquireTimeout):
            async with a, Redlock(clients, "r", namespace=namespace, timeout=0.1):
                pytest.fail("two holders")
        assert not a.held

    play(scenario, masters)


def test_expired_is_lost_and_auto_renew_keeps_it(
    masters: list[RedisServer], namespace: str
) -> None:
    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        lock = Redlock(clients, "r", ttl=0.2, namespace=namespace)
        assert await lock.acquire()
        token = lock.token
        other = Redlock(clients, "r", ttl=5.0, namespace=namespace, retry_delay=0.05)
        assert await other.acquire(timeout=5.0)
        with capture_events() as logged, pytest.raises(LockLost) as info:
            await lock.release()
        assert info.value.token == token and lock.token == token and not lock.held
        assert [e["event"] for e in logged] == ["lock.lost"]
        await other.release()
        renewed = Redlock(clients, "n", ttl=0.45, namespace=namespace, auto_renew=True)
        rival = Redlock(clients, "n", ttl=0.45, namespace=namespace, retry_delay=0.05)
        assert await renewed.acquire()
        assert not await rival.acquire(timeout=1.0)  # more than two ttls: renewed
        assert not renewed.lost and await renewed.owned()
        await renewed.release()
        assert renewed._renewals is None  # the renewal task is gone

    play(scenario, masters)


def test_tasks_and_threads_exclude_each_other_with_growing_tokens(
    masters: list[RedisServer], namespace: str
) -> None:
    """Three asyncio tasks and two sync threads on one Redlock: every critical section
    ends before the next begins, in the order of its fencing token."""
    rounds = 6
    sections: list[tuple[float, float, int]] = []
    record = threading.Lock()

    def section(token: int | None) -> None:
        enter = time.monotonic()
        time.sleep(0.002)  # the critical section's own work (in a thread)
        assert token is not None
        with record:
            sections.append((enter, time.monotonic(), token))

    def sync_contender() -> None:
        lock = SyncRedlock(sclients(masters), "x", ttl=10.0, namespace=namespace,
                           retry_delay=0.05, timeout=PROMPT)
        for _ in range(rounds):
            with lock:
                section(lock.token)

    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        async def task_contender() -> None:
            lock = Redlock(clients, "x", ttl=10.0, namespace=namespace, retry_delay=0.05,
                           timeout=PROMPT)
            for _ in range(rounds):
                async with lock:
                    enter = time.monotonic()
                    await asyncio.sleep(0.002)  # the critical section's own work
                    assert lock.token is not None
                    with record:
                        sections.append((enter, time.monotonic(), lock.token))

        await asyncio.gather(
            *(task_contender() for _ in range(3)),
            *(asyncio.to_thread(sync_contender) for _ in range(2)),
        )

    play(scenario, masters)
    assert len(sections) == 5 * rounds
    by_token = sorted(sections, key=lambda s: s[2])
    assert len({s[2] for s in sections}) == len(sections)
    for before, after in itertools.pairwise(by_token):
        assert before[1] <= after[0], f"two holders: {before} and {after}"


def test_a_waiter_is_woken_by_a_release_on_either_side(
    masters: list[RedisServer], namespace: str
) -> None:
    """retry_delay=8.0, so a random pause is uniform in [0, 8 s]: six handovers between
    an asyncio and a sync Redlock, each way, each under 2 s, are wake-ups (waiters left
    to their pauses would all be that quick once in a few thousand runs)."""
    taken: list[float] = []

    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        alock = Redlock(clients, "w", ttl=10.0, namespace=namespace, retry_delay=8.0)
        slock = SyncRedlock(sclients(masters), "w", ttl=10.0, namespace=namespace,
                            retry_delay=8.0)
        for _ in range(3):
            # asyncio waiter, sync holder
            assert await asyncio.to_thread(slock.acquire)
            waiter = asyncio.create_task(alock.acquire(timeout=PROMPT))
            await until(lambda w=waiter: waiting(alock) and not w.done())
            released = time.monotonic()
            await asyncio.to_thread(slock.release)
            assert await waiter
            taken.append(time.monotonic() - released)
            assert alock.token is not None and slock.token is not None
            assert alock.token > slock.token
            # sync waiter, asyncio holder
            thread = asyncio.create_task(asyncio.to_thread(slock.acquire, timeout=PROMPT))
            await until(lambda t=thread: waiting(slock) and not t.done())
            released = time.monotonic()
            await alock.release()
            assert await thread
            taken.append(time.monotonic() - released)
            await asyncio.to_thread(slock.release)

    play(scenario, masters)
    assert max(taken) < 2.0, taken


def waiting(lock: Any) -> bool:
    """``lock`` is between attempts, listening on every master's wake channel (through
    its side's hub; on the asyncio side, call it on the loop)."""
    if lock.held or lock._trying is not None:
        return False
    hub_for = ahub_for if isinstance(lock, Redlock) else shub_for
    return all(hub_for(c).subscribed(lock.keys.wake) for c in lock.clients)


def test_a_cancelled_waiter_and_a_cancelled_holder_leave_nothing(
    masters: list[RedisServer], namespace: str
) -> None:
    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        holder = Redlock(clients, "c", ttl=30.0, namespace=namespace)
        assert await holder.acquire()
        waiter = Redlock(aclients(masters), "c", ttl=30.0, namespace=namespace)
        task = asyncio.create_task(waiter.acquire(timeout=PROMPT))
        await until(lambda: waiting(waiter) and not task.done())
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert not waiter.held and waiter._trying is None
        await holder.release()
        # Cancelled mid-attempt, many times: never a grant left behind.
        for _ in range(20):
            attempt = asyncio.create_task(waiter.acquire(blocking=False))
            await asyncio.sleep(0)  # let it start its calls, then cancel it
            attempt.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await attempt
            if waiter.held:
                await waiter.release()
        third = Redlock(clients, "c", ttl=30.0, namespace=namespace, retry_count=0)
        assert await third.acquire(blocking=False)
        await third.release()

        async def hold_then_cancelled(started: asyncio.Event) -> None:
            async with Redlock(clients, "c", ttl=30.0, namespace=namespace):
                started.set()
                await asyncio.Event().wait()

        started = asyncio.Event()
        inside = asyncio.create_task(hold_then_cancelled(started))
        await started.wait()
        inside.cancel()
        with pytest.raises(asyncio.CancelledError):
            await inside
        assert not await third.locked()

    play(scenario, masters)


@pytest.fixture
def trio() -> Iterator[list[RedisServer]]:
    """Three masters of this test alone (it kills some)."""
    servers = [RedisServer().start() for _ in range(3)]
    yield servers
    for s in servers:
        s.close()


def test_quorum_lost_is_a_clear_error_and_one_master_down_is_not(
    trio: list[RedisServer], namespace: str
) -> None:
    trio[2].kill()

    async def one_down(clients: list[redis.asyncio.Redis]) -> None:
        lock = Redlock(clients, "q", ttl=5.0, namespace=namespace)
        with capture_events() as logged:
            assert await lock.acquire(blocking=False)
        dead = f"127.0.0.1:{trio[2].port}"
        assert list(lock.unreachable) == [dead] and await lock.owned()
        assert [e["outcome"] for e in logged if e["event"] == "redlock.unreachable"] == [
            "acquired"
        ]
        await lock.release()

    play(one_down, trio)
    trio[1].kill()

    async def two_down(clients: list[redis.asyncio.Redis]) -> None:
        lock = Redlock(clients, "q", ttl=5.0, namespace=namespace, retry_delay=0.01)
        with pytest.raises(QuorumNotReached, match="only 1 of 3") as refused:
            await lock.acquire(blocking=False)
        assert isinstance(refused.value, RedisUnavailable)
        for port in (trio[1].port, trio[2].port):
            assert f"127.0.0.1:{port}" in str(refused.value)
        with pytest.raises(QuorumNotReached):
            await lock.acquire(timeout=0.2)
        assert not lock.held

    play(two_down, trio)


@pytest.mark.parametrize(
    "kwargs",
    [{"ttl": 0}, {"retry_count": -1}, {"retry_delay": -1}, {"drift_factor": 1.5},
     {"timeout": -1}, {"auto_renew": "yes"}, {"namespace": ""}],
)
def test_bad_arguments_are_refused_as_on_the_sync_side(
    masters: list[RedisServer], kwargs: dict[str, Any]
) -> None:
    with pytest.raises(InvalidConfig) as sync_error:
        SyncRedlock(sclients(masters), "x", **kwargs)

    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        with pytest.raises(InvalidConfig) as async_error:
            Redlock(clients, "x", **kwargs)
        assert str(async_error.value) == str(sync_error.value)

    play(scenario, masters)


def test_a_timeout_without_blocking_is_refused_on_both_sides(
    masters: list[RedisServer], namespace: str
) -> None:
    """As ``threading.Lock().acquire(False, 1)`` raises, and as ``Lock`` does: the
    timeout of a single try could never apply."""
    slock = SyncRedlock(sclients(masters), "x", namespace=namespace, timeout=5.0)
    with pytest.raises(InvalidConfig, match="timeout must be None when blocking=False") as e:
        slock.acquire(blocking=False, timeout=1)
    assert not slock.held

    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        lock = Redlock(clients, "x", namespace=namespace, timeout=5.0)
        with pytest.raises(InvalidConfig) as async_error:
            await lock.acquire(blocking=False, timeout=1)
        assert str(async_error.value) == str(e.value)
        assert await lock.acquire(blocking=False)  # the constructor's default is fine
        await lock.release()

    play(scenario, masters)


def test_the_wrong_kind_of_client_is_refused_naming_the_twin(
    masters: list[RedisServer],
) -> None:
    with pytest.raises(InvalidConfig, match=r"clients\[0\].*lockworker\.Redlock"):
        Redlock(sclients(masters), "x")  # type: ignore[arg-type]

    async def scenario(clients: list[redis.asyncio.Redis]) -> None:
        with pytest.raises(InvalidConfig, match=r"clients\[0\].*lockworker\.aio\.Redlock"):
            SyncRedlock(clients, "x")  # type: ignore[arg-type]
        with pytest.raises(InvalidConfig, match="clients"):
            Redlock([], "x")
        with pytest.raises(InvalidConfig, match="clients"):
            Redlock("redis://x", "x")  # type: ignore[arg-type]

    play(scenario, masters)


def test_the_methods_that_call_redis_are_coroutines() -> None:
    for name in ("acquire", "release", "extend", "locked", "owned", "__aenter__"):
        assert inspect.iscoroutinefunction(getattr(Redlock, name)), name
    assert not inspect.iscoroutinefunction(Redlock.close)
