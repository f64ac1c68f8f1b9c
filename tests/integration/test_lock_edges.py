"""Lock and Semaphore at the edges the lock suites of redis-py and python-redis-lock
probe: a held lock that is dropped, and how precisely ``acquire(timeout=t)`` ends."""

from __future__ import annotations

import gc
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any

import pytest
import redis
from helpers import TIMEOUTS, lateness, on_time, wait_for

from lockworker.primitives import Lock, Semaphore
from lockworker.testing import capture_events


def heartbeats() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name == "lockworker-heartbeat"}


def lease_left(client: redis.Redis, obj: Any, kind: str) -> Callable[[], int]:
    """Milliseconds the server gives ``obj``'s hold still (-2 once it is gone)."""
    if kind == "lock":
        key = obj.keys.lock
        return lambda: int(client.pttl(key))
    holders, member = obj._zsets[0], obj._held

    def left() -> int:
        expiry = client.zscore(holders, member)
        if expiry is None:
            return -2
        seconds, micros = client.time()
        return int(expiry - (seconds * 1000 + micros // 1000))

    return left


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_a_dropped_held_lock_stops_renewing_warns_and_lapses_within_its_ttl(
    redis_client: redis.Redis, namespace: str, kind: str
) -> None:
    ttl = 0.6
    before = heartbeats()
    obj: Any = (Lock(redis_client, "res", namespace=namespace, ttl=ttl, auto_renew=True)
                if kind == "lock" else
                Semaphore(redis_client, "res", 1, namespace=namespace, ttl=ttl))
    assert obj.acquire()
    (renewer,) = heartbeats() - before
    left = lease_left(redis_client, obj, kind)
    ref = weakref.ref(obj)
    with pytest.warns(ResourceWarning, match=rf"{kind} 'res' .* dropped while held"), \
            capture_events() as logged:
        del obj
        gc.collect()
    dropped = time.monotonic()
    assert ref() is None, "the renewal kept the dropped object alive"
    assert [e["event"] for e in logged] == [f"{kind}.dropped"]
    # Renewal stopped: the heartbeat ends, and from then on the lease only runs down.
    wait_for(lambda: not renewer.is_alive(), timeout=5)
    seen = [left()]
    while seen[-1] > 0:
        seen.append(left())
        assert seen[-1] <= seen[-2], f"renewed after it was dropped: {seen}"
        assert time.monotonic() - dropped < ttl + 2.0, f"never lapsed: {seen[-5:]}"
    assert time.monotonic() - dropped < ttl + 1.0


@pytest.mark.parametrize("kind", ["lock", "semaphore"])
def test_acquire_with_a_timeout_returns_within_a_few_ms_of_it(
    redis_client: redis.Redis, namespace: str, kind: str
) -> None:
    def make() -> Any:
        return (Lock(redis_client, "res", namespace=namespace, ttl=30.0) if kind == "lock"
                else Semaphore(redis_client, "res", 1, namespace=namespace, ttl=30.0))

    def measure() -> tuple[list[float], list[float]]:
        baseline = lateness(TIMEOUTS)
        overshoots = []
        for timeout in TIMEOUTS:
            waiter = make()
            started = time.monotonic()
            assert not waiter.acquire(timeout=timeout)
            overshoots.append(time.monotonic() - started - timeout)
        return overshoots, baseline

    holder = make()
    assert holder.acquire()
    on_time(measure)
    holder.release()


def test_waits_with_a_deadline_share_one_nudging_thread(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A wait that ends at its deadline is nudged on time, by the process's one nudging
    thread: a thread per wait cost every short ``acquire(timeout=...)`` a thread start,
    granted or not."""
    started: list[str] = []
    start = threading.Thread.start

    def counting(thread: threading.Thread) -> None:
        started.append(thread.name)
        start(thread)

    monkeypatch.setattr(threading.Thread, "start", counting)
    def measure() -> tuple[list[float], list[float]]:
        overshoots = []
        for _ in range(6):
            waiter = Lock(redis_client, "res", namespace=namespace, ttl=30.0)
            begun = time.monotonic()
            assert not waiter.acquire(timeout=0.1)
            overshoots.append(time.monotonic() - begun - 0.1)
        return overshoots, lateness([0.1] * 6)

    holder = Lock(redis_client, "res", namespace=namespace, ttl=30.0)
    assert holder.acquire()
    on_time(measure)
    holder.release()
    assert started.count("lockworker-nudge") <= 1, started
