"""Semaphore on a real server: limit, race-free creation, FIFO, dead holders, errors."""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker import AcquireTimeout, InvalidConfig, LockLost, NotHeld
from lockworker.primitives import Semaphore


def make(client: redis.Redis, namespace: str, limit: int = 2, **kwargs: Any) -> Semaphore:
    return Semaphore(client, "pool", limit, namespace=namespace, **kwargs)


def test_limit_is_enforced(redis_client: redis.Redis, namespace: str) -> None:
    a, b, c = (make(redis_client, namespace) for _ in range(3))
    assert a.acquire(blocking=False) and b.acquire(blocking=False)
    assert not c.acquire(blocking=False)
    assert a.holders() == 2
    a.release()
    assert c.acquire(blocking=False)
    b.release()
    c.release()
    assert a.holders() == 0


def test_release_without_acquire_creates_no_permit(
    redis_client: redis.Redis, namespace: str
) -> None:
    sem = make(redis_client, namespace, limit=1)
    with pytest.raises(NotHeld):
        sem.release()
    first, second = make(redis_client, namespace, limit=1), make(redis_client, namespace, limit=1)
    assert first.acquire(blocking=False)
    assert not second.acquire(blocking=False)  # still one permit, not two
    first.release()


def test_many_creators_at_once_get_exactly_limit(redis_server: Any, namespace: str) -> None:
    """Twenty clients create the same semaphore at the same moment; three permits exist."""
    clients = [redis_server.client(decode_responses=True) for _ in range(20)]
    sems = [Semaphore(c, "pool", 3, namespace=namespace, auto_renew=False) for c in clients]
    barrier = threading.Barrier(len(sems))
    results: list[bool] = []

    def go(sem: Semaphore) -> None:
        barrier.wait()
        results.append(sem.acquire(blocking=False))

    threads = [threading.Thread(target=go, args=(s,)) for s in sems]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results.count(True) == 3
    for sem in sems:
        if sem.held:
            sem.release()
    for c in clients:
        c.close()


def test_other_limit_is_refused(redis_client: redis.Redis, namespace: str) -> None:
    assert make(redis_client, namespace, limit=2).acquire(blocking=False)
    with pytest.raises(InvalidConfig, match="limit=5"):
        make(redis_client, namespace, limit=5).acquire(blocking=False)


def test_dead_holder_permit_comes_back_after_ttl(
    redis_client: redis.Redis, namespace: str
) -> None:
    dead = make(redis_client, namespace, limit=1, ttl=0.4)
    assert dead.acquire()
    dead._heartbeat.close()  # type: ignore[union-attr]  # the holder "dies": no more renewals
    started = time.monotonic()
    waiter = make(redis_client, namespace, limit=1, ttl=5.0)
    assert waiter.acquire(timeout=10.0)
    assert 0.15 <= time.monotonic() - started < 4.0
    with pytest.raises(LockLost):
        dead.release()  # its permit expired; releasing it creates nothing
    assert waiter.holders() == 1
    waiter.release()


def test_live_holder_keeps_permit_past_ttl(redis_client: redis.Redis, namespace: str) -> None:
    holder = make(redis_client, namespace, limit=1, ttl=0.8)
    assert holder.acquire()
    other = make(redis_client, namespace, limit=1, ttl=0.8)
    assert not other.acquire(timeout=2.0)  # 2.5 TTLs: it must have been renewed
    assert not holder.lost
    holder.release()


def test_waiters_are_served_first_come_first_served(
    redis_server: Any, namespace: str
) -> None:
    client = redis_server.client(decode_responses=True)
    holder = Semaphore(client, "fifo", 1, namespace=namespace)
    assert holder.acquire()
    order: list[int] = []
    record = threading.Lock()

    def wait(i: int) -> None:
        c = redis_server.client(decode_responses=True)
        sem = Semaphore(c, "fifo", 1, namespace=namespace)
        assert sem.acquire(timeout=30.0)
        with record:
            order.append(i)
        sem.release()
        sem.close()
        c.close()

    queue = holder.keys.extra("queue")
    threads = []
    for i in range(6):
        t = threading.Thread(target=wait, args=(i,))
        t.start()
        threads.append(t)
        wait_for(lambda n=i + 1: client.zcard(queue) == n, timeout=10)  # type: ignore[misc]
    holder.release()
    for t in threads:
        t.join(30)
    assert order == list(range(6))
    client.close()


def test_timed_out_waiter_leaves_the_queue(redis_client: redis.Redis, namespace: str) -> None:
    holder = make(redis_client, namespace, limit=1)
    assert holder.acquire()
    waiter = make(redis_client, namespace, limit=1)
    assert not waiter.acquire(timeout=0.2)
    assert redis_client.zcard(holder.keys.extra("queue")) == 0
    with pytest.raises(AcquireTimeout), make(redis_client, namespace, limit=1, timeout=0.1):
        pytest.fail("entered without a permit")
    holder.release()


def test_limit_one_is_a_mutex(redis_server: Any, namespace: str) -> None:
    sections: list[tuple[float, float]] = []
    record = threading.Lock()
    stop_at = time.monotonic() + 1.5

    def run() -> None:
        c = redis_server.client(decode_responses=True)
        sem = Semaphore(c, "mutex", 1, namespace=namespace, ttl=5.0)
        while time.monotonic() < stop_at:
            with sem:
                enter = time.monotonic()
                exit_ = time.monotonic()
            with record:
                sections.append((enter, exit_))
        sem.close()
        c.close()

    threads = [threading.Thread(target=run) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert len(sections) > 20
    for before, after in itertools.pairwise(sorted(sections)):
        assert before[1] <= after[0]


@pytest.mark.parametrize(
    ("args", "kwargs", "argument"),
    [
        ((0,), {}, "limit"),
        ((1.5,), {}, "limit"),
        ((2,), {"ttl": -1}, "ttl"),
        ((2,), {"auto_renew": "yes"}, "auto_renew"),
        ((2,), {"timeout": -0.1}, "timeout"),
    ],
)
def test_bad_arguments(
    redis_client: redis.Redis, args: tuple[Any, ...], kwargs: dict[str, Any], argument: str
) -> None:
    with pytest.raises(InvalidConfig, match=argument):
        Semaphore(redis_client, "x", *args, **kwargs)


def test_a_timeout_without_blocking_is_refused(
    redis_client: redis.Redis, namespace: str
) -> None:
    sem = Semaphore(redis_client, "x", 1, namespace=namespace, timeout=5.0)
    with pytest.raises(InvalidConfig, match=r"timeout must be None when blocking=False"):
        sem.acquire(blocking=False, timeout=1)
    assert not sem.held and sem.holders() == 0
    assert sem.acquire(blocking=False)
    sem.release()
