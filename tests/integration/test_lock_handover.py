"""Lock handover: wake-ups never missed, one shared wake hub, hand-off and FIFO order.

Every lock here has a 30 s TTL, so a waiter that missed its wake-up would wait out the
TTL; each test's deadline is far below it, which is how they tell a wake-up by the
release from one by the timer.
"""

from __future__ import annotations

import itertools
import threading
import time
from typing import Any

import pytest
import redis
from helpers import wait_for

from lockworker.codec import Holder
from lockworker.primitives import Lock
from lockworker.state import Grant, Snapshot

TTL = 30.0
PROMPT = 10.0
"""Generous bound for what should take milliseconds, far below the TTL."""


def make(client: redis.Redis, namespace: str, **kwargs: Any) -> Lock:
    return Lock(client, "res", namespace=namespace, ttl=TTL, **kwargs)


def wake_threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name == "lockworker-wake")


def test_a_new_lock_per_use_hands_over_promptly(
    redis_client: redis.Redis, namespace: str
) -> None:
    """4 threads, ``with Lock(...)`` anew each time: all done well before one TTL."""
    rounds, log, errors = 15, [], []
    guard = threading.Lock()

    def run(me: int) -> None:
        try:
            for _ in range(rounds):
                with make(redis_client, namespace, timeout=PROMPT), guard:
                    log.append(me)
        except Exception as exc:  # reported below, not lost in the thread
            errors.append(exc)

    threads_before = wake_threads()  # other tests' idle hubs may still be closing
    started = time.monotonic()
    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(2 * PROMPT)
    assert not errors
    assert len(log) == 4 * rounds
    assert time.monotonic() - started < 2 * PROMPT < TTL
    handovers = sum(1 for a, b in itertools.pairwise(log) if a != b)
    assert handovers >= rounds  # the lock changed hands, not one thread after another
    assert wake_threads() <= threads_before + 1  # one shared hub, not one per Lock


class _Racing(Lock):
    """A Lock that lets another party release right after one of its failed tries."""

    after_try: int = 0
    on_fail: Any = None

    def _try(self, who: Holder, deadline: float | None, *, queue: bool) -> Any:
        seen = super()._try(who, deadline, queue=queue)
        self.after_try -= 1
        if seen is not None and self.after_try == 0:
            self.on_fail()
        return seen


@pytest.mark.parametrize("after_try", [1, 2], ids=["before-subscribing", "before-waiting"])
def test_a_release_between_a_failed_try_and_the_wait_still_wakes(
    redis_client: redis.Redis, namespace: str, after_try: int
) -> None:
    """Released just after the waiter's first failed try (before it subscribed) or its
    second (subscribed, not yet waiting): either way it gets the lock at once."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    waiter = _Racing(redis_client, "res", namespace=namespace, ttl=TTL)
    waiter.after_try, waiter.on_fail = after_try, holder.release
    started = time.monotonic()
    assert waiter.acquire(timeout=PROMPT)
    assert time.monotonic() - started < PROMPT < TTL
    assert not holder.held and waiter.owned()
    waiter.release()


def test_release_hands_off_to_the_waiter(redis_client: redis.Redis, namespace: str) -> None:
    """The releaser cannot take the lock straight back while another waits for it."""
    holder = make(redis_client, namespace)
    waiter = make(redis_client, namespace)
    assert holder.acquire()
    got = threading.Event()

    def wait() -> None:
        assert waiter.acquire(timeout=PROMPT)
        got.set()

    thread = threading.Thread(target=wait)
    thread.start()
    wait_for(lambda: redis_client.pubsub_numsub(holder.keys.wake)[0][1] >= 1)
    holder.release()
    assert not holder.acquire(blocking=False)  # handed off: the waiter goes first
    assert got.wait(PROMPT)
    thread.join()
    waiter.release()
    assert holder.acquire(blocking=False)  # nobody waits: no hand-off, one round trip
    holder.release()
    assert holder.acquire(blocking=False)
    holder.release()


def test_fair_lock_serves_waiters_in_order_of_arrival(
    redis_client: redis.Redis, namespace: str
) -> None:
    """Queue 4 waiters one after another, then release: they get it in that order, and
    the releaser, coming back at once, only after all of them."""
    holder = make(redis_client, namespace, fair=True)
    queue = holder.keys.extra("queue")
    assert holder.acquire()
    order: list[int] = []
    threads = []

    def wait(me: int, lock: Lock) -> None:
        assert lock.acquire(timeout=PROMPT)
        order.append(me)
        lock.release()

    for me in range(4):
        lock = make(redis_client, namespace, fair=True)
        thread = threading.Thread(target=wait, args=(me, lock))
        thread.start()
        threads.append(thread)
        wait_for(lambda n=me + 1: redis_client.zcard(queue) == n)  # queued: next one
    holder.release()
    wait_for(lambda: redis_client.zcard(queue) < 4)  # the first took it
    assert holder.acquire(timeout=PROMPT)  # behind the 3 still queued
    order.append(-1)
    holder.release()
    for thread in threads:
        thread.join(PROMPT)
    assert order == [0, 1, 2, 3, -1]


def test_fair_lock_shares_evenly(redis_client: redis.Redis, namespace: str) -> None:
    """4 threads that each come straight back: FIFO gives each the same share."""
    stop, order = threading.Event(), []
    start = threading.Barrier(4)

    def run(me: int) -> None:
        lock = make(redis_client, namespace, fair=True)
        start.wait(PROMPT)
        while not stop.is_set():
            assert lock.acquire(timeout=PROMPT)
            order.append(me)
            if len(order) >= 240:
                stop.set()
            lock.release()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(3 * PROMPT)
    # Count from the moment every thread has had a turn (all are in the queue), so
    # that how fast the threads started does not count; FIFO then serves each once
    # per round of 4, and a thread slow to queue again loses at most a round or two.
    steady = next(i for i in range(len(order)) if len(set(order[: i + 1])) == 4) + 1
    counts = [order[steady:].count(me) for me in range(4)]
    mean = sum(counts) / 4
    assert sum(counts) >= 150
    assert all(abs(c - mean) <= 3 for c in counts), counts


def test_fair_waiter_that_times_out_leaves_the_queue(
    redis_client: redis.Redis, namespace: str
) -> None:
    holder = make(redis_client, namespace, fair=True)
    assert holder.acquire()
    waiter = make(redis_client, namespace, fair=True)
    assert not waiter.acquire(timeout=0.2)
    assert redis_client.zcard(holder.keys.extra("queue")) == 0
    holder.release()
    assert waiter.acquire(blocking=False)  # nobody queued ahead: taken at once
    waiter.release()


def test_steps_report_what_to_wait_for(redis_client: redis.Redis, namespace: str) -> None:
    """The hand-off answer carries the mark's time left, the queue answer a bound."""
    holder = make(redis_client, namespace)
    assert holder.acquire()
    who = Holder("x", "run1")
    seen = holder._steps.acquire(who, 1000, 10**15, 10**6, queue=False)
    assert isinstance(seen, Snapshot) and seen.pttl_ms is not None
    holder.release()
    assert isinstance(holder._steps.acquire(who, 1000, 10**15, 10**6, queue=False), Grant)


def test_the_wake_reader_survives_an_unexpected_error_and_still_wakes_waiters(
    redis_client: redis.Redis, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A redis-py failure that is not a connection error (a reply consumed out of turn
    once raised KeyError there) replaces the pub/sub connection; waiters still wake."""
    holder, waiter = make(redis_client, namespace), make(redis_client, namespace)
    assert holder.acquire()
    original = redis.client.PubSub.get_message
    failures = itertools.count()

    def flaky(self: Any, *args: Any, **kwargs: Any) -> Any:
        if next(failures) == 3:
            raise KeyError(0)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(redis.client.PubSub, "get_message", flaky)
    acquired = threading.Event()
    thread = threading.Thread(target=lambda: waiter.acquire() and acquired.set(), daemon=True)
    thread.start()
    wait_for(lambda: _calls(failures) > 6, timeout=PROMPT)
    started = time.monotonic()
    holder.release()
    assert acquired.wait(PROMPT), "the waiter was not woken"
    assert time.monotonic() - started < PROMPT
    waiter.release()


def _calls(counter: itertools.count[int]) -> int:
    """How many times the patched get_message ran (peeks by copying the counter)."""
    return int(repr(counter)[len("count(") : -1])
